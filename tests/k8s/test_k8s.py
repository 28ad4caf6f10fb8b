"""execd under a real single-node Kubernetes (make test-k8s, opt-in).

The project's image/k8s manifests applied for real (the Kata RuntimeClass
mapped to runc, see manifests/runtimeclass-runc.yaml), execd pods driven
with the official SDK at their pod IPs, two hostNetwork pods each on its own
port, agent-sandbox's SandboxTemplate + SandboxWarmPool + SandboxClaim with
execd in the template (warm claim to first command, measured), and
opensandbox-server 1.1.1 in its Kubernetes mode with the agent-sandbox
provider, whose sandboxes get their execd from this project's execd_image.
"""
from __future__ import annotations

import http.client
import json
import secrets
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, record, wait_pod_ready

TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"
K8S = ROOT / "image" / "k8s"


def sdk_commands(endpoint: str, token: str):
    from opensandbox.config.connection_sync import ConnectionConfigSync
    from opensandbox.models.sandboxes import SandboxEndpoint
    from opensandbox.sync.adapters.factory import AdapterFactorySync
    cfg = ConnectionConfigSync(protocol="http", request_timeout=timedelta(seconds=60))
    ep = SandboxEndpoint(endpoint=endpoint, headers={TOKEN_HEADER: token})
    f = AdapterFactorySync(cfg)
    return f.create_command_service(ep), f.create_filesystem_service(ep)


def stdout_of(ex) -> str:
    return "".join(m.text if m.text.endswith("\n") else m.text + "\n" for m in ex.logs.stdout)


def first_output(host: str, port: int, token: str, command: str) -> tuple[float, bytes]:
    """POST /command and read until the first stdout event: (seconds, text)."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection(host, port, timeout=30)
    try:
        c.request("POST", "/command", body=json.dumps({"command": command}).encode(),
                  headers={TOKEN_HEADER: token, "Accept": "application/x-ndjson",
                           "Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, r.read()[:300]
        while True:
            line = r.readline()
            assert line, "stream ended without output"
            ev = json.loads(line)
            if ev["type"] == "stdout":
                return time.monotonic() - t0, ev["text"].encode()
    finally:
        c.close()


def status_of(host, port, token=None, path="/ping", method="GET"):
    c = http.client.HTTPConnection(host, port, timeout=10)
    try:
        c.request(method, path, headers={TOKEN_HEADER: token} if token else {})
        r = c.getresponse()
        r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}
    finally:
        c.close()


def test_node_is_ready(cluster, kube):
    nodes = kube.CoreV1Api().list_node().items
    assert [n.metadata.name for n in nodes] == ["execd-node"]
    addrs = {a.type: a.address for a in nodes[0].status.addresses}
    assert addrs["InternalIP"] == "192.0.2.10"


def test_project_pod_manifest(cluster, kube, token):
    t0 = time.monotonic()
    cluster.kubectl("apply", "-f", K8S / "pod.yaml")
    pod = wait_pod_ready(kube, "execd-sandbox")
    record("pod_apply_to_ready", round(time.monotonic() - t0, 2))
    assert pod.spec.runtime_class_name == "kata-vm-isolation"
    ip = pod.status.pod_ip
    assert ip.startswith("198.51.100."), ip
    # The readiness probe went through /ping; the token from the Secret file is enforced.
    st, h = status_of(ip, 44772)
    # An unprivileged container's /sys/fs/cgroup is read-only (runc, and so
    # a Kata guest's containers): execd falls back to keepers (subreapers) there.
    assert st == 200 and h["x-execd-containment"] == "subreaper", h
    record("pod_containment_mode", h["x-execd-containment"], "")
    assert status_of(ip, 44772, path="/command/status/x")[0] == 401
    cmds, files = sdk_commands(f"{ip}:44772", token)
    ex = cmds.run("tr '\\0' ' ' < /proc/1/cmdline; echo; echo hello-from-$(hostname)")
    assert ex.exit_code == 0, ex
    out = stdout_of(ex).splitlines()
    assert out[0].startswith("/usr/local/bin/execd --init --host 0.0.0.0 --port 44772"), out
    assert out[1] == "hello-from-execd-sandbox"
    files.write_file("/workspace/note.txt", "written through the SDK\n")
    assert files.read_file("/workspace/note.txt") == "written through the SDK\n"
    # Deleting the pod: the kubelet's SIGTERM reaches execd (PID 1), which
    # drains and exits well within terminationGracePeriodSeconds (15 s).
    t0 = time.monotonic()
    cluster.kubectl("delete", "pod", "execd-sandbox", "--wait=true", "--timeout=60s")
    took = time.monotonic() - t0
    record("pod_delete", round(took, 2))
    assert took < 12, took


def test_two_hostnetwork_pods_each_on_its_own_port(cluster, kube, token):
    base = (K8S / "pod-hostnetwork.yaml").read_text()
    second = base.replace("44781", "44782").replace("execd-sandbox-hostnet", "execd-sandbox-hostnet-2")
    cluster.kubectl("apply", "-f", "-", input=base)
    cluster.kubectl("apply", "-f", "-", input=second)
    try:
        for name in ("execd-sandbox-hostnet", "execd-sandbox-hostnet-2"):
            pod = wait_pod_ready(kube, name)
            assert pod.spec.host_network and pod.status.pod_ip == "192.0.2.10"
        # Both on the node address, each on its port, each its own execd.
        cmds1, _ = sdk_commands("192.0.2.10:44781", token)
        cmds2, _ = sdk_commands("192.0.2.10:44782", token)
        assert cmds1.run("echo one > /workspace/mine; cat /workspace/mine").exit_code == 0
        ex = cmds2.run("test -e /workspace/mine && echo shared || echo separate")
        assert stdout_of(ex) == "separate\n"
    finally:
        cluster.kubectl("delete", "pod", "execd-sandbox-hostnet", "execd-sandbox-hostnet-2",
                        "--wait=true", "--timeout=60s", check=False)


def _claim(name: str, pool: str) -> dict:
    return {"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"warmPoolRef": {"name": pool}}}


def _claim_and_first_command(kube, token, body) -> tuple[float, str, str]:
    """Creates the claim; returns (seconds to the first stdout, pod IP, sandbox name)."""
    api = kube.CustomObjectsApi()
    t0 = time.monotonic()
    api.create_namespaced_custom_object("extensions.agents.x-k8s.io", "v1beta1", "default", "sandboxclaims", body)
    deadline = t0 + 120
    while True:
        c = api.get_namespaced_custom_object("extensions.agents.x-k8s.io", "v1beta1", "default", "sandboxclaims",
                                             body["metadata"]["name"])
        st = c.get("status") or {}
        ready = any(x["type"] == "Ready" and x["status"] == "True" for x in st.get("conditions", []))
        ips = (st.get("sandbox") or {}).get("podIPs") or []
        if ready and ips:
            break
        assert time.monotonic() < deadline, f"claim not ready: {st}"
        time.sleep(0.01)
    _, text = first_output(ips[0], 44772, token, "echo first")
    assert text == b"first\n"
    return time.monotonic() - t0, ips[0], st["sandbox"]["name"]


def test_agent_sandbox_template_warm_pool_and_claim(cluster, kube, token):
    cluster.kubectl("apply", "-f", K8S / "sandbox-template.yaml")
    cluster.kubectl("apply", "-f", Path(__file__).parent / "manifests" / "warmpool.yaml")
    api = kube.CustomObjectsApi()
    core = kube.CoreV1Api()

    def warm_pod(exclude=()):
        pods = [p for p in core.list_namespaced_pod("default").items
                if p.metadata.deletion_timestamp is None and p.status.pod_ip
                and p.status.pod_ip not in exclude
                and any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))
                and any(o.kind == "Sandbox" for o in (p.metadata.owner_references or []))]
        return pods[0] if pods else None
    t0 = time.monotonic()
    deadline = t0 + 180
    while not (warm := warm_pod()):
        assert time.monotonic() < deadline, "no warm pod from the pool"
        time.sleep(0.1)
    record("warm_pool_fill", round(time.monotonic() - t0, 2))
    assert warm.spec.runtime_class_name == "kata-vm-isolation"
    warm_ip = warm.status.pod_ip

    # Warm claim: the pool's ready sandbox is handed over.
    took, ip, sandbox = _claim_and_first_command(kube, token, _claim("warm-claim-1", pool="execd-warm"))
    record("warm_claim_to_first_command", round(took, 3))
    assert ip == warm_ip, "the claim did not get the warm pod"
    assert took < 10, took
    # The SDK drives the claimed sandbox like any execd.
    cmds, _ = sdk_commands(f"{ip}:44772", token)
    ex = cmds.run("echo claimed; cat /proc/1/cmdline | tr '\\0' ' '")
    assert stdout_of(ex).startswith("claimed\n/usr/local/bin/execd --init")
    # The pool refills behind the claim.
    deadline = time.monotonic() + 180
    while not warm_pod(exclude={ip}):
        assert time.monotonic() < deadline, "the pool did not refill"
        time.sleep(0.2)

    # For comparison, a cold start: a claim on an empty pool (replicas 0) of
    # the same template gets a sandbox made for it.
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
        "metadata": {"name": "execd-cold"},
        "spec": {"replicas": 0, "sandboxTemplateRef": {"name": "execd-code-sandbox"}}}))
    took_cold, _, _ = _claim_and_first_command(kube, token, _claim("cold-claim-1", pool="execd-cold"))
    record("cold_claim_to_first_command", round(took_cold, 3))
    assert took_cold > took, (took_cold, took)

    # Deleting a claim removes its sandbox.
    api.delete_namespaced_custom_object("extensions.agents.x-k8s.io", "v1beta1", "default", "sandboxclaims",
                                        "warm-claim-1")
    deadline = time.monotonic() + 120
    while True:
        try:
            api.get_namespaced_custom_object("agents.x-k8s.io", "v1beta1", "default", "sandboxes", sandbox)
        except kube.exceptions.ApiException as e:
            assert e.status == 404
            break
        assert time.monotonic() < deadline, "the claimed sandbox outlived its claim"
        time.sleep(0.2)
    cluster.kubectl("delete", "sandboxclaim", "cold-claim-1", "--wait=false", check=False)
    cluster.kubectl("delete", "sandboxwarmpool", "execd-warm", "execd-cold", "--wait=false", check=False)


class Server:
    """opensandbox-server (PyPI, this venv) in its Kubernetes mode."""

    def __init__(self, cluster, workdir: Path, execd_image: str):
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.api_key = secrets.token_hex(16)
        self.log_path = workdir / "server.log"
        cfg = workdir / "config.toml"
        cfg.write_text(f"""
[server]
host = "127.0.0.1"
port = {self.port}
api_key = "{self.api_key}"

[log]
level = "INFO"

[runtime]
type = "kubernetes"
execd_image = "{execd_image}"

[store]
type = "sqlite"
path = "{workdir / 'opensandbox.db'}"

[kubernetes]
kubeconfig_path = "{cluster.admin_kubeconfig}"
namespace = "default"
workload_provider = "agent-sandbox"
image_pull_policy = "IfNotPresent"
sandbox_create_timeout_seconds = 120

[agent_sandbox]
shutdown_policy = "Delete"
ingress_enabled = false

[ingress]
mode = "direct"
""")
        exe = Path(sys.executable).parent / "opensandbox-server"
        self.proc = subprocess.Popen([str(exe), "--config", str(cfg)], cwd=workdir,
                                     env={"HOME": str(workdir), "PATH": "/usr/bin:/bin"},
                                     stdout=open(self.log_path, "wb"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        cluster.procs["opensandbox-server"] = self.proc
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, f"opensandbox-server exited:\n{self.log()}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"opensandbox-server did not answer /health:\n{self.log()}"
            time.sleep(0.3)

    def log(self, n=60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def config(self, token):
        from opensandbox.config.connection_sync import ConnectionConfigSync
        return ConnectionConfigSync(domain=f"127.0.0.1:{self.port}", api_key=self.api_key, protocol="http",
                                    request_timeout=timedelta(seconds=120), headers={TOKEN_HEADER: token})

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def test_opensandbox_server_kubernetes_mode_with_agent_sandbox(cluster, kube, tmp_path):
    import images
    from opensandbox.sync.sandbox import SandboxSync
    server = Server(cluster, tmp_path, images.EXECD_IMAGE)
    try:
        sb_token = secrets.token_hex(16)
        t0 = time.monotonic()
        try:
            sb = SandboxSync.create(images.EXECD_LOCAL, env={"EXECD_ACCESS_TOKEN": sb_token},
                                    connection_config=server.config(sb_token),
                                    ready_timeout=timedelta(seconds=120), timeout=timedelta(minutes=10))
        except Exception as e:
            pods = cluster.kubectl("describe", "pods", check=False).stdout[-6000:]
            sbx = cluster.kubectl("get", "sandboxes", "-o", "yaml", check=False).stdout[-4000:]
            raise AssertionError(f"create failed: {e}\n{pods}\n{sbx}\n{server.log()}") from e
        try:
            ex = sb.commands.run("echo first-output")
            record("server_create_to_first_command", round(time.monotonic() - t0, 2))
            assert ex.exit_code == 0 and stdout_of(ex) == "first-output\n", ex
            # The sandbox is an agent-sandbox Sandbox whose pod got this
            # project's execd and bootstrap.sh from the execd_image init container.
            sandboxes = kube.CustomObjectsApi().list_namespaced_custom_object(
                "agents.x-k8s.io", "v1beta1", "default", "sandboxes")["items"]
            mine = [s for s in sandboxes
                    if any(c.get("image") == images.EXECD_IMAGE
                           for c in s["spec"]["podTemplate"]["spec"].get("initContainers", []))]
            assert mine, [s["metadata"]["name"] for s in sandboxes]
            ex = sb.commands.run("ls /opt/opensandbox; tr '\\0' ' ' < /proc/1/cmdline; echo; "
                                 "/opt/opensandbox/execd --version")
            out = stdout_of(ex)
            assert "bootstrap.sh" in out and "execd" in out, out
            assert "/opt/opensandbox/bootstrap.sh" in out, out
            static = (ROOT / "build" / "execd-static")
            assert out.strip().splitlines()[-1].startswith("execd "), out
            # The token reached execd: a wrong one is refused.
            bad = SandboxSync.connect(sb.id, connection_config=server.config("wrong-token"))
            with pytest.raises(Exception):
                bad.commands.run("echo should-not-run")
            sb.files.write_file("/tmp/k8s.txt", "through the lifecycle server\n")
            assert sb.files.read_file("/tmp/k8s.txt") == "through the lifecycle server\n"
            assert static.exists()
        finally:
            sb.kill()
        deadline = time.monotonic() + 120
        while [s for s in kube.CustomObjectsApi().list_namespaced_custom_object(
                "agents.x-k8s.io", "v1beta1", "default", "sandboxes")["items"]
               if s["metadata"]["name"] == mine[0]["metadata"]["name"]]:
            assert time.monotonic() < deadline, "kill did not remove the Sandbox"
            time.sleep(0.3)
    finally:
        server.stop()
