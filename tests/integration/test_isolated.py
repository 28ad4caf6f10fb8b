"""Isolated sessions (/v1/isolated) through the official opensandbox 1.1.1
SDK's isolated adapter (sync), pointed straight at execd: capabilities,
sessions in each workspace mode, foreground and background runs, diff and
commit of an overlay, the session's own files, binds, share_net, env
passthrough and uid/gid. Raw HTTP only where the SDK has no method (diff,
commit) and for the hostile clients."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import re
import shutil
import socket
import stat
import tarfile
import tempfile
import time
import uuid
from types import SimpleNamespace

import pytest
from opensandbox.config import ConnectionConfigSync
from opensandbox.exceptions import SandboxApiException
from opensandbox.models.filesystem import DirectoryListEntry, MoveEntry, SearchEntry, WriteEntry
from opensandbox.models.isolated import (
    BindMount,
    CreateIsolatedSessionRequest,
    EnvPassthroughSpec,
    IsolatedRunOpts,
    IsolatedWorkspaceSpec,
)
from opensandbox.models.sandboxes import SandboxEndpoint
from opensandbox.sync.adapters.factory import AdapterFactorySync

from execd_client import SLOW, TOKEN_HEADER, pids_with_cmdline, process_alive, recv_all, wait_until


def service(ex):
    cfg = ConnectionConfigSync(protocol="http")
    ep = SandboxEndpoint(endpoint=ex.endpoint, headers={TOKEN_HEADER: ex.token})
    return AdapterFactorySync(cfg).create_isolated_session_service(ep)


def stdout(execution) -> str:
    return "".join(m.text + "\n" for m in execution.logs.stdout)


def workspace(tmp_path, mode="rw"):
    ws = tmp_path / f"ws-{mode}"
    ws.mkdir()
    (ws / "base.txt").write_text("from the host\n")
    return CreateIsolatedSessionRequest(workspace=IsolatedWorkspaceSpec(path=str(ws), mode=mode)), ws


@pytest.fixture
def iso(execd_factory, tmp_path):
    ex = execd_factory("--isolated-allowed-paths", str(tmp_path))
    caps = service(ex).capabilities()
    if not caps.available:
        pytest.skip(f"isolation unavailable here: {caps.message}")
    return ex


def test_capabilities_report_what_the_kernel_allows(iso):
    caps = service(iso).capabilities()
    assert caps.available is True
    assert caps.isolator == "linux-namespaces"
    assert caps.version == os.uname().release
    assert caps.diff_supported and caps.commit_supported
    h = caps.hardening
    assert h.init_mode in ("pid1", "subreaper")
    for layer in (h.cap_drop, h.seccomp, h.landlock):
        assert layer.state == "disabled", layer
    # Not upstream's: how sessions see the host's root and whether they may
    # make namespaces (the SDK keeps unknown fields; read raw).
    raw = iso.json("GET", "/v1/isolated/capabilities")[1]
    view = raw["root_view"]
    assert view["mode"] in ("idmapped", "masked") and view["message"], view
    assert str(iso.state_dir) in view["hidden"], view
    assert raw["new_namespaces"]["refused"] is True, raw["new_namespaces"]


def test_namespaces_refused_is_reported_not_faked(execd_factory):
    # As under Docker's default profile: a root without CAP_SYS_ADMIN may
    # not make namespaces.
    ex = execd_factory(wrapper=("setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin"))
    caps = service(ex).capabilities()
    assert caps.available is False
    assert "unshare" in caps.message and "Operation not permitted" in caps.message, caps.message
    with pytest.raises(SandboxApiException) as err:
        service(ex).create(CreateIsolatedSessionRequest(workspace=IsolatedWorkspaceSpec(path="/tmp", mode="rw")))
    assert err.value.status_code == 503
    status, _, body = ex.request("GET", "/v1/isolated/sessions")
    assert status == 503 and b"isolation unavailable" in body


def test_no_isolation_flag(execd_factory):
    ex = execd_factory("--no-isolation")
    caps = service(ex).capabilities()
    assert caps.available is False and "--no-isolation" in caps.message


def test_rw_session_lifecycle_and_shell_state(iso, tmp_path):
    svc = service(iso)
    req, ws = workspace(tmp_path, "rw")
    s = svc.create(req)
    try:
        assert len(s.session_id) >= 32
        e = s.run("pwd; cat base.txt; echo made > new.txt; cd /tmp; export KEEP=kept; echo $$")
        assert e.error is None, e.error
        lines = stdout(e).splitlines()
        assert lines[:2] == [str(ws), "from the host"]
        assert int(lines[2]) < 10, "the shell lives in the session's own pid namespace"
        assert (ws / "new.txt").read_text() == "made\n"  # rw: straight to the host
        e = s.run("pwd; echo $KEEP; hostname; ls /proc | grep -c '^[0-9]'")
        lines = stdout(e).splitlines()
        assert lines[:3] == ["/tmp", "kept", "sandbox"]
        assert int(lines[3]) < 10  # only the session's processes
        e = s.run("touch /usr/x 2>&1; echo rc=$?")
        assert "Read-only file system" in stdout(e) and "rc=1" in stdout(e)
        e = s.run("(exit 3)")
        assert e.error is not None and e.error.value == "3"
        state = s.get()
        assert state.status == "active" and state.workspace.path == str(ws) and state.workspace.mode == "rw"
        assert s.session_id in [x.session_id for x in svc.list()]
        attached = svc.attach(s.session_id)
        assert attached.info.workspace.path == str(ws)
        # `exit` ends the session's shell: the session is over (as a bash session's).
        s.run("exit 0")
        assert s.get().status == "destroyed"
        with pytest.raises(SandboxApiException) as err:
            s.run("echo again")
        assert err.value.status_code == 410
    finally:
        s.delete()
    assert s.session_id not in [x.session_id for x in svc.list()]
    with pytest.raises(SandboxApiException) as err:
        s.get()
    assert err.value.status_code == 404


def test_run_envs_and_timeout(iso, tmp_path):
    req, _ = workspace(tmp_path)
    with service(iso).session(req) as s:
        e = s.run("echo $ONE-$TWO", opts=IsolatedRunOpts(envs={"ONE": "1", "TWO": "it's"}))
        assert stdout(e) == "1-it's\n"
        e = s.run("echo ${ONE:-unset}")
        assert stdout(e) == "unset\n", "run envs are for that run only"
        t0 = time.monotonic()
        e = s.run("sleep 30", opts=IsolatedRunOpts(timeout_seconds=1))
        assert time.monotonic() - t0 < 20 * SLOW
        assert e.error is not None
        e = s.run("echo after")
        assert stdout(e) == "after\n", "the session survives a timed-out run"


def test_overlay_keeps_the_host_unchanged_diff_and_commit(iso, tmp_path):
    req, ws = workspace(tmp_path, "overlay")
    (ws / "gone.txt").write_text("x")
    with service(iso).session(req) as s:
        e = s.run("echo changed > base.txt; echo new > added.txt; rm gone.txt; mkdir d; echo y > d/f; ls")
        assert e.error is None, e.error
        assert sorted(stdout(e).split()) == ["added.txt", "base.txt", "d"]
        assert (ws / "base.txt").read_text() == "from the host\n"
        assert not (ws / "added.txt").exists() and (ws / "gone.txt").exists()
        status, _, body = iso.request("GET", f"/v1/isolated/session/{s.session_id}/diff")
        assert status == 200, body
        diff = json.loads(body)
        changes = {c["path"]: c["change"] for c in diff["changes"]}
        assert changes[f"{ws}/base.txt"] == "modified"
        assert changes[f"{ws}/added.txt"] == "added"
        assert changes[f"{ws}/gone.txt"] == "deleted"
        assert changes[f"{ws}/d"] == "added"
        assert diff["truncated"] is False
        status, headers, blob = iso.request("POST", f"/v1/isolated/session/{s.session_id}/commit")
        assert status == 200, blob[:200]
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tar:
            names = set(tar.getnames())
            assert any(n.endswith("added.txt") for n in names), names
            assert any(n.endswith(".wh.gone.txt") for n in names), names
            member = next(m for m in tar.getmembers() if m.name.endswith("base.txt"))
            assert tar.extractfile(member).read() == b"changed\n"


def test_overlay_without_persist_has_no_diff(iso, tmp_path):
    ws = tmp_path / "eph"
    ws.mkdir()
    req = CreateIsolatedSessionRequest(overlays=[{"path": str(ws), "mode": "overlay", "persist": False}])
    with service(iso).session(req) as s:
        e = s.run("echo x > f && cat f")
        assert stdout(e) == "x\n"
        assert not (ws / "f").exists()
        status, _, body = iso.request("GET", f"/v1/isolated/session/{s.session_id}/diff")
        assert status == 400, body


def test_ro_workspace_refuses_writes(iso, tmp_path):
    req, ws = workspace(tmp_path, "ro")
    with service(iso).session(req) as s:
        e = s.run("cat base.txt; echo no > base.txt")
        assert stdout(e) == "from the host\n"
        assert e.error is not None
        assert (ws / "base.txt").read_text() == "from the host\n"


def test_background_run_status_and_logs(iso, tmp_path):
    req, ws = workspace(tmp_path)
    with service(iso).session(req) as s:
        gate = ws / "gate"
        bg = s.run_background(f"echo first; while [ ! -e {gate} ]; do sleep 0.05; done; echo second; exit 4")
        assert bg.session_id == s.session_id and bg.run_id
        wait_until(lambda: s.run_logs(bg.run_id).text == "first\n", 10 * SLOW, what="first line")
        st = s.run_status(bg.run_id)
        assert st.running is True and st.exit_code is None
        # Foreground runs go on meanwhile (the background run is its own process).
        assert stdout(s.run("echo fg")) == "fg\n"
        gate.write_text("")
        wait_until(lambda: not s.run_status(bg.run_id).running, 10 * SLOW, what="the run to end")
        st = s.run_status(bg.run_id)
        assert st.exit_code == 4 and st.finished_at is not None
        logs = s.run_logs(bg.run_id)
        assert logs.text == "first\nsecond\n"
        assert s.run_logs(bg.run_id, cursor=6).text == "second\n"
        assert s.run_logs(bg.run_id, cursor=logs.cursor).text == ""
        with pytest.raises(SandboxApiException) as err:
            s.run_status("no-such-run")
        assert err.value.status_code == 404


def test_session_files_are_the_sessions_view(iso, tmp_path):
    req, ws = workspace(tmp_path, "overlay")
    with service(iso).session(req) as s:
        files = s.files
        files.write_file(f"{ws}/via-api.txt", "api\n")
        assert not (ws / "via-api.txt").exists(), "written into the overlay, not the host"
        assert stdout(s.run("cat via-api.txt")) == "api\n"
        s.run("echo from-run > run.txt")
        assert files.read_file(f"{ws}/run.txt") == "from-run\n"
        # The session's /tmp (profile strict: its own tmpfs) is not the host's.
        s.run("echo secret > /tmp/only-inside")
        assert files.read_file("/tmp/only-inside") == "secret\n"
        assert not os.path.exists("/tmp/only-inside")
        info = files.get_file_info([f"{ws}/base.txt"])
        assert info[f"{ws}/base.txt"].size == len("from the host\n")
        files.create_directories([WriteEntry(path=f"{ws}/sub", mode=755)])
        files.move_files([MoveEntry(src=f"{ws}/via-api.txt", dest=f"{ws}/sub/moved.txt")])
        names = sorted(e.path for e in files.list_directory(DirectoryListEntry(path=ws_str(ws), depth=2)))
        assert f"{ws}/sub/moved.txt" in names and f"{ws}/via-api.txt" not in names, names
        found = [e.path for e in files.search(SearchEntry(path=str(ws), pattern="*.txt"))]
        assert sorted(found) == sorted([f"{ws}/base.txt", f"{ws}/run.txt", f"{ws}/sub/moved.txt"]), found
        files.delete_files([f"{ws}/base.txt"])
        assert stdout(s.run("ls")) == "run.txt\nsub\n"
        assert (ws / "base.txt").exists(), "deleted in the overlay only"
        r = iso.request("GET", f"/v1/isolated/session/{s.session_id}/diff")
        changes = {c["path"]: c["change"] for c in json.loads(r[2])["changes"]}
        assert changes[f"{ws}/base.txt"] == "deleted" and changes[f"{ws}/sub"] == "added", changes


def ws_str(ws) -> str:
    return str(ws)


def test_binds_and_their_allowlist(iso, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("bound\n")
    ro = tmp_path / "ro"
    ro.mkdir()
    extra = tmp_path / "extra"
    extra.mkdir()
    req, _ = workspace(tmp_path)
    req.binds = [BindMount(source=str(data), dest="/tmp/data"), BindMount(source=str(ro), readonly=True)]
    req.extra_writable = [str(extra)]
    with service(iso).session(req) as s:
        assert s.run(f"echo e > {extra}/e").error is None
        assert (extra / "e").read_text() == "e\n"
        assert stdout(s.run("cat /tmp/data/in.txt; echo w > /tmp/data/out.txt")) == "bound\n"
        assert (data / "out.txt").read_text() == "w\n"
        e = s.run(f"echo w > {ro}/x")
        assert e.error is not None and not (ro / "x").exists()
    req2 = CreateIsolatedSessionRequest(workspace=IsolatedWorkspaceSpec(path=str(tmp_path), mode="rw"),
                                        binds=[BindMount(source="/etc", dest="/tmp/etc")])
    with pytest.raises(SandboxApiException) as err:
        service(iso).create(req2)
    assert err.value.status_code == 400 and "allowlist" in str(err.value)


def test_share_net_false_has_only_loopback(iso, tmp_path):
    req, _ = workspace(tmp_path)
    req.share_net = False
    with service(iso).session(req) as s:
        e = s.run("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
        assert stdout(e).split() == ["lo"]
    req.share_net = True
    with service(iso).session(req) as s:
        e = s.run("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
        assert len(stdout(e).split()) >= 1
        with open("/proc/net/dev") as f:
            assert sorted(stdout(e).split()) == sorted(l.split(":")[0].strip() for l in f.readlines()[2:])


# What a session sends to execd's ports on the loopback it shares (share_net,
# true by default as upstream's): each answer's status, without a token and
# with the one given as argv[3].
LOOPBACK_PROBE = """import http.client, sys
main, envd, token = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
for port, method, path in ((main, "POST", "/command"), (main, "GET", "/v1/isolated/sessions"),
                           (main, "GET", "/files/info?path=/"), (envd, "POST", "/process.Process/List")):
    for headers in ({}, {"X-EXECD-ACCESS-TOKEN": token}):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request(method, path, body=b"{}", headers={"Content-Type": "application/json", **headers})
        print(port == envd and "envd" or "main", path, "token" if headers else "none", c.getresponse().status)
        c.close()
"""


def test_loopback_reaches_execds_ports_but_not_without_the_token(execd_factory, tmp_path):
    from e2b_support import listener_url
    ex = execd_factory("--isolated-allowed-paths", str(tmp_path), "--envd-port", "0")
    if not caps_raw(ex)["available"]:
        pytest.skip("isolation unavailable here")
    envd_port = int(listener_url(ex).rsplit(":", 1)[1])
    req, ws = workspace(tmp_path)
    (ws / "probe.py").write_text(LOOPBACK_PROBE)
    assert req.share_net is None or req.share_net is True  # the default is the host's network
    with service(ex).session(req) as s:
        out = out_of(s, f"python3 probe.py {ex.port} {envd_port} {ex.token}")
    lines = out.splitlines()
    # Without the token, every route on both listeners: 401.
    assert [l for l in lines if " none " in l] == [
        "main /command none 401", "main /v1/isolated/sessions none 401", "main /files/info?path=/ none 401",
        "envd /process.Process/List none 401"], out
    # The control: the same requests do reach execd (the token is what stands in the way).
    assert all(not l.endswith(" 401") for l in lines if " token " in l) and len(lines) == 8, out


def test_env_passthrough(execd_factory, tmp_path):
    env = dict(os.environ, PLAIN_VALUE="plain", MY_API_KEY="k", OTHER="o")
    ex = execd_factory(env=env)
    if not service(ex).capabilities().available:
        pytest.skip("isolation unavailable here")
    req, _ = workspace(tmp_path)
    show = "echo ${PLAIN_VALUE:-none} ${MY_API_KEY:-none} ${OTHER:-none}"
    with service(ex).session(req) as s:
        assert stdout(s.run(show)) == "plain none o\n", "credential-looking keys stay out by default"
    req.env_passthrough = EnvPassthroughSpec(mode="allow", keys=["PLAIN_VALUE", "MY_API_KEY"])
    with service(ex).session(req) as s:
        assert stdout(s.run(show)) == "plain k none\n"
    req.env_passthrough = EnvPassthroughSpec(mode="deny", keys=["OTHER"])
    with service(ex).session(req) as s:
        assert stdout(s.run(show)) == "plain k none\n"


def test_uid_setpriv_and_userns(iso, tmp_path):
    ws = tmp_path / "ids"
    ws.mkdir()
    os.chmod(ws, 0o777)
    req = CreateIsolatedSessionRequest(workspace=IsolatedWorkspaceSpec(path=str(ws), mode="rw"), uid=65534,
                                       gid=65534)
    with service(iso).session(req) as s:
        assert stdout(s.run("id -u; id -g; touch mine; grep CapEff /proc/self/status")) == \
            "65534\n65534\nCapEff:\t0000000000000000\n"
        st = (ws / "mine").stat()
        assert (st.st_uid, st.st_gid) == (65534, 65534)
        bg = s.run_background("id -u")
        wait_until(lambda: not s.run_status(bg.run_id).running, 10 * SLOW, what="background id")
        assert s.run_logs(bg.run_id).text == "65534\n"
    caps = service(iso).capabilities()
    if not caps.userns_available:
        return
    req.uid_mode = "userns"
    req.uid, req.gid = 1000, 1000
    with service(iso).session(req) as s:
        assert stdout(s.run("id -u; id -g; touch userns-file; unshare -U true 2>/dev/null || echo no-nested")) == \
            "1000\n1000\nno-nested\n"
        st = (ws / "userns-file").stat()
        assert st.st_uid == os.geteuid(), "inside 1000, on the host execd's own uid"


def test_validation_and_unknown_sessions(iso, tmp_path):
    for body, word in [({}, "workspace"), ({"workspace": {"path": "relative"}}, "absolute"),
                       ({"workspace": {"path": "/tmp", "mode": "weird"}}, "mode"),
                       ({"workspace": {"path": "/tmp"}, "uid_mode": "nope"}, "uid_mode")]:
        status, _, text = iso.request("POST", "/v1/isolated/session", body,
                                      headers={"Content-Type": "application/json"})
        text = text.decode()
        assert status == 400, (body, text)
        assert word in text, (body, text)
    for method, path in [("GET", "/v1/isolated/session/nope"), ("DELETE", "/v1/isolated/session/nope"),
                         ("POST", "/v1/isolated/session/nope/run"), ("GET", "/v1/isolated/session/nope/runs/x"),
                         ("GET", "/v1/isolated/session/nope/diff"),
                         ("GET", "/v1/isolated/session/nope/files/info?path=/tmp")]:
        body = b'{"code":"true"}' if method == "POST" else None
        status, _, text = iso.request(method, path, body)
        assert status == 404, (method, path, status, text)


# ---- hostile clients --------------------------------------------------------------------------------

def raw(ex, data: bytes, read=True, reset=False):
    s = socket.create_connection((ex.host, ex.port), timeout=10 * SLOW)
    s.sendall(data)
    out = b""
    if read:
        try:
            while chunk := s.recv(65536):
                out += chunk
                if reset:
                    break
        except socket.timeout:
            pass
    if reset:
        import struct
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
    return out


def request_bytes(ex, method, path, body=b"", token=True):
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
    if token:
        head += f"{TOKEN_HEADER}: {ex.token}\r\n"
    head += f"Content-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def test_no_token_is_refused_everywhere(iso):
    for method, path in [("GET", "/v1/isolated/capabilities"), ("POST", "/v1/isolated/session"),
                         ("GET", "/v1/isolated/sessions"), ("DELETE", "/v1/isolated/session/x"),
                         ("POST", "/v1/isolated/session/x/run"), ("GET", "/v1/isolated/session/x/diff"),
                         ("POST", "/v1/isolated/session/x/commit"),
                         ("GET", "/v1/isolated/session/x/files/download?path=/etc/hostname")]:
        status, _, _ = iso.request(method, path, b"{}" if method == "POST" else None, token=False)
        assert status == 401, (method, path, status)


def test_garbage_bodies(iso, tmp_path):
    req, ws = workspace(tmp_path)
    s = service(iso).create(req)
    try:
        for path in ["/v1/isolated/session", f"/v1/isolated/session/{s.session_id}/run"]:
            for body in [b"\x00\xff garbage", b"[1,2", b'{"code": 5}', b'{"workspace": []}', b"null",
                         b'{"code":"x","background":"yes"}', b"{" * 5000]:
                status, _, text = iso.request("POST", path, body, headers={"Content-Type": "application/json"})
                assert status == 400, (path, body[:20], status, text)
        assert stdout(s.run("echo alive")) == "alive\n"
    finally:
        s.delete()


def test_clients_that_vanish_at_each_phase(iso, tmp_path):
    req, ws = workspace(tmp_path, "overlay")
    create = json.dumps({"workspace": {"path": str(ws), "mode": "overlay"}}).encode()
    svc = service(iso)
    # Creation: the client leaves before the answer; the session must not linger.
    # Each client half-closes after its request (execd takes that for a
    # disconnect) and can still see whether an answer beat it: under load a
    # creation may finish first, and that session is the client's to delete.
    # Every one of the five, abandoned or deleted, logs its end.
    abandoned = 0
    for _ in range(5):
        sock = socket.create_connection((iso.host, iso.port), timeout=30 * SLOW)
        sock.sendall(request_bytes(iso, "POST", "/v1/isolated/session", create))
        sock.shutdown(socket.SHUT_WR)
        answer = recv_all(sock)
        sock.close()
        if not answer:
            abandoned += 1
            continue
        head, _, body = answer.partition(b"\r\n\r\n")
        assert b" 201 " in head.split(b"\r\n")[0], answer
        svc.delete(json.loads(body)["session_id"])
    assert abandoned > 0, "every creation was answered before its client left"
    ended = re.compile(r"isolated session [0-9a-f-]+ ended$", re.M)
    wait_until(lambda: len(ended.findall(iso.stderr_text())) == 5, 20 * SLOW, what="the five creations to end")
    assert svc.list() == []
    s = svc.create(req)
    sid = s.session_id
    try:
        big = json.dumps({"code": "head -c 20000000 /dev/zero | base64"}).encode()
        for reset in (False, True):
            # A foreground run whose client leaves after the head, and one that never reads.
            raw(iso, request_bytes(iso, "POST", f"/v1/isolated/session/{sid}/run", big), read=True, reset=reset)
            raw(iso, request_bytes(iso, "POST", f"/v1/isolated/session/{sid}/run", big), read=False)
            wait_until(lambda: not s.get() or stdout_ok(s), 60 * SLOW, what="the session to be free again")
        s.run("seq 1 100000 > big.txt")
        bg = s.run_background("cat big.txt big.txt big.txt")
        wait_until(lambda: not s.run_status(bg.run_id).running, 20 * SLOW, what="the background run")
        for _ in range(3):
            raw(iso, request_bytes(iso, "GET", f"/v1/isolated/session/{sid}/runs/{bg.run_id}/logs"), read=True,
                reset=True)
            raw(iso, request_bytes(iso, "GET", f"/v1/isolated/session/{sid}/diff"), read=False)
            raw(iso, request_bytes(iso, "POST", f"/v1/isolated/session/{sid}/commit"), read=True, reset=True)
            raw(iso, request_bytes(iso, "GET", f"/v1/isolated/session/{sid}/files/download?path={ws}/big.txt"),
                read=True, reset=True)
        # A slow reader of a commit: it gets all of it, in order, however slowly it reads.
        sock = socket.create_connection((iso.host, iso.port), timeout=30 * SLOW)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(request_bytes(iso, "POST", f"/v1/isolated/session/{sid}/commit"))
        data = b""
        while chunk := sock.recv(1024):
            data += chunk
        sock.close()
        head, _, body = data.partition(b"\r\n\r\n")
        assert b" 200 " in head.split(b"\r\n")[0]
        assert b"big.txt" in gzip.decompress(dechunk(body)) if b"chunked" in head.lower() else True
        assert stdout(s.run("echo still")) == "still\n"
    finally:
        s.delete()
    assert iso.ping() == 200


def stdout_ok(s) -> bool:
    try:
        return stdout(s.run("echo ok")) == "ok\n"
    except SandboxApiException as e:
        if e.status_code == 409:
            return False
        raise


def dechunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, body = body.partition(b"\r\n")
        n = int(size_line.split(b";")[0], 16)
        if n == 0:
            break
        out += body[:n]
        body = body[n + 2:]
    return out


def test_delete_kills_everything_in_the_session(iso, tmp_path):
    req, ws = workspace(tmp_path)
    s = service(iso).create(req)
    bg = s.run_background("sleep 1000 & echo $!; wait")
    wait_until(lambda: s.run_logs(bg.run_id).text.strip() != "", 10 * SLOW, what="the pid")
    marker = f"isolated-{s.session_id}"
    s.run_background(f"exec -a {marker} sleep 1000")
    wait_until(lambda: pids_with_cmdline(marker), 10 * SLOW, what="the marked process")
    s.delete()
    wait_until(lambda: not pids_with_cmdline(marker), 10 * SLOW, what="every process of the session to be gone")


def test_idle_timeout_ends_the_session(iso, tmp_path):
    req, _ = workspace(tmp_path)
    req.idle_timeout_seconds = 1
    svc = service(iso)
    s = svc.create(req)
    assert s.get().idle_remaining_seconds in (0, 1)
    wait_until(lambda: s.session_id not in [x.session_id for x in svc.list()], 15 * SLOW, what="the idle session to go")
    with pytest.raises(SandboxApiException) as err:
        s.run("true")
    assert err.value.status_code == 404


def test_session_limit(execd_factory, tmp_path):
    ex = execd_factory("--max-isolated-sessions", "1")
    svc = service(ex)
    if not svc.capabilities().available:
        pytest.skip("isolation unavailable here")
    req, _ = workspace(tmp_path)
    with svc.session(req):
        with pytest.raises(SandboxApiException) as err:
            svc.create(req)
        assert err.value.status_code == 429
    with svc.session(req) as s:
        assert stdout(s.run("echo room")) == "room\n"


def test_second_foreground_run_is_busy(iso, tmp_path):
    import threading
    req, ws = workspace(tmp_path)
    gate = ws / "gate"
    with service(iso).session(req) as s:
        first = {}
        t = threading.Thread(target=lambda: first.update(
            e=s.run(f"echo on; touch started; while [ ! -e {gate} ]; do sleep 0.05; done")))
        t.start()
        wait_until(lambda: (ws / "started").exists(), 10 * SLOW, what="the first run")
        assert _busy(iso, s.session_id)
        gate.write_text("")
        t.join(30 * SLOW)
        assert stdout(first["e"]) == "on\n"
        assert stdout(s.run("echo free")) == "free\n"


def test_runs_count_against_max_running(execd_factory, tmp_path):
    """Isolated runs start through the one launch path: a background run
    fills --max-running 1, and the next run of either kind is refused
    (429, naming the flag) before anything of it exists; once the run is
    gone the session takes runs again."""
    ex = execd_factory("--max-running", "1", "--isolated-allowed-paths", str(tmp_path))
    svc = service(ex)
    if not svc.capabilities().available:
        pytest.skip("isolation unavailable here")
    req, ws = workspace(tmp_path)
    with svc.session(req) as s:
        sid = s.session_id
        st, js = ex.json("POST", f"/v1/isolated/session/{sid}/run", {"code": "sleep 300", "background": True})
        assert st == 202, js
        run_id = js["run_id"]
        for body in ({"code": f"touch {ws}/fg"}, {"code": f"touch {ws}/bg", "background": True}):
            st, js = ex.json("POST", f"/v1/isolated/session/{sid}/run", body)
            assert st == 429 and js["code"] == "LIMIT_REACHED" and "--max-running" in js["message"], (body, st, js)
        assert not (ws / "fg").exists() and not (ws / "bg").exists()
        assert ex.request("DELETE", f"/command?id={run_id}")[0] == 200
        wait_until(lambda: ex.json("GET", f"/command/status/{run_id}")[1].get("running") is False, 10 * SLOW, 0.02,
                   "the background run to end")
        assert stdout(s.run("echo again")) == "again\n"


def _busy(ex, sid) -> bool:
    status, _, body = ex.request("POST", f"/v1/isolated/session/{sid}/run", {"code": "echo second"})
    if status == 409:
        assert b"SESSION_BUSY" in body
        return True
    return False


def test_async_adapter(iso, tmp_path):
    import asyncio

    from opensandbox.adapters.factory import AdapterFactory
    from opensandbox.config import ConnectionConfig

    req, ws = workspace(tmp_path, "overlay")

    async def main():
        cfg = ConnectionConfig(protocol="http").with_transport_if_missing()
        ep = SandboxEndpoint(endpoint=iso.endpoint, headers={TOKEN_HEADER: iso.token})
        svc = AdapterFactory(cfg).create_isolated_session_service(ep)
        try:
            assert (await svc.capabilities()).available
            s = await svc.create(req)
            try:
                e = await s.run("echo async > a.txt; cat a.txt base.txt")
                assert [m.text for m in e.logs.stdout] == ["async", "from the host"]
                bg = await s.run_background("echo bg")
                while (await s.run_status(bg.run_id)).running:
                    await asyncio.sleep(0.02)
                assert (await s.run_logs(bg.run_id)).text == "bg\n"
            finally:
                await s.delete()
            assert [x for x in await svc.list() if x.session_id == s.session_id] == []
        finally:
            await svc._sse_client.aclose()
            await svc._httpx_client.aclose()
            await cfg.close_transport_if_owned()

    asyncio.run(main())
    assert not (ws / "a.txt").exists()


def test_runs_in_a_rw_workspace_list_what_they_changed(iso, tmp_path):
    """track_changes on isolated runs (issue 29): foreground and background
    runs list what they changed in a rw workspace; a root in a read-only
    mount is refused, not answered with an empty list."""
    svc = service(iso)
    req, ws = workspace(tmp_path, "rw")
    sid = svc.create(req).session_id
    ro_req, ro_ws = workspace(tmp_path, "ro")
    rid = svc.create(ro_req).session_id
    try:
        st, events = isolated_run(iso, sid, {"code": f"cd {ws} && echo made > made.txt && rm base.txt",
                                             "track_changes": [str(ws)]})
        assert st == 200, events
        changes = events[-1]["changes"]
        by_path = {e["path"]: e for e in changes["entries"]}
        assert by_path[str(ws / "made.txt")]["change"] == "created"
        assert by_path[str(ws / "base.txt")]["change"] == "removed"
        assert (ws / "made.txt").read_text() == "made\n"
        st, js = iso.json("POST", f"/v1/isolated/session/{sid}/run",
                          {"code": f"echo bg > {ws}/bg.txt", "background": True, "track_changes": [str(ws)]})
        assert st == 202, js
        run_id = js["run_id"]
        wait_until(lambda: iso.json("GET", f"/command/status/{run_id}")[1].get("running") is False, 10 * SLOW, 0.02,
                   "the background run")
        st, status = iso.json("GET", f"/command/status/{run_id}")
        assert [e["path"] for e in status["changes"]["entries"]] == [str(ws / "bg.txt")]
        st, js = iso.json("POST", f"/v1/isolated/session/{rid}/run", {"code": "true", "track_changes": [str(ro_ws)]})
        assert st == 400 and "cannot track" in js["message"], js
    finally:
        for session in (sid, rid):
            assert iso.request("DELETE", f"/v1/isolated/session/{session}")[0] == 200


def isolated_run(ex, session, body):
    st, _, raw = ex.request("POST", f"/v1/isolated/session/{session}/run", body,
                            headers={"Accept": "application/x-ndjson"})
    return st, [json.loads(line) for line in raw.decode().splitlines() if line.strip()]


@pytest.mark.parametrize("persist", [True, False], ids=["persistent", "ephemeral"])
def test_runs_in_an_overlay_list_what_they_changed_as_the_session_sees_it(iso, tmp_path, persist):
    """A root in an overlay (persistent or tmpfs-backed) is watched inside
    the session's mount namespace: the list names the session's paths and
    says created / modified / removed as the session saw them, while the
    host's lower directory stays as it was. Ending the session lets go of
    its watch at once (no --watch-retention wait)."""
    ws = tmp_path / "ws-overlay"
    (ws / "src").mkdir(parents=True)
    (ws / "base.txt").write_text("from the host\n")
    (ws / "old.txt").write_text("old\n")
    (ws / "src" / "keep.c").write_text("int x;\n")
    watches_before = iso.json("GET", "/activity")[1]["watches"]["open"]
    sid = service(iso).create(CreateIsolatedSessionRequest(
        overlays=[{"path": str(ws), "mode": "overlay", "persist": persist}])).session_id
    deleted = False
    try:
        script = (f"cd {ws} && echo made > new.txt && echo more >> base.txt && rm old.txt"
                  f" && mv src/keep.c src/moved.c && mkdir -p deep/er && echo x > deep/er/f")
        st, events = isolated_run(iso, sid, {"code": script, "track_changes": [str(ws)]})
        assert st == 200, events
        assert events[-1]["type"] == "execution_complete" and events[-1]["exit_code"] == 0, events
        by_path = {e["path"]: e for e in events[-1]["changes"]["entries"]}
        assert by_path[str(ws / "new.txt")]["change"] == "created"
        assert by_path[str(ws / "new.txt")]["sha256"] == hashlib.sha256(b"made\n").hexdigest()
        assert by_path[str(ws / "base.txt")]["change"] == "modified"
        assert by_path[str(ws / "base.txt")]["size"] == len("from the host\nmore\n")
        assert by_path[str(ws / "old.txt")]["change"] == "removed"
        assert by_path[str(ws / "deep/er/f")]["change"] == "created"
        assert by_path[str(ws / "src/moved.c")]["change"] == "renamed", by_path
        assert by_path[str(ws / "src/moved.c")]["from"] == str(ws / "src/keep.c")
        # The host's tree is the lower: untouched.
        assert sorted(p.name for p in ws.iterdir()) == ["base.txt", "old.txt", "src"]
        assert (ws / "base.txt").read_text() == "from the host\n"
        # A second run lists only its own changes.
        st, events = isolated_run(iso, sid, {"code": f"rm {ws}/new.txt", "track_changes": [str(ws)]})
        assert [(e["path"], e["change"]) for e in events[-1]["changes"]["entries"]] == \
            [(str(ws / "new.txt"), "removed")]
        assert iso.json("GET", "/activity")[1]["watches"]["open"] == watches_before + 1
        assert iso.request("DELETE", f"/v1/isolated/session/{sid}")[0] == 200
        deleted = True
        wait_until(lambda: iso.json("GET", "/activity")[1]["watches"]["open"] == watches_before, 10 * SLOW, 0.02,
                   "the session's watch to close")
    finally:
        if not deleted:
            iso.request("DELETE", f"/v1/isolated/session/{sid}")


def test_a_tracked_root_renamed_inside_a_session_is_followed(iso, tmp_path):
    """The root of a tracked run renamed by the run itself, inside the
    session: the watch finds its new name as the session names it (the
    pool job looks from inside the session's mount namespace), and what the
    run did afterwards is listed under that name."""
    req, ws = workspace(tmp_path, "rw")
    (ws / "sub").mkdir()
    sid = service(iso).create(req).session_id
    try:
        st, events = isolated_run(iso, sid, {"code": f"cd {ws} && mv sub renamed && echo after > renamed/f",
                                             "track_changes": [str(ws / "sub")]})
        assert st == 200, events
        entries = events[-1]["changes"]["entries"]
        assert str(ws / "renamed" / "f") in [e["path"] for e in entries], entries
        assert (ws / "renamed" / "f").read_text() == "after\n"
    finally:
        assert iso.request("DELETE", f"/v1/isolated/session/{sid}")[0] == 200


# ---- What a session can and cannot do ------------------------------------------------------------
#
# A session's processes are uid 0 (or the uid they are given) without
# capabilities; each test tries, from inside, what a session must not do,
# next to a control that shows the attempt is a real one (the same thing
# done by execd's plain /command on the host, or by a session made otherwise).

def caps_raw(ex) -> dict:
    return ex.json("GET", "/v1/isolated/capabilities")[1]


def out_of(s, code: str) -> str:
    """stdout and stderr of a foreground run, merged."""
    return stdout(s.run(f"{{\n{code}\n}} 2>&1"))


def host_sh(ex, command: str, **fields) -> str:
    """What execd's plain /command (on the host, as root unless told) prints."""
    r = ex.run(command + " 2>&1", exact=True, **fields)
    assert r.status == 200, r.raw[:300]
    return r.stdout.decode()


@pytest.fixture
def host_secret():
    """Root-only things on the host's root file system, outside /tmp and
    /run (which sessions replace): a 0600 file and a 0700 directory."""
    d = tempfile.mkdtemp(dir="/var/tmp", prefix="execd-iso-secret-")
    os.chmod(d, 0o755)
    secret = os.path.join(d, "secret")
    with open(secret, "w") as f:
        f.write("root only\n")
    os.chmod(secret, 0o600)
    private = os.path.join(d, "private")
    os.mkdir(private, 0o700)
    with open(os.path.join(private, "inside"), "w") as f:
        f.write("x")
    yield SimpleNamespace(dir=d, file=secret, private=private)
    shutil.rmtree(d)


# execd in a mount namespace whose root is an overlayfs (as in most
# containers): lower, this root; upper, a tmpfs; /proc, /dev, /sys and /tmp
# bound from here. pivot_root, not chroot: a chrooted process may not make
# the user namespace an ID mapping needs.
OVERLAY_ROOT = """set -e
t="$1"; shift
mount -t tmpfs tmpfs "$t"
mkdir "$t/u" "$t/w" "$t/m"
mount -t overlay overlay -o "lowerdir=/,upperdir=$t/u,workdir=$t/w" "$t/m"
for d in proc dev sys tmp; do mount --rbind "/$d" "$t/m/$d"; done
mkdir "$t/m/.old"
cd "$t/m"
pivot_root . .old
umount -l /.old
exec "$@"
"""


def view_execd(execd_factory, tmp_path, view, *args, **kw):
    """An execd whose sessions see the host's root through `view`:
    idmapped or masked asked for, or overlay-root: auto, on an overlayfs root."""
    if view == "overlay-root":
        if not shutil.which("pivot_root") or not shutil.which("unshare"):
            pytest.skip("no pivot_root or unshare here")
        script = tmp_path / "overlay-root.sh"
        script.write_text(OVERLAY_ROOT)
        (tmp_path / "overlay-root").mkdir()
        kw["wrapper"] = ("unshare", "-m", "--propagation", "private", "sh", str(script),
                         str(tmp_path / "overlay-root"))
    else:
        args = ("--isolated-root-view", view, *args)
    ex = execd_factory("--isolated-allowed-paths", str(tmp_path), *args, **kw)
    caps = caps_raw(ex)
    if not caps["available"]:
        pytest.skip(f"isolation (root view {view}) unavailable here: {caps.get('message')}")
    if view == "overlay-root":
        # Where the root cannot be ID-mapped, auto falls back to masked, and says why.
        assert caps["root_view"]["mode"] == "masked", caps["root_view"]
        assert "overlayfs" in caps["root_view"]["message"], caps["root_view"]
        assert "/etc/shadow" in caps["root_view"]["hidden"], caps["root_view"]
    else:
        assert caps["root_view"]["mode"] == view, caps["root_view"]
    return ex, caps


@pytest.mark.parametrize("view,uid_mode", [("idmapped", "setpriv"), ("idmapped", "userns"), ("masked", "setpriv"),
                                           ("overlay-root", "setpriv")])
def test_cannot_read_root_only_host_files(execd_factory, tmp_path, host_secret, view, uid_mode):
    ex, caps = view_execd(execd_factory, tmp_path, view)
    if uid_mode == "userns" and not caps["userns_available"]:
        pytest.skip("uid_mode userns unavailable here")
    # Control: the host's root reads all of it.
    assert host_sh(ex, f"cat {host_secret.file}; ls {host_secret.private}; head -c 5 /etc/shadow") == \
        "root only\ninside\n" + open("/etc/shadow").read()[:5]
    req, _ = workspace(tmp_path)
    req.uid_mode = uid_mode
    with service(ex).session(req) as s:
        out = out_of(s, f"id -u; cat /etc/shadow; cat {host_secret.file}; ls {host_secret.private}; "
                        f"stat -c %U:%G {host_secret.file} /etc/shadow /")
        lines = out.splitlines()
        assert lines[0] == "0", out
        assert "cat: /etc/shadow: Permission denied" in out, out
        if view == "idmapped":
            # The host's root owns nothing here: its files are nobody's, and
            # only their "other" bits count, for uid 0 as for anyone.
            assert f"{host_secret.file}: Permission denied" in out, out
            assert f"{host_secret.private}': Permission denied" in out, out
            assert "root only" not in out and "inside" not in out, out
            # (/etc/shadow's group, shadow, is a group of a userns session's
            # namespace only if it maps it: uid_mode userns maps one.)
            shadow_group = "shadow" if uid_mode == "setpriv" else "nogroup"
            assert lines[-3:] == ["nobody:nogroup", f"nobody:{shadow_group}", "nobody:nogroup"], out
        else:
            # Masked: the list is hidden (/etc/shadow is on it), and that is
            # all: a root-only file elsewhere stays readable (the README says so).
            assert "root only" in out and "inside" in out, out


def test_default_session_cannot_read_a_root_only_file_in_etc(iso, tmp_path):
    # execd's defaults (--isolated-root-view auto): a 0600 file of the host
    # root's in /etc, as a credential dropped there would be.
    secret = f"/etc/execd-test-secret-{uuid.uuid4().hex[:8]}"
    fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"root only\n")
        os.close(fd)
        assert host_sh(iso, f"cat {secret}") == "root only\n"  # the control: the host's root reads it
        req, _ = workspace(tmp_path)
        with service(iso).session(req) as s:
            out = out_of(s, f"id -u; cat {secret}")
        if caps_raw(iso).get("root_view", {}).get("mode") == "masked":
            pytest.skip("the root here refuses an ID mapping: masked covers a fixed list only (README)")
        assert out == f"0\ncat: {secret}: Permission denied\n", out
    finally:
        os.unlink(secret)


@pytest.mark.parametrize("view", ["idmapped", "masked"])
def test_can_read_world_readable_host_files_and_run_host_programs(execd_factory, tmp_path, view):
    ex, _ = view_execd(execd_factory, tmp_path, view)
    req, _ = workspace(tmp_path)
    with service(ex).session(req) as s:
        out = out_of(s, "cat /etc/hostname; python3 -c 'print(6 * 7)'; /usr/bin/env true && echo ran; "
                        "stat -c %U /usr/bin/env")
    with open("/etc/hostname") as f:
        hostname = f.read()
    assert out == hostname + "42\nran\n" + ("nobody\n" if view == "idmapped" else "root\n"), out


@pytest.mark.parametrize("profile", ["strict", "balanced"])
def test_cannot_read_execds_secrets(execd_factory, tmp_path, host_secret, profile):
    # A token file on the host's root (outside /tmp and /run), and one in
    # the host's /tmp, which profile balanced shares with the session.
    token, envd_token = uuid.uuid4().hex, uuid.uuid4().hex
    token_file = os.path.join(host_secret.dir, "token")
    envd_file = tmp_path / "envd-token"
    for path, value in ((token_file, token), (envd_file, envd_token)):
        with open(path, "w") as f:
            f.write(value + "\n")
        os.chmod(path, 0o600)
    neighbour = tmp_path / "neighbour"
    neighbour.write_text("next to it\n")
    # The state directory on the host's root too (under /tmp a strict
    # session would not have it anyway).
    ex = execd_factory("--isolated-allowed-paths", str(tmp_path), "--access-token-file", token_file,
                       "--envd-access-token-file", str(envd_file), token=None,
                       state_dir=os.path.join(host_secret.dir, "state"))
    ex.token = token
    caps = caps_raw(ex)
    if not caps["available"]:
        pytest.skip(f"isolation unavailable here: {caps.get('message')}")
    assert {token_file, str(envd_file), str(ex.state_dir)} <= set(caps["root_view"]["hidden"]), caps["root_view"]
    # Control: the host's root reads them.
    assert host_sh(ex, f"cat {token_file} {envd_file}") == f"{token}\n{envd_token}\n"
    req, _ = workspace(tmp_path)
    req.profile = profile
    with service(ex).session(req) as s:
        out = out_of(s, f"cat {token_file}; cat {envd_file}; cat {neighbour}; ls -A {ex.state_dir}; env")
    assert token not in out and envd_token not in out, out
    assert f"{token_file}: Permission denied" in out, out
    if profile == "balanced":
        # The host's /tmp is the session's, but not the token file in it.
        assert f"{envd_file}: Permission denied" in out and "next to it" in out, out
    else:
        assert f"{envd_file}: No such file" in out and "next to it" not in out, out
    assert f"'{ex.state_dir}': Permission denied" in out, out


def writable_sysfs_file() -> str | None:
    for top in ("/sys/kernel", "/sys/fs/cgroup", "/sys/module"):
        for root, dirs, files in os.walk(top):
            for name in files:
                p = os.path.join(root, name)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode) and st.st_mode & stat.S_IWUSR and st.st_uid == 0:
                    return p
    return None


def test_cannot_write_outside_its_mounts(iso, tmp_path):
    targets = ["/etc/hostname", "/proc/sys/kernel/core_pattern", "/proc/sys/net/ipv4/ip_forward",
               "/proc/sysrq-trigger"]
    sysfs = writable_sysfs_file()
    if sysfs:
        targets.append(sysfs)
    targets = [t for t in targets if os.path.exists(t)]
    # Opening for writing is the check (nothing is written): root without
    # capabilities passes procfs's owner checks, so core_pattern, which
    # names a program the kernel runs as the host's root, is the one that
    # matters. Control: opened the same way by the host's uid 0 without
    # capabilities, they open (but the root file system's, where a plain
    # command has no such bar: its mode does not say root-only).
    probe = ("import os, sys\n"
             "for p in sys.argv[1:]:\n"
             "    try:\n"
             "        os.close(os.open(p, os.O_WRONLY)); print(p, 'opened')\n"
             "    except OSError as e:\n"
             "        print(p, os.strerror(e.errno))\n")
    req, ws = workspace(tmp_path)
    script = ws / "probe.py"
    script.write_text(probe)
    proc_targets = [t for t in targets if t.startswith("/proc/") or t.startswith("/sys/")]
    control = host_sh(iso, f"setpriv --bounding-set=-all --inh-caps=-all python3 {script} {' '.join(proc_targets)}")
    assert control.splitlines() == [f"{t} opened" for t in proc_targets], control
    with service(iso).session(req) as s:
        out = out_of(s, f"python3 {script} {' '.join(targets)} /proc/sys/user/max_user_namespaces; mkdir /new-dir; "
                        f"echo 500 > /proc/self/oom_score_adj && cat /proc/self/oom_score_adj")
    for t in targets:
        # The root view's files may be refused before their mount is asked
        # (an ID-mapped file of root's is nobody's: Permission denied).
        assert f"{t} Read-only file system" in out or (t.startswith("/etc/") and f"{t} Permission denied" in out), \
            (t, out)
    # /proc/sys/user stays a writable mount (a uid_mode userns holder sets
    # its namespace's limits there), but its limits ask for CAP_SYS_RESOURCE.
    assert "/proc/sys/user/max_user_namespaces Permission denied" in out, out
    assert re.search(r"mkdir: cannot create directory .?/new-dir.?: Read-only file system", out), out
    # What belongs to the session's own processes stays theirs.
    assert out.endswith("500\n"), out
    assert not os.path.exists("/new-dir")


def test_root_is_the_sessions_own(iso, tmp_path):
    name = f"execd-iso-{uuid.uuid4().hex[:8]}"
    req, _ = workspace(tmp_path)
    with service(iso).session(req) as s:
        out = out_of(s, f"stat -c %a /root; ls -A /root | wc -l; echo mine > /root/{name} && cat /root/{name}")
    assert out == "700\n0\nmine\n", out
    assert not os.path.exists(f"/root/{name}"), "the host's /root is not the session's"
    # A workspace beneath /root still works: its mount point is made in the session's /root.
    host_ws = f"/root/{name}-ws"
    try:
        req = CreateIsolatedSessionRequest(workspace=IsolatedWorkspaceSpec(path=host_ws, mode="rw"))
        with service(iso).session(req) as s:
            assert out_of(s, "pwd; echo w > f") == host_ws + "\n"
        assert open(f"{host_ws}/f").read() == "w\n"
    finally:
        shutil.rmtree(host_ws, ignore_errors=True)


@pytest.mark.parametrize("uid_mode", ["setpriv", "userns"])
def test_cannot_make_namespaces_or_mount(iso, tmp_path, uid_mode):
    if uid_mode == "userns" and not caps_raw(iso)["userns_available"]:
        pytest.skip("uid_mode userns unavailable here")
    # unshare(CLONE_NEWUSER) in the machine's 32-bit calling convention
    # (int 0x80 from 64-bit code), which a filter keyed on x86_64's numbers
    # alone would let through: 0 made one, -1 refused, -38 no 32-bit
    # convention in this kernel.
    int80 = ("import ctypes, mmap\n"
             "code = bytes([0x53, 0xb8, 0x36, 1, 0, 0, 0xbb, 0, 0, 0, 0x10, 0xcd, 0x80, 0x5b, 0xc3])\n"
             "m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
             "m.write(code)\n"
             "f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))\n"
             "print('int80', f())\n")
    req, ws = workspace(tmp_path)
    script = ws / "int80.py"
    script.write_text(int80)
    x86 = platform.machine() == "x86_64"
    tries = "unshare -U true && echo made-user; unshare -m true && echo made-mount; " \
            "mount -t tmpfs none /mnt && echo mounted; " \
            "python3 -c 'import threading, subprocess; t = threading.Thread(target=print, args=(\"thread\",)); " \
            "t.start(); t.join(); print(subprocess.run([\"echo\", \"child\"], capture_output=True).stdout.decode().strip())'"
    if x86:
        tries += f"; python3 {script}"
    # Control: execd's plain commands (the host's root) make them.
    control = host_sh(iso, "unshare -U true && echo made-user" + (f"; python3 {script}" if x86 else ""))
    assert control.startswith("made-user\n"), control
    if uid_mode == "userns":
        req.uid_mode, req.uid, req.gid = "userns", 1000, 1000
        os.chmod(ws, 0o755)
    with service(iso).session(req) as s:
        out = out_of(s, tries)
    # EPERM from the filter (a userns session's own namespace also allows
    # no more user namespaces below it: ENOSPC, were the filter not first).
    assert out.splitlines()[0] == "unshare: unshare failed: Operation not permitted", out  # unshare -U
    assert "made-user" not in out and "made-mount" not in out and "mounted" not in out, out
    # Threads and child processes still work (clone3 is ENOSYS, libc falls back to clone).
    assert "thread\nchild\n" in out, out
    if x86 and "int80 -38" not in control:
        assert control.endswith("int80 0\n"), control
        assert "int80 -1\n" in out, out  # -EPERM


def test_cannot_use_the_kernel_keyring(iso, tmp_path):
    # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, create): the
    # keyrings of uid 0, which the host's root shares.
    nr = {"x86_64": 250, "aarch64": 219}.get(platform.machine())
    if nr is None:
        pytest.skip("keyctl's number unknown on " + platform.machine())
    code = (f"python3 -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
            f"r = libc.syscall({nr}, 0, -4, 1); print(r if r >= 0 else os.strerror(ctypes.get_errno()))'")
    control = host_sh(iso, code)
    assert int(control) > 0, control
    req, _ = workspace(tmp_path)
    with service(iso).session(req) as s:
        assert out_of(s, code) == "Operation not permitted\n"
