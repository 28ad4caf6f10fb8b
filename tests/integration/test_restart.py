"""Records across restarts (issue 13): execd is SIGKILLed mid-run and started
again on the same state dir."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from execd_client import SLOW, execd_bin, parse_stream, pids_with_cmdline, reconstruct, start_execd, wait_until


def _stored(state) -> dict:
    """Each record's last entry in the records log (its JSON line; every
    entry is that line and a line with its checksum), by id."""
    try:
        lines = (state / "records.log").read_text().split("\n")
    except OSError:
        return {}
    out = {}
    for line, check in zip(lines, lines[1:]):
        if line.startswith("{") and check == "sha256:" + hashlib.sha256(line.encode()).hexdigest():
            rec = json.loads(line)
            out[rec["id"]] = rec
    return out


def _entry(record: dict) -> bytes:
    """A record as execd writes it: the JSON line and its checksum line."""
    line = json.dumps(record, separators=(",", ":")).encode()
    return line + b"\nsha256:" + hashlib.sha256(line).hexdigest().encode() + b"\n"


def test_sigkill_mid_run_then_restart(execd_factory, tmp_path):
    state = tmp_path / "state"
    marker = f"restart-{uuid.uuid4().hex[:8]}"
    ex = execd_factory(state_dir=state, check_exit=False)
    done = ex.run("echo finished; echo e >&2; exit 4", exact=True, id="done-1")
    assert done.terminal["exit_code"] == 4
    ex.run(f"echo before; exec -a {marker} sleep 1000", id="lost-1", background=True)
    ex.run(f"bash -c 'exec -a {marker}-child sleep 1000' & echo forked; wait", id="lost-2", background=True)
    wait_until(lambda: len(pids_with_cmdline(marker)) >= 3, 10 * SLOW, what="both sleeps (and a shell) running")
    wait_until(lambda: ex.logs("lost-2")[2] == b"forked\n", 10 * SLOW, what="lost-2 output")
    # Records reach the disk shortly after the event, from the threadpool: a
    # SIGKILL before that loses them (docs/api.md says so), which is not what
    # this test is about. Both starts (with their start ticks) and done-1's
    # end must be on disk first.
    def written():
        stored = _stored(state)
        recs = {cid: stored.get(cid, {}) for cid in ("done-1", "lost-1", "lost-2")}
        return recs["done-1"].get("finished") is True and all(recs[c].get("start_ticks") for c in ("lost-1", "lost-2"))

    wait_until(written, 10 * SLOW, what="the three records written")
    ex.proc.send_signal(signal.SIGKILL)
    ex.proc.wait()
    assert len(pids_with_cmdline(marker)) >= 3  # orphans, until the restart

    ex2 = execd_factory(state_dir=state)
    # Nothing keeps running unseen.
    wait_until(lambda: not pids_with_cmdline(marker), 10 * SLOW, what="lost process groups ended")
    for cid, out in [("lost-1", b"before\n"), ("lost-2", b"forked\n")]:
        st, js = ex2.status(cid)
        assert st == 200, js
        assert js["running"] is False and js["lost"] is True, js
        assert "exit_code" not in js
        assert ex2.logs(cid)[2] == out
        st, h, raw = ex2.request("GET", f"/command/{cid}/stream")
        events = parse_stream(raw, True)
        assert reconstruct(events)[0] == out
        assert events[-1]["type"] == "error" or events[-1].get("exit_code") is None, events[-1]
    st, js = ex2.status("done-1")
    assert js["exit_code"] == 4 and js["stdout_sha256"] == done.terminal["stdout_sha256"], js
    st, h, raw = ex2.request("GET", "/command/done-1/stream?stderr=0")
    events = parse_stream(raw, True)
    strip = lambda e: {k: v for k, v in e.items() if k != "timestamp"}  # noqa: E731
    assert strip(events[-1]) == strip(done.terminal)
    assert reconstruct(events) == (b"finished\n", b"e\n")
    # The same id with the same request attaches to the reloaded record.
    again = ex2.run("echo finished; echo e >&2; exit 4", exact=True, id="done-1")
    assert again.stdout == b"finished\n" and again.terminal["exit_code"] == 4
    assert "2 lost" in ex2.stderr_text()
    # The journal says it too, and its chain holds across the restart.
    st, h, raw = ex2.request("GET", "/journal")
    entries = [json.loads(l) for l in raw.splitlines() if l]
    lost = {e["id"] for e in entries if e["type"] == "command" and e["result"]["lost"]}
    assert lost == {"lost-1", "lost-2"}
    assert ex2.json("GET", "/journal/verify")[1]["ok"] is True


def test_torn_records_are_skipped_and_counted(execd_factory, tmp_path):
    """A crash mid-append leaves half an entry at the end of the records log:
    it is skipped, counted and cut (later entries must not follow it)."""
    state = tmp_path / "state"
    ex = execd_factory(state_dir=state)
    ex.run("echo a", id="keep-1")
    ex.run("echo b", id="torn-1")
    assert ex.stop() == 0
    log = state / "records.log"
    entries = _split_entries(log.read_bytes())
    torn = [e for e in entries if b'"id":"torn-1"' in e]
    assert torn, entries
    # torn-1's final entry half written at the end, as a crash mid-append
    # leaves it; its earlier entries go, so that nothing else names torn-1.
    log.write_bytes(b"".join(e for e in entries if e not in torn) + torn[-1][:40])
    (state / "junk.record.tmp").write_bytes(b"half a record")
    (state / "records.log.tmp").write_bytes(b"half a log")
    (state / "session-0d1e-3.sh").write_bytes(b"echo left by a crash")
    ex2 = execd_factory(state_dir=state)
    assert ex2.status("keep-1")[1]["exit_code"] == 0
    assert ex2.status("torn-1")[0] == 404
    assert "1 torn records skipped" in ex2.stderr_text()
    assert b"torn-1" not in log.read_bytes()  # rewritten without it
    for junk in ("junk.record.tmp", "records.log.tmp", "session-0d1e-3.sh"):
        assert not (state / junk).exists(), junk
    # Appends after the cut decode: a record written now survives a restart.
    ex2.run("echo c", id="after-1")
    assert ex2.stop() == 0
    ex3 = execd_factory(state_dir=state)
    assert ex3.status("after-1")[1]["exit_code"] == 0
    assert " 0 torn records skipped" in ex3.stderr_text()


def _split_entries(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    return [lines[i] + b"\n" + lines[i + 1] + b"\n" for i in range(0, len(lines) - 1, 2)]


def test_record_files_of_an_older_execd_are_taken_into_the_log(execd_factory, tmp_path):
    """Before the records log, each record had its own <id>.record file (the
    same two lines): a state dir from then is reloaded, the files go into the
    log and are removed; a torn one is skipped and counted."""
    state = tmp_path / "state"
    ex = execd_factory(state_dir=state)
    ex.run("echo old", id="old-1")
    assert ex.stop() == 0
    rec = dict(_stored(state)["old-1"])
    (state / "records.log").unlink()
    rec["id"] = "legacy-1"
    (state / "legacy-1.record").write_bytes(_entry(rec))
    (state / "legacy-1.output").write_bytes((state / "old-1.output").read_bytes())
    (state / "legacy-1.index").write_bytes((state / "old-1.index").read_bytes())
    (state / "torn-2.record").write_bytes(_entry(rec)[:40])
    ex2 = execd_factory(state_dir=state)
    st, js = ex2.status("legacy-1")
    assert st == 200 and js["exit_code"] == 0, js
    assert ex2.logs("legacy-1")[2] == b"old\n"
    assert ex2.status("old-1")[0] == 404  # its entry went with the log
    assert "1 torn records skipped" in ex2.stderr_text()
    assert not list(state.glob("*.record"))
    assert "legacy-1" in _stored(state)


def test_expired_records_are_gone_after_a_restart(execd_factory, tmp_path):
    state = tmp_path / "state"
    ex = execd_factory("--retention", "300ms", state_dir=state)
    ex.run("echo old", id="old-1")
    assert ex.stop() == 0
    wait_until(lambda: True, 1)
    ex2 = execd_factory("--retention", "300ms", state_dir=state)
    wait_until(lambda: ex2.status("old-1")[0] == 404, 10 * SLOW, what="the old record to expire")
    wait_until(lambda: not list(state.glob("old-1.*")), 10 * SLOW, what="its files removed")


def test_one_execd_per_state_dir(execd_factory, tmp_path):
    state = tmp_path / "state"
    execd_factory(state_dir=state)
    proc, pump = start_execd(state_dir=state, wait=False)
    assert proc.wait(20 * SLOW) == 1
    pump.join(5)
    assert "in use by another execd" in pump.text()


def _holds_open(pid: int, path: str) -> bool:
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == path for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:  # it exited, or a descriptor closed while we looked
        return False


def test_a_lock_let_go_soon_is_waited_for(tmp_path):
    """A restart right after a SIGKILL can find the lock still held: the dead
    execd's launchers share its descriptors until they die as well. execd
    tries again for a while instead of exiting "in use"."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    lock = str(state / "lock")
    holder = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    proc, pump = start_execd(state_dir=state, wait=False)
    try:
        # It has opened the lock file and found it taken (the holder has it).
        wait_until(lambda: _holds_open(proc.pid, lock) or proc.poll() is not None, 10 * SLOW,
                   what="execd to open the lock file")
        assert proc.poll() is None, pump.text()
    finally:
        os.close(holder)
    assert pump.ready.wait(20 * SLOW) and pump.port is not None, pump.text()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20 * SLOW) == 0


def test_default_state_dir_is_var_lib_execd(tmp_path):
    """Without --state-dir, records go to /var/lib/execd (created 0700). Runs
    only where that directory does not exist yet, and removes it after."""
    default = "/var/lib/execd"
    if os.path.exists(default):
        pytest.skip(f"{default} exists on this machine; not touching it")
    if not os.access(os.path.dirname(default), os.W_OK):
        pytest.skip("cannot create /var/lib/execd here")
    proc = subprocess.Popen([execd_bin(), "--host", "127.0.0.1", "--port", "0", "--insecure-no-auth"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        line = b""
        while b"listening on" not in line:
            line = proc.stderr.readline()
            assert line, "execd exited"
        assert b"state dir /var/lib/execd" in line, line
        assert stat.S_IMODE(os.stat(default).st_mode) == 0o700
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15 * SLOW) == 0
        proc.stderr.close()
        shutil.rmtree(default, ignore_errors=True)


def _open_logs(pid: int) -> list[str]:
    """Retained output and index files execd holds open."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            path = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue  # closed while listing
        if path.endswith((".output", ".index")):
            out.append(path)
    return out


def test_retained_records_hold_no_descriptors(execd_factory, tmp_path):
    """A finished record is kept for --retention (up to 4096 of them), so its
    output and index files must not stay open: 60 records held 120
    descriptors before. Their output stays readable, before and after a
    restart."""
    state = tmp_path / "state"
    ex = execd_factory(state_dir=state)
    runs = {}
    for i in range(60):
        runs[f"fd-{i}"] = ex.run(f"echo out-{i}; echo err-{i} >&2", exact=True, id=f"fd-{i}")
    # Closing is a pool job after the last write.
    wait_until(lambda: not _open_logs(ex.proc.pid), 10 * SLOW, what="log files closed")
    for cid in ("fd-0", "fd-59"):
        i = cid.split("-")[1]
        assert ex.logs(cid)[2] == f"out-{i}\nerr-{i}\n".encode()
        st, h, raw = ex.request("GET", f"/command/{cid}/stream?stdout=0&stderr=0")
        events = parse_stream(raw, True)
        assert reconstruct(events) == (f"out-{i}\n".encode(), f"err-{i}\n".encode())
        assert events[-1]["stdout_sha256"] == runs[cid].terminal["stdout_sha256"]
    assert not _open_logs(ex.proc.pid)  # each read opened and closed its own
    assert ex.stop() == 0

    ex2 = execd_factory(state_dir=state)
    assert not _open_logs(ex2.proc.pid)  # reloaded records open nothing either
    st, h, raw = ex2.request("GET", "/command/fd-30/stream?stdout=4&stderr=0")
    events = parse_stream(raw, True)
    out = [(e["type"], e["offset"], e["text"]) for e in events if e["type"] in ("stdout", "stderr")]
    assert out == [("stdout", 4, "30\n"), ("stderr", 0, "err-30\n")]
    assert ex2.logs("fd-31")[2] == b"out-31\nerr-31\n"
    assert not _open_logs(ex2.proc.pid)


def test_a_burst_of_records_is_all_written_by_a_graceful_stop(execd_factory, tmp_path):
    """Record writes are queued and written in batches: 120 commands that
    end together, then a SIGTERM right away, and every record is on disk."""
    from concurrent.futures import ThreadPoolExecutor

    state = tmp_path / "state"
    ex = execd_factory(state_dir=state)
    ids = [f"burst-{i}" for i in range(120)]
    with ThreadPoolExecutor(40) as pool:
        results = list(pool.map(lambda cid: ex.run(f"echo {cid}", exact=True, id=cid), ids))
    assert all(r.terminal["exit_code"] == 0 for r in results)
    assert ex.stop() == 0
    ex2 = execd_factory(state_dir=state)
    for cid in ids:
        st, js = ex2.status(cid)
        assert st == 200 and js["exit_code"] == 0 and js["running"] is False, (cid, js)
    assert ex2.logs("burst-77")[2] == b"burst-77\n"


def test_the_records_log_is_rewritten_as_records_go(execd_factory, tmp_path):
    """Entries of swept records and older entries of kept ones are dropped
    when the log holds more than twice what is kept: the log stays bounded,
    and a record still kept (a running command) survives every rewrite."""
    state = tmp_path / "state"
    marker = f"rewrite-{uuid.uuid4().hex[:8]}"
    ex = execd_factory("--retention", "200ms", state_dir=state, check_exit=False)
    ex.run(f"exec -a {marker} sleep 1000", id="long-1", background=True)
    # Until the log holds fewer entries than commands ran (a rewrite), as
    # many as it takes on this machine: the threshold follows how many
    # records the 200 ms retention keeps.
    n = 0
    entries = lambda: sum(1 for line in (state / "records.log").read_bytes().split(b"\n")  # noqa: E731
                          if line.startswith(b"{"))
    while n < 3000 and (n == 0 or entries() >= n):
        for i in range(n, n + 100):
            assert ex.run("true", id=f"c-{i}").terminal["exit_code"] == 0
        n += 100
        wait_until(lambda: f"c-{n - 1}" in _stored(state), 10 * SLOW, what="the last record written")
    assert entries() < n, f"{entries()} entries for {n} commands: never rewritten"
    stored = _stored(state)
    assert "long-1" in stored and "c-0" not in stored
    wait_until(lambda: stored["long-1"].get("start_ticks") or _stored(state)["long-1"].get("start_ticks"),
               10 * SLOW, what="long-1's start ticks")
    ex.proc.send_signal(signal.SIGKILL)
    ex.proc.wait()
    ex2 = execd_factory(state_dir=state)
    wait_until(lambda: not pids_with_cmdline(marker), 10 * SLOW, what="the lost command ended")
    st, js = ex2.status("long-1")
    assert st == 200 and js["lost"] is True, js
    assert ex2.status(f"c-{n - 1}")[0] == 200
    assert ex2.status("c-0")[0] == 404


def _unsaved(ex) -> tuple[int, int]:
    st, h, _ = ex.request("GET", "/ping", token=False)
    return int(h["x-execd-unsaved-records"]), int(h["x-execd-unsaved-journal"])


@pytest.mark.parametrize("freed_before", ["the retry", "a graceful stop"])
def test_a_disk_that_fills_and_frees_never_turns_finished_commands_into_lost(freed_before):
    # The hardening issue: a background command runs, the state directory's
    # disk fills, three commands finish with exit 0, space is freed, execd is
    # stopped gracefully and started again: they came back `lost` (or unknown)
    # and the journal gained entries saying so. A record or journal write the
    # disk refuses is kept and retried, when space returns and at exit.
    from files_fixtures import tiny_tmpfs
    with tiny_tmpfs("2m") as state:
        ex = start_execd(state_dir=state)
        try:
            st, _, _ = ex.request("POST", "/command", {"id": "bg", "command": "sleep 300", "background": True})
            assert st == 200
            wait_until(lambda: "bg" in _stored(Path(state)), 10 * SLOW, 0.02,
                       "the background command's record")
            filler = os.path.join(state, "filler")
            subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True)
            # Files keep the slack of their last page: commands until the
            # records log runs out of it too (a few).
            runs = 0
            while runs < 3 or _unsaved(ex)[0] == 0:
                assert runs < 40, "the records log never ran out of space"
                r = ex.run(f"echo run {runs}", id=f"done-{runs}", exact=True)
                assert r.terminal["exit_code"] == 0
                runs += 1
            assert _unsaved(ex)[1] > 0
            os.unlink(filler)
            if freed_before == "the retry":
                wait_until(lambda: _unsaved(ex) == (0, 0), 10 * SLOW, 0.1, "the waiting writes to go out")
            assert ex.request("DELETE", "/command?id=bg")[0] == 200
            ex.wait_finished("bg")
        finally:
            assert ex.stop() == 0, ex.stderr_text()[-2000:]
        again = start_execd(state_dir=state)
        try:
            for i in range(runs):
                st, js = again.status(f"done-{i}")
                assert st == 200, (i, js)
                assert js["running"] is False and js["exit_code"] == 0 and "lost" not in js, js
            st, js = again.status("bg")
            assert st == 200 and js["running"] is False and "lost" not in js and js["interrupted"] is True, js
            st, h, raw = again.request("GET", "/journal")
            entries = [json.loads(l) for l in raw.split(b"\n") if l]
            mine = {e["id"]: e for e in entries if e.get("type") == "command"}
            for i in range(runs):
                assert mine[f"done-{i}"]["result"]["exit_code"] == 0 and mine[f"done-{i}"]["result"]["lost"] is False
            assert not [e for e in entries if e.get("result", {}).get("lost")], "nothing was lost"
            assert again.request("GET", "/journal/verify")[2].startswith(b'{"ok":true')
            assert _unsaved(again) == (0, 0)
        finally:
            assert again.stop() == 0
