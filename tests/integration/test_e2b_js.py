"""E2B's JS SDK (npm `e2b` 2.51.0, unmodified; installed into tests/e2b_js by
`make e2b-js`) against execd's envd listener, authorized as outside debug
mode (a stand-in for E2B's API hands out execd's token). The calls are
made by tests/e2b_js/sdk_calls.mjs; what it saw is checked here. The JS SDK
uses undici with HTTP/2 allowed, which on plain http means HTTP/1.1: no h2c
is needed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from e2b_support import opensandbox_bytes, sdk_env, start_e2b
from execd_client import ROOT, SLOW, pids_with_cmdline

JS = ROOT / "tests" / "e2b_js"
# Valid UTF-8 only: the JS SDK decodes with TextDecoder, whose replacement of
# invalid bytes is the WHATWG one (the raw Connect tests check binary bytes).
EXACT = r"printf '| a | b |\n|---|---|\n\n\n| 1 | 2 |\n'; printf '\r10%%\r20%%\r100%%\n'; printf '\xe2\x82'; sleep 0.05; printf '\xac no newline'; echo err >&2"


def node_version() -> tuple[int, ...]:
    try:
        out = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=20).stdout
        return tuple(int(x) for x in out.strip().lstrip("v").split("."))
    except (OSError, ValueError):
        return ()


def test_js_sdk_calls(execd_factory, tmp_path):
    if not (JS / "node_modules" / "e2b").is_dir():
        pytest.fail("tests/e2b_js/node_modules is missing: run `make e2b-js`")
    if node_version() < (20, 18):
        pytest.skip(f"the e2b JS SDK needs Node >= 20.18, found {node_version() or 'none'}")
    ex, url = start_e2b(execd_factory)
    want_out, want_err = opensandbox_bytes(ex, EXACT)
    env = dict(os.environ, **sdk_env(url), EXACT_CMD=EXACT)
    env.pop("E2B_DEBUG", None)
    p = subprocess.run(["node", str(JS / "sdk_calls.mjs"), str(tmp_path)], cwd=JS, env=env,
                       capture_output=True, text=True, timeout=120 * SLOW)
    assert p.returncode == 0, p.stderr
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    f = f"{tmp_path}/files"

    assert seen["isRunning"] is True
    assert seen["exact"] == {"stdout": want_out.decode(), "stderr": want_err.decode(), "exitCode": 0,
                             "joinedOut": want_out.decode(), "joinedErr": want_err.decode()}
    assert seen["exitError"] == {"isCommandExitError": True, "exitCode": 5, "stdout": "partial\n",
                                 "error": "exit status 5"}
    assert seen["userEnvsCwd"] == "js env\n/tmp\nnobody\n"
    assert seen["timeout"] == "TimeoutError"
    assert seen["background"] == "bg\n"
    assert seen["listed"] and seen["killed"] is True and seen["killAgain"] is False
    assert seen["killedEnd"] == "-1 signal: killed"
    assert not pids_with_cmdline("sleep 5252") and not pids_with_cmdline("sleep 5151")
    assert seen["connected"] == "js1\njs2\njs3\nlate\n"
    assert seen["stdin"] == "js stdin\nbytes\n"
    assert seen["ptyKilled"] is True and seen["ptySizes"] == ["25 90", "44 111"]
    assert seen["writeMany"] == [f"{f}/m/1.txt", f"{f}/m/2.txt"]
    assert seen["readText"] == "js text\n\n"
    assert seen["readBytes"] == seen["onDisk"] == [0, 255, 1, 254]
    assert seen["list1"] == ["a.txt:file", "b.bin:file", "m:dir"]
    assert seen["list2"] == sorted([f"{f}/a.txt", f"{f}/b.bin", f"{f}/m", f"{f}/m/1.txt", f"{f}/m/2.txt"])
    assert seen["exists"] == [True, False]
    assert seen["info"] == {"name": "a.txt", "type": "file", "size": 9}
    assert seen["makeDir"] == [True, False]
    assert seen["renamed"] == f"{f}/new/a.txt" and seen["removed"] is True
    assert "dir/w.txt:create" in seen["watchEvents"]
    assert seen["uploadStatus"] == 200 and seen["downloaded"] == "via url"
