"""image/bootstrap.sh under dash and busybox sh, with a fake execd (fast, no docker).

The fake execd records its arguments and environment and then waits for
SIGTERM, like the real one.  Nothing here touches the host outside tmp_path:
the system-store and NSS steps of the egress CA trust run against fake
`sudo` / `update-ca-certificates` / `certutil` / `id` that only record calls.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP = ROOT / "image" / "bootstrap.sh"


def _shells():
    out = []
    if shutil.which("dash"):
        out.append(pytest.param([shutil.which("dash")], id="dash"))
    if shutil.which("busybox"):
        out.append(pytest.param([shutil.which("busybox"), "sh"], id="busybox-sh"))
    if not out:
        out.append(pytest.param(None, id="no-shell",
                                marks=pytest.mark.skip(reason="neither dash nor busybox installed")))
    return out


FAKE_EXECD = """#!/bin/sh
d=$(dirname "$0")
trap 'echo execd-term >> "$d/execd.events"; exit 0' TERM
: > "$d/execd.args"; [ $# -gt 0 ] && printf '%s\\n' "$@" > "$d/execd.args"
env > "$d/execd.env"
echo "execd-log-line" >&2
echo started >> "$d/execd.events"
while :; do sleep 0.05; done
"""


class Run:
    def __init__(self, tmp: Path, shell: list[str]):
        self.tmp = tmp
        self.shell = shell
        self.execd = tmp / "execd"
        self.execd.write_text(FAKE_EXECD)
        self.execd.chmod(0o755)
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp),
                    "EXECD": str(self.execd), "EXECD_ENVS": str(tmp / "envs" / ".env"),
                    "EXECD_STOP_TIMEOUT": "5", "TMPDIR": str(tmp)}

    def __call__(self, *args: str, env=None, timeout=20) -> subprocess.CompletedProcess:
        # The command first waits (up to 5 s) for the fake execd to be up, so
        # that execd has its SIGTERM handler when the command's end stops it.
        wait = (f'i=0; while [ ! -e "{self.tmp}/execd.events" ] && [ $i -lt 100 ]; do '
                f'sleep 0.05; i=$((i+1)); done; ')
        env = {**self.env, **(env or {})}
        if "BOOTSTRAP_CMD" in env:
            env["BOOTSTRAP_CMD"] = wait + env["BOOTSTRAP_CMD"]
        elif args and args[0] == "-c":
            args = ("-c", wait + " ".join(args[1:]))
        elif args:
            args = ("sh", "-c", wait + 'exec "$@"', "sh", *args)
        return subprocess.run([*self.shell, str(BOOTSTRAP), *args], env=env,
                              capture_output=True, text=True, timeout=timeout)

    def args(self) -> list[str]:
        p = self.tmp / "execd.args"
        return p.read_text().splitlines() if p.exists() else []

    def execd_env(self) -> dict[str, str]:
        out = {}
        for line in (self.tmp / "execd.env").read_text().splitlines():
            k, _, v = line.partition("=")
            out[k] = v
        return out

    def started(self) -> bool:
        return (self.tmp / "execd.events").exists()


@pytest.fixture(params=_shells())
def run(request, tmp_path) -> Run:
    return Run(tmp_path, request.param)


def warnings(stderr: str) -> list[str]:
    return [l for l in stderr.splitlines() if "WARNING" in l]


def test_no_token_runs_open_with_one_warning(run):
    r = run("sh", "-c", "echo user-ran; exit 3")
    assert r.returncode == 3, r.stderr
    assert "user-ran" in r.stdout
    assert run.args() == ["--insecure-no-auth"]
    w = warnings(r.stderr)
    assert len(w) == 1, r.stderr
    assert "--insecure-no-auth" in w[0] and "port 44772" in w[0] and "anyone" in w[0]
    assert "EXECD_REQUIRE_TOKEN=1" in w[0]
    assert "execd-term" in (run.tmp / "execd.events").read_text()


def test_warning_names_the_configured_port(run):
    r = run("true", env={"EXECD_ARGS": "--host 127.0.0.1 --port 45001"})
    assert r.returncode == 0, r.stderr
    assert run.args() == ["--host", "127.0.0.1", "--port", "45001", "--insecure-no-auth"]
    assert "port 45001" in warnings(r.stderr)[0]


def test_token_env_is_enforced(run):
    r = run("true", env={"EXECD_ACCESS_TOKEN": "s3cret", "EXECD_REQUIRE_TOKEN": "1"})
    assert r.returncode == 0, r.stderr
    assert run.args() == []
    assert run.execd_env()["EXECD_ACCESS_TOKEN"] == "s3cret"
    assert not warnings(r.stderr) and "s3cret" not in r.stderr


def test_token_file_env_passes_through(run):
    tok = run.tmp / "my token"
    tok.write_text("s3cret\n")
    r = run("true", env={"EXECD_ACCESS_TOKEN_FILE": str(tok), "EXECD_REQUIRE_TOKEN": "1"})
    assert r.returncode == 0, r.stderr
    assert run.args() == []  # execd reads the variable itself
    assert run.execd_env()["EXECD_ACCESS_TOKEN_FILE"] == str(tok)
    assert not warnings(r.stderr)


@pytest.mark.parametrize("flag", [["--access-token-file", "/run/t"], ["--access-token-file=/run/t"],
                                  ["-access-token", "x"], ["--access-token=x"]])
def test_token_flag_in_execd_args(run, flag):
    r = run("true", env={"EXECD_ARGS": " ".join(flag), "EXECD_REQUIRE_TOKEN": "yes",
                         "EXECD_ACCESS_TOKEN_FILE": "/run/t"})
    assert r.returncode == 0, r.stderr
    assert run.args() == flag          # nothing added, nothing duplicated
    assert not warnings(r.stderr)


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_require_token_refuses(run, value):
    r = run("sh", "-c", "echo user-ran", env={"EXECD_REQUIRE_TOKEN": value})
    assert r.returncode == 78
    assert not run.started() and "user-ran" not in r.stdout
    assert "refusing to start execd" in r.stderr and "EXECD_REQUIRE_TOKEN" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_require_token_zero_is_off(run):
    r = run("true", env={"EXECD_REQUIRE_TOKEN": "0"})
    assert r.returncode == 0 and run.args() == ["--insecure-no-auth"]


def test_both_token_envs_pass_through(run):
    # execd's own precedence decides (EXECD_ACCESS_TOKEN first).
    r = run("true", env={"EXECD_ACCESS_TOKEN": "a", "EXECD_ACCESS_TOKEN_FILE": "/run/t"})
    assert r.returncode == 0 and run.args() == []
    assert not warnings(r.stderr)


def test_explicit_insecure_flag_not_duplicated(run):
    r = run("true", env={"EXECD_ARGS": "--insecure-no-auth"})
    assert r.returncode == 0
    assert run.args() == ["--insecure-no-auth"]
    assert len(warnings(r.stderr)) == 1


def test_envs_file_pre_script_and_log_file(run):
    pre = run.tmp / "pre.sh"
    pre.write_text("export FROM_PRE=pre-value\n")
    log = run.tmp / "logs" / "execd.log"
    log.parent.mkdir()
    log.write_text("old\n")
    r = run("sh", "-c", 'echo "cmd sees $FROM_PRE $EXECD_ENVS"',
            env={"EXECD_BOOTSTRAP_PRE_SCRIPT": str(pre), "EXECD_LOG_FILE": str(log),
                 "EXECD_ACCESS_TOKEN": "t"})
    assert r.returncode == 0, r.stderr
    envs = run.tmp / "envs" / ".env"
    assert envs.is_file()
    assert f"cmd sees pre-value {envs}" in r.stdout
    e = run.execd_env()
    assert e["FROM_PRE"] == "pre-value" and e["EXECD_ENVS"] == str(envs)
    assert log.read_text() == "old\nexecd-log-line\n"          # appended
    assert "execd-log-line" not in r.stderr


def test_bootstrap_cmd_and_dash_c(run):
    r = run("-c", "echo one && echo two")
    assert r.stdout.split() == ["one", "two"], r.stderr
    r = run("echo", "ignored", env={"BOOTSTRAP_CMD": "echo from-env"})
    assert r.stdout.split() == ["from-env"], r.stderr


def test_no_command_waits_for_execd_and_forwards_sigterm(run):
    p = subprocess.Popen([*run.shell, str(BOOTSTRAP)], env={**run.env, "EXECD_ACCESS_TOKEN": "t"},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 10
    while not run.started() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run.started()
    p.send_signal(signal.SIGTERM)
    assert p.wait(10) == 0
    assert "execd-term" in (run.tmp / "execd.events").read_text()


def test_sigterm_reaches_the_command(run):
    p = subprocess.Popen([*run.shell, str(BOOTSTRAP), "sh", "-c",
                          "trap 'echo cmd-term; exit 0' TERM; echo up; while :; do sleep 0.05; done"],
                         env={**run.env, "EXECD_ACCESS_TOKEN": "t"},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "up"
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=10)
    assert p.returncode == 0 and "cmd-term" in out


def self_shell(run: Run) -> str:
    return " ".join(run.shell)


def _fake_tools(run: Run, with_store_tool: bool = True) -> Path:
    bin_ = run.tmp / "fakebin"
    bin_.mkdir()
    calls = run.tmp / "calls"
    for name, body in {
        "id": 'case "$1" in -u) echo 1000;; -un) echo tester;; *) echo uid=1000;; esac',
        "sudo": f'shift; echo "sudo $*" >> {calls}',           # drops -n, does nothing
        "update-ca-certificates": f'echo update-ca-certificates >> {calls}',
        "certutil": f'echo "certutil $*" >> {calls}',
        "python3": "exit 1",                                     # no certifi: use system roots
    }.items():
        if name == "update-ca-certificates" and not with_store_tool:
            continue
        (bin_ / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_ / name).chmod(0o755)
    # No sbin directories: the real update-ca-certificates lives there.
    run.env["PATH"] = f"{bin_}:/usr/bin:/bin"
    for tool in ("update-ca-certificates", "update-ca-trust"):
        for d in ("/usr/bin", "/bin"):
            if with_store_tool is False and os.path.exists(f"{d}/{tool}"):
                pytest.skip(f"{d}/{tool} exists: the test would change the host's trust store")
    return calls


def test_egress_ca_trust(run):
    if not Path("/etc/ssl/certs/ca-certificates.crt").is_file():
        pytest.skip("no /etc/ssl/certs/ca-certificates.crt to merge with")
    # busybox sh runs its own `id` applet, not the fake one, so as root it
    # would really install the CA: give it no trust-store tool at all.
    busybox = "busybox" in self_shell(run)
    calls = _fake_tools(run, with_store_tool=not busybox)
    ca = run.tmp / "ca" / "mitmproxy-ca-cert.pem"
    ca.parent.mkdir()
    pem = "-----BEGIN CERTIFICATE-----\nZmFrZQ==\n-----END CERTIFICATE-----\n"

    def publish():          # the egress sidecar writes the CA a little later
        time.sleep(1.5)
        ca.with_suffix(".tmp").write_text(pem)
        os.replace(ca.with_suffix(".tmp"), ca)
    threading.Thread(target=publish, daemon=True).start()
    r = run("true", env={"OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT": "true",
                         "OPENSANDBOX_MITM_CA_FILE": str(ca), "EXECD_ACCESS_TOKEN": "t"})
    assert r.returncode == 0, r.stderr
    e = run.execd_env()
    merged = ca.parent / "merged-ca-certificates.pem"
    assert e["NODE_EXTRA_CA_CERTS"] == str(ca)
    assert e["REQUESTS_CA_BUNDLE"] == e["SSL_CERT_FILE"] == str(merged)
    text = merged.read_text()
    assert text.endswith(pem) and text.count("BEGIN CERTIFICATE") > 10
    c = calls.read_text()
    if busybox:
        assert "no update-ca-certificates or update-ca-trust" in r.stderr
    else:
        assert f"sudo cp {ca} /usr/local/share/ca-certificates/" in c
        assert "sudo update-ca-certificates" in c
    assert "certutil -A" in c and str(ca) in c
    assert "egress CA" in r.stderr and "after" in r.stderr


def test_egress_ca_wait_is_bounded(run):
    t0 = time.monotonic()
    r = run("true", env={"OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT": "1",
                         "OPENSANDBOX_MITM_CA_FILE": str(run.tmp / "never.pem"),
                         "OPENSANDBOX_MITM_CA_TIMEOUT": "2", "EXECD_ACCESS_TOKEN": "t"})
    assert r.returncode == 0
    assert 1.5 < time.monotonic() - t0 < 10
    assert "did not appear within 2s" in r.stderr
    assert "SSL_CERT_FILE" not in run.execd_env()
