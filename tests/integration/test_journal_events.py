"""POST /journal/events: a harness inside the sandbox appends its own JSON
events to the execution journal's hash chain, next to execd's entries, and
the chain still verifies; bad bodies and the limits are refused whole."""

from __future__ import annotations

import hashlib
import json

import pytest


def entries(ex):
    st, _h, body = ex.request("GET", "/journal")
    assert st == 200
    return [line for line in body.split(b"\n") if line]


def test_events_join_the_chain(execd):
    assert execd.run("echo x").terminal["exit_code"] == 0
    st, r = execd.json("POST", "/journal/events?source=agent-7", {"step": "edit", "file": "a.py", "n": 1.5})
    assert st == 200 and r["appended"] == 1 and r["first_seq"] == r["last_seq"] == 2
    st, _h, body = execd.request("POST", "/journal/events", b'{"a":1}\n\n{"b": [1, 2]}\n',
                                 headers={"Content-Type": "application/x-ndjson"})
    assert st == 200 and json.loads(body)["appended"] == 2
    st, r = execd.json("POST", "/journal/events", [{"c": True}, {"d": None}])
    assert st == 200 and r["appended"] == 2 and r["last_seq"] == 6
    lines = entries(execd)
    for prev, line in zip(lines, lines[1:]):
        assert json.loads(line)["prev"] == hashlib.sha256(prev).hexdigest()
    assert hashlib.sha256(lines[-1]).hexdigest() == r["head"]
    e = json.loads(lines[1])
    assert e["type"] == "harness" and e["source"] == "agent-7"
    assert e["event"] == {"step": "edit", "file": "a.py", "n": 1.5}
    assert json.loads(lines[3])["event"] == {"b": [1, 2]}
    st, v = execd.json("GET", "/journal/verify")
    assert st == 200 and v["ok"] is True and v["entries"] == 6


@pytest.mark.parametrize("body,why", [
    (b"", "no events"), (b"[]", "no events"), (b"[1]", "not a JSON object"), (b'"x"', "not a JSON object"),
    (b"{", "invalid JSON"), (b'[{"a":1}, 2]', "event 1"),
])
def test_bad_bodies_append_nothing(execd, body, why):
    st, _h, resp = execd.request("POST", "/journal/events", body)
    assert st == 400 and why in json.loads(resp)["message"]
    assert entries(execd) == []


def test_limits(execd_factory):
    ex = execd_factory("--journal-event-max-bytes", "100")
    st, r = ex.json("POST", "/journal/events", [{"ok": 1}, {"big": "x" * 200}])
    assert st == 400 and "--journal-event-max-bytes" in r["message"]
    st, r = ex.json("POST", "/journal/events", [{}] * 1001)
    assert st == 400 and "1000" in r["message"]
    assert entries(ex) == []
    st, _h, _b = ex.request("POST", "/journal/events", b'{"a":1}', token=False)
    assert st == 401
    assert entries(ex) == []


def test_disabled_journal(execd_factory):
    ex = execd_factory("--no-journal")
    assert ex.json("POST", "/journal/events", {"a": 1})[0] == 404
