"""Helpers shared by the resume, stdin, restart and journal tests."""

from __future__ import annotations

import http.client
import json
import socket
import struct
import time

from execd_client import decode_chunk


def reset(sock: socket.socket):
    """Close with RST (SO_LINGER 0): the peer sees ECONNRESET, not a clean FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class EventReader:
    """Exact-framing events from a streaming response, with per-stream offsets
    checked as they arrive."""

    def __init__(self, ex, method, path, body=None, headers=None, timeout=120):
        self.conn = ex.conn(timeout)
        h = {"Accept": "application/x-ndjson"}
        h.update(headers or {})
        self.conn.request(method, path, body=json.dumps(body).encode() if body is not None else None,
                          headers=ex.headers(h))
        self.resp = self.conn.getresponse()
        self.bytes_read = 0
        self.timeout = timeout

    def events(self):
        # The socket's timeout restarts with every read, and a quiet journal
        # follow sends an empty line every 15 s: an event that never comes
        # must still fail the test, not hang it.
        last_event = time.monotonic()
        while True:
            line = self.resp.readline()
            if not line:
                return
            self.bytes_read += len(line)
            line = line.rstrip(b"\n")
            if line:
                last_event = time.monotonic()
                yield json.loads(line)
            elif time.monotonic() - last_event > self.timeout:
                raise AssertionError(f"no event within {self.timeout}s (only keep-alive lines)")

    def kill(self):
        reset(self.conn.sock)

    def close(self):
        self.conn.close()


def collect(events, bufs: dict, gaps: list | None = None):
    """Appends output events to bufs['stdout'/'stderr'] (offsets must be
    contiguous); returns the terminal event or None."""
    for ev in events:
        t = ev["type"]
        if t in ("stdout", "stderr"):
            assert ev["offset"] == len(bufs[t]), (t, ev["offset"], len(bufs[t]))
            bufs[t] += decode_chunk(ev)
        elif t == "gap":
            assert gaps is not None, ev
            gaps.append(ev)
        elif t in ("execution_complete", "error"):
            return ev
    return None
