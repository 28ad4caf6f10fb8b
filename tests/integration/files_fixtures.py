"""Helpers for the filesystem API tests: deterministic data streams, a raw
multipart builder, an execd running as `nobody`, and a tiny tmpfs.
(The daemon fixtures themselves come from conftest.py.)
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import uuid

import pytest

from execd_client import SLOW, Execd, StderrPump, execd_bin

MiB = 1024 * 1024


def data_blocks(total: int, block: int = MiB, seed: bytes = b"execd"):
    """Deterministic, incompressible-looking bytes: a fixed pseudo-random
    block with each block's index stamped in front (so a misplaced block is
    caught). Yields `total` bytes in `block`-sized pieces."""
    base = bytearray()
    counter = 0
    while len(base) < block:
        base += hashlib.sha256(seed + counter.to_bytes(8, "little")).digest()
        counter += 1
    base = bytes(base[:block])
    i, sent = 0, 0
    while sent < total:
        n = min(block, total - sent)
        piece = (i.to_bytes(8, "little") + base[8:])[:n]
        yield piece
        sent += n
        i += 1


def data_sha(total: int) -> str:
    h = hashlib.sha256()
    for b in data_blocks(total):
        h.update(b)
    return h.hexdigest()


def part(name: str, body: bytes, filename: str | None = None, ctype: str | None = None,
         boundary: str = "XyZ") -> bytes:
    disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
    head = f"--{boundary}\r\nContent-Disposition: {disp}\r\n"
    if ctype:
        head += f"Content-Type: {ctype}\r\n"
    return head.encode() + b"\r\n" + body + b"\r\n"


def metadata_part(meta: dict, boundary: str = "XyZ") -> bytes:
    return part("metadata", json.dumps(meta).encode(), "metadata", "application/json", boundary)


def file_part(data: bytes, boundary: str = "XyZ") -> bytes:
    return part("file", data, "blob", "application/octet-stream", boundary)


def closing(boundary: str = "XyZ") -> bytes:
    return f"--{boundary}--\r\n".encode()


def upload_raw(execd: Execd, body: bytes, content_type: str = "multipart/form-data; boundary=XyZ",
               extra_headers: dict | None = None):
    h = {"Content-Type": content_type}
    h.update(extra_headers or {})
    return execd.request("POST", "/files/upload", body=body, headers=h)


def stream_upload(execd: Execd, target: str, total: int, boundary: str = "b0und4ry-streamed") -> tuple[int, bytes]:
    """Uploads `total` bytes of data_blocks to `target` without holding them:
    Content-Length is computed up front and the body is written piecewise."""
    head = metadata_part({"path": target, "mode": 644}, boundary) + \
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n" \
        f"Content-Type: application/octet-stream\r\n\r\n".encode()
    tail = b"\r\n" + closing(boundary)
    c = execd.conn(timeout=600)
    try:
        c.putrequest("POST", "/files/upload")
        for k, v in execd.headers({"Content-Type": f"multipart/form-data; boundary={boundary}",
                                   "Content-Length": str(len(head) + total + len(tail))}).items():
            c.putheader(k, v)
        c.endheaders()
        c.send(head)
        for b in data_blocks(total):
            c.send(b)
        c.send(tail)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def stream_download_sha(execd: Execd, path: str, headers: dict | None = None) -> tuple[int, int, str]:
    """(status, byte count, sha256) of a download, read in 1 MiB pieces."""
    from urllib.parse import quote
    c = execd.conn(timeout=600)
    try:
        c.request("GET", "/files/download?path=" + quote(path), headers=execd.headers(headers))
        r = c.getresponse()
        h = hashlib.sha256()
        n = 0
        while True:
            b = r.read(MiB)
            if not b:
                break
            h.update(b)
            n += len(b)
        return r.status, n, h.hexdigest()
    finally:
        c.close()


def no_temp_files(root) -> bool:
    for dirpath, dirnames, filenames in os.walk(root):
        if any(".execd-" in f for f in filenames):
            return False
    return True


@contextlib.contextmanager
def execd_as_nobody():
    """An execd process running as nobody:nogroup (needs root and setpriv)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run execd as nobody")
    work = tempfile.mkdtemp(prefix="execd-nobody-")
    os.chmod(work, 0o755)
    state = os.path.join(work, "state")
    os.mkdir(state)
    shutil.chown(state, "nobody", "nogroup")
    token = uuid.uuid4().hex
    binary = execd_bin()
    # the binary's directories must be traversable by nobody
    args = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", binary,
            "--host", "127.0.0.1", "--port", "0", "--state-dir", state, "--access-token", token]
    env = dict(os.environ, HOME=work)
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env, cwd=work)
    pump = StderrPump(proc)
    pump.start()
    try:
        if not pump.ready.wait(20 * SLOW) or pump.port is None:
            pytest.skip(f"execd could not start as nobody: {pump.text()[-500:]}")
        yield Execd(proc, pump, token, state, args), work
    finally:
        ex_rc = proc.poll()
        if ex_rc is None:
            proc.terminate()
            proc.wait(15 * SLOW)
        pump.join(5)
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def tiny_tmpfs(size: str = "1m"):
    """A freshly mounted tmpfs of `size` (needs CAP_SYS_ADMIN)."""
    d = tempfile.mkdtemp(prefix="execd-tmpfs-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", d],
                       capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(d)
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", d], check=False)
        os.rmdir(d)
