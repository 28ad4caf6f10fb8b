#!/usr/bin/env python3
"""make test-vm: the integration suite's selection against execd in a micro-VM,
then the VM's own tests (tests/vm). Prints the figures measured.

  tests/vm/run.py [--guest build/vm] [--skip-integration] [--skip-vm-tests] [pytest args for tests/vm...]

The guest must have been built (tests/vm/build-guest.sh). One VM serves the
integration selection: each test's execd runs inside it as a command of the
guest's PID 1 execd (tests/integration/execd_client.py, remote mode).
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from qemu import Vm, accel  # noqa: E402

# The integration tests that run against the guest: every containment test
# (cgroup v2 there), commands through the SDK, resumable streams, stdin,
# PTY sessions over WebSocket, commands under a TTY, bash sessions.
SELECTION = [
    "tests/integration/test_containment.py",
    "tests/integration/test_sdk_commands.py",
    "tests/integration/test_resume.py",
    "tests/integration/test_stdin.py",
    "tests/integration/test_pty_ws.py",
    "tests/integration/test_tty_command.py",
    "tests/integration/test_bash_sessions.py",
    # freeze and thaw on cgroup v2 (cgroup.freeze and cgroup.events)
    "tests/integration/test_pause.py",
]
# Left out of that selection, because they need this machine rather than the
# guest: files under the test's tmp_path used as inputs, cwd or markers
# (the guest does not share the host's filesystem); raw sockets to execd's
# own port (in the VM every request goes through the PID 1 execd's /proxy,
# so a raw request lands on the proxy, not on the daemon under test); tests
# of the token itself (the proxy checks the token and never forwards it, so
# the daemon under test runs without one); and one that needs GNU head.
DESELECT = {
    "host files": [
        "tests/integration/test_sdk_commands.py::test_go_line_rules",
        "tests/integration/test_sdk_commands.py::test_invalid_utf8_becomes_replacement_char",
        "tests/integration/test_sdk_commands.py::test_envs_and_cwd",
        "tests/integration/test_sdk_commands.py::test_execd_envs_file_is_applied_and_reread",
        "tests/integration/test_sdk_commands.py::test_cwd_may_use_request_envs",
        "tests/integration/test_sdk_commands.py::test_background_status_and_logs",
        # a user the fixture adds to this machine's /etc/passwd
        "tests/integration/test_sdk_commands.py::test_uid_runs_as_user",
        "tests/integration/test_resume.py::test_fifty_concurrent_starts_with_one_id_run_once",
        "tests/integration/test_bash_sessions.py::test_cwd_persists",
        "tests/integration/test_bash_sessions.py::test_create_with_cwd",
        "tests/integration/test_pause.py::test_streams_and_watches_resume_after_a_pause",
        # reads the v1 freezer's task states on this machine
        "tests/integration/test_pause.py::test_shutdown_while_frozen_thaws_and_ends_everything",
    ],
    "raw sockets": [
        "tests/integration/test_stdin.py::test_a_stdin_writer_that_resets_mid_body",
        "tests/integration/test_pty_ws.py::test_malformed_frames_close_with_protocol_codes",
        "tests/integration/test_pty_ws.py::test_oversized_message_closes_1009",
        "tests/integration/test_pty_ws.py::test_fragmented_stdin_and_client_close_handshake",
    ],
    "the guest's busybox": [
        # `head -c 50M`: busybox head takes no M suffix (the guest has no coreutils)
        "tests/integration/test_pty_ws.py::test_burst_through_slow_reader_with_bounded_rss",
    ],
    "the token itself": [
        "tests/integration/test_resume.py::test_new_routes_need_the_token",
    ],
}


def run_integration(guest: Path, work: Path, figures: Path) -> int:
    token = secrets.token_hex(16)
    vm = Vm(guest, work, token, name="suite").start()
    try:
        boot = vm.wait_ping()
        print(f"test-vm: guest up in {boot:.1f} s ({accel()}), execd on 127.0.0.1:{vm.port}", flush=True)
        with open(figures, "a") as f:
            f.write(json.dumps({"figure": "boot_to_ping", "value": round(boot, 2), "unit": "s"}) + "\n")
        env = dict(os.environ, EXECD_REMOTE=f"http://127.0.0.1:{vm.port}", EXECD_REMOTE_TOKEN=token)
        args = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *SELECTION]
        for ids in DESELECT.values():
            for node in ids:
                args += ["--deselect", node]
        t0 = time.monotonic()
        rc = subprocess.call(args, cwd=ROOT, env=env)
        with open(figures, "a") as f:
            f.write(json.dumps({"figure": "integration_selection", "value": round(time.monotonic() - t0, 1),
                                "unit": "s"}) + "\n")
        return rc
    finally:
        vm.kill()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--guest", default=str(ROOT / "build" / "vm"))
    ap.add_argument("--skip-integration", action="store_true")
    ap.add_argument("--skip-vm-tests", action="store_true")
    opts, rest = ap.parse_known_args()
    guest = Path(opts.guest).resolve()
    figures = guest / "figures.jsonl"
    figures.write_text("")
    t0 = time.monotonic()
    rc = 0
    with tempfile.TemporaryDirectory(prefix="execd-vm-") as work:
        if not opts.skip_integration:
            rc |= run_integration(guest, Path(work), figures)
    if not opts.skip_vm_tests:
        env = dict(os.environ, EXECD_VM_GUEST=str(guest), EXECD_VM_FIGURES=str(figures))
        rc |= subprocess.call([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                               "tests/vm", *rest], cwd=ROOT, env=env)
    print(f"\ntest-vm figures ({accel()}, {os.cpu_count()} cores):")
    seen: dict[str, list] = {}
    for line in figures.read_text().splitlines():
        f = json.loads(line)
        seen.setdefault(f["figure"], []).append((f["value"], f["unit"]))
    for name, vals in seen.items():
        nums = [v for v, _ in vals]
        unit = vals[0][1]
        shown = f"{nums[0]}" if len(nums) == 1 else f"{min(nums)}-{max(nums)} over {len(nums)}"
        print(f"  {name:24s} {shown} {unit}")
    print(f"  {'test-vm total':24s} {time.monotonic() - t0:.0f} s")
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
