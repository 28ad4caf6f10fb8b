"""The security model (README "Security model"), row by row: who may call
what, on which listener, in which mode. Every route of every listener (the
daemon lists its route tables at debug level, so a route added later is
probed too) without a token, with a wrong one, with the other listener's
token, before and after POST /init; the insecure mode and what it opens;
every route that starts or feeds a process refused while frozen; and a
non-root command and an isolated session that probe every port and socket
they can see, execd's among them, gaining nothing."""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import shlex
import socket
import struct

import pytest

from e2b_support import CI_RE, listener_url
from execd_client import SLOW, TOKEN_HEADER, wait_until

ENVD_TOKEN = "envd-token-of-the-e2b-listeners"
ROUTE_RE = re.compile(r" route (execd|e2b) (\S+) (\S+) (token|no-token)( while-held)?( starts-processes)?$", re.M)


class Route:
    def __init__(self, m):
        self.listener, self.method, self.pattern = m.group(1), m.group(2), m.group(3)
        self.token = m.group(4) == "token"
        self.while_held = bool(m.group(5))
        self.starts_processes = bool(m.group(6))
        # Parameters filled in; a prefix route gets a path below its prefix.
        path = re.sub(r":[a-z_]+", "x", self.pattern)
        self.path = path[:-1] + "1/x" if path.endswith("*") else path
        self.method = "POST" if self.method == "ANY" else self.method

    def __repr__(self):
        return f"{self.listener} {self.method} {self.pattern}"


def routes_of(ex) -> list[Route]:
    found = [Route(m) for m in ROUTE_RE.finditer(ex.stderr_text())]
    assert found, "the daemon listed no routes (is --log-level debug given?)"
    return found


def call(url: str, method: str, path: str, headers: dict | None = None, body: bytes | None = None):
    """(status, body) of one request; a body is sent for POST and PUT."""
    host, port = url.split("//", 1)[1].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=30 * SLOW)
    try:
        h = dict(headers or {})
        if method in ("POST", "PUT") and body is None:
            body = b"{}"
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def start(execd_factory, *extra, **kw):
    """An execd with both E2B listeners, its routes listed in its log; returns
    (execd, {"execd": url, "e2b": envd url, "ci": code-interpreter url})."""
    ex = execd_factory("--log-level", "debug", "--envd-port", "0", "--code-interpreter-port", "0", *extra, **kw)
    urls = {"execd": f"http://127.0.0.1:{ex.port}", "e2b": listener_url(ex), "ci": listener_url(ex, CI_RE)}
    return ex, urls


def refused(listener: str, status: int, body: bytes) -> bool:
    """401 in the listener's error shape (E2B's /files answer as envd's REST
    routes do, the Connect routes with Connect's code)."""
    if status != 401:
        return False
    code = json.loads(body)["code"]
    return code == "UNAUTHORIZED" if listener == "execd" else code in ("unauthenticated", "UNAUTHORIZED")


def assert_every_route_wants_a_token(routes, urls, credentials: dict):
    """Each route of each listener, with each of `credentials` (a name and
    the headers it sends), is refused with 401 before its handler: token
    routes and self-checked ones (E2B's /files, which take a signature
    instead) alike. Probes answer anyone."""
    for r in routes:
        targets = [urls["execd"]] if r.listener == "execd" else [urls["e2b"], urls["ci"]]
        for url in targets:
            for name, headers in credentials.items():
                st, body = call(url, r.method, r.path, headers)
                if r.while_held and not r.token:  # a probe
                    assert st < 400, (r, name, st, body)
                else:
                    assert refused(r.listener, st, body), (r, url, name, st, body)


# ---- the token on every listener --------------------------------------------------------------------

def test_every_route_of_every_listener_wants_its_token(execd_factory):
    ex, urls = start(execd_factory, "--envd-access-token", ENVD_TOKEN)
    routes = routes_of(ex)
    assert {r.listener for r in routes} == {"execd", "e2b"}
    assert any(r.pattern == "/process.Process/Start" for r in routes)
    execd_routes = [r for r in routes if r.listener == "execd"]
    e2b_routes = [r for r in routes if r.listener == "e2b"]
    assert_every_route_wants_a_token(execd_routes, urls, {
        "none": {},
        "wrong": {TOKEN_HEADER: "wrong"},
        "the envd token": {TOKEN_HEADER: ENVD_TOKEN},
        "the token in E2B's header": {"X-Access-Token": ex.token},
    })
    assert_every_route_wants_a_token(e2b_routes, urls, {
        "none": {},
        "wrong": {"X-Access-Token": "wrong"},
        "wrong traffic token": {"E2B-Traffic-Access-Token": "wrong"},
        "wrong execd header": {TOKEN_HEADER: "wrong"},
    })
    # What each listener does take.
    assert call(urls["execd"], "GET", "/command", {TOKEN_HEADER: ex.token})[0] == 200
    for url in (urls["e2b"], urls["ci"]):
        for headers in ({"X-Access-Token": ENVD_TOKEN}, {"X-Access-Token": ex.token},
                        {"E2B-Traffic-Access-Token": ex.token}, {TOKEN_HEADER: ex.token}):
            assert call(url, "POST", "/process.Process/List", headers)[0] == 200, headers


def test_the_e2b_listeners_take_execds_token_without_an_envd_token(execd_factory):
    """The finding: with --envd-port and no envd token the E2B routes answered
    anyone on loopback. Now they take execd's token, and only that."""
    ex, urls = start(execd_factory)
    assert "listening on 127.0.0.1" in ex.stderr_text() and "with execd's token" in ex.stderr_text()
    assert_every_route_wants_a_token([r for r in routes_of(ex) if r.listener == "e2b"], urls,
                                     {"none": {}, "wrong": {"X-Access-Token": "wrong"}})
    start_body = b"\x00" + struct.pack(">I", 60) + json.dumps(
        {"process": {"cmd": "/usr/bin/id", "args": ["-u"]}}).encode().ljust(60)
    st, body = call(urls["e2b"], "POST", "/process.Process/Start", {"Content-Type": "application/connect+json"},
                    start_body)
    assert st == 401 and b"start" not in body
    assert call(urls["e2b"], "POST", "/process.Process/List", {"X-Access-Token": ex.token})[0] == 200


def test_insecure_mode_is_explicit_and_says_so(execd_factory):
    """No token anywhere only with --insecure-no-auth: execd's listener is
    then open, and the E2B ones too unless they have an envd token (then they
    take only that one). Both say so at start."""
    ex, urls = start(execd_factory, "--insecure-no-auth", token=None)
    log = ex.stderr_text()
    assert "running WITHOUT an access token (--insecure-no-auth)" in log
    assert re.search(r"warning envd API \(E2B SDKs\) listening on 127\.0\.0\.1:\d+ WITHOUT a token", log)
    assert call(urls["execd"], "GET", "/command")[0] == 200
    assert call(urls["e2b"], "POST", "/process.Process/List")[0] == 200
    ex2, urls2 = start(execd_factory, "--insecure-no-auth", "--envd-access-token", ENVD_TOKEN, token=None)
    assert "with the envd token" in ex2.stderr_text()
    assert call(urls2["execd"], "GET", "/command")[0] == 200
    assert refused("e2b", *call(urls2["e2b"], "POST", "/process.Process/List"))
    assert call(urls2["e2b"], "POST", "/process.Process/List", {"X-Access-Token": ENVD_TOKEN})[0] == 200


# ---- the runtime-binding hold ---------------------------------------------------------------------------

def test_nothing_anywhere_answers_before_init(execd_factory):
    """A warm execd (--runtime-init, no token yet) holds every listener: the
    E2B routes too (the finding: they served before the binding, as root,
    to whoever came first). After the bind, the bound token's hash opens
    both kinds of listener and nothing else does."""
    ex, urls = start(execd_factory, "--runtime-init", "--envd-access-token", ENVD_TOKEN, token=None)
    routes = routes_of(ex)
    for r in routes:
        targets = [urls["execd"]] if r.listener == "execd" else [urls["e2b"], urls["ci"]]
        for url in targets:
            for headers in ({}, {"X-Access-Token": ENVD_TOKEN}):
                st, body = call(url, r.method, r.path, headers)
                if r.while_held:
                    continue  # the probes, and /init (tried below)
                assert st == 503 and json.loads(body)["code"] == "NOT_INITIALIZED", (r, url, st, body)
    assert call(urls["e2b"], "GET", "/health")[0] == 204
    bound = "the-bound-token"
    digest = hashlib.sha256(bound.encode()).hexdigest()
    st, body = call(urls["execd"], "POST", "/init", {"Content-Type": "application/json"},
                    json.dumps({"sandboxId": "sbx-1", "generation": 1, "accessTokenHash": "sha256:" + digest}).encode())
    assert st == 200, body
    assert_every_route_wants_a_token([r for r in routes_of(ex) if r.pattern != "/init"], urls, {
        "none": {}, "wrong": {TOKEN_HEADER: "wrong", "X-Access-Token": "wrong"}})
    assert call(urls["execd"], "GET", "/command", {TOKEN_HEADER: bound})[0] == 200
    assert refused("execd", *call(urls["execd"], "GET", "/command", {TOKEN_HEADER: ENVD_TOKEN}))
    for headers in ({"X-Access-Token": bound}, {"X-Access-Token": ENVD_TOKEN}):
        assert call(urls["e2b"], "POST", "/process.Process/List", headers)[0] == 200


# ---- freezing -----------------------------------------------------------------------------------------

def test_every_route_that_starts_or_feeds_a_process_is_refused_while_frozen(execd_factory, tmp_path):
    ex, urls = start(execd_factory, "--isolated-allowed-paths", str(tmp_path))
    if ex.request("GET", "/ping", token=False)[1].get("x-execd-containment") in ("process-group", "subreaper"):
        pytest.skip("no cgroups here to freeze")
    iso = ex.json("GET", "/v1/isolated/capabilities")[1]["available"]
    session = None
    if iso:
        st, s = ex.json("POST", "/v1/isolated/session", {"workspace": {"path": str(tmp_path), "mode": "rw"}})
        assert st == 201, s
        session = s["session_id"]
    gated = [r for r in routes_of(ex) if r.starts_processes]
    names = {r.pattern for r in gated}
    for must in ("/command", "/command/:id/stdin", "/session", "/session/:id/run", "/pty", "/code", "/code/context",
                 "/v1/isolated/session", "/v1/isolated/session/:id/run", "/process.Process/Start",
                 "/process.Process/SendInput", "/process.Process/StreamInput", "/execute", "/contexts"):
        assert must in names, must
    assert ex.json("POST", "/freeze")[0] == 200
    try:
        for r in gated:
            path = r.path.replace("/session/x", f"/session/{session}") if session else r.path
            url = urls["execd"] if r.listener == "execd" else urls["e2b"]
            st, body = call(url, r.method, path, {TOKEN_HEADER: ex.token})
            assert st == 409 and json.loads(body)["code"] == "FROZEN", (r, st, body)
        if session:  # a foreground and a background run: refused, not accepted and run after the thaw
            for background in (False, True):
                st, body = ex.json("POST", f"/v1/isolated/session/{session}/run",
                                   {"code": "touch ran", "background": background})
                assert st == 409 and body["code"] == "FROZEN"
    finally:
        assert ex.json("POST", "/thaw")[0] == 200
    assert not (tmp_path / "ran").exists()
    if session:
        st, _, body = ex.request("POST", f"/v1/isolated/session/{session}/run", {"code": "echo thawed"})
        assert st == 200 and b"thawed" in body
        assert ex.request("DELETE", f"/v1/isolated/session/{session}")[0] == 200


# ---- what a command or a session can reach ----------------------------------------------------------

# Run inside the sandbox: every TCP port listening on any address (tried on
# loopback) and every listening Unix socket it can see, each asked to run
# `id -u` or read /etc/shadow the ways execd's APIs offer, without a token.
PROBE = r'''
import json, http.client, socket, struct, os
def listening_tcp():
    ports = set()
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            for line in open(f).read().splitlines()[1:]:
                p = line.split()
                if p[3] == "0A":
                    ports.add(int(p[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return sorted(ports)
def listening_unix():
    out = []
    try:
        for line in open("/proc/net/unix").read().splitlines()[1:]:
            p = line.split()
            if len(p) >= 8 and int(p[3], 16) & 0x10000:
                out.append(p[7])
    except OSError:
        pass
    return out
start = json.dumps({"process": {"cmd": "/usr/bin/id", "args": ["-u"]}}).encode()
start = b"\0" + struct.pack(">I", len(start)) + start
ASKS = [("POST", "/process.Process/Start", start, "application/connect+json"),
        ("POST", "/process.Process/List", b"{}", "application/json"),
        ("POST", "/command", b'{"command": "id -u"}', "application/json"),
        ("POST", "/execute", b'{"code": "import os; os.getuid()"}', "application/json"),
        ("GET", "/files?path=/etc/shadow", None, None),
        ("GET", "/files/download?path=/etc/shadow", None, None)]
def ask(conn, method, path, body, ctype):
    try:
        conn.request(method, path, body=body, headers={"Content-Type": ctype} if ctype else {})
        r = conn.getresponse()
        return [r.status, r.read(65536).decode("latin-1")]
    except Exception as e:
        return ["error", type(e).__name__]
    finally:
        conn.close()
class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=5)
        self.path_ = path
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(("\0" + self.path_[1:]) if self.path_.startswith("@") else self.path_)
results = {"uid": os.getuid(), "tcp": {}, "unix": {}}
for port in listening_tcp():
    results["tcp"][port] = [ask(http.client.HTTPConnection("127.0.0.1", port, timeout=5), *a) for a in ASKS]
for path in listening_unix():
    results["unix"][path] = [ask(UnixConnection(path), *a) for a in ASKS]
print(json.dumps(results))
'''


def assert_probe_gained_nothing(results: dict, execd_ports: list[int], uid: int):
    assert results["uid"] == uid
    for port in execd_ports:
        answers = results["tcp"].get(str(port))
        assert answers, f"execd's port {port} was not seen by the probe: {sorted(results['tcp'])}"
        for status, body in answers:
            assert status == 401, (port, status, body[:200])
    for where in ("tcp", "unix"):
        for target, answers in results[where].items():
            for status, body in answers:
                # Nothing anywhere ran a process for the probe or showed it the shadow file.
                assert '"start"' not in body and "root:" not in body and '"type":"init"' not in body, \
                    (where, target, status, body[:300])


def test_a_non_root_command_gains_nothing_from_execds_listeners(execd_factory):
    """The finding: a command with a non-root `uid` called Start on the E2B
    listener and got a root process with every capability."""
    ex, urls = start(execd_factory)
    ports = [int(u.rsplit(":", 1)[1]) for u in urls.values()]
    r = ex.run("python3 -c " + shlex.quote(PROBE), uid=65534, sock_timeout=120 * SLOW)
    assert r.terminal["exit_code"] == 0, r.texts("stderr")
    assert_probe_gained_nothing(json.loads("".join(r.texts("stdout"))), ports, 65534)


def test_an_isolated_session_gains_nothing_from_execds_listeners(execd_factory, tmp_path):
    """The finding: a session with default settings (share_net) reached the
    E2B listener and got a root process in the host's namespaces."""
    ex, urls = start(execd_factory, "--isolated-allowed-paths", str(tmp_path))
    if not ex.json("GET", "/v1/isolated/capabilities")[1]["available"]:
        pytest.skip("isolation unavailable here")
    ports = [int(u.rsplit(":", 1)[1]) for u in urls.values()]
    st, s = ex.json("POST", "/v1/isolated/session", {"workspace": {"path": str(tmp_path), "mode": "rw"}})
    assert st == 201 and s["share_net"] is True, s
    try:
        (tmp_path / "probe.py").write_text(PROBE)
        st, _, body = ex.request("POST", f"/v1/isolated/session/{s['session_id']}/run",
                                 {"code": f"python3 {tmp_path}/probe.py"}, timeout=120 * SLOW)
        assert st == 200, body
        events = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        out = "".join(e.get("text", "") + "\n" for e in events if e["type"] == "stdout")
        assert_probe_gained_nothing(json.loads(out), ports, 0)
    finally:
        ex.request("DELETE", f"/v1/isolated/session/{s['session_id']}")
