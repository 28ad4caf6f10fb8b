"""User and group lookups (fs/accounts) where NSS would answer from a module.

This machine's /etc/nsswitch.conf says `passwd: files systemd`. A static
execd that asked NSS had glibc dlopen libnss_systemd into it and crashed
there on the first uid /etc/passwd does not name: a file's info, a
directory archive, an unknown owner name. `make test` runs this file against
the static binary as well (EXECD_BIN=build/execd-static).
"""
from __future__ import annotations

import io
import json
import os
import tarfile
from urllib.parse import quote

import pytest

from execd_client import SLOW

UNNAMED = 54321  # a uid and gid /etc/passwd and /etc/group do not name

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def unnamed_ids() -> None:
    import grp
    import pwd
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(UNNAMED)
            pytest.skip(f"{UNNAMED} has a name on this machine")
        except KeyError:
            pass


@needs_root
def test_file_owned_by_an_unnamed_uid_reads_as_numbers(execd, tmp_path):
    unnamed_ids()
    f = tmp_path / "f"
    f.write_text("x")
    os.chown(f, UNNAMED, UNNAMED)
    st, _, body = execd.request("GET", f"/files/info?path={quote(str(f))}")
    assert st == 200, body
    info = json.loads(body)[str(f)]
    assert info["owner"] == str(UNNAMED) and info["group"] == str(UNNAMED)
    assert execd.ping() == 200


@needs_root
def test_archive_names_known_owners_and_numbers_the_rest(execd, tmp_path):
    unnamed_ids()
    src = tmp_path / "src"
    src.mkdir()
    (src / "mine").write_text("a")
    (src / "theirs").write_text("b")
    os.chown(src / "theirs", UNNAMED, UNNAMED)
    st, _, body = execd.request("GET", f"/files/archive?path={quote(str(src))}", timeout=60 * SLOW)
    assert st == 200, body[:300]
    members = {m.name.lstrip("./"): m for m in tarfile.open(fileobj=io.BytesIO(body)).getmembers()}
    assert members["mine"].uname == "root" and members["mine"].gname == "root"
    assert members["theirs"].uid == UNNAMED and members["theirs"].gid == UNNAMED
    assert members["theirs"].uname == "" and members["theirs"].gname == ""
    assert execd.ping() == 200


@needs_root
def test_archive_of_more_owners_than_execd_keeps_names_for(execd, tmp_path):
    """fs/archive keeps 256 names per kind, then starts over: past that, a
    named owner still reads as its name and an unnamed one as its id."""
    unnamed_ids()
    src = tmp_path / "src"
    src.mkdir()
    for i in range(300):
        f = src / f"u{i:03d}"
        f.write_text("x")
        os.chown(f, UNNAMED + 1 + i, UNNAMED + 1 + i)
    (src / "zz-root").write_text("r")
    st, _, body = execd.request("GET", f"/files/archive?path={quote(str(src))}", timeout=60 * SLOW)
    assert st == 200, body[:300]
    members = {m.name.lstrip("./"): m for m in tarfile.open(fileobj=io.BytesIO(body)).getmembers()}
    assert len([n for n in members if n.startswith("u")]) == 300
    for i in range(300):
        m = members[f"u{i:03d}"]
        assert (m.uid, m.uname, m.gname) == (UNNAMED + 1 + i, "", "")
    assert members["zz-root"].uname == "root" and members["zz-root"].gname == "root"


def test_an_unknown_owner_name_is_refused(execd, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        data = b"hello"
        info = tarfile.TarInfo("f")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    for query in ("owner=no-such-user-here", "group=no-such-group-here"):
        target = tmp_path / query.split("=")[0]
        st, _, body = execd.request("POST", f"/files/archive?path={quote(str(target))}&{query}", buf.getvalue(),
                                    timeout=60 * SLOW)
        assert st == 400, body
        assert not target.exists()
    assert execd.ping() == 200


@needs_root
def test_a_command_as_an_unnamed_uid_gets_no_account(execd):
    unnamed_ids()
    r = execd.run('echo "$(id -u) $(id -g) $(id -G) $HOME"', uid=UNNAMED, gid=UNNAMED)
    assert r.terminal["exit_code"] == 0, r.raw[-500:]
    assert "".join(r.texts("stdout")).split() == [str(UNNAMED)] * 3 + ["/"]


@needs_root
def test_a_command_as_a_named_uid_gets_its_account(execd):
    r = execd.run('echo "$USER $HOME $(id -gn)"', uid=0)
    assert r.terminal["exit_code"] == 0, r.raw[-500:]
    assert "".join(r.texts("stdout")).split() == ["root", "/root", "root"]
