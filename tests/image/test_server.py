"""execd under the real OpenSandbox lifecycle server (slow: builds images).

`opensandbox-server` (PyPI) runs with the Docker runtime against the private
dockerd of conftest.py, `network_mode = "host"`, and
`[runtime] execd_image` = this project's `image/Dockerfile --target
execd-image`.  The sandbox image is the debootstrap'ed debian:bookworm.
Everything below goes through the official Python SDK: `SandboxSync.create`
and the objects it returns.

With network_mode = "host" the server hands out 127.0.0.1:44772 for execd
(the SDK always asks for port 44772 and host mode publishes nothing), so the
sandboxes run one after the other and the tests skip, saying so, when
something else holds 44772.  The server's own port is a free one.

Sandboxes:
  * token: EXECD_ACCESS_TOKEN in its env, the header passed by the SDK
    (ConnectionConfig headers); commands, files, directories, sessions, kill;
  * open: no token: works, and the container log carries bootstrap.sh's one
    warning line;
  * require: EXECD_REQUIRE_TOKEN=1 and no token: bootstrap.sh refuses to
    start execd and exits 78, so /ping never answers and create times out.
The metrics and line-based read_file tests need execd routes that are being
added separately; they are separate test functions so the rest passes now.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest

from dockerenv import NOTES, ROOT, TIMINGS, build_execd_target, free_port, unavailable

EXECD_IMAGE = "execd-test-execd-image:latest"
SANDBOX_IMAGE = "debian:bookworm"      # imported by the base_image fixture
EXECD_PORT = 44772                     # what the SDK asks the server for
TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"
ID_LABEL = "opensandbox.io/id"

_FAILED: dict[str, str] = {}


def sdk():
    for mod in ("opensandbox", "opensandbox_server"):
        if importlib.util.find_spec(mod) is None:
            unavailable(f"Python package {mod} not installed (pip install opensandbox opensandbox-server)")
    from opensandbox.config.connection_sync import ConnectionConfigSync
    from opensandbox.sync.sandbox import SandboxSync
    return ConnectionConfigSync, SandboxSync


# ---------------------------------------------------------------------------
# the execd_image and the server
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def execd_server_image(dockerd, base_image):
    if "image" in _FAILED:
        pytest.fail(_FAILED["image"], pytrace=False)
    context = Path(os.environ.get("EXECD_IMAGE_CONTEXT", ROOT))
    t0 = time.monotonic()
    try:
        build_execd_target(dockerd, context, EXECD_IMAGE, target="execd-image")
    except pytest.fail.Exception as e:
        _FAILED["image"] = str(e)
        raise
    TIMINGS["build execd-image"] = time.monotonic() - t0
    return EXECD_IMAGE


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    with socket.socket() as c:      # a listener on 0.0.0.0 with SO_REUSEADDR...
        c.settimeout(0.5)
        return c.connect_ex(("127.0.0.1", port)) != 0


def wait_port_free(port: int = EXECD_PORT, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_free(port):
            return
        time.sleep(0.5)
    pytest.skip(f"port {port} is in use on 127.0.0.1: with network_mode=host every sandbox's "
                f"execd listens there (the SDK always asks for port {port})")


class Server:
    def __init__(self, dockerd, execd_image: str, workdir: Path, runtime_extra: str = ""):
        self.port = free_port()
        self.api_key = secrets.token_hex(16)
        self.workdir = workdir
        self.log_path = workdir / "server.log"
        cfg = workdir / "config.toml"
        cfg.write_text(f"""
[server]
host = "127.0.0.1"
port = {self.port}
api_key = "{self.api_key}"

[log]
level = "INFO"

[runtime]
type = "docker"
execd_image = "{execd_image}"
{runtime_extra}

[store]
type = "sqlite"
path = "{workdir / 'opensandbox.db'}"

[docker]
network_mode = "host"
no_new_privileges = true
pids_limit = 4096

[ingress]
mode = "direct"
""")
        exe = Path(sys.executable).parent / "opensandbox-server"
        if not exe.exists():
            unavailable(f"{exe} not found (pip install opensandbox-server)")
        env = dict(dockerd.env, HOME=str(workdir))
        env.pop("DOCKER_BUILDKIT", None)
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(exe), "--config", str(cfg)], cwd=workdir, env=env,
                                     stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"opensandbox-server exited ({self.proc.returncode}):\n{self.log()}",
                            pytrace=False)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.3)
        self.stop()
        pytest.fail(f"opensandbox-server did not answer /health:\n{self.log()}", pytrace=False)

    def log(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def config(self, token: str | None = None):
        ConnectionConfigSync, _ = sdk()
        return ConnectionConfigSync(
            domain=f"127.0.0.1:{self.port}", api_key=self.api_key, protocol="http",
            request_timeout=timedelta(seconds=60),
            headers={TOKEN_HEADER: token} if token else {})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()                       # by PID
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture(scope="module")
def server(dockerd, execd_server_image, base_image, tmp_path_factory):
    sdk()
    s = Server(dockerd, execd_server_image, tmp_path_factory.mktemp("server"))
    try:
        yield s
    finally:
        s.stop()
        ids = dockerd.run("ps", "-aq", "--filter", f"label={ID_LABEL}", check=False).stdout.split()
        if ids:
            dockerd.run("rm", "-f", *ids, check=False, timeout=60)


def container_of(dockerd, sandbox_id: str) -> str:
    return f"sandbox-{sandbox_id}"


def container_logs(dockerd, name: str) -> str:
    r = dockerd.run("logs", name, check=False)
    return r.stdout + r.stderr


def stdout_of(ex) -> str:
    return "".join(m.text if m.text.endswith("\n") else m.text + "\n" for m in ex.logs.stdout)


# ---------------------------------------------------------------------------
# the token sandbox (module-scoped; killed by test_kill or at the end)
# ---------------------------------------------------------------------------

STATE: dict[str, object] = {}


@pytest.fixture(scope="module")
def tok_sandbox(server, dockerd):
    from opensandbox.models.execd_sync import ExecutionHandlersSync
    _, SandboxSync = sdk()
    wait_port_free()
    token = secrets.token_hex(16)
    first: dict[str, float] = {}
    t0 = time.monotonic()
    sb = SandboxSync.create(SANDBOX_IMAGE, env={"EXECD_ACCESS_TOKEN": token},
                            connection_config=server.config(token),
                            ready_timeout=timedelta(seconds=60), timeout=timedelta(minutes=15))
    t_ready = time.monotonic()
    ex = sb.commands.run("echo first-output", handlers=ExecutionHandlersSync(
        on_stdout=lambda m: first.setdefault("t", time.monotonic())))
    assert ex.exit_code == 0 and stdout_of(ex) == "first-output\n", ex
    TIMINGS["create->ready"] = t_ready - t0
    TIMINGS["create->first output"] = first["t"] - t0
    NOTES.append(f"Sandbox.create -> first command output: {first['t'] - t0:.2f}s "
                 f"(ready after {t_ready - t0:.2f}s)")
    STATE["tok"] = sb
    try:
        yield sb, token
    finally:
        if STATE.pop("tok", None) is not None:
            try:
                sb.kill()
            except Exception:  # noqa: BLE001 - best effort
                pass


def kill_tok_sandbox() -> None:
    sb = STATE.pop("tok", None)
    if sb is not None:
        sb.kill()


# ---------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------

def test_execd_image_is_minimal(dockerd, execd_server_image, tmp_path):
    size = int(dockerd.run("image", "inspect", "--format", "{{.Size}}", EXECD_IMAGE).stdout)
    NOTES.append(f"execd_image {EXECD_IMAGE}: {size / 1e6:.2f} MB ({size} bytes)")
    cfg = json.loads(dockerd.run("image", "inspect", "--format", "{{json .Config}}",
                                 EXECD_IMAGE).stdout)
    assert not any(e.startswith("EXECD_ACCESS_TOKEN=") for e in cfg.get("Env") or [])
    # What the servers do with it: docker runs `tail -f /dev/null` and reads
    # /execd and /bootstrap.sh with the archive API (regular files, not
    # links); Kubernetes' init container runs `/bin/sh -c "cp ./execd ...`.
    name = f"execd-image-check-{secrets.token_hex(4)}"
    dockerd.run("run", "-d", "--name", name, "--label", "execd-test=1", "--network", "none",
                EXECD_IMAGE, "tail", "-f", "/dev/null")
    try:
        for f in ("/execd", "/bootstrap.sh"):
            out = tmp_path / f.strip("/")
            dockerd.run("cp", f"{name}:{f}", str(out))
            assert out.is_file() and not out.is_symlink() and os.access(out, os.X_OK), f
        assert (tmp_path / "bootstrap.sh").read_bytes() == (ROOT / "image/bootstrap.sh").read_bytes()
        r = dockerd.run("exec", name, "/bin/sh", "-c",
                        "mkdir -p /tmp/o && cp ./execd /tmp/o/execd && chmod +x /tmp/o/execd "
                        "&& test -x /tmp/o/execd && /tmp/o/execd --version")
        assert r.stdout.strip(), r
    finally:
        dockerd.run("rm", "-f", name, check=False)
    assert size < 16_000_000, f"execd_image is {size} bytes"


def test_token_sandbox_commands(tok_sandbox, dockerd):
    from opensandbox.models.execd import RunCommandOpts
    sb, token = tok_sandbox
    # bootstrap.sh is the container's PID 1 and started /opt/opensandbox/execd.
    ex = sb.commands.run("tr '\\0' ' ' </proc/1/cmdline; echo; ls -A /opt/opensandbox; "
                         "echo oops >&2; exit 3")
    assert ex.exit_code == 3, ex
    out = stdout_of(ex).splitlines()
    # (the kernel runs the script through its #!/bin/sh line)
    assert "/opt/opensandbox/bootstrap.sh tail -f /dev/null" in out[0], out
    assert {".env", "bootstrap.sh", "execd"} <= set(out[1:]), out
    assert "".join(m.text for m in ex.logs.stderr).strip() == "oops"
    # EXECD_ENVS (/opt/opensandbox/.env, created by bootstrap.sh) is read per command.
    sb.files.write_file("/opt/opensandbox/.env", "FROM_ENVS=env-file-value\n", mode=644)
    assert stdout_of(sb.commands.run("echo $FROM_ENVS")) == "env-file-value\n"
    # The token never reaches commands.
    assert stdout_of(sb.commands.run("echo \"[${EXECD_ACCESS_TOKEN:-}]\"")) == "[]\n"
    # No warning: a token was configured.
    assert "WARNING" not in container_logs(dockerd, container_of(dockerd, sb.id))

    # background: status and logs
    ex = sb.commands.run("for i in 1 2 3; do echo bg$i; sleep 0.2; done; exit 4",
                         opts=RunCommandOpts(background=True))
    assert ex.id
    deadline = time.monotonic() + 30
    while True:
        st = sb.commands.get_command_status(ex.id)
        if not st.running:
            break
        assert time.monotonic() < deadline, st
        time.sleep(0.2)
    assert st.exit_code == 4, st
    logs = sb.commands.get_background_command_logs(ex.id)
    assert logs.content.split() == ["bg1", "bg2", "bg3"], logs

    # interrupt
    ex = sb.commands.run("echo started; sleep 600", opts=RunCommandOpts(background=True))
    deadline = time.monotonic() + 20
    while "started" not in sb.commands.get_background_command_logs(ex.id).content:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    t0 = time.monotonic()
    sb.commands.interrupt(ex.id)
    while sb.commands.get_command_status(ex.id).running:
        assert time.monotonic() - t0 < 15, "interrupt did not end the command"
        time.sleep(0.1)
    st = sb.commands.get_command_status(ex.id)
    assert st.exit_code != 0, st


def test_token_is_enforced(tok_sandbox, server):
    from opensandbox.exceptions import SandboxException
    _, SandboxSync = sdk()
    sb, token = tok_sandbox
    for bad in (None, "wrong-" + token):
        other = SandboxSync.connect(sb.id, connection_config=server.config(bad),
                                    skip_health_check=True)
        with pytest.raises(SandboxException):
            ex = other.commands.run("echo should-not-run")
            # (a client that does not raise must at least not have run it)
            assert "should-not-run" not in stdout_of(ex)
            raise SandboxException("command ran without the token")


def test_token_sandbox_files_and_directories(tok_sandbox):
    from opensandbox.models.filesystem import SearchEntry, WriteEntry
    sb, _ = tok_sandbox
    d = "/tmp/sdk-files"
    sb.files.create_directories([WriteEntry(path=f"{d}/sub/deeper", mode=755)])
    sb.files.write_file(f"{d}/a.txt", "alpha\nbeta\n", mode=644)
    sb.files.write_file(f"{d}/sub/b.txt", b"\x00\xffbinary")
    sb.files.write_file(f"{d}/sub/c.log", "log")
    assert sb.files.read_file(f"{d}/a.txt") == "alpha\nbeta\n"
    assert sb.files.read_bytes(f"{d}/sub/b.txt") == b"\x00\xffbinary"
    found = sorted(e.path for e in sb.files.search(SearchEntry(path=d, pattern="*.txt")))
    assert found == [f"{d}/a.txt", f"{d}/sub/b.txt"], found
    info = sb.files.get_file_info([f"{d}/a.txt", f"{d}/sub"])
    assert info[f"{d}/a.txt"].size == len("alpha\nbeta\n")
    assert info[f"{d}/a.txt"].mode == 644
    assert info[f"{d}/sub"].entry_type in ("directory", "dir"), info[f"{d}/sub"]
    sb.files.delete_files([f"{d}/a.txt"])
    assert stdout_of(sb.commands.run(f"test -e {d}/a.txt; echo $?")) == "1\n"
    sb.files.delete_directories([f"{d}/sub"])
    assert stdout_of(sb.commands.run(f"ls -A {d}")) == ""


def test_token_sandbox_bash_session(tok_sandbox):
    sb, _ = tok_sandbox
    sid = sb.commands.create_session(working_directory="/tmp")
    try:
        assert stdout_of(sb.commands.run_in_session(sid, "X=kept; cd /etc; pwd")) == "/etc\n"
        assert stdout_of(sb.commands.run_in_session(sid, "echo $X $(pwd)")) == "kept /etc\n"
    finally:
        sb.commands.delete_session(sid)


def test_token_sandbox_metrics(tok_sandbox):
    """GET /metrics (being added to execd separately)."""
    sb, _ = tok_sandbox
    m = sb.get_metrics()
    assert m.cpu_count >= 1 and m.memory_total_in_mib > 0 and m.memory_used_in_mib > 0, m
    assert 0 <= m.cpu_used_percentage <= 100 * m.cpu_count, m
    assert abs(m.timestamp / 1000 - time.time()) < 120, m


def test_token_sandbox_read_file_lines(tok_sandbox):
    """read_file(offset=, limit=): line-based download, lines joined by newlines without a final one (as upstream)."""
    sb, _ = tok_sandbox
    sb.files.write_file("/tmp/lines.txt", "".join(f"line{i}\n" for i in range(1, 11)))
    assert sb.files.read_file("/tmp/lines.txt", offset=3, limit=2) == "line3\nline4"
    assert sb.files.read_file("/tmp/lines.txt", offset=9) == "line9\nline10"


def test_kill(tok_sandbox, dockerd):
    sb, _ = tok_sandbox
    name = container_of(dockerd, sb.id)
    assert dockerd.run("inspect", name, check=False).returncode == 0
    kill_tok_sandbox()
    deadline = time.monotonic() + 30
    while dockerd.run("inspect", name, check=False).returncode == 0:
        assert time.monotonic() < deadline, "container still there after kill"
        time.sleep(0.5)
    wait_port_free(timeout=15)


def test_open_sandbox_warns(server, dockerd):
    _, SandboxSync = sdk()
    kill_tok_sandbox()
    wait_port_free()
    sb = SandboxSync.create(SANDBOX_IMAGE, connection_config=server.config(None),
                            ready_timeout=timedelta(seconds=60))
    try:
        ex = sb.commands.run("echo open-ok")
        assert ex.exit_code == 0 and stdout_of(ex) == "open-ok\n"
        logs = container_logs(dockerd, container_of(dockerd, sb.id))
        warn = [l for l in logs.splitlines() if l.startswith("bootstrap: WARNING")]
        assert len(warn) == 1, logs
        assert "--insecure-no-auth" in warn[0] and f"port {EXECD_PORT}" in warn[0], warn
        assert "anyone" in warn[0]
    finally:
        sb.kill()


def test_require_token_sandbox_never_ready(server, dockerd):
    """EXECD_REQUIRE_TOKEN=1 without a token: bootstrap.sh refuses to start execd
    and exits 78, the container stops, /ping never answers, so create() hits its
    ready timeout (and the SDK then kills the sandbox)."""
    from opensandbox.exceptions import SandboxException
    _, SandboxSync = sdk()
    kill_tok_sandbox()
    wait_port_free()
    seen: dict[str, object] = {}

    def watch():       # the SDK removes the sandbox when create fails: look before
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "state" not in seen:
            r = dockerd.run("ps", "-a", "--filter", f"label={ID_LABEL}", "--format",
                            "{{.Names}}", check=False)
            for name in r.stdout.split():
                st = dockerd.run("inspect", "--format", "{{json .State}}", name, check=False)
                if st.returncode == 0:
                    state = json.loads(st.stdout)
                    if state.get("Status") == "exited":
                        seen["state"] = state
                        seen["logs"] = container_logs(dockerd, name)
            time.sleep(0.3)
    w = threading.Thread(target=watch, daemon=True)
    w.start()
    t0 = time.monotonic()
    with pytest.raises(SandboxException):
        SandboxSync.create(SANDBOX_IMAGE, env={"EXECD_REQUIRE_TOKEN": "1"},
                           connection_config=server.config(None),
                           ready_timeout=timedelta(seconds=12))
    assert time.monotonic() - t0 >= 10
    w.join(70)
    assert "state" in seen, "the sandbox container never exited"
    assert seen["state"]["ExitCode"] == 78, seen["state"]
    assert "refusing to start execd: EXECD_REQUIRE_TOKEN=1" in seen["logs"], seen["logs"]
    assert port_free(EXECD_PORT)


def test_execd_run_as_init_and_the_cli(dockerd, execd_server_image, base_image, tmp_path_factory):
    """runtime.execd_run_as_init = true (OSEP-0018): the server sets EXECD_INIT=1,
    bootstrap.sh execs execd --init, and execd is the sandbox's PID 1 running
    the sandbox's command; the SDK and `osb` (opensandbox-cli 1.1.1, argv
    included) work through it, and the sandbox's end is execd's. The sandbox
    is an open one: the CLI has no way to send an execd token."""
    from opensandbox.models.execd_sync import ExecutionHandlersSync  # noqa: F401
    _, SandboxSync = sdk()
    kill_tok_sandbox()
    wait_port_free()
    srv = Server(dockerd, execd_server_image, tmp_path_factory.mktemp("server-init"),
                 runtime_extra="execd_run_as_init = true")
    try:
        sb = SandboxSync.create(SANDBOX_IMAGE, connection_config=srv.config(None),
                                ready_timeout=timedelta(seconds=60), timeout=timedelta(minutes=5))
        try:
            ex = sb.commands.run("tr '\\0' ' ' < /proc/1/cmdline; echo; echo \"init=$EXECD_INIT\"")
            assert ex.exit_code == 0, ex
            out = stdout_of(ex)
            assert "execd --init" in out and " -- " in out, out
            assert "init=1" in out
            ex = sb.commands.run(["sh", "-c", "echo argv-through-init"])
            assert stdout_of(ex) == "argv-through-init\n"
            name = container_of(dockerd, sb.id)
            logs = container_logs(dockerd, name)
            assert "entrypoint started" in logs, logs[-2000:]
            # its own venv (make cli-venv): it pins rich<14, the E2B SDKs want >=14
            osb = Path(os.environ.get("EXECD_OSB") or ROOT / ".venv-cli" / "bin" / "osb")
            if not osb.exists():
                unavailable(f"{osb} not found (make cli-venv)")
            home = tmp_path_factory.mktemp("osb-home")

            def cli(*args):
                r = subprocess.run([str(osb), "--domain", f"127.0.0.1:{srv.port}", "--api-key", srv.api_key,
                                    "--protocol", "http", "--no-color", *args],
                                   env=dict(os.environ, HOME=str(home)), capture_output=True, text=True, timeout=120)
                assert r.returncode == 0, (args, r.stdout, r.stderr)
                return r.stdout
            assert "a b|$HOME|''|" in cli("command", "run", "-o", "raw", "--argv", sb.id, "--",
                                          "printf", "%s|", "a b", "$HOME", "''")
            # the CLI quotes each word of a shell payload: it arrives as typed
            assert cli("command", "run", "-o", "raw", sb.id, "--", "echo", "shell-$((6*7))") == "shell-$((6*7))\n"
            cli("file", "write", sb.id, "/tmp/from-cli.txt", "-c", "written by osb")
            assert "written by osb" in cli("file", "cat", sb.id, "/tmp/from-cli.txt")
        finally:
            sb.kill()
        deadline = time.monotonic() + 30
        while dockerd.run("inspect", container_of(dockerd, sb.id), check=False).returncode == 0:
            assert time.monotonic() < deadline, "container still there after kill"
            time.sleep(0.5)
    finally:
        srv.stop()
        wait_port_free(timeout=15)


# ---------------------------------------------------------------------------
# /code under the server: the code-interpreter image as the sandbox image, the
# server's injected execd (execd_image, the static binary) serving it
# ---------------------------------------------------------------------------

CODE_IMAGE = "execd-test-code-interpreter:latest"   # as in test_code_image.py


@pytest.fixture(scope="module")
def code_sandbox_image(dockerd, base_image):
    t0 = time.monotonic()
    build_execd_target(dockerd, ROOT, CODE_IMAGE, target="code-interpreter")
    TIMINGS["build code-interpreter"] = time.monotonic() - t0
    return CODE_IMAGE


def test_code_interpreter_sdk_through_the_injected_static_execd(server, dockerd, code_sandbox_image):
    """`opensandbox-code-interpreter` 1.1.1 on a sandbox the server starts: the
    kernels come from the image, execd is the one copied out of execd_image
    (static), and CodeInterpreter.create's strict health check (a TCP probe of
    ${JUPYTER_PORT}, which the image points at execd) passes."""
    if importlib.util.find_spec("code_interpreter") is None:
        unavailable("Python package opensandbox-code-interpreter not installed")
    from code_interpreter.sync.code_interpreter import CodeInterpreterSync
    _, SandboxSync = sdk()
    kill_tok_sandbox()
    wait_port_free()
    token = secrets.token_hex(16)
    t0 = time.monotonic()
    sb = SandboxSync.create(code_sandbox_image, env={"EXECD_ACCESS_TOKEN": token},
                            connection_config=server.config(token),
                            ready_timeout=timedelta(seconds=60), timeout=timedelta(minutes=10))
    try:
        # The execd that runs commands (their parent, or their keeper's where
        # the container gives execd no writable cgroup, as Docker's defaults
        # do) maps no shared libc: the static build, as the server injected it.
        ps = sb.commands.run("p=$PPID; if [ \"$(cat /proc/$p/comm)\" = execd-keeper ]; then set -- $(cat /proc/$p/stat); p=$4; fi; "
                             "readlink /proc/$p/exe; grep -c 'libc[.-]' /proc/$p/maps")
        assert stdout_of(ps).split("\n")[1] == "0", stdout_of(ps)
        ci = CodeInterpreterSync.create(sb, ready_timeout=timedelta(seconds=60))
        ctx = ci.codes.create_context("python")
        ci.codes.run("x = 20", context=ctx)
        e = ci.codes.run("print('hi')\nx * 2 + 2", context=ctx)
        TIMINGS["code sandbox: create -> first result"] = time.monotonic() - t0
        assert e.error is None, e.error
        assert [m.text for m in e.logs.stdout] == ["hi\n"]
        assert [r.text for r in e.result] == ["42"]
        bad = ci.codes.run("1/0", context=ctx)
        assert bad.error is not None and bad.error.name == "ZeroDivisionError"
        bash = ci.codes.run("echo from-bash", language="bash")
        assert [m.text for m in bash.logs.stdout] == ["from-bash\n"], bash
        NOTES.append(f"code sandbox under the server: create -> first 42 "
                     f"{TIMINGS['code sandbox: create -> first result']:.2f}s (execd {stdout_of(ps).split()[0]})")
    finally:
        sb.kill()
