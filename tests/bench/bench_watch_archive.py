#!/usr/bin/env python3
"""Benchmark for the file-change feed and directory archives (not a test).

    tests/bench/bench_watch_archive.py --execd build/execd [--dir /tmp] [--rounds 5]

Measures, against a freshly started execd:
  * watch latency: a file created (os.open with O_CREAT, then close) to its
    `create` event read from a GET /files/watch stream, and a write (append
    and close) to its `write` event; 300 changes each, one at a time (the
    next once the last event arrived), p50/p99/max. The loop's clock is
    read right before the change and right after the event line.
  * archive throughput: GET /files/archive?format=tar of a tree (512 MiB in
    64 files of 8 MiB, plus 20,000 small files) read and discarded, next to
    `tar -cf -` of the same tree into the same reader, alternating, best of
    N rounds each; tar.gz and zip once each (their cost is the compression).
  * extraction: POST /files/archive of the tar of the tree next to
    `tar -xf` of the same bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import quote

MiB = 1024 * 1024


def start(execd: str, state: str):
    token = secrets.token_hex(16)
    p = subprocess.Popen([execd, "--host", "127.0.0.1", "--port", "0", "--state-dir", state, "--access-token", token],
                         stderr=subprocess.PIPE, text=True)
    port = None
    deadline = time.monotonic() + 20
    buf = ""
    while port is None and time.monotonic() < deadline:
        line = p.stderr.readline()
        buf += line
        m = re.search(r"listening on [0-9.]+:(\d+)", line)
        if m:
            port = int(m.group(1))
    if port is None:
        p.kill()
        sys.exit(f"execd did not start: {buf}")
    # Its log is not read from here on: it goes nowhere rather than fill the pipe.
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, port, token


def http_stream(port: int, token: str, method: str, path: str, body: bytes | None = None) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    head = f"{method} {path} HTTP/1.1\r\nHost: b\r\nX-EXECD-ACCESS-TOKEN: {token}\r\n"
    if body is not None:
        head += f"Content-Length: {len(body)}\r\n"
    s.sendall(head.encode() + b"\r\n" + (body or b""))
    return s


def read_head(s: socket.socket) -> bytes:
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise RuntimeError("closed before the head")
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    return rest


class ChunkedLines:
    """Lines of a chunked NDJSON body, as they arrive."""

    def __init__(self, s: socket.socket, rest: bytes):
        self.s, self.raw, self.body = s, rest, b""

    def _dechunk(self):
        while True:
            i = self.raw.find(b"\r\n")
            if i < 0:
                return
            n = int(self.raw[:i], 16)
            if len(self.raw) < i + 2 + n + 2:
                return
            self.body += self.raw[i + 2:i + 2 + n]
            self.raw = self.raw[i + 2 + n + 2:]

    def line(self) -> dict:
        while True:
            self._dechunk()
            i = self.body.find(b"\n")
            if i >= 0:
                line, self.body = self.body[:i], self.body[i + 1:]
                if line:
                    return json.loads(line)
                continue
            d = self.s.recv(65536)
            if not d:
                raise RuntimeError("feed ended")
            self.raw += d


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def watch_latency(port, token, root):
    s = http_stream(port, token, "GET", f"/files/watch?path={quote(root)}&recursive=true")
    feed = ChunkedLines(s, read_head(s))
    assert feed.line()["type"] == "watch"
    out = {}
    for kind in ("create", "write"):
        lat = []
        for i in range(300):
            path = os.path.join(root, f"{kind}{i}")
            if kind == "write":
                open(path, "w").close()
                while True:  # its create
                    ev = feed.line()
                    if ev.get("path") == path:
                        break
            t0 = time.perf_counter()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            if kind == "write":
                os.write(fd, b"x")
            os.close(fd)
            while True:
                ev = feed.line()
                if ev.get("path") == path and ev["type"] == kind:
                    break
            lat.append((time.perf_counter() - t0) * 1e6)
        out[kind] = lat
    s.close()
    return out


def make_tree(root):
    os.makedirs(root)
    block = os.urandom(8 * MiB)
    for i in range(64):
        with open(os.path.join(root, f"big{i}"), "wb") as f:
            f.write(block)
    for i in range(20000):
        d = os.path.join(root, "small", str(i % 100))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"s{i}"), "wb") as f:
            f.write(b"x" * (i % 2000))


def drain(s: socket.socket, initial: int) -> int:
    buf = bytearray(MiB)
    n = initial
    while True:
        got = s.recv_into(buf)
        if not got:
            return n
        n += got


def execd_archive(port, token, root, fmt):
    t0 = time.perf_counter()
    s = http_stream(port, token, "GET", f"/files/archive?path={quote(root)}&format={fmt}")
    rest = read_head(s)
    # Connection: keep-alive; the last chunk ends it: read until the
    # terminator, counting chunked bytes (overhead is < 0.01%).
    n = len(rest)
    buf = bytearray(MiB)
    tail = bytes(rest[-8:])
    while not tail.endswith(b"\r\n0\r\n\r\n"):
        got = s.recv_into(buf)
        if not got:
            break
        n += got
        tail = (tail + bytes(buf[max(0, got - 8):got]))[-8:]
    s.close()
    return n, time.perf_counter() - t0


def tar_archive(root):
    t0 = time.perf_counter()
    p = subprocess.Popen(["tar", "-C", root, "-cf", "-", "."], stdout=subprocess.PIPE)
    n = 0
    while True:
        d = p.stdout.read1(MiB)
        if not d:
            break
        n += len(d)
    p.wait()
    return n, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--execd", required=True)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-watch-", dir=a.dir)
    proc = None
    try:
        proc, port, token = start(a.execd, os.path.join(work, "state"))
        wroot = os.path.join(work, "w")
        os.makedirs(wroot)
        lat = watch_latency(port, token, wroot)
        for kind, xs in lat.items():
            print(f"watch {kind:6} -> event: p50 {pct(xs, .5):7.0f} us  p99 {pct(xs, .99):7.0f} us  "
                  f"max {max(xs):7.0f} us  ({len(xs)} changes)")
        tree = os.path.join(work, "tree")
        make_tree(tree)
        subprocess.run(["sync"])
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(tree) for f in fs)
        best_e = best_t = 1e9
        for _ in range(a.rounds):
            n_e, t_e = execd_archive(port, token, tree, "tar")
            n_t, t_t = tar_archive(tree)
            best_e, best_t = min(best_e, t_e), min(best_t, t_t)
        print(f"archive tar of {size / MiB:.0f} MiB in 20,064 files: execd {n_e / MiB / best_e:7.0f} MB/s "
              f"({best_e:.2f} s)  tar -cf - {n_t / MiB / best_t:7.0f} MB/s ({best_t:.2f} s)  "
              f"ratio {best_t / best_e:.2f}x (best of {a.rounds})")
        for fmt in ("tar.gz", "zip"):
            n, t = execd_archive(port, token, tree, fmt)
            print(f"archive {fmt:6}: {n / MiB:7.0f} MiB out in {t:.2f} s ({size / MiB / t:.0f} MB/s of input)")
        # Extraction: the same tar through POST and through tar -xf.
        tar_bytes = subprocess.run(["tar", "-C", tree, "-cf", "-", "."], check=True, capture_output=True).stdout
        best_p = best_x = 1e9
        for r in range(max(1, a.rounds // 2)):
            dest = os.path.join(work, f"x{r}")
            t0 = time.perf_counter()
            s = http_stream(port, token, "POST", f"/files/archive?path={quote(dest)}", tar_bytes)
            resp = b""
            while b"\r\n\r\n" not in resp or not resp.rstrip().endswith(b"}"):
                d = s.recv(65536)
                if not d:
                    break
                resp += d
            best_p = min(best_p, time.perf_counter() - t0)
            assert resp.startswith(b"HTTP/1.1 200"), resp[:300]
            s.close()
            shutil.rmtree(dest)
            dest = os.path.join(work, f"y{r}")
            os.makedirs(dest)
            t0 = time.perf_counter()
            subprocess.run(["tar", "-C", dest, "-xf", "-"], input=tar_bytes, check=True)
            subprocess.run(["sync", "-f", dest])  # execd's extraction ends with syncfs
            best_x = min(best_x, time.perf_counter() - t0)
            shutil.rmtree(dest)
        print(f"extract tar of {len(tar_bytes) / MiB:.0f} MiB: POST /files/archive {best_p:.2f} s "
              f"({len(tar_bytes) / MiB / best_p:.0f} MB/s)  tar -xf + sync {best_x:.2f} s "
              f"({len(tar_bytes) / MiB / best_x:.0f} MB/s)")
    finally:
        if proc:
            proc.terminate()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
