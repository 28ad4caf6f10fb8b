"""Builds the OCI archives the test cluster imports (see oci.py):

  tests/k8s/images.py OUTDIR K8S_BIN

OUTDIR/pause.tar, OUTDIR/execd.tar, OUTDIR/execd-image.tar. The execd binary
is build/execd-static (make static); busybox comes from Debian's
busybox-static package; the base of the execd image is the debootstrap
minbase that the image tests cache (tests/image/dockerenv.py).
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "image"))

import oci  # noqa: E402

PAUSE = "docker.io/execd-test/pause:3.10"
EXECD = "docker.io/library/execd:latest"        # the name image/k8s's manifests use
# The same image under a tag that is not :latest: a container without an
# imagePullPolicy (the lifecycle server sets none) would otherwise be
# pulled Always, from a registry that does not exist here.
EXECD_LOCAL = "docker.io/execd-test/execd:local"
EXECD_IMAGE = "docker.io/execd-test/execd-image:local"
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def busybox_static() -> Path:
    """Debian's static busybox, extracted into a cache (the VM guest uses the same package)."""
    cache = Path.home() / ".cache/execd/k8s/busybox"
    bb = cache / "bin/busybox"
    if not bb.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as d:
            subprocess.run(["apt-get", "download", "-q", "busybox-static"], cwd=d, check=True,
                           capture_output=True)
            deb = next(Path(d).glob("*.deb"))
            subprocess.run(["dpkg-deb", "-x", str(deb), str(cache)], check=True)
    return bb


def build(out: Path, k8s_bin: Path):
    static = ROOT / "build" / "execd-static"
    bootstrap = ROOT / "image" / "bootstrap.sh"
    healthcheck = ROOT / "image" / "healthcheck.sh"

    # The pause image: one static binary.
    layer = oci.Layer()
    layer.file_from("pause", k8s_bin / "pause", 0o755)
    oci.write_archive(out / "pause.tar", PAUSE, [layer.close()],
                      {"Entrypoint": ["/pause"], "User": "65535:65535"})

    # The sandbox image: Dockerfile's runtime stage, over debootstrap minbase.
    import dockerenv
    base = oci.copy_tar_as_layer(dockerenv.base_rootfs_tar())
    layer = oci.Layer()
    layer.file_from("usr/local/bin/execd", static, 0o755)
    layer.file_from("usr/local/bin/execd-healthcheck", healthcheck, 0o755)
    layer.file_from("opt/opensandbox/bootstrap.sh", bootstrap, 0o755)
    layer.symlink("opt/opensandbox/execd", "/usr/local/bin/execd")
    layer.dir("workspace")
    layer.dir("var/lib/execd", 0o700)
    oci.write_archive(out / "execd.tar", [EXECD, EXECD_LOCAL], [base, layer.close()],
                      {"Entrypoint": ["/usr/local/bin/execd", "--init"],
                       "Cmd": ["--host", "0.0.0.0", "--port", "44772", "--state-dir", "/var/lib/execd"],
                       "Env": [PATH], "WorkingDir": "/workspace",
                       "ExposedPorts": {"44772/tcp": {}}})
    base.unlink()

    # The lifecycle server's execd_image (Dockerfile --target execd-image).
    layer = oci.Layer()
    layer.file_from("execd", static, 0o755)
    layer.file_from("bootstrap.sh", bootstrap, 0o755)
    oci.busybox_layer(layer, busybox_static())
    layer.dir("tmp", 0o1777)
    oci.write_archive(out / "execd-image.tar", EXECD_IMAGE, [layer.close()],
                      {"Cmd": ["tail", "-f", "/dev/null"], "Env": ["PATH=/bin"], "WorkingDir": "/"})


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]))
