"""The hostile clients of test_client_resets.py, against the streams added
with the file-change feed, archives and pause cooperation: GET
/files/watch, GET /files/archive, POST /files/archive (a streamed body),
POST /journal/events and POST /freeze. Each stream is reset or closed at
every phase (before the head, after it, mid-body, while execd's writes are
pending behind a client that reads nothing), fed garbage, and asked without
the token; execd must stay alive without a sanitizer report, keep serving,
leave no temporary file behind, and keep its memory bounded behind a slow
reader."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from execd_client import SANITIZED, SLOW, vm_rss_kib, wait_until
from test_client_resets import (MiB, N, N_HEAVY, alternate, assert_alive, assert_serving, body_len, dial, ex,  # noqa: F401
                                hammer, hammer_without_token, hang_up, has_head, recv_until, request, status_of,
                                wait_write_pending)
from watch_helpers import inotify_fds


# ASan keeps freed memory in quarantine (256 MB by default), which would look
# like growth; a small quarantine keeps RSS a measure of what execd holds.
RSS_BOUND_KIB = (160 if SANITIZED else 64) * 1024


@pytest.fixture
def lean(execd_factory):
    env = dict(os.environ)
    env.pop("EXECD_ACCESS_TOKEN", None)
    if SANITIZED:
        env["ASAN_OPTIONS"] = ":".join(o for o in (env.get("ASAN_OPTIONS", ""), "quarantine_size_mb=16") if o)
    return execd_factory(env=env)


# ---- GET /files/watch ----------------------------------------------------------------------------------

@pytest.fixture
def busy_root(tmp_path):
    """A directory where files keep changing, so feeds always have events."""
    d = tmp_path / "w"
    d.mkdir()
    return d


WATCH_PHASES = {
    "before-head": lambda b: True,
    "after-head": has_head,
    "mid-burst": lambda b: body_len(b) >= 8192,
    "write-pending": "pending",
}


@pytest.mark.parametrize("phase", list(WATCH_PHASES))
def test_watch_feed(ex, busy_root, phase):
    enough = WATCH_PHASES[phase]
    # A burst that outlives the loop: every feed has events mid-stream.
    burst = ex.run(f"cd {busy_root} && while :; do for i in $(seq 1 200); do echo $i > f$i; done; done",
                   background=True)
    try:
        def once(i):
            s = dial(ex, rcvbuf=4096 if enough == "pending" else None)
            since = "&since=0" if i % 2 else ""
            s.sendall(request(ex, "GET", f"/files/watch?path={quote(str(busy_root))}&recursive=true{since}"))
            if enough == "pending":
                wait_write_pending(ex, s, "watch feed")
            else:
                buf = bytearray()
                assert recv_until(s, buf, enough, phase), bytes(buf[:300])
            hang_up(s, alternate(i))

        hammer(ex, N_HEAVY if enough == "pending" else N, once, f"watch {phase}", settle=False)
    finally:
        ex.request("DELETE", f"/command?id={burst.id}")
    # One watch for all those feeds (they share it), none leaked.
    assert inotify_fds(ex.pid) <= 1


def test_watch_slow_reader_is_bounded(lean, busy_root):
    """A client that reads nothing while 100,000 events happen: execd keeps
    the ring (1 MiB) and the socket budget, not a queue per client."""
    ex = lean
    # Default buffers: 100,000 events (megabytes) outrun them anyway, and a
    # 4 KiB window that sat at zero for the whole loop reopens only at the
    # sender's next zero-window probe, which backs off to a minute and more.
    s = dial(ex)
    s.sendall(request(ex, "GET", f"/files/watch?path={quote(str(busy_root))}&recursive=true"))
    rss0 = vm_rss_kib(ex.pid)
    res = ex.run(f"cd {busy_root} && for i in $(seq 1 100000); do : > f$((i % 500)); done", sock_timeout=300)
    assert res.terminal["exit_code"] == 0
    grew = vm_rss_kib(ex.pid) - rss0
    assert grew < RSS_BOUND_KIB, f"execd grew by {grew} KiB behind a stalled feed"
    # It resumes: the rest of what is retained, after a gap for what is not.
    buf = bytearray()
    assert recv_until(s, buf, lambda b: b'"type":"gap"' in b or body_len(b) > 65536, "the feed again")
    s.close()
    assert_serving(ex)


def test_watch_garbage(ex, busy_root):
    def once(i):
        s = dial(ex)
        kind = i % 3
        if kind == 0:
            s.sendall(request(ex, "GET", f"/files/watch?path={quote(str(busy_root))}") + os.urandom(700))
        elif kind == 1:
            s.sendall(request(ex, "GET", "/files/watch?path=%ff%00&since=" + "9" * 40))
        else:
            s.sendall(request(ex, "GET", f"/files/watch?path={quote(str(busy_root))}&recursive=\x01"))
        buf = bytearray()
        recv_until(s, buf, has_head, "an answer")
        hang_up(s, alternate(i))

    hammer(ex, N, once, "watch garbage", settle=False)


# ---- GET /files/archive ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def big_tree(tmp_path_factory):
    d = tmp_path_factory.mktemp("arch") / "t"
    d.mkdir()
    block = os.urandom(MiB)
    for i in range(48):
        (d / f"f{i}").write_bytes(block)
    for i in range(300):
        (d / "small" / str(i % 10)).mkdir(parents=True, exist_ok=True)
        (d / "small" / str(i % 10) / f"s{i}").write_text("x" * i)
    return d


ARCHIVE_PHASES = {
    "before-head": lambda b: True,
    "after-head": has_head,
    "mid-body": lambda b: body_len(b) >= 4 * MiB,
    "write-pending": "pending",
}


@pytest.mark.parametrize("phase", list(ARCHIVE_PHASES))
def test_archive_download(ex, big_tree, phase):
    enough = ARCHIVE_PHASES[phase]
    fmts = ["tar", "tar.gz", "zip"]

    def once(i):
        s = dial(ex, rcvbuf=4096 if enough == "pending" else None)
        s.sendall(request(ex, "GET", f"/files/archive?path={quote(str(big_tree))}&format={fmts[i % 3]}"))
        if enough == "pending":
            wait_write_pending(ex, s, "archive")
        else:
            buf = bytearray()
            assert recv_until(s, buf, enough, phase), bytes(buf[:300])
        hang_up(s, alternate(i))

    hammer(ex, N_HEAVY if enough in ("pending",) else N // 2, once, f"archive download {phase}", settle=False)


def test_archive_slow_reader_is_bounded(lean, big_tree):
    """A stalled download holds one piece and the socket budget: memory
    stays flat, and the walk goes on once the client reads."""
    ex = lean
    s = dial(ex, rcvbuf=4096)
    s.sendall(request(ex, "GET", f"/files/archive?path={quote(str(big_tree))}&format=tar"))
    wait_write_pending(ex, s, "archive")
    rss = vm_rss_kib(ex.pid)
    # Time passing while the client reads nothing is the condition under test.
    time.sleep(0.5)
    assert vm_rss_kib(ex.pid) - rss < 16 * 1024
    total = 0
    s.settimeout(30 * SLOW)
    while True:
        d = s.recv(MiB)
        if not d:
            break
        total += len(d)
        if total > 48 * MiB + 100_000:
            break
    assert total > 48 * MiB
    s.close()


# ---- POST /files/archive --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tar_body(big_tree, tmp_path_factory):
    import subprocess
    out = tmp_path_factory.mktemp("tb") / "t.tar"
    subprocess.run(["tar", "-C", str(big_tree), "-cf", str(out), "small"], check=True)
    return out.read_bytes()


UPLOAD_PHASES = ["head-only", "mid-body", "whole-body", "garbage-body"]


@pytest.mark.parametrize("phase", UPLOAD_PHASES)
def test_archive_upload(ex, tmp_path, tar_body, phase):
    def once(i):
        target = tmp_path / f"t{i}"
        head = request(ex, "POST", f"/files/archive?path={quote(str(target))}", length=len(tar_body))
        s = dial(ex)
        if phase == "head-only":
            s.sendall(head)
        elif phase == "mid-body":
            s.sendall(head + tar_body[: len(tar_body) // 2])
        elif phase == "whole-body":
            s.sendall(head + tar_body)
        else:
            s.sendall(head + os.urandom(len(tar_body)))
            buf = bytearray()
            assert recv_until(s, buf, has_head, "the refusal"), bytes(buf[:200])
            assert status_of(buf) == 400
        hang_up(s, alternate(i))

    hammer(ex, N_HEAVY, once, f"archive upload {phase}", settle=False)
    # Nothing half-extracted, no spool left in the state directory.
    wait_until(lambda: all(re.fullmatch(r"t\d+", f) for f in os.listdir(tmp_path)),
               20 * SLOW, 0.05, f"temporary directories to go: {os.listdir(tmp_path)}")
    wait_until(lambda: not [p for p in Path(ex.state_dir).iterdir() if p.name.startswith("archive-")],
               10 * SLOW, 0.05, "spool files to go")
    for d in os.listdir(tmp_path):
        assert (tmp_path / d / "small").is_dir()  # a complete one landed whole
    assert_serving(ex)


def test_archive_slow_uploaders_hold_nobody_up(ex, tmp_path, tar_body):
    """Uploaders that send half a body and stall: another upload lands whole
    meanwhile, execd keeps serving, and each stalled one, once it sends the
    rest, lands whole too (nothing was given up or mixed up while it waited)."""
    slow = []
    for i in range(8):
        s = dial(ex)
        s.sendall(request(ex, "POST", f"/files/archive?path={quote(str(tmp_path / f's{i}'))}",
                          tar_body[: len(tar_body) // 2], length=len(tar_body)))
        slow.append(s)
    s = dial(ex)
    s.sendall(request(ex, "POST", f"/files/archive?path={quote(str(tmp_path / 'fast'))}", tar_body))
    buf = bytearray()
    assert recv_until(s, buf, has_head, "the fast upload's answer"), bytes(buf[:200])
    assert status_of(buf) == 200, bytes(buf[:300])
    s.close()
    assert (tmp_path / "fast" / "small").is_dir()
    assert_serving(ex, "with 8 uploads stalled mid-body")
    for i, s in enumerate(slow):
        s.sendall(tar_body[len(tar_body) // 2:])
        buf = bytearray()
        assert recv_until(s, buf, has_head, f"stalled upload {i}'s answer"), bytes(buf[:200])
        assert status_of(buf) == 200, bytes(buf[:300])
        s.close()
        assert (tmp_path / f"s{i}" / "small").is_dir()
    assert_serving(ex)


# ---- POST /journal/events, POST /freeze ----------------------------------------------------------------

def test_journal_events_and_freeze_resets(ex):
    body = json.dumps([{"i": i} for i in range(500)]).encode()

    def once(i):
        s = dial(ex)
        if i % 3 == 0:
            s.sendall(request(ex, "POST", "/journal/events", body[: len(body) // 2], length=len(body)))
        elif i % 3 == 1:
            s.sendall(request(ex, "POST", "/journal/events", os.urandom(300)))
        else:
            s.sendall(request(ex, "POST", "/freeze?timeout=2000"))
            buf = bytearray()
            recv_until(s, buf, has_head, "the freeze")
            s2 = dial(ex)
            s2.sendall(request(ex, "POST", "/thaw"))
            hang_up(s2, alternate(i))
        hang_up(s, alternate(i))

    hammer(ex, N, once, "journal events and freeze", settle=False)
    ex.request("POST", "/thaw")
    st, v = ex.json("GET", "/journal/verify")
    assert st == 200 and v["ok"] is True


# ---- no token ------------------------------------------------------------------------------------------

def test_new_routes_without_the_token(ex, tmp_path):
    reqs = [
        request(ex, "GET", f"/files/watch?path={tmp_path}", token=False),
        request(ex, "GET", f"/files/archive?path={tmp_path}", token="wrong"),
        request(ex, "POST", f"/files/archive?path={tmp_path}/x", b"\0" * 10240, token=False),
        request(ex, "POST", "/journal/events", b'{"a":1}', token=False),
        request(ex, "GET", "/activity", token=False),
        request(ex, "POST", "/freeze", token="wrong"),
        request(ex, "POST", "/thaw", token=False),
    ]

    hammer_without_token(ex, reqs, "no token on the new routes", settle=False)
    assert inotify_fds(ex.pid) == 0
    assert not (tmp_path / "x").exists()
    st, a = ex.json("GET", "/activity")
    assert a["frozen"] is False
