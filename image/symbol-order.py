#!/usr/bin/env python3
"""image/symbol-order.py EXECD OUT: writes the static execd's link order.

The kernel maps a binary's text 64 KiB at a time around each page a process
touches (fault-around), and counts every mapped page in its RSS. Left in the
linker's default order, the functions an idle execd has run (start-up, one
/ping, the housekeeping tick) were spread over nearly every 64 KiB of the
static binary's 3 MiB of text. Listed first, in the order this writes, they
take about 700 KiB; the functions that run commands come next and the rest
of the API last, so a working execd stays dense too. lld reads the list
(`--symbol-ordering-file`; see CMakeLists.txt); names the binary no longer
has are skipped, so an old list only gets less effective.

EXECD is a static execd built with symbols (`make symbol-order` builds one).
It runs twice under valgrind's callgrind, which records every function run,
as execd's second start (execd/malloc_tuning) runs:
  1. as the bench's idle daemon (cgroups on): start-up, /ping, 2.5 s idle;
  2. with --cgroup-spares 0 (callgrind cannot follow the clone that starts a
     spare's launcher): commands, including a burst whose records go cold,
     then a session, file operations, /metrics and the journal. Children are
     dumped as they call execve, for the code they run before it.
Added to what callgrind saw: every other name of a function that ran (C1/C2
constructors, glibc's aliases), every CPU-dispatched variant of one,
glibc's vDSO lookups and crtbegin's frame_dummy at start, and the cgroup,
launcher and spare-arming code by name (with the lambdas made in it).
Lines are mangled names; `#` starts a comment.
"""
from __future__ import annotations

import glob
import http.client
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

LISTEN_RE = re.compile(rb"listening on ([0-9.]+):(\d+)")
TOKEN = secrets.token_hex(16)


class Traced:
    """execd under callgrind, on a port it picks and a state dir of its own."""

    def __init__(self, binary: str, out_dir: str, tag: str, *extra: str):
        self.state_dir = tempfile.mkdtemp(prefix="execd-order-")
        self.out_dir, self.tag = out_dir, tag
        self.read: set[str] = set()  # dump files taken in already
        env = dict(os.environ)
        # As execd's second start sees it (execd/malloc_tuning), which is
        # the process that serves; the first only starts it.
        env["GLIBC_TUNABLES"] = "glibc.malloc.tcache_count=0"
        env["EXECD_MALLOC_TUNED"] = os.path.basename(binary)[:15] + "/-"
        self.proc = subprocess.Popen(
            # A command's child runs execd's code from the fork to the exec
            # (pty/spawn's child procedure): dumped as it calls execve.
            ["valgrind", "--tool=callgrind", "--demangle=no", "--dump-before=execve",
             f"--callgrind-out-file={out_dir}/{tag}.%p.cg", f"--log-file={out_dir}/{tag}.log",
             binary, "--host", "127.0.0.1", "--port", "0", "--access-token", TOKEN,
             "--state-dir", self.state_dir, *extra],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.port = None
        deadline = time.monotonic() + 120
        while self.port is None:
            line = self.proc.stderr.readline()
            if not line:
                sys.exit(f"symbol-order: execd under valgrind exited early (see {out_dir}/{tag}.log)")
            m = LISTEN_RE.search(line)
            if m:
                self.port = int(m.group(2))
            if time.monotonic() > deadline:
                sys.exit("symbol-order: execd did not report its port")

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        h = {"X-EXECD-ACCESS-TOKEN": TOKEN}
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        if r.status >= 400:
            sys.exit(f"symbol-order: {method} {path}: {r.status} {data[:200]!r}")
        return data

    def dump(self) -> list[str]:
        """Functions run so far, by execd and by its commands' children up to
        their exec (callgrind_control has execd write its counts out)."""
        mine = os.path.join(self.out_dir, f"{self.tag}.{self.proc.pid}.cg")
        subprocess.run(["callgrind_control", "-d", str(self.proc.pid)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not any(os.path.getsize(f) > 0 for f in glob.glob(mine + ".*") if f not in self.read):
            if time.monotonic() > deadline:
                sys.exit("symbol-order: callgrind wrote no dump")
            time.sleep(0.1)
        time.sleep(1)  # written in one go; let it finish
        names: dict[str, None] = {}
        for f in sorted(glob.glob(os.path.join(self.out_dir, f"{self.tag}.*.cg*"))):
            if f not in self.read:
                self.read.add(f)
                names.update(dict.fromkeys(functions(f)))
        return list(names)

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.state_dir, ignore_errors=True)


def functions(path: str) -> list[str]:
    """Function names in a callgrind dump, in the order they first appear."""
    seen: dict[str, None] = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"c?fn=\(\d+\)(?: (.*))?$", line.rstrip("\n"))
            if not m or not m.group(1):
                continue
            name = re.sub(r"'\d+$", "", m.group(1))  # callgrind's recursion depth
            if name.startswith("0x") or name.startswith("("):
                continue
            seen.setdefault(name, None)
    return list(seen)


def command(d: Traced, spec: dict) -> bytes:
    return d.request("POST", "/command", json.dumps(spec).encode(), {"Content-Type": "application/json"})


def serve_commands(d: Traced):
    """Commands as the bench and an agent run them."""
    d.request("GET", "/ping")
    command(d, {"command": "echo out; echo err >&2; printf 'a\\rb\\n\\n'"})
    command(d, {"command": "head -c 100000 /dev/zero | base64"})
    # Exact framing, as the bench's clients ask for it.
    d.request("POST", "/command", json.dumps({"command": "head -c 3000000 /dev/urandom | base64; echo done"}).encode(),
              {"Accept": "application/x-ndjson", "Connection": "close"})
    started = command(d, {"command": "sleep 0.2; echo later", "background": True})
    ex_id = json.loads(started.split(b"\n", 1)[0])["text"]
    time.sleep(1)
    d.request("GET", f"/command/status/{ex_id}")
    d.request("GET", f"/command/{ex_id}/logs")
    d.request("GET", "/command")
    # A burst, as the bench's: concurrent commands, then a quiet spell in
    # which their records go cold, then one read back.
    ids: list[str] = []

    def one():
        out = command(d, {"command": "sleep 0.5; echo done"})
        ids.append(json.loads(out.split(b"\n", 1)[0])["text"])
    threads = [threading.Thread(target=one) for _ in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(2.5)
    d.request("GET", f"/command/status/{ids[0]}")
    d.request("GET", f"/command/{ids[0]}/logs")


def serve_the_rest(d: Traced, scratch: str):
    """A session, file operations, /metrics and the journal."""
    sid = json.loads(d.request("POST", "/session", b""))["session_id"]
    d.request("POST", f"/session/{sid}/run", json.dumps({"command": "cd /; pwd"}).encode(),
              {"Content-Type": "application/json"})
    d.request("DELETE", f"/session/{sid}")
    target = os.path.join(scratch, "f.txt")
    body = (b"--XyZ\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n"
            b"Content-Type: application/json\r\n\r\n" + json.dumps({"path": target, "mode": 644}).encode() +
            b"\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n"
            b"Content-Type: application/octet-stream\r\n\r\nhello\n\r\n--XyZ--\r\n")
    d.request("POST", "/files/upload", body, {"Content-Type": "multipart/form-data; boundary=XyZ"})
    q = urllib.parse.quote
    d.request("GET", f"/files/info?path={q(target)}")
    d.request("GET", f"/files/download?path={q(target)}")
    d.request("GET", f"/files/search?path={q(scratch)}&pattern=*.txt")
    d.request("GET", f"/directories/list?path={q(scratch)}")
    d.request("GET", "/metrics")
    d.request("GET", "/journal")


def text_symbols(binary: str) -> dict[str, str]:
    """Name -> address of every function symbol."""
    out = subprocess.run(["nm", "--defined-only", binary], check=True, capture_output=True, text=True).stdout
    return {p[2]: p[0] for p in (line.split() for line in out.splitlines()) if len(p) == 3 and p[1] in "tTwW"}


# A function can have several names at one address (a constructor's C1 and
# C2, glibc's weak aliases), and callgrind reports one of them, not always
# the same one from run to run. Every name goes in, so that the list does
# not change with the name callgrind happened to pick (lld finds a section
# by any of its names).
def with_aliases(names: list[str], symbols: dict[str, str]) -> list[str]:
    at: dict[str, list[str]] = {}
    for sym, addr in symbols.items():
        at.setdefault(addr, []).append(sym)
    out: dict[str, None] = {}
    for name in names:
        out.setdefault(name, None)
        for alias in sorted(at.get(symbols.get(name, ""), [])):
            out.setdefault(alias, None)
    return list(out)


# Code picked by the CPU at run time has a variant per instruction set, and
# valgrind's CPU is not this one: glibc's string functions (IFUNC:
# __memchr_avx2 under valgrind may be __memchr_evex here), OpenSSL's digest
# cores and simdjson's implementations (westmere under valgrind, icelake
# here). Every variant of a function that ran goes in.
ISA = r"(?:sse2|ssse3|sse4_1|sse4_2|sse42|avx|avx2|avx512\w*|evex\w*|erms|unaligned\w*|rtm|movbe|bmi2|shaext|generic)"
SUFFIX_RE = re.compile(r"^(\w+?)_" + ISA + r"(?:_" + ISA + r")*$")
SIMDJSON_IMPL_RE = re.compile(r"8simdjson(?:7icelake|7haswell|8westmere|8fallback|5arm64|5ppc64|3lsx|4lasx)")


def variant_key(name: str) -> str | None:
    if SIMDJSON_IMPL_RE.search(name):
        return SIMDJSON_IMPL_RE.sub("8simdjson*", name)
    m = SUFFIX_RE.match(name)
    return m.group(1) + "_*" if m else None


def with_variants(names: list[str], symbols: dict[str, str]) -> list[str]:
    siblings: dict[str, list[str]] = {}
    for sym in symbols:
        k = variant_key(sym)
        if k:
            siblings.setdefault(k, []).append(sym)
    out: dict[str, None] = {}
    for name in names:
        out.setdefault(name, None)
        for sym in siblings.get(variant_key(name) or "", []):
            out.setdefault(sym, None)
    return list(out)


# Run here but not under valgrind: glibc's start-up looks up the vDSO's
# functions (valgrind gives its guest no vDSO), a command's child calls
# execve after its dump, and the C runtime's start-up code (crtbegin's
# frame_dummy, run from .init_array before main) is not reported (seen with
# `perf record -e page-faults` of a native start: the first touch of a
# 64 KiB window of text otherwise untouched at idle).
NATIVE_ONLY = ["_dl_new_object", "_dl_add_to_namespace_list", "_dl_setup_hash", "_dl_lookup_symbol_x",
               "do_lookup_x", "check_match", "execve", "__execve", "frame_dummy", "register_tm_clones"]


# What only the spares' path calls outside execd's own code: the look at
# the loop's readiness before arming one.
SPARES_LIBC = {"poll", "__poll", "__libc_poll"}


def cgroup_and_launcher(symbols: dict[str, str]) -> list[str]:
    """execd's cgroup and launcher functions, by name (run 2 cannot reach
    them), with the lambdas and templates made for them (their names mention
    the class after a substitution: `NS1_8Launcher`), and the libc functions
    only they call."""
    pattern = re.compile(r"5execd3pty(?:.*?(?:8Launcher|11Containment|13CommandCgroup|6Cgroup)|12_GLOBAL__N_1\d+"
                         r"(?:launcher_main|clone_into_cgroup|write_proc_text|read_counter|restore_daemon)"
                         r"|17loop_has_ready_io)")
    return sorted(s for s in symbols if pattern.search(s) or s in SPARES_LIBC)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    binary, out = os.path.abspath(sys.argv[1]), sys.argv[2]
    if not shutil.which("valgrind"):
        sys.exit("symbol-order: needs valgrind (apt-get install valgrind)")
    work = tempfile.mkdtemp(prefix="execd-order-")
    try:
        d = Traced(binary, work, "idle")
        try:
            d.request("GET", "/ping")
            time.sleep(2.5)  # the housekeeping tick, twice
            idle = d.dump()
        finally:
            d.stop()
        d = Traced(binary, work, "serving", "--cgroup-spares", "0")
        try:
            serve_commands(d)
            commands = d.dump()
            scratch = os.path.join(work, "files")
            os.mkdir(scratch)
            serve_the_rest(d, scratch)
            rest = d.dump()
        finally:
            d.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    symbols = text_symbols(binary)
    groups = [("an idle execd runs", with_variants(idle, symbols) + [n for n in NATIVE_ONLY if n in symbols]),
              ("commands run", with_variants(commands, symbols) + cgroup_and_launcher(symbols)),
              ("the rest of the API runs", with_variants(rest, symbols))]
    groups = [(what, with_aliases(names, symbols)) for what, names in groups]
    order: dict[str, None] = {}
    counts = []
    for _, names in groups:
        before = len(order)
        # Sorted within a group: where a function lies inside its group does
        # not change how many pages the group spans, and the file then
        # changes only when the set does (callgrind's dump order varies).
        order.update(dict.fromkeys(sorted(n for n in names if n not in order)))
        counts.append(len(order) - before)
    with open(out, "w") as f:
        f.write("# The static execd's link order, written by image/symbol-order.py (`make symbol-order`):\n")
        f.write("# " + "; then ".join(f"{n} functions {what}" for (what, _), n in zip(groups, counts)) + ".\n")
        for name in order:
            f.write(name + "\n")
    print(f"symbol-order: {len(order)} functions in {out}")


if __name__ == "__main__":
    main()
