"""Fixtures for make test-k8s: one cluster per session (tests/k8s/cluster.py).

tests/k8s/run.py builds the binaries and images, creates the network
namespace and runs this pytest inside it; the paths arrive in EXECD_K8S_*.
Figures measured go to EXECD_K8S_FIGURES (JSON lines) for run.py to print.
"""
from __future__ import annotations

import json
import os
import secrets
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from cluster import Cluster  # noqa: E402


def record(name: str, value, unit: str = "s"):
    path = os.environ.get("EXECD_K8S_FIGURES")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"figure": name, "value": value, "unit": unit}) + "\n")


def env_path(name: str) -> Path:
    v = os.environ.get(name)
    if not v:
        raise pytest.UsageError(f"{name} is not set: run make test-k8s (tests/k8s/run.py)")
    return Path(v)


@pytest.fixture(scope="session")
def cluster():
    state = env_path("EXECD_K8S_STATE")
    c = Cluster(state, env_path("EXECD_K8S_BIN"), os.environ.get("EXECD_K8S_NETNS", "execd-k8s"))
    images = sorted(env_path("EXECD_K8S_IMAGES").glob("*.tar"))
    try:
        c.up(images)
        c.start_agent_sandbox(env_path("EXECD_K8S_CRDS"))
        for k, v in c.figures.items():
            record(k, v)
        c.kubectl("apply", "-f", HERE / "manifests" / "runtimeclass-runc.yaml")
        yield c
    finally:
        c.down()


@pytest.fixture(scope="session")
def token(cluster):
    """The Secret of image/k8s/secret.example.yaml, with a fresh token."""
    import yaml
    t = secrets.token_hex(16)
    doc = yaml.safe_load((ROOT / "image/k8s/secret.example.yaml").read_text())
    doc["stringData"]["token"] = t
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    return t


@pytest.fixture(scope="session")
def kube(cluster):
    """The official Python client, for polling faster than kubectl can."""
    from kubernetes import client, config
    config.load_kube_config(str(cluster.admin_kubeconfig))
    return client


def wait_pod_ready(kube, name: str, namespace: str = "default", timeout: float = 120) -> dict:
    core = kube.CoreV1Api()
    deadline = time.monotonic() + timeout
    while True:
        try:
            pod = core.read_namespaced_pod(name, namespace)
            conds = pod.status.conditions or []
            if any(c.type == "Ready" and c.status == "True" for c in conds):
                return pod
        except kube.exceptions.ApiException as e:
            if e.status != 404:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"pod {name} not Ready after {timeout}s")
        time.sleep(0.05)
