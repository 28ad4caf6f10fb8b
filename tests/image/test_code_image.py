"""The code-interpreter image variant (image/Dockerfile --target code-interpreter):
execd as PID 1 starts Debian's python3 kernel itself and answers /code within
its start-up budget, runs PyPI's bash kernel in a bash code context, with no
Jupyter server in the image."""
from __future__ import annotations

import json
import secrets
import time
import urllib.request

import pytest

from dockerenv import ROOT, TIMINGS, build_execd_target, free_port
from test_image import Container

IMAGE = "execd-test-code-interpreter:latest"
TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"
# From `docker run` to the first /code result of 1+1 (container start, execd,
# kernel start): generous for a loaded 2-core machine; the bench has the figure.
STARTUP_BUDGET_S = 15.0


@pytest.fixture(scope="module")
def code_image(dockerd, base_image):
    t0 = time.monotonic()
    build_execd_target(dockerd, ROOT, IMAGE, target="code-interpreter")
    TIMINGS["docker build code-interpreter"] = time.monotonic() - t0
    size = int(dockerd.run("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout.strip())
    TIMINGS["code-interpreter image MB"] = size / 1e6
    return IMAGE


def _post(port: int, path: str, body: dict, token: str, timeout: float = 30.0) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={TOKEN_HEADER: token, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return resp.status, resp.read()


def _events(raw: bytes) -> list[dict]:
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def test_code_interpreter_image_answers_code_within_its_budget(dockerd, code_image):
    port, token = free_port(), secrets.token_hex(16)
    t0 = time.monotonic()
    c = Container(dockerd, code_image, args=["--host", "127.0.0.1", "--port", str(port)],
                  env={"EXECD_ACCESS_TOKEN": token})
    try:
        c.wait_ready(port, token, timeout=STARTUP_BUDGET_S)
        status, raw = _post(port, "/code", {"code": "1+1", "context": {"language": "python"}}, token)
        first_result = time.monotonic() - t0
        TIMINGS["code-interpreter: docker run to first 1+1"] = first_result
        assert status == 200
        events = _events(raw)
        results = [e for e in events if e.get("type") == "result"]
        assert results and results[0]["results"]["text"] == "2", events
        assert events[-1]["type"] == "execution_complete"
        assert first_result < STARTUP_BUDGET_S, first_result

        # State survives across calls in the default context.
        _post(port, "/code", {"code": "x = 41", "context": {"language": "python"}}, token)
        _, raw = _post(port, "/code", {"code": "print(x + 1)", "context": {"language": "python"}}, token)
        assert any(e.get("type") == "stdout" and "42" in e.get("text", "") for e in _events(raw))

        # A bash code context: PyPI's bash_kernel, installed by the image.
        status, raw = _post(port, "/code/context", {"language": "bash"}, token, timeout=60)
        assert status == 200, raw
        bash_ctx = json.loads(raw)["id"]
        status, raw = _post(port, "/code", {"code": "echo hi", "context": {"id": bash_ctx}}, token)
        events = _events(raw)
        assert status == 200 and events[-1]["type"] == "execution_complete", events
        assert "".join(e["text"] for e in events if e.get("type") == "stdout").strip() == "hi", events

        # The kernels are execd's children; no Jupyter server is running.
        ps = c.exec("ps", "-eo", "ppid,pid,args").stdout
        assert "ipykernel" in ps and "bash_kernel" in ps
        assert "jupyter-server" not in ps and "jupyter-notebook" not in ps and "jupyter-lab" not in ps
    finally:
        c.remove()
