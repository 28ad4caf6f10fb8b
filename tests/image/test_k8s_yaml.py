"""Static checks of the Kubernetes manifests in image/k8s/ (no cluster needed).

Every manifest must parse, and every mapping key must be a real field of the
Kubernetes / agent-sandbox type at that position: a typo such as
`readinesProbe` is silently dropped by a lenient apiserver, so it is caught
here instead.  The field tables below cover the subset of the API the
manifests use; when the `kubernetes` Python client happens to be installed its
generated models are used as a second, authoritative check of the core types.

SandboxTemplate field names are those of kubernetes-sigs/agent-sandbox,
extensions/api/v1beta1/sandboxtemplate_types.go (SandboxTemplateSpec:
podTemplate, volumeClaimTemplates, networkPolicy) and api/v1beta1/
sandbox_types.go (PodTemplate: spec, metadata; PodMetadata: labels,
annotations). make test-k8s (tests/k8s) applies them to a real cluster.
"""

from __future__ import annotations

import pathlib

import pytest

yaml = pytest.importorskip("yaml")

ROOT = pathlib.Path(__file__).resolve().parents[2]
K8S = ROOT / "image" / "k8s"
PORT = 44772
RUNTIME_CLASS = "kata-vm-isolation"

# ---------------------------------------------------------------------------
# Field tables: type name -> {field: type name | None (scalar/free-form)}.
# "[T]" is a list of T, "{}" a string map.
# ---------------------------------------------------------------------------
S = None  # scalar / free-form
SCHEMA: dict[str, dict[str, object]] = {
    "ObjectMeta": {"name": S, "namespace": S, "labels": "{}", "annotations": "{}",
                   "generateName": S},
    "Pod": {"apiVersion": S, "kind": S, "metadata": "ObjectMeta", "spec": "PodSpec"},
    "Secret": {"apiVersion": S, "kind": S, "metadata": "ObjectMeta", "type": S,
               "data": "{}", "stringData": "{}", "immutable": S},
    "PodSpec": {
        "runtimeClassName": S, "automountServiceAccountToken": S,
        "enableServiceLinks": S, "restartPolicy": S,
        "terminationGracePeriodSeconds": S, "containers": "[Container]",
        "initContainers": "[Container]", "volumes": "[Volume]",
        "serviceAccountName": S, "securityContext": S, "nodeSelector": "{}",
        "tolerations": S, "affinity": S, "hostname": S, "dnsPolicy": S,
        "shareProcessNamespace": S, "priorityClassName": S, "hostNetwork": S,
    },
    "Container": {
        "name": S, "image": S, "imagePullPolicy": S, "command": "[]", "args": "[]",
        "env": "[EnvVar]", "envFrom": S, "ports": "[ContainerPort]",
        "resources": "ResourceRequirements", "livenessProbe": "Probe",
        "readinessProbe": "Probe", "startupProbe": "Probe",
        "volumeMounts": "[VolumeMount]", "workingDir": S, "securityContext": S,
        "lifecycle": S, "stdin": S, "tty": S,
    },
    "EnvVar": {"name": S, "value": S, "valueFrom": "EnvVarSource"},
    "EnvVarSource": {"secretKeyRef": "SecretKeySelector", "configMapKeyRef": S,
                     "fieldRef": S, "resourceFieldRef": S},
    "SecretKeySelector": {"name": S, "key": S, "optional": S},
    "ContainerPort": {"name": S, "containerPort": S, "protocol": S, "hostPort": S,
                      "hostIP": S},
    "ResourceRequirements": {"requests": "{}", "limits": "{}", "claims": S},
    "Probe": {"httpGet": "HTTPGetAction", "exec": S, "tcpSocket": S, "grpc": S,
              "initialDelaySeconds": S, "periodSeconds": S, "timeoutSeconds": S,
              "successThreshold": S, "failureThreshold": S,
              "terminationGracePeriodSeconds": S},
    "HTTPGetAction": {"path": S, "port": S, "host": S, "scheme": S,
                      "httpHeaders": S},
    "VolumeMount": {"name": S, "mountPath": S, "readOnly": S, "subPath": S,
                    "mountPropagation": S, "subPathExpr": S},
    "Volume": {"name": S, "secret": "SecretVolumeSource", "emptyDir": "EmptyDir",
               "configMap": S, "persistentVolumeClaim": S, "projected": S},
    "SecretVolumeSource": {"secretName": S, "defaultMode": S, "items": "[KeyToPath]",
                           "optional": S},
    "KeyToPath": {"key": S, "path": S, "mode": S},
    "EmptyDir": {"medium": S, "sizeLimit": S},
    # kubernetes-sigs/agent-sandbox, extensions.agents.x-k8s.io/v1beta1
    "SandboxTemplate": {"apiVersion": S, "kind": S, "metadata": "ObjectMeta",
                        "spec": "SandboxTemplateSpec"},
    "SandboxTemplateSpec": {"podTemplate": "SandboxPodTemplate",
                            "volumeClaimTemplates": S,
                            "networkPolicy": "SandboxNetworkPolicySpec"},
    "SandboxPodTemplate": {"metadata": "PodMetadata", "spec": "PodSpec"},
    "PodMetadata": {"labels": "{}", "annotations": "{}"},
    "SandboxNetworkPolicySpec": {"ingress": "[NetworkPolicyIngressRule]",
                                 "egress": "[NetworkPolicyEgressRule]"},
    "NetworkPolicyIngressRule": {"ports": "[NetworkPolicyPort]",
                                 "from": "[NetworkPolicyPeer]"},
    "NetworkPolicyEgressRule": {"ports": "[NetworkPolicyPort]",
                                "to": "[NetworkPolicyPeer]"},
    "NetworkPolicyPort": {"protocol": S, "port": S, "endPort": S},
    "NetworkPolicyPeer": {"ipBlock": "IPBlock", "namespaceSelector": S,
                          "podSelector": S},
    "IPBlock": {"cidr": S, "except": "[]"},
}


def check_fields(obj, typename: str, path: str = "") -> list[str]:
    """Return the list of unknown-field errors of obj against SCHEMA[typename]."""
    errors: list[str] = []
    if typename.startswith("["):
        inner = typename[1:-1]
        if not isinstance(obj, list):
            return [f"{path}: expected a list"]
        if inner:
            for i, item in enumerate(obj):
                errors += check_fields(item, inner, f"{path}[{i}]")
        return errors
    if typename == "{}":
        if not isinstance(obj, dict) or not all(
            isinstance(k, str) and isinstance(v, (str, int)) for k, v in obj.items()
        ):
            return [f"{path}: expected a string map"]
        return []
    fields = SCHEMA[typename]
    if not isinstance(obj, dict):
        return [f"{path}: expected a {typename} mapping"]
    for key, value in obj.items():
        if key not in fields:
            errors.append(f"{path}.{key}: not a field of {typename}")
        elif fields[key] is not None:
            errors += check_fields(value, fields[key], f"{path}.{key}")
    return errors


def load(name: str) -> list[dict]:
    with open(K8S / name, encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    assert docs, f"{name} has no documents"
    return docs


def only(name: str) -> dict:
    docs = load(name)
    assert len(docs) == 1, f"{name}: expected one document"
    return docs[0]


def execd_container(pod_spec: dict) -> dict:
    containers = pod_spec["containers"]
    assert len(containers) == 1
    return containers[0]


def check_pod_spec(spec: dict, where: str, port: int = PORT) -> None:
    assert spec.get("runtimeClassName") == RUNTIME_CLASS, where
    c = execd_container(spec)
    assert c["image"].startswith("execd"), where
    # Port 44772 (or the pod's own), named, and the probes target it.
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert port in ports.values(), where
    args = c.get("args", [])
    if "--port" in args:
        assert int(args[args.index("--port") + 1]) == port
    for probe in ("livenessProbe", "readinessProbe"):
        get = c[probe]["httpGet"]
        assert get["path"] == "/ping", (where, probe)
        target = get["port"]
        assert target == port or ports.get(target) == port, (where, probe, target)
    # Requests and limits for cpu and memory, requests <= limits.
    res = c["resources"]
    for kind in ("cpu", "memory"):
        assert kind in res["requests"] and kind in res["limits"], (where, kind)
        assert parse_quantity(res["requests"][kind]) <= parse_quantity(res["limits"][kind])
    # The token comes from a Secret, never a literal.
    for env in c.get("env", []):
        assert not (env["name"] == "EXECD_ACCESS_TOKEN" and "value" in env), where
    assert "--access-token" not in args, f"{where}: literal token on the command line"
    assert token_from_secret(spec, c), f"{where}: token not taken from a Secret"


def token_from_secret(spec: dict, c: dict) -> bool:
    for env in c.get("env", []):
        ref = env.get("valueFrom", {}).get("secretKeyRef")
        if env["name"] == "EXECD_ACCESS_TOKEN" and ref and ref.get("name") == "execd-token":
            return True
    args = c.get("args", [])
    if "--access-token-file" in args:
        token_path = args[args.index("--access-token-file") + 1]
        secret_volumes = {v["name"]: v["secret"] for v in spec.get("volumes", [])
                          if "secret" in v}
        for m in c.get("volumeMounts", []):
            if m["name"] in secret_volumes and token_path.startswith(m["mountPath"].rstrip("/") + "/"):
                assert secret_volumes[m["name"]]["secretName"] == "execd-token"
                assert m.get("readOnly") is True
                return True
    return False


def parse_quantity(q) -> float:
    s = str(q)
    suffixes = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
                "k": 1e3, "M": 1e6, "G": 1e9}
    for suf in sorted(suffixes, key=len, reverse=True):
        if s.endswith(suf):
            return float(s[: -len(suf)]) * suffixes[suf]
    return float(s)


# ---------------------------------------------------------------------------


def test_all_manifests_parse():
    names = sorted(p.name for p in K8S.glob("*.yaml"))
    assert {"pod.yaml", "sandbox-template.yaml"} <= set(names)
    for name in names:
        for doc in load(name):
            assert isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc, name


def test_pod_fields_and_contract():
    pod = only("pod.yaml")
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert check_fields(pod, "Pod") == []
    check_pod_spec(pod["spec"], "pod.yaml")
    # The kubelet's grace period must leave room for execd's drain.
    c = execd_container(pod["spec"])
    grace_ms = int(c["args"][c["args"].index("--graceful-shutdown-timeout") + 1])
    assert pod["spec"]["terminationGracePeriodSeconds"] * 1000 > grace_ms


def test_sandbox_template_fields_and_contract():
    t = only("sandbox-template.yaml")
    assert t["apiVersion"] == "extensions.agents.x-k8s.io/v1beta1"
    assert t["kind"] == "SandboxTemplate"
    assert check_fields(t, "SandboxTemplate") == []
    pt = t["spec"]["podTemplate"]
    check_pod_spec(pt["spec"], "sandbox-template.yaml")
    # The template's NetworkPolicy is default-deny: execd's port must be open.
    ingress_ports = [p.get("port") for rule in t["spec"]["networkPolicy"]["ingress"]
                     for p in rule.get("ports", [])]
    assert PORT in ingress_ports


def test_hostnetwork_pod_has_its_own_port_everywhere():
    pod = only("pod-hostnetwork.yaml")
    assert check_fields(pod, "Pod") == []
    spec = pod["spec"]
    assert spec["hostNetwork"] is True
    c = execd_container(spec)
    port = int(c["args"][c["args"].index("--port") + 1])
    assert port != PORT  # 44772 is left to pod.yaml's kind
    check_pod_spec(spec, "pod-hostnetwork.yaml", port)
    assert pod["metadata"]["name"] != only("pod.yaml")["metadata"]["name"]


def test_secret_example():
    s = only("secret.example.yaml")
    assert (s["apiVersion"], s["kind"]) == ("v1", "Secret")
    assert check_fields(s, "Secret") == []
    assert s["metadata"]["name"] == "execd-token"
    assert "token" in s.get("stringData", {}) or "token" in s.get("data", {})


def test_field_checker_catches_typos():
    pod = only("pod.yaml")
    bad = yaml.safe_load(yaml.safe_dump(pod))
    c = bad["spec"]["containers"][0]
    c["readinesProbe"] = c.pop("readinessProbe")
    bad["spec"]["runtimeClass"] = bad["spec"].pop("runtimeClassName")
    errors = check_fields(bad, "Pod")
    assert any("readinesProbe" in e for e in errors)
    assert any("runtimeClass" in e for e in errors)


def _k8s_models():
    try:
        import kubernetes.client as kc  # type: ignore
    except Exception:  # pragma: no cover - optional dependency
        return None
    return kc


def _check_against_model(kc, obj, type_str: str, path: str) -> list[str]:
    errors: list[str] = []
    if type_str.startswith("list["):
        for i, item in enumerate(obj or []):
            errors += _check_against_model(kc, item, type_str[5:-1], f"{path}[{i}]")
        return errors
    if not type_str.startswith("V1") or not isinstance(obj, dict):
        return errors
    model = getattr(kc, type_str, None)
    if model is None:
        return errors
    by_json = {v: k for k, v in model.attribute_map.items()}
    for key, value in obj.items():
        if key not in by_json:
            errors.append(f"{path}.{key}: not a field of {type_str}")
        else:
            errors += _check_against_model(kc, value, model.openapi_types[by_json[key]],
                                           f"{path}.{key}")
    return errors


def test_core_types_against_kubernetes_client_models():
    kc = _k8s_models()
    if kc is None:
        pytest.skip("kubernetes Python client not installed; built-in field tables used")
    pod = only("pod.yaml")
    assert _check_against_model(kc, pod, "V1Pod", "pod") == []
    t = only("sandbox-template.yaml")
    assert _check_against_model(kc, t["spec"]["podTemplate"]["spec"], "V1PodSpec",
                                "template.podTemplate.spec") == []
    for i, rule in enumerate(t["spec"]["networkPolicy"]["ingress"]):
        assert _check_against_model(kc, rule, "V1NetworkPolicyIngressRule", f"ingress[{i}]") == []
    for i, rule in enumerate(t["spec"]["networkPolicy"]["egress"]):
        assert _check_against_model(kc, rule, "V1NetworkPolicyEgressRule", f"egress[{i}]") == []
