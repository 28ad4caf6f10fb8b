"""Helpers for the file-change feed (GET /files/watch), track_changes and
the pause tests: a feed reader that waits for events with a deadline."""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
from urllib.parse import quote

from execd_client import SLOW
from resume_helpers import reset


class Feed:
    """One GET /files/watch response, read line by line."""

    def __init__(self, ex, path, recursive=True, since=None, timeout=30.0):
        q = f"/files/watch?path={quote(str(path))}&recursive={'true' if recursive else 'false'}"
        if since is not None:
            q += f"&since={since}"
        self.conn = http.client.HTTPConnection(ex.host, ex.port, timeout=timeout * SLOW)
        self.conn.request("GET", q, headers=ex.headers())
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.events: list[dict] = []
        self.hello = None
        self.ended = False
        # The seq of every line that has one, in the order read (the first
        # line and pings too): what a client that keeps the highest seq it
        # saw would resume from.
        self.seqs: list[int] = []
        if self.status == 200:
            self.hello = self.next_line(timeout)
            assert self.hello and self.hello["type"] == "watch", self.hello

    def error(self) -> dict:
        return json.loads(self.resp.read())

    def next_line(self, timeout=10.0):
        """The next event (pings skipped), or None at the end of the response."""
        deadline = time.monotonic() + timeout * SLOW
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no feed line within {timeout}s; got {self.events[-5:]}")
            self.conn.sock.settimeout(left)
            try:
                line = self.resp.readline()
            except (TimeoutError, socket.timeout):
                raise AssertionError(f"no feed line within {timeout}s; got {self.events[-5:]}") from None
            if not line:
                self.ended = True
                return None
            line = line.strip()
            if not line:
                continue
            ev = json.loads(line)
            if "seq" in ev:
                self.seqs.append(ev["seq"])
            if ev["type"] == "ping":
                continue
            return ev

    def until(self, pred, timeout=10.0, what="the event"):
        """Reads events until pred(event) is true; returns that event."""
        deadline = time.monotonic() + timeout * SLOW
        while True:
            ev = self.next_line(max(0.05, (deadline - time.monotonic()) / SLOW))
            if ev is None:
                raise AssertionError(f"the feed ended before {what}; got {self.events[-10:]}")
            self.events.append(ev)
            if pred(ev):
                return ev

    def last_seq(self) -> int:
        seqs = [e["seq"] for e in self.events if "seq" in e]
        return seqs[-1] if seqs else self.hello["seq"]

    def kill(self):
        reset(self.conn.sock)

    def close(self):
        self.conn.close()


def creates(events, prefix=""):
    return [e["path"] for e in events if e.get("type") == "create" and e["path"].startswith(prefix)]


def inotify_fds(pid: int) -> int:
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify":
                n += 1
        except OSError:
            pass
    return n
