"""The state directory's budget (issue 43, exec/state_budget): one total for
everything execd keeps in --state-dir, on a small filesystem of its own (a
tmpfs these tests mount; root only). Runs that print more than the
filesystem holds must not fill it: finished runs' output goes first, oldest
first, and a reader asking for it gets a gap; new commands still get their
records and journal entries; a restart counts what is left."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import tarfile
import threading
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from execd_client import SLOW, TOKEN_HEADER, decode_chunk, parse_stream, start_execd, wait_until

MiB = 1 << 20
RUN_BYTES = 24 * MiB
# Tolerance on the disk's use over the budget: pool unlinks not done yet,
# each running run's open segment (budget/64), the files' own blocks.
SLACK = 3 * MiB

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (needs root)")


@pytest.fixture
def small_fs(tmp_path):
    """A 96 MiB tmpfs, unmounted in teardown."""
    mnt = tmp_path / "small-fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m,mode=0700", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fs_used(path: Path) -> int:
    v = os.statvfs(path)
    return (v.f_blocks - v.f_bfree) * v.f_frsize


def fs_size(path: Path) -> int:
    v = os.statvfs(path)
    return v.f_blocks * v.f_frsize


class PeakUse:
    """The filesystem's highest use while it runs (a thread samples statvfs)."""

    def __init__(self, path: Path):
        self.path, self.peak, self._stop = path, 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, fs_used(self.path))
            self._stop.wait(0.005)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


def state_dir_figures(ex) -> dict:
    st, js = ex.json("GET", "/activity")
    assert st == 200, js
    return js["state_dir"]


def retained_from(ex, cid: str) -> tuple[int, bytes, list]:
    """Reads the run's stdout from offset 0: where what it retains starts
    (the gap's end, 0 without one), the bytes it gives, the gap events."""
    st, h, raw = ex.request("GET", f"/command/{cid}/stream?stderr=0", timeout=120)
    assert st == 200, raw[:300]
    events = parse_stream(raw, True)
    gaps = [e for e in events if e["type"] == "gap"]
    out = b"".join(decode_chunk(e) for e in events if e["type"] == "stdout")
    return (gaps[0]["available_from"] if gaps else 0), out, gaps


def print_runs(ex, prefix: str, n: int, cold: bool = False):
    for i in range(n):
        cid = f"{prefix}-{i:02d}"
        ex.run(f"head -c {RUN_BYTES} /dev/zero | tr '\\0' x", id=cid, background=True)
        js = ex.wait_finished(cid, timeout=60)
        assert js["exit_code"] == 0 and js["stdout_bytes"] == RUN_BYTES, js


@pytest.mark.parametrize("cold_after", ["15s", "0s"])
def test_runs_that_overflow_the_disk_keep_the_newest_output(execd_factory, small_fs, cold_after):
    """Twelve runs of 24 MiB each on a 96 MiB disk (issue 43): without a budget
    the disk filled and the newest runs kept nothing. With half the disk as
    the budget, use stays within it, the newest runs keep their output and
    the oldest answer with a gap. With --cold-after 0s most finished runs
    are cold records when the budget lets go of their output."""
    ex = execd_factory("--state-budget-percent", "50", "--cold-after", cold_after, state_dir=small_fs)
    figures = state_dir_figures(ex)
    budget = figures["budget_bytes"]
    assert budget == fs_size(small_fs) // 100 * 50, figures
    with PeakUse(small_fs) as peak:
        print_runs(ex, "big", 12)
    assert peak.peak <= budget + SLACK, (peak.peak, budget)
    figures = state_dir_figures(ex)
    assert figures["used_bytes"] <= budget, figures
    assert figures["evicted_bytes"] >= 8 * RUN_BYTES, figures
    # The newest run keeps all its output, the oldest none: a gap to its end.
    first, out, gaps = retained_from(ex, "big-11")
    assert first == 0 and not gaps and out == b"x" * RUN_BYTES
    for i in range(0, 9):
        first, out, gaps = retained_from(ex, f"big-{i:02d}")
        assert first == RUN_BYTES and out == b"", (i, first, len(out))
        assert gaps[0]["stream"] == "stdout" and gaps[0]["requested"] == 0, gaps
    # Their records stay: status, exit code and digest.
    st, js = ex.status("big-00")
    assert st == 200 and js["exit_code"] == 0 and js["stdout_bytes"] == RUN_BYTES, js
    # New commands still get records and journal entries.
    r = ex.run("echo still-here", id="after-1")
    assert r.terminal["exit_code"] == 0
    assert ex.status("after-1")[1]["stdout_bytes"] == len("still-here\n")
    st, h, raw = ex.request("GET", "/journal")
    ids = [json.loads(l).get("id") for l in raw.splitlines() if l]
    assert "after-1" in ids and "big-00" in ids and "big-11" in ids
    assert ex.json("GET", "/journal/verify")[1]["ok"] is True
    assert fs_used(small_fs) <= budget + SLACK


def test_running_runs_past_the_budget_are_trimmed_from_their_oldest_bytes(execd_factory, small_fs):
    """Four runs of 24 MiB each still running on a 24 MiB budget: nothing
    finished is left to let go of, so the running runs shed their oldest
    segments (those that retain most first). Readers get a gap, never an
    error, and every run ends normally with all its bytes counted."""
    gate = small_fs.parent / f"gate-{uuid.uuid4().hex[:8]}"
    ex = execd_factory("--state-budget", str(24 * MiB), "--state-budget-percent", "100", state_dir=small_fs)
    budget = state_dir_figures(ex)["budget_bytes"]
    assert budget == 24 * MiB
    ids = [f"live-{i}" for i in range(4)]
    try:
        with PeakUse(small_fs) as peak:
            for cid in ids:
                ex.run(f"head -c {RUN_BYTES} /dev/zero | tr '\\0' y; touch {gate}-{cid}; "
                       f"while [ ! -e {gate} ]; do sleep 0.05; done", id=cid, background=True)

            def all_printed():
                # tr has written its last bytes (execd has read all but a pipe's worth).
                return all(Path(f"{gate}-{cid}").exists() for cid in ids)

            wait_until(all_printed, 60 * SLOW, 0.05, "every run printed its 24 MiB")
        assert peak.peak <= budget + SLACK, (peak.peak, budget)
        figures = state_dir_figures(ex)
        assert figures["trimmed_bytes"] > 0, figures
        assert figures["output_bytes"] <= figures["output_budget_bytes"] + SLACK, figures
        # A reader of a running run from byte 0 is told its output starts later.
        st, h, body = ex.logs(ids[0], cursor=0)
        assert st == 200 and h.get("execd-commands-log-truncated") == "true", h
        assert 0 < len(body) < RUN_BYTES and body == b"y" * len(body)
    finally:
        gate.touch()
    try:
        for cid in ids:
            js = ex.wait_finished(cid, timeout=30)
            assert js["exit_code"] == 0 and js["stdout_bytes"] == RUN_BYTES, js
        kept = 0
        for cid in ids:
            first, out, gaps = retained_from(ex, cid)
            assert 0 < first <= RUN_BYTES and gaps, (cid, first)
            assert out == b"y" * (RUN_BYTES - first)
            kept += len(out)
        assert kept > 0
    finally:
        gate.unlink(missing_ok=True)
        for cid in ids:
            Path(f"{gate}-{cid}").unlink(missing_ok=True)
    assert fs_used(small_fs) <= budget + SLACK


def test_a_restart_counts_what_is_on_disk_and_a_smaller_budget_evicts_at_once(execd_factory, small_fs):
    ex = execd_factory("--state-budget", str(64 * MiB), "--state-budget-percent", "100", state_dir=small_fs)
    print_runs(ex, "keep", 4)
    before = state_dir_figures(ex)
    assert ex.stop() == 0
    on_disk = sum(p.stat().st_size for p in small_fs.iterdir() if ".output" in p.name)
    # The same budget: everything left is adopted and counted.
    ex2 = execd_factory("--state-budget", str(64 * MiB), "--state-budget-percent", "100", state_dir=small_fs)
    after = state_dir_figures(ex2)
    assert on_disk <= after["output_bytes"] <= on_disk + 2 * MiB, (on_disk, after)
    assert abs(after["output_bytes"] - before["output_bytes"]) <= 2 * MiB, (before, after)
    first, out, _ = retained_from(ex2, "keep-03")
    assert first == 0 and len(out) == RUN_BYTES
    assert ex2.stop() == 0
    # A smaller budget: the oldest finished output goes at start-up.
    ex3 = execd_factory("--state-budget", str(30 * MiB), "--state-budget-percent", "100", state_dir=small_fs)
    figures = state_dir_figures(ex3)
    assert figures["used_bytes"] <= 30 * MiB and figures["evicted_bytes"] > 0, figures
    wait_until(lambda: fs_used(small_fs) <= 30 * MiB + SLACK, 10 * SLOW, what="evicted files unlinked")
    first, out, _ = retained_from(ex3, "keep-03")
    assert first == 0 and len(out) == RUN_BYTES
    first, out, gaps = retained_from(ex3, "keep-00")
    assert first == RUN_BYTES and gaps
    # And it keeps working within it.
    print_runs(ex3, "more", 2)
    assert state_dir_figures(ex3)["used_bytes"] <= 30 * MiB
    first, out, _ = retained_from(ex3, "more-01")
    assert first == 0 and len(out) == RUN_BYTES


# ---- archive spools ----------------------------------------------------------------------------------

def tar_of(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def post_archive_raw(ex, target: Path, body: bytes) -> tuple[int, dict]:
    """POST /files/archive over a socket that tolerates execd answering (and
    closing) before the whole body is sent: the answer is read either way."""
    head = (f"POST /files/archive?path={quote(str(target))} HTTP/1.1\r\nHost: x\r\n"
            f"{TOKEN_HEADER}: {ex.token}\r\nContent-Type: application/x-tar\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection((ex.host, ex.port), timeout=60 * SLOW) as s:
        s.sendall(head)
        try:
            piece = 256 << 10
            for i in range(0, len(body), piece):
                s.sendall(body[i:i + piece])
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered early: the rest of the body is not read
        raw = b""
        try:
            while b"\r\n\r\n" not in raw or len(raw.partition(b"\r\n\r\n")[2]) < content_length(raw):
                chunk = s.recv(65536)
                if not chunk:
                    break
                raw += chunk
        except ConnectionResetError:
            pass
    head_text, _, payload = raw.partition(b"\r\n\r\n")
    assert head_text.startswith(b"HTTP/1.1 "), raw[:300]
    return int(head_text.split()[1]), json.loads(payload[:content_length(raw)])


def content_length(raw: bytes) -> int:
    for line in raw.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            return int(v)
    return 1 << 62


def test_an_archive_spool_makes_room_and_one_that_cannot_fit_is_refused_with_507(execd_factory, tmp_path):
    """An archive body is spooled in --state-dir and counts against the budget
    while it is: finished runs' output goes to make room for it; one that
    does not fit even once all finished output is gone is refused with 507
    INSUFFICIENT_STORAGE before the rest of it is read, and leaves nothing
    behind (no file, no bytes counted, later uploads unaffected)."""
    budget = 4 * MiB
    ex = execd_factory("--state-budget", str(budget))
    ex.run(f"head -c {3 * MiB} /dev/zero", id="old", background=True)
    assert ex.wait_finished("old")["stdout_bytes"] == 3 * MiB
    base = state_dir_figures(ex)
    assert base["budget_bytes"] == budget and base["output_bytes"] >= 3 * MiB, base

    # 2 MiB fits once some of the finished run's output is let go of.
    data = os.urandom(2 * MiB)
    st, js = post_archive_raw(ex, tmp_path / "fits", tar_of("f.bin", data))
    assert st == 200, js
    assert (tmp_path / "fits" / "f.bin").read_bytes() == data
    after = state_dir_figures(ex)
    assert after["evicted_bytes"] > 0 and after["used_bytes"] <= budget, after
    first, _, gaps = retained_from(ex, "old")
    assert first > 0 and gaps, "the finished run's oldest output made room"

    # 5 MiB cannot fit even with every finished run's output gone.
    ex.run(f"head -c {MiB} /dev/zero", id="newer", background=True)
    ex.wait_finished("newer")
    st, js = post_archive_raw(ex, tmp_path / "too-big", tar_of("g.bin", os.urandom(5 * MiB)))
    assert st == 507 and js["code"] == "INSUFFICIENT_STORAGE", js
    assert "--state-budget" in js["message"]
    assert not (tmp_path / "too-big").exists()
    refused = state_dir_figures(ex)
    assert refused["output_bytes"] == 0, refused  # it was tried: all finished output went first
    first, out, gaps = retained_from(ex, "newer")
    assert first == MiB and out == b"" and gaps
    # The refused spool is no longer counted, and no spool file is left.
    wait_until(lambda: state_dir_figures(ex)["other_bytes"] <= base["other_bytes"] + 64 * 1024, 10 * SLOW,
               what="the refused spool uncounted")
    assert not [p for p in Path(ex.state_dir).iterdir() if p.name.startswith("archive-")]
    st, js = post_archive_raw(ex, tmp_path / "again", tar_of("h.bin", b"small"))
    assert st == 200, js
    assert (tmp_path / "again" / "h.bin").read_bytes() == b"small"


# ---- envd's POST /files ------------------------------------------------------------------------------

def test_envd_gzip_uploads_are_not_spooled_in_the_state_dir_and_a_full_disk_is_507(execd_factory, small_fs,
                                                                                     monkeypatch, tmp_path):
    """E2B's POST /files (here gzip, the SDK's gzip=True) inflates as the body
    arrives straight into a temp file beside the target: nothing of it
    passes through --state-dir, so it has no spool for the budget to count,
    and an upload many times the budget succeeds without the state
    directory's filesystem moving. What bounds it is the target's disk: a
    full one is 507, as envd answers ENOSPC, which the E2B SDK raises as
    NotEnoughSpaceException; nothing is left behind."""
    from e2b import NotEnoughSpaceException, Sandbox

    from e2b_support import listener_url, point_sdk_at
    from files_fixtures import tiny_tmpfs

    budget = 2 * MiB
    ex = execd_factory("--envd-port", "0", "--state-budget", str(budget), state_dir=small_fs)
    point_sdk_at(monkeypatch, listener_url(ex))
    sbx = Sandbox.create()
    data = os.urandom(4 * MiB) * 6  # 24 MiB, about as much gzip: twelve times the budget
    base = fs_used(small_fs)
    with PeakUse(small_fs) as peak:
        sbx.files.write(str(tmp_path / "big.bin"), io.BytesIO(data), gzip=True)
    assert (tmp_path / "big.bin").read_bytes() == data
    assert peak.peak <= base + 512 * 1024, (base, peak.peak)
    figures = state_dir_figures(ex)
    assert figures["other_bytes"] < 512 * 1024 and figures["evicted_bytes"] == 0, figures

    with tiny_tmpfs("4m") as full:
        with pytest.raises(NotEnoughSpaceException):
            sbx.files.write(f"{full}/too-big.bin", io.BytesIO(os.urandom(8 * MiB)), gzip=True)
        assert os.listdir(full) == []
    assert state_dir_figures(ex)["evicted_bytes"] == 0


# ---- the free-space floor ----------------------------------------------------------------------------

@pytest.mark.parametrize("floor", [None, "0", "30"])
def test_the_free_space_floor_is_a_flag(execd_factory, small_fs, floor):
    """--state-floor-percent (5 by default): the budget is at most what execd
    keeps plus what is free above the filesystem's last N%. The user's files
    (here 60 MiB of them) shrink it; a larger floor shrinks it more."""
    (small_fs / "users-files").write_bytes(b"u" * (60 * MiB))
    args = ["--state-budget", "0", "--state-budget-percent", "100"]
    if floor is not None:
        args += ["--state-floor-percent", floor]
    ex = execd_factory(*args, state_dir=small_fs)
    f = state_dir_figures(ex)
    percent = 5 if floor is None else int(floor)
    floor_bytes = f["filesystem_bytes"] // 100 * percent
    assert f["budget_bytes"] == f["used_bytes"] + max(f["filesystem_free_bytes"] - floor_bytes, 0), f
    if percent == 0:
        return  # the whole disk is execd's to take: nothing more to see
    # Output past it makes room as with any budget: a 24 MiB run keeps
    # what fits, the disk keeps its floor free.
    with PeakUse(small_fs) as peak:
        print_runs(ex, "floor", 2)
    assert peak.peak <= fs_size(small_fs) - floor_bytes + SLACK, (peak.peak, floor_bytes)


def test_a_floor_outside_0_to_100_is_refused():
    proc, pump = start_execd("--state-floor-percent", "101", wait=False)
    assert proc.wait(10) == 2
