"""E2B's code-interpreter SDK (PyPI `e2b-code-interpreter`, unmodified)
against execd: with E2B_SANDBOX_URL set it sends /execute and /contexts to
the envd URL; without it, to port 49999 (here --code-interpreter-port). The
kernels are execd's own (ipykernel from the test venv), the same contexts
the OpenSandbox /code API uses."""

from __future__ import annotations

import base64
import struct
import zlib

import httpx
import pytest
from e2b_code_interpreter import Sandbox

from e2b_support import CI_RE, kernel_env, listener_url, point_sdk_at, start_e2b
from execd_client import SLOW


def png(width=40, height=30) -> bytes:
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    body = b"".join(b"\x00" + b"".join(bytes([(x * 6) % 256, (y * 8) % 256, 200]) for x in range(width))
                    for y in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(body)) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def ci(tmp_path_factory):
    """One daemon for the module: kernels take a second to start."""
    from execd_client import start_execd
    ex = start_execd("--envd-port", "0", "--code-interpreter-port", "0", env=kernel_env(),
                     state_dir=tmp_path_factory.mktemp("ci-state"))
    yield ex, listener_url(ex), listener_url(ex, CI_RE)
    assert ex.stop() == 0


def test_run_code_state_errors_images(ci, monkeypatch):
    ex, url, _ = ci
    point_sdk_at(monkeypatch, url)
    sbx = Sandbox.create()
    e = sbx.run_code("x = 40\nprint('hello\\n\\nworld')\nx + 2")
    assert e.text == "42" and e.logs.stdout == ["hello\n\nworld\n"] and e.error is None
    assert e.execution_count >= 1
    assert sbx.run_code("x * 2").text == "80"  # state persists
    out, errs = [], []
    e = sbx.run_code("import sys\nprint('out')\nprint('err', file=sys.stderr)\nname = 'quoted'\nname",
                     on_stdout=lambda m: out.append(m.line), on_stderr=lambda m: errs.append(m.line))
    assert out == ["out\n"] and errs == ["err\n"] and e.text == "quoted"
    e = sbx.run_code("1 / 0")
    assert e.error.name == "ZeroDivisionError" and e.error.value == "division by zero"
    assert "ZeroDivisionError" in e.error.traceback
    image = png()
    e = sbx.run_code("from IPython.display import Image, HTML, display\n"
                     f"display(Image(data=bytes.fromhex('{image.hex()}')))\n"
                     "display(HTML('<i>html</i>'))\n'done'")
    assert len(e.results) == 3
    assert base64.b64decode(e.results[0].png) == image and not e.results[0].is_main_result
    assert e.results[1].html == "<i>html</i>"
    assert e.results[2].text == "done" and e.results[2].is_main_result


def test_contexts(ci, monkeypatch, tmp_path):
    ex, url, _ = ci
    point_sdk_at(monkeypatch, url)
    sbx = Sandbox.create()
    ctx = sbx.create_code_context(cwd=str(tmp_path))
    assert ctx.language == "python" and ctx.cwd == str(tmp_path)
    assert sbx.run_code("import os; os.getcwd()", context=ctx).text == str(tmp_path)
    sbx.run_code("secret = 7", context=ctx)
    assert sbx.run_code("'secret' in dir()").text == "False"  # the default context is another kernel
    assert sbx.run_code("secret", context=ctx).text == "7"
    assert ctx.id in [c.id for c in sbx.list_code_contexts()]
    sbx.restart_code_context(ctx)
    assert sbx.run_code("'secret' in dir()", context=ctx).text == "False"
    sbx.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in sbx.list_code_contexts()]
    # The same contexts are OpenSandbox's /code contexts.
    st, listed = ex.json("GET", "/code/contexts")
    assert st == 200 and ctx.id not in [c["id"] for c in listed]


def test_port_49999_without_sandbox_url(ci, monkeypatch):
    """Without E2B_SANDBOX_URL the SDK sends code to <port>-<id>.<domain>; its
    debug mode makes that http://localhost:<port>. Here the port is ours, so
    the request is made the way the SDK makes it, at the code-interpreter
    listener."""
    ex, _, ci_url = ci
    auth = {"X-Access-Token": ex.token}
    r = httpx.post(f"{ci_url}/execute", json={"code": "6 * 7", "context_id": None, "language": None, "env_vars": None},
                   headers=auth, timeout=30 * SLOW)
    lines = [l for l in r.text.splitlines() if l.strip()]
    assert r.status_code == 200 and lines[-1] == '{"type":"end_of_execution"}'
    assert '"text":"42"' in r.text and '"is_main_result":true' in r.text
    r = httpx.post(f"{ci_url}/execute", json={"code": "1", "context_id": "x", "language": "python"}, headers=auth)
    assert r.status_code == 400


def test_run_code_envs_hold_for_that_run_only(ci, monkeypatch):
    """run_code(envs=...) sets the variables for that run (its subprocesses
    see them too) and puts back what was there after, also when the code
    fails; a variable the kernel already had gets its value back."""
    ex, url, _ = ci
    point_sdk_at(monkeypatch, url)
    sbx = Sandbox.create()
    ctx = sbx.create_code_context()
    sbx.run_code("import os, subprocess; os.environ['KEEP'] = 'before'", context=ctx)
    envs = {"EXECD_CI_VAR": "v1 'quoted' \"double\" \\ é 😀", "KEEP": "during"}
    e = sbx.run_code("import os, subprocess\n"
                     "print(os.environ['EXECD_CI_VAR'])\n"
                     "print(subprocess.run(['sh', '-c', 'echo $KEEP'], capture_output=True, text=True).stdout, end='')\n"
                     "os.environ['KEEP']", context=ctx, envs=envs)
    assert e.error is None, e.error
    assert "".join(e.logs.stdout) == envs["EXECD_CI_VAR"] + "\nduring\n" and e.text == "during"
    after = sbx.run_code("(os.environ.get('EXECD_CI_VAR'), os.environ.get('KEEP'))", context=ctx)
    assert after.text == "(None, 'before')"
    # The code fails: the variables are put back all the same.
    e = sbx.run_code("raise RuntimeError(os.environ['EXECD_CI_VAR'])", context=ctx, envs={"EXECD_CI_VAR": "x"})
    assert e.error.name == "RuntimeError" and e.error.value == "x"
    assert sbx.run_code("os.environ.get('EXECD_CI_VAR')", context=ctx).text in ("", None)
    # The helpers leave nothing behind in the namespace, nor in the count of runs.
    names = sbx.run_code("[n for n in dir() if n.startswith('_execd')]", context=ctx).text
    assert names == "[]"
    sbx.remove_code_context(ctx)


def test_context_limit_refuses_before_a_kernel_starts(tmp_path):
    from execd_client import pids_with_cmdline, start_execd
    state = tmp_path / "state"
    ex = start_execd("--envd-port", "0", "--max-code-contexts", "1", env=kernel_env(), state_dir=state)
    try:
        url = listener_url(ex)
        auth = {"X-Access-Token": ex.token}
        r = httpx.post(f"{url}/contexts", json={"language": "python"}, headers=auth, timeout=60 * SLOW)
        assert r.status_code == 200, r.text
        r = httpx.post(f"{url}/contexts", json={"language": "python"}, headers=auth, timeout=60 * SLOW)
        assert r.status_code == 429 and "--max-code-contexts" in r.text
        # /execute with no context would make a default one: refused the same way.
        r = httpx.post(f"{url}/execute", json={"code": "1"}, headers=auth, timeout=60 * SLOW)
        assert r.status_code == 429
        st, js = ex.json("POST", "/code/context", {"language": "python"})
        assert st == 429 and js["code"] == "LIMIT_REACHED"
        assert len(pids_with_cmdline(f"{state}/kernel-")) == 1
    finally:
        assert ex.stop() == 0
