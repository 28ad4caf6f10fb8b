#!/usr/bin/env python3
"""execd benchmarks (not a test: prints figures and a target table).

    python tests/bench/bench.py --execd build/execd --floor build/spawn_floor --client build/stream_client [--quick]

Measures, against a release execd:
  * exec round trip of POST /command {"command":"true"} over one keep-alive
    connection (p50/p99) with build/stream_client --rtt (a C client, so the
    client's own cost is not measured), next to the floor: posix_spawn+wait of
    `bash -c true` (build/spawn_floor N bash_path); 5 alternating rounds,
    medians;
  * think time: the round trip of `true` with 0 s, 0.1 s and 1 s pauses
    before each command and a fresh connection each (as an agent's SDK call
    makes), cgroups on, against the floor with the same pauses
    (build/stream_client --think, build/spawn_floor N bash PAUSE_MS);
    rounds alternate execd and the floor, medians of each side's p50 and p90;
    and, in the same rounds, the same client against build/http_floor (a
    blocking HTTP server that does nothing but posix_spawn the command, read
    its pipes and wait for it): what the loopback connection and the
    wake-ups alone add to the floor;
  * the cost of the per-command cgroup: the same round trip with cgroups and
    with --no-cgroups (the floor), alternating daemons over 5 rounds, medians;
    and execd's own CPU per command in both (all threads, and the loop's);
  * execd's own CPU (all threads) per byte streamed in exact framing for
    `head -c 256M /dev/zero | base64` (the headline streaming figure; the
    client verifies every byte and the SHA-256), against the CPU of `cat`
    relaying the same bytes from a pipe to a TCP socket plus `openssl dgst
    -sha256` of them; medians of 5, interleaved;
  * stdout throughput in exact framing for `head -c 256M /dev/zero | base64`,
    decoded and verified by build/stream_client (offsets, and SHA-256 against
    the terminal event), next to the floor
    `bash -c 'head -c 256M /dev/zero | base64 | cat > /dev/null'`; medians of 5,
    interleaved;
  * idle RSS of a fresh execd;
  * start-up time: spawn until the first successful GET /ping (tight connect loop);
  * 1,000 concurrent foreground commands (`sleep 1; echo done`): errors and peak RSS;
  * RSS 2 s after 500 concurrent commands ended, against idle RSS;
  * RSS 2 s after 20 commands that each printed 8 MiB (base64), against idle
    RSS (what finished records keep);
  * 10,000 idle keep-alive connections (each served one /ping): RSS, and whether
    the 10,001st client is served.
Exit status is 0 even when a target is missed (it is a report, not a gate).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import re
import resource
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"
LISTEN_RE = re.compile(rb"listening on ([0-9.]+):(\d+)")


def vm_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def text_rss_kib(pid: int) -> int:
    """Resident KiB of execd's own code (its executable mappings of its
    binary): the kernel maps text 64 KiB around each touched page, so this
    is what the static link order (image/execd-static.order) decides. It
    also depends on how the binary sits in the page cache (a copy written
    just now can map larger pieces): compare binaries after
    `echo 1 > /proc/sys/vm/drop_caches`."""
    exe = os.readlink(f"/proc/{pid}/exe")
    total, ours = 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 5 and "-" in fields[0] and not fields[0].endswith(":"):
                ours = "x" in fields[1] and len(fields) >= 6 and fields[5] == exe
            elif ours and fields[0] == "Rss:":
                total += int(fields[1])
    return total


def pct(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class Daemon:
    def __init__(self, binary, *extra):
        import tempfile
        self.token = secrets.token_hex(16)
        # Never the machine's /var/lib/execd: a private state dir per daemon.
        self.state_dir = tempfile.mkdtemp(prefix="execd-bench-")
        self.proc = subprocess.Popen(
            [binary, "--host", "127.0.0.1", "--port", "0", "--access-token", self.token,
             "--state-dir", self.state_dir, *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.port = None
        self.errlog = bytearray()
        deadline = time.monotonic() + 20
        while self.port is None:
            line = self.proc.stderr.readline()
            if not line:
                raise SystemExit(f"execd exited early: {self.errlog.decode(errors='replace')}")
            self.errlog += line
            m = LISTEN_RE.search(line)
            if m:
                self.port = int(m.group(2))
            if time.monotonic() > deadline:
                raise SystemExit("execd did not report its port")
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.errlog += line

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.state_dir, ignore_errors=True)
        return self.proc.returncode


# ---------------------------------------------------------------- round trip
def bench_round_trip(binary, floor, bash, runs, client, rounds=5):
    """execd and the floor in alternating rounds against one daemon; medians
    of each side's p50 and p99 (one round each swung 15-20% between runs on
    these shared cores)."""
    d = Daemon(binary)
    got = {"p50_us": [], "p99_us": [], "floor_p50_us": [], "floor_p99_us": []}
    errors = 0
    try:
        for _ in range(rounds):
            rt = json.loads(subprocess.check_output([client, "--rtt", str(runs), str(d.port), d.token]))
            fl = json.loads(subprocess.check_output([floor, str(runs), bash]))
            errors += rt["errors"]
            for k in ("p50_us", "p99_us"):
                got[k].append(rt[k])
                got["floor_" + k].append(fl[k])
    finally:
        d.stop()
    out = {k: statistics.median(v) for k, v in got.items()}
    out["errors"] = errors
    out["rounds"] = got
    return out


# ---------------------------------------------------------------- think time
class HttpFloor:
    """build/http_floor, serving on the port it prints."""

    def __init__(self, binary, bash):
        self.proc = subprocess.Popen([binary, bash], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        self.port = int(self.proc.stdout.readline())

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def bench_think_time(binary, floor, bash, client, pauses_ms=(0, 100, 1000), quick=False, http_floor=None):
    """The round trip after each pause, execd (cgroups on, default spares)
    and the floor alternating round by round; medians of the p50s and p90s.
    Also, at 0.1 s, with --cgroup-spares 0 (every start joins its cgroup: the
    way it was) and with --no-cgroups (what is not the cgroup's)."""
    out = {}
    for label, extra in (("0.1 s, --cgroup-spares 0", ("--cgroup-spares", "0")), ("0.1 s, --no-cgroups", ("--no-cgroups",))):
        try:
            d = Daemon(binary, *extra)
        except SystemExit:
            continue  # an execd from before --cgroup-spares (a before/after run)
        try:
            subprocess.check_output([client, "--rtt", "20", str(d.port), d.token])
            p50s, p90s = [], []
            for _ in range(3):
                rt = json.loads(subprocess.check_output([client, "--think", str(60 // (4 if quick else 1)), "100",
                                                         str(d.port), d.token]))
                p50s.append(rt["p50_us"])
                p90s.append(rt["p90_us"])
            out[label] = {"p50_us": statistics.median(p50s), "p90_us": statistics.median(p90s)}
        finally:
            d.stop()
    for pause in pauses_ms:
        n = {0: 200, 100: 60, 1000: 12}[pause] // (4 if quick else 1)
        rounds = 3 if pause < 1000 else 2
        got = {"p50_us": [], "p90_us": [], "floor_p50_us": [], "floor_p90_us": []}
        if http_floor:
            got.update(http_p50_us=[], http_p90_us=[])
        d = Daemon(binary)
        hf = HttpFloor(http_floor, bash) if http_floor else None
        errors = 0
        try:
            subprocess.check_output([client, "--rtt", "20", str(d.port), d.token])  # spares are made from here on
            for _ in range(rounds):
                rt = json.loads(subprocess.check_output([client, "--think", str(n), str(pause), str(d.port), d.token]))
                fl = json.loads(subprocess.check_output([floor, str(n), bash, str(pause)]))
                errors += rt["errors"]
                for k in ("p50_us", "p90_us"):
                    got[k].append(rt[k])
                    got["floor_" + k].append(fl[k])
                if hf:
                    ht = json.loads(subprocess.check_output([client, "--think", str(n), str(pause), str(hf.port), "-"]))
                    errors += ht["errors"]
                    for k in ("p50_us", "p90_us"):
                        got["http_" + k].append(ht[k])
            mode = containment_mode(d.port)
        finally:
            d.stop()
            if hf:
                hf.stop()
        res = {k: statistics.median(v) for k, v in got.items()}
        res.update(errors=errors, runs=n, rounds=rounds, mode=mode)
        out[pause] = res
    return out


# ------------------------------------------------- cost of per-command cgroups
def containment_mode(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", "/ping")
        r = c.getresponse()
        r.read()
        return r.getheader("X-Execd-Containment", "?")
    finally:
        c.close()


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(whole process, loop thread) user+system CPU seconds so far."""
    tick = os.sysconf("SC_CLK_TCK")

    def stat(path):
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    return stat(f"/proc/{pid}/stat"), stat(f"/proc/{pid}/task/{pid}/stat")


def bench_cgroup_cost(binary, runs, client, rounds=5):
    """The /command round trip with execd's per-command cgroup and with
    --no-cgroups, alternating daemons round by round; medians of the p50s.
    Also execd's own CPU per command (every thread, and the loop thread),
    which on 2 shared cores is steadier than the latency: the children's
    CPU is not in it (bash is the floor's too)."""
    p50 = {"cgroup": [], "plain": []}
    cpu = {"cgroup": [], "plain": []}
    loop_cpu = {"cgroup": [], "plain": []}
    mode = "?"
    for _ in range(rounds):
        for key, extra in (("cgroup", ()), ("plain", ("--no-cgroups",))):
            d = Daemon(binary, *extra)
            try:
                if key == "cgroup":
                    mode = containment_mode(d.port)
                # A warm-up, so that start-up work (the threadpool, the first
                # cgroups) is not counted.
                subprocess.check_output([client, "--rtt", "50", str(d.port), d.token])
                before = cpu_seconds(d.proc.pid)
                rt = json.loads(subprocess.check_output([client, "--rtt", str(runs), str(d.port), d.token]))
                after = cpu_seconds(d.proc.pid)
            finally:
                d.stop()
            p50[key].append(rt["p50_us"])
            cpu[key].append((after[0] - before[0]) / runs * 1e6)
            loop_cpu[key].append((after[1] - before[1]) / runs * 1e6)
    med = statistics.median
    return {"mode": mode, "cgroup_p50_us": med(p50["cgroup"]), "plain_p50_us": med(p50["plain"]),
            "cgroup_cpu_us": med(cpu["cgroup"]), "plain_cpu_us": med(cpu["plain"]),
            "cgroup_loop_cpu_us": med(loop_cpu["cgroup"]), "plain_loop_cpu_us": med(loop_cpu["plain"]),
            "rounds": p50, "cpu_rounds": cpu}


# ---------------------------------------------------------------- throughput
def bench_throughput(binary, size_spec, client, rounds=5):
    cmd = f"head -c {size_spec} /dev/zero | base64"
    d = Daemon(binary)
    floors, runs, payload, ok = [], [], None, True
    try:
        for _ in range(rounds):  # interleaved, so both see the same machine
            t0 = time.perf_counter()
            subprocess.run(["bash", "-c", f"{cmd} | cat > /dev/null"], check=True)
            floors.append(time.perf_counter() - t0)
            r = json.loads(subprocess.check_output([client, str(d.port), d.token, cmd]))
            ok = ok and r["ok"]
            payload = r["stdout_bytes"]
            runs.append(r["seconds"])
    finally:
        d.stop()
    execd_s, floor_s = statistics.median(runs), statistics.median(floors)
    return {"execd_s": execd_s, "floor_s": floor_s, "stdout_bytes": payload, "verified": ok,
            "execd_mb_s": (payload or 0) / execd_s / 1e6, "floor_mb_s": (payload or 0) / floor_s / 1e6}


def relay_floor_cpu(cmd):
    """CPU seconds of the floor for streaming `cmd`'s output: `cat` relaying
    it from a pipe to a TCP socket (a reader in this process drains the
    other end), plus `openssl dgst -sha256` of the same bytes (execd hashes
    what it streams). The producers' CPU is in neither side."""
    def waited(p):
        _, _, ru = os.wait4(p.pid, 0)
        p.returncode = 0
        return ru.ru_utime + ru.ru_stime

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    out = socket.create_connection(srv.getsockname())
    conn, _ = srv.accept()
    drained = [0]

    def drain():
        while True:
            b = conn.recv(1 << 20)
            if not b:
                break
            drained[0] += len(b)

    t = threading.Thread(target=drain)
    t.start()
    producer = subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.PIPE)
    cat = subprocess.Popen(["cat"], stdin=producer.stdout, stdout=out.fileno())
    producer.stdout.close()
    out.close()
    cat_cpu = waited(cat)
    producer.wait()
    t.join()
    conn.close()
    srv.close()
    producer = subprocess.Popen(["bash", "-c", cmd], stdout=subprocess.PIPE)
    dgst = subprocess.Popen(["openssl", "dgst", "-sha256"], stdin=producer.stdout, stdout=subprocess.DEVNULL)
    producer.stdout.close()
    dgst_cpu = waited(dgst)
    producer.wait()
    return cat_cpu + dgst_cpu, cat_cpu, dgst_cpu, drained[0]


def bench_stream_cpu(binary, size_spec, client, rounds=5):
    """execd's own CPU (every thread) per streamed byte in exact framing,
    the client verifying every byte and the SHA-256, against the relay
    floor (relay_floor_cpu); rounds interleaved, medians."""
    cmd = f"head -c {size_spec} /dev/zero | base64"
    d = Daemon(binary)
    ex, fl, cats, dgsts, payload, ok = [], [], [], [], None, True
    try:
        for _ in range(rounds):
            total, cat_cpu, dgst_cpu, n = relay_floor_cpu(cmd)
            fl.append(total)
            cats.append(cat_cpu)
            dgsts.append(dgst_cpu)
            before = cpu_seconds(d.proc.pid)[0]
            r = json.loads(subprocess.check_output([client, str(d.port), d.token, cmd]))
            ex.append(cpu_seconds(d.proc.pid)[0] - before)
            ok = ok and r["ok"] and r["stdout_bytes"] == n
            payload = r["stdout_bytes"]
    finally:
        d.stop()
    med = statistics.median
    return {"execd_cpu_s": med(ex), "floor_cpu_s": med(fl), "cat_cpu_s": med(cats), "dgst_cpu_s": med(dgsts),
            "stdout_bytes": payload, "verified": ok, "execd_rounds": ex, "floor_rounds": fl}


# ---------------------------------------------------------------- idle RSS / start-up
def ping_once(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/ping")
    c.getresponse().read()
    c.close()


def bench_idle_rss(binary):
    d = Daemon(binary)
    try:
        ping_once(d.port)
        return vm_rss_kib(d.proc.pid)
    finally:
        d.stop()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def bench_startup(binary, runs):
    import tempfile
    times = []
    state_dir = tempfile.mkdtemp(prefix="execd-bench-")
    for _ in range(runs):
        port = free_port()
        t0 = time.perf_counter()
        p = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", str(port),
                              "--access-token", "t", "--log-level", "warn", "--state-dir", state_dir],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        ok = False
        deadline = t0 + 10
        while time.perf_counter() < deadline:
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=1)
            except OSError:
                if p.poll() is not None:
                    break
                continue
            try:
                s.sendall(b"GET /ping HTTP/1.1\r\nHost: b\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    ok = True
            except OSError:
                pass
            finally:
                s.close()
            if ok:
                break
        dt = time.perf_counter() - t0
        p.send_signal(signal.SIGTERM)
        p.wait(10)
        if ok:
            times.append(dt * 1e3)
    shutil.rmtree(state_dir, ignore_errors=True)
    return {"median_ms": statistics.median(times) if times else float("nan"),
            "min_ms": min(times) if times else float("nan"), "ok": len(times), "runs": runs}


# ---------------------------------------------------------------- concurrency
async def _one(port, token, body, errors, timeout):
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
        w.write(b"POST /command HTTP/1.1\r\nHost: b\r\nConnection: close\r\n"
                + f"{TOKEN_HEADER}: {token}\r\nAccept: application/x-ndjson\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await w.drain()
        data = bytearray()
        async def read_all():
            while True:
                chunk = await r.read(65536)
                if not chunk:
                    return
                data.extend(chunk)
                if data.endswith(b"\r\n0\r\n\r\n") and b'"execution_complete"' in data[-4096:]:
                    return
        await asyncio.wait_for(read_all(), timeout)
        w.close()
        ok = (data.startswith(b"HTTP/1.1 200") and b'"text":"done\\n"' in data
              and b'"exit_code":0' in data)
        if not ok:
            errors.append(bytes(data[:300]))
    except Exception as e:  # noqa: BLE001 - every failure is counted
        errors.append(repr(e).encode())


def bench_idle_connections(binary, n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    d = Daemon(binary)
    socks = []
    try:
        base = vm_rss_kib(d.proc.pid)
        req = b"GET /ping HTTP/1.1\r\nHost: b\r\n\r\n"
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
            s.sendall(req)
            if not s.recv(256).startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"connection {i} not served")
            socks.append(s)
        rss = vm_rss_kib(d.proc.pid)
        extra = socket.create_connection(("127.0.0.1", d.port), timeout=10)
        extra.sendall(req)
        served = extra.recv(256).startswith(b"HTTP/1.1 200")
        extra.close()
        return {"connections": len(socks), "rss_kib": rss, "base_rss_kib": base, "next_served": served}
    finally:
        for s in socks:
            s.close()
        d.stop()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def bench_rss_after_output(binary, n, mib):
    """RSS of an idle execd, then 2 s after n commands that each printed
    `mib` MiB (base64 of zeros; every byte read by the client): what their
    finished records keep."""
    d = Daemon(binary)
    try:
        ping_once(d.port)
        idle = vm_rss_kib(d.proc.pid)
        body = json.dumps({"command": f"head -c {mib}M /dev/zero | base64"}).encode()
        for _ in range(n):
            c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
            c.request("POST", "/command", body=body, headers={TOKEN_HEADER: d.token})
            c.getresponse().read()
            c.close()
        time.sleep(2)
        return {"idle_kib": idle, "after_2s_kib": vm_rss_kib(d.proc.pid), "commands": n, "mib_each": mib}
    finally:
        d.stop()


def bench_rss_after_burst(binary, n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 8 * n + 1000)), hard))
    d = Daemon(binary)
    try:
        ping_once(d.port)
        idle = vm_rss_kib(d.proc.pid)
        text = {"idle_text_kib": text_rss_kib(d.proc.pid)}
        # "Warm" idle: after one command, whose first SHA-256 maps libcrypto's
        # code pages (file-backed) that every later command uses too.
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=5)
        c.request("POST", "/command", body=b'{"command":"echo warm"}', headers={TOKEN_HEADER: d.token})
        c.getresponse().read()
        c.close()
        time.sleep(1.5)  # the housekeeping pass that trims the heap
        warm = vm_rss_kib(d.proc.pid)
        text["warm_text_kib"] = text_rss_kib(d.proc.pid)
        errors: list[bytes] = []
        body = json.dumps({"command": "sleep 0.5; echo done"}).encode()

        async def main():
            await asyncio.gather(*[_one(d.port, d.token, body, errors, 60) for _ in range(n)])
        asyncio.run(main())
        peak = vm_rss_kib(d.proc.pid)
        time.sleep(2)  # the figure is "RSS 2 s after the burst"
        after = vm_rss_kib(d.proc.pid)
        text["after_2s_text_kib"] = text_rss_kib(d.proc.pid)
        return {"idle_kib": idle, "warm_idle_kib": warm, "right_after_kib": peak, "after_2s_kib": after,
                "errors": len(errors), **text}
    finally:
        d.stop()


def bench_concurrent(binary, n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 8 * n + 1000))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    d = Daemon(binary)  # inherits the raised limit
    peak = [vm_rss_kib(d.proc.pid)]
    base = peak[0]
    stop = threading.Event()

    def sampler():
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], vm_rss_kib(d.proc.pid))
            except OSError:
                return
            stop.wait(0.02)
    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    errors: list[bytes] = []
    body = json.dumps({"command": "sleep 1; echo done"}).encode()

    async def main():
        await asyncio.gather(*[_one(d.port, d.token, body, errors, 120) for _ in range(n)])
    t0 = time.perf_counter()
    try:
        asyncio.run(main())
    finally:
        wall = time.perf_counter() - t0
        stop.set()
        th.join()
        rc = d.stop()
    return {"errors": len(errors), "sample_errors": [e[:160] for e in errors[:3]],
            "peak_rss_kib": peak[0], "base_rss_kib": base, "wall_s": wall, "exit": rc}


# ---------------------------------------------------------------- report
def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--execd", default="build/execd")
    ap.add_argument("--floor", default="build/spawn_floor")
    ap.add_argument("--client", default="build/stream_client")
    ap.add_argument("--http-floor", default="", help="build/http_floor: the think-time rows' second floor")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke run)")
    ap.add_argument("--only", default="",
                    help="comma list: rtt,think,cgroup,streamcpu,throughput,rss,startup,concurrent,burst,output,idleconns")
    ap.add_argument("--static", default="", help="also measure idle RSS and start-up of this (static) binary")
    a = ap.parse_args()
    binary = os.path.abspath(a.execd)
    floor = os.path.abspath(a.floor)
    client = os.path.abspath(a.client)
    bash = shutil.which("bash") or "/bin/bash"
    only = set(filter(None, a.only.split(",")))
    want = lambda k: not only or k in only  # noqa: E731
    runs = 100 if a.quick else 500
    size = "64M" if a.quick else "256M"
    conc = 200 if a.quick else 1000

    rows = []  # (metric, execd, floor, ratio, target, ok)
    if want("rtt"):
        rt = bench_round_trip(binary, floor, bash, runs, client)
        print(f"round trip ({runs} runs x 5 rounds): {json.dumps(rt)}", flush=True)
        r50 = rt["p50_us"] / rt["floor_p50_us"]
        rows.append(("round trip p50 (us)", f"{rt['p50_us']:.0f}", f"{rt['floor_p50_us']:.0f}",
                     f"{r50:.2f}x", "<= 1.15x floor", r50 <= 1.15 and rt["errors"] == 0))
        rows.append(("round trip p99 (us)", f"{rt['p99_us']:.0f}", f"{rt['floor_p99_us']:.0f}",
                     f"{rt['p99_us'] / rt['floor_p99_us']:.2f}x", "-", None))
    if want("think"):
        th = bench_think_time(binary, floor, bash, client, quick=a.quick,
                              http_floor=os.path.abspath(a.http_floor) if a.http_floor else None)
        print(f"think time: {json.dumps(th)}", flush=True)
        for pause, r in th.items():
            if isinstance(pause, str):
                base = th[100]
                rows.append((f"after {pause}: p50 / p90 (us)", f"{r['p50_us']:.0f} / {r['p90_us']:.0f}",
                             f"{base['floor_p50_us']:.0f} / {base['floor_p90_us']:.0f}",
                             f"{r['p50_us'] / base['floor_p50_us']:.2f}x", "-", None))
                continue
            r50 = r["p50_us"] / r["floor_p50_us"]
            r90 = r["p90_us"] / r["floor_p90_us"]
            rows.append((f"after {pause / 1000:g} s pause, fresh connection: p50 (us, {r['mode']})", f"{r['p50_us']:.0f}",
                         f"{r['floor_p50_us']:.0f}", f"{r50:.2f}x", "<= 1.15x floor", r50 <= 1.15 and r["errors"] == 0))
            rows.append((f"  p90 (us)", f"{r['p90_us']:.0f}", f"{r['floor_p90_us']:.0f}", f"{r90:.2f}x",
                         "<= 1.3x floor", r90 <= 1.3))
            if "http_p50_us" in r:
                rows.append((f"  HTTP floor (http_floor) p50 / p90 (us)", f"{r['http_p50_us']:.0f} / {r['http_p90_us']:.0f}",
                             f"{r['floor_p50_us']:.0f} / {r['floor_p90_us']:.0f}",
                             f"{r['http_p50_us'] / r['floor_p50_us']:.2f}x", "-", None))
                rows.append((f"  execd against the HTTP floor, p50", f"{r['p50_us']:.0f}", f"{r['http_p50_us']:.0f}",
                             f"{r['p50_us'] / r['http_p50_us']:.2f}x", "-", None))
    if want("cgroup"):
        cg = bench_cgroup_cost(binary, runs, client)
        print(f"per-command cgroup ({runs} runs x 5 rounds): {json.dumps(cg)}", flush=True)
        rows.append((f"round trip p50, cgroup ({cg['mode']}) vs --no-cgroups (us)", f"{cg['cgroup_p50_us']:.0f}",
                     f"{cg['plain_p50_us']:.0f}", f"{cg['cgroup_p50_us'] / cg['plain_p50_us']:.2f}x", "-", None))
        rows.append(("execd CPU per command, cgroup vs --no-cgroups (us)", f"{cg['cgroup_cpu_us']:.0f}",
                     f"{cg['plain_cpu_us']:.0f}", f"{cg['cgroup_cpu_us'] / cg['plain_cpu_us']:.2f}x", "-", None))
        rows.append(("  of it on the loop thread (us)", f"{cg['cgroup_loop_cpu_us']:.0f}",
                     f"{cg['plain_loop_cpu_us']:.0f}", "-", "-", None))
    if want("streamcpu"):
        sc = bench_stream_cpu(binary, size, client)
        print(f"stream CPU ({size} zero | base64, verified): {json.dumps(sc)}", flush=True)
        ratio = sc["execd_cpu_s"] / sc["floor_cpu_s"]
        rows.append((f"stdout CPU-s per {sc['stdout_bytes'] / 1e6:.0f} MB (exact, verified; floor cat to TCP + "
                     f"openssl sha256)", f"{sc['execd_cpu_s']:.3f}", f"{sc['floor_cpu_s']:.3f}", f"{ratio:.2f}x",
                     "<= 1.10x floor", ratio <= 1.10 and sc["verified"]))
    if want("throughput"):
        tp = bench_throughput(binary, size, client)
        print(f"throughput ({size} zero | base64, verified): {json.dumps(tp)}", flush=True)
        ratio = tp["floor_s"] / tp["execd_s"]
        rows.append((f"stdout MB/s ({size}, exact, verified)", f"{tp['execd_mb_s']:.0f}", f"{tp['floor_mb_s']:.0f}",
                     f"{ratio:.2f}x", ">= 0.8x floor", ratio >= 0.8 and tp["verified"]))
    # The static binary is what images ship (make static); the dynamic one
    # maps whole shared libraries (libcrypto, libstdc++) into its RSS.
    variants = [("", binary)] + ([(" [static]", os.path.abspath(a.static))] if a.static else [])
    for label, path in variants:
        if want("rss"):
            rss = bench_idle_rss(path)
            print(f"idle RSS{label}: {rss} KiB", flush=True)
            rows.append((f"idle RSS (MiB){label}", f"{rss / 1024:.2f}", "-", "-", "<= 2.5 MiB (static)",
                         rss <= 2.5 * 1024 if label else None))
        if want("startup"):
            su = bench_startup(path, 10 if a.quick else 30)
            print(f"start-up{label}: {json.dumps(su)}", flush=True)
            rows.append((f"start-up to /ping (ms){label}", f"{su['median_ms']:.2f}", "-", "-", "< 10 ms",
                         su["median_ms"] < 10 and su["ok"] == su["runs"]))
    if want("concurrent"):
        cc = bench_concurrent(binary, conc)
        print(f"{conc} concurrent: {json.dumps(cc, default=str)}", flush=True)
        rows.append((f"{conc} concurrent: errors", str(cc["errors"]), "-", "-", "0", cc["errors"] == 0))
        rows.append((f"{conc} concurrent: peak RSS (MiB)", f"{cc['peak_rss_kib'] / 1024:.1f}", "-", "-",
                     "< 64 MiB", cc["peak_rss_kib"] < 64 * 1024))
        rows.append((f"{conc} concurrent: wall (s)", f"{cc['wall_s']:.2f}", "-", "-", "-", None))

    # The burst for both binaries: the static one idles lower, so the same
    # growth is a larger ratio.
    for label, path in variants if want("burst") else []:
        b = bench_rss_after_burst(path, 200 if a.quick else 500)
        print(f"RSS after a burst{label}: {json.dumps(b)}", flush=True)
        r = b["after_2s_kib"] / b["idle_kib"]
        rows.append((f"RSS 2 s after 500 commands (MiB){label}", f"{b['after_2s_kib'] / 1024:.2f}",
                     f"{b['idle_kib'] / 1024:.2f}", f"{r:.2f}x", "<= 1.5x idle", r <= 1.5 and b["errors"] == 0))
        rw = b["after_2s_kib"] / b["warm_idle_kib"]
        rows.append((f"  same, against warm idle (MiB){label}", f"{b['after_2s_kib'] / 1024:.2f}",
                     f"{b['warm_idle_kib'] / 1024:.2f}", f"{rw:.2f}x", "-", None))
    if want("output"):
        o = bench_rss_after_output(binary, 20, 8)
        print(f"RSS after output: {json.dumps(o)}", flush=True)
        r = o["after_2s_kib"] / o["idle_kib"]
        rows.append(("RSS 2 s after 20 commands of 8 MiB | base64 (MiB)", f"{o['after_2s_kib'] / 1024:.2f}",
                     f"{o['idle_kib'] / 1024:.2f}", f"{r:.2f}x", "-", None))
    if want("idleconns"):
        ic = bench_idle_connections(binary, 2000 if a.quick else 10000)
        print(f"idle connections: {json.dumps(ic)}", flush=True)
        rows.append((f"{ic['connections']} idle connections: RSS (MiB)", f"{ic['rss_kib'] / 1024:.1f}", "-", "-",
                     "< 64 MiB, next served", ic["rss_kib"] < 64 * 1024 and ic["next_served"]))

    hdr = ("metric", "execd", "floor", "ratio", "target", "met")
    table = [hdr] + [(m, e, f, r, t, "-" if ok is None else ("yes" if ok else "NO"))
                     for m, e, f, r, t, ok in rows]
    w = [max(len(row[i]) for row in table) for i in range(len(hdr))]
    print()
    for i, row in enumerate(table):
        print("  ".join(c.ljust(w[j]) for j, c in enumerate(row)))
        if i == 0:
            print("  ".join("-" * x for x in w))


if __name__ == "__main__":
    sys.exit(main())
