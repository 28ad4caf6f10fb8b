"""Shared helpers of the docker-based image tests (test_image.py, test_server.py).

A private dockerd (no bridge, no iptables, own data/exec roots and socket,
stopped by PID), a debootstrap'ed Debian bookworm base imported as
debian:bookworm (and -slim), and `docker build` with the classic builder.
The session fixtures that use them are in conftest.py, so every module shares
one engine and one base image.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MANDATORY = os.environ.get("EXECD_IMAGE_TEST", "") not in ("", "0", "no", "false")
CACHE = Path(os.environ.get("EXECD_TEST_CACHE", "/var/cache/execd-test"))
MIRROR = os.environ.get("EXECD_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY_MIRROR = os.environ.get(
    "EXECD_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
BASE_TAGS = ("debian:bookworm", "debian:bookworm-slim")
os.environ["PATH"] = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
TIMINGS: dict[str, float] = {}
NOTES: list[str] = []     # other measurements, printed after the timings


def unavailable(reason: str):
    if MANDATORY:
        pytest.fail(f"image test cannot run: {reason}", pytrace=False)
    pytest.skip(f"image test skipped: {reason} (set EXECD_IMAGE_TEST=1 to make this an error)")


def sh(cmd, *, timeout=600, check=True, env=None, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, **kw)
    if check and r.returncode != 0:
        raise AssertionError(
            f"command failed ({r.returncode}): {' '.join(map(str, cmd))}\n"
            f"stdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-4000:]}")
    return r


# ---------------------------------------------------------------------------
# docker engine
# ---------------------------------------------------------------------------

def ensure_tools() -> None:
    if os.geteuid() != 0:
        unavailable("needs root (dockerd, debootstrap)")
    need = ("dockerd", "containerd", "runc", "debootstrap")
    missing = [t for t in need if not shutil.which(t)]
    if not missing and docker_client():
        return
    if not shutil.which("apt-get"):
        unavailable(f"{', '.join(missing) or 'docker'} missing and no apt-get to install them")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", "docker.io", "debootstrap"]
    r = sh(cmd, check=False, env=env, timeout=900)
    if r.returncode != 0:
        sh(["apt-get", "update"], check=False, env=env, timeout=600)
        r = sh(cmd, check=False, env=env, timeout=900)
    missing = [t for t in need if not shutil.which(t)]
    if r.returncode != 0 or missing or not docker_client():
        unavailable(f"could not install docker.io/debootstrap: {r.stderr.strip()[-500:]}")


def docker_client() -> str | None:
    # Prefer the client packaged with the engine (same API version).
    if os.path.exists("/usr/bin/docker"):
        return "/usr/bin/docker"
    return shutil.which("docker")


class Dockerd:
    """A private docker engine, started and stopped by this test."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.exec_root = Path(tempfile.mkdtemp(prefix="execd-dk-", dir="/tmp"))
        self.sock = self.exec_root / "docker.sock"
        self.log_path = self.exec_root / "dockerd.log"
        self.env = dict(os.environ, DOCKER_HOST=f"unix://{self.sock}", DOCKER_BUILDKIT="0")
        self.env.pop("DOCKER_CONTEXT", None)
        self.client = docker_client()

    def start(self, data_root: Path) -> bool:
        data_root.mkdir(parents=True, exist_ok=True)
        cmd = ["dockerd", "--bridge=none", "--iptables=false", "--ip-forward=false",
               "--ip-masq=false", "--data-root", str(data_root),
               "--exec-root", str(self.exec_root / "exec"), "-H", f"unix://{self.sock}",
               "--pidfile", str(self.exec_root / "dockerd.pid")]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if self.sock.exists():
                r = self.run("version", "--format", "{{.Server.Version}}", check=False, timeout=10)
                if r.returncode == 0:
                    return True
            time.sleep(0.3)
        self.stop()
        return False

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def run(self, *args, check=True, timeout=600, **kw) -> subprocess.CompletedProcess:
        return sh([self.client, *map(str, args)], check=check, timeout=timeout, env=self.env, **kw)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            ids = self.run("ps", "-aq", "--filter", "label=execd-test", check=False).stdout.split()
            if ids:
                self.run("rm", "-f", *ids, check=False, timeout=60)
            self.proc.send_signal(signal.SIGTERM)        # by PID, never by name
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None
        # dockerd 20.10 leaves its netns bind mount behind; unmount whatever
        # is still mounted below our exec root so it can be removed.
        try:
            with open("/proc/self/mounts") as f:
                mounts = [line.split()[1] for line in f]
        except OSError:
            mounts = []
        for m in sorted((m for m in mounts if m.startswith(str(self.exec_root) + "/")),
                        reverse=True):
            sh(["umount", "-l", m], check=False, timeout=30)


# ---------------------------------------------------------------------------
# base image
# ---------------------------------------------------------------------------

DEBIAN_SOURCES = f"""Types: deb
URIs: {MIRROR}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: {SECURITY_MIRROR}
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def base_rootfs_tar() -> Path:
    tar = CACHE / "bookworm-minbase.tar"
    if tar.exists() and tar.stat().st_size > 0:
        return tar
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="debootstrap-", dir=str(CACHE)))
    try:
        rootfs = tmp / "rootfs"
        t0 = time.monotonic()
        r = sh(["debootstrap", "--variant=minbase", "bookworm", str(rootfs), MIRROR],
               check=False, timeout=1800)
        if r.returncode != 0:
            unavailable(f"debootstrap failed: {r.stdout[-1500:]}{r.stderr[-1500:]}")
        TIMINGS["debootstrap"] = time.monotonic() - t0
        # Look like the official image: deb822 sources incl. updates and
        # security, no package lists or downloaded .debs.
        (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
        (rootfs / "etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
        (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(DEBIAN_SOURCES)
        for d in ("var/lib/apt/lists", "var/cache/apt/archives"):
            for p in (rootfs / d).glob("*"):
                if p.is_file():
                    p.unlink()
        sh(["tar", "-C", str(rootfs), "-cf", str(tmp / "rootfs.tar"), "."], timeout=600)
        os.replace(tmp / "rootfs.tar", tar)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tar


def build_args() -> dict[str, str]:
    """--build-arg values for image/Dockerfile (JOBS from the environment)."""
    jobs = os.environ.get("JOBS", "").strip()
    args = {"JOBS": jobs} if jobs.isdigit() else {}
    # pip in the bash-kernel stage trusts what this machine's pip trusts: the
    # CAs added locally (a TLS-intercepting egress proxy's, for one) and the
    # index it is pointed at. Certificates are public; the stage that uses
    # them is not part of any image.
    extra = sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt"))
    pem = "".join(p.read_text() for p in extra if p.is_file())
    if pem.strip():
        args["EXTRA_CA_PEM"] = pem
    if os.environ.get("PIP_INDEX_URL"):
        args["PIP_INDEX_URL"] = os.environ["PIP_INDEX_URL"]
    return args


def docker_build(dockerd, context: Path, tag: str, dockerfile: Path | None = None,
                 timeout: int = 3600, target: str | None = None,
                 args_: dict[str, str] | None = None) -> None:
    args = ["build", "--network", "host", "-t", tag, "--label", "execd-test=1"]
    if dockerfile:
        args += ["-f", str(dockerfile)]
    if target:
        args += ["--target", target]
    for k, v in (args_ or {}).items():
        args += ["--build-arg", f"{k}={v}"]
    log = Path(tempfile.mkstemp(prefix="docker-build-", suffix=".log")[1])
    with open(log, "w") as out:
        r = subprocess.run([dockerd.client, *args, str(context)], env=dockerd.env,
                           stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    if r.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-80:])
        pytest.fail(f"docker build of {tag} failed (full log {log}):\n{tail}", pytrace=False)
    log.unlink()


BUILDER_TAG = "execd-test-builder:latest"


def build_execd_target(dockerd, context: Path, tag: str, target: str | None = None) -> None:
    """Build image/Dockerfile (TARGET, default the last stage) as TAG.

    The builder stage is tagged too: with the classic builder its layers are
    otherwise dangling once the build is done and the `image prune` at the end
    of the session would throw away the compiled execd, so every run would
    compile it again."""
    dockerfile = context / "image" / "Dockerfile"
    docker_build(dockerd, context, BUILDER_TAG, dockerfile, target="builder", args_=build_args())
    docker_build(dockerd, context, tag, dockerfile, target=target, args_=build_args())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
