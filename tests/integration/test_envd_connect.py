"""The envd listener over raw sockets: what the SDKs hide. Bytes on the wire
(binary output, keepalives at the asked interval, the gap a Connect reports
in its trailing metadata), a slow client that holds its process, clients
that reset or close at every phase of every stream, garbage, the token and
signed URLs, and every limit refusing before it takes the resource. Run
under ASan by `make test` (a report fails the test, as in
test_client_resets.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
import subprocess
import time

import pytest

from e2b_support import (call, envelope, host_port, process_output, read_response, request_bytes, split_envelopes,
                         start_process, stream_messages, listener_url, opensandbox_bytes)
from execd_client import SLOW, execd_bin, pids_with_cmdline, process_alive, start_execd, wait_until
from test_client_resets import (SANITIZER_MARKERS, alternate, assert_alive, crash_report, descendants, hang_up,
                                recv_until, reset, sweep)

MiB = 1 << 20
TIMEOUT = 10 * SLOW
N = 24


@pytest.fixture
def envd(execd_factory):
    """A fresh execd with its envd listener; at teardown it must exit 0 and
    leave no process behind."""
    ex = execd_factory("--envd-port", "0", "--log-limit", str(4 * MiB))
    ex.envd = listener_url(ex)
    yield ex
    was_alive = ex.proc.poll() is None
    reported = any(m in ex.stderr_text() for m in SANITIZER_MARKERS)
    procs = descendants(ex.pid) if was_alive else set()
    rc = ex.stop()
    if was_alive and not reported:
        assert rc == 0, f"execd exited {rc} after SIGTERM; stderr:\n{crash_report(ex)}"
    wait_until(lambda: not [p for p in procs if process_alive(p)], 10 * SLOW, what="execd's processes to be gone")


def dial(url: str, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(TIMEOUT)
    s.connect(host_port(url))
    return s


def start_body(cmd: str, **extra) -> bytes:
    return envelope({"process": {"cmd": "/bin/bash", "args": ["-c", cmd]}, "stdin": False, **extra})


def assert_envd_serving(ex, where: str):
    assert_alive(ex, where)
    st, _, _ = call(ex.envd, "/filesystem.Filesystem/Stat", {"path": "/"})
    assert st == 200, where
    msgs, end = start_process(ex.envd, "echo ok")
    pid, out, _, _, ev = process_output(msgs)
    assert out == b"ok\n" and ev["exited"] and "error" not in end, (msgs, end)
    assert_alive(ex, where)


# ---- the bytes ------------------------------------------------------------------------------------------

def test_binary_output_and_keepalives(envd):
    cmd = "for i in $(seq 0 255); do printf \"\\\\x$(printf %02x $i)\"; done; head -c 300000 /dev/urandom | tee /dev/stderr | sha256sum"
    msgs, end = start_process(envd.envd, cmd)
    pid, out, err, _, ev = process_output(msgs)
    assert pid and ev == {"exited": True, "status": "exit status 0"} and end == {}
    assert out[:256] == bytes(range(256))
    assert out[256:].decode().split()[0] == hashlib.sha256(err).hexdigest()
    # The same bytes as the OpenSandbox exact stream of the same command.
    o_out, o_err = opensandbox_bytes(envd, "for i in $(seq 0 255); do printf \"\\\\x$(printf %02x $i)\"; done")
    assert o_out == out[:256]
    # Keepalives at the interval the client asks for (seconds).
    st, headers, body = call(envd.envd, "/process.Process/Start",
                             {"process": {"cmd": "/bin/sleep", "args": ["2.6"]}}, stream=True,
                             headers={"Keepalive-Ping-Interval": "1"})
    msgs, end = stream_messages(body)
    kinds = [next(iter(m["event"])) for m in msgs]
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("keepalive") >= 2, kinds
    assert headers["content-type"] == "application/connect+json"


def test_every_process_is_an_execution(envd):
    """A process started through envd has an execution's id, status, resume
    stream, record and journal entry on the OpenSandbox API."""
    st, headers, body = call(envd.envd, "/process.Process/Start",
                             {"process": {"cmd": "/bin/bash", "args": ["-c", "printf 'one\\ntwo\\n'; exit 4"]}},
                             stream=True)
    run_id = headers["execd-run-id"]
    _, out, _, _, ev = process_output(stream_messages(body)[0])
    assert out == b"one\ntwo\n" and ev["exitCode"] == 4
    st, status = envd.json("GET", f"/command/status/{run_id}")
    assert st == 200 and status["kind"] == "process" and status["exit_code"] == 4, status
    assert status["content"] == "/bin/bash -c 'printf '\\''one\\ntwo\\n'\\''; exit 4'"
    r = envd.request("GET", f"/command/{run_id}/stream?stdout=4")
    assert r[0] == 200 and b'"text":"two\\n"' in r[2]
    st, _, journal = envd.request("GET", "/journal")
    entries = [json.loads(l) for l in journal.splitlines() if l]
    mine = [e for e in entries if e.get("id") == run_id]
    assert mine and mine[0]["type"] == "process" and mine[0]["result"]["exit_code"] == 4


def test_connect_names_the_gap_in_its_trailer(envd, tmp_path):
    # 6 MiB while nobody is attached, 4 MiB kept: Connect replays the newest
    # bytes and says which were lost, in the end-of-stream metadata.
    marker = tmp_path / "written"
    s = dial(envd.envd)
    s.sendall(request_bytes(envd.envd, "/process.Process/Start",
                            start_body(f"head -c 6291456 /dev/zero | tr '\\0' x; touch {marker}; read x",
                                       tag="gap", stdin=True)))
    buf = bytearray()
    assert recv_until(s, buf, lambda b: b'"start"' in b, "the start event")
    reset(s)  # detached from here on: the output goes to the log only
    wait_until(marker.exists, 30 * SLOW, what="the output to be written")
    st, _, _ = call(envd.envd, "/process.Process/SendInput",
                    {"process": {"tag": "gap"}, "input": {"stdin": base64.b64encode(b"\n").decode()}})
    assert st == 200
    st, _, body = call(envd.envd, "/process.Process/Connect", {"process": {"tag": "gap"}}, stream=True,
                       timeout=TIMEOUT)
    msgs, end = stream_messages(body)
    _, out, _, _, ev = process_output(msgs)
    assert ev and ev["exited"]
    assert set(out) == {ord("x")} and len(out) <= 4 * MiB + 64 * 1024
    gaps = [g.split()[1].split("-") for g in end["metadata"]["execd-gap"]]
    assert all(g.startswith("stdout ") for g in end["metadata"]["execd-gap"])
    assert gaps[0][0] == "0" and all(int(b[0]) == int(a[1]) for a, b in zip(gaps, gaps[1:]))
    assert sum(int(b) - int(a) for a, b in gaps) + len(out) == 6 * MiB


# ---- a slow client --------------------------------------------------------------------------------------

def test_slow_start_client_holds_its_process(envd):
    """A Start stream whose client does not read holds the process (it blocks
    on its pipe) instead of dropping output or buffering it without bound;
    once the client reads, every byte arrives."""
    size = 24 * MiB  # far beyond what the pipe, execd's 1 MiB queue and the socket buffers hold
    s = dial(envd.envd, rcvbuf=64 * 1024)
    s.sendall(request_bytes(envd.envd, "/process.Process/Start",
                            start_body(f"head -c {size} /dev/zero; echo tail >&2")))
    buf = bytearray()
    assert recv_until(s, buf, lambda b: b'"start"' in b, "the start event")
    wait_until(lambda: pids_with_cmdline(f"head -c {size}"), TIMEOUT, what="the writer")
    rss_before = int(open(f"/proc/{envd.pid}/status").read().split("VmRSS:")[1].split()[0])
    time.sleep(1.0 * SLOW)  # the client reads nothing: the writer must not get far (checked below)
    assert pids_with_cmdline(f"head -c {size}"), "the writer finished although nobody read its output"
    rss = int(open(f"/proc/{envd.pid}/status").read().split("VmRSS:")[1].split()[0])
    assert rss - rss_before < 24 * 1024, f"execd grew by {rss - rss_before} KiB holding a stalled stream"
    # Now read the rest of the response.
    s.settimeout(120 * SLOW)
    rest = bytearray(buf)
    while not rest.endswith(b"0\r\n\r\n"):
        d = s.recv(1 << 20)
        assert d, "closed before the end"
        rest += d
    s.close()
    head, chunked = bytes(rest).split(b"\r\n\r\n", 1)
    body, at = bytearray(), 0
    while True:
        nl = chunked.index(b"\r\n", at)
        n = int(chunked[at:nl], 16)
        if n == 0:
            break
        body += chunked[nl + 2:nl + 2 + n]
        at = nl + 2 + n + 2
    msgs, end = stream_messages(bytes(body))
    _, out, err, _, ev = process_output(msgs)
    assert len(out) == size and out.count(0) == size and err == b"tail\n" and ev["exited"] and end == {}


# ---- clients that leave ----------------------------------------------------------------------------------

STREAM_PHASES = {
    "before-head": (lambda url: request_bytes(url, "/process.Process/Start", start_body("sleep 0.02; echo x")),
                    lambda b: True),
    "after-start": (lambda url: request_bytes(url, "/process.Process/Start", start_body("seq 1 20000")),
                    lambda b: b'"start"' in b),
    "mid-output": (lambda url: request_bytes(url, "/process.Process/Start",
                                             start_body("for i in $(seq 1 30000); do echo line $i; done")),
                   lambda b: len(b) > 8192),
    "at-end": (lambda url: request_bytes(url, "/process.Process/Start", start_body("echo end")),
               lambda b: b'"end"' in b),
    "connect": (lambda url: request_bytes(url, "/process.Process/Connect", envelope({"process": {"tag": "t"}})),
                lambda b: True),
    "watch": (lambda url: request_bytes(url, "/filesystem.Filesystem/WatchDir", envelope({"path": "/tmp"})),
              lambda b: b'"start"' in b),
    "stream-input": (lambda url: request_bytes(url, "/process.Process/StreamInput",
                                               envelope({"start": {"process": {"tag": "t"}}})
                                               + envelope({"data": {"input": {"stdin": "aGkK"}}}),
                                               chunked=False)[:-10], lambda b: True),
    "upload": (lambda url: request_bytes(url, "/files?path=/tmp/envd-reset-upload", b"x" * 200000,
                                         "application/octet-stream")[:100000], lambda b: True),
}


@pytest.mark.parametrize("phase", list(STREAM_PHASES))
def test_client_leaves(envd, phase):
    # A process with a tag for Connect and StreamInput to find.
    s0 = dial(envd.envd)
    s0.sendall(request_bytes(envd.envd, "/process.Process/Start", start_body("cat > /dev/null", tag="t", stdin=True)))
    assert recv_until(s0, bytearray(), lambda b: b'"start"' in b, "the tagged process")
    make, enough = STREAM_PHASES[phase]
    for i in range(N):
        s = dial(envd.envd)
        s.sendall(make(envd.envd))
        buf = bytearray()
        recv_until(s, buf, enough, phase)
        sweep(i)
        hang_up(s, alternate(i))
        assert_alive(envd, f"after {phase} iteration {i}")
    reset(s0)
    call(envd.envd, "/process.Process/SendSignal", {"process": {"tag": "t"}, "signal": "SIGNAL_SIGKILL"})
    assert_envd_serving(envd, f"after {phase}")


def test_garbage(envd):
    url = envd.envd
    cases = [
        # (path, body, content type) -> expected status
        ("/process.Process/Start", b"not an envelope", "application/connect+json"),
        ("/process.Process/Start", b"\x00\xff\xff\xff\xff", "application/connect+json"),
        ("/process.Process/Start", b"\x01\x00\x00\x00\x02{}", "application/connect+json"),  # compressed
        ("/process.Process/Start", envelope(b"{not json"), "application/connect+json"),
        ("/process.Process/Start", envelope({"process": {"cmd": 7}}), "application/connect+json"),
        ("/process.Process/Start", envelope({}) + envelope({}), "application/connect+json"),
        ("/process.Process/List", b"\x00\x01", "application/json"),
        ("/process.Process/SendInput", b'{"process":{"pid":1,"tag":"a"}}', "application/json"),
        ("/process.Process/SendSignal", b'{"process":{"pid":1},"signal":"SIGHUP"}', "application/json"),
        ("/filesystem.Filesystem/ListDir", b'{"depth":-1}', "application/json"),
        ("/filesystem.Filesystem/Stat", b'{"path":"/"}', "application/proto"),
        ("/process.Process/Start", envelope({}), "application/json"),
    ]
    for path, body, ctype in cases:
        with socket.create_connection(host_port(url), timeout=TIMEOUT) as s:
            s.sendall(request_bytes(url, path, body, ctype))
            status, headers, resp = read_response(s, TIMEOUT)
        if ctype == "application/connect+json":
            assert status == 200, (path, body)
            msgs, end = stream_messages(resp)
            assert msgs == [] and end["error"]["code"] == "invalid_argument", (path, body, end)
        elif ctype == "application/json" and path.endswith("Start"):
            assert status == 415, (path, status)
        elif ctype == "application/proto":
            assert status == 415 and headers["accept-post"] == "application/json"
        else:
            assert status == 400 and json.loads(resp)["code"] == "invalid_argument", (path, status, resp)
        assert_alive(envd, f"after {path} {body[:20]!r}")
    # Not HTTP at all, then a head and garbage behind it.
    for junk in (b"\x16\x03\x01\x02\x00garbage\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
                 request_bytes(url, "/process.Process/List", b"{}", "application/json") + b"\x00\xffjunk" * 100):
        s = dial(url)
        s.sendall(junk)
        try:
            while s.recv(65536):
                pass
        except (ConnectionResetError, TimeoutError):
            pass
        s.close()
        assert_alive(envd, f"after {junk[:20]!r}")
    assert_envd_serving(envd, "after garbage")


# ---- the token -------------------------------------------------------------------------------------------

def test_without_token_loopback_only(tmp_path):
    p = subprocess.run([execd_bin(), "--insecure-no-auth", "--envd-port", "0", "--envd-host", "0.0.0.0",
                        "--state-dir", str(tmp_path)], capture_output=True, text=True, timeout=20)
    assert p.returncode == 2 and "not a loopback address" in p.stderr


def test_token_and_signed_urls(execd_factory, tmp_path):
    from e2b_support import call as rpc_call
    import urllib.parse
    token = "envd-secret-token"
    ex = execd_factory("--envd-port", "0", "--envd-access-token", token, "--envd-host", "127.0.0.1")
    url = listener_url(ex)
    # No token, a wrong one: 401 at head time, before any body byte is read.
    for headers in ({"X-Access-Token": None}, {"X-Access-Token": "wrong"}):
        with socket.create_connection(host_port(url), timeout=TIMEOUT) as s:
            head = request_bytes(url, "/process.Process/Start", b"", headers=headers).replace(
                b"Content-Length: 0", b"Content-Length: 1000000000")
            s.sendall(head)
            status, _, body = read_response(s, TIMEOUT)
            assert status == 401 and json.loads(body)["code"] == "unauthenticated"
    st, _, _ = rpc_call(url, "/process.Process/List", {}, headers={"X-Access-Token": token})
    assert st == 200
    with socket.create_connection(host_port(url), timeout=TIMEOUT) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(s, TIMEOUT)[0] == 204  # health needs no token, as envd
    # /files: the token, or a signature instead (what upload_url/download_url make).
    target = tmp_path / "signed.txt"
    target.write_text("signed")
    path = str(target)

    def sig(op, exp=None):
        raw = f"{path}:{op}::{token}" + (f":{exp}" if exp is not None else "")
        v = "v1_" + base64.b64encode(hashlib.sha256(raw.encode()).digest()).decode().rstrip("=")
        return urllib.parse.quote(v, safe="")

    def get(query, headers=None):
        with socket.create_connection(host_port(url), timeout=TIMEOUT) as s:
            h = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
            s.sendall(f"GET /files?{query} HTTP/1.1\r\nHost: x\r\n{h}\r\n".encode())
            return read_response(s, TIMEOUT)

    q = "path=" + urllib.parse.quote(path, safe="")
    assert get(q)[0] == 401
    assert get(q, {"X-Access-Token": token})[2] == b"signed"
    assert get(f"{q}&signature={sig('read')}")[2] == b"signed"
    assert get(f"{q}&signature={sig('write')}")[0] == 401
    later = int(time.time()) + 60
    assert get(f"{q}&signature={sig('read', later)}&signature_expiration={later}")[2] == b"signed"
    past = int(time.time()) - 1
    st, _, body = get(f"{q}&signature={sig('read', past)}&signature_expiration={past}")
    assert st == 401 and b"expired" in body
    # An upload with a write signature; without one it is refused before its body.
    with socket.create_connection(host_port(url), timeout=TIMEOUT) as s:
        s.sendall(request_bytes(url, f"/files?{q}&signature={sig('write')}", b"new", "application/octet-stream",
                                headers={"X-Access-Token": None}))
        assert read_response(s, TIMEOUT)[0] == 200
    assert target.read_text() == "new"
    with socket.create_connection(host_port(url), timeout=TIMEOUT) as s:
        s.sendall(request_bytes(url, f"/files?{q}", b"", "application/octet-stream",
                                headers={"X-Access-Token": None}).replace(
            b"Content-Length: 0", b"Content-Length: 1000000000"))
        assert read_response(s, TIMEOUT)[0] == 401
    # The code interpreter's /contexts calls carry E2B-Traffic-Access-Token only.
    with socket.create_connection(host_port(url), timeout=TIMEOUT) as s:
        s.sendall(f"GET /contexts HTTP/1.1\r\nHost: x\r\nE2B-Traffic-Access-Token: {token}\r\n\r\n".encode())
        assert read_response(s, TIMEOUT)[0] == 200


# ---- limits: each refuses before the resource is taken -------------------------------------------------

def test_process_limit(execd_factory):
    ex = execd_factory("--envd-port", "0", "--envd-max-processes", "2")
    url = listener_url(ex)
    held = []
    for i in range(2):
        s = dial(url)
        s.sendall(request_bytes(url, "/process.Process/Start", start_body(f"sleep 606{i}")))
        assert recv_until(s, bytearray(), lambda b: b'"start"' in b, "a start")
        held.append(s)
    msgs, end = start_process(url, "sleep 6069")
    assert msgs == [] and end["error"]["code"] == "resource_exhausted" and "--envd-max-processes" in end["error"]["message"]
    assert not pids_with_cmdline("sleep 6069")
    for s in held:
        s.close()  # the processes run on
    # Once one ends, a start goes through again.
    st, _, body = call(url, "/process.Process/List", {})
    pid = json.loads(body)["processes"][0]["pid"]
    assert call(url, "/process.Process/SendSignal", {"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})[0] == 200
    wait_until(lambda: len(json.loads(call(url, "/process.Process/List", {})[2])["processes"]) == 1, TIMEOUT,
               what="the killed process to end")
    msgs, end = start_process(url, "echo again")
    assert process_output(msgs)[1] == b"again\n"


def test_watcher_limits(execd_factory, tmp_path):
    ex = execd_factory("--envd-port", "0", "--envd-max-watchers", "1", "--envd-watcher-queue", "5")
    url = listener_url(ex)
    st, _, body = call(url, "/filesystem.Filesystem/CreateWatcher", {"path": str(tmp_path)})
    assert st == 200
    wid = json.loads(body)["watcherId"]
    st, _, body = call(url, "/filesystem.Filesystem/CreateWatcher", {"path": str(tmp_path)})
    assert st == 429 and json.loads(body)["code"] == "resource_exhausted" and "--envd-max-watchers" in body.decode()
    st, _, body = call(url, "/filesystem.Filesystem/WatchDir", {"path": str(tmp_path)}, stream=True)
    assert stream_messages(body)[1]["error"]["code"] == "resource_exhausted"
    for i in range(12):
        (tmp_path / f"f{i}").write_text("x")

    def dropped():
        st, _, body = call(url, "/filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
        return st == 429 and "dropped" in json.loads(body)["message"]

    wait_until(dropped, TIMEOUT, 0.05, "the dropped events to be reported")
    st, _, body = call(url, "/filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
    events = json.loads(body)["events"]
    assert st == 200 and len(events) == 5 and events[0] == {"name": "f0", "type": "EVENT_TYPE_CREATE"}
    assert call(url, "/filesystem.Filesystem/RemoveWatcher", {"watcherId": wid})[0] == 200
    assert call(url, "/filesystem.Filesystem/RemoveWatcher", {"watcherId": wid})[0] == 404
    assert call(url, "/filesystem.Filesystem/CreateWatcher", {"path": str(tmp_path)})[0] == 200



def test_list_dir_entry_limit(execd_factory, tmp_path):
    ex = execd_factory("--envd-port", "0", "--envd-max-list-entries", "5")
    url = listener_url(ex)
    for i in range(3):
        (tmp_path / f"d{i}").mkdir()
        (tmp_path / f"d{i}" / "f").write_text("x")
    st, _, body = call(url, "/filesystem.Filesystem/ListDir", {"path": str(tmp_path), "depth": 1})
    assert st == 200 and len(json.loads(body)["entries"]) == 3
    st, _, body = call(url, "/filesystem.Filesystem/ListDir", {"path": str(tmp_path), "depth": 2})
    err = json.loads(body)
    assert st == 429 and err["code"] == "resource_exhausted" and "--envd-max-list-entries" in err["message"]


def test_shared_caps_hold_on_the_envd_listener(execd_factory):
    """--max-running counts executions of both APIs; a Connect is a resume
    reader under --max-readers."""
    ex = execd_factory("--envd-port", "0", "--max-running", "1", "--max-readers", "1")
    url = listener_url(ex)
    s = dial(url)
    s.sendall(request_bytes(url, "/process.Process/Start", start_body("sleep 6071", tag="held")))
    assert recv_until(s, bytearray(), lambda b: b'"start"' in b, "a start")
    msgs, end = start_process(url, "sleep 6072")
    assert msgs == [] and end["error"]["code"] == "resource_exhausted" and "--max-running" in end["error"]["message"]
    assert not pids_with_cmdline("sleep 6072")
    st, js = ex.json("POST", "/command", {"command": "true"})
    assert st == 429 and js["code"] == "LIMIT_REACHED"
    c = dial(url)
    c.sendall(request_bytes(url, "/process.Process/Connect", envelope({"process": {"tag": "held"}})))
    assert recv_until(c, bytearray(), lambda b: b'"start"' in b, "the first Connect's start")
    st, _, body = call(url, "/process.Process/Connect", {"process": {"tag": "held"}}, stream=True)
    end = stream_messages(body)[1]
    assert end["error"]["code"] == "resource_exhausted" and "--max-readers" in end["error"]["message"]
    c.close()
    s.close()
    assert call(url, "/process.Process/SendSignal", {"process": {"tag": "held"}, "signal": "SIGNAL_SIGKILL"})[0] == 200


def test_rest_routes_health_envs_metrics(envd):
    def get(path):
        with socket.create_connection(host_port(envd.envd), timeout=TIMEOUT) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Access-Token: {envd.token}\r\n\r\n".encode())
            return read_response(s, TIMEOUT)

    status, _, body = get("/health")
    assert status == 204 and body == b""
    status, _, body = get("/envs")
    envs = json.loads(body)
    assert status == 200 and envs["PATH"] and "EXECD_ACCESS_TOKEN" not in envs
    status, _, body = get("/metrics")
    m = json.loads(body)
    assert status == 200 and set(m) == {"ts", "cpu_count", "cpu_used_pct", "mem_total", "mem_used", "mem_total_mib",
                                        "mem_used_mib", "disk_used", "disk_total"}
    assert m["cpu_count"] >= 1 and 0 < m["mem_used"] <= m["mem_total"] and 0 < m["disk_used"] <= m["disk_total"]
    assert abs(m["ts"] - time.time()) < 60 and m["mem_total_mib"] == m["mem_total"] // MiB


def test_upload_metadata_is_checked_before_anything_is_written(envd, tmp_path):
    """X-Metadata-* values must be printable ASCII and at most 64 keys; a
    value too large for the filesystem's xattrs fails the upload whole: no
    file, no temp file."""
    def upload(target, headers):
        with socket.create_connection(host_port(envd.envd), timeout=TIMEOUT) as s:
            s.sendall(request_bytes(envd.envd, f"/files?path={target}", b"plain", "application/octet-stream",
                                    headers=headers))
            return read_response(s, TIMEOUT)
    target = tmp_path / "meta.txt"
    status, _, body = upload(target, {"X-Metadata-Owner": "caf\xe9".encode("latin-1").decode("latin-1")})
    assert status == 400 and b"printable" in body and not target.exists()
    status, _, body = upload(target, {f"X-Metadata-K{i}": "v" for i in range(65)})
    assert status == 400 and b"64" in body and not target.exists()
    status, _, body = upload(target, {"X-Metadata-Big": "x" * 8000})  # past ext4's one block of xattrs
    assert status == 400 and b"extended attributes" in body, body
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    status, _, body = upload(target, {"X-Metadata-Owner": "me"})
    assert status == 200 and json.loads(body)[0]["metadata"] == {"owner": "me"}
    assert os.getxattr(target, "user.e2b.owner") == b"me"
