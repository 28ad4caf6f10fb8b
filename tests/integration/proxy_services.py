"""Services on loopback for the /proxy tests and bench, in one process that
prints their ports as one JSON line and runs until stdin closes:

* "aiohttp": an aiohttp app: header/path echo, chunked and sized downloads of
  deterministic bytes, SSE and a long poll released on demand, a streaming
  upload digest, a slow reader, a never-answering handler, a response reset
  mid-body, the egress sidecar's GET /policy, and the count of connections it
  accepted (keep-alive reuse).
* "ws": a WebSocket echo server (the `websockets` package).
* "tunnel": a raw server answering any request with 101 and then echoing
  bytes until EOF, then writing "BYE" and closing (half-close both ways).
* "plain": Python's http.server (HTTP/1.0, a file directory).
* "flaky": a raw keep-alive service whose kept-alive connections are gone by
  the time the next request arrives: it answers the first request on each
  connection and resets the connection on any later one (its idle close
  racing that request), or, under /always-drop, on every request. GET
  /stats on a direct connection tells which requests it answered and dropped.
  GET /close-delimited?size=N[&reset=M] answers N deterministic bytes with
  no length, ended by closing the connection (or reset after M bytes).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import http.server
import json
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading

from aiohttp import web
import websockets

BLOCK = 1 << 20


def block(seed: int = 7) -> bytes:
    """1 MiB of deterministic bytes; data of size n is this block repeated, cut at n."""
    return hashlib.shake_256(str(seed).encode()).digest(BLOCK)


def expected_sha(size: int) -> str:
    b = block()
    h = hashlib.sha256()
    full, rest = divmod(size, BLOCK)
    for _ in range(full):
        h.update(b)
    h.update(b[:rest])
    return h.hexdigest()


def make_app() -> web.Application:
    data = block()
    peers: set = set()
    released = asyncio.Event()
    app = web.Application(client_max_size=1 << 40)

    @web.middleware
    async def count(request, handler):
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer:
            peers.add(peer[1])
        return await handler(request)

    app.middlewares.append(count)

    async def echo(request):
        body = await request.read()
        return web.json_response({
            "method": request.method,
            "raw_path": request.raw_path,
            "version": f"{request.version.major}.{request.version.minor}",
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in request.raw_headers],
            "body_len": len(body),
        }, headers={"Connection": "keep-alive, X-Hop", "X-Hop": "1", "Keep-Alive": "timeout=5",
                    "X-End": "kept", "Proxy-Authenticate": "Basic"})

    async def download(request):
        size = int(request.query.get("size", "0"))
        chunked = request.query.get("chunked") == "1"
        resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
        if chunked:
            resp.enable_chunked_encoding()
        else:
            resp.content_length = size
        await resp.prepare(request)
        sent = 0
        while sent < size:
            n = min(BLOCK, size - sent)
            await resp.write(data if n == BLOCK else data[:n])
            sent += n
        await resp.write_eof()
        return resp

    async def upload(request):
        h = hashlib.sha256()
        n = 0
        delay = float(request.query.get("delay", "0"))
        if delay:
            await asyncio.sleep(delay)  # a slow reader: nothing read at first
        async for piece in request.content.iter_any():
            h.update(piece)
            n += len(piece)
        return web.json_response({"sha256": h.hexdigest(), "size": n,
                                  "chunked": "chunked" in request.headers.get("Transfer-Encoding", "")})

    async def sse(request):
        released.clear()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        await resp.write(b"data: one\n\n")
        await released.wait()
        await resp.write(b"data: two\n\n")
        await resp.write_eof()
        return resp

    async def longpoll(request):
        released.clear()
        await released.wait()
        return web.Response(text="released")

    async def release(request):
        released.set()
        return web.Response(text="ok")

    async def hang(request):
        await asyncio.sleep(3600)

    async def reset(request):
        # Promises 4 MiB, sends 1 MiB, then resets the connection.
        resp = web.StreamResponse(headers={"Content-Length": str(4 * BLOCK)})
        await resp.prepare(request)
        await resp.write(data)
        sock = request.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        request.transport.abort()
        return resp

    async def connections(request):
        return web.json_response({"connections": len(peers)})

    async def policy(request):
        return web.json_response({"status": "ok", "mode": "deny_all", "enforcementMode": "dns",
                                  "policy": {"defaultAction": "deny", "egress": [
                                      {"action": "allow", "target": "pypi.org"}]}})

    app.router.add_route("*", "/echo/{tail:.*}", echo)
    app.router.add_get("/download", download)
    app.router.add_post("/upload", upload)
    app.router.add_put("/upload", upload)
    app.router.add_get("/sse", sse)
    app.router.add_get("/longpoll", longpoll)
    app.router.add_get("/release", release)
    app.router.add_get("/hang", hang)
    app.router.add_get("/reset", reset)
    app.router.add_get("/connections", connections)
    app.router.add_get("/policy", policy)
    return app


async def ws_echo(conn):
    try:
        async for msg in conn:
            await conn.send(msg)
    except websockets.ConnectionClosed:
        pass


async def tunnel_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
    try:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
        while True:
            piece = await reader.read(65536)
            if not piece:
                break
            writer.write(piece)
            await writer.drain()
        writer.write(b"BYE")
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


def start_flaky() -> int:
    lock = threading.Lock()
    stats = {"connections": 0, "answered": [], "dropped": []}
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(128)

    def read_head(c: socket.socket, buf: bytes) -> tuple[bytes, bytes] | None:
        while b"\r\n\r\n" not in buf:
            piece = c.recv(65536)
            if not piece:
                return None
            buf += piece
        head, _, rest = buf.partition(b"\r\n\r\n")
        return head, rest

    def serve(c: socket.socket, conn_id: int):
        buf = b""
        k = 0
        try:
            while True:
                got = read_head(c, buf)
                if got is None:
                    return
                head, buf = got
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {ln.split(":", 1)[0].strip().lower(): ln.split(":", 1)[1].strip() for ln in lines[1:]}
                if path == "/stats":
                    with lock:
                        body = json.dumps(stats).encode()
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
                              + body)
                    return
                if k > 0 or path.startswith("/always-drop"):
                    with lock:
                        stats["dropped"].append([conn_id, k, method, path])
                    # Reset, with whatever body followed still unread.
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                if path.startswith("/close-delimited"):
                    query = dict(kv.split("=", 1) for kv in path.partition("?")[2].split("&") if "=" in kv)
                    size, cut = int(query.get("size", "0")), int(query.get("reset", "-1"))
                    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n")
                    data, sent = block(), 0
                    end = size if cut < 0 else cut
                    while sent < end:
                        n = min(len(data), end - sent)
                        c.sendall(data[:n])
                        sent += n
                    if cut >= 0:
                        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                length = int(headers.get("content-length", "0"))
                while len(buf) < length:
                    piece = c.recv(65536)
                    if not piece:
                        return
                    buf += piece
                body_len, buf = length, buf[length:]
                with lock:
                    stats["answered"].append([conn_id, k, method, path, body_len])
                body = json.dumps({"connection": conn_id, "request": k, "method": method,
                                   "body_len": body_len}).encode()
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                          % len(body) + body)
                k += 1
        except OSError:
            pass
        finally:
            c.close()

    def accept():
        while True:
            c, _ = srv.accept()
            with lock:
                stats["connections"] += 1
                conn_id = stats["connections"]
            threading.Thread(target=serve, args=(c, conn_id), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return srv.getsockname()[1]


def start_plain(root: str) -> int:
    with open(os.path.join(root, "hello.txt"), "w") as f:
        f.write("hello from http.server\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=root)
    http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv.server_address[1]


async def main():
    runner = web.AppRunner(make_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    app_port = site._server.sockets[0].getsockname()[1]
    ws_server = await websockets.serve(ws_echo, "127.0.0.1", 0, max_size=None, ping_interval=None)
    ws_port = ws_server.sockets[0].getsockname()[1]
    tunnel = await asyncio.start_server(tunnel_client, "127.0.0.1", 0)
    tunnel_port = tunnel.sockets[0].getsockname()[1]
    root = tempfile.mkdtemp(prefix="proxy-plain-")
    plain_port = start_plain(root)
    flaky_port = start_flaky()
    print(json.dumps({"aiohttp": app_port, "ws": ws_port, "tunnel": tunnel_port, "plain": plain_port,
                      "flaky": flaky_port}), flush=True)
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
