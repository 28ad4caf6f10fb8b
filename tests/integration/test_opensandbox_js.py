"""OpenSandbox's TypeScript/JavaScript SDK (npm `@alibaba-group/opensandbox`
0.1.11, unmodified; installed into tests/opensandbox_js by `make
opensandbox-js`) pointed straight at execd: the execd stack the SDK builds
for a sandbox, with the token header. The calls are made by
tests/opensandbox_js/sdk_calls.mjs; what it saw is checked here."""

from __future__ import annotations

import json
import subprocess

import pytest

from execd_client import REMOTE, ROOT, SLOW

JS = ROOT / "tests" / "opensandbox_js"


def test_js_sdk_against_execd(execd, tmp_path):
    if not (JS / "node_modules" / "@alibaba-group" / "opensandbox").is_dir():
        pytest.fail("tests/opensandbox_js/node_modules is missing: run `make opensandbox-js`")
    work = tmp_path if not REMOTE else "/tmp"
    p = subprocess.run(["node", str(JS / "sdk_calls.mjs"), execd.base_url, execd.token, str(work)], cwd=JS,
                       capture_output=True, text=True, timeout=120 * SLOW)
    assert p.returncode == 0, p.stderr
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert seen["ping"] is True
    # Markdown with a blank line survives (the blank line is the text "\n").
    assert seen["markdown"] == {"stdout": ["| a | b |", "|---|---|", "\n", "| 1 | 2 |"], "stderr": ["err"],
                                "exitCode": 0}
    assert seen["cwdEnv"] == [str(work), "hi js"]
    assert seen["failed"]["exitCode"] == 3
    assert seen["background"] == {"running": False, "exitCode": 0}
    assert seen["backgroundLogs"] == "bg-line\nbg-done\n"
    assert seen["session"] == ["across-runs /"]
    assert seen["read"] == "written by js\n"
    assert seen["info"] == {"size": 14, "mode": 640}
    assert seen["metrics"]["cpuCount"] >= 1 and seen["metrics"]["memoryTotalMiB"] > 0
