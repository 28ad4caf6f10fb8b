"""Session fixtures for the docker-based image tests: one private dockerd and one
imported base image for every module (helpers in dockerenv.py)."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import pytest

from dockerenv import (BASE_TAGS, CACHE, NOTES, TIMINGS, Dockerd, base_rootfs_tar, ensure_tools,
                       unavailable)


@pytest.fixture(scope="session")
def report():
    return TIMINGS


def pytest_terminal_summary(terminalreporter):
    """Print the measurements (build times, image size, time to first output)."""
    if TIMINGS:
        terminalreporter.write_line("execd image test timings: " + ", ".join(
            f"{k} {v:.1f}s" for k, v in TIMINGS.items()))
    for note in NOTES:
        terminalreporter.write_line(note)


@pytest.fixture(scope="session")
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


@pytest.fixture(scope="session")
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
