"""execd's AF_VSOCK listener (--vsock-port) in the guest, reached the way
Firecracker-style hosts do: QEMU's vhost-user-vsock device with the
vhost-device-vsock crate as its backend, whose unix socket takes
"CONNECT <port>\\n" and then carries the byte stream to the guest's port.
(This machine has no vhost_vsock kernel module, so no AF_VSOCK on the host.)
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT, record

VSOCK_PORT = 1024


def backend_binary() -> str:
    b = os.environ.get("EXECD_VHOST_VSOCK") or shutil.which("vhost-device-vsock") \
        or str(Path.home() / ".cache/execd/cargo/bin/vhost-device-vsock")
    if not os.access(b, os.X_OK):
        raise AssertionError(f"no vhost-device-vsock at {b}: make test-vm installs it with cargo")
    return b


class VsockConnection(http.client.HTTPConnection):
    """HTTP over the backend's unix socket, after its CONNECT handshake."""

    def __init__(self, uds: str, port: int, timeout: float = 30):
        super().__init__("vsock", timeout=timeout)
        self.uds, self.vport = uds, port

    def connect(self):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(self.timeout)
        s.connect(self.uds)
        s.sendall(f"CONNECT {self.vport}\n".encode())
        line = b""
        while not line.endswith(b"\n"):
            c = s.recv(1)
            if not c:
                raise ConnectionError(f"vsock CONNECT {self.vport}: closed after {line!r}")
            line += c
        if not line.startswith(b"OK "):
            raise ConnectionError(f"vsock CONNECT {self.vport}: {line!r}")
        self.sock = s


@pytest.fixture
def vsock_vm(request, vm_factory, tmp_path):
    extra = getattr(request, "param", "")
    sock, uds = str(tmp_path / "vhost-vsock.sock"), str(tmp_path / "vm.vsock")
    backend = subprocess.Popen([backend_binary(), "--guest-cid", "3", "--socket", sock, "--uds-path", uds],
                               stdout=open(tmp_path / "backend.log", "wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(sock):
            assert backend.poll() is None, (tmp_path / "backend.log").read_text()
            assert time.monotonic() < deadline, "vhost-device-vsock made no socket"
            time.sleep(0.05)
        vm = vm_factory("vsock", vsock_socket=sock, execd_args=f"--vsock-port {VSOCK_PORT} {extra}",
                        boot=not extra)
        yield vm, uds
    finally:
        backend.terminate()
        try:
            backend.wait(10)
        except subprocess.TimeoutExpired:
            backend.kill()
            backend.wait()


def request(uds, method, path, body=None, token=None, timeout=60):
    c = VsockConnection(uds, VSOCK_PORT, timeout)
    try:
        h = {"Content-Type": "application/json"}
        if token:
            h["X-EXECD-ACCESS-TOKEN"] = token
        c.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=h)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def test_the_api_over_vsock(vsock_vm):
    vm, uds = vsock_vm
    assert f"listening on 0.0.0.0:44772 and vsock:{VSOCK_PORT}" in vm.console_text()
    t0 = time.monotonic()
    st, h, _ = request(uds, "GET", "/ping")
    record("vsock_ping", round(time.monotonic() - t0, 3))
    assert st == 200 and h["x-execd-containment"] == "cgroup-v2"
    # The same token as over TCP.
    assert request(uds, "POST", "/command", {"command": "true"})[0] == 401
    assert request(uds, "POST", "/command", {"command": "true"}, token="wrong")[0] == 401
    st, _, raw = request(uds, "POST", "/command", {"command": "echo over-vsock; cat /proc/self/cgroup"},
                         token=vm.token)
    assert st == 200
    events = [json.loads(b) for b in raw.split(b"\n\n") if b]
    assert [e["text"] for e in events if e["type"] == "stdout"][:1] == ["over-vsock"], events
    assert events[-1]["type"] == "execution_complete" and events[-1]["exit_code"] == 0
    # A download (sendfile into the vsock socket): the guest's own execd binary.
    st, h, body = request(uds, "GET", "/files/download?path=/execd", token=vm.token)
    assert st == 200, body[:200]
    static = ROOT / "build" / "execd-static"
    assert hashlib.sha256(body).hexdigest() == hashlib.sha256(static.read_bytes()).hexdigest()
    # TCP keeps working next to it.
    assert vm.ping() == 200


@pytest.mark.parametrize("vsock_vm", ["--no-tcp"], indirect=True)
def test_vsock_only(vsock_vm):
    vm, uds = vsock_vm
    # No TCP listener: wait for the guest over vsock instead.
    deadline = time.monotonic() + 120
    while True:
        try:
            if request(uds, "GET", "/ping", timeout=5)[0] == 200:
                break
        except OSError:
            pass
        assert vm.proc.poll() is None, vm.console_text()[-2000:]
        assert time.monotonic() < deadline, vm.console_text()[-2000:]
        time.sleep(0.1)
    assert f"listening on vsock:{VSOCK_PORT} (" in vm.console_text()
    st, _, raw = request(uds, "POST", "/command", {"command": "echo only-vsock"}, token=vm.token)
    assert st == 200 and b"only-vsock" in raw
    # Nothing answers on the forwarded TCP port: QEMU accepts, the guest refuses.
    with pytest.raises((OSError, http.client.HTTPException)):
        vm.ping()
