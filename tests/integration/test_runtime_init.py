"""execd as a warm-pool runtime and as a container's init (OpenSandbox 1.1.1 /
Go execd 1.0.22): `--runtime-init` holds every route but /ping, /ready and
/init (or /internal/init) until POST /init binds it (sandbox id, generation, the token's SHA-256,
envs, telemetry attributes, lifecycle hooks, entrypoint policy), and
`--init -- CMD` (or EXECD_INIT=1 through image/bootstrap.sh) makes execd the
process that runs the entrypoint, passes it its signals and exits with its
status. Hostile clients: garbage, resets mid-body, no token, a second bind."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from execd_client import REMOTE, SLOW, TOKEN_HEADER, execd_bin, start_execd, wait_until

pytestmark = pytest.mark.skipif(bool(REMOTE), reason="starts execd with its own arguments and signals it locally")

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "bound-token-" + os.urandom(8).hex()
HASH = "sha256:" + hashlib.sha256(TOKEN.encode()).hexdigest()
TIMEOUT = 10 * SLOW


@pytest.fixture
def warm(execd_factory):
    """A warm-pool execd: started with no token at all."""
    ex = execd_factory("--runtime-init", token=None)
    return ex


def post_init(ex, body, token=False):
    return ex.json("POST", "/init", body, token=token)


def ready(ex, token=False):
    return ex.json("GET", "/ready", token=token)


def test_held_until_bound_then_the_hash_is_the_token(warm):
    ex = warm
    # Held: every route but /ping, /ready and /init is 503, token or not.
    st, js = ex.json("GET", "/command/status/x", token=False)
    assert st == 503 and js["code"] == "NOT_INITIALIZED"
    assert ex.request("POST", "/command", {"command": "true"}, token=False)[0] == 503
    assert ex.ping() == 200
    assert ready(ex) == (503, {"initialized": False, "ready": False, "sandboxId": None, "generation": None})
    # Malformed binds are refused and do not consume the one bind.
    for bad in ({}, {"sandboxId": "s"}, {"sandboxId": "s", "generation": 0},
                {"sandboxId": "s", "generation": 1.5}, {"sandboxId": "s", "generation": 1, "accessTokenHash": "md5:00"},
                {"sandboxId": "s", "generation": 1, "accessTokenHash": HASH, "envs": {"EXECD_ACCESS_TOKEN": "x"}},
                {"sandboxId": "s", "generation": 1, "accessTokenHash": HASH, "envs": {"A": 1}},
                {"sandboxId": "s", "generation": 1, "accessTokenHash": HASH,
                 "telemetry": {"attributes": {f"k{i}": "v" for i in range(65)}}},
                {"sandboxId": "s", "generation": 1, "accessTokenHash": HASH, "entrypointPolicy": "sometimes"},
                {"sandboxId": "s", "generation": 1, "accessTokenHash": HASH,
                 "lifecycle": {"preStart": [{"name": "x", "command": "true", "argv": ["true"]}]}},
                {"sandboxId": "s", "generation": 1, "accessTokenHash": HASH,
                 "lifecycle": {"periodic": [{"name": "x", "command": "true"}]}},
                {"sandboxId": "s", "generation": 1}):  # no token and no hash: nobody could use it
        st, js = post_init(ex, bad)
        assert st == 400, (bad, st, js)
    assert ex.request("POST", "/init", "{not json", token=False)[0] == 400
    st, js = post_init(ex, {"sandboxId": "sbx-1", "generation": 3, "accessTokenHash": HASH.upper().replace("SHA256", "sha256"),
                            "envs": {"GREETING": "hello bound", "PATH": os.environ["PATH"]},
                            "telemetry": {"attributes": {"team": "infra"}}})
    assert st == 200, js
    assert js["status"] == "initialized" and js["sandboxId"] == "sbx-1" and js["generation"] == 3
    # One-shot.
    ex.token = TOKEN
    st, js = post_init(ex, {"sandboxId": "sbx-2", "generation": 4, "accessTokenHash": HASH}, token=True)
    assert st == 409 and js["code"] == "ALREADY_INITIALIZED"
    st, js = ready(ex)
    assert st == 200 and js == {"initialized": True, "ready": True, "sandboxId": "sbx-1", "generation": 3}
    st, js = ready(ex, token=True)
    assert js["telemetry"] == {"attributes": {"team": "infra"}}  # only with the token
    # The token is checked against the hash; commands and sessions get the envs.
    assert ex.request("GET", "/command?limit=1", token=False)[0] == 401
    assert ex.request("GET", "/command?limit=1", headers={TOKEN_HEADER: "wrong"}, token=False)[0] == 401
    r = ex.run('echo "$GREETING"', exact=True)
    assert r.stdout == b"hello bound\n"
    st, js = ex.json("POST", "/session", {})
    st, _, body = ex.request("POST", f"/session/{js['session_id']}/run", {"command": 'echo "[$GREETING]"'})
    assert b"[hello bound]" in body


def test_lifecycle_hooks_run_as_journaled_commands_and_gate_readiness(warm, tmp_path):
    ex = warm
    gate = tmp_path / "go"
    st, js = post_init(ex, {"sandboxId": "sbx-h", "generation": 1, "accessTokenHash": HASH, "lifecycle": {
        "preStart": [{"name": "first", "command": f"while [ ! -e {gate} ]; do sleep 0.02; done; echo first-ran"},
                     {"name": "second", "argv": ["sh", "-c", "echo second-ran"]}],
        "periodic": [{"name": "beat", "argv": ["true"], "intervalSeconds": 1}]}})
    assert st == 200, js
    ex.token = TOKEN
    # Bound, but not ready while a preStart hook runs.
    st, js = ready(ex)
    assert st == 503 and js["initialized"] is True and js["ready"] is False
    gate.touch()
    wait_until(lambda: ready(ex)[0] == 200, TIMEOUT, 0.02, "readiness after the preStart hooks")
    for name, text in (("first", b"first-ran\n"), ("second", b"second-ran\n")):
        st, status = ex.json("GET", f"/command/status/lifecycle-prestart-{name}-1")
        assert st == 200 and status["exit_code"] == 0
        st, _, logs = ex.request("GET", f"/command/lifecycle-prestart-{name}-1/logs")
        assert logs == text
    wait_until(lambda: ex.json("GET", "/command/status/lifecycle-periodic-beat-1-1")[0] == 200, TIMEOUT, 0.05,
               "the periodic hook's first run")
    st, _, journal = ex.request("GET", "/journal?since=0")
    ids = {json.loads(line).get("id") for line in journal.decode().splitlines() if line.strip()}
    assert {"lifecycle-prestart-first-1", "lifecycle-prestart-second-1"} <= ids


def test_a_failing_pre_start_hook_is_never_ready(warm):
    ex = warm
    st, _ = post_init(ex, {"sandboxId": "sbx-f", "generation": 2, "accessTokenHash": HASH, "lifecycle": {
        "preStart": [{"name": "breaks", "command": "exit 4"}, {"name": "never", "command": "echo never"}]}})
    assert st == 200
    wait_until(lambda: "error" in ready(ex)[1], TIMEOUT, 0.02, "the preStart failure")
    st, js = ready(ex)
    assert st == 503 and "breaks" in js["error"] and "exit code 4" in js["error"]
    ex.token = TOKEN
    assert ex.json("GET", "/command/status/lifecycle-prestart-never-2")[0] == 404


def test_a_client_that_resets_mid_init_does_not_consume_it(warm):
    ex = warm
    body = json.dumps({"sandboxId": "sbx-r", "generation": 1, "accessTokenHash": HASH}).encode()
    s = socket.create_connection((ex.host, ex.port))
    s.sendall(b"POST /init HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body[:10])
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()
    st, js = post_init(ex, json.loads(body))
    assert st == 200, js


def test_without_runtime_init_it_is_ready_and_a_bind_is_still_taken(execd):
    # OpenSandbox @714cac6b: "/internal/init is still accepted any time and
    # becomes authoritative on apply" (execd: once, as with --runtime-init).
    st, js = ready(execd)
    assert st == 200 and js["initialized"] is True and js["sandboxId"] is None
    assert post_init(execd, {"sandboxId": "s", "generation": 1, "accessTokenHash": HASH}, token=False)[0] == 401
    st, js = post_init(execd, {"sandboxId": "s", "generation": 1, "accessTokenHash": HASH}, token=True)
    assert st == 200, js
    execd.token = TOKEN
    wait_until(lambda: ready(execd) == (200, {"initialized": True, "ready": True, "sandboxId": "s", "generation": 1}),
               TIMEOUT, 0.02, "ready once bound")
    assert post_init(execd, {"sandboxId": "s", "generation": 2, "accessTokenHash": HASH}, token=True)[0] == 409


def test_entrypoint_policy_restart_gives_the_entrypoint_the_bound_env(execd_factory, tmp_path):
    out = tmp_path / "entry.log"
    ex = execd_factory("--runtime-init", "--init", "--", "sh", "-c",
                       f'echo "start:${{GREETING:-unbound}}" >> {out}; trap "exit 0" TERM; '
                       "while :; do sleep 0.05; done", token=None)
    wait_until(lambda: out.exists() and out.read_text() == "start:unbound\n", TIMEOUT, 0.02, "the warm entrypoint")
    st, js = post_init(ex, {"sandboxId": "sbx-e", "generation": 1, "accessTokenHash": HASH,
                            "envs": {"GREETING": "bound"}, "entrypointPolicy": "restart"})
    assert st == 200, js
    wait_until(lambda: out.read_text() == "start:unbound\nstart:bound\n", TIMEOUT, 0.02, "the restarted entrypoint")
    assert execd_alive(ex)


def execd_alive(ex) -> bool:
    return ex.proc.poll() is None


# ---- --init -- CMD ---------------------------------------------------------------------------------------

def test_init_runs_the_entrypoint_forwards_signals_and_exits_with_its_status(execd_factory, tmp_path):
    marks = tmp_path / "marks"
    ex = execd_factory("--init", "--", "sh", "-c",
                       f'trap "echo HUP >> {marks}" HUP; trap "echo USR1 >> {marks}" USR1; '
                       f'trap "echo TERM >> {marks}; exit 7" TERM; echo up >> {marks}; '
                       "while :; do sleep 0.05; done", check_exit=False)
    wait_until(lambda: marks.exists(), TIMEOUT, 0.02, "the entrypoint")
    # Its parent is execd.
    assert ex.run("true").terminal["exit_code"] == 0
    os.kill(ex.pid, signal.SIGHUP)
    wait_until(lambda: "HUP" in marks.read_text(), TIMEOUT, 0.02, "HUP at the entrypoint")
    os.kill(ex.pid, signal.SIGUSR1)
    wait_until(lambda: "USR1" in marks.read_text(), TIMEOUT, 0.02, "USR1 at the entrypoint")
    assert execd_alive(ex)
    os.kill(ex.pid, signal.SIGTERM)
    assert ex.proc.wait(TIMEOUT) == 7
    assert marks.read_text().split() == ["up", "HUP", "USR1", "TERM"]


def test_init_entrypoint_that_cannot_start_exits_127(tmp_path):
    p = subprocess.run([execd_bin(), "--init", "--insecure-no-auth", "--port", "0", "--state-dir", str(tmp_path),
                        "--", "no-such-entrypoint-xyz"], capture_output=True, timeout=TIMEOUT)
    assert p.returncode == 127
    assert b"executable file not found" in p.stderr
    p = subprocess.run([execd_bin(), "--insecure-no-auth", "--port", "0", "--", "true"], capture_output=True,
                       timeout=TIMEOUT)
    assert p.returncode == 2 and b"needs --init" in p.stderr


def test_bootstrap_with_execd_init_execs_execd_as_the_entrypoint_runner(tmp_path):
    # The server's runtime.execd_run_as_init sets EXECD_INIT=1: bootstrap.sh
    # becomes execd, which runs the sandbox's command and exits with it.
    port_file = tmp_path / "ppid"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "EXECD": execd_bin(), "EXECD_INIT": "1",
           "EXECD_ENVS": str(tmp_path / ".env"), "EXECD_ACCESS_TOKEN": TOKEN,
           "EXECD_ARGS": f"--host 127.0.0.1 --port 0 --state-dir {tmp_path / 'state'}"}
    p = subprocess.Popen(["sh", str(ROOT / "image" / "bootstrap.sh"), "sh", "-c",
                          f'echo $PPID > {port_file}; echo "entrypoint ran"; exit 5'],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode == 5, err
    assert b"entrypoint ran" in out
    assert int(port_file.read_text()) == p.pid  # bootstrap's process is execd now
    assert b"entrypoint started" in err
