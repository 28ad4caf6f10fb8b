"""A single-node Kubernetes inside a network namespace of its own (make test-k8s).

Everything runs as root on this machine, each process entered into the
namespace with `nsenter --net` (`ip netns exec` would also remount /sys and
hide the cgroup mounts the kubelet and containerd need):

  etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
  agent-sandbox-controller (built by tests/k8s/build.sh), Debian's containerd
  and runc, and containernetworking-plugins' bridge for pod networking.

The namespace's only addresses are 192.0.2.10/32 on its lo (the node IP,
TEST-NET-1) and the pods' bridge (198.51.100.0/24, TEST-NET-2); services get
203.0.113.0/24 (TEST-NET-3). There is no default route and no link to the
outside: nothing the cluster does leaves the namespace. containerd runs
with restrict_oom_score_adj (this machine lacks CAP_SYS_RESOURCE); images
come from OCI archives (tests/k8s/images.py) through `ctr images import`.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

NODE_IP = "192.0.2.10"
POD_CIDR = "198.51.100.0/24"
SERVICE_CIDR = "203.0.113.0/24"
NODE = "execd-node"


def sh(*args, check=True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], check=check, capture_output=True, text=True, **kw)


def wait_for(pred, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Cluster:
    def __init__(self, state: Path, bin_dir: Path, netns: str = "execd-k8s"):
        self.state = Path(state)
        self.bin = Path(bin_dir)
        self.netns = netns
        self.netns_path = f"/run/netns/{netns}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.figures: dict[str, float] = {}
        self.pki = self.state / "pki"
        self.admin_kubeconfig = self.state / "admin.kubeconfig"
        self.containerd_sock = self.state / "containerd" / "containerd.sock"

    # ---- helpers --------------------------------------------------------------
    def ns(self, *args) -> list[str]:
        return ["nsenter", f"--net={self.netns_path}", "--", *[str(a) for a in args]]

    def start(self, name: str, *args, env=None):
        log = open(self.state / "logs" / f"{name}.log", "ab")
        p = subprocess.Popen(self.ns(*args), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             env=dict(os.environ, **(env or {})), start_new_session=True)
        self.procs[name] = p
        return p

    def log_tail(self, name: str, n: int = 40) -> str:
        try:
            return "\n".join((self.state / "logs" / f"{name}.log").read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def check_alive(self):
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise AssertionError(f"{name} exited {p.returncode}:\n{self.log_tail(name)}")

    def kubectl(self, *args, check=True, input=None) -> subprocess.CompletedProcess:
        r = subprocess.run(self.ns(self.bin / "kubectl", "--kubeconfig", self.admin_kubeconfig, *args),
                           capture_output=True, text=True, input=input)
        if check and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(map(str, args))}: {r.stderr.strip()}")
        return r

    def kubectl_json(self, *args):
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def ctr(self, *args) -> subprocess.CompletedProcess:
        return sh("ctr", "--address", self.containerd_sock, "--namespace", "k8s.io", *args)

    # ---- bring-up ---------------------------------------------------------------
    def create_netns(self):
        # tests/k8s/run.py made it already and runs pytest inside it.
        if not os.path.exists(self.netns_path):
            sh("ip", "netns", "add", self.netns)
        sh("ip", "-n", self.netns, "link", "set", "lo", "up")
        sh("ip", "-n", self.netns, "addr", "add", f"{NODE_IP}/32", "dev", "lo")

    def make_pki(self):
        p = self.pki
        p.mkdir(parents=True, exist_ok=True)

        def key(name):
            sh("openssl", "genrsa", "-out", p / f"{name}.key", "2048")

        def cert(name, subj, ext=None):
            key(name)
            sh("openssl", "req", "-new", "-key", p / f"{name}.key", "-subj", subj, "-out", p / f"{name}.csr")
            args = ["openssl", "x509", "-req", "-in", p / f"{name}.csr", "-CA", p / "ca.crt", "-CAkey", p / "ca.key",
                    "-CAcreateserial", "-days", "30", "-out", p / f"{name}.crt"]
            if ext:
                (p / f"{name}.ext").write_text(ext)
                args += ["-extfile", p / f"{name}.ext"]
            sh(*args)

        key("ca")
        sh("openssl", "req", "-x509", "-new", "-key", p / "ca.key", "-subj", "/CN=execd-test-ca", "-days", "30",
           "-out", p / "ca.crt")
        cert("apiserver", "/CN=kube-apiserver",
             "subjectAltName=IP:" + NODE_IP + ",IP:127.0.0.1,IP:203.0.113.1,DNS:kubernetes,DNS:kubernetes.default,"
             "DNS:kubernetes.default.svc,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        cert("admin", "/O=system:masters/CN=execd-test-admin", "extendedKeyUsage=clientAuth\n")
        cert("kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client", "extendedKeyUsage=clientAuth\n")
        cert("node", f"/O=system:nodes/CN=system:node:{NODE}", "extendedKeyUsage=clientAuth\n")
        key("sa")
        sh("openssl", "rsa", "-in", p / "sa.key", "-pubout", "-out", p / "sa.pub")
        for name, user in (("admin", "admin"), ("node", "node")):
            kc = {"apiVersion": "v1", "kind": "Config",
                  "clusters": [{"name": "execd", "cluster": {"server": f"https://{NODE_IP}:6443",
                                                            "certificate-authority": str(p / "ca.crt")}}],
                  "users": [{"name": user, "user": {"client-certificate": str(p / f"{name}.crt"),
                                                    "client-key": str(p / f"{name}.key")}}],
                  "contexts": [{"name": "execd", "context": {"cluster": "execd", "user": user}}],
                  "current-context": "execd"}
            (self.state / f"{name}.kubeconfig").write_text(json.dumps(kc))

    def write_containerd_config(self):
        c = self.state / "containerd"
        cni = self.state / "cni"
        for d in (c, cni):
            d.mkdir(parents=True, exist_ok=True)
        (cni / "10-execd.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": "execd-k8s",
            "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
                         "hairpinMode": True,
                         "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]],
                                  "dataDir": str(self.state / "cni-ipam")}}]}))
        (c / "config.toml").write_text(f"""version = 2
root = "{c}/root"
state = "{c}/state"
[grpc]
  address = "{self.containerd_sock}"
[ttrpc]
  address = "{c}/ttrpc.sock"
[debug]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{c}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/execd-test/pause:3.10"
  restrict_oom_score_adj = true
  enable_unprivileged_ports = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
""")

    def write_kubelet_config(self):
        k = self.state / "kubelet"
        k.mkdir(parents=True, exist_ok=True)
        (k / "config.yaml").write_text(json.dumps({
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": NODE_IP, "port": 10250, "readOnlyPort": 0,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                               "x509": {"clientCAFile": str(self.pki / "ca.crt")}},
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs", "failCgroupV1": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_sock}",
            "failSwapOn": False, "resolvConf": "", "hairpinMode": "none",
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False, "maxPods": 40,
            "nodeStatusUpdateFrequency": "2s", "syncFrequency": "5s",
            "podLogsDir": str(self.state / "pod-logs"),
        }))

    def up(self, images: list[Path]):
        t0 = time.monotonic()
        # What exists before, so that down() removes only what this cluster made.
        self.netns_before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        self.cgroups_before = set(Path("/sys/fs/cgroup").glob("*/kubepods"))
        for d in ("logs",):
            (self.state / d).mkdir(parents=True, exist_ok=True)
        self.create_netns()
        self.make_pki()
        self.write_containerd_config()
        self.write_kubelet_config()
        self.start("containerd", "containerd", "--config", self.state / "containerd" / "config.toml")
        wait_for(lambda: self.check_alive() or self.containerd_sock.exists(), 60, "containerd's socket")
        t_img = time.monotonic()
        for img in images:
            self.ctr("images", "import", "--no-unpack=false", img)
        self.figures["image_import"] = round(time.monotonic() - t_img, 1)
        self.start("etcd", self.bin / "etcd", "--data-dir", self.state / "etcd",
                   "--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
                   "--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls",
                   "http://127.0.0.1:2380", "--initial-cluster", "default=http://127.0.0.1:2380",
                   "--unsafe-no-fsync")
        p = self.pki
        self.start("kube-apiserver", self.bin / "kube-apiserver",
                   "--etcd-servers", "http://127.0.0.1:2379", "--bind-address", NODE_IP,
                   "--advertise-address", NODE_IP, "--secure-port", "6443",
                   "--service-cluster-ip-range", SERVICE_CIDR,
                   "--client-ca-file", p / "ca.crt", "--tls-cert-file", p / "apiserver.crt",
                   "--tls-private-key-file", p / "apiserver.key",
                   "--service-account-key-file", p / "sa.pub", "--service-account-signing-key-file", p / "sa.key",
                   "--service-account-issuer", "https://kubernetes.default.svc",
                   "--kubelet-client-certificate", p / "kubelet-client.crt",
                   "--kubelet-client-key", p / "kubelet-client.key",
                   "--authorization-mode", "Node,RBAC", "--allow-privileged=true",
                   "--enable-priority-and-fairness=false", "--profiling=false")
        wait_for(lambda: self.check_alive() or self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0,
                 120, "the apiserver to be ready")
        self.figures["apiserver_ready"] = round(time.monotonic() - t0, 1)
        self.start("kube-controller-manager", self.bin / "kube-controller-manager",
                   "--kubeconfig", self.admin_kubeconfig, "--service-account-private-key-file", p / "sa.key",
                   "--root-ca-file", p / "ca.crt", "--use-service-account-credentials=false",
                   "--leader-elect=false",
                   "--bind-address", "127.0.0.1", "--profiling=false")
        self.start("kube-scheduler", self.bin / "kube-scheduler", "--kubeconfig", self.admin_kubeconfig,
                   "--leader-elect=false", "--bind-address", "127.0.0.1", "--profiling=false")
        t_kubelet = time.monotonic()
        self.start("kubelet", self.bin / "kubelet", "--config", self.state / "kubelet" / "config.yaml",
                   "--kubeconfig", self.state / "node.kubeconfig", "--hostname-override", NODE,
                   "--node-ip", NODE_IP, "--root-dir", self.state / "kubelet" / "root",
                   "--cert-dir", self.state / "kubelet" / "pki", "--v", "1")

        def node_ready():
            self.check_alive()
            r = self.kubectl("get", "node", NODE, "-o", "json", check=False)
            if r.returncode != 0:
                return False
            conds = json.loads(r.stdout)["status"].get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)
        wait_for(node_ready, 180, "the node to be Ready")
        self.figures["node_ready_after_kubelet_start"] = round(time.monotonic() - t_kubelet, 1)
        wait_for(lambda: self.kubectl("get", "serviceaccount", "default", check=False).returncode == 0, 60,
                 "the default service account")
        self.figures["cluster_up"] = round(time.monotonic() - t0, 1)

    def start_agent_sandbox(self, crds: Path):
        for f in sorted(crds.glob("*.yaml")):
            self.kubectl("apply", "--server-side", "-f", f)
        for crd in ("sandboxes.agents.x-k8s.io", "sandboxtemplates.extensions.agents.x-k8s.io",
                    "sandboxwarmpools.extensions.agents.x-k8s.io", "sandboxclaims.extensions.agents.x-k8s.io"):
            self.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
        self.start("agent-sandbox-controller", self.bin / "agent-sandbox-controller", "--extensions",
                   "--leader-elect=false", "--metrics-bind-address", "127.0.0.1:18080",
                   "--health-probe-bind-address", "127.0.0.1:18081",
                   env={"KUBECONFIG": str(self.admin_kubeconfig)})

    # ---- teardown -----------------------------------------------------------------
    def down(self):
        # The kubelet first (it would restart what containerd stops), then the
        # pods' containers through containerd, then the rest; each by its PID.
        order = ["agent-sandbox-controller", "opensandbox-server", "kubelet", "kube-scheduler",
                 "kube-controller-manager", "kube-apiserver", "etcd"]
        for name in order:
            self._stop(name)
        if "containerd" in self.procs and self.procs["containerd"].poll() is None:
            r = sh("ctr", "--address", self.containerd_sock, "-n", "k8s.io", "tasks", "ls", "-q", check=False)
            for task in r.stdout.split():
                sh("ctr", "--address", self.containerd_sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL",
                   task, check=False)
            self._stop("containerd")
        # Shims outlive containerd: end the ones of this cluster's state dir.
        for pid in _pids_with(str(self.state / "containerd")):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in (self.state / "kubelet" / "root", self.state / "containerd"):
            _unmount_under(p)
        # The pods' network namespaces (containerd names them cni-*) and the
        # kubelet's cgroups, now empty.
        if os.path.isdir("/run/netns"):
            for n in set(os.listdir("/run/netns")) - getattr(self, "netns_before", set()):
                if n.startswith("cni-"):
                    sh("ip", "netns", "delete", n, check=False)
        for top in set(Path("/sys/fs/cgroup").glob("*/kubepods")) - getattr(self, "cgroups_before", set()):
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                try:
                    d.rmdir()
                except OSError:
                    pass
            try:
                top.rmdir()
            except OSError:
                pass

    def _stop(self, name):
        p = self.procs.get(name)
        if not p or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _pids_with(needle: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if needle in cmd and int(d) != os.getpid():
                out.append(int(d))
    return out


def _unmount_under(path: Path):
    prefix = str(path)
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for m in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        sh("umount", "-l", m, check=False)
