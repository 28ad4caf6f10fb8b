#!/usr/bin/env python3
"""Where a command's round trip after think time goes: a scheduler and
system-call trace of execd (or build/http_floor) serving
`stream_client --think`, split into phases per command. Not part of
`make bench` (it needs perf and root, and tracing slows every system call
by about a microsecond); for finding out what the think-time rows of the
bench are made of.

    python3 tests/bench/think_trace.py --execd build/execd-static --client build/stream_client
    python3 tests/bench/think_trace.py --http-floor build/http_floor --client build/stream_client

Records `sched_switch`, `sched_process_exec/exit` and every system call on
all CPUs (`perf record -a`) while the client runs N commands with a pause
before each and a fresh connection each, then prints, as medians over the
commands (microseconds):
  * the phases: connect -> accept -> request read -> the process that
    becomes the command first runs (a spare launcher woken, or a new child)
    -> execve -> exit -> the result written -> the client closes;
  * on-CPU time within each command (connect to close) of the server's
    threads, of that process before its exec, of the command, and of the
    client, next to the wall time: where they add up to the wall time,
    nothing ran in parallel (a scheduler that packs runnable tasks onto one
    CPU, as this machine's does, makes the round trip the sum of them);
  * the server's system calls per command (count and time inside, without
    the ones that wait: epoll_wait, futex, poll).
"""
from __future__ import annotations

import argparse
import bisect
import collections
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import Daemon, HttpFloor  # noqa: E402

EVENTS = ["sched:sched_switch", "sched:sched_process_exec", "sched:sched_process_exit",
          "raw_syscalls:sys_enter", "raw_syscalls:sys_exit"]
LINE = re.compile(r"^\s*(.+?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)$")
SWITCH = re.compile(r"prev_comm=(.*?) prev_pid=(\d+) .*==> next_comm=(.*?) next_pid=(\d+)")
NR = {"read": 0, "write": 1, "close": 3, "writev": 20, "connect": 42, "sendto": 44, "sendmsg": 46,
      "accept": 43, "accept4": 288}
WAITING = {7, 202, 232, 281}  # poll, futex, epoll_wait, epoll_pwait
NAMES = {0: "read", 1: "write", 3: "close", 13: "rt_sigaction", 14: "rt_sigprocmask", 15: "rt_sigreturn",
         16: "ioctl", 17: "pread64", 18: "pwrite64", 20: "writev", 39: "getpid", 48: "shutdown", 54: "setsockopt",
         56: "clone", 61: "wait4", 72: "fcntl", 102: "getuid", 157: "prctl", 233: "epoll_ctl", 257: "openat",
         262: "newfstatat", 288: "accept4", 293: "pipe2", 318: "getrandom", 435: "clone3", 434: "pidfd_open"}


class Event:
    __slots__ = ("t", "comm", "pid", "tid", "cpu", "name", "rest")

    def __init__(self, m):
        self.comm, pid, tid, cpu, t, self.name, self.rest = m.groups()
        self.pid, self.tid, self.cpu, self.t = int(pid), int(tid), int(cpu), float(t) * 1e6


def syscall_nr(e):
    return int(e.rest.split()[1])


def first_arg(e):
    return int(e.rest.split("(")[1].split(",")[0], 16)


def ret(e):
    return int(e.rest.rsplit("=", 1)[1])


def record(server_port, token, client, n, pause_ms, workdir):
    data = os.path.join(workdir, "perf.data")
    cmd = ["perf", "record", "-q", "-a", "-o", data]
    for ev in EVENTS:
        cmd += ["-e", ev]
    cmd += ["--exclude-perf", "--", client, "--think", str(n), str(pause_ms), str(server_port), token]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    text = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,tid,cpu,time,event,trace"], check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    return out.strip().splitlines()[-1], [Event(m) for m in map(LINE.match, text.splitlines()) if m]


def analyse(events, server_pid):
    server_tids = {e.tid for e in events if e.pid == server_pid}
    server_comms = {e.comm for e in events if e.pid == server_pid} | {"execd-spare"}
    client_tids = {e.tid for e in events if e.comm == "stream_client"}
    # The commands: a bash exec'd by a process last seen under a server name.
    last_comm, cmds = {}, []
    for i, e in enumerate(events):
        if e.name == "sched:sched_process_exec" and last_comm.get(e.pid) in server_comms and "bash" in e.rest:
            cmds.append({"pid": e.pid, "exec": e.t, "i": i})
        elif e.name == "sched:sched_process_exit":
            pid = int(re.search(r"pid=(\d+)", e.rest).group(1))
            for c in cmds:
                if c["pid"] == pid and "exit" not in c:
                    c["exit"] = e.t
        last_comm[e.pid] = e.comm
    # On-CPU intervals per tid.
    running, oncpu = {}, collections.defaultdict(list)
    for e in events:
        if e.name != "sched:sched_switch":
            continue
        m = SWITCH.search(e.rest)
        if not m:
            continue
        prev, nxt = int(m.group(2)), int(m.group(4))
        if e.cpu in running and running[e.cpu][0] == prev:
            oncpu[prev].append((running[e.cpu][1], e.t))
        running[e.cpu] = (nxt, e.t)

    def on_cpu(tids, a, b):
        return sum(max(0.0, min(y, b) - max(x, a)) for t in tids for (x, y) in oncpu.get(t, []))

    times = [e.t for e in events]
    rows, syscalls = [], collections.defaultdict(lambda: [0, 0.0])
    for c in cmds:
        if "exit" not in c:
            continue
        connect = next((e.t for e in reversed(events[max(0, c["i"] - 200000):c["i"]]) if e.tid in client_tids
                        and e.name == "raw_syscalls:sys_enter" and syscall_nr(e) == NR["connect"]), None)
        if connect is None:
            continue
        start = bisect.bisect_right(times, c["exit"])
        close = next((e.t for e in events[start:start + 200000] if e.tid in client_tids
                      and e.name == "raw_syscalls:sys_enter" and syscall_nr(e) == NR["close"]), None)
        if close is None:
            continue
        window = events[bisect.bisect_left(times, connect):bisect.bisect_right(times, close)]
        p = {"connect": connect, "exec": c["exec"], "exit": c["exit"], "close": close}
        conn_fd, open_calls = None, {}
        for e in window:
            if e.pid == server_pid and e.name.startswith("raw_syscalls"):
                nr = syscall_nr(e)
                if e.name.endswith("sys_enter"):
                    open_calls[e.tid] = (nr, e.t, first_arg(e) if "(" in e.rest else -1)
                    continue
                nr0, t0, fd = open_calls.pop(e.tid, (None, None, None))
                if nr0 != nr:
                    continue
                if nr not in WAITING:
                    syscalls[nr][0] += 1
                    syscalls[nr][1] += e.t - t0
                if "accept" not in p and nr in (NR["accept"], NR["accept4"]) and ret(e) >= 0:
                    p["accept"], conn_fd = e.t, ret(e)
                elif fd == conn_fd and "accept" in p:
                    if nr == NR["read"] and ret(e) > 0 and "request" not in p:
                        p["request"] = e.t
                    if nr in (NR["write"], NR["writev"], NR["sendto"], NR["sendmsg"]) and ret(e) > 0 and e.t >= c["exit"]:
                        p["result"] = e.t
            elif (e.name == "sched:sched_switch" and "request" in p and "handoff" not in p
                  and f"next_pid={c['pid']} " in e.rest):
                p["handoff"] = e.t
        p["handoff"] = p.get("handoff", c["exec"])
        if not all(k in p for k in ("accept", "request", "result")):
            continue
        p["on_server"] = on_cpu(server_tids, connect, close)
        p["on_child"] = on_cpu({c["pid"]}, connect, c["exec"])
        p["on_command"] = on_cpu({c["pid"]}, c["exec"], close)
        p["on_client"] = on_cpu(client_tids, connect, close)
        rows.append(p)
    return rows, syscalls


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    who = ap.add_mutually_exclusive_group(required=True)
    who.add_argument("--execd", help="an execd binary (started with cgroups on, its default spares)")
    who.add_argument("--http-floor", help="build/http_floor")
    ap.add_argument("--client", required=True, help="build/stream_client")
    ap.add_argument("--bash", default="/bin/bash", help="for --http-floor")
    ap.add_argument("-n", type=int, default=40, help="commands (40)")
    ap.add_argument("--pause-ms", type=int, default=100, help="pause before each (100)")
    ap.add_argument("execd_args", nargs="*", help="more execd flags, after --")
    a = ap.parse_args()
    if a.execd:
        server = Daemon(a.execd, *a.execd_args)
        token, pid = server.token, server.proc.pid
        # Spares are made from the first command on (as the bench does).
        subprocess.run([a.client, "--rtt", "20", str(server.port), token], check=True, stdout=subprocess.DEVNULL)
    else:
        server = HttpFloor(a.http_floor, a.bash)
        token, pid = "-", server.proc.pid
    try:
        with tempfile.TemporaryDirectory(prefix="think-trace-") as workdir:
            summary, events = record(server.port, token, a.client, a.n, a.pause_ms, workdir)
    finally:
        server.stop()
    rows, syscalls = analyse(events, pid)
    if not rows:
        raise SystemExit("no command could be followed through the trace")

    def med(f):
        return statistics.median(f(r) for r in rows)

    print(f"client under trace: {summary}; {len(rows)} commands followed; medians in microseconds")
    phases = [("connect -> accept", "connect", "accept"), ("accept -> request read", "accept", "request"),
              ("request -> command's process runs", "request", "handoff"), ("-> execve", "handoff", "exec"),
              ("execve -> exit (the command)", "exec", "exit"), ("exit -> result written", "exit", "result"),
              ("result -> client closes", "result", "close"), ("total (connect -> close)", "connect", "close")]
    for label, a_, b_ in phases:
        print(f"  {label:36} {med(lambda r: r[b_] - r[a_]):8.0f}")
    print("on-CPU within each command:")
    for label, k in (("server, all threads", "on_server"), ("command's process before execve", "on_child"),
                     ("the command", "on_command"), ("client", "on_client")):
        print(f"  {label:36} {med(lambda r: r[k]):8.0f}")
    print(f"  {'sum of the four':36} {med(lambda r: r['on_server'] + r['on_child'] + r['on_command'] + r['on_client']):8.0f}")
    print(f"  {'wall':36} {med(lambda r: r['close'] - r['connect']):8.0f}")
    print("server system calls per command (count, microseconds inside), waits left out:")
    for nr, (count, us) in sorted(syscalls.items(), key=lambda kv: -kv[1][1])[:14]:
        print(f"  {NAMES.get(nr, 'nr ' + str(nr)):14} {count / len(rows):6.1f} {us / len(rows):8.1f}")
    print(f"  {'all':14} {sum(c for c, _ in syscalls.values()) / len(rows):6.1f} "
          f"{sum(u for _, u in syscalls.values()) / len(rows):8.1f}")


if __name__ == "__main__":
    main()
