"""Fixtures for the micro-VM tests (make test-vm).

The guest (vmlinuz + initramfs.gz) is built by tests/vm/build-guest.sh into
EXECD_VM_GUEST (default build/vm). `vm_factory` boots VMs in a temporary
directory and kills whatever is left of them at teardown; `vm` is one VM
shared by a module. Figures (boot time and the like) are appended to
EXECD_VM_FIGURES as JSON lines, for tests/vm/run.py to report.
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

from qemu import Vm  # noqa: E402

GUEST = Path(os.environ.get("EXECD_VM_GUEST") or ROOT / "build" / "vm")


def record(name: str, value, unit: str = "s"):
    path = os.environ.get("EXECD_VM_FIGURES")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"figure": name, "value": value, "unit": unit, "at": time.time()}) + "\n")


def pytest_configure(config):
    for f in ("vmlinuz", "initramfs.gz"):
        if not (GUEST / f).exists():
            raise pytest.UsageError(f"no guest at {GUEST} (run tests/vm/build-guest.sh build/execd-static {GUEST})")


class Factory:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.vms: list[Vm] = []

    def __call__(self, name="vm", token=None, boot=True, **kw) -> Vm:
        vm = Vm(GUEST, self.workdir, token or secrets.token_hex(16), name=name, **kw)
        self.vms.append(vm)
        vm.start()
        if boot and not kw.get("incoming"):
            record("boot_to_ping", round(vm.wait_ping(), 2))
        return vm

    def close(self):
        for vm in self.vms:
            vm.kill()


@pytest.fixture
def vm_factory(tmp_path):
    f = Factory(tmp_path)
    yield f
    f.close()


@pytest.fixture(scope="module")
def vm(tmp_path_factory):
    f = Factory(tmp_path_factory.mktemp("vm"))
    yield f()
    f.close()
