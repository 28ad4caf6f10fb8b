"""HTTP/1.1 connection handling against the real daemon, over raw sockets:
bodies that arrive after their headers (httpx always writes them apart),
bodies dribbled a byte at a time, pipelined requests answered in order,
keep-alive reuse after a stream, and a slow client that does not delay others."""

from __future__ import annotations

import json
import socket
import threading
import time

from execd_client import SLOW, TOKEN_HEADER, parse_stream


def read_response(sock: socket.socket, buf: bytearray) -> tuple[int, dict, bytes]:
    """Reads one HTTP/1.1 response (Content-Length or chunked) from `sock`,
    keeping bytes of the next response in `buf`."""
    def fill():
        d = sock.recv(65536)
        if not d:
            raise AssertionError("connection closed mid-response")
        buf.extend(d)

    while b"\r\n\r\n" not in buf:
        fill()
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    del buf[: len(head) + 4]
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(buf) < n:
            fill()
        body = bytes(buf[:n])
        del buf[:n]
        return status, headers, body
    body = bytearray()
    while True:
        while b"\r\n" not in buf:
            fill()
        size_line, _, _ = bytes(buf).partition(b"\r\n")
        size = int(size_line, 16)
        while len(buf) < len(size_line) + 2 + size + 2:
            fill()
        del buf[: len(size_line) + 2]
        body += buf[:size]
        del buf[: size + 2]
        if size == 0:
            return status, headers, bytes(body)


def post_command(token: str, command: str) -> tuple[bytes, bytes]:
    body = json.dumps({"command": command}).encode()
    head = (f"POST /command HTTP/1.1\r\nHost: t\r\n{TOKEN_HEADER}: {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    return head, body


def stdout_of(body: bytes) -> list[str]:
    return [e["text"] for e in parse_stream(body, exact=False) if e["type"] == "stdout"]


def test_body_after_headers_and_byte_by_byte(execd):
    for dribble in (False, True):
        head, body = post_command(execd.token, "echo split-ok")
        with socket.create_connection((execd.host, execd.port), timeout=10 * SLOW) as s:
            s.sendall(head)
            if dribble:
                for b in body:
                    s.sendall(bytes([b]))
            else:
                s.sendall(body)
            status, headers, data = read_response(s, bytearray())
        assert status == 200
        assert stdout_of(data) == ["split-ok"]


def test_pipelined_requests_are_answered_in_order(execd):
    h1, b1 = post_command(execd.token, "echo first")
    ping = b"GET /ping HTTP/1.1\r\nHost: t\r\n\r\n"
    h2, b2 = post_command(execd.token, "echo second")
    with socket.create_connection((execd.host, execd.port), timeout=10 * SLOW) as s:
        s.sendall(h1 + b1 + ping + h2 + b2)
        buf = bytearray()
        r1 = read_response(s, buf)
        r2 = read_response(s, buf)
        r3 = read_response(s, buf)
    assert stdout_of(r1[2]) == ["first"]
    assert r2[0] == 200 and r2[2] == b""
    assert stdout_of(r3[2]) == ["second"]


def test_a_stalled_client_does_not_delay_another(execd):
    # Client A asks for a lot of output and never reads it.
    head, body = post_command(execd.token, "head -c 50000000 /dev/zero | base64")
    stalled = socket.create_connection((execd.host, execd.port), timeout=10 * SLOW)
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.sendall(head + body)
    try:
        # Client B still gets prompt answers, many times over.
        for i in range(20):
            res = execd.run(f"echo quick-{i}")
            assert res.status == 200
            assert res.texts("stdout") == [f"quick-{i}"]
    finally:
        stalled.close()


def test_malformed_request_closes_only_that_connection(execd):
    with socket.create_connection((execd.host, execd.port), timeout=10 * SLOW) as s:
        s.sendall(b"THIS IS NOT HTTP\r\n\r\n")
        status, headers, body = read_response(s, bytearray())
        assert status == 400
        assert json.loads(body)["code"] == "BAD_REQUEST"
        assert headers.get("connection") == "close"
        assert s.recv(10) == b""
    assert execd.ping() == 200


def _closed_by_server(sock: socket.socket, timeout: float) -> bool:
    """True once the server closes the connection (EOF), reading anything it sends."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
        return True
    except socket.timeout:
        return False


def test_silent_connections_are_closed_but_slow_responses_are_not(execd_factory):
    ex = execd_factory("--idle-timeout", "300ms")
    # Connected and never said anything.
    with socket.create_connection((ex.host, ex.port)) as s:
        assert _closed_by_server(s, 10 * SLOW)
    # Half a request head, then silence.
    with socket.create_connection((ex.host, ex.port)) as s:
        s.sendall(b"POST /command HTTP/1.1\r\nHost: t\r\n")
        assert _closed_by_server(s, 10 * SLOW)
    # A response that takes longer than the idle timeout is ours to finish;
    # afterwards the idle keep-alive connection is closed.
    head, body = post_command(ex.token, "sleep 1; echo late")
    with socket.create_connection((ex.host, ex.port), timeout=10 * SLOW) as s:
        s.sendall(head + body)
        status, _, data = read_response(s, bytearray())
        assert status == 200 and stdout_of(data) == ["late"]
        assert _closed_by_server(s, 10 * SLOW)


def test_idle_timeout_zero_disables_it(execd_factory):
    ex = execd_factory("--idle-timeout", "0")
    with socket.create_connection((ex.host, ex.port)) as s:
        assert not _closed_by_server(s, 0.5)
        s.sendall(b"GET /ping HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_response(s, bytearray())[0] == 200


def test_expect_100_continue_is_answered(execd):
    head, body = post_command(execd.token, "echo continued")
    head = head.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    with socket.create_connection((execd.host, execd.port), timeout=10 * SLOW) as s:
        s.sendall(head)
        buf = bytearray()
        while b"\r\n\r\n" not in buf:
            buf += s.recv(4096)
        assert bytes(buf).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        del buf[: len(b"HTTP/1.1 100 Continue\r\n\r\n")]
        s.sendall(body)
        status, _, data = read_response(s, buf)
    assert status == 200 and stdout_of(data) == ["continued"]
    # A request that will be refused is not invited to send its body.
    with socket.create_connection((execd.host, execd.port), timeout=10 * SLOW) as s:
        s.sendall(head.replace(execd.token.encode(), b"wrong-token"))
        s.sendall(body)
        status, _, data = read_response(s, bytearray())
    assert status == 401
