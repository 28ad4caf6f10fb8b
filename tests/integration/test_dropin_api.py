"""The rows of the upstream 1.0.19 endpoint table that changed (issue 9):
line-based downloads, /directories on existing directories, the logs
cursor, /metrics and /metrics/watch, Go's flag syntaxes and token sources.
Against the real binary, over plain HTTP."""

from __future__ import annotations

import json
import os
import socket
import stat
import time

import pytest

from execd_client import SLOW, TOKEN_HEADER, start_execd, wait_until


def test_download_by_lines(execd, tmp_path):
    f = tmp_path / "lines.txt"
    f.write_bytes(b"one\r\ntwo\nthree\n\nfive")
    q = f"/files/download?path={f}"
    st, h, body = execd.request("GET", q + "&offset=2&limit=3")
    assert st == 200 and h["content-type"].startswith("text/plain")
    assert body == b"two\nthree\n"
    assert execd.request("GET", q + "&offset=5")[2] == b"five"
    assert execd.request("GET", q + "&limit=1")[2] == b"one"
    assert execd.request("GET", q + "&offset=99")[:1] == (200,)
    for bad in ("offset=0", "limit=0", "offset=abc", "offset=1.5", "limit=-2"):
        st, _, body = execd.request("GET", q + "&" + bad)
        assert st == 400, bad
        assert json.loads(body)["code"] == "INVALID_REQUEST_BODY"
    st, _, body = execd.request("GET", q + "&offset=1", headers={"Range": "bytes=0-3"})
    assert st == 400 and b"mutually exclusive" in body
    assert execd.request("GET", f"/files/download?path={tmp_path}/nope&offset=1")[0] == 404
    # Without offset/limit, still the plain download.
    assert execd.request("GET", q)[2] == f.read_bytes()


def test_download_by_lines_does_not_read_the_rest_of_a_huge_file(execd, tmp_path):
    f = tmp_path / "sparse"
    with open(f, "wb") as fh:
        fh.write(b"a\nb\nc\n")
        fh.truncate(10 << 30)  # 10 GiB, sparse
    t0 = time.monotonic()
    st, _, body = execd.request("GET", f"/files/download?path={f}&offset=2&limit=1")
    assert (st, body) == (200, b"b")
    assert time.monotonic() - t0 < 5 * SLOW


def test_make_directories_leaves_existing_ones_alone(execd, tmp_path):
    d = tmp_path / "keep"
    d.mkdir(mode=0o700)
    os.chmod(d, 0o700)
    new = tmp_path / "new"
    st, _ = execd.json("POST", "/directories", {str(d): {"mode": 755}, str(new): {"mode": 750}})
    assert st == 200
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o750


def test_logs_cursor_as_go_reads_it(execd):
    r = execd.run("printf 'hello world'", background=True)
    cid = r.id
    execd.wait_finished(cid)
    for cursor, want in (("9223372036854775808", b"hello world"), ("abc", b"hello world"), ("6", b"world")):
        st, h, body = execd.logs(cid, cursor)
        assert (st, body) == (200, want), cursor
    st, h, body = execd.logs(cid, "-1")
    assert st == 400


def test_metrics_shape_and_speed(execd):
    t0 = time.monotonic()
    st, m = execd.json("GET", "/metrics")
    assert st == 200
    assert set(m) == {"cpu_count", "cpu_used_pct", "mem_total_mib", "mem_used_mib", "timestamp"}
    assert m["cpu_count"] >= 1 and 0 <= m["cpu_used_pct"] <= 100 * m["cpu_count"]
    assert 0 < m["mem_used_mib"] <= m["mem_total_mib"]
    assert abs(m["timestamp"] - time.time() * 1000) < 60_000
    # A second call answers from the background sample at once.
    t1 = time.monotonic()
    assert execd.json("GET", "/metrics")[0] == 200
    assert time.monotonic() - t1 < 0.5 * SLOW
    assert t1 - t0 < 3 * SLOW


def test_metrics_watch_streams_samples(execd):
    s = socket.create_connection((execd.host, execd.port), timeout=20)
    s.sendall(f"GET /metrics/watch HTTP/1.1\r\nHost: x\r\n{TOKEN_HEADER}: {execd.token}\r\n\r\n".encode())
    buf = b""
    while buf.count(b'"cpu_count"') < 2:
        chunk = s.recv(65536)
        assert chunk, buf
        buf += chunk
    assert buf.startswith(b"HTTP/1.1 200") and b"text/event-stream" in buf
    s.close()
    assert execd.ping() == 200


def test_go_flag_syntaxes_and_unknown_flags(execd_factory):
    ex = execd_factory("-graceful-shutdown-timeout=2s", "--log-level", "6", "-jupyter-host", "http://127.0.0.1:1")
    assert ex.ping() == 200
    assert "jupyter" in ex.stderr_text()  # accepted with a warning
    proc, pump = start_execd("--no-such-flag", wait=False)
    assert proc.wait(10) == 2


def test_token_from_env_file(execd_factory, tmp_path):
    tf = tmp_path / "token"
    tf.write_text("s3cret-from-file\n")
    env = dict(os.environ, EXECD_ACCESS_TOKEN_FILE=str(tf))
    env.pop("EXECD_ACCESS_TOKEN", None)
    ex = execd_factory(token=None, env=env)
    ex.token = "s3cret-from-file"
    assert ex.request("GET", "/command/status/x")[0] == 404
    assert ex.request("GET", "/command/status/x", token=False)[0] == 401
    r = ex.run("echo $EXECD_ACCESS_TOKEN_FILE")
    assert r.texts("stdout") in ([], ["\n"])  # the variable is not inherited
