"""Fixtures that run a real execd binary (EXECD_BIN, default build/execd).

* `execd`        — a fresh daemon per test on a free port (--port 0; the port
                   is read from the "listening on" stderr line), a random
                   token and a temporary --state-dir. Teardown sends SIGTERM
                   and requires a clean exit (status 0) — every test thereby
                   also exercises graceful shutdown.
* `execd_factory` — start daemons with custom flags/env/token; each one is
                   stopped (and its exit status checked) at teardown unless the
                   test already stopped it.

With EXECD_REMOTE set, both start their daemons on that machine instead
(see execd_client: remote mode); tests/vm does that for a VM guest.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from execd_client import REMOTE, Execd, execd_bin, start_execd  # noqa: E402


def pytest_configure(config):
    if REMOTE:
        return
    # Orphans of an execd a test killed come to this process, not to PID 1,
    # so pids_with_cmdline still sees them as this run's (execd_client.py).
    import ctypes
    PR_SET_CHILD_SUBREAPER = 36
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise pytest.UsageError("cannot become a child subreaper: " + os.strerror(ctypes.get_errno()))
    b = execd_bin()
    if not os.access(b, os.X_OK):
        raise pytest.UsageError(f"execd binary not found: {b} (set EXECD_BIN or run `make build`)")


# Root's .bashrc on the project's machine runs `pyenv rehash` in every login
# shell (E2B commands run `bash -l`), holding a lock file for a fraction of a
# second. A test that SIGKILLs a login shell in that moment (the E2B SDKs'
# kill and timeout tests do it soon after a start) leaves the lock behind,
# and every later login shell, in this run or in one beside it, waits 60 s for
# it and then writes a complaint to its stderr. So while the suite runs, a
# lock older than a rehash ever holds it (40 ms here, idle) is removed. Its
# age is all there is to go by: the holder keeps nothing open, and the
# waiters are pyenv-rehash processes too.
PYENV_LOCK = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "shims" / ".pyenv-shim"
PYENV_LOCK_ORPHANED_AFTER = 2.0


def _remove_orphaned_pyenv_locks():
    while True:
        time.sleep(0.1)
        try:
            if time.time() - PYENV_LOCK.stat().st_mtime > PYENV_LOCK_ORPHANED_AFTER:
                PYENV_LOCK.unlink()
        except OSError:
            pass


if not REMOTE:
    threading.Thread(target=_remove_orphaned_pyenv_locks, name="pyenv-lock-janitor", daemon=True).start()


class _Factory:
    def __init__(self, tmp_path_factory):
        self.started: list[Execd] = []
        self.tmp = tmp_path_factory

    def __call__(self, *args, check_exit=True, **kw) -> Execd:
        kw.setdefault("state_dir", self.tmp.mktemp("state"))
        ex = start_execd(*args, **kw)
        ex.check_exit = check_exit
        self.started.append(ex)
        return ex

    def close(self):
        problems = []
        for ex in self.started:
            already = ex.proc.poll() is not None
            try:
                rc = ex.stop()
            except AssertionError as e:
                problems.append(str(e))
                continue
            if ex.check_exit and not already and rc != 0:
                problems.append(f"execd {ex.args} exited {rc} after SIGTERM; stderr tail:\n"
                                + ex.stderr_text()[-3000:])
        assert not problems, "\n".join(problems)


@pytest.fixture
def execd_factory(tmp_path_factory):
    f = _Factory(tmp_path_factory)
    yield f
    f.close()


@pytest.fixture
def execd(execd_factory) -> Execd:
    return execd_factory()
