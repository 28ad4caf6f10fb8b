"""The kernel wire protocol (ZMTP, spoken by execd itself) against kernels
that break it: bad_kernel.py binds the kernel's sockets with pyzmq where it
behaves and a raw socket where it does not. execd must stay up, end the run
with a structured error that says what went wrong, keep its memory when a
frame claims more than --max-kernel-message, and go on serving real
kernels; a real kernel's message over the limit is skipped and the run says
so on stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from execd_client import SANITIZED, start_execd
from test_code import KERNELS, kernel_env, new_context, of, run_code, stop_and_check, terminal

BAD_KERNEL = Path(__file__).resolve().parent / "bad_kernel.py"


@pytest.fixture(scope="module")
def wx(tmp_path_factory):
    if not (KERNELS / "kernels" / "python3" / "kernel.json").exists():
        pytest.skip("ipykernel is not installed in the test venv")
    d = tmp_path_factory.mktemp("badkernels")
    for mode in ("garbage", "huge", "not-zmtp"):
        (d / "kernels" / mode).mkdir(parents=True)
        (d / "kernels" / mode / "kernel.json").write_text(json.dumps(
            {"argv": [sys.executable, str(BAD_KERNEL), mode, "{connection_file}"],
             "language": mode, "display_name": mode}))
    env = kernel_env()
    env["JUPYTER_PATH"] = f"{d}:{KERNELS}"
    ex = start_execd("--max-kernel-message", str(1 << 20), env=env,
                     state_dir=tmp_path_factory.mktemp("code-state"))
    yield ex
    stop_and_check(ex)


def hwm_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_garbage_on_iopub_ends_the_run_and_the_kernel(wx):
    ctx = new_context(wx, "garbage")
    st, events = run_code(wx, "anything", ctx=ctx, timeout=30)
    assert st == 200, events
    err = of(events, "error")
    assert err and err[0]["error"]["ename"] == "KernelDied", events
    evalue = err[0]["error"]["evalue"]
    assert "broke the wire protocol on its iopub channel" in evalue and "reserved flag bits" in evalue, evalue
    assert terminal(events)["status"] == "died"
    assert wx.ping() == 200
    assert wx.request("DELETE", f"/code/contexts/{ctx}")[0] == 200
    # Real kernels are not affected.
    st, events = run_code(wx, "6 * 7", language="python")
    assert st == 200 and of(events, "result")[0]["results"]["text"] == "42", events


def test_a_kernel_that_is_not_zmtp_fails_to_start_with_the_reason(wx):
    st, js = wx.json("POST", "/code/context", {"language": "not-zmtp"}, timeout=60)
    assert st == 500, js
    assert "broke the wire protocol" in js["message"] and "not a ZMTP peer" in js["message"], js
    assert wx.json("GET", "/code/contexts?language=not-zmtp")[1] == []


def test_a_frame_claiming_too_much_costs_no_memory(wx):
    ctx = new_context(wx, "huge")
    base = hwm_kib(wx.pid)
    st, events = run_code(wx, "anything", ctx=ctx, timeout=60)
    assert st == 200, events
    err = of(events, "error")
    assert err and err[0]["error"]["ename"] == "KernelDied" and "exit status 3" in err[0]["error"]["evalue"], events
    grew = hwm_kib(wx.pid) - base
    print(f"64 MiB of a frame claiming 2**62 bytes: execd peak RSS +{grew} KiB")
    assert grew < (48 if SANITIZED else 16) * 1024, grew
    assert wx.request("DELETE", f"/code/contexts/{ctx}")[0] == 200


def test_a_real_message_over_the_limit_is_skipped_and_said(wx):
    ctx = new_context(wx)
    code = "import sys\nsys.stdout.write('x' * (2 << 20))\nsys.stdout.flush()\nprint('after')"
    st, events = run_code(wx, code, ctx=ctx, exact=True, timeout=60)
    assert st == 200, events
    assert terminal(events)["status"] == "ok", events
    out = "".join(e["text"] for e in of(events, "stdout"))
    err = "".join(e["text"] for e in of(events, "stderr"))
    assert out == "after\n", out[:200]
    assert "1 message(s) larger than --max-kernel-message (1048576 bytes)" in err, err
    assert wx.request("DELETE", f"/code/contexts/{ctx}")[0] == 200
