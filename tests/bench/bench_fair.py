"""Fair file work (issue: hardening), as figures for the closing note:

* `echo ok` round trip alone (the floor), then right after 16 clients that
  searched the whole filesystem gave up after one second;
* execd's RSS before, at the peak of and 3 s after six concurrent searches
  of 100k matches each (a tmpfs tree).

Medians of --rounds, same run. Usage: bench_fair.py --execd build/execd
"""
from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

LISTEN_RE = re.compile(r"listening on ([0-9.]+):(\d+)")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Daemon:
    def __init__(self, binary: str, state: str):
        self.token = secrets.token_hex(16)
        self.proc = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", "0", "--access-token", self.token,
                                      "--state-dir", state], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
        for raw in self.proc.stderr:
            m = LISTEN_RE.search(raw.decode(errors="replace"))
            if m:
                self.port = int(m.group(2))
                break
        else:
            sys.exit("execd did not start")
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()

    def request(self, method: str, path: str, body: bytes | None = None) -> bytes:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body, method=method,
                                     headers={"X-EXECD-ACCESS-TOKEN": self.token, "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.read()

    def echo_ok_ms(self) -> float:
        t = time.perf_counter()
        out = self.request("POST", "/command", json.dumps({"command": "echo ok"}).encode())
        assert b"execution_complete" in out, out
        return (time.perf_counter() - t) * 1e3

    def search_request(self, root: str, pattern: str) -> bytes:
        q = urllib.parse.urlencode({"path": root, "pattern": pattern})
        return f"GET /files/search?{q} HTTP/1.1\r\nHost: b\r\nX-EXECD-ACCESS-TOKEN: {self.token}\r\n\r\n".encode()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--execd", default="build/execd")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-fair-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    try:
        run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args, work: str):
    tree = os.path.join(work, "tree")
    for d in range(100):
        os.makedirs(os.path.join(tree, f"d{d:03}"))
        for f in range(1000):
            os.close(os.open(os.path.join(tree, f"d{d:03}", f"f{f:04}.txt"), os.O_CREAT | os.O_WRONLY, 0o644))
    d = Daemon(args.execd, os.path.join(work, "state"))
    try:
        for _ in range(20):
            d.echo_ok_ms()
        alone, behind = [], []
        for _ in range(args.rounds):
            alone.append(statistics.median(d.echo_ok_ms() for _ in range(20)))
            socks = []
            for i in range(16):
                s = socket.create_connection(("127.0.0.1", d.port))
                s.sendall(d.search_request("/", "no-such-file-*.nothing"))
                socks.append(s)
            time.sleep(1)
            for i, s in enumerate(socks):
                if i % 2:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            behind.append(d.echo_ok_ms())
            time.sleep(2)  # let the walks of this round stop before the next one
        print(f"echo ok alone               median {statistics.median(alone):8.1f} ms")
        print(f"echo ok behind 16 abandoned median {statistics.median(behind):8.1f} ms  "
              f"(x{statistics.median(behind) / statistics.median(alone):.1f}; was 61 s before the fix)")

        base = rss_kib(d.proc.pid)
        peak = [base]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], rss_kib(d.proc.pid))
                time.sleep(0.02)
        sampler = threading.Thread(target=sample)
        sampler.start()
        q = "/files/search?" + urllib.parse.urlencode({"path": tree, "pattern": "**"})
        counts = []
        threads = [threading.Thread(target=lambda: counts.append(len(json.loads(d.request("GET", q)))))
                   for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        sampler.join()
        assert counts == [100_000] * 6, counts
        time.sleep(3)
        after = rss_kib(d.proc.pid)
        print(f"six 100k-match searches     RSS before {base / 1024:.1f} MiB, peak {peak[0] / 1024:.1f} MiB, "
              f"3 s after {after / 1024:.1f} MiB (was 0.4 -> 2 GB, never returned)")
    finally:
        d.stop()


if __name__ == "__main__":
    main()
