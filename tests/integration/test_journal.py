"""The execution journal (issue 13): GET /journal, GET /journal/verify,
tampering, rotation."""

from __future__ import annotations

import os
import hashlib
import json

from execd_client import SLOW, wait_until
from resume_helpers import EventReader, reset


def entries(ex, since=None):
    st, h, raw = ex.request("GET", "/journal" + (f"?since={since}" if since is not None else ""))
    assert st == 200 and h["content-type"].startswith("application/x-ndjson")
    return [json.loads(l) for l in raw.splitlines() if l]


def test_commands_and_files_prove_themselves(execd, tmp_path):
    target = tmp_path / "out.txt"
    r = execd.run(f"printf 'result' > {target}; echo tests passed", exact=True, id="j-1")
    st, h, body = execd.request("POST", "/files/replace",
                                {str(target): {"old": "result", "new": "RESULT"}})
    assert st == 200
    wait_until(lambda: len(entries(execd)) == 2, 10 * SLOW, what="two journal entries")
    cmd, change = entries(execd)
    assert cmd["seq"] == 1 and cmd["prev"] == "0" * 64
    assert cmd["type"] == "command" and cmd["id"] == "j-1" and cmd["command"].startswith("printf")
    assert cmd["result"]["exit_code"] == 0
    assert cmd["result"]["stdout_sha256"] == r.terminal["stdout_sha256"] == hashlib.sha256(b"tests passed\n").hexdigest()
    assert change["type"] == "file" and change["op"] == "replace"
    assert change["files"] == [{**change["files"][0], "path": str(target), "exists": True, "size": 6,
                                "sha256": hashlib.sha256(b"RESULT").hexdigest()}]
    raw_lines = open(journal_path(execd), "rb").read().splitlines()
    assert change["prev"] == hashlib.sha256(raw_lines[0]).hexdigest()
    assert entries(execd, since=1) == [change]
    assert execd.json("GET", "/journal/verify") == (200, {"ok": True, "entries": 2, "first_seq": 1, "last_seq": 2,
                                                          "head": hashlib.sha256(raw_lines[1]).hexdigest()})
    for bad in ["-1", "x"]:
        assert execd.request("GET", f"/journal?since={bad}")[0] == 400


def test_follow_streams_new_entries_live(execd):
    execd.run("true", id="f-0")
    r = EventReader(execd, "GET", "/journal?since=1&follow=true")
    assert r.resp.status == 200
    execd.run("echo live", id="f-1")
    it = r.events()
    e = next(it)
    assert e["seq"] == 2 and e["id"] == "f-1"
    execd.run("true", id="f-2")
    assert next(it)["id"] == "f-2"
    r.kill()
    # A follower that resets does not disturb writers.
    execd.run("true", id="f-3")
    assert [e["id"] for e in entries(execd)] == ["f-0", "f-1", "f-2", "f-3"]


def journal_path(ex):
    return f"{ex.state_dir}/journal.jsonl"


def test_verify_names_the_edited_entry(execd):
    for i in range(5):
        execd.run(f"echo {i}", id=f"e-{i}")
    wait_until(lambda: len(entries(execd)) == 5, 10 * SLOW, what="five entries")
    path = journal_path(execd)
    original = open(path, "rb").read()
    lines = original.split(b"\n")
    lines[2] = lines[2].replace(b'"exit_code":0', b'"exit_code":1')
    open(path, "wb").write(b"\n".join(lines))
    st, js = execd.json("GET", "/journal/verify")
    assert js["ok"] is False and js["broken_at"] == 3, js
    # Deleting an entry.
    lines = original.split(b"\n")
    del lines[1]
    open(path, "wb").write(b"\n".join(lines))
    st, js = execd.json("GET", "/journal/verify")
    assert js["ok"] is False and js["broken_at"] == 2, js
    # Truncating the tail: the writer knows what it wrote last.
    open(path, "wb").write(b"\n".join(original.split(b"\n")[:3]) + b"\n")
    st, js = execd.json("GET", "/journal/verify")
    assert js["ok"] is False and js["broken_at"] == 4, js
    # Cutting mid-line.
    open(path, "wb").write(original[:len(original) - 40])
    st, js = execd.json("GET", "/journal/verify")
    assert js["ok"] is False and js["broken_at"] == 5, js
    open(path, "wb").write(original)
    assert execd.json("GET", "/journal/verify")[1]["ok"] is True


def test_rotation_keeps_the_chain(execd_factory):
    ex = execd_factory("--journal-max-bytes", "4096")
    for i in range(30):
        ex.run("true", id=f"rot-{i:02d}")
    old = f"{ex.state_dir}/journal.1.jsonl"
    wait_until(lambda: len(entries(ex)) > 0 and entries(ex)[-1]["id"] == "rot-29", 10 * SLOW, what="last entry")
    old_lines = open(old, "rb").read().splitlines()
    new_lines = open(journal_path(ex), "rb").read().splitlines()
    assert old_lines and new_lines
    assert json.loads(new_lines[0])["prev"] == hashlib.sha256(old_lines[-1]).hexdigest()
    got = entries(ex)
    seqs = [e["seq"] for e in got]
    assert seqs == list(range(seqs[0], 31)) and seqs[0] > 1  # the oldest rotated away
    st, js = ex.json("GET", "/journal/verify")
    assert js["ok"] is True and js["last_seq"] == 30 and js["entries"] == len(got), js
    # Tampering in the rotated file is caught as well.
    data = open(old, "rb").read()
    open(old, "wb").write(data.replace(b'"rot-', b'"ROT-', 1))
    st, js = ex.json("GET", "/journal/verify")
    assert js["ok"] is False and js["broken_at"] == seqs[0], js


def test_no_journal_flag(execd_factory):
    ex = execd_factory("--no-journal")
    ex.run("true")
    assert ex.request("GET", "/journal")[0] == 404
    assert ex.request("GET", "/journal/verify")[0] == 404


def test_journal_readers_that_reset_at_each_phase(execd_factory):
    """Catching up from a large journal, right after the head, while
    following, and verify: each client resets; writers and the chain carry on."""
    ex = execd_factory("--journal-max-bytes", str(1 << 20))
    for i in range(200):
        ex.run("true", id=f"many-{i:03d}")
    for phase in range(3):
        r = EventReader(ex, "GET", "/journal?follow=true")
        if phase >= 1:
            r.resp.readline()
        if phase >= 2:
            r.resp.read(30000)
        r.kill()
    import socket as _s
    s = _s.create_connection((ex.host, ex.port))
    s.sendall(f"GET /journal/verify HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: {ex.token}\r\n\r\n".encode())
    reset(s)
    ex.run("true", id="after")
    wait_until(lambda: entries(ex, since=200) and entries(ex, since=200)[0]["id"] == "after", 10 * SLOW,
               what="the entry after the resets")
    assert ex.json("GET", "/journal/verify")[1]["ok"] is True


def test_slow_followers_hold_no_memory_and_catch_up_from_where_they_are(execd_factory):
    # The hardening issue: 40 followers that fell behind while 150 commands
    # ran grew execd by 156-232 MiB: every catch-up (one per drained socket)
    # read both journal files whole into memory to hand out at most 1 MiB,
    # and together they took the whole threadpool. A catch-up now reads at
    # most 1 MiB from where its position lies, through the file gate.
    import socket
    import threading
    import time
    from execd_client import SANITIZED, TOKEN_HEADER, vm_rss_kib
    env = dict(os.environ)
    env.pop("EXECD_ACCESS_TOKEN", None)
    if SANITIZED:  # ASan's quarantine (256 MB by default) would look like growth
        env["ASAN_OPTIONS"] = ":".join(o for o in (env.get("ASAN_OPTIONS", ""), "quarantine_size_mb=16") if o)
    ex = execd_factory(env=env)
    filler = "x" * 4000  # big entries: a journal of about 8 MiB, read whole by each follower before the fix
    for i in range(1000):
        assert ex.request("POST", "/command", {"command": f"true # {filler}", "background": True})[0] == 200
    wait_until(lambda: len(entries(ex, since=990)) >= 10, 60 * SLOW, 0.1, "the journal to fill")
    rss0 = vm_rss_kib(ex.pid)
    socks, stop, got = [], threading.Event(), [0] * 40
    kept = bytearray()  # what follower 0 reads, to check at the end
    for _ in range(40):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((ex.host, ex.port))
        s.sendall(f"GET /journal?since=0&follow=true HTTP/1.1\r\nHost: t\r\n{TOKEN_HEADER}: {ex.token}\r\n\r\n".encode())
        s.settimeout(0.01)
        socks.append(s)

    def trickle(i, s):  # a slow reader: 4 KiB now and then
        while not stop.is_set():
            try:
                piece = s.recv(4096)
                got[i] += len(piece)
                if i == 0:
                    kept.extend(piece)
            except (socket.timeout, BlockingIOError):
                pass
            time.sleep(0.005)
    threads = [threading.Thread(target=trickle, args=(i, s), daemon=True) for i, s in enumerate(socks)]
    for t in threads:
        t.start()
    peak = rss0
    for i in range(150):
        r = ex.run(f"echo more {i} # {filler}", exact=True)
        assert r.terminal["exit_code"] == 0
        peak = max(peak, vm_rss_kib(ex.pid))
    stop.set()
    for t in threads:
        t.join()
    grown = peak - rss0
    print(f"40 slow followers, 150 commands: RSS +{grown >> 10} MiB, followers read {sum(got) >> 20} MiB")
    # Each follower may hold its connection's write budget (1 MiB above the
    # low-water mark, and a few spent buffers, which the allocator may keep
    # around under load): no more, whatever the journal's size (an 8 MiB
    # journal read whole by each grew it by 350 MiB).
    from execd_client import SANITIZED
    assert grown < 40 * (5 if SANITIZED else 3) << 10, grown
    # One of them reads on now: every entry, in order, none missing.
    s = socks[0]
    s.settimeout(30 * SLOW)
    data = bytes(kept)
    while data.count(b'"seq":') < 1150:
        piece = s.recv(1 << 20)
        assert piece, "the follower's stream ended"
        data += piece
    seqs = [int(x.split(b",")[0]) for x in data.split(b'"seq":')[1:]]
    assert seqs[:1150] == list(range(1, 1151))
    for s in socks:
        s.close()
