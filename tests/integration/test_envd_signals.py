"""envd's SendSignal scope and the process group of a process, over raw
Connect (no released SDK sends `descendants` yet).

Upstream, as this follows it:
  * envd 0.6.13 (e2b-dev/infra main 54693ff3, packages/envd/internal/services/
    process/handler): SendSignal signals the leader alone; non-PTY commands
    start with no process group of their own.
  * e2b-dev/infra PR 3617 "fix(envd): support opt-in descendant signals"
    (open; envd 0.7.1): SendSignalRequest gains `descendants` (field 3, bool,
    default false); true signals the process group; non-PTY commands get
    their own process group (Setpgid).

execd: `descendants: true` reaches everything the process started (its
process group and its cgroup or keeper tree, so also setsid() children and
what is left after the leader exited). Without it, `--envd-signal-scope
leader` signals the leader alone, as envd; the default (`run`) reaches
everything, as kill() always has here (the SDK tests rely on it).
"""

from __future__ import annotations

import json
import signal as signals
import socket
import threading
import urllib.request

import pytest

from e2b_support import call, host_port, listener_url, process_output, read_response, request_bytes, start_process
from execd_client import MACHINE, SLOW, pids_with_cmdline, wait_until
from test_e2b_sdk import containment

TIMEOUT = 10 * SLOW


def kill_by_hand(*needles: str):
    """SIGKILL to what execd cannot reach (and the test must not leave)."""
    for needle in needles:
        for p in pids_with_cmdline(needle):
            MACHINE.call("kill", p, signals.SIGKILL)
        wait_until(lambda: not pids_with_cmdline(needle), TIMEOUT, what=f"{needle} to die")


def started(ex, cmd: str, tag: str, **extra):
    """Starts `bash -c cmd` tagged `tag` (its stream read on a thread);
    returns (pid, a function giving the stream's (pid, out, err, pty, end event))."""
    box = {}

    def run():
        try:
            box["msgs"] = start_process(ex.envd, cmd, tag=tag, **extra)
        except BaseException as e:  # re-raised by the caller's join
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def listed():
        st, _, body = call(ex.envd, "/process.Process/List", {})
        assert st == 200, body
        return next((p["pid"] for p in json.loads(body).get("processes", []) if p.get("tag") == tag), None)

    pid = wait_until(listed, TIMEOUT, what=f"process {tag} to be listed")

    def finish():
        t.join(TIMEOUT)
        assert not t.is_alive(), "the Start stream did not end"
        if "error" in box:
            raise box["error"]
        msgs, end = box["msgs"]
        assert "error" not in end, end
        return process_output(msgs)

    return pid, finish


def signal(ex, pid: int, sig: str, descendants=None, headers=None):
    req = {"process": {"pid": pid}, "signal": sig}
    if descendants is not None:
        req["descendants"] = descendants
    return call(ex.envd, "/process.Process/SendSignal", req, headers=headers)


def envd_execd(execd_factory, *extra):
    ex = execd_factory("--envd-port", "0", *extra)
    ex.envd = listener_url(ex)
    return ex


def test_without_descendants_the_leader_alone_as_envd(execd_factory):
    """--envd-signal-scope leader: SendSignal without `descendants` (and with
    it false) kills the leader only (envd 0.6.13; PR 3617's default); the
    leader's `&` child and setsid() child live on. `descendants: true` then
    reaches them even though the leader has exited."""
    ex = envd_execd(execd_factory, "--envd-signal-scope", "leader")
    for i, flag in enumerate((None, False)):
        grp, sid = f"sleep 61{i}1", f"sleep 61{i}2"
        pid, finish = started(ex, f"{grp} & setsid {sid} & echo up; wait", f"leader-{i}")
        wait_until(lambda: pids_with_cmdline(grp) and pids_with_cmdline(sid), TIMEOUT, what="the children")
        st, _, body = signal(ex, pid, "SIGNAL_SIGKILL", flag)
        assert st == 200 and json.loads(body) == {}, body
        _, out, _, _, end = finish()
        assert out == b"up\n" and end.get("status") == "signal: killed", end
        # The leader's end has been reported; its children were not signalled.
        assert pids_with_cmdline(grp) and pids_with_cmdline(sid)
        # The leader is gone: without descendants there is nothing to reach.
        st, _, body = signal(ex, pid, "SIGNAL_SIGKILL", flag)
        assert st == 404 and json.loads(body)["code"] == "not_found", body
        if containment(ex) == "process-group":
            # Nothing follows what a finished leader left: clean up by hand.
            kill_by_hand(grp, sid)
            continue
        st, _, body = signal(ex, pid, "SIGNAL_SIGKILL", True)
        assert st == 200, body
        wait_until(lambda: not pids_with_cmdline(grp) and not pids_with_cmdline(sid), TIMEOUT,
                   what="what the leader left to die")


@pytest.mark.parametrize("scope", ["leader", "run"])
def test_descendants_reach_the_whole_tree(execd_factory, scope):
    """`descendants: true` (PR 3617): TERM to the running leader, its `&`
    child and (with a cgroup or keeper) its setsid() child, whatever
    --envd-signal-scope says."""
    ex = envd_execd(execd_factory, "--envd-signal-scope", scope)
    grp, sid = "sleep 6201", "sleep 6202"
    pid, finish = started(ex, f"{grp} & setsid {sid} & echo up; wait", "tree")
    wait_until(lambda: pids_with_cmdline(grp) and pids_with_cmdline(sid), TIMEOUT, what="the children")
    st, _, body = signal(ex, pid, "SIGNAL_SIGTERM", True)
    assert st == 200 and json.loads(body) == {}, body
    _, out, _, _, end = finish()
    assert out == b"up\n" and end.get("status") == "signal: terminated", end
    wait_until(lambda: not pids_with_cmdline(grp), TIMEOUT, what="the group's child to die")
    if containment(ex) == "process-group":
        # A setsid() child has left the group, the only thing execd can reach here.
        assert pids_with_cmdline(sid)
        kill_by_hand(sid)
        return
    wait_until(lambda: not pids_with_cmdline(sid), TIMEOUT, what="the setsid child to die")
    # Nothing is left of it now (once a keeper has reported its tree empty).
    wait_until(lambda: signal(ex, pid, "SIGNAL_SIGKILL", True)[0] == 404, TIMEOUT, what="not_found")
    st, _, body = signal(ex, pid, "SIGNAL_SIGKILL", True)
    assert st == 404 and json.loads(body)["code"] == "not_found", body


def test_default_scope_reaches_everything_without_descendants(execd_factory):
    """execd's default (--envd-signal-scope run): `descendants: false` still
    reaches the `&` child, as kill() always has here."""
    ex = envd_execd(execd_factory)
    pid, finish = started(ex, "sleep 6301 & echo up; wait", "run-scope")
    wait_until(lambda: pids_with_cmdline("sleep 6301"), TIMEOUT, what="the child")
    st, _, body = signal(ex, pid, "SIGNAL_SIGKILL", False)
    assert st == 200, body
    assert finish()[4].get("status") == "signal: killed"
    wait_until(lambda: not pids_with_cmdline("sleep 6301"), TIMEOUT, what="the child to die")


def test_every_process_leads_its_own_group(execd_factory):
    """A non-PTY command leads a process group of its own (PR 3617's Setpgid;
    execd has always done it) in the session execd runs in; a PTY command
    leads its own session (creack/pty's Setsid in envd). Its `&` children
    stay in its group."""
    ex = envd_execd(execd_factory)
    stat = "read -r _ _ _ _ pg sid _ < /proc/$1/stat; echo $1 $pg $sid"
    cmd = f"f() {{ {stat}; }}; f $$; sleep 6401 & f $!; kill $!; wait"
    msgs, end = start_process(ex.envd, cmd)
    pid, out, err, _, ev = process_output(msgs)
    assert "error" not in end and ev["exited"], (end, err)
    (lpid, lpg, lsid), (cpid, cpg, _) = [tuple(map(int, line.split())) for line in out.decode().splitlines()]
    assert lpid == pid and lpg == pid, out  # the leader leads its group
    assert lsid != pid, out                 # ... and not a session: setpgid, not setsid
    assert cpid != pid and cpg == pid, out  # its child is in that group
    msgs, end = start_process(ex.envd, f"{stat.replace('$1', '$$')}", pty={"rows": 24, "cols": 80})
    pid, _, _, tty, ev = process_output(msgs)
    assert "error" not in end, end
    assert tty.split()[:3] == [str(pid).encode()] * 3, tty


def test_send_signal_token_garbage_and_version(execd_factory):
    """No token: 401 before the body is read; a `descendants` that is not a
    boolean: 400 invalid_argument; execd still serves. GET /health names the
    envd version execd reports (X-Envd-Version, envd's header on /init)."""
    ex = envd_execd(execd_factory)
    pid, finish = started(ex, "sleep 6501", "guarded")
    for headers in ({"X-Access-Token": None}, {"X-Access-Token": "wrong"}):
        st, _, body = signal(ex, pid, "SIGNAL_SIGKILL", True, headers=headers)
        assert st == 401 and json.loads(body)["code"] == "unauthenticated", body
    for bad in ('"yes"', "1", "[]", "{}"):
        raw = f'{{"process":{{"pid":{pid}}},"signal":"SIGNAL_SIGKILL","descendants":{bad}}}'.encode()
        with socket.create_connection(host_port(ex.envd), timeout=TIMEOUT) as s:
            s.sendall(request_bytes(ex.envd, "/process.Process/SendSignal", raw, "application/json"))
            st, _, body = read_response(s, TIMEOUT)
        assert st == 400 and json.loads(body)["code"] == "invalid_argument", (bad, body)
        assert "descendants" in json.loads(body)["message"], body
    assert pids_with_cmdline("sleep 6501"), "a refused signal was sent"
    st, _, body = signal(ex, pid, "SIGNAL_SIGKILL", True)
    assert st == 200, body
    assert finish()[4].get("status") == "signal: killed"
    with urllib.request.urlopen(ex.envd + "/health", timeout=TIMEOUT) as r:
        assert r.status == 204 and r.headers["X-Envd-Version"] == "0.6.13"
