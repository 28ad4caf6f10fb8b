"""A static execd starts itself again once with glibc's per-thread malloc
caches off (execd/malloc_tuning); a dynamic one (and one under ASan) does
not. Either way commands see the environment execd was given, and execd
keeps its name and command line. `make test` runs the dynamic and ASan
builds here; tests/image runs the static one (as PID 1 in its image)."""
from __future__ import annotations
import os
from execd_client import REMOTE, execd_bin

NO_CACHES = "glibc.malloc.tcache_count=0"


def started_twice(ex) -> bool:
    """Whether this execd is one that starts itself again: a static one
    (no dynamic loader mapped; ASan builds are dynamic)."""
    res = ex.run(f"cat /proc/{ex.pid}/maps", exact=True)
    assert res.status == 200 and res.stdout
    return b"/ld-linux" not in res.stdout


def environ_of(ex, pid) -> dict[str, str]:
    res = ex.run(f"cat /proc/{pid}/environ", exact=True)
    assert res.status == 200
    return dict(kv.split("=", 1) for kv in res.stdout.decode().split("\0") if "=" in kv)


def command_env(ex) -> dict[str, str]:
    res = ex.run("env -0", exact=True)
    return dict(kv.split("=", 1) for kv in res.stdout.decode().split("\0") if "=" in kv)


def with_env(**kv) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("GLIBC_TUNABLES", None)
    env.update(kv)
    return env


def test_execd_runs_without_malloc_caches_and_commands_never_see_it(execd_factory):
    ex = execd_factory(env=with_env())
    started = environ_of(ex, ex.pid)
    assert started.get("GLIBC_TUNABLES") == (NO_CACHES if started_twice(ex) else None)
    env = command_env(ex)
    assert "GLIBC_TUNABLES" not in env and "EXECD_MALLOC_TUNED" not in env
    # Its name and command line are the ones it was started with.
    res = ex.run(f"cat /proc/{ex.pid}/comm; tr '\\0' ' ' < /proc/{ex.pid}/cmdline", exact=True)
    comm, cmdline = res.stdout.decode().split("\n", 1)
    assert comm == ("execd" if REMOTE else os.path.basename(execd_bin())[:15])
    assert "--access-token" in cmdline and "--state-dir" in cmdline


def test_given_tunables_reach_commands_unchanged(execd_factory):
    given = "glibc.malloc.mmap_threshold=4194304"
    ex = execd_factory(env=with_env(GLIBC_TUNABLES=given))
    # Started again with the caches' tunable after the given one (glibc cuts
    # the variable short in /proc as it parses it, so the mark shows it).
    assert ("EXECD_MALLOC_TUNED" in environ_of(ex, ex.pid)) is started_twice(ex)
    env = command_env(ex)
    assert env.get("GLIBC_TUNABLES") == given and "EXECD_MALLOC_TUNED" not in env


def test_a_tcache_setting_given_stands(execd_factory):
    given = "glibc.malloc.tcache_count=3"
    ex = execd_factory(env=with_env(GLIBC_TUNABLES=given))
    started = environ_of(ex, ex.pid)
    assert started["GLIBC_TUNABLES"] == given and "EXECD_MALLOC_TUNED" not in started
    assert command_env(ex).get("GLIBC_TUNABLES") == given
