#!/usr/bin/env python3
"""Benchmark for the filesystem transfer paths (not a test).

    tests/bench/bench_files.py --execd build/execd [--size-mib 2048] [--dir /tmp]

Measures, against a freshly started execd:
  * download MB/s of a SIZE file (GET /files/download) next to the floor: the
    same file pushed with os.sendfile over a loopback TCP socket to the same
    reader (a recv_into loop that discards);
  * upload MB/s (POST /files/upload, one metadata + file part, the body sent
    with os.sendfile) next to the floor: the same sender into the same reader;
  * execd's RSS (sampled VmRSS every 5 ms, and VmHWM) before and during each.
Floor and download rounds alternate, each with the RSS sampler running (it
shares the reader's interpreter), so both see the same machine.
Targets: download >= 95% of the floor, upload >= 40%, RSS growth < 8 MiB.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import quote

MiB = 1024 * 1024
BUF = 1 * MiB


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class RssSampler(threading.Thread):
    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop_ev = pid, 0, threading.Event()

    def run(self):
        while not self.stop_ev.is_set():
            try:
                self.peak = max(self.peak, status_kib(self.pid, "VmRSS"))
            except OSError:
                return
            self.stop_ev.wait(0.005)

    def stop(self) -> int:
        self.stop_ev.set()
        self.join()
        return self.peak


def read_discard(sock: socket.socket, limit: int | None = None, initial: int = 0) -> int:
    """The reader used everywhere: recv_into a 1 MiB buffer, discard."""
    buf = bytearray(BUF)
    view = memoryview(buf)
    n = initial
    while limit is None or n < limit:
        want = BUF if limit is None else min(BUF, limit - n)
        got = sock.recv_into(view, want)
        if not got:
            break
        n += got
    return n


def send_file(sock: socket.socket, fd: int, size: int):
    off = 0
    while off < size:
        sent = os.sendfile(sock.fileno(), fd, off, size - off)
        if sent == 0:
            raise RuntimeError("sendfile returned 0")
        off += sent


def floor_transfer(path: str, size: int) -> float:
    """Seconds to push the file over loopback TCP to read_discard."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    result = {}

    def receiver():
        c, _ = srv.accept()
        result["n"] = read_discard(c)
        c.close()

    t = threading.Thread(target=receiver)
    t.start()
    fd = os.open(path, os.O_RDONLY)
    s = socket.create_connection(srv.getsockname())
    t0 = time.perf_counter()
    send_file(s, fd, size)
    s.shutdown(socket.SHUT_WR)
    t.join()
    dt = time.perf_counter() - t0
    s.close()
    os.close(fd)
    srv.close()
    assert result["n"] == size, result
    return dt


def read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError(f"connection closed before head: {data!r}")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    return head, rest


def execd_download(host: str, port: int, token: str, path: str, size: int) -> float:
    s = socket.create_connection((host, port))
    t0 = time.perf_counter()
    s.sendall(f"GET /files/download?path={quote(path)} HTTP/1.1\r\nHost: b\r\n"
              f"X-EXECD-ACCESS-TOKEN: {token}\r\n\r\n".encode())
    head, rest = read_head(s)
    assert head.startswith(b"HTTP/1.1 200"), head
    n = read_discard(s, size, len(rest))
    dt = time.perf_counter() - t0
    s.close()
    assert n == size, (n, size)
    return dt


def execd_upload(host: str, port: int, token: str, src: str, target: str, size: int) -> float:
    b = "bench-" + secrets.token_hex(8)
    pre = (f"--{b}\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n"
           f"Content-Type: application/json\r\n\r\n{json.dumps({'path': target, 'mode': 644})}\r\n"
           f"--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n"
           f"Content-Type: application/octet-stream\r\n\r\n").encode()
    post = f"\r\n--{b}--\r\n".encode()
    head = (f"POST /files/upload HTTP/1.1\r\nHost: b\r\nX-EXECD-ACCESS-TOKEN: {token}\r\n"
            f"Content-Type: multipart/form-data; boundary={b}\r\n"
            f"Content-Length: {len(pre) + size + len(post)}\r\n\r\n").encode()
    fd = os.open(src, os.O_RDONLY)
    s = socket.create_connection((host, port))
    t0 = time.perf_counter()
    s.sendall(head + pre)
    send_file(s, fd, size)
    s.sendall(post)
    resp_head, _ = read_head(s)
    dt = time.perf_counter() - t0
    s.close()
    os.close(fd)
    assert resp_head.startswith(b"HTTP/1.1 200"), resp_head
    return dt


def make_file(path: str, size: int):
    block = os.urandom(BUF)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, BUF)
            f.write(block[:n])
            left -= n
        # Written back now, not during the measurement: 2 GiB of writeback
        # competing for the CPUs made single download rounds 3x slower.
        f.flush()
        os.fsync(f.fileno())
    # warm the page cache the way a re-read would
    with open(path, "rb") as f:
        while f.read(16 * MiB):
            pass


def start(binary: str, state: str):
    token = secrets.token_hex(16)
    p = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", "0", "--state-dir", state,
                          "--access-token", token],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rx = re.compile(rb"listening on ([0-9.]+):(\d+)")
    deadline = time.monotonic() + 20
    for line in p.stderr:
        m = rx.search(line)
        if m:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, token, m.group(1).decode(), int(m.group(2))
        if time.monotonic() > deadline:
            break
    p.kill()
    raise SystemExit("execd did not start")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--execd", default="build/execd")
    ap.add_argument("--size-mib", type=int, default=2048)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the test files go")
    ap.add_argument("--rounds", type=int, default=3, help="best of N for every figure")
    args = ap.parse_args()
    size = args.size_mib * MiB

    work = tempfile.mkdtemp(prefix="bench-files-", dir=args.dir)
    src = os.path.join(work, "src.bin")
    dst = os.path.join(work, "dst.bin")
    print(f"preparing a {args.size_mib} MiB file in {work} ...", flush=True)
    make_file(src, size)
    proc, token, host, port = start(os.path.abspath(args.execd), os.path.join(work, "state"))
    try:
        base = status_kib(proc.pid, "VmRSS")
        floors, downs, peaks = [], [], []
        for _ in range(args.rounds):
            sampler = RssSampler(proc.pid)
            sampler.start()
            floors.append(floor_transfer(src, size))
            sampler.stop()
            sampler = RssSampler(proc.pid)
            sampler.start()
            downs.append(execd_download(host, port, token, src, size))
            peaks.append(sampler.stop())
        floor, down, down_peak = min(floors), min(downs), max(peaks)
        print("floors", [round(size / f / 1e6) for f in floors], "downs", [round(size / d / 1e6) for d in downs])

        base_up = status_kib(proc.pid, "VmRSS")
        sampler = RssSampler(proc.pid)
        sampler.start()
        ups = []
        for _ in range(args.rounds):
            ups.append(execd_upload(host, port, token, src, dst, size))
        up_peak = sampler.stop()
        up = min(ups)
        hwm = status_kib(proc.pid, "VmHWM")
        assert os.path.getsize(dst) == size
    finally:
        proc.terminate()
        proc.wait(30)
        for f in (src, dst):
            if os.path.exists(f):
                os.unlink(f)
        subprocess.run(["rm", "-rf", work])

    mbs = lambda dt: size / dt / 1e6  # noqa: E731
    print(f"size                     {args.size_mib} MiB, best of {args.rounds}")
    print(f"floor (sendfile->recv)   {mbs(floor):8.0f} MB/s")
    print(f"download                 {mbs(down):8.0f} MB/s  = {100 * floor / down:5.1f}% of floor  (target >= 95%)")
    print(f"upload (incl. fsync)     {mbs(up):8.0f} MB/s  = {100 * floor / up:5.1f}% of floor  (target >= 40%)")
    print(f"RSS baseline             {base / 1024:8.1f} MiB")
    print(f"RSS growth download      {(down_peak - base) / 1024:8.1f} MiB  (target < 8)")
    print(f"RSS growth upload        {(up_peak - base_up) / 1024:8.1f} MiB  (target < 8)")
    print(f"VmHWM                    {hwm / 1024:8.1f} MiB")
    ok = floor / down >= 0.95 and floor / up >= 0.4 and down_peak - base < 8192 and up_peak - base_up < 8192
    print("targets met" if ok else "TARGETS MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
