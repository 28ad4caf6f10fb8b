"""Caller-bound creation: GET /execution/instance, GET /execution/operation,
POST /command/operations and POST /pty/operations, against the real daemon.

Written from OpenSandbox PR 1771 (branch commits 397f5c38 and 05e1ccc5:
components/execd/pkg/runtime/operations.go, pkg/web/controller/operations.go,
command.go, pty_controller.go, specs/execd-api.yaml); the released SDKs
(1.1.1) do not call these routes yet, so the tests speak raw HTTP.

An identity is `<instance_id>.<issued_at>.<token>`, minted from what GET
/execution/instance says; a creation under it happens once whatever the
client retries, and its record (202 creating, 200 created|failed) names the
command id / PTY session id the ordinary routes serve.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import struct
import threading
import time

import pytest
from websockets.sync.client import connect

from execd_client import SLOW, TOKEN_HEADER, wait_until

TIMEOUT = 10 * SLOW
OP_HEADER = "X-EXECD-OPERATION-ID"


def instance(ex) -> dict:
    st, h, data = ex.request("GET", "/execution/instance")
    assert st == 200, (st, data)
    assert h.get("cache-control") == "no-store"
    return json.loads(data)


def new_id(ex, token=None, issued_at=None) -> str:
    inst = instance(ex)
    return f"{inst['instance_id']}.{inst['issued_at'] if issued_at is None else issued_at}." \
           f"{token or secrets.token_urlsafe(16)}"


def create(ex, kind, body, token=True):
    st, h, data = ex.request("POST", f"/{kind}/operations", body, token=token)
    assert h.get("cache-control") == "no-store", (st, h)
    return st, (json.loads(data) if data else None)


def lookup(ex, kind, identity, headers=None):
    hdrs = {} if identity is None else {OP_HEADER: identity}
    hdrs.update(headers or {})
    st, h, data = ex.request("GET", f"/execution/operation?kind={kind}", headers=hdrs)
    assert h.get("cache-control") == "no-store", (st, h)
    return st, json.loads(data)


def settled(ex, kind, identity) -> dict:
    def done():
        st, js = lookup(ex, kind, identity)
        assert st in (200, 202), (st, js)
        return js if js["state"] != "creating" else None
    return wait_until(done, TIMEOUT, 0.02, f"{kind} operation {identity} to settle")


# ---- discovery -----------------------------------------------------------------------------------

def test_instance_document(execd_factory):
    ex = execd_factory()
    inst = instance(ex)
    assert set(inst) == {"instance_id", "issued_at", "retention_seconds", "capacity"}
    assert len(inst["instance_id"]) == 32 and all(c in "0123456789abcdef" for c in inst["instance_id"])
    assert abs(inst["issued_at"] - time.time()) < 5
    assert inst["retention_seconds"] == 86400
    assert inst["capacity"] == 4096
    assert instance(ex)["instance_id"] == inst["instance_id"]  # one per process
    other = execd_factory("--operation-capacity", "7")
    assert instance(other)["capacity"] == 7
    assert instance(other)["instance_id"] != inst["instance_id"]
    env = dict(os.environ, EXECD_OPERATION_CAPACITY="5")
    env.pop("EXECD_ACCESS_TOKEN", None)
    assert instance(execd_factory(env=env))["capacity"] == 5
    assert instance(execd_factory("--operation-capacity", "9", env=env))["capacity"] == 9  # the flag wins


# ---- commands ------------------------------------------------------------------------------------

def test_command_created_once_under_16_concurrent_posts(execd, tmp_path):
    marker = tmp_path / "runs"
    identity = new_id(execd)
    body = {"operation_id": identity, "command": f"echo run >> {marker}; sleep 0.3; echo out",
            "background": True, "envs": {"B": "2", "A": "1"}}
    results = [None] * 16
    go = threading.Barrier(16)

    def post(i):
        go.wait()
        results[i] = create(execd, "command", body)

    threads = [threading.Thread(target=post, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = {js["id"] for st, js in results}
    assert len(ids) == 1, results
    for st, js in results:
        assert st in (200, 202), (st, js)
        assert js["kind"] == "command" and js["state"] in ("creating", "created")
        assert (st == 202) == (js["state"] == "creating")
    assert any(st == 202 for st, _ in results)  # the owner's answer is the snapshot of its claim
    cid = ids.pop()
    assert len(cid) == 32
    op = settled(execd, "command", identity)
    assert op["state"] == "created" and op["id"] == cid
    assert op["expires_at"].endswith("Z")
    status = execd.wait_finished(cid)
    assert status["exit_code"] == 0
    assert marker.read_text() == "run\n"  # one process for 16 requests
    st, h, logs = execd.logs(cid)
    assert st == 200 and logs.endswith(b"out\n"), logs
    # A retry after the end is the same record, env order notwithstanding.
    again = dict(body, envs={"A": "1", "B": "2"})
    st, js = create(execd, "command", again)
    assert st == 200 and js["id"] == cid and js["state"] == "created"
    assert marker.read_text() == "run\n"


def test_conflict_on_a_different_body(execd):
    identity = new_id(execd)
    st, js = create(execd, "command", {"operation_id": identity, "command": "true"})
    assert st in (200, 202), js
    for other in ({"command": "false"}, {"command": "true", "cwd": "/tmp"}, {"command": "true", "timeout": 5},
                  {"command": "true", "background": True}, {"argv": ["true"]}):
        st, js = create(execd, "command", {"operation_id": identity, **other})
        assert st == 409 and js == {"code": "operation_conflict",
                                    "message": "operation identity was used with a different request"}, (other, js)
    # The same identity is another key under kind=pty: not found there, and free to create.
    st, js = lookup(execd, "pty", identity)
    assert st == 404 and js["code"] == "operation_not_found"
    st, js = create(execd, "pty", {"operation_id": identity})
    assert st == 202


def test_foreground_exit_code_and_failed_start(execd, tmp_path):
    identity = new_id(execd)
    st, js = create(execd, "command", {"operation_id": identity, "command": "exit 7"})
    assert st in (200, 202)
    assert settled(execd, "command", identity)["state"] == "created"
    assert execd.wait_finished(js["id"])["exit_code"] == 7
    # A working directory that cannot be: the creation fails, once.
    blocker = tmp_path / "file"
    blocker.write_text("")
    bad = {"operation_id": new_id(execd), "command": "echo never", "cwd": str(blocker / "sub")}
    st, js = create(execd, "command", bad)
    assert st in (200, 202)
    op = settled(execd, "command", bad["operation_id"])
    assert op["state"] == "failed" and op["id"] == js["id"]
    st, js2 = create(execd, "command", bad)
    assert st == 200 and js2["state"] == "failed" and js2["id"] == js["id"]


def test_lookup_not_found_and_expired(execd):
    st, js = lookup(execd, "command", new_id(execd))
    assert st == 404 and js == {"code": "operation_not_found",
                                "message": "operation not found in this authenticated execd instance"}
    old = new_id(execd, issued_at=int(time.time()) - 86400 - 60)
    st, js = lookup(execd, "command", old)
    assert st == 410 and js["code"] == "operation_expired"
    st, js = create(execd, "command", {"operation_id": old, "command": "true"})
    assert st == 410 and js == {"code": "operation_expired", "message":
                                "recovery window expired; previous execution outcome is unknown, creation refused"}
    for kind in ("", "shell", "Command"):
        st, js = lookup(execd, kind, new_id(execd))
        assert st == 400 and js == {"code": "invalid_operation_kind", "message": "kind must be command or pty"}


# ---- identities ----------------------------------------------------------------------------------

SHAPE = "operation_id must contain instance, server timestamp, and an 8-128 character random token"


def test_bad_identities(execd):
    inst = instance(execd)
    iid, now = inst["instance_id"], inst["issued_at"]
    cases = {
        "": SHAPE,
        "abc": SHAPE,
        f"{iid}.{now}": SHAPE,
        f"{iid}.{now}.tok.en123456": SHAPE,
        f"{iid}x.{now}.token123": SHAPE,
        f"{iid[:31]}.{now}.token123": SHAPE,
        f"{iid}.{now}.short": SHAPE,
        f"{iid}.{now}." + "t" * 129: SHAPE,
        f"{iid}.{now}.tok=en123": SHAPE,
        f"{iid}.{now}.tok en123": SHAPE,
        f"{iid}..token123": "invalid operation timestamp",
        f"{iid}.-1.token123": "invalid operation timestamp",
        f"{iid}.+{now}.token123": "invalid operation timestamp",
        f"{iid}.0{now}.token123": "invalid operation timestamp",
        f"{iid}.1e9.token123": "invalid operation timestamp",
        f"{iid}.99999999999999999999.token123": "invalid operation timestamp",
        f"{iid}.{now + 3600}.token123": "operation timestamp is in the future; use the server-issued timestamp",
    }
    for identity, message in cases.items():
        for kind in ("command", "pty"):
            body = {"operation_id": identity, "command": "true"} if kind == "command" else {"operation_id": identity}
            if identity == "":
                continue  # an empty operation_id is a body error (below)
            st, js = create(execd, kind, body)
            assert st == 400 and js == {"code": "invalid_operation_id", "message": message}, (identity, js)
        st, js = lookup(execd, "command", identity)
        assert st == 400 and js == {"code": "invalid_operation_id", "message": message}, (identity, js)
    st, js = lookup(execd, "pty", None)  # no header at all
    assert st == 400 and js["message"] == SHAPE
    # Timestamp 0 and the present are fine (0 is long expired).
    st, js = lookup(execd, "command", f"{iid}.0.token123")
    assert st == 410


def test_instance_mismatch(execd_factory):
    a, b = execd_factory(), execd_factory()
    foreign = new_id(a)
    msg = ("execd instance changed or identity belongs to another sandbox; previous execution outcome is unknown, "
           "do not retry with a new identity")
    st, js = create(b, "command", {"operation_id": foreign, "command": "true"})
    assert st == 409 and js == {"code": "operation_instance_mismatch", "message": msg}
    st, js = lookup(b, "pty", foreign)
    assert st == 409 and js["code"] == "operation_instance_mismatch"
    # A restart is another instance too.
    st, js = create(a, "command", {"operation_id": foreign, "command": "true"})
    assert st in (200, 202)
    a.stop()
    c = execd_factory(state_dir=a.state_dir)
    st, js = lookup(c, "command", foreign)
    assert st == 409 and js["code"] == "operation_instance_mismatch"


def test_capacity(execd_factory):
    ex = execd_factory("--operation-capacity", "3")
    ids = [new_id(ex) for _ in range(4)]
    for i in ids[:3]:
        st, js = create(ex, "command", {"operation_id": i, "command": "true"})
        assert st == 202, js
    st, js = create(ex, "pty", {"operation_id": ids[3]})
    assert st == 503 and js == {"code": "operation_capacity_exceeded",
                                "message": "operation recovery capacity reached; creation refused"}
    # Retries of what is kept still answer; nothing new is recorded.
    st, js = create(ex, "command", {"operation_id": ids[0], "command": "true"})
    assert st in (200, 202)
    st, js = lookup(ex, "pty", ids[3])
    assert st == 404


def test_capacity_flag_is_checked(execd_factory):
    from execd_client import start_execd
    for bad in ("0", "-1", "x"):
        proc, pump = start_execd("--operation-capacity", bad, wait=False)
        assert proc.wait(20 * SLOW) != 0
        pump.join(5)
        assert "operation-capacity" in pump.text(), pump.text()


# ---- PTY -----------------------------------------------------------------------------------------

def test_pty_creation_lookup_and_attach(execd, tmp_path):
    identity = new_id(execd)
    body = {"operation_id": identity, "cwd": str(tmp_path / "made"), "command": "echo hi-from-pty"}
    st, js = create(execd, "pty", body)
    assert st == 202 and js["kind"] == "pty" and js["state"] == "creating", js
    sid = js["id"]
    op = settled(execd, "pty", identity)
    assert op == dict(js, state="created")
    assert (tmp_path / "made").is_dir()
    st, status = execd.json("GET", f"/pty/{sid}")
    assert st == 200 and status["session_id"] == sid and status["running"] is False
    st, again = create(execd, "pty", body)
    assert st == 200 and again["id"] == sid
    st, conflict = create(execd, "pty", dict(body, command="echo other"))
    assert st == 409 and conflict["code"] == "operation_conflict"
    url = execd.base_url.replace("http://", "ws://", 1) + f"/pty/{sid}/ws?pty=0"
    out = b""
    with connect(url, additional_headers={TOKEN_HEADER: execd.token}, open_timeout=TIMEOUT,
                 ping_interval=None) as ws:
        deadline = time.monotonic() + TIMEOUT
        while b"hi-from-pty" not in out and time.monotonic() < deadline:
            try:
                m = ws.recv(timeout=0.5)
            except TimeoutError:
                continue
            except Exception:
                break
            if isinstance(m, bytes) and m[0] in (1, 2):
                out += m[1:]
    assert b"hi-from-pty" in out
    st, _, _ = execd.request("DELETE", f"/pty/{sid}")
    assert st == 200
    st, js = lookup(execd, "pty", identity)  # the record outlives the session
    assert st == 200 and js["id"] == sid


def test_pty_bad_cwd_fails(execd, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    identity = new_id(execd)
    st, js = create(execd, "pty", {"operation_id": identity, "cwd": str(blocker / "x")})
    assert st == 202
    assert settled(execd, "pty", identity)["state"] == "failed"
    st, _, _ = execd.request("GET", f"/pty/{js['id']}")
    assert st == 404


# ---- tokens, garbage, hostile clients ------------------------------------------------------------

def test_no_token(execd):
    want = {"code": "UNAUTHORIZED", "message": "Invalid or missing execd access token"}
    for method, path, body in (("GET", "/execution/instance", None),
                               ("GET", "/execution/operation?kind=command", None),
                               ("POST", "/command/operations", {"operation_id": "x", "command": "true"}),
                               ("POST", "/pty/operations", {})):
        for hdrs in ({}, {TOKEN_HEADER: "wrong"}):
            st, h, data = execd.request(method, path, body, headers=hdrs, token=False)
            assert st == 401 and json.loads(data) == want and h.get("cache-control") == "no-store", (path, data)
    # The legacy routes keep their words.
    st, h, data = execd.request("GET", "/command", token=False)
    assert st == 401 and "X-EXECD-ACCESS-TOKEN" in json.loads(data)["message"]


def test_records_belong_to_the_token(execd_factory):
    # Without auth every caller is the one anonymous principal.
    ex = execd_factory("--insecure-no-auth", token=None)
    identity = new_id(ex)
    st, js = create(ex, "command", {"operation_id": identity, "command": "true"})
    assert st == 202
    st, js2 = lookup(ex, "command", identity)
    assert st in (200, 202) and js2["id"] == js["id"]


PARSE = "error parsing request, MAYBE invalid body format. "


def test_garbage_bodies(execd):
    good = new_id(execd)
    big = json.dumps({"operation_id": good, "command": "true", "cwd": "x" * (1 << 20)})
    cases = [
        ("", "EOF"),
        ("   \n", "EOF"),
        ("{", "invalid creation body"),
        ('{"operation_id": "' + good, "invalid creation body"),
        ("nul", "invalid creation body"),
        ("\xff\xfe", "invalid creation body"),
        ("[1,2]", "invalid creation JSON"),
        ('"text"', "invalid creation JSON"),
        ("42", "invalid creation JSON"),
        ("null", "operation_id must be a nonempty string"),
        ("{}", "operation_id must be a nonempty string"),
        ('{"operation_id": ""}', "operation_id must be a nonempty string"),
        ('{"operation_id": 5}', "operation_id must be a nonempty string"),
        ('{"operation_id": null, "command": "true"}', "operation_id must be a nonempty string"),
        (json.dumps({"operation_id": good, "command": "true"}) + " {}", "unexpected trailing creation data"),
        (json.dumps({"operation_id": good, "command": "true"}) + "x", "unexpected trailing creation data"),
        (json.dumps({"operation_id": good, "command": "true"}) + "}", "unexpected trailing creation data"),
        (json.dumps({"operation_id": good, "command": "true", "extra": 1}), "invalid creation fields"),
        (json.dumps({"operation_id": good, "command": "true", "id": "mine"}), "invalid creation fields"),
        (json.dumps({"operation_id": good, "command": "true", "argv": ["true"]}), "invalid creation fields"),
        (json.dumps({"operation_id": good, "command": None}), "invalid creation fields"),
        (json.dumps({"operation_id": good, "argv": None}), "invalid creation fields"),
        (json.dumps({"operation_id": good, "argv": ["true", None]}), "invalid creation fields"),
        (json.dumps({"operation_id": good, "command": "true", "timeout": "5"}), "invalid creation fields"),
        (json.dumps({"operation_id": good, "command": "true", "uid": -1}), "invalid creation fields"),
        (json.dumps({"operation_id": good, "command": "true", "envs": []}), "invalid creation fields"),
        (big, "operation creation body exceeds 1 MiB"),
        ("[" * 100000, "invalid creation body"),
        ('{"a":' * 5000 + "1" + "}" * 5000, "invalid creation body"),
    ]
    for body, message in cases:
        st, js = create(execd, "command", body)
        assert st == 400 and js == {"code": "INVALID_REQUEST_BODY", "message": PARSE + message}, (body[:80], js)
        assert good not in js["message"]
    for bad in ({"command": ""}, {"argv": []}, {"argv": [""]}, {"command": "true", "timeout": -1},
                {"command": "true", "gid": 5}, {"command": "true", "timeout": 9223372036855}):
        st, js = create(execd, "command", {"operation_id": good, **bad})
        assert st == 400 and js == {"code": "INVALID_REQUEST_BODY", "message": "invalid command request"}, (bad, js)
    for body, message in (("", "EOF"), ("{", "invalid creation body"), ("{}", "operation_id must be a nonempty string"),
                          (json.dumps({"operation_id": good, "argv": ["sh"]}), "invalid creation fields"),
                          (json.dumps({"operation_id": good, "cwd": 5}), "invalid creation fields")):
        st, js = create(execd, "pty", body)
        assert st == 400 and js == {"code": "INVALID_REQUEST_BODY", "message": "error parsing request: " + message}
    # None of that claimed the identity.
    st, js = lookup(execd, "command", good)
    assert st == 404
    assert execd.ping() == 200


def raw_socket(ex):
    s = socket.create_connection((ex.host, ex.port), timeout=TIMEOUT)
    return s


def reset(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def test_client_resets_mid_request(execd, tmp_path):
    marker = tmp_path / "runs"
    identity = new_id(execd)
    body = json.dumps({"operation_id": identity, "command": f"echo run >> {marker}", "background": True}).encode()
    head = (f"POST /command/operations HTTP/1.1\r\nHost: x\r\n{TOKEN_HEADER}: {execd.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    for cut in (0, len(head) // 2, len(head), len(head) + len(body) // 2):
        s = raw_socket(execd)
        s.sendall((head + body)[:cut])
        reset(s)
    st, js = lookup(execd, "command", identity)
    assert st == 404, js  # no whole request, no claim
    # The whole request, then a reset before the answer is read: the
    # creation happens once, and the retry learns its id.
    for _ in range(5):
        s = raw_socket(execd)
        s.sendall(head + body)
        reset(s)
    op = settled(execd, "command", identity)
    assert op["state"] == "created"
    execd.wait_finished(op["id"])
    assert marker.read_text() == "run\n"
    st, js = create(execd, "command", json.loads(body))
    assert st == 200 and js["id"] == op["id"]
    assert execd.ping() == 200
