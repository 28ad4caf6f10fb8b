#!/usr/bin/env python3
"""The E2B path against the OpenSandbox path, on one execd (not a test:
prints figures).

    python tests/bench/bench_e2b.py --execd build/execd [--rounds 3] [--commands 200]

One release execd serves both APIs (--envd-port). Measured, in alternating
rounds (medians):
  * command round trip of `true`: E2B's SDK (AsyncSandbox.commands.run, a
    Connect server stream) against OpenSandbox's SDK (commands.run, its
    event stream), both asyncio clients in this process; p50 and p99;
  * the same round trip on the bare wire, one keep-alive connection each,
    the same Python client code for both: Connect Start (envelopes, base64)
    against POST /command in exact framing (NDJSON);
  * a 64 MiB stdout stream (`head -c 50331648 /dev/zero | base64`: 64 MiB
    of 76-character lines) through both SDKs and on the bare wire, in MB/s,
    every byte counted; and execd's own CPU seconds for each.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import secrets
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

LISTEN_RE = re.compile(rb"listening on ([0-9.]+):(\d+)")
ENVD_RE = re.compile(rb"envd API \(E2B SDKs\) listening on ([0-9.]+):(\d+)")
STREAM_CMD = "head -c 50331648 /dev/zero | base64"
STREAM_BYTES = 67108864 + (67108864 + 75) // 76  # base64 text plus a newline per 76 characters


class Daemon:
    def __init__(self, binary):
        self.token = secrets.token_hex(16)
        self.state_dir = tempfile.mkdtemp(prefix="execd-bench-e2b-")
        # E2B's SDK runs every command as `bash -l -c`: a login shell reads
        # the home's profile, which on a developer machine (pyenv, nvm...) can
        # take half a second. An empty home keeps that out of the figures;
        # `bash -l -c true` alone is measured as the floor.
        self.home = tempfile.mkdtemp(prefix="execd-bench-home-")
        self.proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", "0", "--access-token", self.token, "--state-dir",
             self.state_dir, "--envd-port", "0", "--log-limit", str(1 << 20)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env=dict(os.environ, HOME=self.home))
        text = b""
        deadline = time.monotonic() + 20
        while not (LISTEN_RE.search(text) and ENVD_RE.search(text)):
            line = self.proc.stderr.readline()
            if not line or time.monotonic() > deadline:
                raise SystemExit(f"execd did not start: {text!r}")
            text += line
        self.port = int(LISTEN_RE.search(text).group(2))
        self.envd_port = int(ENVD_RE.search(text).group(2))
        import threading
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def cpu(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


def pct(values, p):
    v = sorted(values)
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


# ---- the SDKs ------------------------------------------------------------------------------------------

async def e2b_sdk_round_trips(d: Daemon, n: int) -> list[float]:
    from e2b import AsyncSandbox
    sbx = await AsyncSandbox.create()
    await sbx.commands.run("true")  # warm the connection
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await sbx.commands.run("true")
        out.append(time.perf_counter() - t)
    return out


def opensandbox_service(d: Daemon):
    from opensandbox.adapters.factory import AdapterFactory
    from opensandbox.config import ConnectionConfig
    from opensandbox.models.sandboxes import SandboxEndpoint
    cfg = ConnectionConfig(protocol="http").with_transport_if_missing()
    ep = SandboxEndpoint(endpoint=f"127.0.0.1:{d.port}", headers={"X-EXECD-ACCESS-TOKEN": d.token})
    return cfg, AdapterFactory(cfg).create_command_service(ep)


async def opensandbox_sdk_round_trips(d: Daemon, n: int) -> list[float]:
    cfg, cmds = opensandbox_service(d)
    try:
        await cmds.run("true")
        out = []
        for _ in range(n):
            t = time.perf_counter()
            await cmds.run("true")
            out.append(time.perf_counter() - t)
        return out
    finally:
        await cmds._sse_client.aclose()
        await cmds._httpx_client.aclose()
        await cfg.close_transport_if_owned()


async def e2b_sdk_stream(d: Daemon) -> int:
    from e2b import AsyncSandbox
    sbx = await AsyncSandbox.create()
    n = 0

    def count(s):
        nonlocal n
        n += len(s)

    await sbx.commands.run(STREAM_CMD, on_stdout=count, timeout=0)
    return n


async def opensandbox_sdk_stream(d: Daemon) -> int:
    from opensandbox.models.execd import ExecutionHandlers
    cfg, cmds = opensandbox_service(d)
    n = 0

    async def count(msg):
        nonlocal n
        n += len(msg.text) + 1  # compat framing gives lines without their newline

    try:
        await cmds.run(STREAM_CMD, handlers=ExecutionHandlers(on_stdout=count))
        return n
    finally:
        await cmds._sse_client.aclose()
        await cmds._httpx_client.aclose()
        await cfg.close_transport_if_owned()


# ---- the bare wire: one keep-alive connection, the same client code for both -------------------------------

class Wire:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def close(self):
        self.s.close()

    def _fill(self):
        d = self.s.recv(1 << 20)
        if not d:
            raise ConnectionError("closed")
        self.buf += d

    def _line(self) -> bytes:
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self.buf[:i])
                del self.buf[:i + 2]
                return line
            self._fill()

    def request(self, head: bytes, body: bytes, sink) -> None:
        """Sends a request; feeds the chunked body's bytes to `sink` as they come."""
        self.s.sendall(head + body)
        while self._line():
            pass  # status line and headers
        while True:
            size = int(self._line().split(b";")[0], 16)
            while len(self.buf) < size + 2:
                self._fill()
            if size == 0:
                del self.buf[:2]
                return
            sink(memoryview(self.buf)[:size])
            del self.buf[:size + 2]


class ConnectReader:
    """Counts stdout bytes of a Connect process stream (decoding every data event)."""

    def __init__(self):
        self.pending = bytearray()
        self.stdout = 0
        self.ended = False

    def __call__(self, data):
        self.pending += data
        at = 0
        while len(self.pending) - at >= 5:
            (n,) = struct.unpack_from(">I", self.pending, at + 1)
            if len(self.pending) - at - 5 < n:
                break
            flags = self.pending[at]
            msg = bytes(self.pending[at + 5:at + 5 + n])
            at += 5 + n
            if flags & 2:
                self.ended = True
                continue
            ev = json.loads(msg)["event"]
            if "data" in ev and "stdout" in ev["data"]:
                self.stdout += len(base64.b64decode(ev["data"]["stdout"]))
        del self.pending[:at]


class NdjsonReader:
    """Counts stdout bytes of an exact-framing stream (decoding every event)."""

    def __init__(self):
        self.pending = bytearray()
        self.stdout = 0

    def __call__(self, data):
        self.pending += data
        end = self.pending.rfind(b"\n")
        if end < 0:
            return
        for line in bytes(self.pending[:end]).split(b"\n"):
            if not line:
                continue
            ev = json.loads(line)
            if ev["type"] == "stdout":
                self.stdout += len(base64.b64decode(ev["b64"])) if "b64" in ev else len(ev["text"].encode())
        del self.pending[:end + 1]


def connect_start(d: Daemon, cmd: str) -> tuple[bytes, bytes]:
    msg = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-c", cmd]}, "stdin": False}).encode()
    body = b"\x00" + struct.pack(">I", len(msg)) + msg
    head = (f"POST /process.Process/Start HTTP/1.1\r\nHost: b\r\nContent-Type: application/connect+json\r\n"
            f"X-Access-Token: {d.token}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    return head, body


def opensandbox_command(d: Daemon, cmd: str) -> tuple[bytes, bytes]:
    body = json.dumps({"command": cmd}).encode()
    head = (f"POST /command HTTP/1.1\r\nHost: b\r\nX-EXECD-ACCESS-TOKEN: {d.token}\r\n"
            f"Accept: application/x-ndjson\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    return head, body


def wire_round_trips(d: Daemon, e2b: bool, n: int) -> list[float]:
    w = Wire(d.envd_port if e2b else d.port)
    head, body = connect_start(d, "true") if e2b else opensandbox_command(d, "true")
    w.request(head, body, lambda _: None)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        w.request(head, body, lambda _: None)
        out.append(time.perf_counter() - t)
    w.close()
    return out


def wire_stream(d: Daemon, e2b: bool) -> int:
    w = Wire(d.envd_port if e2b else d.port)
    head, body = connect_start(d, STREAM_CMD) if e2b else opensandbox_command(d, STREAM_CMD)
    reader = ConnectReader() if e2b else NdjsonReader()
    w.request(head, body, reader)
    w.close()
    return reader.stdout


# ---- the runs ------------------------------------------------------------------------------------------------

def timed(d: Daemon, fn):
    cpu0, t0 = d.cpu(), time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0, d.cpu() - cpu0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--execd", default="build/execd")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--commands", type=int, default=200)
    args = ap.parse_args()
    d = Daemon(args.execd)
    # The SDK as outside debug mode: a stand-in for E2B's API hands it
    # execd's token (tests/integration/e2b_support.py).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
    from e2b_support import TOKENS, sdk_env
    url = f"http://127.0.0.1:{d.envd_port}"
    TOKENS[url] = d.token
    os.environ.update(sdk_env(url))
    try:
        rtt = {k: [] for k in ("e2b-sdk", "opensandbox-sdk", "e2b-wire", "opensandbox-wire")}
        for _ in range(args.rounds):
            rtt["e2b-sdk"] += asyncio.run(e2b_sdk_round_trips(d, args.commands))
            rtt["opensandbox-sdk"] += asyncio.run(opensandbox_sdk_round_trips(d, args.commands))
            rtt["e2b-wire"] += wire_round_trips(d, True, args.commands)
            rtt["opensandbox-wire"] += wire_round_trips(d, False, args.commands)
        floors = {}
        for shell in (["bash", "-c", "true"], ["bash", "-l", "-c", "true"]):
            times = []
            for _ in range(args.commands):
                t = time.perf_counter()
                subprocess.run(shell, env=dict(os.environ, HOME=d.home))
                times.append(time.perf_counter() - t)
            floors[" ".join(shell)] = times
        print("command round trip of `true` (ms):")
        for k, v in floors.items():
            print(f"  floor: {k:18s} p50 {pct(v, 50) * 1e3:7.2f}  (spawn and wait from Python)")
        for k, v in rtt.items():
            print(f"  {k:18s} p50 {pct(v, 50) * 1e3:7.2f}  p99 {pct(v, 99) * 1e3:7.2f}  (n={len(v)})")

        runs = {
            "e2b-sdk": lambda: asyncio.run(e2b_sdk_stream(d)),
            "opensandbox-sdk": lambda: asyncio.run(opensandbox_sdk_stream(d)),
            "e2b-wire": lambda: wire_stream(d, True),
            "opensandbox-wire": lambda: wire_stream(d, False),
        }
        results = {k: [] for k in runs}
        for _ in range(args.rounds):
            for k, fn in runs.items():
                n, secs, cpu = timed(d, fn)
                if n != STREAM_BYTES:
                    print(f"  {k}: {n} bytes instead of {STREAM_BYTES}")
                results[k].append((n / secs / 1e6, cpu))
        print(f"64 MiB stdout stream ({STREAM_CMD}), medians of {args.rounds}:")
        for k, v in results.items():
            print(f"  {k:18s} {statistics.median(x[0] for x in v):8.1f} MB/s   execd CPU "
                  f"{statistics.median(x[1] for x in v):5.2f} s")
    finally:
        d.stop()
        import shutil
        shutil.rmtree(d.home, ignore_errors=True)
        shutil.rmtree(d.state_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
