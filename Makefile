# execd — one entry point for building, running, testing and benchmarking.
# Works on a fresh Debian 12 with only make, cmake and g++: missing Debian
# packages are installed (as root) and Python test tools go into .venv.

SHELL := /bin/bash
JOBS ?= 2
BUILD ?= build
ASAN_BUILD ?= build-asan
STATIC_BUILD ?= build-static
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
VENV ?= .venv
PORT ?= 44772
DEB_PACKAGES := cmake g++ make pkg-config libuv1-dev zlib1g-dev node-llhttp nlohmann-json3-dev libsimdjson-dev \
                libspdlog-dev libfmt-dev doctest-dev libssl-dev libarchive-dev \
                nettle-dev libacl1-dev liblzma-dev libzstd-dev liblz4-dev libbz2-dev libxml2-dev libicu-dev \
                python3-venv curl procps clang lld strace

.PHONY: all deps venv cli-venv e2b-js opensandbox-js build build-asan build-fuzz run test unit integration fuzz fuzz-smoke test-image bench static symbol-order docs clean \
        vm-deps vm-guest test-vm k8s-deps k8s-build test-k8s

all: build

# Installs those of the Debian packages $(1) that are missing ($(2): more
# apt-get flags); deps, vm-deps and k8s-deps.
define install_debs
	@missing=""; for p in $(1); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq $(2) $$missing >/dev/null; \
	fi
endef

deps:
	$(call install_debs,$(DEB_PACKAGES),)

$(VENV)/.ready: tests/requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r tests/requirements.txt
	touch $@

venv: deps $(VENV)/.ready

# opensandbox-cli (`osb`, for tests/image/test_server.py) wants rich<14 and
# e2b rich>=14: the CLI gets a venv of its own.
CLI_VENV := .venv-cli
$(CLI_VENV)/.ready:
	python3 -m venv $(CLI_VENV)
	$(CLI_VENV)/bin/pip install -q --disable-pip-version-check opensandbox-cli==1.1.1
	touch $@

cli-venv: $(CLI_VENV)/.ready

# The JS SDKs from npm, at the versions each package-lock.json pins: E2B's
# for tests/integration/test_e2b_js.py (it wants Node >= 20.18; Debian 12's
# own nodejs, installed when there is no npm at all, is 18, and the test says
# so) and OpenSandbox's (0.1.11) for test_opensandbox_js.py.
tests/%/node_modules/.ready: tests/%/package.json tests/%/package-lock.json
	@command -v npm >/dev/null || { echo "installing nodejs and npm (Debian)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; }
	npm ci --prefix tests/$* --no-audit --no-fund --loglevel=error
	touch $@

e2b-js: tests/e2b_js/node_modules/.ready
opensandbox-js: tests/opensandbox_js/node_modules/.ready

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

build-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DEXECD_SANITIZE=ON >/dev/null
	cmake --build $(ASAN_BUILD) -j$(JOBS)

# libFuzzer targets (clang, ASan+UBSan), tests/fuzz: FUZZ_SECONDS per target.
build-fuzz: deps
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEXECD_FUZZ=ON \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
	cmake --build $(FUZZ_BUILD) -j$(JOBS)

fuzz: build-fuzz
	tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

# A few seconds each, so every target stays built and working.
fuzz-smoke: build-fuzz
	tests/fuzz/run.sh $(FUZZ_BUILD) 3

run: build
	@token=$$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'); \
	echo "execd on http://127.0.0.1:$(PORT)  token: $$token"; \
	echo "try: curl -N -H 'X-EXECD-ACCESS-TOKEN: $$token' -d '{\"command\":\"echo hello\"}' http://127.0.0.1:$(PORT)/command"; \
	exec ./$(BUILD)/execd --host 127.0.0.1 --port $(PORT) --access-token "$$token"

unit: build build-asan
	./$(BUILD)/unit_tests
	ASAN_OPTIONS=detect_leaks=1 ./$(ASAN_BUILD)/unit_tests

# The whole suite against the release and ASan+UBSan binaries, and the files
# tests/integration/static-files.txt names against the static one images
# ship (its name lookups, malloc set-up and self re-execution differ). The
# runs go at the same time, the ASan one (the longest) with two workers: see
# tests/run-integration.sh.
integration: build build-asan static venv e2b-js opensandbox-js
	tests/run-integration.sh $(VENV)/bin/pytest asan=$(CURDIR)/$(ASAN_BUILD)/execd,sanitized,workers=2 \
	  release=$(CURDIR)/$(BUILD)/execd \
	  static=$(CURDIR)/$(BUILD)/execd-static,files=tests/integration/static-files.txt

# test-vm (5 min) is opt-in since the suite grew past the 30 minute budget
# with it (see docs/deployment.md).
test: unit integration fuzz-smoke cli-venv
	JOBS=$(JOBS) $(VENV)/bin/pytest -q -rs tests/image

test-image: build venv cli-venv
	JOBS=$(JOBS) EXECD_IMAGE_TEST=1 $(VENV)/bin/pytest -q -rs tests/image

bench: build static venv
	$(VENV)/bin/python tests/bench/bench.py --execd $(BUILD)/execd --floor $(BUILD)/spawn_floor --http-floor $(BUILD)/http_floor --client $(BUILD)/stream_client --static $(BUILD)/execd-static
	$(VENV)/bin/python tests/bench/bench_files.py --execd $(BUILD)/execd
	EXECD_BIN=$(CURDIR)/$(BUILD)/execd $(VENV)/bin/python tests/bench/bench_pty.py
	$(VENV)/bin/python tests/bench/bench_resume.py --execd $(BUILD)/execd --client $(BUILD)/stream_client
	$(VENV)/bin/python tests/bench/bench_proxy.py --execd $(BUILD)/execd
	$(VENV)/bin/python tests/bench/bench_code.py --execd $(BUILD)/execd --static $(BUILD)/execd-static
	$(VENV)/bin/python tests/bench/bench_fair.py --execd $(BUILD)/execd
	$(VENV)/bin/python tests/bench/bench_runtime_init.py --execd $(BUILD)/execd
	$(VENV)/bin/python tests/bench/bench_e2b.py --execd $(BUILD)/execd
	$(VENV)/bin/python tests/bench/bench_watch_archive.py --execd $(BUILD)/execd

# make test-vm: execd as PID 1 of a QEMU micro-VM (tests/vm). QEMU without
# recommends (else ~100 GUI packages come too); vhost-device-vsock, the host
# side of the guest's vsock, from crates.io into ~/.cache/execd/cargo.
VM_DEB_PACKAGES := qemu-system-x86 qemu-utils cpio
VM_GUEST ?= $(BUILD)/vm
VHOST_VSOCK ?= $(HOME)/.cache/execd/cargo/bin/vhost-device-vsock

vm-deps:
	$(call install_debs,$(VM_DEB_PACKAGES),--no-install-recommends)
	@if [ ! -x "$(VHOST_VSOCK)" ]; then \
	  command -v cargo >/dev/null || { echo "test-vm needs cargo for vhost-device-vsock"; exit 1; }; \
	  echo "cargo install vhost-device-vsock (a few minutes, once)"; \
	  CARGO_BUILD_JOBS=$(JOBS) cargo install -q --locked --root $(HOME)/.cache/execd/cargo vhost-device-vsock; \
	fi

vm-guest: static vm-deps
	tests/vm/build-guest.sh $(BUILD)/execd-static $(VM_GUEST)

test-vm: vm-guest venv
	EXECD_VHOST_VSOCK=$(VHOST_VSOCK) $(VENV)/bin/python tests/vm/run.py --guest $(VM_GUEST)

# make test-k8s (opt-in, not part of make test): a single-node Kubernetes
# built from the Go module proxy (tests/k8s/build.sh: ~20 min cold on two
# cores, seconds to minutes with Go's build cache; ~4 GB of build cache),
# Debian's containerd, runc and CNI plugins, all in a network namespace.
K8S_DEB_PACKAGES := containerd runc containernetworking-plugins debootstrap iproute2 openssl

k8s-deps:
	@command -v go >/dev/null || { echo "test-k8s needs Go (1.24 or newer) to build Kubernetes"; exit 1; }
	$(call install_debs,$(K8S_DEB_PACKAGES),--no-install-recommends)

k8s-build: k8s-deps
	JOBS=$(JOBS) tests/k8s/build.sh

test-k8s: static venv k8s-build
	$(VENV)/bin/python tests/k8s/run.py

static: deps
	./image/fetch-simdjson.sh $(STATIC_BUILD)/simdjson
	cmake -S . -B $(STATIC_BUILD) -DCMAKE_BUILD_TYPE=Release -DEXECD_STATIC=ON \
	  -DEXECD_SIMDJSON_SOURCE_DIR=$(CURDIR)/$(STATIC_BUILD)/simdjson >/dev/null
	cmake --build $(STATIC_BUILD) -j$(JOBS) --target execd
	cp $(STATIC_BUILD)/execd-static $(BUILD)/execd-static 2>/dev/null || { mkdir -p $(BUILD); cp $(STATIC_BUILD)/execd-static $(BUILD)/; }

# Rewrites image/execd-static.order, the static link's function order, from
# a static execd with symbols run under valgrind (image/symbol-order.py).
# Worth redoing when the bench's static idle RSS creeps up.
symbol-order: deps
	$(call install_debs,valgrind,--no-install-recommends)
	./image/fetch-simdjson.sh $(STATIC_BUILD)-syms/simdjson
	cmake -S . -B $(STATIC_BUILD)-syms -DCMAKE_BUILD_TYPE=Release -DEXECD_STATIC=ON -DEXECD_STRIP=OFF \
	  -DEXECD_SIMDJSON_SOURCE_DIR=$(CURDIR)/$(STATIC_BUILD)-syms/simdjson >/dev/null
	cmake --build $(STATIC_BUILD)-syms -j$(JOBS) --target execd
	python3 image/symbol-order.py $(STATIC_BUILD)-syms/execd-static image/execd-static.order

# docs/command-line.md's flag reference, rewritten from what the binary
# prints (execd --help-markdown, from the flag table in execd/config_flags.cc).
docs: build
	python3 docs/update-command-line.py $(BUILD)/execd

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(STATIC_BUILD) $(STATIC_BUILD)-syms $(FUZZ_BUILD)
