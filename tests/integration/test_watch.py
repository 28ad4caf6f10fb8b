"""GET /files/watch: the resumable file-change feed, against real
directories: what each change reports, recursion into new and renamed
directories, a watcher that disconnects mid-burst and resumes by seq without
loss (twice, from the highest seq of any line it read), the ring letting go (a gap), a kernel queue overflow forced with a
small /proc/sys/fs/inotify/max_queued_events (a gap, then the live feed
again), the root going away, and the limits, each refused before an inotify
instance is taken."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from execd_client import SLOW, wait_until
from watch_helpers import Feed, creates, inotify_fds


@pytest.fixture
def root(tmp_path):
    d = tmp_path / "w"
    d.mkdir()
    return d


def test_each_change_is_one_event_with_what_it_left(execd, root):
    f = Feed(execd, root)
    assert f.hello["recursive"] is True and f.hello["path"] == str(root)
    (root / "a.txt").write_text("hello")
    ev = f.until(lambda e: e["type"] == "create" and e["path"].endswith("a.txt"))
    assert ev["entry"] == "file"
    w = f.until(lambda e: e["type"] == "write" and e["path"].endswith("a.txt"))
    assert w["size"] == 5 and isinstance(w["mtime"], int) and w["mode"] == "644"
    os.rename(root / "a.txt", root / "b.txt")
    r = f.until(lambda e: e["type"] == "rename")
    assert r["from"] == str(root / "a.txt") and r["path"] == str(root / "b.txt") and r["size"] == 5
    os.chmod(root / "b.txt", 0o600)
    c = f.until(lambda e: e["type"] == "chmod")
    assert c["path"] == str(root / "b.txt") and c["mode"] == "600"
    os.unlink(root / "b.txt")
    rm = f.until(lambda e: e["type"] == "remove")
    assert rm["path"] == str(root / "b.txt") and rm["entry"] == "file" and "size" not in rm
    seqs = [e["seq"] for e in f.events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs) and seqs[0] > f.hello["seq"]
    f.close()


def test_recursive_follows_new_and_renamed_directories(execd, root):
    f = Feed(execd, root)
    deep = root / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    f.until(lambda e: e["type"] == "create" and e["path"] == str(deep / "f"))
    os.rename(root / "a", root / "z")
    f.until(lambda e: e["type"] == "rename" and e["path"] == str(root / "z"))
    (root / "z" / "b" / "c" / "g").write_text("y")
    f.until(lambda e: e["type"] == "create" and e["path"] == str(root / "z" / "b" / "c" / "g"))
    # Moved out of the tree: a remove; moved in: a create, and followed.
    outside = root.parent / "outside"
    os.rename(root / "z", outside)
    gone = f.until(lambda e: e["type"] == "remove" and e["path"] == str(root / "z"))
    assert gone.get("moved") is True
    os.rename(outside, root / "back")
    f.until(lambda e: e["type"] == "create" and e["path"] == str(root / "back"))
    (root / "back" / "b" / "h").write_text("z")
    f.until(lambda e: e["type"] == "create" and e["path"] == str(root / "back" / "b" / "h"))
    f.close()


def test_a_non_recursive_watch_stays_at_its_level(execd, root):
    (root / "sub").mkdir()
    f = Feed(execd, root, recursive=False)
    (root / "sub" / "inner").write_text("no")
    (root / "top").write_text("yes")
    f.until(lambda e: e["type"] == "create" and e["path"] == str(root / "top"))
    assert not [e for e in f.events if "inner" in e.get("path", "")]
    f.close()


def test_writes_to_one_file_are_coalesced(execd_factory, root):
    ex = execd_factory("--watch-coalesce", "100ms")
    f = Feed(ex, root)
    # 200 writes within the window, the file kept open: one write event.
    res = ex.run(f"exec 3>{root}/log; for i in $(seq 1 200); do echo $i >&3; done; sleep 0.3; exec 3>&-; "
                 f"touch {root}/done")
    assert res.terminal["exit_code"] == 0
    f.until(lambda e: e["type"] == "create" and e["path"].endswith("/done"))
    writes = [e for e in f.events if e["type"] == "write" and e["path"].endswith("/log")]
    assert 1 <= len(writes) <= 3, writes
    assert writes[-1]["size"] == len("".join(f"{i}\n" for i in range(1, 201)))
    f.close()


def test_a_watcher_that_disconnects_mid_burst_resumes_without_loss(execd, root):
    n = 3000
    f = Feed(execd, root)
    c, r = execd.open_stream({"command": f"cd {root} && for i in $(seq 1 {n}); do : > f$i; done", "background": True})
    r.read()
    c.close()
    # Some of the burst, then the connection is reset mid-stream.
    f.until(lambda e: len(creates(f.events)) >= 200, 30)
    first = list(f.events)
    resume_at = f.last_seq()
    f.kill()
    wait_until(lambda: len(list(root.iterdir())) == n, 60 * SLOW, 0.05, "the burst to finish")
    g = Feed(execd, root, since=resume_at)
    assert g.hello["seq"] >= resume_at
    g.until(lambda e: len(set(creates(first + g.events))) >= n, 60, "every create")
    assert not [e for e in g.events if e["type"] == "gap"], "the ring kept them all: no gap"
    names = creates(first + g.events)
    assert len(names) == len(set(names)) == n, "each create once: none lost, none repeated"
    seqs = [e["seq"] for e in first + g.events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert g.events[0]["seq"] > resume_at
    g.close()


def reach(feed: Feed, seq: int, last_path: str):
    """Reads `feed` (a live feed of the same watch) until the watch has
    recorded an event with `seq`, or the burst's last create."""
    if feed.events and (feed.events[-1]["seq"] >= seq or feed.events[-1].get("path") == last_path):
        return
    feed.until(lambda e: e["seq"] >= seq or e.get("path") == last_path, 60, f"seq {seq}")


@pytest.mark.parametrize("first_cut,second_cut", [(1, 1), (200, 50), (1000, 99)])
def test_resuming_from_the_highest_seq_seen_twice_mid_burst_misses_nothing(execd, root, first_cut, second_cut):
    """A client that keeps the highest seq of any line it read (the first
    line's too) as where to resume, cut off mid-burst after `first_cut`
    events, resumed while the watch is at least 100 events further on, cut
    off again after `second_cut` events of that backlog, and resumed again:
    every line's seq is above the one before, and across the three
    connections the events follow each other seq by seq, each create once."""
    n = 2000
    last_path = str(root / f"f{n}")
    observer = Feed(execd, root)  # the same watch, read live: how far it has got
    f = Feed(execd, root)
    c, r = execd.open_stream({"command": f"cd {root} && for i in $(seq 1 {n}); do : > f$i; done", "background": True})
    r.read()
    c.close()
    feeds, events = [], []
    for cut, hang_up in ((first_cut, Feed.kill), (second_cut, Feed.close)):
        feeds.append(f)
        f.until(lambda e: len(f.events) >= cut, 30, f"{cut} events")
        events += f.events
        highest = max(f.seqs)
        hang_up(f)
        # A resume with a backlog: the watch is well past where the client is.
        reach(observer, highest + 100, last_path)
        f = Feed(execd, root, since=highest)
        # Where the feed continues, and how far the watch is (not a seq to resume from).
        assert f.hello["seq"] == highest and f.hello["newest"] > highest, f.hello
    feeds.append(f)
    reach(observer, 1 << 63, last_path)
    final = observer.events[-1]["seq"]
    while max(f.seqs) < final:  # the client reads on until it has seen the watch's last seq
        f.until(lambda e: True, 30, "the rest of the burst")
    events += f.events
    for g in feeds:
        assert g.seqs == sorted(set(g.seqs)), f"seqs out of order on one connection: {g.seqs[:5]}…"
    assert not [e for e in events if e["type"] == "gap"], "the ring kept them all: no gap"
    seqs = [e["seq"] for e in events]
    holes = [(a, b) for a, b in zip(seqs, seqs[1:]) if b != a + 1]
    assert not holes, f"events missing or repeated between seqs {holes[:5]}"
    names = creates(events)
    assert len(names) == len(set(names)) == n, "each create once: none lost, none repeated"
    for g in feeds[1:]:
        g.close()
    observer.close()


def test_what_the_ring_let_go_of_is_one_gap(execd_factory, root):
    ex = execd_factory("--watch-ring-bytes", "8192")
    f = Feed(ex, root)
    start = f.hello["seq"]
    f.close()
    res = ex.run(f"cd {root} && for i in $(seq 1 500); do : > f$i; done")
    assert res.terminal["exit_code"] == 0
    # The kernel queued the 500 creates at once; execd may still be reading
    # them when the command's result comes (it did, under load). A marker made
    # after them and seen live means all were taken in: inotify keeps order.
    live = Feed(ex, root)
    (root / "marker").touch()
    live.until(lambda e: e.get("path", "").endswith("/marker"), 20, "the marker")
    live.close()
    g = Feed(ex, root, since=start)
    gap = g.next_line()
    assert gap["type"] == "gap" and gap["reason"] == "not retained", gap
    assert gap["since"] == start and gap["continues_after"] > start
    g.until(lambda e: e.get("path", "").endswith("/f500"), 20)
    assert g.events[0]["seq"] > gap["continues_after"]
    assert len(creates(g.events)) < 500  # only the newest 8 KiB of events were kept
    g.close()
    # A seq from before this watch existed (or another execd): a gap too.
    h = Feed(ex, root, since=10**17)
    assert h.next_line()["reason"] == "unknown seq"
    h.close()


MAX_QUEUED = Path("/proc/sys/fs/inotify/max_queued_events")


def test_kernel_queue_overflow_becomes_a_gap(execd, root):
    """The queue limit applies to inotify instances made while it is set: it
    is lowered only while the watch is made, and restored right after. execd
    is stopped (SIGSTOP) while 200 files appear, so the kernel's queue of 16
    overflows for certain."""
    if os.geteuid() != 0 or not os.access(MAX_QUEUED, os.W_OK):
        pytest.skip("needs root to lower /proc/sys/fs/inotify/max_queued_events")
    before = MAX_QUEUED.read_text().strip()
    try:
        MAX_QUEUED.write_text("16\n")
        f = Feed(execd, root)
    finally:
        MAX_QUEUED.write_text(before + "\n")
    assert MAX_QUEUED.read_text().strip() == before
    os.kill(execd.pid, signal.SIGSTOP)
    try:
        for i in range(200):
            (root / f"f{i}").write_bytes(b"")
    finally:
        os.kill(execd.pid, signal.SIGCONT)
    gap = f.until(lambda e: e["type"] == "gap", 20, "the overflow gap")
    assert gap["reason"] == "overflow" and gap["seq"] > f.hello["seq"]
    (root / "after").write_text("x")
    f.until(lambda e: e["type"] == "create" and e["path"] == str(root / "after"), 20, "the live feed after the gap")
    f.close()


def test_the_root_going_away_ends_the_feed(execd, root):
    f = Feed(execd, root)
    (root / "x").write_text("1")
    f.until(lambda e: e["type"] == "create")
    subprocess.run(["rm", "-rf", str(root)], check=True)
    gone = f.until(lambda e: e["type"] == "gone", 20)
    assert gone["path"] == str(root) and gone["reason"] in ("removed", "moved")
    assert f.next_line() is None and f.ended
    f.close()


def test_a_renamed_root_is_followed(execd, root, tmp_path):
    """Renaming the watched root does not end the feed: one `rename` event
    with `root` names where it went, later events carry the new paths (in
    subdirectories too), a feed of the new name resumes the same watch by
    seq, and a new feed of the old name is a new watch (404 while nothing is
    there). Removing it from its new place then ends the feed."""
    (root / "sub").mkdir()
    f = Feed(execd, root)
    (root / "before").write_text("1")
    f.until(lambda e: e["type"] == "create" and e["path"] == str(root / "before"))
    moved = tmp_path / "elsewhere"
    os.rename(root, moved)
    ev = f.until(lambda e: e["type"] == "rename", 20, "the root's rename")
    assert ev["root"] is True and ev["path"] == str(moved) and ev["from"] == str(root), ev
    assert ev["entry"] == "dir"
    (moved / "after").write_text("2")
    (moved / "sub" / "deeper").write_text("3")
    f.until(lambda e: e["type"] == "create" and e["path"] == str(moved / "after"), 20, "a create under the new name")
    f.until(lambda e: e["type"] == "create" and e["path"] == str(moved / "sub" / "deeper"), 20,
            "a create in a subdirectory under the new name")
    assert Feed(execd, root).status == 404
    g = Feed(execd, moved, since=ev["seq"] - 1)
    assert g.hello["path"] == str(moved)
    again = g.until(lambda e: e["type"] == "rename", 20, "the rename, replayed by seq")
    assert again["seq"] == ev["seq"]
    g.close()
    subprocess.run(["rm", "-rf", str(moved)], check=True)
    gone = f.until(lambda e: e["type"] == "gone", 20)
    assert gone["path"] == str(moved) and gone["reason"] == "removed", gone
    f.close()


def test_limits_are_refused_before_an_inotify_instance_is_taken(execd_factory, tmp_path):
    ex = execd_factory("--max-watches", "1", "--watch-max-dirs", "5")
    a, b, big = tmp_path / "a", tmp_path / "b", tmp_path / "big"
    a.mkdir()
    b.mkdir()
    for i in range(10):
        (big / f"d{i}").mkdir(parents=True)
    f = Feed(ex, a)
    held = inotify_fds(ex.pid)
    assert held == 1
    g = Feed(ex, b)
    assert g.status == 429
    err = g.error()
    assert err["code"] == "LIMIT_REACHED" and "--max-watches" in err["message"], err
    assert inotify_fds(ex.pid) == held
    f.close()
    # The first watch is kept for --watch-retention after its reader left,
    # so that a resume finds it; a new root then takes its place.
    h = Feed(ex, big)
    assert h.status == 400 and h.error()["code"] == "WATCH_TOO_MANY_DIRECTORIES"
    wait_until(lambda: inotify_fds(ex.pid) == 0, 10 * SLOW, 0.05, "the refused watch's inotify instance to go")


@pytest.mark.parametrize("query,status,code", [
    ("", 400, "MISSING_QUERY"),
    ("?path=/nonexistent/dir", 404, "FILE_NOT_FOUND"),
    ("?path=/etc/hostname", 400, "INVALID_REQUEST_BODY"),
    ("?path=/tmp&recursive=maybe", 400, "INVALID_REQUEST_BODY"),
    ("?path=/tmp&since=-1", 400, "INVALID_REQUEST_BODY"),
])
def test_bad_requests(execd, query, status, code):
    st, body = execd.json("GET", "/files/watch" + query)
    assert st == status and body["code"] == code, body


def test_no_token_no_feed(execd, root):
    st, _h, _b = execd.request("GET", f"/files/watch?path={root}", token=False)
    assert st == 401
    assert inotify_fds(execd.pid) == 0
