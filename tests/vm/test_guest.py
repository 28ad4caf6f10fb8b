"""The guest as a machine whose init is execd: boot, cgroup v2, the token,
reaping as PID 1, signal forwarding and a clean poweroff on SIGTERM."""
from __future__ import annotations

import time

from conftest import record
from guest_helpers import Stream, guest_ps, read_stdout_until, wait_for


def test_boots_to_ping_with_execd_as_pid_1_on_cgroup_v2(vm):
    assert vm.boot_seconds is not None and vm.boot_seconds < 60, vm.boot_seconds
    st, h, _ = vm.request("GET", "/ping")
    assert st == 200 and h["x-execd-containment"] == "cgroup-v2", h
    events, out = vm.run("tr '\\0' ' ' < /proc/1/cmdline; echo; grep ' /sys/fs/cgroup ' /proc/mounts | cut -d' ' -f3; cat /proc/self/cgroup")
    lines = out.decode().splitlines()
    assert lines[0].startswith("/execd --init "), lines
    assert lines[1] == "cgroup2", lines  # the unified hierarchy only
    assert lines[2].startswith("0::/execd-1/cmd-"), lines  # a command's own cgroup under PID 1's


def test_the_token_is_enforced(vm):
    c = vm.conn()
    c.request("POST", "/command", body=b'{"command":"true"}', headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 401, r.status
    r.read()
    c.request("POST", "/command", body=b'{"command":"true"}',
              headers={"Content-Type": "application/json", "X-EXECD-ACCESS-TOKEN": "wrong"})
    r = c.getresponse()
    assert r.status == 401
    c.close()
    # The token reached execd through fw_cfg, not the kernel command line.
    events, out = vm.run("cat /proc/cmdline")
    assert vm.token.encode() not in out


def test_pid_1_reaps_orphans(vm):
    # Each subshell exits at once and leaves its sleep to PID 1 (execd), which
    # must reap it when it exits: no zombie may be left in the whole guest.
    n = "0.%d" % (time.time_ns() % 10**6)
    events, out = vm.run(f"for i in $(seq 1 20); do (sleep {n} &); done; echo spawned")
    assert out == b"spawned\n"
    wait_for(lambda: not [p for p in guest_ps(vm) if f"sleep {n}" in p[3]], 30, "the orphans to exit")
    # Once they are gone, none is left as a zombie.
    wait_for(lambda: not [p for p in guest_ps(vm) if p[1] == "Z"], 10, "no zombie in the guest")


def test_orphans_are_children_of_pid_1(vm):
    n = "1%d" % (time.time_ns() % 10**6)
    events, out = vm.run(f"(sleep {n} &); echo spawned")
    procs = wait_for(lambda: [p for p in guest_ps(vm) if p[3].strip() == f"sleep {n}"], 10, "the orphan")
    assert [p[2] for p in procs] == [1], procs  # reparented to execd, PID 1
    events, _ = vm.run(f"kill {procs[0][0]}")
    assert events[-1]["exit_code"] == 0, events[-1]
    wait_for(lambda: not [p for p in guest_ps(vm) if f"sleep {n}" in p[3]], 10, "the orphan to be killed")


def test_sigterm_to_pid_1_is_forwarded_then_the_guest_powers_off(vm_factory):
    vm = vm_factory("poweroff")
    # A command that traps TERM: execd forwards its own SIGTERM to it.
    s = Stream(vm, "POST", "/command", {"command": "trap 'echo got-TERM; exit 7' TERM; echo armed; "
                                                   "while :; do sleep 0.05; done", "id": "trapper"})
    out = bytearray()
    read_stdout_until(s, out, lambda b: b"armed\n" in b, 30)
    t0 = time.monotonic()
    st, _, _ = vm.request("POST", "/command", {"command": "kill -TERM 1", "background": True})
    assert st == 200
    term = read_stdout_until(s, out, lambda b: False, 30)
    assert out == b"armed\ngot-TERM\n", out
    assert term["exit_code"] == 7, term
    # execd drains, stops, and as the machine's init powers it off: QEMU
    # exits by itself, with status 0.
    assert vm.wait_exit(60) == 0
    record("sigterm_to_poweroff", round(time.monotonic() - t0, 2))
    console = vm.console_text()
    for line in ("Terminated received: forwarding to running commands", "execd stopped",
                 "execd was the machine's init: powering off", "reboot: Power down"):
        assert line in console, console[-3000:]
    assert "Kernel panic" not in console
