"""A QEMU micro-VM whose PID 1 is execd, driven over QMP (tests/vm).

The guest (tests/vm/build-guest.sh) is reached only through QEMU's user-mode
network with `restrict=on` (the guest can reach nothing outside) and one
host forward, 127.0.0.1:PORT -> guest 44772. Software emulation (TCG) unless
the CPU has vmx/svm (a /dev/kvm without them is an emulating module on which
a stock kernel dies). `-M q35`, one vCPU, 512 MiB; `-M microvm` hangs under
TCG. A qcow2 drive (attached to no device) is where `savevm` keeps
snapshots. Optionally a vhost-user vsock device, whose host side is
vhost-device-vsock (tests/vm/vsock.py).
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

GUEST_PORT = 44772
TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"


def accel() -> str:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    if (" vmx" in flags or " svm" in flags) and os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "kvm"
    return "tcg"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Qmp:
    """A QMP client on a unix socket: commands wait for their return; events
    that arrive meanwhile are kept in `events`."""

    def __init__(self, path: str, timeout: float = 30):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX)
                self.sock.connect(path)
                break
            except OSError:
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.sock.settimeout(timeout)
        self.file = self.sock.makefile("rwb")
        self.events: list[dict] = []
        greeting = self._read()
        assert "QMP" in greeting, greeting
        self.execute("qmp_capabilities")

    def _read(self) -> dict:
        line = self.file.readline()
        if not line:
            raise ConnectionError("QMP socket closed")
        return json.loads(line)

    def execute(self, cmd: str, **arguments):
        msg = {"execute": cmd}
        if arguments:
            msg["arguments"] = arguments
        self.file.write(json.dumps(msg).encode() + b"\n")
        self.file.flush()
        while True:
            r = self._read()
            if "event" in r:
                self.events.append(r)
                continue
            if "error" in r:
                raise RuntimeError(f"QMP {cmd}: {r['error']}")
            return r.get("return")

    def hmp(self, line: str) -> str:
        """A human-monitor command (savevm and loadvm have no QMP form in 7.2)."""
        return self.execute("human-monitor-command", **{"command-line": line})

    def close(self):
        try:
            self.file.close()
            self.sock.close()
        except OSError:
            pass


class Vm:
    def __init__(self, guest_dir: Path, workdir: Path, token: str, name: str = "vm",
                 execd_args: str = "", incoming: str | None = None, vsock_socket: str | None = None,
                 memory_mib: int = 512, drive: Path | None = None):
        self.guest_dir = Path(guest_dir)
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.token = token
        self.name = name
        self.execd_args = execd_args
        self.incoming = incoming
        self.vsock_socket = vsock_socket
        self.memory_mib = memory_mib
        self.drive = drive or self.workdir / "vmstate.qcow2"
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.qmp: Qmp | None = None
        self.started_at = 0.0
        self.boot_seconds = None
        self.console = self.workdir / f"{name}-console.log"
        self.qmp_path = str(self.workdir / f"{name}-qmp.sock")

    # ---- lifecycle --------------------------------------------------------
    def argv(self) -> list[str]:
        token_file = self.workdir / "token"
        token_file.write_text(self.token)
        args_file = self.workdir / f"{self.name}-args"
        args_file.write_text(self.execd_args)
        a = ["qemu-system-x86_64", "-M", "q35", "-accel", accel(), "-cpu", "max", "-smp", "1",
             "-m", str(self.memory_mib), "-display", "none", "-monitor", "none", "-no-reboot",
             "-serial", f"file:{self.console}",
             "-kernel", str(self.guest_dir / "vmlinuz"), "-initrd", str(self.guest_dir / "initramfs.gz"),
             "-append", "console=ttyS0 panic=-1 quiet",
             "-nic", f"user,model=virtio-net-pci,restrict=on,hostfwd=tcp:127.0.0.1:{self.port}-:{GUEST_PORT}",
             "-device", "virtio-rng-pci",
             "-fw_cfg", f"name=opt/execd/token,file={token_file}",
             "-fw_cfg", f"name=opt/execd/args,file={args_file}",
             "-drive", f"if=none,id=vmstate,format=qcow2,file={self.drive}",
             "-qmp", f"unix:{self.qmp_path},server=on,wait=off"]
        if self.vsock_socket:
            # vhost-user needs guest memory the backend can map: a shared memfd.
            a += ["-object", f"memory-backend-memfd,id=mem,size={self.memory_mib}M,share=on",
                  "-machine", "memory-backend=mem",
                  "-chardev", f"socket,id=vsockchr,path={self.vsock_socket}",
                  "-device", "vhost-user-vsock-pci,chardev=vsockchr"]
        if self.incoming:
            a += ["-incoming", self.incoming]
        return a

    def start(self):
        if not self.drive.exists():
            subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(self.drive), "256M"], check=True)
        for attempt in range(5):
            self.port = free_port()
            if os.path.exists(self.qmp_path):
                os.unlink(self.qmp_path)
            self.started_at = time.monotonic()
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                         stdout=open(self.workdir / f"{self.name}-qemu.out", "ab"),
                                         stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 30
            while self.proc.poll() is None and not os.path.exists(self.qmp_path):
                if time.monotonic() > deadline:
                    raise AssertionError("QEMU made no QMP socket within 30 s")
                time.sleep(0.02)
            if self.proc.poll() is None:
                self.qmp = Qmp(self.qmp_path)
                return self
            # Lost the race for the port (QEMU exits at once): another one.
        raise AssertionError(f"QEMU did not start: {(self.workdir / f'{self.name}-qemu.out').read_text()[-2000:]}")

    def wait_ping(self, timeout: float = 120) -> float:
        """Waits for GET /ping through the forward; returns seconds since start."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"QEMU exited {self.proc.returncode}; console:\n{self.console_text()[-3000:]}")
            try:
                if self.ping() == 200:
                    if self.boot_seconds is None:
                        self.boot_seconds = time.monotonic() - self.started_at
                    return time.monotonic() - self.started_at
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"no /ping within {timeout}s; console:\n{self.console_text()[-3000:]}")
            time.sleep(0.1)

    def wait_exit(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def kill(self):
        if self.qmp:
            self.qmp.close()
            self.qmp = None
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc:
            self.proc.wait()

    def console_text(self) -> str:
        try:
            return self.console.read_text(errors="replace")
        except OSError:
            return ""

    # ---- QMP ----------------------------------------------------------------
    def status(self) -> str:
        return self.qmp.execute("query-status")["status"]

    def stop(self):
        self.qmp.execute("stop")

    def cont(self):
        self.qmp.execute("cont")

    def savevm(self, tag: str):
        out = self.qmp.hmp(f"savevm {tag}")
        assert not out.strip(), f"savevm: {out}"

    def loadvm(self, tag: str):
        out = self.qmp.hmp(f"loadvm {tag}")
        assert not out.strip(), f"loadvm: {out}"

    def migrate_to_file(self, path: Path, timeout: float = 300):
        """Migrates the whole VM state into `path` (the VM is stopped after)."""
        self.qmp.execute("migrate", uri=f"exec:cat > {path}")
        deadline = time.monotonic() + timeout
        while True:
            st = self.qmp.execute("query-migrate").get("status")
            if st == "completed":
                return
            if st in ("failed", "cancelled"):
                raise AssertionError(f"migration {st}")
            if time.monotonic() > deadline:
                raise AssertionError(f"migration still {st} after {timeout}s")
            time.sleep(0.1)

    def wait_status(self, want: str, timeout: float = 120):
        deadline = time.monotonic() + timeout
        while (st := self.status()) != want:
            if time.monotonic() > deadline:
                raise AssertionError(f"VM status {st}, not {want}, after {timeout}s")
            time.sleep(0.05)

    # ---- HTTP to the guest's execd -------------------------------------------
    def conn(self, timeout: float = 30) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def ping(self) -> int:
        c = self.conn(2)
        try:
            c.request("GET", "/ping")
            r = c.getresponse()
            r.read()
            return r.status
        finally:
            c.close()

    def request(self, method: str, path: str, body=None, headers=None, timeout: float = 60):
        c = self.conn(timeout)
        try:
            h = {TOKEN_HEADER: self.token, "Content-Type": "application/json"}
            h.update(headers or {})
            c.request(method, path, body=json.dumps(body).encode() if isinstance(body, (dict, list)) else body,
                      headers=h)
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def run(self, command: str, timeout: float = 120, **fields) -> tuple[list[dict], bytes]:
        """POST /command in exact framing to its end: (events, stdout)."""
        st, _, raw = self.request("POST", "/command", {"command": command, **fields},
                                  headers={"Accept": "application/x-ndjson"}, timeout=timeout)
        assert st == 200, (st, raw[:300])
        events = [json.loads(line) for line in raw.split(b"\n") if line]
        out = b"".join(e["text"].encode() for e in events if e["type"] == "stdout" and "text" in e)
        return events, out
