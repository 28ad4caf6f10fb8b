"""Helpers for the E2B tests: an execd with its envd listener, a stand-in
for the one call of E2B's API that hands an SDK its sandbox's token (so the
unmodified SDKs run as they do outside debug mode: with X-Access-Token), a
raw Connect client (for what the SDKs hide: the bytes on the wire, resets,
garbage) that sends execd's token unless told otherwise, and the OpenSandbox
exact stream to compare output with.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import struct
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from execd_client import SLOW, TOKEN_HEADER, reconstruct, parse_stream, wait_until

ENVD_RE = re.compile(r"envd API \(E2B SDKs\) listening on ([0-9.]+):(\d+)")
CI_RE = re.compile(r"code-interpreter API \(E2B SDKs\) listening on ([0-9.]+):(\d+)")
KERNELS = Path(sys.prefix) / "share" / "jupyter"


def kernel_env() -> dict:
    """The environment an execd needs to start ipykernel kernels from the venv."""
    env = dict(os.environ)
    env.pop("EXECD_ACCESS_TOKEN", None)
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    env["JUPYTER_PATH"] = str(KERNELS)
    return env


# What each E2B listener's clients must send: execd's token (the E2B
# listeners take it, as they take an envd token). request_bytes() sends it.
TOKENS: dict[str, str] = {}


def listener_url(ex, regex=ENVD_RE) -> str:
    m = wait_until(lambda: regex.search(ex.stderr_text()), 10 * SLOW, what="the E2B listener's log line")
    host = "127.0.0.1" if m.group(1) == "0.0.0.0" else m.group(1)
    url = f"http://{host}:{m.group(2)}"
    if ex.token:
        TOKENS[url] = ex.token
    return url


def start_e2b(factory, *extra, env=None, **kw):
    """An execd with --envd-port 0 (and anything in `extra`); returns (execd, envd URL)."""
    ex = factory("--envd-port", "0", *extra, env=env, **kw)
    return ex, listener_url(ex)


class ControlPlane:
    """A stand-in for E2B's API (E2B_API_URL), for the calls an SDK makes to
    it: POST /v2/sandboxes (create) and /sandboxes/{id}/connect answer with
    `token` as envdAccessToken and trafficAccessToken, as a control plane in
    front of execd hands out execd's own, and `envd_version` (what execd's
    GET /health names in X-Envd-Version) as envdVersion; the others answer
    empty. `calls` records (method, path, X-API-Key)."""

    SANDBOX_ID = "sbx-execd"

    def __init__(self):
        self.token = ""
        self.envd_version = ""
        self.calls: list[tuple[str, str, str | None]] = []
        plane = self

        class API(BaseHTTPRequestHandler):
            def answer(self, status, body=None):
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def handle_call(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                plane.calls.append((self.command, self.path, self.headers.get("x-api-key")))
                if self.command == "POST" and (self.path == "/v2/sandboxes" or self.path.endswith("/connect")):
                    return self.answer(201, {"sandboxID": plane.SANDBOX_ID, "templateID": "base", "clientID": "c",
                                             "envdVersion": plane.envd_version, "envdAccessToken": plane.token,
                                             "trafficAccessToken": plane.token, "domain": None})
                self.answer(200 if self.command == "GET" else 204, [] if self.command == "GET" else None)

            do_GET = do_POST = do_DELETE = handle_call

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), API)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, name="e2b-api-stand-in", daemon=True).start()


_PLANE: ControlPlane | None = None


def envd_version(url: str) -> str:
    """The envd version the listener at `url` reports (X-Envd-Version on GET /health)."""
    with urllib.request.urlopen(url + "/health", timeout=10 * SLOW) as r:
        version = r.headers.get("X-Envd-Version", "")
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"GET /health named no envd version: {version!r}"
    return version


def control_plane(token: str, version: str | None = None) -> ControlPlane:
    """The stand-in (one per test process), handing out `token` (and
    `version` as envdVersion, if given) from now on."""
    global _PLANE
    if _PLANE is None:
        _PLANE = ControlPlane()
    _PLANE.token = token
    if version is not None:
        _PLANE.envd_version = version
    _PLANE.calls.clear()
    return _PLANE


def sdk_env(url: str) -> dict:
    """The environment that points E2B's SDKs at `url` (envd) the way they
    run in production: E2B_API_URL is the stand-in, which hands out the
    listener's token; the SDK then sends X-Access-Token and signs file URLs."""
    plane = control_plane(TOKENS[url], envd_version(url))
    return {"E2B_API_URL": plane.url, "E2B_API_KEY": "e2b_test_key", "E2B_SANDBOX_URL": url}


def point_sdk_at(monkeypatch, url: str):
    """E2B's SDKs with envd at `url`, authorized as outside debug mode (sdk_env)."""
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    monkeypatch.delenv("E2B_ACCESS_TOKEN", raising=False)
    for k, v in sdk_env(url).items():
        monkeypatch.setenv(k, v)


# ---- the OpenSandbox side, for byte-for-byte comparisons ---------------------------------------------

def opensandbox_bytes(ex, command: str) -> tuple[bytes, bytes]:
    """stdout and stderr of `command` through POST /command in exact framing."""
    r = ex.run(command, exact=True)
    return reconstruct(r.events)


# ---- a raw Connect client -------------------------------------------------------------------------------

def envelope(payload, flags: int = 0) -> bytes:
    if not isinstance(payload, (bytes, bytearray)):
        payload = json.dumps(payload).encode()
    return bytes([flags]) + struct.pack(">I", len(payload)) + payload


def split_envelopes(body: bytes) -> list[tuple[int, bytes]]:
    out, at = [], 0
    while at < len(body):
        assert at + 5 <= len(body), f"truncated envelope header at {at}"
        flags = body[at]
        (n,) = struct.unpack(">I", body[at + 1:at + 5])
        assert at + 5 + n <= len(body), f"truncated envelope at {at}"
        out.append((flags, body[at + 5:at + 5 + n]))
        at += 5 + n
    return out


def host_port(url: str) -> tuple[str, int]:
    h, p = url.split("//", 1)[1].split(":")
    return h, int(p)


def with_token(url: str, headers: dict | None) -> dict:
    """`headers` plus X-Access-Token with the listener's token, unless they
    name one (None: send none)."""
    h = dict(headers or {})
    if not any(k.lower() == "x-access-token" for k in h) and url in TOKENS:
        h["X-Access-Token"] = TOKENS[url]
    return {k: v for k, v in h.items() if v is not None}


def request_bytes(url: str, path: str, body: bytes, content_type: str = "application/connect+json",
                  headers: dict | None = None, chunked: bool = False) -> bytes:
    host, port = host_port(url)
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", f"Content-Type: {content_type}",
             "Connect-Protocol-Version: 1"]
    for k, v in with_token(url, headers).items():
        lines.append(f"{k}: {v}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + (
            (b"%x\r\n" % len(body) + body + b"\r\n") if body else b"") + b"0\r\n\r\n"
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def read_response(sock: socket.socket, timeout: float = 30.0) -> tuple[int, dict, bytes]:
    """One HTTP/1.1 response (sized or chunked) from a blocking socket."""
    sock.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before the head: {buf!r}")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, v = line.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while True:
            while b"\r\n" not in rest:
                more = sock.recv(65536)
                if not more:
                    raise ConnectionError("closed inside a chunked body")
                rest += more
            size_line, rest = rest.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            while len(rest) < size + 2:
                more = sock.recv(1 << 20)
                if not more:
                    raise ConnectionError("closed inside a chunk")
                rest += more
            if size == 0:
                return status, headers, body
            body += rest[:size]
            rest = rest[size + 2:]
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        more = sock.recv(1 << 20)
        if not more:
            break
        rest += more
    return status, headers, rest[:n]


def call(url: str, path: str, message=None, *, stream: bool = False, headers: dict | None = None,
         timeout: float = 30.0) -> tuple[int, dict, bytes]:
    """A unary call (JSON body) or a server-streaming one (one envelope)."""
    body = envelope(message or {}) if stream else json.dumps(message or {}).encode()
    with socket.create_connection(host_port(url), timeout=timeout) as s:
        s.sendall(request_bytes(url, path, body, "application/connect+json" if stream else "application/json",
                                headers))
        return read_response(s, timeout)


def stream_messages(body: bytes) -> tuple[list[dict], dict]:
    """The messages of a streaming response, and its end-of-stream JSON."""
    msgs, end = [], None
    for flags, payload in split_envelopes(body):
        if flags & 2:
            assert end is None, "two end-of-stream messages"
            end = json.loads(payload)
        else:
            assert end is None, "a message after the end of the stream"
            msgs.append(json.loads(payload))
    assert end is not None, "no end-of-stream message"
    return msgs, end


def process_output(msgs: list[dict]) -> tuple[int | None, bytes, bytes, bytes, dict | None]:
    """(pid, stdout, stderr, pty, end event) of a Start or Connect stream."""
    pid, out, err, pty, end = None, bytearray(), bytearray(), bytearray(), None
    for m in msgs:
        ev = m["event"]
        if "start" in ev:
            pid = ev["start"]["pid"]
        elif "data" in ev:
            (kind, b64), = ev["data"].items()
            {"stdout": out, "stderr": err, "pty": pty}[kind].extend(base64.b64decode(b64))
        elif "end" in ev:
            end = ev["end"]
    return pid, bytes(out), bytes(err), bytes(pty), end


def start_process(url: str, cmd: str, **extra):
    """Start `bash -c cmd` over raw Connect, read the whole stream."""
    req = {"process": {"cmd": "/bin/bash", "args": ["-c", cmd]}, "stdin": False, **extra}
    status, headers, body = call(url, "/process.Process/Start", req, stream=True)
    assert status == 200, (status, body)
    return stream_messages(body)
