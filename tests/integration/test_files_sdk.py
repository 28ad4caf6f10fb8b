"""Filesystem API through the official OpenSandbox Python SDK: the SDK's filesystem service is built straight against a real execd
(`execd` fixture from conftest.py) and every call is checked against the
disk. Owns the SDK-level coverage of /files/* and /directories.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import pwd
import stat
from pathlib import Path

import pytest

from opensandbox.adapters.factory import AdapterFactory
from opensandbox.config.connection import ConnectionConfig
from opensandbox.exceptions.sandbox import SandboxApiException
from opensandbox.models.filesystem import (
    ContentReplaceEntry,
    DirectoryListEntry,
    MoveEntry,
    SearchEntry,
    SetPermissionEntry,
    WriteEntry,
)
from opensandbox.models.sandboxes import SandboxEndpoint

from execd_client import TOKEN_HEADER


def run_fs(execd, body):
    """Runs `await body(fs)` with a fresh SDK filesystem service."""

    async def main():
        cfg = ConnectionConfig(protocol="http")
        ep = SandboxEndpoint(endpoint=execd.endpoint, headers={TOKEN_HEADER: execd.token})
        fs = AdapterFactory(cfg).create_filesystem_service(ep)
        try:
            return await body(fs)
        finally:
            await cfg.close_transport_if_owned()

    return asyncio.run(main())


def mode_of(p) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def test_write_read_info_and_range(execd, tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "deep" / "er" / "b.bin"
    blob = bytes(range(256)) * 10

    async def body(fs):
        await fs.write_files([
            WriteEntry(path=str(a), data="héllo wörld\n", mode=640),
            WriteEntry(path=str(b), data=blob, mode=600),
        ])
        infos = await fs.get_file_info([str(a), str(b)])
        whole = await fs.read_bytes(str(b))
        part = await fs.read_bytes(str(b), range_header="bytes=10-19")
        tail = await fs.read_bytes(str(b), range_header="bytes=-5")
        text = await fs.read_file(str(a))
        chunks = [c async for c in await fs.read_bytes_stream(str(b), chunk_size=1000)]
        return infos, whole, part, tail, text, b"".join(chunks)

    infos, whole, part, tail, text, streamed = run_fs(execd, body)
    assert a.read_text() == "héllo wörld\n" and text == "héllo wörld\n"
    assert b.read_bytes() == blob == whole == streamed
    assert part == blob[10:20] and tail == blob[-5:]
    assert mode_of(a) == 0o640 and mode_of(b) == 0o600
    ia, ib = infos[str(a)], infos[str(b)]
    assert ia.path == str(a) and ia.entry_type == "file" and ia.mode == 640
    assert ib.size == len(blob) and ib.mode == 600 and ib.owner == pwd.getpwuid(os.geteuid()).pw_name
    # nothing but the two files: no temp files left next to them
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.txt", "b.bin", "deep", "er"]


def test_write_stream_and_overwrite(execd, tmp_path):
    target = tmp_path / "big.bin"
    target.write_bytes(b"old content")
    data = hashlib.sha256(b"seed").digest() * (5 * 1024 * 1024 // 32 + 7)

    async def body(fs):
        await fs.write_files([WriteEntry(path=str(target), data=io.BytesIO(data), mode=644)])
        return await fs.get_file_info([str(target)])

    info = run_fs(execd, body)
    assert target.read_bytes() == data
    assert info[str(target)].size == len(data)
    assert os.listdir(tmp_path) == ["big.bin"]


def test_search(execd, tmp_path):
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    for rel in ["x.txt", "src/y.txt", "src/pkg/z.txt", "src/pkg/z.py", ".hidden.txt"]:
        (tmp_path / rel).write_text(rel)
    os.symlink("x.txt", tmp_path / "link.txt")

    async def body(fs):
        txt = await fs.search(SearchEntry(path=str(tmp_path), pattern="*.txt"))
        everything = await fs.search(SearchEntry(path=str(tmp_path), pattern="**"))
        rel = await fs.search(SearchEntry(path=str(tmp_path), pattern="src/**/*.py"))
        return txt, everything, rel

    txt, everything, rel = run_fs(execd, body)
    names = [e.path for e in txt]
    assert names == sorted(names)  # lexical walk
    assert {os.path.relpath(p, tmp_path) for p in names} == {
        "x.txt", "src/y.txt", "src/pkg/z.txt", ".hidden.txt", "link.txt"}
    assert all(e.entry_type != "directory" for e in everything)
    assert len(everything) == 6
    assert [e.entry_type for e in everything if e.path.endswith("link.txt")] == ["symlink"]
    assert [os.path.relpath(e.path, tmp_path) for e in rel] == ["src/pkg/z.py"]


def test_set_permissions(execd, tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    nobody = pwd.getpwnam("nobody")

    async def body(fs):
        await fs.set_permissions([SetPermissionEntry(path=str(f), mode=600, owner="nobody")])

    run_fs(execd, body)
    st = os.stat(f)
    assert stat.S_IMODE(st.st_mode) == 0o600
    if os.geteuid() == 0:
        assert st.st_uid == nobody.pw_uid


def test_move_files(execd, tmp_path):
    (tmp_path / "a").write_text("A")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "inner").write_text("I")

    async def body(fs):
        await fs.move_files([
            MoveEntry(src=str(tmp_path / "a"), dest=str(tmp_path / "new" / "parent" / "a2")),
            MoveEntry(src=str(tmp_path / "d"), dest=str(tmp_path / "d2")),
        ])

    run_fs(execd, body)
    assert not (tmp_path / "a").exists() and (tmp_path / "new/parent/a2").read_text() == "A"
    assert not (tmp_path / "d").exists() and (tmp_path / "d2/inner").read_text() == "I"


def test_move_onto_existing_is_rejected(execd, tmp_path):
    (tmp_path / "a").write_text("A")
    (tmp_path / "b").write_text("B")

    async def body(fs):
        with pytest.raises(SandboxApiException) as ei:
            await fs.move_files([MoveEntry(src=str(tmp_path / "a"), dest=str(tmp_path / "b"))])
        return ei.value.status_code

    assert run_fs(execd, body) == 500
    assert (tmp_path / "a").read_text() == "A" and (tmp_path / "b").read_text() == "B"


def test_replace_contents(execd, tmp_path):
    f, g = tmp_path / "f.txt", tmp_path / "g.txt"
    f.write_text("one two one three one")
    g.write_text("nothing here")
    os.chmod(f, 0o604)

    async def body(fs):
        detailed = await fs.replace_contents_detailed([
            ContentReplaceEntry(path=str(f), old_content="one", new_content="1"),
            ContentReplaceEntry(path=str(g), old_content="zzz", new_content="y"),
        ])
        await fs.replace_contents([ContentReplaceEntry(path=str(g), old_content="here", new_content="there")])
        return detailed

    detailed = run_fs(execd, body)
    assert {r.path: r.replaced_count for r in detailed} == {str(f): 3, str(g): 0}
    assert f.read_text() == "1 two 1 three 1" and mode_of(f) == 0o604
    assert g.read_text() == "nothing there"
    assert sorted(os.listdir(tmp_path)) == ["f.txt", "g.txt"]


def test_directories(execd, tmp_path):
    root = tmp_path / "r"

    async def body(fs):
        await fs.create_directories([
            WriteEntry(path=str(root / "b" / "c"), mode=700),
            WriteEntry(path=str(root / "a"), mode=755),
        ])
        (root / "b" / "file").write_text("f")
        os.symlink(str(tmp_path), root / "b" / "escape")  # must be listed, never entered
        top = await fs.list_directory(DirectoryListEntry(path=str(root)))
        deep = await fs.list_directory(DirectoryListEntry(path=str(root), depth=5))
        await fs.delete_files([str(root / "b" / "file")])
        await fs.delete_directories([str(root / "b")])
        after = await fs.list_directory(DirectoryListEntry(path=str(root), depth=5))
        return top, deep, after

    outside = tmp_path / "keep.txt"
    outside.write_text("keep")
    top, deep, after = run_fs(execd, body)
    assert mode_of(root / "a") == 0o755
    assert [os.path.relpath(e.path, root) for e in top] == ["a", "b"]
    assert [(os.path.relpath(e.path, root), e.entry_type) for e in deep] == [
        ("a", "directory"), ("b", "directory"), ("b/c", "directory"),
        ("b/escape", "symlink"), ("b/file", "file")]
    assert [os.path.relpath(e.path, root) for e in after] == ["a"]
    assert outside.read_text() == "keep"  # rm -rf did not follow the symlink


def test_sdk_errors(execd, tmp_path):
    async def body(fs):
        codes = []
        for call in (
            lambda: fs.get_file_info([str(tmp_path / "missing")]),
            lambda: fs.read_bytes(str(tmp_path / "missing")),
            lambda: fs.list_directory(DirectoryListEntry(path=str(tmp_path / "missing"))),
            lambda: fs.read_bytes(str(tmp_path)),
        ):
            with pytest.raises(SandboxApiException) as ei:
                await call()
            codes.append(ei.value.status_code)
        return codes

    assert run_fs(execd, body) == [404, 404, 404, 400]
