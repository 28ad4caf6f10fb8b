"""track_changes: what a run changed under its roots, in the terminal event,
the status, the journal entry and the record kept across a restart; for
commands, session runs and code runs. A change made while another run was
active is marked as possibly that run's (attribution by time; see
docs/api.md, "What a run changed"), and the list is bounded with the truncation said."""

from __future__ import annotations

import hashlib
import json
import os
import threading

import pytest

from execd_client import SLOW, start_execd, wait_until
from watch_helpers import Feed


@pytest.fixture
def root(tmp_path):
    d = tmp_path / "ws"
    d.mkdir()
    (d / "keep.txt").write_text("old")
    (d / "edit.txt").write_text("before")
    (d / "gone.txt").write_text("bye")
    (d / "moveme.txt").write_text("m")
    (d / "sub").mkdir()
    return d


def by_path(changes):
    return {e["path"]: e for e in changes["entries"]}


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def journal_entries(ex):
    st, _h, body = ex.request("GET", "/journal")
    assert st == 200
    return [json.loads(line) for line in body.split(b"\n") if line]


def test_a_command_lists_what_it_changed(execd, root):
    res = execd.run(f"cd {root} && echo new > made.txt && echo after > edit.txt && rm gone.txt && "
                    f"mv moveme.txt moved.txt && mkdir sub/d && printf abc > sub/d/f && "
                    f"echo tmp > t && rm t && chmod 600 keep.txt",
                    exact=True, track_changes=[str(root)])
    t = res.terminal
    assert t["exit_code"] == 0
    ch = t["changes"]
    assert ch["roots"] == [str(root)] and ch["attribution"] == "time-window"
    assert ch["truncated"] is False and ch["overflow"] is False and ch["concurrent_runs"] == []
    e = by_path(ch)
    assert e[str(root / "made.txt")]["change"] == "created"
    assert e[str(root / "made.txt")]["sha256"] == sha(b"new\n") and e[str(root / "made.txt")]["size"] == 4
    assert e[str(root / "edit.txt")]["change"] == "modified"
    assert e[str(root / "edit.txt")]["sha256"] == sha(b"after\n")
    assert e[str(root / "gone.txt")]["change"] == "removed" and "sha256" not in e[str(root / "gone.txt")]
    mv = e[str(root / "moved.txt")]
    assert mv["change"] == "renamed" and mv["from"] == str(root / "moveme.txt")
    assert e[str(root / "sub" / "d")]["change"] == "created" and e[str(root / "sub" / "d")]["entry"] == "dir"
    assert e[str(root / "sub" / "d" / "f")]["sha256"] == sha(b"abc")
    assert e[str(root / "keep.txt")]["change"] == "modified" and e[str(root / "keep.txt")]["mode"] == "600"
    assert str(root / "t") not in e  # made and removed within the run: nothing to report
    assert not any(x.get("concurrent") for x in ch["entries"])
    # The same list in the status and in the journal entry.
    st, status = execd.status(res.id)
    assert st == 200 and status["changes"] == ch
    entry = [j for j in journal_entries(execd) if j.get("id") == res.id][0]
    assert entry["changes"] == ch


def test_the_compat_framing_carries_it_too(execd, root):
    res = execd.run(f"touch {root}/c", track_changes=[str(root)])
    assert [x["path"] for x in res.terminal["changes"]["entries"]] == [str(root / "c")]


def test_changes_made_while_another_run_was_active_are_marked(execd, root, tmp_path):
    """A waits for a signal; B (another command) writes into A's root while
    A runs. Then the test itself writes two files (execd cannot see
    processes it did not start): the first is read in the same window as
    B's end, so it may be B's and is marked; the second, read after that
    window, is not. A writes its own file last."""
    go = tmp_path / "go"
    a_conn, a_resp = execd.open_stream(
        {"command": f"while [ ! -e {go} ]; do sleep 0.02; done; echo mine > {root}/a_own",
         "track_changes": [str(root)]}, exact=True)
    f = Feed(execd, root)
    b = execd.run(f"echo theirs > {root}/b_file", exact=True)
    assert b.terminal["exit_code"] == 0
    f.until(lambda e: e.get("path") == str(root / "b_file"))
    (root / "after_b").write_text("x")
    f.until(lambda e: e["type"] == "write" and e.get("path") == str(root / "after_b"))
    (root / "later").write_text("y")
    f.until(lambda e: e["type"] == "write" and e.get("path") == str(root / "later"))
    go.write_text("")
    body = a_resp.read()
    a_conn.close()
    term = [json.loads(line) for line in body.split(b"\n") if line][-1]
    ch = term["changes"]
    e = by_path(ch)
    assert e[str(root / "b_file")].get("concurrent") is True
    assert ch["concurrent_runs"] == [b.id]
    marked = {p for p, x in e.items() if x.get("concurrent")}
    assert marked <= {str(root / "b_file"), str(root / "after_b")}
    assert ch["possibly_concurrent"] == len(marked)
    assert "concurrent" not in e[str(root / "later")]
    assert "concurrent" not in e[str(root / "a_own")]
    f.close()


def test_the_list_is_bounded_and_says_so(execd_factory, root):
    ex = execd_factory("--track-max-entries", "5", "--track-hash-max-bytes", "10")
    res = ex.run(f"cd {root} && for i in $(seq 1 20); do echo $i > n$i; done; head -c 100 /dev/zero > n1",
                 exact=True, track_changes=[str(root)])
    ch = res.terminal["changes"]
    assert len(ch["entries"]) == 5 and ch["count"] == 5
    assert ch["truncated"] is True and ch["not_listed"] == 15
    big = by_path(ch)[str(root / "n1")]
    assert "sha256" not in big and "sha256_skipped" in big and big["size"] == 100


def test_a_session_run_lists_its_changes(execd, root):
    st, s = execd.json("POST", "/session", {})
    assert st == 200
    sid = s["session_id"]
    st, h, body = execd.request("POST", f"/session/{sid}/run",
                                {"command": f"cd {root} && echo s > from_session", "track_changes": [str(root)]},
                                headers={"Accept": "application/x-ndjson"})
    assert st == 200
    term = [json.loads(line) for line in body.split(b"\n") if line][-1]
    assert [x["path"] for x in term["changes"]["entries"]] == [str(root / "from_session")]
    st, status = execd.status(h["execd-run-id"])
    assert status["changes"] == term["changes"]


def test_a_code_run_lists_its_changes(tmp_path_factory, root):
    from test_code import start_kernel_execd, stop_and_check
    ex = start_kernel_execd(tmp_path_factory)
    try:
        c = ex.conn(120 * SLOW)
        c.request("POST", "/code", body=json.dumps({"code": f"open('{root}/from_code', 'w').write('k')",
                                                    "track_changes": [str(root)]}).encode(),
                  headers=ex.headers({"Accept": "application/x-ndjson", "Content-Type": "application/json"}))
        r = c.getresponse()
        assert r.status == 200
        term = [json.loads(line) for line in r.read().split(b"\n") if line][-1]
        c.close()
        assert term["status"] == "ok"
        e = by_path(term["changes"])
        assert e[str(root / "from_code")]["sha256"] == sha(b"k")
    finally:
        stop_and_check(ex)


def test_the_record_keeps_the_list_across_a_restart(tmp_path, root):
    state = tmp_path / "state"
    ex = start_execd(state_dir=state)
    try:
        res = ex.run(f"touch {root}/r", exact=True, track_changes=[str(root)])
        ch = res.terminal["changes"]
        wait_until(lambda: (state / "records.log").exists() and res.id.encode() in (state / "records.log").read_bytes(),
                   10 * SLOW, 0.05, "the record")
    finally:
        assert ex.stop() == 0
    ex2 = start_execd(state_dir=state)
    try:
        st, status = ex2.status(res.id)
        assert st == 200 and status["changes"] == ch
    finally:
        assert ex2.stop() == 0


@pytest.mark.parametrize("roots,status,code", [
    (["/nonexistent/root"], 404, "FILE_NOT_FOUND"),
    ("/tmp", 400, "INVALID_REQUEST_BODY"),
    ([""], 400, "INVALID_REQUEST_BODY"),
    ([f"/tmp/{i}" for i in range(17)], 400, "INVALID_REQUEST_BODY"),
])
def test_bad_roots_are_refused_before_anything_runs(execd, tmp_path, roots, status, code):
    marker = tmp_path / "ran"
    st, body = execd.json("POST", "/command", {"command": f"touch {marker}", "track_changes": roots})
    assert st == status and body["code"] == code, body
    assert "track_changes" in body["message"]
    assert not marker.exists()


def test_the_watch_limit_is_said_before_the_command_runs(execd_factory, tmp_path):
    ex = execd_factory("--max-watches", "1")
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    held = Feed(ex, a)
    st, body = ex.json("POST", "/command", {"command": f"touch {b}/x", "track_changes": [str(b)]})
    assert st == 429 and body["code"] == "LIMIT_REACHED" and "--max-watches" in body["message"]
    assert not (b / "x").exists()
    held.close()
