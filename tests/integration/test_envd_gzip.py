"""Gzip uploads on envd's POST /files (`Content-Encoding: gzip`, what E2B's
SDKs send for `files.write(..., gzip=True)`): the unmodified Python SDK
round-trips text, binary and multi-MiB files byte for byte; over raw sockets,
a corrupt, cut or trailing-garbage body is 400 and leaves nothing, a bomb is
413 at --archive-max-bytes with execd's memory flat and nothing on disk, a
client that resets mid-body leaves no temp file, and without the token the
body is never read. Run under ASan by `make test` (a report fails the test)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import socket
import zlib

import pytest
from e2b import Sandbox
from e2b.sandbox.filesystem.filesystem import WriteEntry

from e2b_support import host_port, listener_url, point_sdk_at, read_response, request_bytes
from execd_client import SANITIZED, SLOW, wait_until
from test_client_resets import SANITIZER_MARKERS, reset

MiB = 1 << 20
TIMEOUT = 10 * SLOW
LIMIT = 64 * MiB  # --archive-max-bytes for these daemons: what one gzip body may inflate to


@pytest.fixture
def envd(execd_factory):
    ex = execd_factory("--envd-port", "0", "--archive-max-bytes", str(LIMIT))
    ex.envd = listener_url(ex)
    yield ex
    assert not any(m in ex.stderr_text() for m in SANITIZER_MARKERS), ex.stderr_text()[-4000:]


def post(ex, target, body: bytes, encoding="gzip", content_type="application/octet-stream", headers=None):
    h = {"Content-Encoding": encoding} if encoding else {}
    h.update(headers or {})
    with socket.create_connection(host_port(ex.envd), timeout=TIMEOUT) as s:
        s.sendall(request_bytes(ex.envd, f"/files?path={target}", body, content_type, headers=h))
        return read_response(s, TIMEOUT)


def zeros_gzip(n: int) -> bytes:
    """`n` zero bytes gzipped, made on the fly (1 GiB is ~1 MiB of gzip)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(MiB)
    return b"".join(c.compress(block) for _ in range(n // MiB)) + c.flush()


def hwm_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


# ---- the SDK ------------------------------------------------------------------------------------------

def test_sdk_gzip_write_round_trips(envd, monkeypatch, tmp_path):
    point_sdk_at(monkeypatch, envd.envd)
    sbx = Sandbox.create()
    sent = []
    sbx.files._envd_api.event_hooks["request"].append(
        lambda r: sent.append(r.headers.get("content-encoding")) if r.url.path == "/files" else None)
    d = tmp_path / "gz"
    text = "héllo\n\nworld\r\n" * 1000
    binary = bytes(range(256)) * 41
    big = os.urandom(3 * MiB) + bytes(3 * MiB) + b"tail"  # incompressible, then a run of zeros
    sbx.files.write(f"{d}/text.txt", text, gzip=True)
    sbx.files.write(f"{d}/bin.dat", binary, gzip=True)
    sbx.files.write(f"{d}/big.dat", big, gzip=True)
    sbx.files.write(f"{d}/streamed.dat", io.BytesIO(big), gzip=True)  # gzip_iter: chunked, many flushes
    sbx.files.write(f"{d}/empty.txt", b"", gzip=True)
    written = sbx.files.write_files([WriteEntry(path=f"{d}/m/one.txt", data="1"),
                                     WriteEntry(path=f"{d}/m/deep/two.bin", data=b"\x00\x02" * 70000)], gzip=True)
    assert [w.path for w in written] == [f"{d}/m/one.txt", f"{d}/m/deep/two.bin"]
    # Every upload went compressed (the SDK falls back to plain multipart
    # for an envd it thinks too old; that would prove nothing).
    assert sent == ["gzip"] * 7, sent
    assert sbx.files.read(f"{d}/text.txt") == text
    assert bytes(sbx.files.read(f"{d}/bin.dat", format="bytes")) == binary
    for name in ("big.dat", "streamed.dat"):
        got = bytes(sbx.files.read(f"{d}/{name}", format="bytes"))
        assert hashlib.sha256(got).hexdigest() == hashlib.sha256(big).hexdigest(), name
    assert (d / "empty.txt").read_bytes() == b""
    assert sbx.files.read(f"{d}/m/one.txt") == "1"
    assert bytes(sbx.files.read(f"{d}/m/deep/two.bin", format="bytes")) == b"\x00\x02" * 70000
    assert sorted(p.name for p in d.iterdir()) == ["big.dat", "bin.dat", "empty.txt", "m", "streamed.dat", "text.txt"]


# ---- raw: what the SDK does not send ---------------------------------------------------------------------

def test_members_multipart_and_codings(envd, tmp_path):
    # Concatenated members are one file (gzip(1), Go's gzip.Reader).
    st, _, body = post(envd, tmp_path / "two", gzip.compress(b"first ") + gzip.compress(b"second"))
    assert st == 200 and json.loads(body)[0]["path"] == str(tmp_path / "two")
    assert (tmp_path / "two").read_bytes() == b"first second"
    # x-gzip and any case are gzip.
    assert post(envd, tmp_path / "x", gzip.compress(b"x"), encoding="X-GZip")[0] == 200
    assert (tmp_path / "x").read_bytes() == b"x"
    # A gzipped multipart body goes through the same decoder.
    mp = (b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n" + b"multi" * 1000 +
          b"\r\n--B--\r\n")
    st, _, _ = post(envd, tmp_path / "mp", gzip.compress(mp), content_type="multipart/form-data; boundary=B")
    assert st == 200 and (tmp_path / "mp").read_bytes() == b"multi" * 1000
    # Other codings are refused, not stored.
    for coding in ("br", "deflate", "gzip, gzip"):
        st, _, body = post(envd, tmp_path / "no", gzip.compress(b"x"), encoding=coding)
        assert st == 415 and b"Content-Encoding" in body, coding
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("kind", ["garbage", "bad_crc", "cut", "trailing", "empty"])
def test_corrupt_gzip_is_400_and_leaves_nothing(envd, tmp_path, kind):
    d = tmp_path / "up"
    d.mkdir()
    (d / "kept.txt").write_bytes(b"old")
    good = gzip.compress(os.urandom(2 * MiB))
    body = {"garbage": b"this is not gzip" * 100,
            "bad_crc": good[:-8] + bytes([good[-8] ^ 1]) + good[-7:],
            "cut": good[:len(good) // 2],
            "trailing": good + b"junk",
            "empty": b""}[kind]
    for target in (d / "new" / "file.bin", d / "kept.txt"):
        st, _, resp = post(envd, target, body)
        err = json.loads(resp)
        assert st == 400 and "gzip" in err["message"], (kind, st, resp)
    # No file, no temp file, no directory made for it; the old file as it was.
    assert sorted(p.name for p in d.iterdir()) == ["kept.txt"]
    assert (d / "kept.txt").read_bytes() == b"old"


def test_bomb_is_413_with_memory_flat_and_nothing_on_disk(envd, tmp_path):
    bomb = zeros_gzip(1 << 30)  # 1 GiB of zeros, ~1 MiB on the wire, 16x --archive-max-bytes
    assert len(bomb) < 2 * MiB
    d = tmp_path / "bomb"
    d.mkdir()
    base = hwm_kib(envd.pid)
    st, _, body = post(envd, d / "zeros", bomb)
    err = json.loads(body)
    assert st == 413 and err["code"] == "PAYLOAD_TOO_LARGE" and str(LIMIT) in err["message"], body
    assert list(d.iterdir()) == []
    # Inflated a piece at a time, only while the writer keeps up: execd's peak
    # grows by the upload's write queue, not by what one read inflates to
    # (a 64 KiB read of this body is 64 MiB of zeros).
    if not SANITIZED:  # ASan's quarantine holds freed memory
        assert hwm_kib(envd.pid) - base < 24 * 1024, (base, hwm_kib(envd.pid))
    # At the bound exactly it is a file.
    st, _, _ = post(envd, d / "exact", zeros_gzip(LIMIT))
    assert st == 200 and (d / "exact").stat().st_size == LIMIT


@pytest.mark.parametrize("what", ["random", "zeros"])
def test_reset_mid_body_leaves_no_temp_file(envd, tmp_path, what):
    d = tmp_path / "reset"
    d.mkdir()
    body = gzip.compress(os.urandom(8 * MiB)) if what == "random" else zeros_gzip(48 * MiB)
    s = socket.create_connection(host_port(envd.envd), timeout=TIMEOUT)
    head = request_bytes(envd.envd, f"/files?path={d}/f", b"", "application/octet-stream",
                         headers={"Content-Encoding": "gzip"}).replace(b"Content-Length: 0",
                                                                       f"Content-Length: {len(body) + 1000}".encode())
    s.sendall(head + body)  # all but the last 1000 bytes promised: execd waits for them
    # A temp file is being written; then the client is gone.
    wait_until(lambda: any(d.iterdir()), TIMEOUT, 0.02, "the upload's temp file")
    reset(s)
    wait_until(lambda: not any(d.iterdir()), TIMEOUT, 0.02, "the temp file to be removed")
    st, _, _ = post(envd, d / "after", gzip.compress(b"still serving"))
    assert st == 200 and (d / "after").read_bytes() == b"still serving"


def test_no_token_is_401_before_the_body(execd_factory, tmp_path):
    token = "gzip-secret"
    ex = execd_factory("--envd-port", "0", "--envd-access-token", token, "--envd-host", "127.0.0.1")
    ex.envd = listener_url(ex)
    body = gzip.compress(b"guarded")
    for headers in ({"X-Access-Token": None}, {"X-Access-Token": "wrong"}):
        with socket.create_connection(host_port(ex.envd), timeout=TIMEOUT) as s:
            # A body promised far larger than sent: the answer cannot wait for it.
            s.sendall(request_bytes(ex.envd, f"/files?path={tmp_path}/g", body, "application/octet-stream",
                                    headers={"Content-Encoding": "gzip", **headers}).replace(
                f"Content-Length: {len(body)}".encode(), b"Content-Length: 1000000000"))
            assert read_response(s, TIMEOUT)[0] == 401
    assert not (tmp_path / "g").exists()
    st, _, _ = post(ex, tmp_path / "g", body, headers={"X-Access-Token": token})
    assert st == 200 and (tmp_path / "g").read_bytes() == b"guarded"
