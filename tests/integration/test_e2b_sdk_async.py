"""E2B's Python SDK, asynchronous API (AsyncSandbox), against execd's envd
listener in debug mode. The async SDK watches directories with the WatchDir
stream (the sync one polls), and runs every call on asyncio over the same
Connect wire."""

from __future__ import annotations

import asyncio
import time

import pytest
from e2b import AsyncSandbox, CommandExitException, TimeoutException
from e2b.sandbox.commands.command_handle import PtySize
from e2b.sandbox.filesystem.filesystem import FileType
from e2b.sandbox.filesystem.watch_handle import FilesystemEventType

from e2b_support import opensandbox_bytes, point_sdk_at, start_e2b
from execd_client import SLOW, pids_with_cmdline, wait_until
from test_e2b_sdk import EXACT_COMMANDS


@pytest.fixture
def e2b(execd_factory, monkeypatch):
    ex, url = start_e2b(execd_factory)
    point_sdk_at(monkeypatch, url)
    return ex


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60 * SLOW))


async def until(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not await pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def test_commands(e2b, tmp_path):
    want = {name: opensandbox_bytes(e2b, cmd) for name, cmd in EXACT_COMMANDS.items()}

    async def main():
        sbx = await AsyncSandbox.create()
        assert await sbx.is_running()
        for name, cmd in EXACT_COMMANDS.items():
            outs, errs = [], []
            r = await sbx.commands.run(cmd, on_stdout=outs.append, on_stderr=errs.append)
            assert r.stdout == want[name][0].decode("utf-8", "replace"), name
            assert r.stderr == want[name][1].decode("utf-8", "replace"), name
            assert "".join(outs) == r.stdout and "".join(errs) == r.stderr
        with pytest.raises(CommandExitException) as info:
            await sbx.commands.run("echo no >&2; exit 3")
        assert info.value.exit_code == 3 and info.value.stderr == "no\n"
        r = await sbx.commands.run("echo $X; pwd; id -un", envs={"X": "y"}, cwd=str(tmp_path))
        assert r.stdout.splitlines() == ["y", str(tmp_path), "root"]
        r = await sbx.commands.run("pwd; id -un", cwd="/tmp", user="nobody")
        assert r.stdout.splitlines() == ["/tmp", "nobody"]
        with pytest.raises(TimeoutException):
            await sbx.commands.run("sleep 4747", timeout=1)
        await until(lambda: asyncio.sleep(0, not pids_with_cmdline("sleep 4747")), 10 * SLOW, "the timeout's kill")

        h = await sbx.commands.run("sleep 0.1; echo bg", background=True)
        assert (await h.wait()).stdout == "bg\n"
        h = await sbx.commands.run("sleep 4848 & sleep 4849; echo never", background=True)
        assert h.pid in [p.pid for p in await sbx.commands.list()]
        assert await sbx.commands.kill(h.pid)
        with pytest.raises(CommandExitException):
            await h.wait()
        await until(lambda: asyncio.sleep(0, not pids_with_cmdline("sleep 484")), 10 * SLOW, "the cgroup's end")

        h = await sbx.commands.run("for i in 1 2 3 4 5; do echo $i; sleep 0.02; done", background=True)
        await h.disconnect()
        await until(lambda: _gone(sbx, h.pid), 20 * SLOW, "the end of the command")
        c = await sbx.commands.connect(h.pid)
        assert (await c.wait()).stdout == "1\n2\n3\n4\n5\n"

        h = await sbx.commands.run("cat", background=True, stdin=True)
        await sbx.commands.send_stdin(h.pid, "async stdin\n")
        await sbx.commands.close_stdin(h.pid)
        assert (await h.wait()).stdout == "async stdin\n"

    run(main())


async def _gone(sbx, pid) -> bool:
    return pid not in [p.pid for p in await sbx.commands.list()]


def test_pty(e2b):
    async def main():
        sbx = await AsyncSandbox.create()
        out = bytearray()
        got = asyncio.Event()

        def on_data(b):
            out.extend(b)
            got.set()

        p = await sbx.pty.create(PtySize(rows=20, cols=70), on_data=on_data)
        await sbx.pty.send_stdin(p.pid, b"stty size\n")
        await until(lambda: asyncio.sleep(0, b"20 70" in out), 10 * SLOW, "stty's answer")
        await sbx.pty.resize(p.pid, PtySize(rows=40, cols=120))
        await sbx.pty.send_stdin(p.pid, b"stty size\n")
        await until(lambda: asyncio.sleep(0, b"40 120" in out), 10 * SLOW, "the new size")
        assert await sbx.pty.kill(p.pid)
        await until(lambda: _gone(sbx, p.pid), 10 * SLOW, "the pty to end")

    run(main())


def test_files_and_watch(e2b, tmp_path):
    d = tmp_path / "async"

    async def main():
        sbx = await AsyncSandbox.create()
        events = []
        d.mkdir()
        w = await sbx.files.watch_dir(str(d), lambda e: events.append((e.name, e.type)), recursive=True)
        await sbx.files.write(f"{d}/a.txt", "async")
        await sbx.files.write(f"{d}/deep/b.bin", b"\x00\xff")
        assert await sbx.files.read(f"{d}/a.txt") == "async"
        assert bytes(await sbx.files.read(f"{d}/deep/b.bin", format="bytes")) == b"\x00\xff"
        listing = await sbx.files.list(str(d), depth=2)
        assert sorted(e.path for e in listing) == sorted([f"{d}/a.txt", f"{d}/deep", f"{d}/deep/b.bin"])
        assert await sbx.files.exists(f"{d}/a.txt")
        info = await sbx.files.get_info(f"{d}/deep")
        assert info.type == FileType.DIR
        assert await sbx.files.make_dir(f"{d}/made")
        await sbx.files.rename(f"{d}/a.txt", f"{d}/made/a.txt")
        await sbx.files.remove(f"{d}/deep")
        want = {("a.txt", FilesystemEventType.CREATE), ("deep", FilesystemEventType.CREATE),
                ("deep/b.bin", FilesystemEventType.CREATE), ("made", FilesystemEventType.CREATE),
                ("a.txt", FilesystemEventType.RENAME), ("made/a.txt", FilesystemEventType.CREATE),
                ("deep", FilesystemEventType.REMOVE)}
        await until(lambda: asyncio.sleep(0, want <= set(events)), 10 * SLOW, f"the watch events ({events})")
        await w.stop()
        entries = []
        w = await sbx.files.watch_dir(str(d), lambda e: entries.append(e), include_entry=True)
        await sbx.files.write(f"{d}/entry.txt", "123")
        await until(lambda: asyncio.sleep(0, any(e.entry and e.name == "entry.txt" for e in entries)), 10 * SLOW,
                    f"an event with its entry ({entries})")
        e = next(e for e in entries if e.entry and e.name == "entry.txt")
        assert e.entry.size == 3 and e.entry.type == FileType.FILE
        await w.stop()

    run(main())
