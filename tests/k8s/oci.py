"""OCI image archives written by hand (no registry, no image builder), for
`ctr -n k8s.io images import`.

An archive is an OCI image layout in one tar: oci-layout, index.json (the
image's name in the io.containerd.image.name annotation, which ctr uses),
and blobs/sha256/ with the manifest, the config and uncompressed layers.

Images made here (tests/k8s/images.py builds them from the project's files):
  * pause: the kubelet's sandbox image, /pause built from the kubernetes
    module's pause.c;
  * execd: image/Dockerfile's runtime layout over a debootstrap minbase
    (execd static at /usr/local/bin/execd as PID 1 with --init,
    /opt/opensandbox/bootstrap.sh, /workspace);
  * execd-image: the lifecycle server's execd_image, as the Dockerfile's
    `--target execd-image` (FROM scratch: /execd, /bootstrap.sh, busybox).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path


class Layer:
    """An uncompressed tar layer being written to a temporary file."""

    def __init__(self):
        self.file = tempfile.NamedTemporaryFile(prefix="layer-", suffix=".tar", delete=False)
        self.tar = tarfile.open(fileobj=self.file, mode="w", format=tarfile.PAX_FORMAT)
        self.dirs: set[str] = set()

    def _parents(self, path: str):
        parts = path.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            self.dir("/".join(parts[:i]))

    def dir(self, path: str, mode: int = 0o755):
        path = path.strip("/")
        if not path or path in self.dirs:
            return
        self._parents(path)
        ti = tarfile.TarInfo(path)
        ti.type, ti.mode, ti.mtime = tarfile.DIRTYPE, mode, 0
        self.tar.addfile(ti)
        self.dirs.add(path)

    def file_bytes(self, path: str, data: bytes, mode: int = 0o644):
        self._parents(path)
        ti = tarfile.TarInfo(path.strip("/"))
        ti.size, ti.mode, ti.mtime = len(data), mode, 0
        self.tar.addfile(ti, io.BytesIO(data))

    def file_from(self, path: str, src: Path, mode: int = 0o755):
        self.file_bytes(path, Path(src).read_bytes(), mode)

    def symlink(self, path: str, target: str):
        self._parents(path)
        ti = tarfile.TarInfo(path.strip("/"))
        ti.type, ti.linkname, ti.mode, ti.mtime = tarfile.SYMTYPE, target, 0o777, 0
        self.tar.addfile(ti)

    def close(self) -> Path:
        self.tar.close()
        self.file.close()
        return Path(self.file.name)


def _sha256_file(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            n += len(chunk)
    return h.hexdigest(), n


def write_archive(out: Path, name: str | list[str], layers: list[Path], config: dict,
                  history: str = "execd tests/k8s"):
    """Writes the OCI layout tar `out` for image `name` (e.g. docker.io/library/execd:test),
    or for each of several names of the same image."""
    names = [name] if isinstance(name, str) else name
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as t:
        def add_bytes(arcname: str, data: bytes):
            ti = tarfile.TarInfo(arcname)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            t.addfile(ti, io.BytesIO(data))

        add_bytes("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        layer_descs, diff_ids = [], []
        for layer in layers:
            digest, size = _sha256_file(layer)
            t.add(str(layer), arcname=f"blobs/sha256/{digest}")
            layer_descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar",
                                "digest": f"sha256:{digest}", "size": size})
            diff_ids.append(f"sha256:{digest}")
        cfg = {"architecture": "amd64", "os": "linux", "config": config,
               "rootfs": {"type": "layers", "diff_ids": diff_ids},
               "history": [{"created_by": history} for _ in layers]}
        cfg_bytes = json.dumps(cfg, sort_keys=True).encode()
        cfg_digest = hashlib.sha256(cfg_bytes).hexdigest()
        add_bytes(f"blobs/sha256/{cfg_digest}", cfg_bytes)
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                               "digest": f"sha256:{cfg_digest}", "size": len(cfg_bytes)},
                    "layers": layer_descs}
        man_bytes = json.dumps(manifest, sort_keys=True).encode()
        man_digest = hashlib.sha256(man_bytes).hexdigest()
        add_bytes(f"blobs/sha256/{man_digest}", man_bytes)
        index = {"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": f"sha256:{man_digest}", "size": len(man_bytes),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": n,
                            "org.opencontainers.image.ref.name": n.rsplit(":", 1)[-1]}} for n in names]}
        add_bytes("index.json", json.dumps(index).encode())
    os.replace(tmp, out)


def busybox_layer(layer: Layer, busybox: Path, prefix: str = "bin"):
    """Static busybox at /<prefix>/busybox with a symlink per applet."""
    layer.file_from(f"{prefix}/busybox", busybox, 0o755)
    import subprocess
    applets = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout.split()
    for a in applets:
        if a != "busybox":
            layer.symlink(f"{prefix}/{a}", "busybox")


def copy_tar_as_layer(src: Path) -> Path:
    """A rootfs tarball used as it is (it is already an uncompressed layer)."""
    fd, path = tempfile.mkstemp(prefix="layer-", suffix=".tar")
    os.close(fd)
    shutil.copyfile(src, path)
    return Path(path)
