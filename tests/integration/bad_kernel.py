"""A Jupyter kernel that breaks the wire protocol on purpose, for
test_code_wire.py. Shell, control, stdin and heartbeat go through pyzmq
(libzmq, as in any kernel); iopub is written by hand over a raw socket, so
that it can send what no ZeroMQ library would.

    bad_kernel.py MODE CONNECTION_FILE

MODE:
  garbage     answers kernel_info; on execute_request it publishes `busy`,
              then a frame with reserved flag bits set on iopub
  huge        on execute_request, an iopub frame that claims 2**62 bytes,
              64 MiB of it, then the process exits with status 3
  not-zmtp    every socket answers an HTTP error instead of a ZMTP greeting
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import socket
import sys
import threading
import uuid

MODE, CONN = sys.argv[1], sys.argv[2]
cfg = json.load(open(CONN))
KEY = cfg["key"].encode()
SESSION = uuid.uuid4().hex


def endpoint(port: int):
    if cfg["transport"] == "ipc":
        return socket.AF_UNIX, f"{cfg['ip']}-{port}", f"ipc://{cfg['ip']}-{port}"
    return socket.AF_INET, (cfg["ip"], port), f"tcp://{cfg['ip']}:{port}"


def listen(port: int) -> socket.socket:
    family, addr, _ = endpoint(port)
    s = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(addr)
    s.listen(8)
    return s


def frame(body: bytes, more: bool = False, command: bool = False) -> bytes:
    flags = (1 if more else 0) | (4 if command else 0)
    if len(body) > 255:
        return bytes([flags | 2]) + len(body).to_bytes(8, "big") + body
    return bytes([flags, len(body)]) + body


GREETING = b"\xff" + b"\0" * 7 + b"\x01\x7f\x03\x01NULL" + b"\0" * 16 + b"\0" + b"\0" * 31
PUB_READY = frame(b"\x05READY\x0bSocket-Type\0\0\0\x03PUB", command=True)


def message(msg_type: str, content: dict, parent: dict | None) -> list[bytes]:
    header = {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": SESSION, "username": "bad",
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "version": "5.3"}
    parts = [json.dumps(p).encode() for p in (header, parent or {}, {}, content)]
    sig = hmac.new(KEY, b"".join(parts), hashlib.sha256).hexdigest().encode() if KEY else b""
    return [b"<IDS|MSG>", sig, *parts]


class Iopub:
    """A PUB socket by hand: greeting, READY, then whatever the mode wants."""

    def __init__(self, port: int):
        self.listener = listen(port)
        self.peers: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            c, _ = self.listener.accept()
            c.sendall(GREETING + PUB_READY)
            threading.Thread(target=self.drain, args=(c,), daemon=True).start()
            with self.lock:
                self.peers.append(c)

    @staticmethod
    def drain(c: socket.socket):
        try:
            while c.recv(65536):
                pass
        except OSError:
            pass

    def send(self, data: bytes):
        with self.lock:
            for c in self.peers:
                try:
                    c.sendall(data)
                except OSError:
                    pass

    def publish(self, parts: list[bytes]):
        self.send(b"".join(frame(p, i + 1 < len(parts)) for i, p in enumerate(parts)))


def answer_http(port: int):
    s = listen(port)

    def serve():
        while True:
            c, _ = s.accept()
            c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    threading.Thread(target=serve, daemon=True).start()


def main():
    if MODE == "not-zmtp":
        for name in ("shell_port", "iopub_port", "control_port", "stdin_port", "hb_port"):
            answer_http(cfg[name])
        threading.Event().wait()

    import zmq
    iopub = Iopub(cfg["iopub_port"])
    ctx = zmq.Context()
    shell, control, stdin = (ctx.socket(zmq.ROUTER) for _ in range(3))
    shell.bind(endpoint(cfg["shell_port"])[2])
    control.bind(endpoint(cfg["control_port"])[2])
    stdin.bind(endpoint(cfg["stdin_port"])[2])
    hb = ctx.socket(zmq.REP)
    hb.bind(endpoint(cfg["hb_port"])[2])

    def beat():
        while True:
            hb.send(hb.recv())
    threading.Thread(target=beat, daemon=True).start()

    poller = zmq.Poller()
    poller.register(shell, zmq.POLLIN)
    poller.register(control, zmq.POLLIN)
    while True:
        for sock, _ in poller.poll():
            frames = sock.recv_multipart()
            at = frames.index(b"<IDS|MSG>")
            idents, header = frames[:at], json.loads(frames[at + 2])
            kind = header["msg_type"]
            iopub.publish(message("status", {"execution_state": "busy"}, header))
            if kind == "kernel_info_request":
                reply = {"status": "ok", "protocol_version": "5.3", "implementation": "bad",
                         "language_info": {"name": "bad"}}
                sock.send_multipart(idents + message("kernel_info_reply", reply, header))
                iopub.publish(message("status", {"execution_state": "idle"}, header))
            elif kind == "shutdown_request":
                os._exit(0)
            elif kind == "execute_request" and MODE == "garbage":
                iopub.send(b"\xf8\x05hello")
            elif kind == "execute_request" and MODE == "huge":
                iopub.send(b"\x02" + (1 << 62).to_bytes(8, "big"))
                chunk = b"x" * (1 << 20)
                for _ in range(64):
                    iopub.send(chunk)
                os._exit(3)


main()
