"""What the 1.1.1 OpenSandbox SDK added, against a real execd: argv commands
(`commands.run([...])`), `commands.set_env` (quoted EXECD_ENVS entries, seen by
later commands and sessions), `files_with_identity` (/v1/filesystem/{uid}/{gid}),
and the command inventory (GET /command, raw: the SDK has no call for it yet),
each with its refusals and a client without the token."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from opensandbox.adapters.factory import AdapterFactory
from opensandbox.adapters.filesystem_adapter import FilesystemAdapter
from opensandbox.config import ConnectionConfig
from opensandbox.models.execd import RunCommandOpts
from opensandbox.models.filesystem import WriteEntry

from execd_client import SLOW, TOKEN_HEADER, wait_until
from test_sdk_commands import endpoint, run, sdk_run, stderr, stdout

NOBODY = 65534


# ---- argv ------------------------------------------------------------------------------------------------

def test_argv_runs_without_a_shell_and_resolves_with_the_request_path(execd, tmp_path):
    # Every argument arrives as it was sent: no splitting, quoting or expansion.
    e = run(execd, ["printf", "%s|", "a b", "$HOME", "*", "'q'", ""])
    assert e.exit_code == 0 and e.error is None
    assert stdout(e) == ["a b|$HOME|*|'q'||"]
    # The executable is looked up on the request's PATH, relative to its cwd.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "only-here"
    tool.write_text("#!/bin/sh\necho \"only-here in $(pwd) with $1\"\n")
    tool.chmod(0o755)
    e = run(execd, ["only-here", "arg"], envs={"PATH": f"{bin_dir}:/usr/bin:/bin"}, working_directory=str(tmp_path))
    assert e.exit_code == 0 and stdout(e) == [f"only-here in {tmp_path} with arg"]
    e = run(execd, ["./bin/only-here", "rel"], working_directory=str(tmp_path))
    assert stdout(e) == [f"only-here in {tmp_path} with rel"]


def test_argv_that_cannot_start_fails_as_the_go_daemon_says(execd, tmp_path):
    e = run(execd, ["no-such-program-xyz", "a"])
    assert e.error is not None
    assert 'exec: "no-such-program-xyz": executable file not found in $PATH' in e.error.value
    e = run(execd, ["./missing"], working_directory=str(tmp_path))
    assert e.error is not None and "fork/exec ./missing: no such file or directory" in e.error.value


def test_argv_raw_refusals_status_and_journal(execd):
    st, js = execd.json("POST", "/command", {"command": "true", "argv": ["true"]})
    assert st == 400 and "mutually exclusive" in js["message"]
    st, js = execd.json("POST", "/command", {"argv": []})
    assert st == 400
    st, js = execd.json("POST", "/command", {"argv": ["", "x"]})
    assert st == 400 and "argv[0]" in js["message"]
    st, js = execd.json("POST", "/command", {"argv": ["echo", "a\u0000b"]})
    assert st == 400
    st, js = execd.json("POST", "/command", {"argv": ["echo", 3]})
    assert st == 400
    # Background, status and the journal carry the argv as sent; content is
    # its shell-quoted display form.
    st, _, _ = execd.request("POST", "/command", {"argv": ["sh", "-c", "exit 7", "x y"], "background": True,
                                               "id": "argv-bg-1"})
    assert st == 200
    wait_until(lambda: execd.json("GET", "/command/status/argv-bg-1")[1].get("running") is False, 10 * SLOW, 0.02,
               "the background argv command to end")
    st, status = execd.json("GET", "/command/status/argv-bg-1")
    assert status["argv"] == ["sh", "-c", "exit 7", "x y"]
    assert status["exit_code"] == 7
    assert status["content"] == "sh -c 'exit 7' 'x y'"
    st, _, body = execd.request("GET", "/journal?since=0")
    entries = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
    mine = [x for x in entries if x.get("id") == "argv-bg-1"]
    assert mine and mine[-1]["argv"] == ["sh", "-c", "exit 7", "x y"]


def test_argv_with_a_tty(execd):
    # (the SDK has no tty option: the raw API)
    st, _, body = execd.request("POST", "/command", {"argv": ["sh", "-c", "test -t 1 && echo on-a-tty"], "tty": True})
    assert st == 200 and b"on-a-tty" in body


# ---- set_env ---------------------------------------------------------------------------------------------

def test_set_env_is_seen_by_later_commands_and_sessions(execd_factory, tmp_path):
    envs = tmp_path / "env" / "execd.env"
    ex = execd_factory(env=dict(os.environ, EXECD_ENVS=str(envs)))
    values = {"PLAIN": "one two", "WITH_QUOTE": "it's $HOME", "DOLLAR": "$HOME and `x`"}

    async def body(cmds):
        for k, v in values.items():
            await cmds.set_env(k, v)
        return await cmds.run('printf "%s\\n" "$PLAIN" "$WITH_QUOTE" "$DOLLAR"')
    e = sdk_run(ex, body)
    assert e.exit_code == 0
    # single-quoted entries are literal; a value with a quote is written
    # double-quoted by the SDK, where $NAME may expand (the SDK says so)
    out = stdout(e)
    assert out[0] == "one two" and out[2] == "$HOME and `x`"
    assert out[1].startswith("it's ") and out[1] != "it's "
    # A bash session started afterwards has them too.
    st, js = ex.json("POST", "/session", {})
    assert st == 200
    sid = js["session_id"]
    st, _, body_ = ex.request("POST", f"/session/{sid}/run", {"command": 'echo "[$PLAIN]"'})
    assert st == 200 and b"[one two]" in body_


# ---- files_with_identity ---------------------------------------------------------------------------------

@pytest.fixture
def shared_dirs():
    """A world-traversable directory holding one dir owned by nobody and one only root may enter."""
    top = Path(tempfile.mkdtemp(prefix="execd-identity-"))
    top.chmod(0o755)
    theirs, roots = top / "nobody", top / "root-only"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    roots.mkdir(mode=0o700)
    yield top, theirs, roots
    shutil.rmtree(top)


def identity_fs(ex, uid, gid, body):
    async def main():
        cfg = ConnectionConfig(protocol="http")
        fs = AdapterFactory(cfg).create_filesystem_service(endpoint(ex))
        assert isinstance(fs, FilesystemAdapter)
        try:
            return await body(fs.with_identity(uid, gid))
        finally:
            await cfg.close_transport_if_owned()
    return asyncio.run(main())


def test_files_with_identity_act_as_that_user(execd, shared_dirs):
    top, theirs, roots = shared_dirs

    async def body(fs):
        await fs.write_files([WriteEntry(path=str(theirs / "made.txt"), data="by nobody\n", mode=644)])
        return await fs.read_file(str(theirs / "made.txt"))
    assert identity_fs(execd, NOBODY, NOBODY, body) == "by nobody\n"
    st = os.stat(theirs / "made.txt")
    assert (st.st_uid, st.st_gid) == (NOBODY, NOBODY)

    # Where that user may not write, the kernel says no; nothing is created.
    async def denied(fs):
        await fs.write_files([WriteEntry(path=str(roots / "x.txt"), data="no", mode=644)])
    with pytest.raises(Exception) as refused:
        identity_fs(execd, NOBODY, NOBODY, denied)
    assert "403" in str(refused.value) or "ermission" in str(refused.value)
    assert not (roots / "x.txt").exists()
    # The plain routes are unchanged: execd's own identity.
    st, _, _ = execd.request("GET", f"/files/info?path={roots}")
    assert st == 200


def test_identity_routes_refusals_and_no_token(execd, shared_dirs):
    top, theirs, _ = shared_dirs
    st, _, _ = execd.request("GET", f"/v1/filesystem/abc/0/files/info?path={top}")
    assert st == 400
    st, _, _ = execd.request("GET", f"/v1/filesystem/{1 << 33}/0/files/info?path={top}")
    assert st == 400
    st, _, _ = execd.request("GET", f"/v1/filesystem/{NOBODY}/{NOBODY}/files/info?path={theirs}", token=False)
    assert st == 401
    st, _, _ = execd.request("GET", f"/v1/filesystem/{NOBODY}/{NOBODY}/files/info?path={theirs}")
    assert st == 200


# ---- the inventory ---------------------------------------------------------------------------------------

def test_inventory_lists_pages_and_filters(execd):
    ids = [f"inv-{i}" for i in range(5)]
    for i in ids[:3]:
        assert execd.request("POST", "/command", {"command": "true", "id": i, "background": True})[0] == 200
    for i in ids[3:]:
        assert execd.request("POST", "/command", {"command": "sleep 60 # secret-text", "id": i,
                                                  "background": True})[0] == 200
    wait_until(lambda: all(execd.json("GET", f"/command/status/{i}")[1].get("running") is False for i in ids[:3]),
               10 * SLOW, 0.02, "the short commands to end")

    def listing(query):
        st, js = execd.json("GET", f"/command?{query}")
        assert st == 200, js
        return js

    everything = listing("")
    assert [c["id"] for c in everything["commands"] if c["id"].startswith("inv-")] == ids
    assert everything["next_cursor"] is None
    assert all("command" not in c for c in everything["commands"])  # no contents unless asked
    assert "secret-text" not in json.dumps(everything)
    with_content = listing("content=true")
    assert any("secret-text" in c.get("command", "") for c in with_content["commands"])
    assert {c["id"] for c in listing("running=true")["commands"]} >= set(ids[3:])
    assert not {c["id"] for c in listing("running=true")["commands"]} & set(ids[:3])
    done = [c for c in listing("running=false")["commands"] if c["id"] in ids[:3]]
    assert [c["exit_code"] for c in done] == [0, 0, 0]
    # Paging one at a time visits each exactly once, in start order.
    seen, cursor = [], ""
    while True:
        page = listing(f"limit=1&cursor={cursor}")
        seen += [c["id"] for c in page["commands"]]
        if page["next_cursor"] is None:
            break
        cursor = page["next_cursor"]
    assert [i for i in seen if i.startswith("inv-")] == ids
    # A cursor belongs to its filter; garbage is refused.
    first = listing("running=true&limit=1")["next_cursor"]
    assert first
    assert execd.request("GET", f"/command?running=false&cursor={first}")[0] == 400
    assert execd.request("GET", "/command?cursor=zz-not-a-cursor")[0] == 400
    assert execd.request("GET", "/command?limit=0")[0] == 400
    assert execd.request("GET", "/command?running=maybe")[0] == 400
    assert execd.request("GET", "/command", token=False)[0] == 401
    for i in ids[3:]:
        execd.request("DELETE", f"/command?id={i}")
