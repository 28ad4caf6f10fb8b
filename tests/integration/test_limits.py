"""Connection limits, written as the attacks they stop (issue: hardening).

A client without the token, or one that trickles, must not be able to hold
execd's memory, descriptors or connections: head deadlines, header counts,
401 before any body, trailers that never count as headers, HTTP/1.0 answered
without chunked encoding, and shedding of idle/unauthenticated connections
at the connection limit so that /ping is still answered.
"""
from __future__ import annotations

import socket
import time

import pytest

from execd_client import SLOW, TOKEN_HEADER, wait_until
from test_http_connection import _closed_by_server, post_command, read_response


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _recv_all(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    out = bytearray()
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return bytes(out)


def _ping(ex, timeout=5.0, token=None) -> int:
    with socket.create_connection((ex.host, ex.port), timeout=timeout * SLOW) as s:
        extra = f"{TOKEN_HEADER}: {token}\r\n" if token else ""
        s.sendall(f"GET /ping HTTP/1.1\r\nHost: t\r\n{extra}\r\n".encode())
        return read_response(s, bytearray())[0]


def test_a_trickled_head_is_cut_at_the_header_deadline(execd_factory):
    ex = execd_factory("--header-timeout", "1s", "--idle-timeout", "1m")
    with socket.create_connection((ex.host, ex.port)) as s:
        s.sendall(b"GET /ping HTTP/1.1\r\n")
        start = time.monotonic()
        s.settimeout(0.2)
        closed = False
        data = bytearray()
        # One byte every 100 ms keeps resetting any idle timer; only a deadline
        # from the first byte ends it.
        while time.monotonic() - start < 10 * SLOW:
            try:
                s.sendall(b"x")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            try:
                chunk = s.recv(65536)
                if not chunk:
                    closed = True
                    break
                data += chunk
            except socket.timeout:
                pass
            except ConnectionResetError:
                closed = True
                break
        assert closed, "a trickling client held its connection past the header deadline"
        assert time.monotonic() - start < 8 * SLOW
        if data:
            assert data.startswith(b"HTTP/1.1 408")


def test_a_silent_body_is_cut_at_the_body_deadline(execd_factory):
    ex = execd_factory("--body-timeout", "1s", "--idle-timeout", "1m")
    head, _ = post_command(ex.token, "echo never")
    head = head.replace(b"Content-Length: ", b"Content-Length: 1")  # longer than what follows
    with socket.create_connection((ex.host, ex.port)) as s:
        s.sendall(head + b"{\"comm")
        data = _recv_all(s, 10 * SLOW)
        assert data.startswith(b"HTTP/1.1 408"), data[:200]


def test_too_many_tiny_headers_are_refused(execd):
    with socket.create_connection((execd.host, execd.port), timeout=10 * SLOW) as s:
        s.sendall(b"GET /ping HTTP/1.1\r\n" + b"a: b\r\n" * 101 + b"\r\n")
        status, _, _ = read_response(s, bytearray())
        assert status == 431
    # 100 are fine.
    with socket.create_connection((execd.host, execd.port), timeout=10 * SLOW) as s:
        s.sendall(b"GET /ping HTTP/1.1\r\n" + b"a: b\r\n" * 99 + b"\r\n")
        assert read_response(s, bytearray())[0] == 200


def test_half_open_unauthenticated_connections_cost_little_memory(execd):
    # Each connection sends as many tiny headers as it may, never ends its head.
    rss0 = _rss_kib(execd.proc.pid)
    socks = []
    try:
        for _ in range(400):
            s = socket.create_connection((execd.host, execd.port), timeout=10 * SLOW)
            s.sendall(b"POST /command HTTP/1.1\r\n" + b"a: b\r\n" * 99)
            socks.append(s)
        # execd has read them all once a /ping on a fresh connection is answered
        # and the last connection's bytes are consumed (its receive queue is empty).
        deadline = time.monotonic() + 20 * SLOW
        while time.monotonic() < deadline:
            assert _ping(execd) == 200
            if _rss_kib(execd.proc.pid) > rss0 and _all_read(execd.port):
                break
            time.sleep(0.05)
        per_conn = (_rss_kib(execd.proc.pid) - rss0) / len(socks)
        print(f"RSS per half-open unauthenticated connection: {per_conn:.1f} KiB")
        assert per_conn < 64, per_conn
    finally:
        for s in socks:
            s.close()


def _all_read(port: int) -> bool:
    """True when no socket to `port` on the server side has unread input."""
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            parts = line.split()
            local, rx = parts[1], parts[4].split(":")[1]
            if int(local.split(":")[1], 16) == port and int(rx, 16) != 0:
                return False
    return True


@pytest.mark.parametrize("target", [
    "/command",               # a pattern route
    "/proxy/9/x",             # the prefix route (the proxy)
    "/command/abc/stdin",     # a streaming route
    "/files/upload",          # another streaming route
    "/no/such/route",
])
def test_401_is_answered_before_the_body_and_closes(execd, target):
    with socket.create_connection((execd.host, execd.port), timeout=10 * SLOW) as s:
        s.sendall(f"POST {target} HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n".encode())
        # Not one body byte was sent: the answer comes at head time.
        status, headers, body = read_response(s, bytearray())
        assert status == 401
        assert headers.get("connection", "").lower() == "close"
        assert _closed_by_server(s, 10 * SLOW)


def test_unauthenticated_proxy_bodies_are_never_buffered(execd):
    # The attack of the hardening issue: 40 clients without the token send
    # 8 MB bodies, one byte short, to the proxy. Each must get its 401 at head
    # time and lose its connection, so execd holds none of those bytes.
    rss0 = _rss_kib(execd.proc.pid)
    size = 8 << 20
    chunk = b"x" * (1 << 20)
    socks = []
    try:
        for _ in range(40):
            s = socket.create_connection((execd.host, execd.port), timeout=10 * SLOW)
            s.sendall(f"POST /proxy/9/x HTTP/1.1\r\nHost: t\r\nContent-Length: {size}\r\n\r\n".encode())
            socks.append(s)
        for s in socks:
            # The 401 is there before any body byte was sent.
            assert read_response(s, bytearray())[0] == 401
            try:
                for _ in range(size // len(chunk) - 1):
                    s.sendall(chunk)
                s.sendall(chunk[:-1])
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                pass  # the lingering close ended before the body did
        grown = _rss_kib(execd.proc.pid) - rss0
        print(f"RSS growth after 40 unauthenticated 8 MB proxy bodies: {grown} KiB")
        assert grown < 16 << 10, grown
    finally:
        for s in socks:
            s.close()


def test_a_token_in_a_trailer_is_not_a_token(execd):
    body = b'{"command":"echo smuggled"}'
    req = (b"POST /command HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
           + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n"
           + f"{TOKEN_HEADER}: {execd.token}\r\n\r\n".encode())
    with socket.create_connection((execd.host, execd.port), timeout=10 * SLOW) as s:
        s.sendall(req)
        data = _recv_all(s, 5 * SLOW)
        assert data.startswith(b"HTTP/1.1 401"), data[:200]
        assert b"smuggled" not in data
    # With the token in the head, a trailer does not break anything.
    req = (b"POST /command HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
           + f"{TOKEN_HEADER}: {execd.token}\r\n\r\n".encode()
           + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\nX-Trailer: 1\r\n\r\n")
    with socket.create_connection((execd.host, execd.port), timeout=10 * SLOW) as s:
        s.sendall(req)
        status, _, data = read_response(s, bytearray())
        assert status == 200 and b"smuggled" in data


def test_http10_gets_a_close_delimited_stream(execd):
    head, body = post_command(execd.token, "printf 'a\\nb\\n'")
    head = head.replace(b"HTTP/1.1", b"HTTP/1.0", 1)
    with socket.create_connection((execd.host, execd.port), timeout=10 * SLOW) as s:
        s.sendall(head + body)
        data = _recv_all(s, 10 * SLOW)  # ends at EOF: the body is close-delimited
    head_bytes, _, payload = data.partition(b"\r\n\r\n")
    lower = head_bytes.lower()
    assert head_bytes.startswith(b"HTTP/1.1 200")
    assert b"transfer-encoding" not in lower
    assert b"connection: close" in lower
    assert b'"execution_complete"' in payload and b'"a"' in payload


def test_connections_are_shed_under_a_512_descriptor_limit_and_ping_still_answers(execd_factory):
    ex = execd_factory(wrapper=("prlimit", "--nofile=512:512", "--"))
    # A trusted keep-alive connection, idle, made before the flood.
    trusted = socket.create_connection((ex.host, ex.port), timeout=10 * SLOW)
    trusted.sendall(f"GET /ping HTTP/1.1\r\nHost: t\r\n{TOKEN_HEADER}: {ex.token}\r\n\r\n".encode())
    assert read_response(trusted, bytearray())[0] == 200
    flood = []
    try:
        for _ in range(700):
            flood.append(socket.create_connection((ex.host, ex.port), timeout=10 * SLOW))
        for _ in range(5):
            assert _ping(ex, timeout=10) == 200
        held = 0
        for s in flood:
            s.setblocking(False)
            try:
                if s.recv(1) != b"":
                    held += 1
            except BlockingIOError:
                held += 1  # still open, nothing to read
            except OSError:
                pass  # reset: shed
        print(f"connections held under a 512-descriptor limit: {held} (+1 trusted)")
        assert 300 <= held < 512
        # The untrusted ones went first: the trusted idle connection still works.
        trusted.sendall(b"GET /ping HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_response(trusted, bytearray())[0] == 200
        # Commands still start (descriptors are kept for them).
        head, body = post_command(ex.token, "echo ok")
        with socket.create_connection((ex.host, ex.port), timeout=10 * SLOW) as s:
            s.sendall(head + body)
            status, _, data = read_response(s, bytearray())
            assert status == 200 and b'"ok"' in data
    finally:
        for s in flood:
            s.close()
        trusted.close()


# ---------------------------------------------------------------------------
# What a client can make execd keep is capped; the refusal comes first.


def test_sessions_ptys_running_readers_followers_are_capped(execd_factory):
    ex = execd_factory("--max-sessions", "1", "--max-ptys", "1", "--max-running", "2", "--max-readers", "1",
                       "--max-journal-followers", "1")

    def refused(st, js, flag):
        assert st == 429 and js["code"] == "LIMIT_REACHED" and f"--{flag}" in js["message"], (st, js)

    st, js = ex.json("POST", "/session", {})
    assert st == 200
    sid = js["session_id"]
    refused(*ex.json("POST", "/session", {}), "max-sessions")
    st, js = ex.json("POST", "/pty", {})
    assert st == 201
    refused(*ex.json("POST", "/pty", {}), "max-ptys")
    # Running executions: two background sleeps fill it; a third start, a
    # session run and nothing else gets in.
    for i in range(2):
        st, _, _ = ex.request("POST", "/command", {"id": f"bg-{i}", "command": "sleep 300", "background": True})
        assert st == 200
    refused(*ex.json("POST", "/command", {"command": "true"}), "max-running")
    refused(*ex.json("POST", f"/session/{sid}/run", {"command": "true"}), "max-running")
    assert ex.status("bg-1")[0] == 200 and ex.status("nope")[0] == 404  # status still answers
    # One resume reader streams; a second one is refused.
    c = ex.conn(30)
    c.request("GET", "/command/bg-0/stream", headers=ex.headers())
    r = c.getresponse()
    assert r.status == 200
    refused(*ex.json("GET", "/command/bg-1/stream"), "max-readers")
    c.close()
    # Journal followers.
    c2 = ex.conn(30)
    c2.request("GET", "/journal?follow=true", headers=ex.headers())
    assert c2.getresponse().status == 200
    refused(*ex.json("GET", "/journal?follow=true"), "max-journal-followers")
    assert ex.request("GET", "/journal")[0] == 200  # a plain read is not a follower
    c2.close()
    # Deleting frees the places.
    for i in range(2):
        assert ex.request("DELETE", f"/command?id=bg-{i}")[0] == 200
    wait_until(lambda: all(not ex.status(f"bg-{i}")[1]["running"] for i in range(2)), 10 * SLOW, 0.05,
               "the sleeps to end")
    assert ex.request("POST", "/command", {"command": "true"})[0] == 200
    assert ex.request("DELETE", f"/session/{sid}")[0] == 200
    wait_until(lambda: ex.json("POST", "/session", {})[0] == 200, 10 * SLOW, 0.05, "a session to fit again")
