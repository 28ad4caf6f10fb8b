"""Bash sessions (/session): one long-lived shell per session, driven through
the official OpenSandbox Python SDK built straight against execd, plus raw HTTP for the error paths the SDK hides.

Every persisted item of the issue gets its own proof: unexported variables,
functions, aliases, cwd, `set -o` options and `unset`. Also: blank lines and a
final line without newline survive, stdout/stderr stay separate, a user command
cannot read the shell's command channel, a timeout kills the run but not the
shell, `exit` ends the session (410 afterwards), concurrent runs get 409, and
DELETE kills everything the session started.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from datetime import timedelta

import pytest

from execd_client import SLOW, wait_until, pids_with_cmdline

from opensandbox.adapters.factory import AdapterFactory
from opensandbox.config import ConnectionConfig
from opensandbox.models.sandboxes import SandboxEndpoint


class Sdk:
    """The SDK's async command service, driven from sync test code."""

    def __init__(self, ex):
        self.loop = asyncio.new_event_loop()
        cfg = ConnectionConfig(protocol="http")
        ep = SandboxEndpoint(endpoint=ex.endpoint, headers={"X-EXECD-ACCESS-TOKEN": ex.token})
        self.svc = AdapterFactory(cfg).create_command_service(ep)

    def __call__(self, coro):
        return self.loop.run_until_complete(coro)

    def create(self, cwd=None):
        return self(self.svc.create_session(working_directory=cwd))

    def run(self, sid, command, **kw):
        return self(self.svc.run_in_session(sid, command, **kw))

    def delete(self, sid):
        return self(self.svc.delete_session(sid))

    def close(self):
        self.loop.close()


@pytest.fixture
def sdk(execd):
    s = Sdk(execd)
    yield s
    s.close()


def out(execution) -> list[str]:
    return [m.text for m in execution.logs.stdout]


def err(execution) -> list[str]:
    return [m.text for m in execution.logs.stderr]


def test_unexported_variables_persist(sdk):
    sid = sdk.create()
    assert sdk.run(sid, "secret=42; declare -a arr=(x y z)").exit_code == 0
    e = sdk.run(sid, 'echo "$secret ${arr[2]}"; env | grep -c ^secret= || true')
    assert out(e) == ["42 z", "0"]  # set, and still not exported


def test_functions_persist(sdk):
    sid = sdk.create()
    sdk.run(sid, "greet() { echo \"hello $1\"; }")
    assert out(sdk.run(sid, "greet world")) == ["hello world"]


def test_aliases_persist(sdk):
    sid = sdk.create()
    sdk.run(sid, "alias hi='echo aliased-hi'")
    assert out(sdk.run(sid, "hi")) == ["aliased-hi"]


def test_cwd_persists(sdk, tmp_path):
    sid = sdk.create()
    d = tmp_path / "sub dir"
    d.mkdir()
    sdk.run(sid, f"cd '{d}'")
    assert out(sdk.run(sid, "pwd")) == [str(d)]
    # A per-run cwd sticks as well (as with the Go daemon).
    sdk.run(sid, "true", working_directory=str(tmp_path))
    assert out(sdk.run(sid, "pwd")) == [str(tmp_path)]


def test_create_with_cwd(sdk, tmp_path):
    d = tmp_path / "made" / "by" / "execd"
    sid = sdk.create(cwd=str(d))
    assert d.is_dir()
    assert out(sdk.run(sid, "pwd")) == [str(d)]


def test_set_options_persist(sdk):
    sid = sdk.create()
    sdk.run(sid, "set -o noglob; set -o pipefail")
    e = sdk.run(sid, "echo /*; false | true; echo rc=$?; [[ -o noglob ]] && echo on")
    assert out(e) == ["/*", "rc=1", "on"]


def test_unset_persists(sdk):
    sid = sdk.create()
    assert out(sdk.run(sid, "echo ${HOME:-none}")) != ["none"]
    sdk.run(sid, "unset HOME")
    assert out(sdk.run(sid, "echo ${HOME-unset}")) == ["unset"]


def test_exported_variables_reach_children(sdk):
    sid = sdk.create()
    sdk.run(sid, "export GREETING='a b $c \"q\" \\\\ `x`'")
    assert out(sdk.run(sid, "bash -c 'printf %s \"$GREETING\"'")) == ['a b $c "q" \\\\ `x`']


def test_blank_lines_final_partial_line_and_separate_stderr(sdk):
    sid = sdk.create()
    e = sdk.run(sid, "printf 'a\\n\\nb\\n'; echo oops >&2; printf 'no-newline'")
    assert out(e) == ["a", "\n", "b", "no-newline"]
    assert err(e) == ["oops"]
    assert e.exit_code == 0


def test_marker_like_output_is_plain_output(sdk):
    sid = sdk.create()
    e = sdk.run(sid, "echo __EXIT_CODE__:7; echo __ENV_DUMP_START__; echo 0")
    assert out(e) == ["__EXIT_CODE__:7", "__ENV_DUMP_START__", "0"]
    assert e.exit_code == 0


def test_exit_codes_and_multiline(sdk):
    sid = sdk.create()
    e = sdk.run(sid, "f() {\n  return 4\n}\nf")
    assert e.exit_code == 4 and e.error and e.error.value == "4"
    e = sdk.run(sid, "cat <<EOF\nheredoc line\nEOF")
    assert out(e) == ["heredoc line"] and e.exit_code == 0
    # A syntax error is the run's failure, not the shell's.
    e = sdk.run(sid, "if then")
    assert e.exit_code == 2 and any("syntax error" in t for t in err(e))
    assert out(sdk.run(sid, "echo alive")) == ["alive"]


def test_user_command_cannot_read_the_command_channel(sdk):
    sid = sdk.create()
    e = sdk.run(sid, "cat; echo read-done; ls -l /proc/self/fd/3 2>/dev/null || echo no-fd3")
    assert out(e) == ["read-done", "no-fd3"]
    assert out(sdk.run(sid, "echo still-fine")) == ["still-fine"]


def test_exit_ends_the_session(execd, sdk):
    sid = sdk.create()
    sdk.run(sid, "echo before")
    e = sdk.run(sid, "echo bye; exit 3")
    assert out(e) == ["bye"] and e.exit_code == 3
    st, js = execd.json("POST", f"/session/{sid}/run", {"command": "echo again"})
    assert st == 410 and js["code"] == "SESSION_EXITED"
    sdk.delete(sid)
    assert execd.json("DELETE", f"/session/{sid}")[0] == 404


def test_timeout_kills_the_run_not_the_shell(sdk):
    sid = sdk.create()
    sdk.run(sid, "kept=yes; sleep 417.1 &")  # a background job of an earlier run survives
    wait_until(lambda: pids_with_cmdline("sleep 417.1"), 5 * SLOW, what="background sleep")
    e = sdk.run(sid, "echo started; sleep 417.2; echo not-reached", timeout=timedelta(milliseconds=300))
    assert out(e) == ["started"]
    assert e.exit_code == -1 and e.error.value == "-1"
    assert not pids_with_cmdline("sleep 417.2")
    # Also a loop that never calls a program, nested in functions.
    e = sdk.run(sid, "spin() { while :; do :; done; }; outer() { spin; echo after-spin; }; outer; echo after-outer",
                timeout=timedelta(milliseconds=300))
    assert e.exit_code == -1 and "after-outer" not in out(e)
    assert out(sdk.run(sid, "echo $kept")) == ["yes"]
    assert pids_with_cmdline("sleep 417.1")
    sdk.delete(sid)
    wait_until(lambda: not pids_with_cmdline("sleep 417.1"), 5 * SLOW, what="background job killed by DELETE")


def test_delete_kills_everything_and_ends_the_running_stream(execd, sdk):
    sid = sdk.create()
    sdk.run(sid, "sleep 418.1 & (sleep 418.2 &) ; set -m; sleep 418.3 &")
    wait_until(lambda: len(pids_with_cmdline("sleep 418.")) == 3, 5 * SLOW, what="three jobs")
    result = {}

    def runner():
        result["e"] = Sdk(execd).run(sid, "echo running; sleep 418.4")

    t = threading.Thread(target=runner)
    t.start()
    wait_until(lambda: pids_with_cmdline("sleep 418.4"), 5 * SLOW, what="run in progress")
    sdk.delete(sid)
    t.join(10 * SLOW)
    assert not t.is_alive()
    assert result["e"].exit_code == -1
    wait_until(lambda: not pids_with_cmdline("sleep 418."), 5 * SLOW, what="all session processes gone")


def test_concurrent_run_conflicts(execd, sdk):
    sid = sdk.create()
    c = execd.conn(30)
    c.request("POST", f"/session/{sid}/run", body=json.dumps({"command": "echo go; sleep 419.1"}),
              headers=execd.headers({"Content-Type": "application/json"}))
    r = c.getresponse()
    assert r.status == 200
    wait_until(lambda: pids_with_cmdline("sleep 419.1"), 5 * SLOW, what="first run")
    st, js = execd.json("POST", f"/session/{sid}/run", {"command": "echo second"})
    assert st == 409 and js["code"] == "SESSION_BUSY"
    c.close()  # disconnect: the run keeps going until it ends (like /command)
    assert pids_with_cmdline("sleep 419.1")
    sdk.delete(sid)
    wait_until(lambda: not pids_with_cmdline("sleep 419.1"), 5 * SLOW, what="run killed by DELETE")


def test_interrupt_by_command_id_stops_the_run_not_the_session(execd, sdk):
    sid = sdk.create()
    sdk.run(sid, "kept=still-here")
    c = execd.conn(30)
    c.request("POST", f"/session/{sid}/run", body=json.dumps({"command": "echo go; sleep 419.2; echo no"}),
              headers=execd.headers({"Content-Type": "application/json", "Accept": "application/x-ndjson"}))
    r = c.getresponse()
    assert r.status == 200
    wait_until(lambda: pids_with_cmdline("sleep 419.2"), 5 * SLOW, what="run")
    st, h, data = execd.request("DELETE", f"/command?id={sid}")
    assert st == 200, data
    events = [json.loads(line) for line in r.read().splitlines() if line.strip()]
    c.close()
    term = events[-1]
    assert term["type"] == "execution_complete"
    assert term["interrupted"] is True and term["timed_out"] is False
    assert term["exit_code"] is None
    assert not pids_with_cmdline("sleep 419.2")
    # The session and its state survive (the Go daemon deleted the session).
    assert out(sdk.run(sid, "echo $kept")) == ["still-here"]
    st, js = execd.json("DELETE", f"/command?id={sid}")
    assert st == 500 and js["code"] == "RUNTIME_ERROR"  # no run in progress


def test_unknown_session_and_bad_requests(execd, sdk):
    st, js = execd.json("POST", "/session/nope/run", {"command": "echo"})
    assert st == 404 and js["code"] == "CONTEXT_NOT_FOUND"
    st, js = execd.json("DELETE", "/session/nope")
    assert st == 404 and js["code"] == "CONTEXT_NOT_FOUND"
    sid = sdk.create()
    for body in ["{", "[]", {"command": ""}, {"command": 5}, {"command": "x", "timeout": -1},
                 {"command": "x", "cwd": "/does/not/exist"}]:
        st, js = execd.json("POST", f"/session/{sid}/run", body)
        assert st == 400 and js["code"] == "INVALID_REQUEST_BODY", (body, st, js)
    st, js = execd.json("POST", "/session", "{bad")
    assert st == 400
    # Empty body is allowed.
    st, h, data = execd.request("POST", "/session", b"")
    assert st == 200 and json.loads(data)["session_id"]


def test_exact_framing_for_session_runs(execd, sdk):
    sid = sdk.create()
    c = execd.conn(30)
    c.request("POST", f"/session/{sid}/run", body=json.dumps({"command": "printf 'x\\n\\ny'; printf e >&2; exit 0"}),
              headers=execd.headers({"Content-Type": "application/json", "Accept": "application/x-ndjson"}))
    r = c.getresponse()
    assert r.getheader("Content-Type").startswith("application/x-ndjson")
    events = [json.loads(line) for line in r.read().split(b"\n") if line]
    assert events[0] == {**events[0], "type": "init", "text": sid}
    so = "".join(e["text"] for e in events if e["type"] == "stdout")
    se = "".join(e["text"] for e in events if e["type"] == "stderr")
    assert so == "x\n\ny" and se == "e"
    assert events[-1]["type"] == "execution_complete"
