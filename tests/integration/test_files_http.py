"""Filesystem API over plain HTTP: error statuses and envelopes, nothing
changed on disk by a rejected request, multipart edge cases, Range and
Content-Disposition, permission errors (execd as nobody), disk full (tiny
tmpfs), slow download clients, and a 2 GiB round trip compared by sha256.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import stat
from urllib.parse import quote

import pytest

from execd_client import SANITIZED, SLOW, vm_rss_kib, wait_until
from files_fixtures import (
    MiB, closing, data_blocks, data_sha, execd_as_nobody, file_part, metadata_part, no_temp_files, part,
    stream_download_sha, stream_upload, tiny_tmpfs, upload_raw)


def q(p) -> str:
    return quote(str(p), safe="")


def err(execd, method, path, body=None, headers=None):
    st, h, data = execd.request(method, path, body=body, headers=headers)
    js = json.loads(data) if data else None
    return st, js, h


def snapshot(root):
    """Every path under root with its content/mode, to prove nothing changed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            content = open(p, "rb").read() if stat.S_ISREG(st.st_mode) else None
            out[os.path.relpath(p, root)] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, content)
    return out


# ---- query validation ----------------------------------------------------------------------------

@pytest.mark.parametrize("route", ["/files/search", "/files/download", "/directories/list"])
def test_missing_path_is_400(execd, route):
    st, js, _ = err(execd, "GET", route)
    assert st == 400 and js["code"] == "MISSING_QUERY" and "path" in js["message"]


@pytest.mark.parametrize("value", ["", "%00", "a%00b"])
def test_empty_or_nul_path_is_400(execd, value):
    for method, route in [("GET", "/files/info"), ("GET", "/files/download"), ("GET", "/files/search"),
                          ("GET", "/directories/list")]:
        st, js, _ = err(execd, method, f"{route}?path={value}")
        assert st == 400, (route, value, st, js)
        assert js["code"] in ("INVALID_REQUEST_BODY", "MISSING_QUERY"), js


def test_nonexistent_paths_are_404(execd, tmp_path):
    m = tmp_path / "missing"
    for method, route, body in [
        ("GET", f"/files/info?path={q(m)}", None),
        ("GET", f"/files/search?path={q(m)}", None),
        ("GET", f"/files/download?path={q(m)}", None),
        ("GET", f"/directories/list?path={q(m)}", None),
        ("POST", "/files/mv", [{"src": str(m), "dest": str(tmp_path / "x")}]),
        ("POST", "/files/permissions", {str(m): {"mode": 644}}),
        ("POST", "/files/replace", {str(m): {"old": "a", "new": "b"}}),
    ]:
        st, js, _ = err(execd, method, route, body)
        assert st == 404 and js["code"] == "FILE_NOT_FOUND" and js["message"], (route, st, js)
    assert os.listdir(tmp_path) == []


def test_missing_paths_are_fine_for_deletes(execd, tmp_path):
    st, _, data = execd.request("DELETE", f"/files?path={q(tmp_path / 'nope')}")
    assert st == 200 and data == b""
    st, _, data = execd.request("DELETE", f"/directories?path={q(tmp_path / 'nope')}")
    assert st == 200 and data == b""


def test_path_expansion(execd, tmp_path):
    (tmp_path / "f").write_text("x")
    # execd inherits HOME from the test process
    home = os.path.normpath(os.environ["HOME"])
    for given in ("$HOME", "${HOME}", "~", "~/"):
        st, js = execd.json("GET", "/files/info?path=" + q(given))
        assert st == 200 and js[given]["path"] == home, (given, js)
    st, js, _ = err(execd, "GET", "/files/info?path=" + q("$NO_SUCH_VARIABLE_X/f"))
    assert st == 400 and "NO_SUCH_VARIABLE_X" in js["message"]


# ---- type mismatches and bad bodies -----------------------------------------------------------------

def test_file_where_directory_needed_and_reverse(execd, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    d = tmp_path / "dir"
    d.mkdir()
    before = snapshot(tmp_path)
    st, js, _ = err(execd, "GET", f"/directories/list?path={q(f)}")
    assert st == 400 and js["code"] == "INVALID_REQUEST_BODY" and "not a directory" in js["message"]
    st, js, _ = err(execd, "GET", f"/files/download?path={q(d)}")
    assert st == 400 and "directory" in js["message"]
    st, js, _ = err(execd, "POST", "/directories", {str(f): {"mode": 755}})
    assert st == 500 and js["code"] == "RUNTIME_ERROR"
    st, js, _ = err(execd, "DELETE", f"/files?path={q(f)}&path={q(d)}")
    assert st == 500 and js["code"] == "RUNTIME_ERROR" and "directory" in js["message"]
    st, js, _ = err(execd, "POST", "/files/replace", {str(d): {"old": "a", "new": "b"}})
    assert st == 400
    assert snapshot(tmp_path) == before  # the file was not deleted although it came first


@pytest.mark.parametrize("route", ["/files/permissions", "/files/mv", "/files/replace", "/directories"])
@pytest.mark.parametrize("body", [b"", b"{", b"[1,", b"\"str\"", b"42"])
def test_bad_json_bodies(execd, route, body):
    st, js, _ = err(execd, "POST", route, body)
    assert st == 400 and js["code"] == "INVALID_REQUEST_BODY" and js["message"], (route, body, js)


def test_bad_values(execd, tmp_path):
    f = tmp_path / "f"
    f.write_text("abc")
    os.chmod(f, 0o640)
    before = snapshot(tmp_path)
    cases = [
        ("POST", "/files/permissions", {str(f): {"mode": 789}}),
        ("POST", "/files/permissions", {str(f): {"mode": "755"}}),
        ("POST", "/files/permissions", {str(f): {"owner": "no-such-user-xyz", "mode": 600}}),
        ("POST", "/files/permissions", {str(f): {"group": "no-such-group-xyz", "mode": 600}}),
        ("POST", "/directories", {str(tmp_path / "newdir"): {"owner": "no-such-user-xyz"}}),
        ("POST", "/files/replace", {str(f): {"old": "", "new": "x"}}),
        ("POST", "/files/mv", {"src": str(f), "dest": str(tmp_path / "g")}),
        ("GET", f"/directories/list?path={q(tmp_path)}&depth=-1", None),
        ("GET", f"/directories/list?path={q(tmp_path)}&depth=x", None),
        ("GET", f"/files/search?path={q(tmp_path)}&pattern=" + q("[unclosed"), None),
    ]
    for method, route, body in cases:
        st, js, _ = err(execd, method, route, body)
        assert st == 400 and js["code"] == "INVALID_REQUEST_BODY", (route, body, st, js)
    assert snapshot(tmp_path) == before


def test_multi_item_requests_are_all_or_nothing(execd, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("hello")
    b.write_text("hello")
    before = snapshot(tmp_path)
    st, js, _ = err(execd, "POST", "/files/replace",
                    {str(a): {"old": "l", "new": "L"}, str(tmp_path / "zz"): {"old": "l", "new": "L"}})
    assert st == 404
    st, js, _ = err(execd, "POST", "/files/permissions",
                    {str(a): {"mode": 600}, str(b): {"mode": 600, "owner": "no-such-user-xyz"}})
    assert st == 400
    st, js, _ = err(execd, "POST", "/files/mv",
                    [{"src": str(a), "dest": str(tmp_path / "c")}, {"src": str(tmp_path / "x"), "dest": str(b)}])
    assert st == 404
    assert snapshot(tmp_path) == before


# ---- upload: multipart edge cases --------------------------------------------------------------------

def test_upload_not_multipart(execd, tmp_path):
    st, h, data = upload_raw(execd, b'{"path":"x"}', content_type="application/json")
    js = json.loads(data)
    assert st == 400 and js["code"] == "INVALID_FILE"
    st, h, data = upload_raw(execd, b"", content_type="multipart/form-data")  # no boundary
    assert st == 400 and json.loads(data)["code"] == "INVALID_FILE"


def test_upload_rejections_leave_nothing(execd, tmp_path):
    t = str(tmp_path / "sub" / "t.bin")
    ok = metadata_part({"path": t}) + file_part(b"DATA")
    cases = {
        "wrong boundary": (ok.replace(b"XyZ", b"Other") + closing("Other"), "INVALID_FILE"),
        "truncated": (ok, "INVALID_FILE"),
        "truncated mid-part": (ok[:-10], "INVALID_FILE"),
        "no file part": (metadata_part({"path": t}) + closing(), "INVALID_FILE_CONTENT"),
        "no metadata": (file_part(b"DATA") + closing(), "INVALID_FILE_METADATA"),
        "empty form": (closing(), "INVALID_FILE_METADATA"),
        "bad metadata json": (part("metadata", b"{nope", "metadata") + file_part(b"D") + closing(),
                              "INVALID_FILE_METADATA"),
        "metadata not object": (part("metadata", b"[]", "metadata") + file_part(b"D") + closing(),
                                "INVALID_FILE_METADATA"),
        "empty path": (metadata_part({"path": ""}) + file_part(b"D") + closing(), "INVALID_FILE_METADATA"),
        "bad mode": (metadata_part({"path": t, "mode": 999}) + file_part(b"D") + closing(),
                     "INVALID_FILE_METADATA"),
        "unknown owner": (metadata_part({"path": t, "owner": "no-such-user-xyz"}) + file_part(b"D") + closing(),
                          "INVALID_FILE_METADATA"),
        "count mismatch": (metadata_part({"path": t}) + metadata_part({"path": t + "2"}) + file_part(b"D")
                           + closing(), "INVALID_FILE"),
        "second entry bad": (ok + metadata_part({"path": t + "2", "group": "no-such-group-xyz"})
                             + file_part(b"E") + closing(), "INVALID_FILE_METADATA"),
        "malformed part header": (b"--XyZ\r\nno colon here\r\n\r\nx\r\n" + closing(), "INVALID_FILE"),
    }
    for name, (body, code) in cases.items():
        st, h, data = upload_raw(execd, body)
        js = json.loads(data)
        assert st == 400 and js["code"] == code and js["message"], (name, st, js)
        assert os.listdir(tmp_path) == [], (name, os.listdir(tmp_path))  # not even the parent directory


def test_multi_file_upload_cut_before_its_closing_boundary_leaves_nothing(execd, tmp_path):
    # Three files in new directories, the body ends without its closing
    # boundary once every file has been opened: all temp files and all
    # directories go (the second file's temp sat in the first one's
    # directory when that was removed, which left it behind).
    sub = tmp_path / "sub"
    body = (metadata_part({"path": str(sub / "a")}) + file_part(b"A")
            + metadata_part({"path": str(sub / "b")}) + file_part(b"B")
            + metadata_part({"path": str(sub / "deeper" / "c")}) + file_part(b"C"))
    c = execd.conn(timeout=30 * SLOW)
    try:
        c.putrequest("POST", "/files/upload")
        for k, v in execd.headers({"Content-Type": "multipart/form-data; boundary=XyZ",
                                   "Content-Length": str(len(body))}).items():
            c.putheader(k, v)
        c.endheaders()
        c.send(body[:-1])
        # The last file is open (its directory exists) before the body ends.
        wait_until(lambda: (sub / "deeper").is_dir() and len(os.listdir(sub / "deeper")) == 1, 10 * SLOW, 0.01,
                   "the third file to be opened")
        c.send(body[-1:])
        r = c.getresponse()
        js = json.loads(r.read())
        assert r.status == 400 and js["code"] == "INVALID_FILE", (r.status, js)
    finally:
        c.close()
    assert os.listdir(tmp_path) == []


def test_upload_existing_target_untouched_on_failure(execd, tmp_path):
    t = tmp_path / "t.txt"
    t.write_text("original")
    body = metadata_part({"path": str(t)}) + file_part(b"replacement")  # no closing delimiter
    st, _, _ = upload_raw(execd, body)
    assert st == 400 and t.read_text() == "original" and os.listdir(tmp_path) == ["t.txt"]


def test_upload_multi_files_and_ignored_parts(execd, tmp_path):
    a, b = tmp_path / "a", tmp_path / "d" / "b"
    body = (part("note", b"ignored field") + metadata_part({"path": str(a), "mode": 600})
            + metadata_part({"path": str(b)}) + file_part(b"AAA") + file_part(b"B" * 100000)
            + part("metadata-not", b"x") + closing())
    st, h, data = upload_raw(execd, body)
    assert st == 200 and data == b"", data
    assert a.read_bytes() == b"AAA" and b.read_bytes() == b"B" * 100000
    assert stat.S_IMODE(os.stat(a).st_mode) == 0o600


def test_upload_plain_metadata_field_and_expect_continue(execd, tmp_path):
    t = tmp_path / "x"
    body = part("metadata", json.dumps({"path": str(t)}).encode()) + file_part(b"xyz") + closing()
    st, _, data = upload_raw(execd, body, extra_headers={"Expect": "100-continue"})
    assert st == 200, data
    assert t.read_bytes() == b"xyz"


def test_upload_disconnect_midway_leaves_nothing(execd, tmp_path):
    t = tmp_path / "t.bin"
    head = metadata_part({"path": str(t)}) + b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; " \
        b"filename=\"f\"\r\n\r\n"
    s = socket.create_connection((execd.host, execd.port))
    req = (f"POST /files/upload HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: {execd.token}\r\n"
           f"Content-Type: multipart/form-data; boundary=XyZ\r\nContent-Length: {len(head) + 50 * MiB}\r\n\r\n")
    s.sendall(req.encode() + head)
    for b in data_blocks(8 * MiB):
        s.sendall(b)
    # the temp file exists while the body is arriving
    wait_until(lambda: not no_temp_files(tmp_path), 10 * SLOW, what="temp file to appear")
    s.close()
    wait_until(lambda: os.listdir(tmp_path) == [], 10 * SLOW, what="temp file to be removed")
    assert execd.ping() == 200


# ---- download --------------------------------------------------------------------------------------

def test_download_headers_and_ranges(execd, tmp_path):
    f = tmp_path / "r.bin"
    blob = bytes(range(256)) * 4
    f.write_bytes(blob)
    st, h, data = execd.request("GET", f"/files/download?path={q(f)}")
    assert st == 200 and data == blob
    assert h["content-type"] == "application/octet-stream" and h["accept-ranges"] == "bytes"
    assert h["content-length"] == str(len(blob)) and h["content-disposition"] == 'attachment; filename="r.bin"'
    assert "last-modified" in h
    for rng, lo, hi in [("bytes=0-0", 0, 0), ("bytes=10-19", 10, 19), ("bytes=1000-", 1000, 1023),
                        ("bytes=-24", 1000, 1023), ("bytes=1000-99999", 1000, 1023), ("bytes=5-6,8-9", 5, 6),
                        ("bytes=5000-6000,3-4", 3, 4)]:
        st, h, data = execd.request("GET", f"/files/download?path={q(f)}", headers={"Range": rng})
        assert st == 206, rng
        assert data == blob[lo:hi + 1] and h["content-range"] == f"bytes {lo}-{hi}/1024", rng
        assert h["content-length"] == str(hi - lo + 1)
    for rng in ["bytes=1024-", "bytes=5000-6000", "bytes=-0"]:
        st, js, h = err(execd, "GET", f"/files/download?path={q(f)}", headers={"Range": rng})
        assert st == 416 and js["code"] == "RANGE_NOT_SATISFIABLE", rng
        assert h["content-range"] == "bytes */1024" and h["content-type"].startswith("application/json")
    for rng in ["items=0-1", "bytes=x-1", "bytes=5-2", "bytes=12"]:
        st, js, h = err(execd, "GET", f"/files/download?path={q(f)}", headers={"Range": rng})
        assert st == 416 and js["code"] == "UNKNOWN" and js["message"], rng
        assert h["content-range"] == "bytes */1024"


def test_download_empty_file_and_keepalive(execd, tmp_path):
    e = tmp_path / "empty"
    e.write_bytes(b"")
    g = tmp_path / "g"
    g.write_bytes(b"G" * 70000)
    c = execd.conn()
    try:
        for p, want in [(e, b""), (g, b"G" * 70000), (e, b""), (g, b"G" * 70000)]:
            c.request("GET", f"/files/download?path={q(p)}", headers=execd.headers())
            r = c.getresponse()
            assert r.status == 200 and r.read() == want
        c.request("GET", f"/files/info?path={q(g)}", headers=execd.headers())
        r = c.getresponse()
        assert r.status == 200 and json.loads(r.read())[str(g)]["size"] == 70000
    finally:
        c.close()


def test_content_disposition_quoting(execd, tmp_path):
    names = {
        'we"ird\\name.txt': 'attachment; filename="we\\"ird\\\\name.txt"',
        "测试文件.txt": "attachment; filename=\"%E6%B5%8B%E8%AF%95%E6%96%87%E4%BB%B6.txt\"; "
                     "filename*=UTF-8''%E6%B5%8B%E8%AF%95%E6%96%87%E4%BB%B6.txt",
        "line\nbreak": "attachment; filename=\"line%0Abreak\"; filename*=UTF-8''line%0Abreak",
    }
    for name, want in names.items():
        (tmp_path / name).write_bytes(b"n")
        st, h, data = execd.request("GET", f"/files/download?path={q(tmp_path / name)}")
        assert st == 200 and data == b"n" and h["content-disposition"] == want, name


def test_download_fifo_and_device_rejected(execd, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for p in (fifo, "/dev/null"):
        st, js, _ = err(execd, "GET", f"/files/download?path={q(p)}")
        assert st == 400 and "regular" in js["message"]


def test_slow_download_client_does_not_block_others(execd, tmp_path):
    size = 64 * MiB
    f = tmp_path / "slow.bin"
    with open(f, "wb") as out:
        for b in data_blocks(size):
            out.write(b)
    s = socket.create_connection((execd.host, execd.port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    s.sendall(f"GET /files/download?path={q(f)} HTTP/1.1\r\nHost: x\r\n"
              f"X-EXECD-ACCESS-TOKEN: {execd.token}\r\n\r\n".encode())
    first = s.recv(4096)
    assert first.startswith(b"HTTP/1.1 200 ")
    # while that client reads nothing, the daemon keeps serving everyone else
    for _ in range(20):
        st, js = execd.json("GET", f"/files/info?path={q(f)}")
        assert st == 200 and js[str(f)]["size"] == size
    got = bytearray(first)
    import hashlib
    while True:
        b = s.recv(MiB)
        if not b:
            raise AssertionError("connection closed early")
        got += b
        head_end = got.find(b"\r\n\r\n")
        if head_end >= 0 and len(got) - head_end - 4 >= size:
            break
    s.close()
    body = bytes(got[got.find(b"\r\n\r\n") + 4:])
    assert len(body) == size and hashlib.sha256(body).hexdigest() == data_sha(size)


# ---- permissions and disk space ---------------------------------------------------------------------

def test_permission_denied_is_403(tmp_path):
    with execd_as_nobody() as (ex, work):
        locked = os.path.join(work, "locked")
        os.mkdir(locked, 0o755)  # owned by root: nobody cannot write here
        secret = os.path.join(work, "secret")
        with open(secret, "w") as fh:
            fh.write("s")
        os.chmod(secret, 0o600)
        before = snapshot(work)
        body = metadata_part({"path": os.path.join(locked, "x.txt")}) + file_part(b"x") + closing()
        st, h, data = upload_raw(ex, body)
        js = json.loads(data)
        assert st == 403 and js["code"] == "PERMISSION_DENIED" and "ermission denied" in js["message"], js
        for method, route, b in [
            ("GET", f"/files/download?path={q(secret)}", None),
            ("POST", "/directories", {os.path.join(locked, "d"): {"mode": 755}}),
            ("DELETE", f"/files?path={q(secret)}", None),
            ("POST", "/files/permissions", {secret: {"mode": 644}}),
            ("POST", "/files/mv", [{"src": secret, "dest": os.path.join(locked, "s")}]),
        ]:
            st, js, _ = err(ex, method, route, b)
            assert st == 403 and js["code"] == "PERMISSION_DENIED", (route, st, js)
        assert snapshot(work) == before


def test_disk_full_is_507_and_leaves_nothing(execd):
    with tiny_tmpfs("1m") as d:
        existing = os.path.join(d, "existing.txt")
        with open(existing, "w") as fh:
            fh.write("keep me")
        st, data = stream_upload(execd, os.path.join(d, "sub", "big.bin"), 2 * MiB)
        js = json.loads(data)
        assert st == 507 and js["code"] == "INSUFFICIENT_STORAGE", js
        assert os.listdir(d) == ["existing.txt"]
        # overwriting an existing file with too much data keeps the old content
        st, data = stream_upload(execd, existing, 2 * MiB)
        assert st == 507 and open(existing).read() == "keep me" and os.listdir(d) == ["existing.txt"]
        # the daemon is fine afterwards: a small upload works
        st, data = stream_upload(execd, os.path.join(d, "small.bin"), 1000)
        assert st == 200, data


# ---- big round trip ---------------------------------------------------------------------------------

def test_big_upload_download_roundtrip(execd, tmp_path):
    size = 64 * MiB if SANITIZED else 2 * 1024 * MiB
    target = str(tmp_path / "big.bin")
    rss_before = vm_rss_kib(execd.pid)
    st, data = stream_upload(execd, target, size)
    assert st == 200, data
    rss_after_upload = vm_rss_kib(execd.pid)
    assert os.path.getsize(target) == size and no_temp_files(tmp_path)
    want = data_sha(size)
    st, n, got = stream_download_sha(execd, target)
    assert st == 200 and n == size and got == want
    st, n, got = stream_download_sha(execd, target, {"Range": f"bytes={size - MiB - 5}-"})
    assert st == 206 and n == MiB + 5
    if not SANITIZED:
        assert rss_after_upload - rss_before < 32 * 1024, (rss_before, rss_after_upload)
        assert vm_rss_kib(execd.pid) - rss_before < 32 * 1024
