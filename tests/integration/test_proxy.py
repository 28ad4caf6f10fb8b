"""ANY /proxy/{port}/{rest}: execd as a streaming reverse proxy to services on
loopback (tests/integration/proxy_services.py, one process started per test
module): bytes equal both ways for large bodies, the token stripped,
hop-by-hop headers gone, X-Forwarded-* set, the port table, keep-alive reuse,
502/504, SSE and long polls flushed as written, 200 concurrent WebSockets, a
raw upgraded tunnel with half-close, HTTP/1.0 clients, services and clients
resetting at each phase, and the official SDK through the bridge-style
endpoint `<host>:<execd port>/proxy/{port}`."""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest
import websockets

from execd_client import SANITIZED, SLOW, TOKEN_HEADER, recv_all, vm_rss_kib, wait_until

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import proxy_services  # noqa: E402

GIB = 1 << 30
BIG = GIB if not SANITIZED else 256 << 20  # the ASan build is several times slower per byte
# Growth allowed while a peer is stalled: two write queues' worth and change.
# ASan's quarantine keeps freed buffers (up to 256 MiB) resident, so there the
# bound only catches gross buffering; the plain build holds the tight one.
RSS_GROWTH_KIB = (320 if SANITIZED else 48) * 1024


@pytest.fixture(scope="module")
def services():
    proc = subprocess.Popen([sys.executable, str(HERE / "proxy_services.py")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        ports = json.loads(proc.stdout.readline())
        yield ports
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def raw_request(ex, method, path, body=None, headers=None, token=True, timeout=30):
    c = http.client.HTTPConnection(ex.host, ex.port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=ex.headers(headers, token))
        r = c.getresponse()
        return r.status, r.getheaders(), r.read()
    finally:
        c.close()


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def reset_socket(s: socket.socket):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def connect(ex) -> socket.socket:
    s = socket.create_connection((ex.host, ex.port), timeout=30 * SLOW)
    return s


def send_head(s, ex, method, path, extra=""):
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\n{TOKEN_HEADER}: {ex.token}\r\n{extra}\r\n".encode())


def read_head(s) -> tuple[bytes, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        piece = s.recv(65536)
        assert piece, f"closed before a head: {buf!r}"
        buf += piece
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


# ---------------------------------------------------------------------------
# Requests and headers


def test_path_query_and_headers(execd, services):
    port = services["aiohttp"]
    path = f"/proxy/{port}/echo/a/%2e%2e/b%2Fc/../d?x=%20y&z=1&&q"
    st, headers, body = raw_request(execd, "GET", path, headers={
        "Connection": "keep-alive, X-Private", "X-Private": "secret-hop", "Keep-Alive": "timeout=3",
        "TE": "trailers", "Proxy-Authorization": "Basic eA==", "X-Forwarded-For": "10.9.9.9",
        "X-Custom": "kept"})
    assert st == 200, body
    seen = json.loads(body)
    assert seen["raw_path"] == "/echo/a/%2e%2e/b%2Fc/../d?x=%20y&z=1&&q"
    names = {k.lower(): v for k, v in seen["headers"]}
    assert TOKEN_HEADER.lower() not in names
    assert execd.token not in body.decode()
    for gone in ("x-private", "keep-alive", "te", "proxy-authorization", "trailer", "upgrade"):
        assert gone not in names, gone
    assert names["x-custom"] == "kept"
    assert names["host"] == "x" or names["host"].startswith("127.0.0.1")
    assert names["x-forwarded-for"] == "10.9.9.9, 127.0.0.1"
    assert names["x-forwarded-proto"] == "http"
    assert names["x-forwarded-host"] == names["host"]
    assert names["x-forwarded-prefix"] == f"/proxy/{port}"
    # The service's own hop-by-hop headers do not reach the client.
    got = {k.lower(): v for k, v in headers}
    assert got["x-end"] == "kept"
    for gone in ("x-hop", "keep-alive", "proxy-authenticate"):
        assert gone not in got, gone


def test_host_kept(execd, services):
    s = connect(execd)
    try:
        s.sendall(f"GET /proxy/{services['aiohttp']}/echo/h HTTP/1.1\r\nHost: app.example:9\r\n"
                  f"{TOKEN_HEADER}: {execd.token}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while piece := s.recv(65536):
            data += piece
    finally:
        s.close()
    seen = json.loads(data.partition(b"\r\n\r\n")[2])
    names = {k.lower(): v for k, v in seen["headers"]}
    assert names["host"] == "app.example:9"
    assert names["x-forwarded-host"] == "app.example:9"


def test_token_required(execd, services):
    st, _, body = raw_request(execd, "GET", f"/proxy/{services['aiohttp']}/echo/x", token=False)
    assert st == 401
    assert json.loads(body)["code"] == "UNAUTHORIZED"
    st, _, _ = raw_request(execd, "GET", f"/proxy/{services['aiohttp']}/echo/x", headers={TOKEN_HEADER: "wrong"})
    assert st == 401


@pytest.mark.parametrize("port", ["0", "65536", "+80", "080", "0x50", "abc", "", "-1", "%38%30", "1e3"])
def test_port_table(execd, port):
    st, _, body = raw_request(execd, "GET", f"/proxy/{port}/x")
    assert st == 400, (port, body)
    assert json.loads(body)["code"] == "BAD_REQUEST"


def test_own_port_refused(execd):
    st, _, body = raw_request(execd, "GET", f"/proxy/{execd.port}/ping")
    assert st == 400
    assert json.loads(body)["code"] == "BAD_REQUEST"


def test_plain_http_server(execd, services):
    st, _, body = raw_request(execd, "GET", f"/proxy/{services['plain']}/hello.txt")
    assert st == 200
    assert body == b"hello from http.server\n"
    st, _, _ = raw_request(execd, "GET", f"/proxy/{services['plain']}/missing")
    assert st == 404
    st, headers, body = raw_request(execd, "HEAD", f"/proxy/{services['plain']}/hello.txt")
    assert st == 200 and body == b""
    assert dict((k.lower(), v) for k, v in headers)["content-length"] == "23"


def test_not_subject_to_max_body(execd_factory, services):
    ex = execd_factory("--max-body", "1024")
    payload = os.urandom(1 << 20)
    st, _, body = raw_request(ex, "POST", f"/proxy/{services['aiohttp']}/upload", body=payload)
    assert st == 200, body
    assert json.loads(body) == {"sha256": hashlib.sha256(payload).hexdigest(), "size": len(payload),
                                "chunked": False}


def test_keep_alive_reuse(execd, services):
    port = services["aiohttp"]
    before = json.loads(raw_request(execd, "GET", f"/proxy/{port}/connections")[2])["connections"]
    for i in range(20):
        st, _, _ = raw_request(execd, "GET", f"/proxy/{port}/echo/{i}")
        assert st == 200
    after = json.loads(raw_request(execd, "GET", f"/proxy/{port}/connections")[2])["connections"]
    assert after - before <= 2, (before, after)


def flaky_stats(port: int) -> dict:
    """Asked of the service directly (not through execd, whose pool it would disturb)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", "/stats")
        return json.loads(c.getresponse().read())
    finally:
        c.close()


def test_closed_kept_alive_connection_retried_for_get(execd, services):
    port = services["flaky"]
    tag = os.urandom(6).hex()
    st, _, body = raw_request(execd, "GET", f"/proxy/{port}/ok/{tag}/1")
    assert st == 200
    first = json.loads(body)["connection"]
    # The pooled connection is reset when this request arrives on it: execd
    # tries once more on a fresh connection, and the client never knows.
    st, _, body = raw_request(execd, "GET", f"/proxy/{port}/ok/{tag}/2")
    assert st == 200, body
    second = json.loads(body)
    assert second["connection"] != first and second["request"] == 0
    stats = flaky_stats(port)
    assert [d for d in stats["dropped"] if d[3] == f"/ok/{tag}/2"] == [[first, 1, "GET", f"/ok/{tag}/2"]]
    assert [a[0] for a in stats["answered"] if a[3] == f"/ok/{tag}/2"] == [second["connection"]]


def test_closed_kept_alive_connection_retried_once_only(execd, services):
    port = services["flaky"]
    tag = os.urandom(6).hex()
    assert raw_request(execd, "GET", f"/proxy/{port}/ok/{tag}")[0] == 200
    # Dropped on the reused connection and again on the fresh one: 502, no loop.
    st, _, body = raw_request(execd, "GET", f"/proxy/{port}/always-drop/{tag}")
    assert st == 502 and json.loads(body)["code"] == "BAD_GATEWAY"
    dropped = [d for d in flaky_stats(port)["dropped"] if d[3] == f"/always-drop/{tag}"]
    assert len(dropped) == 2 and dropped[0][0] != dropped[1][0], dropped


@pytest.mark.parametrize("method,body", [("POST", b"b" * 100000), ("PUT", b"p" * 100), ("POST", None)])
def test_closed_kept_alive_connection_not_retried_with_body_or_unsafe(execd, services, method, body):
    port = services["flaky"]
    tag = os.urandom(6).hex()
    assert raw_request(execd, "GET", f"/proxy/{port}/ok/{tag}/1")[0] == 200
    # A body was (being) sent, or the method is not idempotent: the service
    # may have acted on it, so execd answers 502 rather than repeat it.
    st, _, resp = raw_request(execd, method, f"/proxy/{port}/ok/{tag}/2", body=body)
    assert st == 502 and json.loads(resp)["code"] == "BAD_GATEWAY", resp
    stats = flaky_stats(port)
    assert len([d for d in stats["dropped"] if d[3] == f"/ok/{tag}/2"]) == 1
    assert not [a for a in stats["answered"] if a[3] == f"/ok/{tag}/2"]
    # The next request is fine (on a fresh connection).
    assert raw_request(execd, "GET", f"/proxy/{port}/ok/{tag}/3")[0] == 200


# ---------------------------------------------------------------------------
# Errors


def test_bad_gateway(execd):
    st, _, body = raw_request(execd, "GET", f"/proxy/{free_port()}/x")
    assert st == 502
    assert json.loads(body)["code"] == "BAD_GATEWAY"
    # With a body on the way, too.
    st, _, body = raw_request(execd, "POST", f"/proxy/{free_port()}/x", body=b"x" * 100000)
    assert st == 502


def test_gateway_timeout(execd_factory, services):
    ex = execd_factory("--proxy-timeout", "400ms")
    t0 = time.monotonic()
    st, _, body = raw_request(ex, "GET", f"/proxy/{services['aiohttp']}/hang")
    assert st == 504
    assert json.loads(body)["code"] == "GATEWAY_TIMEOUT"
    assert time.monotonic() - t0 >= 0.4


def test_service_reset_mid_body_closes_client(execd, services):
    c = http.client.HTTPConnection(execd.host, execd.port, timeout=30)
    c.request("GET", f"/proxy/{services['aiohttp']}/reset", headers=execd.headers())
    r = c.getresponse()
    assert r.status == 200
    with pytest.raises(http.client.IncompleteRead):
        r.read()
    c.close()
    # Chunked to the client: the last chunk must never come.
    s = connect(execd)
    try:
        send_head(s, execd, "GET", f"/proxy/{services['aiohttp']}/reset")
        head, rest = read_head(s)
        assert b" 200 " in head.split(b"\r\n")[0]
        data = rest
        while piece := s.recv(1 << 20):
            data += piece
        assert len(data) < 4 << 20
    finally:
        s.close()
    assert execd.ping() == 200


# ---------------------------------------------------------------------------
# Streaming


def test_download_big_sized(execd, services):
    c = http.client.HTTPConnection(execd.host, execd.port, timeout=120 * SLOW)
    c.request("GET", f"/proxy/{services['aiohttp']}/download?size={BIG}", headers=execd.headers())
    r = c.getresponse()
    assert r.status == 200
    assert r.getheader("Content-Length") == str(BIG)
    h = hashlib.sha256()
    n = 0
    while piece := r.read(1 << 20):
        h.update(piece)
        n += len(piece)
    c.close()
    assert n == BIG
    assert h.hexdigest() == proxy_services.expected_sha(BIG)


def test_download_chunked(execd, services):
    size = 64 << 20 | 12345
    c = http.client.HTTPConnection(execd.host, execd.port, timeout=60 * SLOW)
    c.request("GET", f"/proxy/{services['aiohttp']}/download?size={size}&chunked=1", headers=execd.headers())
    r = c.getresponse()
    assert r.getheader("Transfer-Encoding") == "chunked"
    data = r.read()
    c.close()
    assert len(data) == size
    assert hashlib.sha256(data).hexdigest() == proxy_services.expected_sha(size)


def _generated(size):
    b = proxy_services.block()
    sent = 0
    while sent < size:
        n = min(len(b), size - sent)
        yield b if n == len(b) else b[:n]
        sent += n


def test_upload_big_sized(execd, services):
    c = http.client.HTTPConnection(execd.host, execd.port, timeout=120 * SLOW)
    c.request("PUT", f"/proxy/{services['aiohttp']}/upload", body=_generated(BIG),
              headers=execd.headers({"Content-Length": str(BIG)}))
    r = c.getresponse()
    body = r.read()
    c.close()
    assert r.status == 200, body
    assert json.loads(body) == {"sha256": proxy_services.expected_sha(BIG), "size": BIG, "chunked": False}


def test_upload_chunked_to_slow_reader_bounded_memory(execd, services):
    size = 96 << 20
    rss0 = vm_rss_kib(execd.pid)
    peak = [rss0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], vm_rss_kib(execd.pid))
            time.sleep(0.02)
    t = threading.Thread(target=sample)
    t.start()
    try:
        c = http.client.HTTPConnection(execd.host, execd.port, timeout=60 * SLOW)
        c.request("POST", f"/proxy/{services['aiohttp']}/upload?delay=1", body=_generated(size),
                  headers=execd.headers(), encode_chunked=True)
        r = c.getresponse()
        body = r.read()
        c.close()
    finally:
        stop.set()
        t.join()
    assert r.status == 200, body
    assert json.loads(body) == {"sha256": proxy_services.expected_sha(size), "size": size, "chunked": True}
    assert peak[0] - rss0 < RSS_GROWTH_KIB, (rss0, peak[0])


def test_slow_client_download_bounded_memory(execd, services):
    size = 256 << 20
    s = connect(execd)
    try:
        send_head(s, execd, "GET", f"/proxy/{services['aiohttp']}/download?size={size}")
        rss0 = vm_rss_kib(execd.pid)
        head, rest = read_head(s)
        # Read nothing for a while: the service must be paused, not buffered.
        deadline = time.monotonic() + 1.0
        peak = rss0
        while time.monotonic() < deadline:
            peak = max(peak, vm_rss_kib(execd.pid))
            time.sleep(0.05)
        h = hashlib.sha256(rest)
        n = len(rest)
        while n < size:
            piece = s.recv(1 << 20)
            assert piece
            h.update(piece)
            n += len(piece)
    finally:
        s.close()
    assert n == size and h.hexdigest() == proxy_services.expected_sha(size)
    assert peak - rss0 < RSS_GROWTH_KIB, (rss0, peak)


def test_sse_and_long_poll_flush_as_written(execd, services):
    port = services["aiohttp"]
    s = connect(execd)
    try:
        send_head(s, execd, "GET", f"/proxy/{port}/sse")
        head, rest = read_head(s)
        assert b"text/event-stream" in head
        data = rest
        while b"data: one" not in data:  # arrives while the service still holds the stream open
            piece = s.recv(65536)
            assert piece
            data += piece
        assert b"data: two" not in data
        assert raw_request(execd, "GET", f"/proxy/{port}/release")[0] == 200
        while b"0\r\n\r\n" not in data:
            piece = s.recv(65536)
            assert piece
            data += piece
        assert b"data: two" in data
    finally:
        s.close()

    result = {}
    t = threading.Thread(target=lambda: result.update(r=raw_request(execd, "GET", f"/proxy/{port}/longpoll")))
    t.start()

    def answered():
        raw_request(execd, "GET", f"/proxy/{port}/release")  # (again, if the poll was not in yet)
        t.join(0.05)
        return not t.is_alive()
    wait_until(answered, 10 * SLOW, what="long poll answer")
    assert result["r"][0] == 200 and result["r"][2] == b"released"


def test_http10_client_gets_close_delimited_body(execd, services):
    s = connect(execd)
    try:
        s.sendall(f"GET /proxy/{services['aiohttp']}/download?size=300000&chunked=1 HTTP/1.0\r\n"
                  f"{TOKEN_HEADER}: {execd.token}\r\n\r\n".encode())
        data = b""
        while piece := s.recv(1 << 20):
            data += piece
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head.lower()
    assert b"connection: close" in head.lower()
    assert hashlib.sha256(body).hexdigest() == proxy_services.expected_sha(300000)


# ---------------------------------------------------------------------------
# Spliced bodies (sized, or close-delimited to an HTTP/1.0 client, with more
# than 64 KiB left after the head: service socket -> pipe -> client socket)


def read_sized_body(s, rest: bytes, size: int) -> tuple[int, str]:
    h = hashlib.sha256(rest[:size])
    n = min(len(rest), size)
    while n < size:
        piece = s.recv(min(1 << 20, size - n))
        assert piece, f"closed after {n} of {size} bytes"
        h.update(piece)
        n += len(piece)
    return n, h.hexdigest()


def test_spliced_bodies_back_to_back_on_one_connection(execd, services):
    port = services["aiohttp"]
    before = json.loads(raw_request(execd, "GET", f"/proxy/{port}/connections")[2])["connections"]
    s = connect(execd)
    try:
        # Pipes and upstream connections go back for reuse after each body:
        # any byte left behind would show in the next digest.
        for size in (64 << 10, (64 << 10) + 1, 5 << 20 | 777, 32 << 20):
            send_head(s, execd, "GET", f"/proxy/{port}/download?size={size}")
            head, rest = read_head(s)
            assert b" 200 " in head.split(b"\r\n")[0] and f"Content-Length: {size}".encode() in head
            assert read_sized_body(s, rest, size) == (size, proxy_services.expected_sha(size))
        send_head(s, execd, "GET", f"/proxy/{port}/echo/after")
        head, rest = read_head(s)
        assert b" 200 " in head.split(b"\r\n")[0]
    finally:
        s.close()
    after = json.loads(raw_request(execd, "GET", f"/proxy/{port}/connections")[2])["connections"]
    assert after - before <= 2, (before, after)


def test_spliced_close_delimited_body_to_http10_client(execd, services):
    size = 24 << 20 | 4321
    s = connect(execd)
    try:
        s.sendall(f"GET /proxy/{services['flaky']}/close-delimited?size={size} HTTP/1.0\r\n"
                  f"{TOKEN_HEADER}: {execd.token}\r\n\r\n".encode())
        head, rest = read_head(s)
        h = hashlib.sha256(rest)
        n = len(rest)
        while piece := s.recv(1 << 20):
            h.update(piece)
            n += len(piece)
    finally:
        s.close()
    assert b"connection: close" in head.lower() and b"content-length" not in head.lower()
    assert (n, h.hexdigest()) == (size, proxy_services.expected_sha(size))


def test_spliced_close_delimited_body_to_http11_client_is_chunked(execd, services):
    # One chunk per pipe load; the connection stays usable after the last chunk.
    c = http.client.HTTPConnection(execd.host, execd.port, timeout=60 * SLOW)
    try:
        socks = []
        for size in (24 << 20 | 4321, 100 << 10):
            c.request("GET", f"/proxy/{services['flaky']}/close-delimited?size={size}", headers=execd.headers())
            socks.append(c.sock)
            r = c.getresponse()
            assert r.status == 200 and r.getheader("Transfer-Encoding") == "chunked"
            data = r.read()
            assert (len(data), hashlib.sha256(data).hexdigest()) == (size, proxy_services.expected_sha(size))
        assert socks[0] is socks[1] and socks[0] is not None  # kept alive
    finally:
        c.close()


def test_close_delimited_body_reset_is_never_a_complete_response(execd, services):
    # To an HTTP/1.1 client the body goes chunked: a reset (not a close) of
    # the service must not produce the last chunk.
    s = connect(execd)
    try:
        send_head(s, execd, "GET", f"/proxy/{services['flaky']}/close-delimited?size={64 << 20}&reset={8 << 20}")
        head, rest = read_head(s)
        assert b"transfer-encoding: chunked" in head.lower()
        data = rest
        while not data.endswith(b"0\r\n\r\n") and (piece := s.recv(1 << 20)):
            data += piece
        assert not data.endswith(b"0\r\n\r\n")  # the connection closed instead
    finally:
        s.close()
    assert execd.ping() == 200


def test_spliced_body_service_reset_closes_client(execd, services):
    # Sized (4 MiB promised, reset after 1): the client sees a short body and
    # the connection closed. Close-delimited to an HTTP/1.0 client: closed
    # short. Either way execd goes on serving.
    c = http.client.HTTPConnection(execd.host, execd.port, timeout=30 * SLOW)
    c.request("GET", f"/proxy/{services['aiohttp']}/reset", headers=execd.headers())
    r = c.getresponse()
    with pytest.raises(http.client.IncompleteRead):
        r.read()
    c.close()
    s = connect(execd)
    try:
        s.sendall(f"GET /proxy/{services['flaky']}/close-delimited?size={64 << 20}&reset={8 << 20} HTTP/1.0\r\n"
                  f"{TOKEN_HEADER}: {execd.token}\r\n\r\n".encode())
        head, rest = read_head(s)
        n = len(rest)
        try:
            while piece := s.recv(1 << 20):
                n += len(piece)
        except ConnectionResetError:
            pass
        assert n < 64 << 20
    finally:
        s.close()
    assert execd.ping() == 200


@pytest.mark.parametrize("phase", ["after-head", "mid-body", "stalled", "half-close"])
def test_spliced_body_client_vanishes(execd, services, phase):
    port = services["aiohttp"]
    size = 256 << 20
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 << 10)  # fills early when not read
    s.settimeout(30 * SLOW)
    s.connect((execd.host, execd.port))
    send_head(s, execd, "GET", f"/proxy/{port}/download?size={size}")
    head, rest = read_head(s)
    assert f"Content-Length: {size}".encode() in head
    if phase == "mid-body":
        read_sized_body(s, rest, 8 << 20)
    elif phase == "stalled":
        # Read nothing until our receive buffer holds most of what it can:
        # execd then waits for the client to be writable, the pipe full.
        def queued():
            return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
        wait_until(lambda: queued() >= 128 << 10, 10 * SLOW, what="client receive buffer filling")
    if phase == "half-close":
        s.shutdown(socket.SHUT_WR)
        s.settimeout(30 * SLOW)
        try:
            while s.recv(1 << 20):
                pass
        except ConnectionResetError:
            pass
        s.close()
    else:
        reset_socket(s)
    # Still serving; the next spliced body is whole (no stale pipe bytes).
    assert execd.ping() == 200
    s = connect(execd)
    try:
        size2 = 3 << 20 | 99
        send_head(s, execd, "GET", f"/proxy/{port}/download?size={size2}")
        head, rest = read_head(s)
        assert read_sized_body(s, rest, size2) == (size2, proxy_services.expected_sha(size2))
    finally:
        s.close()


# ---------------------------------------------------------------------------
# Upgrades


def test_websockets_200_concurrent(execd, services):
    url = f"ws://{execd.host}:{execd.port}/proxy/{services['ws']}/chat"

    async def one(i):
        async with websockets.connect(url, additional_headers={TOKEN_HEADER: execd.token}, max_size=None,
                                      open_timeout=30 * SLOW) as ws:
            for j in range(3):
                msg = f"hello {i} {j}" * (1 + j * 100)
                await ws.send(msg)
                assert await ws.recv() == msg
            big = os.urandom(3 << 20) if i % 50 == 0 else b"x"
            await ws.send(big)
            assert await ws.recv() == big

    async def main():
        await asyncio.gather(*(one(i) for i in range(200)))
    asyncio.run(main())
    assert execd.ping() == 200


def test_websocket_without_token_refused(execd, services):
    async def main():
        with pytest.raises(websockets.InvalidStatus) as e:
            async with websockets.connect(f"ws://{execd.host}:{execd.port}/proxy/{services['ws']}/"):
                pass
        assert e.value.response.status_code == 401
    asyncio.run(main())


def test_tunnel_half_close_both_ways(execd, services):
    s = connect(execd)
    try:
        send_head(s, execd, "GET", f"/proxy/{services['tunnel']}/", "Connection: Upgrade\r\nUpgrade: echo\r\n")
        head, rest = read_head(s)
        assert head.startswith(b"HTTP/1.1 101 ")
        assert b"upgrade: echo" in head.lower()
        payload = os.urandom(8 << 20)
        got = bytearray(rest)

        def reader():
            while piece := s.recv(1 << 20):
                got.extend(piece)
        t = threading.Thread(target=reader)
        t.start()
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)  # the service sees EOF, answers BYE and closes; we see EOF
        t.join(60 * SLOW)
        assert not t.is_alive()
    finally:
        s.close()
    assert bytes(got) == payload + b"BYE"


# ---------------------------------------------------------------------------
# Clients vanishing at each phase (the ASan run checks for use-after-free)


def test_client_resets_at_each_phase(execd, services):
    port = services["aiohttp"]
    # Before the upstream head.
    s = connect(execd)
    send_head(s, execd, "GET", f"/proxy/{port}/hang")
    time.sleep(0.05)
    reset_socket(s)
    # Mid-request body.
    s = connect(execd)
    send_head(s, execd, "POST", f"/proxy/{port}/upload", f"Content-Length: {64 << 20}\r\n")
    s.sendall(b"x" * (4 << 20))
    reset_socket(s)
    # Mid-response body.
    s = connect(execd)
    send_head(s, execd, "GET", f"/proxy/{port}/download?size={256 << 20}")
    read_head(s)
    s.recv(65536)
    reset_socket(s)
    # Before connect finished / with the connection refused.
    s = connect(execd)
    send_head(s, execd, "GET", f"/proxy/{free_port()}/x")
    reset_socket(s)
    # Mid-tunnel, both kinds.
    for svc in ("tunnel", "ws"):
        s = connect(execd)
        send_head(s, execd, "GET", f"/proxy/{services[svc]}/",
                  "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
        read_head(s)
        s.sendall(b"\x81\x85\x00\x00\x00\x00hello" if svc == "ws" else b"data")
        reset_socket(s)
    # Upgrade request closed before the 101.
    s = connect(execd)
    send_head(s, execd, "GET", f"/proxy/{port}/hang", "Connection: Upgrade\r\nUpgrade: echo\r\n")
    s.close()
    # Garbage after the head of a proxied request.
    s = connect(execd)
    s.sendall(f"POST /proxy/{port}/upload HTTP/1.1\r\n{TOKEN_HEADER}: {execd.token}\r\n"
              "Transfer-Encoding: chunked\r\n\r\nzz\r\n".encode())
    data = s.recv(65536)
    assert data.startswith(b"HTTP/1.1 400")
    s.close()
    # Still serving, and proxying.
    assert execd.ping() == 200
    assert raw_request(execd, "GET", f"/proxy/{port}/echo/after")[0] == 200
    assert raw_request(execd, "GET", f"/proxy/{port}/release")[0] == 200


# ---------------------------------------------------------------------------
# The official SDK, through the bridge-style endpoint


def test_sdk_egress_policy_through_bridge_endpoint(execd, services):
    """On a bridge network the lifecycle server hands out `<host>:<execd
    port>/proxy/{port}` for every port but execd's own, with execd's token
    header; the SDK's egress service (network policy) then talks to the
    sidecar through it. Here the sidecar is the test service's GET /policy."""
    from opensandbox.adapters.factory import AdapterFactory
    from opensandbox.config import ConnectionConfig
    from opensandbox.models.sandboxes import SandboxEndpoint

    endpoint = SandboxEndpoint(endpoint=f"{execd.host}:{execd.port}/proxy/{services['aiohttp']}",
                               headers={TOKEN_HEADER: execd.token})

    async def main():
        cfg = ConnectionConfig(protocol="http").with_transport_if_missing()
        try:
            egress = AdapterFactory(cfg).create_egress_service(endpoint)
            return await egress.get_policy()
        finally:
            await cfg.close_transport_if_owned()
    policy = asyncio.run(main())
    assert policy.default_action == "deny"
    assert [r.target for r in policy.egress] == ["pypi.org"]


# ---------------------------------------------------------------------------
# Every phase bounded in time, resets seen while paused (hardening, second pass)


class DeafService:
    """Accepts connections and never reads from them (nor answers): a
    service that stopped reading an upload. With `head`, it sends that
    response head (and part of a body) once the request head is in, then
    goes silent."""

    def __init__(self, head: bytes | None = None):
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.head = head
        self.conns: list[socket.socket] = []
        self.stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            self.conns.append(c)
            if self.head is not None:
                buf = b""
                while b"\r\n\r\n" not in buf:
                    piece = c.recv(65536)
                    if not piece:
                        break
                    buf += piece
                c.sendall(self.head)

    def close(self):
        self.stop = True
        self.lsock.close()
        for c in self.conns:
            c.close()


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def stuff(s: socket.socket, total: int) -> int:
    """Sends up to `total` bytes until the peer stops taking them."""
    s.settimeout(0.5 * SLOW)
    sent = 0
    chunk = b"u" * (1 << 20)
    try:
        while sent < total:
            sent += s.send(chunk[: min(len(chunk), total - sent)])
    except (socket.timeout, BlockingIOError):
        pass
    return sent


def test_an_upload_to_a_service_that_stops_reading_is_timed_out(execd_factory):
    # The timeouts scale with SLOW as stuff()'s does: under ASan (SLOW 4) a
    # fixed 2 s proxy timeout raced stuff()'s 2 s wait for a blocked send,
    # and when it won, execd answered 504 and drained the rest of the body.
    ex = execd_factory("--proxy-timeout", f"{int(2 * SLOW)}s", "--body-timeout", f"{int(3 * SLOW)}s")
    deaf = DeafService()
    try:
        s = connect(ex)
        send_head(s, ex, "POST", f"/proxy/{deaf.port}/upload", f"Content-Length: {256 << 20}\r\n")
        assert stuff(s, 256 << 20) < 256 << 20  # execd stopped reading: the service does not
        t0 = time.monotonic()
        s.settimeout(20 * SLOW)
        data = recv_all(s)
        waited = time.monotonic() - t0
        assert data.startswith(b"HTTP/1.1 504"), data[:200]
        assert b"stopped reading" in data
        assert waited < 10 * SLOW, waited
        s.close()
    finally:
        deaf.close()
    assert ex.ping() == 200


def test_reset_uploads_to_a_stalled_service_release_everything_at_once(execd_factory):
    # The attack: uploads to a service that accepts and never reads, whose
    # clients then reset. execd paused their bodies (the service is full);
    # it must notice the resets anyway and let go of both connections and of
    # what it buffered for the service, without waiting for any timeout.
    ex = execd_factory("--proxy-timeout", "10m", "--body-timeout", "10m")
    deaf = DeafService()
    try:
        fds0, rss0 = open_fds(ex.pid), vm_rss_kib(ex.pid)
        socks = []
        for _ in range(20):
            s = connect(ex)
            send_head(s, ex, "POST", f"/proxy/{deaf.port}/upload", f"Content-Length: {64 << 20}\r\n")
            stuff(s, 64 << 20)
            socks.append(s)
        assert open_fds(ex.pid) >= fds0 + 40  # a client and a service connection each
        for s in socks:
            reset_socket(s)
        wait_until(lambda: open_fds(ex.pid) <= fds0 + 2, 10 * SLOW, 0.05, "execd to let go of the reset uploads")
        grown = vm_rss_kib(ex.pid) - rss0
        print(f"after 20 reset uploads to a stalled service: {open_fds(ex.pid) - fds0} fds, RSS +{grown} KiB")
        assert grown < RSS_GROWTH_KIB
        assert ex.ping() == 200
    finally:
        deaf.close()


def test_a_service_that_goes_silent_mid_body_is_cut_off(execd_factory):
    ex = execd_factory("--proxy-timeout", "1s")
    deaf = DeafService(head=b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000)
    try:
        s = connect(ex)
        send_head(s, ex, "GET", f"/proxy/{deaf.port}/slow")
        head, rest = read_head(s)
        assert b" 200 " in head
        t0 = time.monotonic()
        s.settimeout(20 * SLOW)
        data = rest
        while piece := s.recv(65536):
            data += piece
        assert len(data) == 1000  # the client sees a short body, never a complete one
        assert time.monotonic() - t0 < 10 * SLOW
        s.close()
    finally:
        deaf.close()


def test_an_idle_tunnel_is_closed_after_the_proxy_idle_timeout(execd_factory, services):
    ex = execd_factory("--proxy-idle-timeout", "1500ms")
    s = connect(ex)
    send_head(s, ex, "GET", f"/proxy/{services['tunnel']}/",
              "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
              "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
    head, _ = read_head(s)
    assert b" 101 " in head
    s.sendall(b"ping")
    t0 = time.monotonic()
    s.settimeout(20 * SLOW)
    data = b""
    while piece := s.recv(65536):
        data += piece
    idle_for = time.monotonic() - t0
    assert 1.0 <= idle_for < 10 * SLOW, idle_for
    s.close()


def test_tunnels_past_the_cap_get_429_before_anything_is_forwarded(execd_factory, services):
    ex = execd_factory("--max-tunnels", "1")
    upgrade = ("Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
    first = connect(ex)
    send_head(first, ex, "GET", f"/proxy/{services['tunnel']}/", upgrade)
    assert b" 101 " in read_head(first)[0]
    second = connect(ex)
    send_head(second, ex, "GET", f"/proxy/{services['tunnel']}/", upgrade)
    head, rest = read_head(second)
    assert b" 429 " in head.split(b"\r\n")[0], head
    second.close()
    first.close()
    # The place frees up with the first tunnel.
    def fits():
        s = connect(ex)
        try:
            send_head(s, ex, "GET", f"/proxy/{services['tunnel']}/", upgrade)
            return b" 101 " in read_head(s)[0]
        finally:
            s.close()
    wait_until(fits, 10 * SLOW, 0.05, "the tunnel's place to free up")
