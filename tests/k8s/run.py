#!/usr/bin/env python3
"""make test-k8s: the images, a network namespace, and pytest tests/k8s inside it.

  tests/k8s/run.py [pytest args...]

Expects tests/k8s/build.sh to have built the binaries (EXECD_K8S_CACHE,
default ~/.cache/execd/k8s) and build/execd-static. The cluster's state goes
to build/k8s/state and is removed at the end; the namespace too.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import images  # noqa: E402

NETNS = "execd-k8s"


def du(path: Path) -> str:
    if not path.exists():
        return "-"
    return subprocess.run(["du", "-sh", str(path)], capture_output=True, text=True).stdout.split()[0]


def main() -> int:
    cache = Path(os.environ.get("EXECD_K8S_CACHE") or Path.home() / ".cache/execd/k8s")
    work = ROOT / "build" / "k8s"
    state = work / "state"
    img_dir = work / "images"
    figures = work / "figures.jsonl"
    if state.exists():
        shutil.rmtree(state)
    state.mkdir(parents=True)
    figures.write_text("")
    t0 = time.monotonic()
    images.build(img_dir, cache / "bin")
    t_images = time.monotonic() - t0
    if os.path.exists(f"/run/netns/{NETNS}"):
        subprocess.run(["ip", "netns", "delete", NETNS], check=False)
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    try:
        env = dict(os.environ, EXECD_K8S_STATE=str(state), EXECD_K8S_BIN=str(cache / "bin"),
                   EXECD_K8S_IMAGES=str(img_dir), EXECD_K8S_CRDS=str(cache / "agent-sandbox-crds"),
                   EXECD_K8S_FIGURES=str(figures), EXECD_K8S_NETNS=NETNS, NO_PROXY="*", no_proxy="*")
        for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
            env.pop(k, None)
        rc = subprocess.call(["nsenter", f"--net=/run/netns/{NETNS}", "--", sys.executable, "-m", "pytest",
                              "-q", "-rs", "-p", "no:cacheprovider", "tests/k8s", *sys.argv[1:]],
                             cwd=ROOT, env=env)
    finally:
        subprocess.run(["ip", "netns", "delete", NETNS], check=False)
        shutil.rmtree(state, ignore_errors=True)
    print("\ntest-k8s figures:")
    for line in figures.read_text().splitlines():
        f = json.loads(line)
        print(f"  {f['figure']:34s} {f['value']} {f['unit']}")
    print(f"  {'images (OCI archives)':34s} {t_images:.0f} s")
    print(f"  {'test-k8s after the build':34s} {time.monotonic() - t0:.0f} s")
    gocache = subprocess.run(["go", "env", "GOCACHE"], capture_output=True, text=True).stdout.strip()
    gomod = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
    print(f"  disk: binaries {du(cache / 'bin')}, module copies {du(cache / 'src')}, "
          f"Go build cache {du(Path(gocache))}, module cache {du(Path(gomod))}, images {du(img_dir)}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
