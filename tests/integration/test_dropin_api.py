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


# The Go daemon's /metrics body (components/execd/pkg/web/model/metric.go):
# every key, with its JSON type. execd adds exactly the keys in
# METRICS_EXTRA (docs/api.md, "GET /metrics"), nothing else.
GO_METRICS = {"cpu_count": float, "cpu_used_pct": float, "mem_total_mib": float, "mem_used_mib": float,
              "timestamp": int}
METRICS_EXTRA = {"state_dir"}


def assert_go_metrics_shape(m: dict):
    missing = set(GO_METRICS) - set(m)
    assert not missing, f"the Go daemon's keys {missing} are missing from {m}"
    for key, kind in GO_METRICS.items():
        # A float64 that happens to be whole is written without a fraction.
        allowed = (int, float) if kind is float else (int,)
        assert isinstance(m[key], allowed) and not isinstance(m[key], bool), (key, m[key])
    assert set(m) - set(GO_METRICS) == METRICS_EXTRA, f"execd's keys beside the Go daemon's are not the documented {METRICS_EXTRA}: {m}"


def test_metrics_shape_and_speed(execd):
    t0 = time.monotonic()
    st, m = execd.json("GET", "/metrics")
    assert st == 200
    assert_go_metrics_shape(m)
    assert m["cpu_count"] >= 1 and 0 <= m["cpu_used_pct"] <= 100 * m["cpu_count"]
    assert 0 < m["mem_used_mib"] <= m["mem_total_mib"]
    assert abs(m["timestamp"] - time.time() * 1000) < 60_000
    # A second call answers from the background sample at once.
    t1 = time.monotonic()
    assert execd.json("GET", "/metrics")[0] == 200
    assert time.monotonic() - t1 < 0.5 * SLOW
    assert t1 - t0 < 3 * SLOW


def test_metrics_shows_the_state_directory_as_activity_does(execd):
    """/metrics adds one object to the Go daemon's body: the state directory's
    use against its budget (issue 43), the same figures as /activity's."""
    execd.run("head -c 300000 /dev/zero", id="metrics-output")
    st, m = execd.json("GET", "/metrics")
    assert st == 200
    st, a = execd.json("GET", "/activity")
    assert st == 200
    sd, want = m["state_dir"], a["state_dir"]
    assert list(sd) == list(want), (sd, want)
    assert all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in sd.values()), sd
    # Figures that do not move between the two calls are equal; the rest
    # are consistent with what just ran.
    for key in ("budget_bytes", "filesystem_bytes", "evicted_bytes", "trimmed_bytes"):
        assert sd[key] == want[key], key
    assert sd["output_bytes"] >= 300000, sd
    assert sd["used_bytes"] >= sd["output_bytes"] + sd["journal_bytes"], sd
    assert 0 < sd["budget_bytes"] <= 1 << 30 and sd["budget_bytes"] <= sd["filesystem_bytes"] // 4, sd
    # /metrics/watch keeps the Go daemon's lines exactly.
    s = socket.create_connection((execd.host, execd.port), timeout=20)
    try:
        s.sendall(f"GET /metrics/watch HTTP/1.1\r\nHost: x\r\n{TOKEN_HEADER}: {execd.token}\r\n\r\n".encode())
        buf = b""
        while b"}\n" not in buf.partition(b"\r\n\r\n")[2]:
            chunk = s.recv(65536)
            assert chunk, buf
            buf += chunk
    finally:
        s.close()
    body = buf.partition(b"\r\n\r\n")[2]
    line = body[body.index(b"{"):body.index(b"}\n") + 1]
    assert set(json.loads(line)) == set(GO_METRICS), line


def test_the_opensandbox_sdk_reads_metrics_with_the_added_object(execd):
    """The official SDK (1.1.1) decodes /metrics with the extra key: its
    generated model keeps what it does not know in additional_properties."""
    import asyncio

    from opensandbox.adapters.factory import AdapterFactory
    from opensandbox.api.execd.api.metric import get_metrics
    from opensandbox.config import ConnectionConfig
    from opensandbox.models.sandboxes import SandboxEndpoint

    async def main():
        cfg = ConnectionConfig(protocol="http").with_transport_if_missing()
        try:
            svc = AdapterFactory(cfg).create_metrics_service(
                SandboxEndpoint(endpoint=execd.endpoint, headers={TOKEN_HEADER: execd.token}))
            try:
                seen = await svc.get_metrics("local")
                raw = await get_metrics.asyncio_detailed(client=svc._client)
                return seen, raw
            finally:
                await svc._httpx_client.aclose()
        finally:
            await cfg.close_transport_if_owned()

    seen, raw = asyncio.run(main())
    assert seen.cpu_count >= 1 and 0 < seen.memory_used_in_mib <= seen.memory_total_in_mib
    assert raw.status_code == 200 and raw.parsed is not None
    assert raw.parsed.additional_properties["state_dir"]["budget_bytes"] > 0


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
