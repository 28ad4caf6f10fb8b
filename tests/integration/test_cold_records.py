"""Finished executions that nothing uses go cold (exec/cold_records): the
registry keeps their record and lets go of their objects, and warms them
again when a request asks. Every answer must be the same either way. The
daemon cools at a housekeeping tick (once a second) when no client is
connected, which these tests wait for through /ping's X-Execd-Cold-Records
header (each request here is a connection of its own; a tick that finds
one of them connected cools only what finished --cold-after ago)."""

from __future__ import annotations

import json
import socket
import uuid

from execd_client import SLOW, parse_stream, pids_with_cmdline, reconstruct, wait_until


def _cold(ex) -> int:
    st, h, _ = ex.request("GET", "/ping", token=False)
    return int(h["x-execd-cold-records"])


def _listing(ex) -> dict:
    st, js = ex.json("GET", "/command?content=true&limit=1000")
    assert st == 200
    return {c["id"]: c for c in js["commands"]}


def _answers(ex, cid) -> tuple:
    """Everything a client can ask of a finished execution."""
    st, status = ex.status(cid)
    assert st == 200, status
    logs = ex.logs(cid)
    logs_at = ex.logs(cid, cursor=3)
    at = min(2, status["stdout_bytes"])
    st, h, raw = ex.request("GET", f"/command/{cid}/stream?stdout={at}&stderr=0")
    assert st == 200
    events = [e for e in parse_stream(raw, True) if e["type"] != "ping"]
    for e in events:
        e.pop("timestamp", None)
    keep = ("execd-commands-tail-cursor", "execd-commands-log-truncated")
    heads = lambda h: {k: v for k, v in h.items() if k in keep}  # noqa: E731
    return status, (logs[0], logs[2], heads(logs[1])), (logs_at[0], logs_at[2], heads(logs_at[1])), events


def test_cold_executions_answer_as_warm_ones_did(execd_factory):
    ex = execd_factory()
    marker = f"cold-{uuid.uuid4().hex[:8]}"
    ids = {
        "plain": ex.run("printf 'line one\\nline two\\n'; echo oops >&2; exit 3", exact=True, id="c-plain"),
        "empty": ex.run("true", exact=True, id="c-empty"),
        "signal": ex.run("kill -TERM $$", exact=True, id="c-signal"),
        "binary": ex.run("head -c 3000 /dev/urandom | base64 -w0; printf '\\r\\n\\n'", exact=True, id="c-bin"),
    }
    # One that leaves a process behind stays warm while it runs.
    ex.run(f"(exec -a {marker} sleep 1000) & echo started", exact=True, id="c-left")
    wait_until(lambda: pids_with_cmdline(marker), 10 * SLOW, what="the process left behind")
    before = {cid: _answers(ex, cid) for cid in ("c-plain", "c-empty", "c-signal", "c-bin")}
    listed = _listing(ex)
    wait_until(lambda: _cold(ex) == 4, 10 * SLOW, what="four records cold")
    st, left = ex.status("c-left")
    assert left["processes_running"] == 1
    # Listing does not warm them.
    assert _listing(ex) == listed
    assert _cold(ex) == 4
    for cid, answers in before.items():
        assert _answers(ex, cid) == answers, cid
    assert before["c-plain"][0]["exit_code"] == 3
    assert before["c-plain"][3][-1]["stdout_bytes"] == len("line one\nline two\n")
    # Warmed by those requests, cold again once nobody is connected.
    wait_until(lambda: _cold(ex) == 4, 10 * SLOW, what="cold again")
    assert ex.request("DELETE", "/command?id=c-left")[0] == 200
    wait_until(lambda: not pids_with_cmdline(marker), 10 * SLOW, what="the process left behind ended")
    wait_until(lambda: _cold(ex) == 5, 10 * SLOW, what="the fifth one cold")
    st, left = ex.status("c-left")
    assert left["processes_running"] == 0 and left["exit_code"] == 0
    # A retried start of a cold one attaches to it (the same fingerprint).
    again = ex.run("true", exact=True, id="c-empty")
    assert again.terminal["exit_code"] == 0


def test_a_client_that_leaves_mid_stream_of_a_cold_execution(execd_factory):
    ex = execd_factory()
    big = ex.run("head -c 4000000 /dev/zero | base64", exact=True, id="c-big")
    assert big.terminal["exit_code"] == 0
    wait_until(lambda: _cold(ex) == 1, 10 * SLOW, what="cold")
    for phase in ("headers", "some bytes"):
        s = socket.create_connection((ex.host, ex.port), timeout=10 * SLOW)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        req = (f"GET /command/c-big/stream?stdout=0&stderr=0 HTTP/1.1\r\nHost: x\r\n"
               f"X-EXECD-ACCESS-TOKEN: {ex.token}\r\n\r\n").encode()
        if phase == "headers":
            s.sendall(req[:20])
        else:
            s.sendall(req)
            assert s.recv(1000)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()  # a reset
        wait_until(lambda: _cold(ex) == 1, 10 * SLOW, what=f"cold again after a reset at {phase}")
    st, h, raw = ex.request("GET", "/command/c-big/stream?stdout=0&stderr=0", timeout=60 * SLOW)
    events = parse_stream(raw, True)
    out, err = reconstruct(events)
    assert len(out) == big.terminal["stdout_bytes"] and events[-1]["stdout_sha256"] == big.terminal["stdout_sha256"]
    assert ex.request("GET", "/command/status/c-big", token=False)[0] == 401


def test_cold_records_are_swept_with_their_files(execd_factory, tmp_path):
    state = tmp_path / "state"
    ex = execd_factory("--max-records", "3", state_dir=state)
    for i in range(3):
        ex.run(f"echo {i}", id=f"s-{i}")
    wait_until(lambda: _cold(ex) == 3, 10 * SLOW, what="three cold")
    assert (state / "s-0.output").exists()
    for i in range(3, 5):
        ex.run(f"echo {i}", id=f"s-{i}")
    # The oldest go, cold or not, and their files with them.
    wait_until(lambda: ex.status("s-1")[0] == 404, 10 * SLOW, what="s-1 swept")
    assert ex.status("s-0")[0] == 404
    wait_until(lambda: not (state / "s-1.output").exists() and not (state / "s-1.index").exists(),
               10 * SLOW, what="s-1's files removed")
    assert not (state / "s-0.output").exists()
    assert [ex.status(f"s-{i}")[1]["exit_code"] for i in range(2, 5)] == [0, 0, 0]
    assert ex.logs("s-2")[2] == b"2\n"
    # After a restart the cold ones are there (the records log kept them).
    wait_until(lambda: _cold(ex) == 3, 10 * SLOW, what="three cold")
    assert ex.stop() == 0
    ex2 = execd_factory("--max-records", "3", state_dir=state)
    assert ex2.logs("s-3")[2] == b"3\n"
    assert ex2.status("s-3")[1]["reloaded"] is True
    wait_until(lambda: _cold(ex2) == 3, 10 * SLOW, what="three cold after the restart")
    assert ex2.status("s-4")[1]["reloaded"] is True  # warmed from cold, still what a restart said


def test_cold_records_expire_with_their_files(execd_factory, tmp_path):
    state = tmp_path / "state"
    # --cold-after 0s: a tick cools it even while a poll below is connected
    # (otherwise only a tick with no client connected would, and the polls
    # themselves could take every tick before it expired).
    ex = execd_factory("--retention", f"{int(3 * SLOW)}s", "--cold-after", "0s", state_dir=state)
    ex.run("echo bye", id="x-1")
    wait_until(lambda: _cold(ex) == 1, 10 * SLOW, what="cold")
    assert (state / "x-1.output").exists()
    wait_until(lambda: _cold(ex) == 0, 20 * SLOW, what="expired")
    assert ex.status("x-1")[0] == 404
    wait_until(lambda: not list(state.glob("x-1.*")), 10 * SLOW, what="its files removed")
    assert json.loads(ex.request("GET", "/command")[2])["commands"] == []


def test_requests_racing_the_cooling_always_answer_the_same(execd_factory):
    """--cold-after 0s: every tick cools whatever nobody uses at that moment,
    while eight clients keep asking for the same executions (status, logs,
    whole streams, streams reset half-way, listing pages), so warming,
    reading and cooling interleave. Every answer must be the one the run
    gave."""
    import random
    import threading
    import time

    ex = execd_factory("--cold-after", "0s")
    want = {}
    for i in range(40):
        r = ex.run(f"seq 1 {i * 300}; echo err-{i} >&2; exit {i % 7}", exact=True, id=f"st-{i}")
        want[f"st-{i}"] = (r.stdout, r.stderr, r.terminal["exit_code"], r.terminal["stdout_sha256"])
    failures: list[str] = []
    counts = {"status": 0, "logs": 0, "stream": 0, "reset": 0, "list": 0}
    stop = time.monotonic() + 4 * SLOW

    def client(seed):
        rng = random.Random(seed)
        while time.monotonic() < stop and not failures:
            cid = f"st-{rng.randrange(40)}"
            out, err, code, sha = want[cid]
            op = rng.choice(list(counts))
            try:
                if op == "status":
                    st, js = ex.status(cid)
                    ok = st == 200 and js["exit_code"] == code and js["stdout_sha256"] == sha
                elif op == "logs":
                    st, h, body = ex.logs(cid)
                    ok = st == 200 and body == out + err
                elif op == "stream":
                    st, h, raw = ex.request("GET", f"/command/{cid}/stream?stdout=0&stderr=0")
                    events = parse_stream(raw, True)
                    ok = st == 200 and reconstruct(events) == (out, err) and events[-1]["stdout_sha256"] == sha
                elif op == "reset":
                    s = socket.create_connection((ex.host, ex.port), timeout=10 * SLOW)
                    s.sendall((f"GET /command/{cid}/stream?stdout=0&stderr=0 HTTP/1.1\r\nHost: x\r\n"
                               f"X-EXECD-ACCESS-TOKEN: {ex.token}\r\n\r\n").encode())
                    ok = bool(s.recv(100))
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    s.close()
                else:
                    listed = _listing(ex)
                    ok = all(listed[c]["exit_code"] == want[c][2] for c in want)
                counts[op] += 1
                if not ok:
                    failures.append(f"{op} {cid}")
            except Exception as e:  # noqa: BLE001
                failures.append(f"{op} {cid}: {e!r}")

    cold_seen = []

    def sampler():
        while time.monotonic() < stop:
            cold_seen.append(_cold(ex))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)] + [threading.Thread(target=sampler)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:5]
    assert all(counts.values()), counts
    # It did cool while they asked (clients connected all along).
    assert max(cold_seen) > 0 and min(cold_seen) < 40, (min(cold_seen), max(cold_seen))
    assert ex.ping() == 200
    wait_until(lambda: _cold(ex) == 40, 10 * SLOW, what="all cold once the clients are gone")
