"""Bad requests, authentication and command-line handling. After every bad
request execd must still serve (/ping and a real command)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from execd_client import SLOW, TOKEN_HEADER, execd_bin, recv_all, wait_until


def assert_alive(ex):
    assert ex.ping() == 200
    res = ex.run("echo alive", exact=True)
    assert res.stdout == b"alive\n"


def assert_error(status, body, want_status, want_code):
    assert status == want_status, (status, body)
    js = json.loads(body)
    assert js["code"] == want_code, js
    assert isinstance(js.get("message"), str) and js["message"], js


BAD_BODIES = [
    ("invalid_json", b"{"),
    ("not_an_object", b"[1,2]"),
    ("empty_body", b""),
    ("command_number", b'{"command": 1}'),
    ("command_null", b'{"command": null}'),
    ("missing_command", b'{"cwd": "/"}'),
    ("empty_command", b'{"command": ""}'),
    ("timeout_string", b'{"command": "true", "timeout": "x"}'),
    ("timeout_negative", b'{"command": "true", "timeout": -5}'),
    ("uid_negative", b'{"command": "true", "uid": -1}'),
    ("uid_too_large", b'{"command": "true", "uid": 4294967296}'),
    ("uid_float", b'{"command": "true", "uid": 1.5}'),
    ("background_string", b'{"command": "true", "background": "yes"}'),
    ("envs_list", b'{"command": "true", "envs": ["A=1"]}'),
    ("envs_value_number", b'{"command": "true", "envs": {"A": 1}}'),
    ("cwd_number", b'{"command": "true", "cwd": 5}'),
    ("gid_without_uid", b'{"command": "true", "gid": 0}'),
    ("cwd_missing", b'{"command": "true", "cwd": "/nonexistent/execd-it"}'),
    ("cwd_is_file", b'{"command": "true", "cwd": "/etc/passwd"}'),
    ("invalid_utf8", b'{"command": "echo \xff"}'),
]


@pytest.mark.parametrize("name,body", BAD_BODIES, ids=[n for n, _ in BAD_BODIES])
def test_bad_command_body(execd, name, body):
    st, h, data = execd.request("POST", "/command", body=body,
                                headers={"Content-Type": "application/json"})
    assert_error(st, data, 400, "INVALID_REQUEST_BODY")
    assert h["content-type"].startswith("application/json")
    assert_alive(execd)


def test_gid_without_uid_message(execd):
    st, h, data = execd.request("POST", "/command", body={"command": "true", "gid": 0})
    assert_error(st, data, 400, "INVALID_REQUEST_BODY")
    assert "uid" in json.loads(data)["message"]


def test_unknown_route_and_method(execd):
    st, h, data = execd.request("GET", "/no/such/route")
    assert st == 404, data
    assert "code" in json.loads(data)
    st, h, data = execd.request("PUT", "/command", body=b"{}")
    assert st == 405, data
    assert "code" in json.loads(data)
    assert "POST" in h["allow"] and "DELETE" in h["allow"], h
    st, h, data = execd.request("POST", "/ping")
    assert st == 405 and "GET" in h["allow"]
    assert_alive(execd)


def test_command_id_errors(execd):
    st, _, data = execd.request("DELETE", "/command")
    assert_error(st, data, 400, "MISSING_QUERY")
    st, _, data = execd.request("DELETE", "/command?id=" + "0" * 32)
    assert st == 404, data
    st, _, data = execd.request("GET", "/command/status/" + "0" * 32)
    assert st == 404, data
    assert json.loads(data)["code"]
    st, _, data = execd.request("GET", f"/command/{'0' * 32}/logs")
    assert st == 404, data
    res = execd.run("true", exact=True)
    st, _, data = execd.request("DELETE", f"/command?id={res.id}")
    assert_error(st, data, 500, "RUNTIME_ERROR")
    # a non-numeric / negative cursor does not crash anything
    for cur in ("abc", "-1", "99999999999999999999999"):
        st, h, data = execd.request("GET", f"/command/{res.id}/logs?cursor={cur}")
        assert st in (200, 400), (cur, st, data)
    assert_alive(execd)


def test_body_too_large(execd_factory):
    ex = execd_factory("--max-body", "1024")
    body = json.dumps({"command": "echo " + "x" * 2000}).encode()
    st, h, data = ex.request("POST", "/command", body=body)
    assert st == 413, (st, data)
    assert json.loads(data)["code"]
    # just under the limit still works
    small = json.dumps({"command": "echo " + "y" * 900}).encode()
    assert len(small) <= 1024
    c, r = ex.conn(), None
    try:
        c.request("POST", "/command", body=small,
                  headers={TOKEN_HEADER: ex.token, "Accept": "application/x-ndjson"})
        r = c.getresponse()
        assert r.status == 200
        r.read()
    finally:
        c.close()
    assert_alive(ex)


def test_body_too_large_chunked(execd_factory):
    ex = execd_factory("--max-body", "1024")
    s = socket.create_connection((ex.host, ex.port), timeout=10 * SLOW)
    try:
        chunk = b"x" * 4000
        s.sendall(b"POST /command HTTP/1.1\r\nHost: x\r\n" + f"{TOKEN_HEADER}: {ex.token}\r\n".encode()
                  + b"Transfer-Encoding: chunked\r\n\r\n"
                  + b"%x\r\n" % len(chunk) + chunk + b"\r\n0\r\n\r\n")
        head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 413"), head[:200]
    finally:
        s.close()
    assert_alive(ex)


def test_headers_too_large(execd):
    s = socket.create_connection((execd.host, execd.port), timeout=10 * SLOW)
    try:
        s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (20 * 1024) + b"\r\n\r\n")
        head = recv_all(s)
        assert head.startswith(b"HTTP/1.1 431"), head[:200]
    finally:
        s.close()
    assert_alive(execd)


@pytest.mark.parametrize("raw", [
    b"GARBAGE\r\n\r\n",
    b"GET /ping HTTP/9.9\r\n\r\n",
    b"GET /ping HTTP/1.1\r\nHost: x\r\nBad Header Without Colon\r\n\r\n",
    b"POST /command HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"POST /command HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,  # a TLS ClientHello
], ids=["garbage", "bad_version", "header_no_colon", "bad_content_length", "cl_and_te", "tls"])
def test_malformed_http(execd, raw):
    s = socket.create_connection((execd.host, execd.port), timeout=10 * SLOW)
    try:
        s.sendall(raw)
        resp = recv_all(s)  # execd must answer and close the connection
    finally:
        s.close()
    assert resp.startswith(b"HTTP/1.1 400"), resp[:200]
    assert_alive(execd)


def test_half_request_then_close(execd):
    s = socket.create_connection((execd.host, execd.port))
    s.sendall(b"POST /command HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"comm")
    s.close()
    assert_alive(execd)


def test_keep_alive_pipelined_requests(execd):
    s = socket.create_connection((execd.host, execd.port), timeout=10 * SLOW)
    buf = bytearray()

    def three():
        d = s.recv(4096)
        assert d, f"connection closed after {bytes(buf)!r}"
        buf.extend(d)
        return buf.count(b"HTTP/1.1 200") >= 3
    try:
        s.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n" * 3)
        wait_until(three, 10 * SLOW, 0, "three pipelined responses")
    finally:
        s.close()


# ---- authentication ----------------------------------------------------

@pytest.mark.parametrize("method,path", [
    ("POST", "/command"), ("DELETE", "/command?id=x"), ("GET", "/command/status/x"),
    ("GET", "/command/x/logs"), ("GET", "/no/such/route"),
])
@pytest.mark.parametrize("tok", [None, "", "wrong"], ids=["missing", "empty", "wrong"])
def test_unauthorized(execd, method, path, tok):
    headers = {} if tok is None else {TOKEN_HEADER: tok}
    st, h, data = execd.request(method, path, body=b'{"command":"touch /tmp/should-not-run"}',
                                headers=headers, token=False)
    assert_error(st, data, 401, "UNAUTHORIZED")
    assert_alive(execd)


def test_token_prefix_or_case_variants_rejected(execd):
    # (leading/trailing blanks are HTTP optional whitespace, so not tested here)
    for bad in (execd.token[:-1], execd.token + "x", execd.token.upper(), execd.token[::-1]):
        st, _, data = execd.request("GET", "/command/status/x", headers={TOKEN_HEADER: bad}, token=False)
        assert st == 401, (bad, st)


def test_header_name_case_insensitive(execd):
    st, _, data = execd.request("GET", "/command/status/" + "0" * 32,
                                headers={TOKEN_HEADER.lower(): execd.token}, token=False)
    assert st == 404, data


def test_ping_needs_no_token(execd):
    st, h, data = execd.request("GET", "/ping", token=False)
    assert st == 200 and data == b""
    st, h, data = execd.request("GET", "/ping", headers={TOKEN_HEADER: "wrong"}, token=False)
    assert st == 200
    st, h, data = execd.request("HEAD", "/ping", token=False)
    assert st == 200 and h["content-length"] == "0"


def test_insecure_no_auth(execd_factory):
    ex = execd_factory("--insecure-no-auth", token=None)
    res = ex.run("echo open", exact=True)
    assert res.stdout == b"open\n"


def test_token_file(execd_factory, tmp_path):
    f = tmp_path / "tok"
    f.write_text("file-token-123\n")
    ex = execd_factory("--access-token-file", str(f), token=None)
    ex.token = "file-token-123"
    assert ex.run("echo ok", exact=True).stdout == b"ok\n"
    st, _, _ = ex.request("GET", "/command/status/x", headers={TOKEN_HEADER: "file-token-123\n"[:-1] + "4"},
                          token=False)
    assert st == 401


def test_env_token_not_inherited(execd_factory):
    env = dict(os.environ)
    env["EXECD_ACCESS_TOKEN"] = "env-token-456"
    ex = execd_factory(token=None, env=env)
    ex.token = "env-token-456"
    res = ex.run("env", exact=True)
    assert res.status == 200
    assert b"EXECD_ACCESS_TOKEN" not in res.stdout
    assert b"env-token-456" not in res.stdout
    st, _, _ = ex.request("GET", "/command/status/x", headers={TOKEN_HEADER: "other"}, token=False)
    assert st == 401


def test_flag_token_not_in_command_env(execd):
    res = execd.run("env", exact=True)
    assert res.stdout and execd.token.encode() not in res.stdout


def test_token_not_readable_from_proc(execd_factory):
    env = dict(os.environ)
    env["EXECD_ACCESS_TOKEN"] = "env-token-789"
    for ex, tok in ((execd_factory(env=env), None), (execd_factory(token=None, env=env), "env-token-789")):
        if tok:
            ex.token = tok
        # Any user can read /proc/<execd>/cmdline; root can read its environ.
        res = ex.run(f"cat /proc/{ex.pid}/cmdline; cat /proc/{ex.pid}/environ", exact=True)
        assert res.status == 200 and res.stdout
        assert ex.token.encode() not in res.stdout
        assert b"env-token-789" not in res.stdout


def test_no_secret_flag_or_variable_reaches_a_command(execd_factory, tmp_path):
    """Every flag and variable the flag table marks secret (the envd and
    Jupyter tokens too, and where a token file is): none is in a command's
    environment, nor readable through /proc/<execd>."""
    token_file = tmp_path / "envd-token"
    token_file.write_text("envd-file-token-5\n")
    env = dict(os.environ, JUPYTER_TOKEN="jupyter-env-token-3", EXECD_ENVD_ACCESS_TOKEN_FILE=str(token_file))
    ex = execd_factory("--envd-access-token", "envd-flag-token-4", "-jupyter-token=jupyter-flag-token-2", env=env)
    res = ex.run("env", exact=True)
    assert res.status == 200 and b"PATH=" in res.stdout
    for name in (b"JUPYTER_TOKEN", b"EXECD_ENVD_ACCESS_TOKEN_FILE", b"EXECD_ACCESS_TOKEN"):
        assert name not in res.stdout
    res = ex.run(f"cat /proc/{ex.pid}/cmdline; cat /proc/{ex.pid}/environ", exact=True)
    assert res.status == 200 and b"envd-access-token" in res.stdout
    for secret in (ex.token, "envd-flag-token-4", "jupyter-flag-token-2", "jupyter-env-token-3"):
        assert secret.encode() not in res.stdout, secret


def test_token_never_logged(execd_factory):
    ex = execd_factory("--log-level", "debug", check_exit=False)
    tok = ex.token
    ex.run("echo hi", exact=True)
    ex.request("GET", "/command/status/x")
    ex.request("GET", "/command/status/x", headers={TOKEN_HEADER: tok + "zz"}, token=False)
    ex.request("POST", "/command", body=b"{")
    rc = ex.stop()
    assert rc == 0
    log = ex.stderr_text()
    assert "debug" in log.lower() or len(log.splitlines()) > 2, log
    assert tok not in log


def test_json_log_format(execd_factory):
    ex = execd_factory("--log-format", "json", check_exit=False)
    ex.run("true", exact=True)
    assert ex.stop() == 0
    # A sanitized build's runtime writes its own "==PID==WARNING: ..." lines
    # to the same stderr (a stack switch it notes); they are not execd's log.
    asan_own = re.compile(r"==\d+==|False positive error reports may follow|For details see https://github.com/google/sanitizers/")
    lines = [ln for ln in ex.stderr_text().splitlines() if ln.strip() and not asan_own.match(ln)]
    assert lines
    for ln in lines:
        json.loads(ln)


# ---- command line ------------------------------------------------------

def run_cli(*args, env=None, timeout=10):
    e = dict(os.environ if env is None else env)
    e.pop("EXECD_ACCESS_TOKEN", None) if env is None else None
    # A private state dir first (a later --state-dir in `args` wins): a run
    # that gets as far as creating it must not touch /var/lib/execd.
    import tempfile
    with tempfile.TemporaryDirectory(prefix="execd-cli-") as state:
        return subprocess.run([execd_bin(), "--state-dir", state, *args], capture_output=True,
                              timeout=timeout * SLOW, env=e, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args", [
    ["--no-such-flag", "--access-token", "t"],
    ["--port", "abc", "--access-token", "t"],
    ["--port", "70000", "--access-token", "t"],
    ["--port", "-1", "--access-token", "t"],
    ["--port"],
    ["--host", "127.0.0.1", "--port", "0"],  # no token and no --insecure-no-auth
    ["--framing", "fancy", "--access-token", "t"],
    ["--retention", "soon", "--access-token", "t"],
    ["--kill-grace", "-5s", "--access-token", "t"],
    ["--max-body", "lots", "--access-token", "t"],
    ["--log-level", "chatty", "--access-token", "t"],
    ["--access-token-file", "/nonexistent/token", "--port", "0"],
    ["--access-token", "t", "stray-positional"],
], ids=["unknown_flag", "port_abc", "port_big", "port_negative", "port_no_value", "no_token",
        "bad_framing", "bad_retention", "bad_kill_grace", "bad_max_body", "bad_log_level",
        "missing_token_file", "positional"])
def test_cli_errors(args):
    p = run_cli("--host", "127.0.0.1", *args) if "--host" not in args else run_cli(*args)
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("execd: "), lines


def test_empty_token_file_refused(tmp_path):
    f = tmp_path / "empty"
    f.write_text("\n")
    p = run_cli("--host", "127.0.0.1", "--port", "0", "--access-token-file", str(f))
    assert p.returncode == 2, p.stderr
    assert p.stderr.decode().startswith("execd: ")


def test_help_and_version():
    p = run_cli("--help")
    assert p.returncode == 0, p.stderr
    assert b"--access-token" in p.stdout + p.stderr
    p = run_cli("--version")
    assert p.returncode == 0, p.stderr
    assert (p.stdout + p.stderr).strip()


def test_command_line_reference_is_what_the_binary_prints():
    """docs/command-line.md holds what `execd --help-markdown` prints from the
    flag table the parser reads (execd/config_flags.cc): a flag added,
    changed or removed without `make docs` fails here."""
    p = run_cli("--help-markdown")
    assert p.returncode == 0, p.stderr
    part = p.stdout.decode()
    assert "| `--access-token TOKEN` |" in part, part[:500]
    doc = (Path(__file__).resolve().parents[2] / "docs" / "command-line.md").read_text()
    assert part in doc, "docs/command-line.md differs from `execd --help-markdown`: run `make docs`"


def test_port_in_use():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        p = run_cli("--host", "127.0.0.1", "--port", str(port), "--access-token", "t")
        assert p.returncode != 0
        assert p.stderr.decode().strip().splitlines()[-1].startswith("execd: ") or p.stderr
    finally:
        s.close()


def test_go_style_single_dash_and_equals(execd_factory):
    ex = execd_factory("-retention=2s", "--kill-grace=300ms")
    assert ex.ping() == 200


def test_retention_expires_records(execd_factory):
    ex = execd_factory("--retention", "500ms")
    res = ex.run("echo gone-soon", exact=True)
    st, js = ex.status(res.id)
    assert st == 200 and js["running"] is False
    wait_until(lambda: ex.status(res.id)[0] == 404, 15 * SLOW, 0.05, "finished record to expire")
    st, _, _ = ex.logs(res.id)
    assert st == 404


def test_retention_keeps_running_commands(execd_factory, tmp_path):
    ex = execd_factory("--retention", "200ms")
    gate = tmp_path / "gate"
    res = ex.run(f"echo a; while [ ! -e {gate} ]; do sleep 0.01; done", background=True)
    # well past the retention period the running record must still be there
    other = ex.run("echo b", exact=True)
    wait_until(lambda: ex.status(other.id)[0] == 404, 15 * SLOW, 0.05, "other record to expire")
    st, js = ex.status(res.id)
    assert st == 200 and js["running"] is True
    gate.touch()
    ex.wait_finished(res.id)


def test_log_limit(execd_factory):
    ex = execd_factory("--log-limit", "1000")
    res = ex.run("head -c 5000 /dev/zero | tr '\\0' 'q'", exact=True)
    # the stream itself is never truncated
    assert res.stdout == b"q" * 5000
    assert res.events[-1]["stdout_bytes"] == 5000
    st, h, body = ex.logs(res.id)
    assert st == 200
    assert len(body) <= 1000
    assert set(body) <= {ord("q")}
