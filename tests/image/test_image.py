"""End-to-end test of the execd sandbox image (slow: minutes).

What it does, with no image registry available:

1. makes docker usable: installs docker.io and debootstrap when missing (apt),
   starts a private dockerd (--bridge=none, no iptables, its own data/exec
   roots and socket) and stops it by PID at the end;
2. builds a Debian bookworm base with `debootstrap --variant=minbase`
   (rootfs tarball cached in $EXECD_TEST_CACHE, default /var/cache/execd-test)
   and imports it as debian:bookworm and debian:bookworm-slim, the tags
   image/Dockerfile uses;
3. `docker build --network host -f image/Dockerfile` (classic builder);
4. runs the image with --network host on a free loopback port and drives it
   with the official OpenSandbox Python SDK (adapters built directly, no
   lifecycle server); checks PID 1, zombie reaping, the health check, and that
   `docker stop` ends it within the grace period with exit status 0 and
   without losing output;
5. runs the static binary from the image alone in a FROM scratch image, and
   inside the plain debootstrap image through image/bootstrap.sh.

Containers only ever use `--network host` or `--network none`; all traffic
goes to 127.0.0.1.

When docker cannot be made to work (not root, no apt, dockerd fails) the
tests skip and say why; with EXECD_IMAGE_TEST=1 (`make test-image`) they fail
instead.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MANDATORY = os.environ.get("EXECD_IMAGE_TEST", "") not in ("", "0", "no", "false")
CACHE = Path(os.environ.get("EXECD_TEST_CACHE", "/var/cache/execd-test"))
MIRROR = os.environ.get("EXECD_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY_MIRROR = os.environ.get(
    "EXECD_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
IMAGE = "execd-test:latest"
BASE_TAGS = ("debian:bookworm", "debian:bookworm-slim")
TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"
STOP_TIMEOUT = 20          # seconds docker stop waits before SIGKILL
EXECD_GRACE_MS = 5000      # execd --graceful-shutdown-timeout in the stop test

os.environ["PATH"] = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"

TIMINGS: dict[str, float] = {}


def unavailable(reason: str):
    if MANDATORY:
        pytest.fail(f"image test cannot run: {reason}", pytrace=False)
    pytest.skip(f"image test skipped: {reason} (set EXECD_IMAGE_TEST=1 to make this an error)")


def sh(cmd, *, timeout=600, check=True, env=None, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **kw)
    if check and r.returncode != 0:
        raise AssertionError(
            f"command failed ({r.returncode}): {' '.join(map(str, cmd))}\n"
            f"stdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-4000:]}")
    return r


# ---------------------------------------------------------------------------
# docker engine
# ---------------------------------------------------------------------------

def ensure_tools() -> None:
    if os.geteuid() != 0:
        unavailable("needs root (dockerd, debootstrap)")
    need = ("dockerd", "containerd", "runc", "debootstrap")
    missing = [t for t in need if not shutil.which(t)]
    if not missing and docker_client():
        return
    if not shutil.which("apt-get"):
        unavailable(f"{', '.join(missing) or 'docker'} missing and no apt-get to install them")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "docker.io", "debootstrap"]
    r = sh(cmd, check=False, env=env, timeout=900)
    if r.returncode != 0:
        sh(["apt-get", "update"], check=False, env=env, timeout=600)
        r = sh(cmd, check=False, env=env, timeout=900)
    missing = [t for t in need if not shutil.which(t)]
    if r.returncode != 0 or missing or not docker_client():
        unavailable(f"could not install docker.io/debootstrap: {r.stderr.strip()[-500:]}")


def docker_client() -> str | None:
    # Prefer the client packaged with the engine (same API version).
    if os.path.exists("/usr/bin/docker"):
        return "/usr/bin/docker"
    return shutil.which("docker")


class Dockerd:
    """A private docker engine, started and stopped by this test."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.exec_root = Path(tempfile.mkdtemp(prefix="execd-dk-", dir="/tmp"))
        self.sock = self.exec_root / "docker.sock"
        self.log_path = self.exec_root / "dockerd.log"
        self.env = dict(os.environ, DOCKER_HOST=f"unix://{self.sock}", DOCKER_BUILDKIT="0")
        self.env.pop("DOCKER_CONTEXT", None)
        self.client = docker_client()

    def start(self, data_root: Path) -> bool:
        data_root.mkdir(parents=True, exist_ok=True)
        cmd = ["dockerd", "--bridge=none", "--iptables=false", "--ip-forward=false",
               "--ip-masq=false", "--data-root", str(data_root),
               "--exec-root", str(self.exec_root / "exec"), "-H", f"unix://{self.sock}",
               "--pidfile", str(self.exec_root / "dockerd.pid")]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if self.sock.exists():
                r = self.run("version", "--format", "{{.Server.Version}}", check=False, timeout=10)
                if r.returncode == 0:
                    return True
            time.sleep(0.3)
        self.stop()
        return False

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def run(self, *args, check=True, timeout=600, **kw) -> subprocess.CompletedProcess:
        return sh([self.client, *map(str, args)], check=check, timeout=timeout, env=self.env, **kw)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            ids = self.run("ps", "-aq", "--filter", "label=execd-test", check=False).stdout.split()
            if ids:
                self.run("rm", "-f", *ids, check=False, timeout=60)
            self.proc.send_signal(signal.SIGTERM)        # by PID, never by name
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None
        # dockerd 20.10 leaves its netns bind mount behind; unmount whatever
        # is still mounted below our exec root so it can be removed.
        try:
            with open("/proc/self/mounts") as f:
                mounts = [line.split()[1] for line in f]
        except OSError:
            mounts = []
        for m in sorted((m for m in mounts if m.startswith(str(self.exec_root) + "/")),
                        reverse=True):
            sh(["umount", "-l", m], check=False, timeout=30)


@pytest.fixture(scope="module")
def report(request):
    yield TIMINGS
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    if tr and TIMINGS:
        tr.write_line("")
        tr.write_line("execd image test timings: " + ", ".join(
            f"{k} {v:.1f}s" for k, v in TIMINGS.items()))


@pytest.fixture(scope="module")
def dockerd(report):
    ensure_tools()
    d = Dockerd()
    persistent = CACHE / "docker-data"
    if not d.start(persistent):
        tail = d.log_tail()
        d.stop()
        # A stale persistent data root (e.g. after a crash) is the usual cause:
        # try once with a fresh one.
        fresh = Path(tempfile.mkdtemp(prefix="execd-dk-data-", dir=str(CACHE)))
        if not d.start(fresh):
            d.stop()
            unavailable(f"dockerd did not start:\n{tail}\n{d.log_tail()}")
    try:
        yield d
    finally:
        d.run("image", "prune", "-f", check=False, timeout=120)
        d.stop()
        shutil.rmtree(d.exec_root, ignore_errors=True)


# ---------------------------------------------------------------------------
# base image and the execd image
# ---------------------------------------------------------------------------

DEBIAN_SOURCES = f"""Types: deb
URIs: {MIRROR}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: {SECURITY_MIRROR}
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def base_rootfs_tar() -> Path:
    tar = CACHE / "bookworm-minbase.tar"
    if tar.exists() and tar.stat().st_size > 0:
        return tar
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="debootstrap-", dir=str(CACHE)))
    try:
        rootfs = tmp / "rootfs"
        t0 = time.monotonic()
        r = sh(["debootstrap", "--variant=minbase", "bookworm", str(rootfs), MIRROR],
               check=False, timeout=1800)
        if r.returncode != 0:
            unavailable(f"debootstrap failed: {r.stdout[-1500:]}{r.stderr[-1500:]}")
        TIMINGS["debootstrap"] = time.monotonic() - t0
        # Look like the official image: deb822 sources incl. updates and
        # security, no package lists or downloaded .debs.
        (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
        (rootfs / "etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
        (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(DEBIAN_SOURCES)
        for d in ("var/lib/apt/lists", "var/cache/apt/archives"):
            for p in (rootfs / d).glob("*"):
                if p.is_file():
                    p.unlink()
        sh(["tar", "-C", str(rootfs), "-cf", str(tmp / "rootfs.tar"), "."], timeout=600)
        os.replace(tmp / "rootfs.tar", tar)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tar


@pytest.fixture(scope="module")
def base_image(dockerd):
    tar = base_rootfs_tar()
    stamp = f"{tar.stat().st_size}-{int(tar.stat().st_mtime)}"
    r = dockerd.run("image", "inspect", "--format",
                    '{{ index .Config.Labels "execd-test.rootfs" }}', BASE_TAGS[0], check=False)
    if r.returncode != 0 or r.stdout.strip() != stamp:
        t0 = time.monotonic()
        dockerd.run("import", "--change", 'CMD ["bash"]',
                    "--change", f"LABEL execd-test.rootfs={stamp}", str(tar), BASE_TAGS[0],
                    timeout=600)
        TIMINGS["docker import"] = time.monotonic() - t0
    for tag in BASE_TAGS[1:]:
        dockerd.run("tag", BASE_TAGS[0], tag)
    return BASE_TAGS[0]


def docker_build(dockerd, context: Path, tag: str, dockerfile: Path | None = None,
                 timeout: int = 3600) -> None:
    args = ["build", "--network", "host", "-t", tag, "--label", "execd-test=1"]
    if dockerfile:
        args += ["-f", str(dockerfile)]
    log = Path(tempfile.mkstemp(prefix="docker-build-", suffix=".log")[1])
    with open(log, "w") as out:
        r = subprocess.run([dockerd.client, *args, str(context)], env=dockerd.env,
                           stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    if r.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-80:])
        pytest.fail(f"docker build of {tag} failed (full log {log}):\n{tail}", pytrace=False)
    log.unlink()


_FAILED: dict[str, str] = {}


@pytest.fixture(scope="module")
def execd_image(dockerd, base_image):
    # pytest re-runs a failing module fixture for every test: build only once.
    if "execd_image" in _FAILED:
        pytest.fail(_FAILED["execd_image"], pytrace=False)
    context = Path(os.environ.get("EXECD_IMAGE_CONTEXT", ROOT))
    t0 = time.monotonic()
    try:
        docker_build(dockerd, context, IMAGE, context / "image" / "Dockerfile")
    except pytest.fail.Exception as e:
        _FAILED["execd_image"] = str(e)
        raise
    TIMINGS["docker build"] = time.monotonic() - t0
    return IMAGE


@pytest.fixture(scope="module")
def static_binary(dockerd, execd_image, tmp_path_factory) -> Path:
    """The execd binary from the image (built by `make static`)."""
    out = tmp_path_factory.mktemp("static") / "execd"
    cid = dockerd.run("create", "--label", "execd-test=1", execd_image).stdout.strip()
    try:
        dockerd.run("cp", f"{cid}:/usr/local/bin/execd", str(out))
    finally:
        dockerd.run("rm", "-f", cid, check=False)
    return out


# ---------------------------------------------------------------------------
# containers and the SDK
# ---------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(port: int, token: str | None, timeout: float = 2.0) -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/ping")
    if token:
        req.add_header(TOKEN_HEADER, token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


class Container:
    def __init__(self, dockerd: Dockerd, image: str, args=(), env=None, extra=()):
        self.d = dockerd
        self.name = f"execd-test-{uuid.uuid4().hex[:10]}"
        cmd = ["run", "-d", "--name", self.name, "--label", "execd-test=1",
               "--network", "host", *extra]
        for k, v in (env or {}).items():
            cmd += ["-e", f"{k}={v}"]
        dockerd.run(*cmd, image, *args)

    def state(self) -> dict:
        r = self.d.run("inspect", "--format", "{{json .State}}", self.name)
        return json.loads(r.stdout)

    def logs(self) -> str:
        r = self.d.run("logs", self.name, check=False)
        return (r.stdout + r.stderr)[-6000:]

    def exec(self, *args, check=True) -> subprocess.CompletedProcess:
        return self.d.run("exec", self.name, *args, check=check, timeout=60)

    def wait_ready(self, port: int, token: str | None, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if ping(port, token) == 200:
                    return
            except OSError:
                pass
            if not self.state().get("Running"):
                pytest.fail(f"container exited early: {self.state()}\n{self.logs()}", pytrace=False)
            time.sleep(0.2)
        pytest.fail(f"execd did not answer /ping on port {port}\n{self.logs()}", pytrace=False)

    def remove(self) -> None:
        self.d.run("rm", "-f", self.name, check=False, timeout=60)


def sdk(port: int, token: str):
    try:
        from opensandbox.config.connection_sync import ConnectionConfigSync
        from opensandbox.models.sandboxes import SandboxEndpoint
        from opensandbox.sync.adapters.factory import AdapterFactorySync
    except ImportError as e:
        unavailable(f"OpenSandbox Python SDK not installed ({e})")
    cfg = ConnectionConfigSync(protocol="http", request_timeout=timedelta(seconds=60))
    cfg = cfg.with_transport_if_missing()
    ep = SandboxEndpoint(endpoint=f"127.0.0.1:{port}", headers={TOKEN_HEADER: token})
    f = AdapterFactorySync(cfg)
    return f.create_command_service(ep), f.create_health_service(ep)


def out_text(messages) -> str:
    return "".join(m.text if m.text.endswith("\n") else m.text + "\n" for m in messages)


def handlers(on_stdout):
    from opensandbox.models.execd_sync import ExecutionHandlersSync
    return ExecutionHandlersSync(on_stdout=on_stdout)


@pytest.fixture(scope="module")
def sandbox(dockerd, execd_image):
    port, token = free_port(), secrets.token_hex(16)
    c = Container(dockerd, execd_image,
                  args=["--host", "127.0.0.1", "--port", str(port)],
                  env={"EXECD_ACCESS_TOKEN": token})
    try:
        c.wait_ready(port, token)
        yield c, port, token
    finally:
        c.remove()


# ---------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------

def test_image_contents(dockerd, execd_image):
    cfg = json.loads(dockerd.run("image", "inspect", "--format", "{{json .Config}}",
                                 execd_image).stdout)
    assert cfg["Entrypoint"][0] == "/usr/local/bin/execd"
    assert "--init" in cfg["Entrypoint"]
    assert cfg.get("Healthcheck", {}).get("Test"), "no HEALTHCHECK"
    assert not any(e.startswith("EXECD_ACCESS_TOKEN=") for e in cfg.get("Env") or []), \
        "a token is baked into the image"
    r = dockerd.run("run", "--rm", "--network", "none", "--entrypoint", "bash", execd_image,
                    "-c", "command -v bash python3 ps ls sleep && python3 --version "
                          "&& test -x /usr/local/bin/execd")
    assert "python3" in r.stdout


def test_static_binary_is_static_and_stripped(static_binary):
    info = elf_info(static_binary)
    assert not info["interp"], "has a program interpreter: not static"
    assert not info["dynamic"], "has a dynamic section: not fully static"
    assert not info["symtab"], "not stripped (.symtab present)"
    r = sh(["ldd", str(static_binary)], check=False)
    assert "not a dynamic executable" in (r.stdout + r.stderr) or \
        "statically linked" in (r.stdout + r.stderr), r.stdout + r.stderr


def test_runs_commands_through_sdk(sandbox):
    c, port, token = sandbox
    assert ping(port, None) in (200, 401)
    cmds, health = sdk(port, token)
    assert health.ping("execd-test") is True
    ex = cmds.run("echo hello; python3 -c 'print(6*7)'; echo oops >&2; cat /proc/1/comm")
    assert ex.exit_code == 0, ex
    lines = out_text(ex.logs.stdout).splitlines()
    assert lines[:2] == ["hello", "42"], lines
    assert lines[2] == "execd", f"PID 1 is {lines[2]!r}, not execd"
    assert out_text(ex.logs.stderr).strip() == "oops"
    ex = cmds.run("exit 7")
    assert ex.exit_code == 7
    # Without the token the daemon refuses commands.
    req = urllib.request.Request(f"http://127.0.0.1:{port}/command", method="POST",
                                 data=b'{"command":"true"}',
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 401


def ps_rows(c: Container) -> list[tuple[int, int, str, str]]:
    rows = []
    for line in c.exec("ps", "-eo", "pid=,ppid=,stat=,comm=").stdout.splitlines():
        parts = line.split(None, 3)
        if len(parts) == 4:
            rows.append((int(parts[0]), int(parts[1]), parts[2], parts[3]))
    return rows


def test_orphans_are_reaped(sandbox):
    c, port, token = sandbox
    from opensandbox.models.execd import RunCommandOpts
    cmds, _ = sdk(port, token)
    # Orphans that live a while (so we can see they were re-parented to
    # PID 1), and many that exit at once.
    ex = cmds.run("for i in $(seq 1 60); do (sleep 2 &); done; "
                  "for i in $(seq 1 200); do (/bin/true &); done; echo spawned")
    assert ex.exit_code == 0 and "spawned" in out_text(ex.logs.stdout)
    cmds.run("for i in $(seq 1 40); do (sleep 1 &); done",
             opts=RunCommandOpts(background=True))
    python_orphans = (
        "python3 -c 'import os\n"
        "for _ in range(100):\n"
        "    if os.fork() == 0:\n"
        "        if os.fork() == 0: os._exit(0)\n"
        "        os._exit(0)\n"
        "    os.wait()'")
    assert cmds.run(python_orphans).exit_code == 0
    adopted = [r for r in ps_rows(c) if r[3] == "sleep" and r[1] == 1]
    assert len(adopted) >= 60, f"orphans were not re-parented to PID 1: {ps_rows(c)}"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        rows = ps_rows(c)
        zombies = [r for r in rows if r[2].startswith("Z")]
        sleepers = [r for r in rows if r[3] == "sleep"]
        if not zombies and not sleepers:
            break
        time.sleep(0.5)
    assert not zombies, f"zombies left: {zombies}"
    assert not sleepers, f"orphans still running: {sleepers}"


def test_healthcheck(dockerd, sandbox):
    c, port, token = sandbox
    r = c.exec("/usr/local/bin/execd-healthcheck", check=False)
    assert r.returncode == 0, r.stderr
    # Docker's own view (first probe after --interval=10s).
    deadline = time.monotonic() + 40
    status = None
    while time.monotonic() < deadline:
        status = c.state().get("Health", {}).get("Status")
        if status == "healthy":
            break
        assert status != "unhealthy", c.state()["Health"]
        time.sleep(1)
    assert status == "healthy", c.state().get("Health")


def test_docker_stop_is_graceful(dockerd, execd_image):
    port, token = free_port(), secrets.token_hex(16)
    c = Container(dockerd, execd_image,
                  args=["--host", "127.0.0.1", "--port", str(port),
                        "--graceful-shutdown-timeout", str(EXECD_GRACE_MS)],
                  env={"EXECD_ACCESS_TOKEN": token})
    try:
        c.wait_ready(port, token)
        cmds, _ = sdk(port, token)
        results: dict[str, object] = {}

        def run(key, command, h):
            try:
                results[key] = cmds.run(command, handlers=h)
            except Exception as e:  # noqa: BLE001 - reported below
                results[key] = e

        # B is running when the container is stopped: it must get SIGTERM
        # (forwarded by execd) and its last words must reach us.
        b_started = threading.Event()
        tb = threading.Thread(target=run, args=(
            "B", "trap 'echo B-term; exit 0' TERM; echo B-start; "
                 "while :; do sleep 0.2; done",
            handlers(lambda m: "B-start" in m.text and b_started.set())), daemon=True)
        tb.start()
        assert b_started.wait(20), "command B did not start"

        # A has finished (seq is quick) but its stream is still being
        # delivered when the stop begins: no line may be lost.
        stop: dict[str, float] = {}
        stop_started = threading.Event()

        def do_stop():
            t0 = time.monotonic()
            r = dockerd.run("stop", "-t", str(STOP_TIMEOUT), c.name, check=False, timeout=120)
            stop["elapsed"] = time.monotonic() - t0
            stop["rc"] = r.returncode

        stopper = threading.Thread(target=do_stop, daemon=True)

        def on_a(_msg):
            if not stop_started.is_set():
                stop_started.set()
                stopper.start()

        ta = threading.Thread(target=run, args=("A", "seq 1 20000; echo A-done", handlers(on_a)),
                              daemon=True)
        ta.start()
        assert stop_started.wait(30), \
            f"command A produced no output within 30 s (request not answered?)\n{c.logs()}"
        ta.join(60)
        tb.join(60)
        stopper.join(STOP_TIMEOUT + 60)
        assert not ta.is_alive() and not tb.is_alive(), "streams did not end after docker stop"
        TIMINGS["docker stop"] = stop.get("elapsed", -1)

        a, b = results.get("A"), results.get("B")
        assert not isinstance(a, Exception), f"command A failed: {a!r}\n{c.logs()}"
        assert not isinstance(b, Exception), f"command B failed: {b!r}\n{c.logs()}"
        a_lines = out_text(a.logs.stdout).splitlines()
        assert a_lines == [str(i) for i in range(1, 20001)] + ["A-done"], \
            f"output of the finished command was lost: {len(a_lines)} lines"
        assert a.exit_code == 0, a
        b_out = out_text(b.logs.stdout)
        assert "B-term" in b_out, f"SIGTERM was not forwarded to the running command: {b_out!r}"
        assert b.exit_code == 0, b

        assert stop["rc"] == 0
        assert stop["elapsed"] < STOP_TIMEOUT, f"docker stop took {stop['elapsed']:.1f}s (SIGKILL?)"
        state = c.state()
        assert state["ExitCode"] == 0, f"exit code {state['ExitCode']}\n{c.logs()}"
        assert not state.get("OOMKilled")
    finally:
        c.remove()


def busybox_static(dest: Path) -> Path | None:
    """A static busybox from Debian's busybox-static package, or None."""
    work = dest / "bb"
    work.mkdir()
    r = sh(["apt-get", "download", "busybox-static"], cwd=work, check=False, timeout=300)
    debs = list(work.glob("busybox-static_*.deb"))
    if r.returncode != 0 or not debs:
        return None
    sh(["dpkg-deb", "-x", str(debs[0]), str(work / "x")])
    bb = work / "x" / "bin" / "busybox"
    return bb if bb.exists() else None


def test_static_binary_in_scratch_image(dockerd, static_binary, tmp_path):
    ctx = tmp_path / "scratch"
    (ctx / "rootfs" / "tmp").mkdir(parents=True)
    os.chmod(ctx / "rootfs" / "tmp", 0o1777)
    shutil.copy2(static_binary, ctx / "execd")
    bb = busybox_static(tmp_path)
    if bb:  # a shell so /command has something to run; execd itself needs nothing
        (ctx / "rootfs" / "bin").mkdir()
        shutil.copy2(bb, ctx / "rootfs" / "bin" / "sh")
    (ctx / "Dockerfile").write_text(
        "FROM scratch\n"
        "COPY rootfs/ /\n"
        "COPY execd /execd\n"
        'ENTRYPOINT ["/execd", "--init"]\n')
    docker_build(dockerd, ctx, "execd-test-scratch:latest", timeout=600)
    port, token = free_port(), secrets.token_hex(16)
    c = Container(dockerd, "execd-test-scratch:latest",
                  args=["--host", "127.0.0.1", "--port", str(port)],
                  env={"EXECD_ACCESS_TOKEN": token})
    try:
        c.wait_ready(port, token)
        assert ping(port, token) == 200
        if bb:
            cmds, _ = sdk(port, token)
            ex = cmds.run("echo scratch-ok; echo $((6*7))")
            assert ex.exit_code == 0, f"{ex}\n{c.logs()}"
            assert out_text(ex.logs.stdout).split() == ["scratch-ok", "42"]
        t0 = time.monotonic()
        dockerd.run("stop", "-t", str(STOP_TIMEOUT), c.name, timeout=120)
        assert time.monotonic() - t0 < STOP_TIMEOUT
        assert c.state()["ExitCode"] == 0, c.logs()
    finally:
        c.remove()


def test_bootstrap_in_debootstrap_image(dockerd, base_image, static_binary, tmp_path):
    ctx = tmp_path / "bootstrap"
    ctx.mkdir()
    shutil.copy2(static_binary, ctx / "execd")
    shutil.copy2(ROOT / "image" / "bootstrap.sh", ctx / "bootstrap.sh")
    # A user image with its own long-running entrypoint that exits 0 on TERM.
    (ctx / "Dockerfile").write_text(
        f"FROM {base_image}\n"
        "COPY execd bootstrap.sh /opt/opensandbox/\n"
        "ENV EXECD=/opt/opensandbox/execd\n"
        'ENTRYPOINT ["/opt/opensandbox/bootstrap.sh"]\n'
        'CMD ["sh", "-c", "trap \'echo user-term; exit 0\' TERM; echo user-start; '
        'while :; do sleep 0.2; done"]\n')
    docker_build(dockerd, ctx, "execd-test-bootstrap:latest", timeout=600)
    port, token = free_port(), secrets.token_hex(16)
    c = Container(dockerd, "execd-test-bootstrap:latest",
                  env={"EXECD_ACCESS_TOKEN": token,
                       "EXECD_ARGS": f"--host 127.0.0.1 --port {port}"})
    try:
        c.wait_ready(port, token)
        cmds, _ = sdk(port, token)
        ex = cmds.run("cat /etc/debian_version; cat /proc/1/comm; "
                      # minbase has no procps: read /proc directly
                      "grep -qx sleep /proc/[0-9]*/comm && echo user-alive")
        assert ex.exit_code == 0, ex
        lines = out_text(ex.logs.stdout).splitlines()
        assert lines[0].startswith("12"), lines
        assert lines[1] == "bootstrap.sh", lines
        assert "user-alive" in lines
        t0 = time.monotonic()
        dockerd.run("stop", "-t", str(STOP_TIMEOUT), c.name, timeout=120)
        assert time.monotonic() - t0 < STOP_TIMEOUT
        state = c.state()
        logs = c.logs()
        assert "user-start" in logs and "user-term" in logs, logs
        assert state["ExitCode"] == 0, f"{state}\n{logs}"
    finally:
        c.remove()


# ---------------------------------------------------------------------------

def elf_info(path: Path) -> dict:
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2, "not a 64-bit ELF file"
    end = "<" if data[5] == 1 else ">"
    (e_phoff, e_shoff) = struct.unpack_from(end + "QQ", data, 0x20)
    (e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx) = struct.unpack_from(
        end + "HHHHH", data, 0x36)
    types = [struct.unpack_from(end + "I", data, e_phoff + i * e_phentsize)[0]
             for i in range(e_phnum)]
    names = []
    if e_shoff and e_shnum:
        def sh_at(i):
            return struct.unpack_from(end + "IIQQQQIIQQ", data, e_shoff + i * e_shentsize)
        strtab = sh_at(e_shstrndx)
        str_off = strtab[4]
        for i in range(e_shnum):
            n = sh_at(i)[0]
            names.append(data[str_off + n:data.index(b"\0", str_off + n)].decode())
    return {"interp": 3 in types, "dynamic": 2 in types, "symtab": ".symtab" in names}
