"""The runtime-binding contract of OpenSandbox's main branch, written from its
Go execd source (raw HTTP: the released 1.1.1 SDKs do not reach these):

- `POST /internal/init` (router.go and controller/init_runtime.go @33b299af;
  execd keeps `/init` as the same one-shot route), before binding only
  `/ping`, `/ready` and the init routes answer;
- `EXECD_RUNTIME_INIT` as Go's strconv.ParseBool (pkg/flag/parser.go
  @33b299af), never passed to a process;
- the validation order, bounds and texts of model/init.go @714cac6b and
  binding.go @33b299af;
- the reset before a binding is applied (runtime/reset.go @714cac6b):
  commands, bash sessions and PTYs the warm-up left are killed;
- the refused keys (isolation/config.go @33b299af) and the precedence of
  runtime/env.go @714cac6b, with OPENSANDBOX_ID over everything;
- OPENSANDBOX_EXECD_METRICS_EXTRA_ATTRS (internal/telemetry/attrs.go
  @31bc3664) and the attributes of telemetry/init.go @33b299af;
- --lifecycle-startup-status-file (main.go @714cac6b).
Each new route also gets the hostile-client trio: no token, garbage, a
client that resets mid-request."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time

import pytest

from execd_client import REMOTE, SLOW, TOKEN_HEADER, execd_bin, process_alive, wait_until

pytestmark = pytest.mark.skipif(bool(REMOTE), reason="starts execd with its own arguments and environment")

TOKEN = "bound-next-" + os.urandom(8).hex()
HASH = "sha256:" + hashlib.sha256(TOKEN.encode()).hexdigest()
TIMEOUT = 10 * SLOW
ROUTES = ("/internal/init", "/init")


def bind(ex, body, path="/internal/init", token=False):
    return ex.json("POST", path, body, token=token)


def reset_mid_request(ex, path, with_token):
    body = json.dumps({"sandboxId": "sbx-r", "generation": 1, "accessTokenHash": HASH}).encode()
    s = socket.create_connection((ex.host, ex.port))
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n")
    if with_token:
        head += f"{TOKEN_HEADER}: {ex.token}\r\n"
    s.sendall(head.encode() + b"\r\n" + body[:12])
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()


def env_of(ex, command="env", **fields):
    r = ex.run(command, exact=True, **fields)
    assert r.terminal["exit_code"] == 0, r.raw
    return dict(line.split("=", 1) for line in r.stdout.decode().splitlines() if "=" in line)


@pytest.mark.parametrize("path", ROUTES)
def test_held_daemon_answers_only_probes_and_init_then_binds_once(execd_factory, path):
    ex = execd_factory("--runtime-init", token=None)
    st, js = ex.json("GET", "/command/status/x", token=False)
    assert st == 503 and js == {"code": "NOT_INITIALIZED",
                                "message": "execd is not initialized yet: POST /internal/init must be called first"}
    for other in ("/metrics", "/files/info?path=/", "/no/such/route"):
        assert ex.request("GET", other, token=False)[0] == 503, other
    assert ex.ping() == 200
    assert ex.json("GET", "/ready", token=False)[0] == 503
    # Garbage: 400 with upstream's prefix, and the bind is not consumed.
    st, js = ex.json("POST", path, "{not json", token=False)
    assert st == 400 and js["code"] == "INVALID_REQUEST_BODY"
    assert js["message"].startswith("invalid runtime init request: ")
    st, js = ex.json("POST", path, b"", token=False)
    assert st == 400 and js["message"] == "invalid runtime init request: EOF"
    reset_mid_request(ex, path, with_token=False)
    assert ex.ping() == 200
    st, js = bind(ex, {"sandboxId": " sbx-next ", "generation": 7, "accessTokenHash": HASH,
                       "telemetry": {"attributes": {"sandbox_id": "x", "team": "infra"}}}, path)
    assert st == 200, js
    assert js == {"status": "initialized", "sandboxId": "sbx-next", "generation": 7,
                  "warning": ["telemetry attribute sandbox_id is reserved and was dropped"]}
    ex.token = TOKEN
    # One bind, whichever name asks again.
    for again in ROUTES:
        st, js = bind(ex, {"sandboxId": "sbx-2", "generation": 8, "accessTokenHash": HASH}, again, token=True)
        assert st == 409 and js["code"] == "ALREADY_INITIALIZED", (again, js)
    assert ex.json("GET", "/ready", token=False) == (
        200, {"initialized": True, "ready": True, "sandboxId": "sbx-next", "generation": 7})


@pytest.mark.parametrize("path", ROUTES)
def test_init_routes_with_a_token_no_token_garbage_and_reset(execd_factory, path):
    ex = execd_factory("--runtime-init")  # a warm execd with a token of its own
    st, js = ex.json("POST", path, {"sandboxId": "s", "generation": 1}, token=False)
    assert st == 401 and js["code"] == "UNAUTHORIZED"
    assert ex.request("POST", path, b"\x00\xff garbage", token=False)[0] == 401
    st, js = ex.json("POST", path, b"\x00\xff garbage")
    assert st == 400 and js["message"].startswith("invalid runtime init request: ")
    reset_mid_request(ex, path, with_token=True)
    reset_mid_request(ex, path, with_token=False)
    st, js = bind(ex, {"sandboxId": "sbx-t", "generation": 1}, path, token=True)
    assert st == 200, js
    # No hash given: execd's own token stays the token.
    assert ex.request("GET", "/command?limit=1")[0] == 200
    assert ex.request("GET", "/command?limit=1", token=False)[0] == 401


def test_validation_order_bounds_and_texts(execd_factory):
    ex = execd_factory("--runtime-init", token=None)
    ok = {"sandboxId": "s", "generation": 1, "accessTokenHash": HASH}
    cases = [
        ({}, "sandboxId must not be blank"),
        ({"sandboxId": "   ", "generation": 1}, "sandboxId must not be blank"),
        ({"sandboxId": "x" * 129, "generation": 1}, "sandboxId must not exceed 128 characters"),
        ({"sandboxId": "é" * 65, "generation": 1}, "sandboxId must not exceed 128 characters"),  # bytes
        ({"sandboxId": "s"}, "generation must be a positive integer"),
        ({"sandboxId": "s", "generation": 0}, "generation must be a positive integer"),
        ({**ok, "entrypointPolicy": "later"}, 'entrypointPolicy must be "keep" or "restart"'),
        ({**ok, "envs": {"": "v"}}, "envs must not contain blank keys"),
        ({**ok, "envs": {"K" * 257: "v"}}, f'env key "{"K" * 257}" must not exceed 256 characters'),
        ({**ok, "telemetry": {"attributes": {f"k{i}": "v" for i in range(65)}}},
         "telemetry attributes must not exceed 64 entries"),
        ({**ok, "telemetry": {"attributes": {" ": "v"}}}, "telemetry attributes must not contain blank keys"),
        ({**ok, "telemetry": {"attributes": {"k" * 129: "v"}}},
         f'telemetry attribute key "{"k" * 129}" must not exceed 128 characters'),
        ({**ok, "telemetry": {"attributes": {"k": "v" * 1025}}},
         'telemetry attribute "k" value must not exceed 1024 bytes'),
        ({**ok, "accessTokenHash": "md5:00"}, "access token hash must use sha256:<hex> format"),
        ({**ok, "accessTokenHash": "sha256:abcd"}, "access token hash must be 32 hex bytes, got 2"),
        # The first failing check in upstream's order is the one reported.
        ({"sandboxId": "s", "generation": 0, "entrypointPolicy": "x"}, "generation must be a positive integer"),
        ({**ok, "accessTokenHash": "x", "envs": {"": "v"}}, "envs must not contain blank keys"),
    ]
    for key in ("EXECD_ACCESS_TOKEN", "JUPYTER_HOST", "JUPYTER_TOKEN", "EXECD_ISOLATION_CONFIG", "EXECD_ENVS",
                "OPENSANDBOX_LIFECYCLE", "EXECD_LIFECYCLE_CONFIG", "EXECD_RUNTIME_INIT", "execd_runtime_init"):
        cases.append(({**ok, "envs": {key: "v"}},
                      f'env key "{key}" is reserved by execd and must not be set via /internal/init'))
    for body, message in cases:
        st, js = bind(ex, body)
        assert (st, js) == (400, {"code": "INVALID_REQUEST_BODY", "message": message}), (body, st, js)
    for body in ({"sandboxId": "s", "generation": -1}, {"sandboxId": "s", "generation": 1.5},
                 {"sandboxId": 5, "generation": 1}, {**ok, "envs": {"A": 1}}, [ok]):
        st, js = bind(ex, body)
        assert st == 400 and js["message"].startswith("invalid runtime init request: "), (body, js)
    # At the bounds, and names upstream does not check, it binds.
    st, js = bind(ex, {"sandboxId": "x" * 128, "generation": 2 ** 64 - 1, "accessTokenHash": HASH,
                       "envs": {"K" * 256: "v", "EXECD_OTHER": "ok", "lower-case name": "ok"},
                       "telemetry": {"attributes": {"k" * 128: "v" * 1024}}})
    assert st == 200, js
    assert js["sandboxId"] == "x" * 128 and js["generation"] == 2 ** 64 - 1
    assert "warning" not in js  # Go: omitempty


def test_execd_runtime_init_variable(execd_factory, tmp_path):
    for value in ("1", "t", "TRUE", "True"):
        ex = execd_factory(token=None, env=dict(os.environ, EXECD_RUNTIME_INIT=value))
        assert ex.json("GET", "/command/status/x", token=False)[0] == 503, value
        assert ex.json("GET", "/ready", token=False)[0] == 503
    # Off, the daemon needs a token as usual and answers at once.
    ex = execd_factory(env=dict(os.environ, EXECD_RUNTIME_INIT="false"))
    assert ex.request("GET", "/command?limit=1")[0] == 200
    # Anything else stops execd at start (upstream panics).
    for bad in ("yes", "on", "2"):
        p = subprocess.run([execd_bin(), "--port", "0", "--state-dir", str(tmp_path / bad)],
                           env=dict(os.environ, EXECD_RUNTIME_INIT=bad), capture_output=True, timeout=TIMEOUT)
        assert p.returncode != 0 and b"EXECD_RUNTIME_INIT" in p.stderr, (bad, p.stderr)


def test_environment_precedence_refused_keys_and_opensandbox_id(execd_factory, tmp_path):
    envs = tmp_path / ".env"
    envs.write_text("FROM_FILE=file\nBOTH=file\nOPENSANDBOX_ID=file-id\n")
    daemon_env = dict(os.environ, EXECD_RUNTIME_INIT="1", EXECD_ENVS=str(envs), JUPYTER_HOST="http://j:1",
                      OPENSANDBOX_LIFECYCLE="", EXECD_LIFECYCLE_CONFIG=str(tmp_path / "none.toml"),
                      FROM_DAEMON="daemon", BOTH="daemon", OPENSANDBOX_ID="warm-id",
                      OPENSANDBOX_EXECD_METRICS_EXTRA_ATTRS="tenant=t1, zone=cn-hz,invalid,noeq=, =blank")
    daemon_env.pop("EXECD_ACCESS_TOKEN", None)
    ex = execd_factory(token=None, env=daemon_env)
    # Before the binding: the static metric attributes (OPENSANDBOX_ID first).
    st, js = ex.json("GET", "/ready", token=False)
    assert st == 503 and js["metricAttributes"] == [["sandbox_id", "warm-id"], ["tenant", "t1"], ["zone", "cn-hz"]]
    st, js = bind(ex, {"sandboxId": "sbx-env", "generation": 4, "accessTokenHash": HASH,
                       "envs": {"FROM_BINDING": "binding", "BOTH": "binding", "FROM_DAEMON": "binding-over-daemon"},
                       "telemetry": {"attributes": {"tenant": "bound-tenant"}}})
    assert st == 200, js
    ex.token = TOKEN
    e = env_of(ex, envs={"BOTH": "request", "OPENSANDBOX_ID": "request-id"})
    # daemon < binding envs < EXECD_ENVS file < request envs < OPENSANDBOX_ID.
    assert e["FROM_DAEMON"] == "binding-over-daemon"
    assert e["FROM_BINDING"] == "binding" and e["FROM_FILE"] == "file" and e["BOTH"] == "request"
    assert e["OPENSANDBOX_ID"] == "sbx-env"
    e = env_of(ex)
    assert e["BOTH"] == "file" and e["OPENSANDBOX_ID"] == "sbx-env"
    # execd's own settings reach no process; EXECD_ENVS and JUPYTER_HOST do,
    # as upstream's /command passes them (the SDKs' set_env needs the first).
    for key in ("EXECD_RUNTIME_INIT", "EXECD_LIFECYCLE_CONFIG", "OPENSANDBOX_LIFECYCLE"):
        assert key not in e, key
    assert e["EXECD_ENVS"] == str(envs) and e["JUPYTER_HOST"] == "http://j:1"
    # Bash sessions too.
    st, js = ex.json("POST", "/session", {})
    st, _, body = ex.request("POST", f"/session/{js['session_id']}/run",
                             {"command": 'echo "[$OPENSANDBOX_ID|$BOTH|${EXECD_RUNTIME_INIT-unset}]"'})
    assert b"[sbx-env|file|unset]" in body
    # Every metric's attributes: the binding's first, binding wins over env.
    st, js = ex.json("GET", "/ready")
    assert st == 200
    assert js["metricAttributes"] == [["sandbox_id", "sbx-env"], ["generation", "4"], ["tenant", "bound-tenant"],
                                      ["zone", "cn-hz"]]
    # /metrics keeps the Go daemon's keys (and execd's one addition, state_dir).
    st, m = ex.json("GET", "/metrics")
    assert st == 200 and set(m) == {"cpu_count", "cpu_used_pct", "mem_total_mib", "mem_used_mib", "timestamp",
                                    "state_dir"}


def test_binding_resets_what_the_warm_up_left(execd_factory, tmp_path):
    # Upstream accepts /internal/init without runtime-init mode too; that is
    # where a warm-up can leave processes behind.
    ex = execd_factory()
    pidfile = tmp_path / "bg.pid"
    cid = "warm-bg"
    st, _, body = ex.request("POST", "/command", {"id": cid, "command": f"sleep 300 & echo $! > {pidfile}; wait",
                                                  "background": True})
    assert st == 200, body
    wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), TIMEOUT, 0.02, "the background command")
    bg_pid = int(pidfile.read_text())
    st, s = ex.json("POST", "/session", {})
    sid = s["session_id"]
    session_pidfile = tmp_path / "session.pid"
    c = ex.conn(60)
    c.request("POST", f"/session/{sid}/run", body=json.dumps(
        {"command": f"echo $$ > {session_pidfile}; sleep 300"}).encode(), headers=ex.headers())
    wait_until(lambda: session_pidfile.exists() and session_pidfile.read_text().strip(), TIMEOUT, 0.02,
               "the session run")
    shell_pid = int(session_pidfile.read_text())
    st, p = ex.json("POST", "/pty", {})
    assert st == 201, p
    pty_id = p["session_id"]
    assert ex.json("GET", f"/pty/{pty_id}")[0] == 200
    st, js = bind(ex, {"sandboxId": "sbx-reset", "generation": 1}, token=True)
    assert st == 200, js
    wait_until(lambda: not process_alive(bg_pid), TIMEOUT, 0.02, "the warm-up's background process to die")
    wait_until(lambda: not process_alive(shell_pid), TIMEOUT, 0.02, "the warm-up's session shell to die")
    r = c.getresponse()
    r.read()
    c.close()
    assert ex.json("POST", f"/session/{sid}/run", {"command": "true"})[0] == 404
    assert ex.json("GET", f"/pty/{pty_id}")[0] == 404
    wait_until(lambda: ex.json("GET", f"/command/status/{cid}")[1].get("running") is False, TIMEOUT, 0.02,
               "the command's record to say it ended")
    # The bound daemon runs new work, with the bound id.
    assert env_of(ex)["OPENSANDBOX_ID"] == "sbx-reset"
    wait_until(lambda: ex.json("GET", "/ready", token=False)[0] == 200, TIMEOUT, 0.02, "ready after the bind")


def read_status(path):
    return path.read_text().splitlines()


def test_lifecycle_startup_status_file(execd_factory, tmp_path):
    # Runtime init: "running N" before the preStart hooks, "done 0" after.
    status = tmp_path / "status"
    status.write_text("")
    gate = tmp_path / "go"
    ex = execd_factory("--runtime-init", "--lifecycle-startup-status-file", str(status), token=None)
    assert read_status(status) == []  # nothing until the binding
    st, js = bind(ex, {"sandboxId": "sbx-s", "generation": 1, "accessTokenHash": HASH, "lifecycle": {
        "preStart": [{"name": "wait", "command": f"while [ ! -e {gate} ]; do sleep 0.02; done",
                      "timeoutSeconds": 30},
                     {"name": "quick", "argv": ["true"]}]}})
    assert st == 200, js
    wait_until(lambda: read_status(status) == ["running 90"], TIMEOUT, 0.02, "the running line")
    gate.touch()
    wait_until(lambda: read_status(status) == ["running 90", "done 0"], TIMEOUT, 0.02, "done 0")
    # A failing hook: "done 1".
    status2 = tmp_path / "status2"
    status2.write_text("")
    ex2 = execd_factory("--runtime-init", "--lifecycle-startup-status-file", str(status2), token=None)
    st, js = bind(ex2, {"sandboxId": "sbx-f", "generation": 1, "accessTokenHash": HASH,
                        "lifecycle": {"preStart": [{"name": "breaks", "command": "exit 3"}]}})
    assert st == 200, js
    wait_until(lambda: read_status(status2) == ["running 60", "done 1"], TIMEOUT, 0.02, "done 1")
    # Classic mode without hooks: "done 0" alone, once listening.
    status3 = tmp_path / "status3"
    status3.write_text("")
    execd_factory("--lifecycle-startup-status-file", str(status3))
    wait_until(lambda: read_status(status3) == ["done 0"], TIMEOUT, 0.02, "classic done 0")
    # The file is never created: without it, classic startup fails.
    missing = tmp_path / "missing"
    p = subprocess.Popen([execd_bin(), "--insecure-no-auth", "--port", "0", "--state-dir", str(tmp_path / "st"),
                          "--lifecycle-startup-status-file", str(missing)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = p.communicate(timeout=TIMEOUT)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 1 and not missing.exists(), err
    assert b"lifecycle startup status" in err
