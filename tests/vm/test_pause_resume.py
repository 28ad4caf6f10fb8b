"""Pause and resume of the whole VM with work in flight (issue 28).

Each way of pausing — QMP stop/cont, savevm/loadvm, migration to a file and
a restore into a new QEMU — happens while the guest has:
  * a background command that must still finish, with all its output;
  * a foreground command whose exact-framing stream the client reads; where
    its connection does not survive (loadvm, a new QEMU), the client resumes
    by offset with GET /command/{id}/stream?stdout=N and must end up with
    every byte exactly once and the original terminal event;
  * a PTY session that must still answer, reattached with since=N and
    takeover where the WebSocket did not survive.
"""
from __future__ import annotations

import hashlib
import json
import os
import time

import pytest

from conftest import record
from guest_helpers import Pty, Stream, read_stdout_until, wait_for

LINES = 80
STREAM_CMD = f'i=0; while [ $i -lt {LINES} ]; do echo "line $i"; i=$((i+1)); sleep 0.05; done'
EXPECTED = b"".join(b"line %d\n" % i for i in range(LINES))
BG_CMD = 'i=0; while [ $i -lt 40 ]; do echo "bg $i"; i=$((i+1)); sleep 0.05; done; echo bg-done'
BG_EXPECTED = "".join(f"bg {i}\n" for i in range(40)) + "bg-done\n"


class Workload:
    def __init__(self, vm, tag):
        self.tag = tag
        st, _, body = vm.request("POST", "/command", {"command": BG_CMD, "background": True, "id": f"bg-{tag}"})
        assert st == 200, body
        self.stream = Stream(vm, "POST", "/command", {"command": STREAM_CMD, "id": f"st-{tag}"})
        self.stdout = bytearray()
        read_stdout_until(self.stream, self.stdout, lambda b: b.count(b"\n") >= 5, 60)
        st, _, body = vm.request("POST", "/pty", {})
        assert st == 201, body
        self.sid = json.loads(body)["session_id"]
        self.pty = Pty(vm, self.sid)
        self.pty.pump_until(lambda: any(t["type"] == "connected" for t in self.pty.texts), 30, "connected")
        self.pty.send(b"echo pty-$((20+1))-before\n")
        self.pty.pump_until(lambda: b"pty-21-before" in self.pty.out, 30, "the PTY's echo")

    def more_output(self, n=3):
        have = self.stdout.count(b"\n")
        read_stdout_until(self.stream, self.stdout, lambda b: b.count(b"\n") >= have + n, 60)

    def finish_stream(self, vm, reconnect: bool):
        """Reads the stream to its end, resuming by offset on a new connection
        if `reconnect` (or if the old one breaks)."""
        term = None
        if not reconnect:
            try:
                term = read_stdout_until(self.stream, self.stdout, lambda b: False, 120)
            except (ConnectionError, OSError):
                term = None
        resumes = 0
        while term is None:
            self.stream.close()
            resumes += 1
            assert resumes <= 3, "resumed three times without reaching the end"
            self.stream = Stream(vm, "GET", f"/command/st-{self.tag}/stream?stdout={len(self.stdout)}")
            ev = self.stream.next_event()
            assert ev["type"] == "init" and ev["text"] == f"st-{self.tag}", ev
            try:
                term = read_stdout_until(self.stream, self.stdout, lambda b: False, 120)
            except (ConnectionError, OSError):
                term = None
        self.stream.close()
        assert bytes(self.stdout) == EXPECTED
        assert term["exit_code"] == 0, term
        assert term["stdout_bytes"] == len(EXPECTED)
        assert term["stdout_sha256"] == hashlib.sha256(EXPECTED).hexdigest()
        return resumes

    def check_background(self, vm):
        def done():
            st, _, body = vm.request("GET", f"/command/status/bg-{self.tag}")
            js = json.loads(body)
            return js if not js["running"] else None
        js = wait_for(done, 120, "the background command to finish")
        assert js["exit_code"] == 0, js
        st, _, logs = vm.request("GET", f"/command/bg-{self.tag}/logs")
        assert logs.decode() == BG_EXPECTED

    def check_pty(self, vm, reattach: bool):
        if reattach:
            self.pty.close()
            self.pty = Pty(vm, self.sid, since=0, takeover=1)
            # The replay holds what the shell wrote before the pause.
            self.pty.pump_until(lambda: b"pty-21-before" in self.pty.replay, 30, "the replay")
        self.pty.send(b"echo pty-$((40+2))-after\n")
        self.pty.pump_until(lambda: b"pty-42-after" in self.pty.out, 60, "the PTY to answer after the resume")
        self.pty.close()


def boot_id(vm) -> str:
    return vm.run("cat /proc/sys/kernel/random/boot_id")[1].decode().strip()


def test_stop_and_cont(vm_factory):
    vm = vm_factory("stopcont")
    w = Workload(vm, "sc")
    vm.stop()
    assert vm.status() == "paused"
    # Paused for real: the guest answers nothing while stopped.
    c = vm.conn(timeout=1.5)
    c.request("GET", "/ping")
    with pytest.raises(TimeoutError):
        c.getresponse()
    c.close()
    t0 = time.monotonic()
    vm.cont()
    assert vm.status() == "running"
    vm.wait_ping(30)
    record("cont_to_ping", round(time.monotonic() - t0, 2))
    # The connections survived: same stream, same WebSocket.
    assert w.finish_stream(vm, reconnect=False) == 0
    w.check_background(vm)
    w.check_pty(vm, reattach=False)


def test_savevm_and_loadvm(vm_factory):
    vm = vm_factory("snapshot")
    w = Workload(vm, "sl")
    t0 = time.monotonic()
    vm.savevm("inflight")
    record("savevm", round(time.monotonic() - t0, 2))
    # After the snapshot the guest goes on: more output, and a file.
    w.more_output()
    events, _ = vm.run("touch /tmp/after-snapshot")
    assert events[-1]["exit_code"] == 0
    t0 = time.monotonic()
    vm.loadvm("inflight")
    record("loadvm", round(time.monotonic() - t0, 2))
    vm.wait_ping(30)
    # Back in time: the file made after the snapshot is gone.
    events, out = vm.run("test -e /tmp/after-snapshot && echo exists || echo gone")
    assert out == b"gone\n"
    # The client has bytes the restored guest has not written yet; the resumed
    # stream waits for them, then continues. Nothing twice, nothing missing.
    assert w.finish_stream(vm, reconnect=True) >= 1
    w.check_background(vm)
    w.check_pty(vm, reattach=True)


def test_migrate_to_a_file_and_restore_into_a_new_qemu(vm_factory, tmp_path):
    vm = vm_factory("source")
    w = Workload(vm, "mg")
    before = boot_id(vm)
    state = tmp_path / "vm.state"
    t0 = time.monotonic()
    vm.migrate_to_file(state)
    record("migrate_to_file", round(time.monotonic() - t0, 2))
    record("migration_file_mib", round(os.path.getsize(state) / 2**20, 1), "MiB")
    assert vm.status() == "postmigrate"
    vm.kill()
    t0 = time.monotonic()
    new = vm_factory("restored", token=vm.token, drive=vm.drive, incoming=f"exec:cat {state}")
    new.wait_status("running", 120)
    new.wait_ping(60)
    record("restore_to_ping", round(time.monotonic() - t0, 2))
    # The same kernel, not a reboot.
    assert boot_id(new) == before
    w.stream.close()  # its QEMU is gone
    assert w.finish_stream(new, reconnect=True) >= 1
    w.check_background(new)
    w.check_pty(new, reattach=True)
