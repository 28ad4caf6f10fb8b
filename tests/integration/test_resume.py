"""Idempotent starts and resumable streams (issue 13): POST /command with a
client id, and GET /command/{id}/stream?stdout=&stderr= replaying retained
output from byte offsets and following live."""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time

import pytest

from execd_client import SLOW, pids_with_cmdline, reconstruct, parse_stream, wait_until
from resume_helpers import EventReader, collect, reset


def test_200mib_stream_survives_random_socket_kills(execd_factory):
    """The client's socket is killed (RST) at random points of a 200 MiB
    stream; each time it resumes from the bytes it has, until the reassembled
    stdout hashes to the terminal event's stdout_sha256."""
    ex = execd_factory("--log-limit", str(256 << 20))
    rng = random.Random(1313)
    total = 200 << 20
    # Where each connection is killed, in bytes of its event stream.
    cuts = [rng.randrange(1 << 20, 60 << 20) for _ in range(6)]
    bufs = {"stdout": bytearray(), "stderr": bytearray()}
    reader = EventReader(ex, "POST", "/command", {"command": f"head -c {total} /dev/urandom", "id": "big-1"})
    terminal = None
    reconnects = 0
    while terminal is None:
        limit = cuts[reconnects] if reconnects < len(cuts) else None

        def until_cut(events):
            for ev in events:
                yield ev
                if limit is not None and reader.bytes_read >= limit:
                    return
        assert reader.resp.status == 200
        first = True
        for ev in until_cut(reader.events()):
            if first:
                assert ev["type"] == "init" and ev["text"] == "big-1", ev
                first = False
            terminal = collect([ev], bufs)
            if terminal:
                break
        if terminal:
            break
        reader.kill()
        reconnects += 1
        assert reconnects <= len(cuts) + 1, "the stream ended without a terminal event"
        reader = EventReader(ex, "GET", f"/command/big-1/stream?stdout={len(bufs['stdout'])}"
                                        f"&stderr={len(bufs['stderr'])}")
    reader.close()
    assert terminal["type"] == "execution_complete", terminal
    assert terminal["exit_code"] == 0
    assert terminal["stdout_bytes"] == total == len(bufs["stdout"])
    assert hashlib.sha256(bufs["stdout"]).hexdigest() == terminal["stdout_sha256"]
    assert reconnects >= 1


def test_resumed_terminal_event_equals_the_original(execd):
    r = execd.run("printf 'a%.0s' $(seq 1 5000); echo err >&2; exit 3", exact=True, id="term-1")
    orig = r.terminal
    st, h, raw = execd.request("GET", "/command/term-1/stream?stdout=4000&stderr=4")
    assert st == 200 and h["content-type"].startswith("application/x-ndjson")
    events = parse_stream(raw, True)
    assert events[0]["type"] == "init" and events[0]["text"] == "term-1"
    outs = [e for e in events if e["type"] == "stdout"]
    assert outs and outs[0]["offset"] == 4000
    assert not [e for e in events if e["type"] == "stderr"]
    strip = lambda e: {k: v for k, v in e.items() if k != "timestamp"}  # noqa: E731
    assert strip(events[-1]) == strip(orig)


def test_same_id_same_request_attaches_in_both_framings(execd):
    body = {"command": "echo one; sleep 0.3; echo two", "id": "attach-1"}
    first = EventReader(execd, "POST", "/command", body)
    it = first.events()
    assert next(it)["type"] == "init"
    # Attach while it runs: the same events from the start, live.
    second = execd.run(exact=True, **body)
    assert second.status == 200 and second.id == "attach-1"
    assert second.stdout == b"one\ntwo\n"
    bufs = {"stdout": bytearray(), "stderr": bytearray()}
    t1 = collect(it, bufs)
    first.close()
    assert bytes(bufs["stdout"]) == second.stdout
    assert t1["stdout_sha256"] == second.terminal["stdout_sha256"]
    # After it finished, in compat framing: same lines, same result.
    third = execd.run(**body)
    assert third.status == 200 and third.id == "attach-1"
    assert third.texts("stdout") == ["one", "two"]
    assert third.terminal["stdout_sha256"] == t1["stdout_sha256"]


def test_same_id_different_request_is_409_and_bad_ids_400(execd):
    assert execd.run("true", id="conflict-1").status == 200
    st, js = execd.json("POST", "/command", {"command": "false", "id": "conflict-1"})
    assert st == 409 and js["code"] == "COMMAND_ID_CONFLICT", js
    st, js = execd.json("POST", "/command", {"command": "true", "id": "conflict-1", "timeout": 5000})
    assert st == 409
    for bad in ["", "a b", "a/b", "x" * 129, "é", 5]:
        st, js = execd.json("POST", "/command", {"command": "true", "id": bad})
        assert st == 400, (bad, js)
    assert execd.request("POST", "/command", {"command": "true", "id": "x" * 128})[0] == 200


def test_fifty_concurrent_starts_with_one_id_run_once(execd, tmp_path):
    marker = tmp_path / "runs"
    body = {"command": f"echo run >> {marker}; sleep 0.3; echo done", "id": "once-1", "cwd": str(tmp_path)}
    results, errors = [], []

    def start():
        try:
            results.append(execd.run(exact=True, **body))
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=start) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60 * SLOW)
    assert not errors, errors[:3]
    assert len(results) == 50
    assert all(r.status == 200 and r.id == "once-1" for r in results)
    assert {r.stdout for r in results} == {b"done\n"}
    assert {r.terminal["stdout_sha256"] for r in results} == {results[0].terminal["stdout_sha256"]}
    assert marker.read_text() == "run\n"


def test_attach_to_a_background_command(execd):
    body = {"command": "sleep 0.2; echo bg", "id": "bg-1", "background": True}
    r1 = execd.run(exact=True, **body)
    r2 = execd.run(exact=True, **body)
    assert [e["type"] for e in r1.events] == [e["type"] for e in r2.events] == ["init", "ping", "execution_complete"]
    st, h, raw = execd.request("GET", "/command/bg-1/stream")
    events = parse_stream(raw, True)
    assert reconstruct(events)[0] == b"bg\n"
    assert events[-1]["type"] == "execution_complete" and events[-1]["exit_code"] == 0


def stdout_from(events: list[dict], offset: int) -> bytes:
    """The stdout of exact-framing events that start at `offset`, checking
    that the chunks are contiguous."""
    out = bytearray()
    for e in events:
        if e["type"] == "stdout":
            assert e["offset"] == offset + len(out), (e["offset"], offset, len(out))
            out += e["text"].encode()
    return bytes(out)


def test_gap_event_after_init_when_the_offset_fell_out_of_the_log(execd_factory):
    # The log keeps the newest --log-limit bytes: a reader from an offset that
    # fell out gets one gap (after init, before any output), then every byte
    # from the first retained one through the end, then the terminal event.
    ex = execd_factory("--log-limit", "1000")
    r = ex.run("head -c 100000 /dev/zero | tr '\\0' x", exact=True, id="gap-1")
    assert r.terminal["stdout_bytes"] == 100000
    st, h, raw = ex.request("GET", "/command/gap-1/stream?stdout=5000")
    events = parse_stream(raw, True)
    assert [e["type"] for e in events[:3]] == ["init", "ping", "gap"]
    gap = events[2]
    first = gap["available_from"]
    assert gap["stream"] == "stdout" and gap["requested"] == 5000 and 99000 <= first < 100000, gap
    assert stdout_from(events, first) == b"x" * (100000 - first)
    assert [e for e in events if e["type"] == "gap"] == [gap]
    assert events[-1]["type"] == "execution_complete" and events[-1]["stdout_bytes"] == 100000
    # From a retained offset: no gap, the rest of the output.
    st, h, raw = ex.request("GET", "/command/gap-1/stream?stdout=99900")
    events = parse_stream(raw, True)
    assert not [e for e in events if e["type"] == "gap"]
    assert stdout_from(events, 99900) == b"x" * 100
    # /logs keeps its cursor meaning for what is retained: the tail, from the
    # first retained byte at most --log-limit of it.
    st, h, body = ex.logs("gap-1")
    assert st == 200 and body == b"x" * (100000 - first) and len(body) <= 1000
    assert h.get("execd-commands-log-truncated") == "true"


def test_bad_offsets_and_unknown_ids(execd):
    execd.run("echo hi", id="off-1")
    for q in ["stdout=-1", "stdout=abc", "stderr=1.5", "stdout=4"]:
        st, js = execd.json("GET", f"/command/off-1/stream?{q}")
        assert st == 400, (q, js)
    assert execd.request("GET", "/command/off-1/stream?stdout=3")[0] == 200
    assert execd.request("GET", "/command/nope/stream")[0] == 404


def test_a_reader_that_does_not_read_never_slows_the_command(execd):
    """Several readers; one stalls. The command runs to the end at full speed
    (its output fits the retained log), then the stalled reader catches up."""
    size = 32 << 20
    cmd = f"sleep 0.2; head -c {size} /dev/zero | tr '\\0' a"
    execd.run(cmd, id="fan-1", background=True)
    stalled = EventReader(execd, "GET", "/command/fan-1/stream")
    assert stalled.resp.status == 200
    other = execd.run(exact=False, command=cmd, id="fan-1", background=True)
    assert other.status == 200
    # Another reader reads everything while the first one sits on its socket.
    st, h, raw = execd.request("GET", "/command/fan-1/stream", timeout=60)
    full = parse_stream(raw, True)
    assert reconstruct(full)[0] == b"a" * size
    js = execd.wait_finished("fan-1", 30)
    assert js["stdout_bytes"] == size
    bufs = {"stdout": bytearray(), "stderr": bytearray()}
    term = collect(stalled.events(), bufs)
    stalled.close()
    assert len(bufs["stdout"]) == size and term["stdout_sha256"] == full[-1]["stdout_sha256"]


def test_readers_that_reset_at_each_phase(execd):
    """Pending (before the command started), right after the head, mid-replay,
    while live: the daemon and the command carry on."""
    execd.run("sleep 0.5; head -c 3000000 /dev/zero; sleep 0.5; echo end", id="rst-1", background=True)
    for phase in range(4):
        r = EventReader(execd, "GET", "/command/rst-1/stream")
        if phase >= 1:
            r.resp.readline()
        if phase >= 2:
            r.resp.read(100000)
        r.kill()
    js = execd.wait_finished("rst-1", 30)
    assert js["exit_code"] == 0 and js["stdout_bytes"] == 3000004
    # A start with the same id whose client resets before any byte.
    c = EventReader(execd, "POST", "/command", {"command": "sleep 0.2; echo x", "id": "rst-2"})
    c.kill()
    js = execd.wait_finished("rst-2", 30)
    assert js["exit_code"] == 0
    st, h, raw = execd.request("GET", "/command/rst-2/stream")
    assert reconstruct(parse_stream(raw, True))[0] == b"x\n"


def test_new_routes_need_the_token(execd):
    execd.run("true", id="tok-1")
    for method, path in [("GET", "/command/tok-1/stream"), ("POST", "/command/tok-1/stdin"),
                         ("GET", "/journal"), ("GET", "/journal/verify")]:
        st, h, body = execd.request(method, path, token=False)
        assert st == 401, (method, path, st)


def test_bash_session_run_resumes_after_its_client_left(execd):
    st, js = execd.json("POST", "/session", {})
    sid = js["session_id"]
    body = {"command": "echo one; sleep 0.5; echo two; echo err >&2"}
    r = EventReader(execd, "POST", f"/session/{sid}/run", body)
    run_id = r.resp.getheader("EXECD-RUN-ID")
    assert run_id == f"{sid}.1"
    it = r.events()
    assert next(it)["type"] == "init"
    r.kill()  # the client leaves; the run goes on and keeps its output
    js = execd.wait_finished(run_id)
    assert js["exit_code"] == 0 and js["stdout_bytes"] == 8
    st, h, raw = execd.request("GET", f"/session/{sid}/stream?stdout=4")
    events = parse_stream(raw, True)
    outs = [e for e in events if e["type"] == "stdout"]
    assert outs[0]["offset"] == 4 and "".join(e["text"] for e in outs) == "two\n"
    term = events[-1]
    assert term["type"] == "execution_complete" and term["stdout_bytes"] == 8
    assert term["stdout_sha256"] == hashlib.sha256(b"one\ntwo\n").hexdigest()
    st, h, raw = execd.request("GET", f"/command/{run_id}/stream")
    assert reconstruct(parse_stream(raw, True)) == (b"one\ntwo\n", b"err\n")
    # A second run gets the next id; the session stream follows the latest.
    res = execd.request("POST", f"/session/{sid}/run", {"command": "echo three"})
    assert res[1]["execd-run-id"] == f"{sid}.2"
    st, h, raw = execd.request("GET", f"/session/{sid}/stream")
    assert reconstruct(parse_stream(raw, True))[0] == b"three\n"
    assert execd.request("GET", "/session/nope/stream")[0] == 404


def test_a_session_run_is_an_execution_status_interrupt_and_journal(execd):
    st, js = execd.json("POST", "/session", {})
    sid = js["session_id"]
    r = EventReader(execd, "POST", f"/session/{sid}/run", {"command": "echo begun; sleep 300"})
    run_id = r.resp.getheader("EXECD-RUN-ID")
    it = r.events()
    while (ev := next(it))["type"] != "stdout":
        pass
    st, js = execd.status(run_id)
    assert st == 200 and js["kind"] == "session_run" and js["session"] == sid and js["running"] is True
    # DELETE by the run's own id stops it (the shell survives).
    st, _, body = execd.request("DELETE", f"/command?id={run_id}")
    assert st == 200, body
    term = [e for e in it if e["type"] == "execution_complete"][0]
    assert term["interrupted"] is True
    r.close()
    js = execd.wait_finished(run_id)
    assert js["interrupted"] is True
    res = execd.request("POST", f"/session/{sid}/run", {"command": "echo still here"})
    assert res[0] == 200 and b"still here" in res[2]
    st, h, jraw = execd.request("GET", "/journal")
    runs = [json.loads(l) for l in jraw.split(b"\n") if l and json.loads(l).get("type") == "session_run"]
    mine = [e for e in runs if e["id"] == run_id]
    assert len(mine) == 1 and mine[0]["session"] == sid and mine[0]["result"]["interrupted"] is True
