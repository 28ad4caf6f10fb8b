"""The hardening floor (--drop-caps, --no-new-privs, --seccomp, --landlock):
each layer reported under the SDK's capabilities().hardening, and each
tested by a command that tries what it forbids, next to a daemon without
the floor where the same command succeeds."""

from __future__ import annotations

import os

import pytest
from opensandbox.config import ConnectionConfigSync
from opensandbox.models.sandboxes import SandboxEndpoint
from opensandbox.sync.adapters.factory import AdapterFactorySync

from execd_client import TOKEN_HEADER

DOCKER_DEFAULT_CAPS = 0x00000000A80425FB


def capabilities(ex):
    cfg = ConnectionConfigSync(protocol="http")
    ep = SandboxEndpoint(endpoint=ex.endpoint, headers={TOKEN_HEADER: ex.token})
    return AdapterFactorySync(cfg).create_isolated_session_service(ep).capabilities()


def sh(ex, command):
    """(exit code, stdout + stderr) of a /command run."""
    r = ex.run(command, exact=True)
    assert r.status == 200, r.raw[:300]
    return r.terminal.get("exit_code"), (r.stdout + r.stderr).decode()


def status_field(ex, name):
    code, out = sh(ex, f"grep '^{name}:' /proc/self/status")
    assert code == 0, out
    return out.split(":", 1)[1].strip()


@pytest.fixture
def floor(execd_factory, tmp_path):
    writable = tmp_path / "writable"
    writable.mkdir()
    ex = execd_factory("--drop-caps", "--seccomp", "--landlock",
                       "--landlock-writable", f"{writable}:/dev:/proc:/tmp")
    ex.writable = writable
    return ex


def test_off_by_default(execd):
    h = capabilities(execd).hardening
    assert (h.cap_drop.state, h.seccomp.state, h.landlock.state) == ("disabled",) * 3
    assert status_field(execd, "NoNewPrivs") == "0"
    assert status_field(execd, "Seccomp") == "0"
    code, out = sh(execd, "unshare -U true && echo made")
    assert (code, out) == (0, "made\n")


def test_report(floor):
    h = capabilities(floor).hardening
    assert h.cap_drop.state == "active", h.cap_drop
    assert h.seccomp.state == "active", h.seccomp
    assert h.landlock.state in ("active", "degraded"), h.landlock
    assert str(floor.writable) in h.landlock.message


def test_capabilities_are_trimmed(floor):
    for field in ("CapBnd", "CapPrm", "CapEff"):
        assert int(status_field(floor, field), 16) == DOCKER_DEFAULT_CAPS, field
    assert int(status_field(floor, "CapAmb"), 16) == 0


def test_no_new_privs_and_seccomp_are_set(floor):
    assert status_field(floor, "NoNewPrivs") == "1"
    assert status_field(floor, "Seccomp") == "2"


def test_seccomp_refuses_new_namespaces_and_mounts(floor):
    for command in ("unshare -U true", "unshare -m true", "mount -t tmpfs none /tmp", "nsenter -t 1 -m true"):
        code, out = sh(floor, command)
        assert code != 0, command
        assert "operation not permitted" in out.lower() or "permission denied" in out.lower(), (command, out)
    # Ordinary work is untouched: processes, pipes, threads.
    code, out = sh(floor, "python3 -c 'import threading,subprocess; t=threading.Thread(target=print, args=(1,)); "
                          "t.start(); t.join(); print(subprocess.run([\"echo\",\"2\"],capture_output=True).stdout)'")
    assert (code, out) == (0, "1\nb'2\\n'\n")


def test_landlock_refuses_writes_outside_the_list(floor):
    code, out = sh(floor, "echo x > /etc/execd-landlock-probe")
    assert code != 0 and "Permission denied" in out, out
    assert not os.path.exists("/etc/execd-landlock-probe")
    code, out = sh(floor, f"echo x > {floor.writable}/ok && cat {floor.writable}/ok && cat /etc/hostname >/dev/null")
    assert (code, out) == (0, "x\n")


def test_bash_sessions_stand_on_the_floor(floor):
    st, js = floor.json("POST", "/session", {})
    assert st == 200, js
    sid = js["session_id"]
    status, _, body = floor.request("POST", f"/session/{sid}/run",
                                    b'{"command": "grep -E \'^(NoNewPrivs|Seccomp):\' /proc/self/status | tr -d \'\\\\t\'"}')
    body = body.decode()
    assert status == 200, body
    assert "NoNewPrivs:1" in body and "Seccomp:2" in body, body
    assert floor.json("DELETE", f"/session/{sid}")[0] == 200


def test_each_layer_alone(execd_factory):
    ex = execd_factory("--no-new-privs")
    h = capabilities(ex).hardening
    assert (h.cap_drop.state, h.seccomp.state, h.landlock.state) == ("disabled",) * 3
    assert status_field(ex, "NoNewPrivs") == "1" and status_field(ex, "Seccomp") == "0"
    ex = execd_factory("--drop-caps")
    assert int(status_field(ex, "CapEff"), 16) == DOCKER_DEFAULT_CAPS
    code, out = sh(ex, "unshare -m true")  # needs CAP_SYS_ADMIN, which Docker's set lacks
    assert code != 0 and "Operation not permitted" in out, out


def test_isolated_runs_stand_on_the_floor(floor, tmp_path):
    caps = capabilities(floor)
    if not caps.available:
        pytest.skip(caps.message)
    from opensandbox.models.isolated import CreateIsolatedSessionRequest, IsolatedWorkspaceSpec
    cfg = ConnectionConfigSync(protocol="http")
    ep = SandboxEndpoint(endpoint=floor.endpoint, headers={TOKEN_HEADER: floor.token})
    svc = AdapterFactorySync(cfg).create_isolated_session_service(ep)
    ws = tmp_path / "ws"
    ws.mkdir()
    with svc.session(CreateIsolatedSessionRequest(workspace=IsolatedWorkspaceSpec(path=str(ws), mode="rw"))) as s:
        e = s.run("grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status; echo in > inside.txt; "
                  "echo no > /tmp/../etc/x 2>&1 || echo refused")
        out = "".join(m.text + "\n" for m in e.logs.stdout)
        assert "CapEff:\t0000000000000000" in out and "NoNewPrivs:\t1" in out and "Seccomp:\t2" in out, out
        assert "refused" in out
        assert (ws / "inside.txt").read_text() == "in\n", "the session's workspace is on its Landlock list"


def test_kernels_and_terminals_stand_on_the_floor(tmp_path_factory):
    from test_code import of, run_code, start_kernel_execd, stop_and_check
    ex = start_kernel_execd(tmp_path_factory, "--seccomp")
    try:
        r = ex.run("grep '^Seccomp:' /proc/self/status | tr -d '\\t\\r'", tty=True)
        assert "".join(r.texts("stdout")).strip() == "Seccomp:2", r.events
        st, events = run_code(ex, "print([l for l in open('/proc/self/status') if l.startswith('Seccomp:')][0].split()[1])",
                              language="python")
        assert st == 200, events
        assert "".join(e["text"] for e in of(events, "stdout")).strip() == "2"
    finally:
        stop_and_check(ex)


def test_no_new_privs_makes_setuid_grant_nothing(execd_factory):
    import shutil
    import tempfile
    # A setuid-root `id`, where uid 65534 can reach it (pytest's tmp is 0700).
    d = tempfile.mkdtemp(prefix="execd-suid-")
    try:
        os.chmod(d, 0o755)
        suid = os.path.join(d, "id")
        shutil.copy("/usr/bin/id", suid)
        os.chmod(suid, 0o4755)
        for flags, expect_root in (((), True), (("--no-new-privs",), False)):
            ex = execd_factory(*flags)
            r = ex.run(suid, uid=65534, gid=65534, exact=True)
            out = r.stdout.decode()
            assert r.terminal.get("exit_code") == 0, r.events
            assert ("euid=0" in out) == expect_root, (flags, out)
    finally:
        shutil.rmtree(d)
