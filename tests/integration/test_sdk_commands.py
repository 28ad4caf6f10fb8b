"""The official OpenSandbox Python SDK pointed straight at execd:
adapters built with AdapterFactory, no lifecycle server, default (compat) framing."""

from __future__ import annotations

import asyncio
import grp
import os
import pwd
import re
import subprocess
import time
from datetime import timedelta

import pytest
from opensandbox.adapters.factory import AdapterFactory
from opensandbox.config import ConnectionConfig
from opensandbox.exceptions import SandboxApiException
from opensandbox.models.execd import ExecutionHandlers, RunCommandOpts
from opensandbox.models.sandboxes import SandboxEndpoint

from execd_client import SLOW, TOKEN_HEADER

TEST_USER = "execdtest"
TEST_SUPP_GROUP = "execdtestsup"


def endpoint(ex) -> SandboxEndpoint:
    return SandboxEndpoint(endpoint=ex.endpoint, headers={TOKEN_HEADER: ex.token})


def sdk_run(ex, body):
    """Run `body(commands)` (a coroutine function) with a fresh SDK command service."""
    async def main():
        cfg = ConnectionConfig(protocol="http").with_transport_if_missing()
        try:
            cmds = AdapterFactory(cfg).create_command_service(endpoint(ex))
            try:
                return await body(cmds)
            finally:
                await cmds._sse_client.aclose()
                await cmds._httpx_client.aclose()
        finally:
            await cfg.close_transport_if_owned()
    return asyncio.run(main())


def run(ex, command, **opts):
    async def body(cmds):
        return await cmds.run(command, opts=RunCommandOpts(**opts) if opts else None)
    return sdk_run(ex, body)


def stdout(execution):
    return [m.text for m in execution.logs.stdout]


def stderr(execution):
    return [m.text for m in execution.logs.stderr]


async def poll(fn, timeout, what):
    deadline = time.monotonic() + timeout * SLOW
    while True:
        v = await fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def test_run_success(execd):
    e = run(execd, "echo hello; echo world")
    assert re.fullmatch(r"[0-9a-f]{32}", e.id), e.id
    assert e.exit_code == 0
    assert e.error is None
    assert e.complete is not None and e.complete.execution_time_in_millis >= 0
    assert stdout(e) == ["hello", "world"]
    assert stderr(e) == []
    assert all(not m.is_error and m.timestamp > 0 for m in e.logs.stdout)


def test_exit_code_and_stderr(execd):
    e = run(execd, "echo out; echo err1 >&2; echo err2 >&2; exit 3")
    assert e.exit_code == 3
    assert e.complete is None
    assert e.error.name == "CommandExecError"
    assert e.error.value == "3"
    assert e.error.traceback == ["exit status 3"]
    assert stdout(e) == ["out"]
    assert stderr(e) == ["err1", "err2"]
    assert all(m.is_error for m in e.logs.stderr)


@pytest.mark.parametrize("data,lines", [
    (b"a\n\nb\r\nc", ["a", "\n", "b", "c"]),
    (b"a\n\nb\n\n\nc\n", ["a", "\n", "b", "\n", "\n", "c"]),
    (b"p 10%\rp 20%\n", ["p 10%", "p 20%"]),
    (b"\r\n", ["\n"]),
    (b"x\r\r\ny", ["x", "\n", "y"]),
    (b"no newline at end", ["no newline at end"]),
    ("tab\there \u00e9 \u4e2d 😀\n".encode(), ["tab\there \u00e9 \u4e2d 😀"]),
    # separators that str.splitlines() honours must not break the SDK's parser
    ("a\u0085b\u2028c\u2029d\x0be\x0cf\x1cg\n".encode(), ["a\u0085b\u2028c\u2029d\x0be\x0cf\x1cg"]),
], ids=["spec_example", "blank_lines", "cr_progress", "lone_crlf", "cr_cr_lf", "no_final_nl",
        "unicode", "unicode_separators"])
def test_go_line_rules(execd, tmp_path, data, lines):
    f = tmp_path / "out.bin"
    f.write_bytes(data)
    e = run(execd, f"cat {f}")
    assert e.exit_code == 0
    assert stdout(e) == lines


def test_line_rules_on_stderr(execd):
    e = run(execd, "printf 'a\\n\\nb\\r\\nc' >&2")
    assert stderr(e) == ["a", "\n", "b", "c"]
    assert stdout(e) == []


def test_invalid_utf8_becomes_replacement_char(execd, tmp_path):
    f = tmp_path / "bin"
    f.write_bytes(b"caf\xe9\n")
    e = run(execd, f"cat {f}")
    assert stdout(e) == ["caf\ufffd"]


def test_envs_and_cwd(execd, tmp_path):
    (tmp_path / "marker").write_text("m")
    e = run(execd, 'echo "$FOO|$BAR"; pwd; ls', envs={"FOO": "x y", "BAR": "$HOME"},
            working_directory=str(tmp_path))
    assert e.exit_code == 0
    assert stdout(e) == ["x y|$HOME", str(tmp_path), "marker"]


def test_execd_envs_file_is_applied_and_reread(execd_factory, tmp_path):
    envs = tmp_path / "execd.env"
    envs.write_text("# comment\n\nFROM_FILE=one\nHOME_SUB=$HOME/sub\nNO_EQUALS_LINE\nBOTH=file\n")
    env = dict(os.environ, EXECD_ENVS=str(envs), HOME="/home/tester")
    ex = execd_factory(env=env)
    e = run(ex, 'echo "$FROM_FILE|$HOME_SUB|$BOTH|${NO_EQUALS_LINE-unset}"', envs={"BOTH": "request"})
    assert stdout(e) == ["one|/home/tester/sub|request|unset"]
    envs.write_text("FROM_FILE=two\n")  # re-read for every command
    assert stdout(run(ex, 'echo "$FROM_FILE"')) == ["two"]


def test_cwd_may_use_request_envs(execd, tmp_path):
    # The Go daemon validated cwd without the request's envs but expanded it
    # with them; execd uses the same variables for both.
    e = run(execd, "pwd", envs={"WORK": str(tmp_path)}, working_directory="$WORK")
    assert e.exit_code == 0 and stdout(e) == [str(tmp_path)]


def test_timeout(execd_factory):
    ex = execd_factory("--kill-grace", "300ms")
    t0 = time.monotonic()
    e = run(ex, "echo started; exec sleep 30", timeout=timedelta(milliseconds=300))
    assert time.monotonic() - t0 < 5 * SLOW
    assert stdout(e) == ["started"]
    assert e.exit_code == -1
    assert e.error is not None and e.error.value == "-1"


def test_signalled_command(execd):
    e = run(execd, "kill -KILL $$")
    assert e.exit_code == -1
    assert e.error.traceback == ["signal: killed"]


def test_background_status_and_logs(execd, tmp_path):
    gate = tmp_path / "gate"

    async def body(cmds):
        e = await cmds.run(f"echo one; while [ ! -e {gate} ]; do sleep 0.01; done; echo two; exit 6",
                           opts=RunCommandOpts(background=True))
        assert e.exit_code is None
        assert re.fullmatch(r"[0-9a-f]{32}", e.id)
        assert e.logs.stdout == []

        async def first_line():
            logs = await cmds.get_background_command_logs(e.id)
            return logs if logs.content == "one\n" else None
        logs = await poll(first_line, 10, "first log line")
        assert logs.cursor == 4
        st = await cmds.get_command_status(e.id)
        assert st.running is True
        assert st.id == e.id
        assert st.content.startswith("echo one;")
        assert st.started_at is not None and st.finished_at is None
        # Nothing new yet: same cursor, empty content.
        again = await cmds.get_background_command_logs(e.id, cursor=logs.cursor)
        assert again.content == "" and again.cursor == 4
        gate.touch()

        async def finished():
            s = await cmds.get_command_status(e.id)
            return s if not s.running else None
        st = await poll(finished, 10, "background command to finish")
        assert st.exit_code == 6
        assert st.finished_at is not None and st.finished_at >= st.started_at
        rest = await cmds.get_background_command_logs(e.id, cursor=logs.cursor)
        assert rest.content == "two\n"
        assert rest.cursor == 8
        full = await cmds.get_background_command_logs(e.id, cursor=0)
        assert full.content == "one\ntwo\n"
    sdk_run(execd, body)


def test_interrupt_background(execd):
    async def body(cmds):
        e = await cmds.run("exec sleep 30", opts=RunCommandOpts(background=True))

        async def running():
            return (await cmds.get_command_status(e.id)).running
        await poll(running, 10, "command to run")
        t0 = time.monotonic()
        await cmds.interrupt(e.id)
        assert time.monotonic() - t0 < 1.0 * SLOW

        async def stopped():
            s = await cmds.get_command_status(e.id)
            return s if not s.running else None
        st = await poll(stopped, 10, "interrupted command to stop")
        assert st.exit_code in (None, -1, 143), st
        assert st.error
        # interrupting a finished command is an error
        with pytest.raises(SandboxApiException) as ei:
            await cmds.interrupt(e.id)
        assert ei.value.status_code == 500
    sdk_run(execd, body)


def test_interrupt_foreground_via_handlers(execd):
    async def body(cmds):
        started = asyncio.Event()
        seen = {}

        async def on_init(init):
            seen["id"] = init.id

        async def on_stdout(msg):
            if msg.text == "ready":
                started.set()

        task = asyncio.create_task(cmds.run(
            "echo ready; exec sleep 30",
            handlers=ExecutionHandlers(on_init=on_init, on_stdout=on_stdout)))
        await asyncio.wait_for(started.wait(), 10 * SLOW)
        await cmds.interrupt(seen["id"])
        e = await asyncio.wait_for(task, 10 * SLOW)
        assert e.id == seen["id"]
        assert e.exit_code == -1
        assert e.error.traceback == ["signal: terminated"]
        assert stdout(e) == ["ready"]
    sdk_run(execd, body)


def test_streaming_handlers(execd):
    async def body(cmds):
        calls = []

        async def rec(kind):
            async def h(x):
                calls.append((kind, getattr(x, "text", None)))
            return h
        handlers = ExecutionHandlers(
            on_init=await rec("init"), on_stdout=await rec("stdout"), on_stderr=await rec("stderr"),
            on_execution_complete=await rec("complete"), on_error=await rec("error"))
        e = await cmds.run("echo a; echo b; echo c >&2", handlers=handlers)
        assert e.exit_code == 0
        kinds = [k for k, _ in calls]
        assert kinds[0] == "init" and kinds[-1] == "complete"
        assert [t for k, t in calls if k == "stdout"] == ["a", "b"]
        assert [t for k, t in calls if k == "stderr"] == ["c"]
        assert "error" not in kinds

        calls.clear()
        e = await cmds.run("exit 2", handlers=handlers)
        assert [k for k, _ in calls] == ["init", "error"]

        # skip_accumulation: handlers only
        calls.clear()
        quiet = ExecutionHandlers(on_stdout=await rec("stdout"), skip_accumulation=True)
        e = await cmds.run("seq 1000", handlers=quiet)
        assert e.logs.stdout == []
        assert [t for _, t in calls] == [str(i) for i in range(1, 1001)]
    sdk_run(execd, body)


def test_status_of_foreground_and_unknown(execd):
    async def body(cmds):
        e = await cmds.run("echo hi; exit 1")
        st = await cmds.get_command_status(e.id)
        assert st.running is False
        assert st.exit_code == 1
        assert st.content == "echo hi; exit 1"
        logs = await cmds.get_background_command_logs(e.id)
        assert logs.content == "hi\n" and logs.cursor == 3
        with pytest.raises(SandboxApiException) as ei:
            await cmds.get_command_status("0" * 32)
        assert ei.value.status_code == 404
        with pytest.raises(SandboxApiException) as ei:
            await cmds.get_background_command_logs("0" * 32)
        assert ei.value.status_code == 404
    sdk_run(execd, body)


def test_bad_request_raises(execd):
    async def body(cmds):
        # (gid without uid is rejected client-side by the SDK; see test_bad_input)
        with pytest.raises(SandboxApiException) as ei:
            await cmds.run("true", opts=RunCommandOpts(working_directory="/etc/passwd"))
        assert ei.value.status_code == 400
        with pytest.raises(SandboxApiException) as ei:
            await cmds.run("true", opts=RunCommandOpts(working_directory="/nonexistent/dir"))
        assert ei.value.status_code == 400
    sdk_run(execd, body)


def test_wrong_token_is_401(execd):
    async def body(cmds):
        with pytest.raises(SandboxApiException) as ei:
            await cmds.run("true")
        assert ei.value.status_code == 401
    good = execd.token
    execd.token = "wrong-" + good
    try:
        sdk_run(execd, body)
    finally:
        execd.token = good


def test_many_lines_and_large_line(execd):
    e = run(execd, "seq 20000; head -c 300000 /dev/zero | tr '\\0' 'z'; echo")
    out = stdout(e)
    assert out[:20000] == [str(i) for i in range(1, 20001)]
    # execd deliberately cuts a compat line longer than 64 KiB into pieces
    # (Go holds it whole); the pieces must still add up to the line.
    pieces = out[20000:]
    assert "".join(pieces) == "z" * 300000
    assert all(0 < len(p) <= 64 * 1024 for p in pieces), [len(p) for p in pieces]


@pytest.fixture(scope="module")
def test_user():
    """A user with a primary and a supplementary group (created once, as root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a user and run commands as it")
    try:
        grp.getgrnam(TEST_SUPP_GROUP)
    except KeyError:
        subprocess.run(["groupadd", TEST_SUPP_GROUP], check=True)
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-d", f"/home/{TEST_USER}", "-s", "/bin/sh",
                        "-G", TEST_SUPP_GROUP, TEST_USER], check=True)
    return pwd.getpwnam(TEST_USER), grp.getgrnam(TEST_SUPP_GROUP)


def test_uid_runs_as_user(execd, test_user):
    pw, supp = test_user
    e = run(execd, 'id -u; id -g; id -G; echo "$HOME|$USER|$LOGNAME"', uid=pw.pw_uid)
    assert e.exit_code == 0, (stdout(e), stderr(e))
    out = stdout(e)
    assert out[0] == str(pw.pw_uid)
    assert out[1] == str(pw.pw_gid)
    assert str(supp.gr_gid) in out[2].split()
    assert "0" not in out[2].split(), "root group leaked into supplementary groups"
    assert out[3] == f"{pw.pw_dir}|{TEST_USER}|{TEST_USER}"


def test_uid_gid_explicit(execd, test_user):
    pw, supp = test_user
    e = run(execd, "id -u; id -g", uid=pw.pw_uid, gid=supp.gr_gid)
    assert stdout(e) == [str(pw.pw_uid), str(supp.gr_gid)]


def test_uid_nobody_cannot_write_root_files(execd, tmp_path):
    os.chmod(tmp_path, 0o755)
    e = run(execd, f"id -un; touch {tmp_path}/x", uid=65534)
    assert stdout(e)[0] == "nobody"
    assert e.exit_code == 1
    assert not (tmp_path / "x").exists()


def test_sync_sdk(execd):
    from opensandbox.config.connection_sync import ConnectionConfigSync
    from opensandbox.sync.adapters.factory import AdapterFactorySync
    cfg = ConnectionConfigSync(protocol="http").with_transport_if_missing()
    try:
        cmds = AdapterFactorySync(cfg).create_command_service(endpoint(execd))
        e = cmds.run("printf 'a\\n\\nb\\r\\nc'; exit 9")
        assert stdout(e) == ["a", "\n", "b", "c"]
        assert e.exit_code == 9
        st = cmds.get_command_status(e.id)
        assert st.running is False and st.exit_code == 9
    finally:
        cfg.close_transport_if_owned()
