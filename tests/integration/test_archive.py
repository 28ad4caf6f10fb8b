"""GET and POST /files/archive against real trees: symlinks (kept as
symlinks, inside, outside and dangling), hard links, sparse files (one
ending in a hole, one all hole), a large file, empty directories and odd
names, compared with GNU tar of the same tree; a file that shrinks or grows
while it is sent (a download that fails, not a wrong archive); a round trip
through POST; hostile archives (zip slip, absolute paths,
links out of the target, a symlink then a file through it, devices and
FIFOs, hard links out, 10,000 entries, a 1 GiB entry), each refused whole
with nothing left behind; the limits refused before the body is read."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import socket
import stat
import subprocess
import tarfile
import time
import zipfile
from pathlib import Path
from urllib.parse import quote

import pytest

from execd_client import SLOW, wait_until
from test_client_resets import body_len, dial, recv_until, request, wait_write_pending

MiB = 1024 * 1024


def make_tree(root: Path, outward_link=True) -> Path:
    root.mkdir()
    (root / "a.txt").write_text("hello\n")
    (root / "dir" / "deeper").mkdir(parents=True)
    (root / "dir" / "deeper" / "n.bin").write_bytes(os.urandom(4096))
    (root / "empty").mkdir()
    (root / "ünï cödé name.txt").write_text("utf-8\n")
    os.symlink("a.txt", root / "link_in")
    if outward_link:
        os.symlink("/etc/hostname", root / "link_abs")  # archived as is; refused by POST
    os.symlink("missing", root / "dangling")
    os.symlink("dir/deeper", root / "dirlink")
    os.link(root / "a.txt", root / "hard")
    with open(root / "sparse", "wb") as f:
        f.seek(256 * MiB)
        f.write(b"end")
    with open(root / "sparse_tail", "wb") as f:  # ends in a hole: whole, not taken for a file that shrank
        f.write(b"start")
        f.truncate(32 * MiB)
    with open(root / "all_hole", "wb") as f:
        f.truncate(8 * MiB)
    (root / "large.bin").write_bytes(os.urandom(20 * MiB))
    os.chmod(root / "dir" / "deeper" / "n.bin", 0o640)
    return root


def describe(root: Path) -> dict:
    """Every entry below root: type, mode, content hash or link target, and
    which entries are the same file (hard links)."""
    out, inodes = {}, {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", oct(st.st_mode & 0o777))
            else:
                h = hashlib.sha256(p.read_bytes()).hexdigest()
                out[rel] = ("file", oct(st.st_mode & 0o777), st.st_size, h)
                inodes.setdefault(st.st_ino, []).append(rel)
    links = sorted(sorted(v) for v in inodes.values() if len(v) > 1)
    return {"entries": out, "hardlinks": links}


def get_archive(ex, path, fmt, dest: Path):
    c = ex.conn(120 * SLOW)
    c.request("GET", f"/files/archive?path={quote(str(path))}&format={fmt}", headers=ex.headers())
    r = c.getresponse()
    assert r.status == 200, r.read()[:300]
    with open(dest, "wb") as f:
        while True:
            b = r.read(MiB)
            if not b:
                break
            f.write(b)
    c.close()
    return {k.lower(): v for k, v in r.getheaders()}


def post_archive(ex, path, data: bytes, query="", headers=None):
    st, h, body = ex.request("POST", f"/files/archive?path={quote(str(path))}{query}", data,
                             headers=headers or {}, timeout=120 * SLOW)
    return st, json.loads(body) if body else None


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return make_tree(tmp_path_factory.mktemp("archive") / "src")


@pytest.fixture(scope="module")
def inner_tree(tmp_path_factory):
    """The same without a link out of the tree (which POST refuses)."""
    return make_tree(tmp_path_factory.mktemp("archive-in") / "src", outward_link=False)


@pytest.mark.parametrize("fmt", ["tar", "tar.gz", "zip"])
def test_a_directory_comes_back_whole(execd, tree, tmp_path, fmt):
    out = tmp_path / f"t.{fmt}"
    h = get_archive(execd, tree, fmt, out)
    assert h["transfer-encoding"] == "chunked"
    assert h["content-disposition"].startswith('attachment; filename="src.')
    dest = tmp_path / "x"
    dest.mkdir()
    if fmt == "zip":
        with zipfile.ZipFile(out) as z:
            names = set(z.namelist())
            info = {i.filename: i for i in z.infolist()}
        assert "link_in" in names and stat.S_ISLNK(info["link_in"].external_attr >> 16)
        # zip has no hard links or holes: everything else is checked by
        # extracting it through execd (below).
        return
    subprocess.run(["tar", "-xf", str(out), "-C", str(dest)], check=True)
    want, got = describe(tree), describe(dest)
    assert got == want
    assert os.lstat(dest / "sparse").st_blocks * 512 < MiB, "the hole stayed a hole"
    # The same names GNU tar stores for the same tree.
    listed = subprocess.run(["tar", "-tf", str(out)], check=True, capture_output=True, text=True).stdout.split()
    ref = subprocess.run(["tar", "-C", str(tree), "-cf", "-", "."], check=True, capture_output=True).stdout
    ref_names = subprocess.run(["tar", "-tf", "-"], input=ref, check=True, capture_output=True).stdout.decode().split()
    norm = lambda names: sorted(n.rstrip("/").removeprefix("./") for n in names if n not in ("./", "."))
    assert norm(listed) == norm(ref_names)


@pytest.mark.parametrize("fmt", ["tar", "tar.gz", "zip"])
def test_round_trip_through_post(execd, inner_tree, tmp_path, fmt):
    tree = inner_tree
    out = tmp_path / f"t.{fmt}"
    get_archive(execd, tree, fmt, out)
    target = tmp_path / "copy" / "here"
    st, body = post_archive(execd, target, out.read_bytes())
    assert st == 200, body
    assert body["path"] == str(target) and body["replaced"] is False
    assert body["archive_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    want, got = describe(tree), describe(target)
    if fmt == "zip":
        # zip stores a hard link's content twice, and no mode of a symlink's target.
        want["hardlinks"] = []
    assert got == want
    assert os.lstat(target / "sparse").st_blocks * 512 < 8 * MiB
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".here.execd-extract")]


def read_response(s: socket.socket, raw: bytearray):
    """Reads into `raw` until the server closes or a chunked body's
    terminating chunk has come (execd keeps the connection open after it).
    tar.gz and zip are deflated at some 50 MB/s, slower on a loaded machine."""
    deadline = time.monotonic() + 60 * SLOW
    while not raw.endswith(b"\r\n0\r\n\r\n"):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"neither the end of the body nor a close; got {len(raw)} bytes")
        s.settimeout(left)
        try:
            d = s.recv(MiB)
        except ConnectionResetError:
            return
        except TimeoutError:
            raise AssertionError(f"neither the end of the body nor a close; got {len(raw)} bytes") from None
        if not d:
            return
        raw += d


def dechunk(raw: bytes) -> tuple[bytes, bool]:
    """The body of a chunked response as far as it came, and whether its
    terminating zero-length chunk came."""
    at = raw.index(b"\r\n\r\n") + 4
    body = bytearray()
    while True:
        eol = raw.find(b"\r\n", at)
        if eol < 0:
            return bytes(body), False
        size = int(raw[at:eol].split(b";")[0], 16)
        if size == 0:
            return bytes(body), True
        chunk = raw[eol + 2:eol + 2 + size]
        body += chunk
        at = eol + 2 + size
        if len(chunk) < size or raw[at:at + 2] != b"\r\n":
            return bytes(body), False
        at += 2


CHANGES = {"shrinks": "shrank", "grows": "grew"}


@pytest.mark.parametrize("fmt", ["tar", "tar.gz", "zip"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_file_that_changes_size_while_it_is_read_fails_the_download(execd, tmp_path, fmt, change):
    """A 24 MiB file truncated to 1 MiB (or grown by 1 MiB) while its member
    is being sent: the header already said 24 MiB, so the archive cannot be
    completed honestly. The response ends without its last chunk, and what
    arrived is an archive the reader refuses (not one with 23 MiB of zeros,
    or without the new MiB, that tar takes for whole)."""
    src = tmp_path / "src"
    src.mkdir()
    big = src / "big.bin"
    big.write_bytes(os.urandom(24 * MiB))
    # A small window: once the client stops reading, execd is held up a few
    # MiB into the member (socket buffers, one queued and one made piece).
    s = dial(execd, rcvbuf=64 * 1024)
    s.sendall(request(execd, "GET", f"/files/archive?path={quote(str(src))}&format={fmt}"))
    raw = bytearray()
    assert recv_until(s, raw, lambda b: body_len(b) >= MiB, "the head and the first MiB")
    wait_write_pending(execd, s, "archive")
    if change == "shrinks":
        os.truncate(big, MiB)
    else:
        with open(big, "ab") as f:
            f.write(os.urandom(MiB))
    read_response(s, raw)
    s.close()
    head = bytes(raw[:raw.index(b"\r\n\r\n")]).lower()
    assert head.startswith(b"http/1.1 200") and b"transfer-encoding: chunked" in head, head
    body, terminated = dechunk(bytes(raw))
    assert not terminated, f"the response ended as if the archive were whole ({len(body)} bytes)"
    if fmt == "zip":
        with pytest.raises(zipfile.BadZipFile):
            zipfile.ZipFile(io.BytesIO(body)).testzip()
    else:
        dest = tmp_path / "x"
        dest.mkdir()
        r = subprocess.run(["tar", "-xzf" if fmt == "tar.gz" else "-xf", "-", "-C", str(dest)], input=body,
                           capture_output=True)
        assert r.returncode != 0, f"GNU tar took it for whole: {r.stderr!r}"
        assert b"Unexpected EOF" in r.stderr or b"unexpected end of file" in r.stderr, r.stderr
    wait_until(lambda: f"{CHANGES[change]} while it was archived" in execd.stderr_text(), 10 * SLOW, 0.05,
               "execd to say why it cut the archive")
    assert execd.ping() == 200


def test_replace_owner_mode_and_conflicts(execd, tmp_path):
    data = tar_of([("f", b"v1")])
    target = tmp_path / "t"
    assert post_archive(execd, target, data, "&mode=700")[0] == 200
    assert oct(os.stat(target).st_mode & 0o777) == "0o700"
    st, body = post_archive(execd, target, tar_of([("f", b"v2")]))
    assert st == 409 and body["code"] == "CONFLICT"
    assert (target / "f").read_bytes() == b"v1"
    st, body = post_archive(execd, target, tar_of([("g", b"v2")]), "&replace=true")
    assert st == 200 and body["replaced"] is True
    assert sorted(os.listdir(target)) == ["g"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert post_archive(execd, empty, data)[0] == 200  # an empty directory is taken over
    if os.geteuid() == 0:
        st, body = post_archive(execd, tmp_path / "owned", data, "&owner=nobody&group=nogroup")
        assert st == 200, body
        assert os.stat(tmp_path / "owned" / "f").st_uid == 65534
    st, body = post_archive(execd, tmp_path / "x", data, "&owner=no-such-user-here")
    assert st == 400 and not (tmp_path / "x").exists()


# ---- hostile archives ------------------------------------------------------------------------------


def tar_of(entries) -> bytes:
    """entries: (name, bytes) files, or (name, TarInfo type, linkname/None)."""
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.PAX_FORMAT) as t:
        for e in entries:
            ti = tarfile.TarInfo(e[0])
            if len(e) == 2:
                ti.size = len(e[1])
                t.addfile(ti, io.BytesIO(e[1]))
            else:
                ti.type = e[1]
                if e[2] is not None:
                    ti.linkname = e[2]
                t.addfile(ti)
    return b.getvalue()


def zip_of(entries) -> bytes:
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        for name, data in entries:
            z.writestr(name, data)
    return b.getvalue()


HOSTILE = {
    "zip slip (tar)": (tar_of([("ok", b"1"), ("../evil", b"x")]), "\"..\""),
    "zip slip (zip)": (zip_of([("ok", b"1"), ("a/../../evil", b"x")]), "\"..\""),
    "absolute path": (tar_of([("/tmp/execd-evil-abs", b"x")]), "absolute"),
    "symlink out (absolute)": (tar_of([("l", tarfile.SYMTYPE, "/etc")]), "absolute"),
    "symlink out (relative)": (tar_of([("d/l", tarfile.SYMTYPE, "../../x")]), "out of the target"),
    "symlink then file through it": (tar_of([("l", tarfile.SYMTYPE, "sub"), ("l/x", b"x")]), "through the symlink"),
    "symlink out then file through it": (tar_of([("l", tarfile.SYMTYPE, "/tmp"), ("l/x", b"x")]), "absolute"),
    "device": (tar_of([("null", tarfile.CHRTYPE, None)]), "device"),
    "fifo": (tar_of([("p", tarfile.FIFOTYPE, None)]), "FIFO"),
    "hard link out": (tar_of([("h", tarfile.LNKTYPE, "/etc/passwd")]), "hard link"),
    "hard link to nothing": (tar_of([("h", tarfile.LNKTYPE, "nothing")]), "hard link"),
    "not an archive": (b"this is not a tar file at all" * 100, "not a tar or zip"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_archives_are_refused_whole(execd, tmp_path, case):
    data, why = HOSTILE[case]
    parent = tmp_path / "p"
    target = parent / "t"
    st, body = post_archive(execd, target, data)
    assert st == 400, body
    assert body["code"] == "ARCHIVE_REFUSED" and why in body["message"], body
    assert not parent.exists(), "nothing left: not the target, not the directories made for it"
    assert not Path("/tmp/execd-evil-abs").exists()
    assert not (tmp_path / "evil").exists()


def test_ten_thousand_entries(execd_factory, tmp_path):
    data = tar_of([(f"d{i // 1000}/f{i}", b"") for i in range(10_000)])
    ex = execd_factory("--archive-max-entries", "10009")
    st, body = post_archive(ex, tmp_path / "ok", data)
    assert st == 200 and body["entries"] == 10_000 and body["files"] == 10_000, body
    assert sum(len(os.listdir(tmp_path / "ok" / d)) for d in os.listdir(tmp_path / "ok")) == 10_000
    small = execd_factory("--archive-max-entries", "9999")
    st, body = post_archive(small, tmp_path / "no", data)
    assert st == 413 and "--archive-max-entries" in body["message"]
    assert not (tmp_path / "no").exists()
    assert not [p for p in tmp_path.iterdir() if ".execd-extract-" in p.name]


class Zeros(io.RawIOBase):
    def __init__(self, n):
        self.left = n

    def readable(self):
        return True

    def readinto(self, b):
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k


@pytest.fixture(scope="module")
def gib_entry(tmp_path_factory):
    """A tar.gz holding one 1 GiB file of zeros (a few MB compressed)."""
    path = tmp_path_factory.mktemp("gib") / "gib.tar.gz"
    with gzip.open(path, "wb", compresslevel=1) as g, tarfile.open(fileobj=g, mode="w|") as t:
        ti = tarfile.TarInfo("big")
        ti.size = 1 << 30
        t.addfile(ti, io.BufferedReader(Zeros(1 << 30), 4 * MiB))
    return path


def test_a_1_gib_entry(execd_factory, tmp_path, gib_entry):
    data = gib_entry.read_bytes()
    small = execd_factory("--archive-max-bytes", str(256 * MiB))
    st, body = post_archive(small, tmp_path / "no", data)
    assert st == 413 and "--archive-max-bytes" in body["message"], body
    assert not (tmp_path / "no").exists()
    ex = execd_factory()
    st, body = post_archive(ex, tmp_path / "yes", data)
    assert st == 200 and body["bytes"] == 1 << 30, body
    assert os.path.getsize(tmp_path / "yes" / "big") == 1 << 30
    assert os.stat(tmp_path / "yes" / "big").st_blocks * 512 < 64 * MiB, "zeros became a hole"


def test_a_body_over_the_limit_is_refused_before_it_is_read(execd_factory, tmp_path):
    ex = execd_factory("--archive-max-bytes", str(MiB))
    s = socket.create_connection((ex.host, ex.port), timeout=10 * SLOW)
    s.sendall((f"POST /files/archive?path={tmp_path}/t HTTP/1.1\r\nHost: x\r\nX-EXECD-ACCESS-TOKEN: {ex.token}\r\n"
               f"Content-Length: {10 * MiB}\r\n\r\n").encode())
    head = s.recv(65536)
    assert head.startswith(b"HTTP/1.1 413"), head[:200]
    s.close()
    # Without a length: counted as it comes, refused at the limit.
    st, body = post_archive(ex, tmp_path / "t", b"\0" * (2 * MiB))
    assert st == 413
    assert not (tmp_path / "t").exists()
    assert not [p for p in Path(ex.state_dir).iterdir() if p.name.startswith("archive-")]


@pytest.mark.parametrize("query,status", [
    ("", 400), ("?path=/nonexistent", 404), ("?path=/etc/hostname", 400), ("?path=/tmp&format=rar", 400),
])
def test_get_errors(execd, query, status):
    st, _h, body = execd.request("GET", "/files/archive" + query)
    assert st == status, body
