"""The stand-ins of the platform's images, built from this machine's files (tests/cluster/images.py)
under the names the manifests pin, each saying first what it leaves out of the real image.

- ``pause_image``: the sandbox image, Kubernetes' own pause.c (k8s.io/kubernetes build/pause, from
  the module the kubelet is built from) compiled here.
- ``busybox_image``: the platform Jobs' image (cluster_facts/image_pins.PLATFORM_JOB_IMAGE, Alpine)
  from Debian's busybox-static (pinned and unpacked by `make debian-tools`, tools/debian_tools.py).
- ``python_image``: the gang watchdog's image (GANG_WATCHDOG_IMAGE, python:slim) from this
  machine's Python.
- ``node_check_image``: the node check's image (the cluster's training image) as the Python one,
  with stand-ins for the Neuron and EFA tools the node check runs.
- ``training_image``: the training image (the run's ``image``) as far as its pod script needs it:
  this machine's Python and GNU tools, the torch virtualenv of the runtime tests mounted by the test.
- ``tensorboard_image``: TensorBoard's image (the cluster's training image, the rendered
  Deployment's) as far as TensorBoard needs it: the Python one with TensorBoard and its closure,
  installed from requirements-tensorboard.lock (``tensorboard_packages``).
- ``etcd_image``: the teams' rendezvous etcd (ETCD_IMAGE) from etcd built at its release
  (tools/cluster-binaries/etcd).
- ``coredns_image``: the cluster DNS of EKS's coredns add-on (tests/cluster/cluster_dns.py) from
  CoreDNS built at its pin (tools/cluster-binaries/coredns).
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from cluster_facts.image_pins import ETCD_IMAGE, GANG_WATCHDOG_IMAGE, PLATFORM_JOB_IMAGE
from tests.cluster.images import Image, Layer, merge, shared_libraries
from tools import debian_tools
from tools.cluster_binaries import COMPONENTS, binary_path, cache_root, go_environment, required_version

__all__ = [
    "SANDBOX_IMAGE",
    "TRAINING_TOOLS",
    "busybox_image",
    "coredns_image",
    "etcd_image",
    "node_check_image",
    "pause_image",
    "python_image",
    "tensorboard_image",
    "tensorboard_packages",
    "training_image",
]

SANDBOX_IMAGE = "registry.k8s.io/pause:3.10.1"
"""containerd 2.2's default sandbox image (internal/cri/config DefaultSandboxImage), built here."""
REPO_ROOT = Path(__file__).resolve().parents[2]
_PASSWD = Path("/usr/share/base-passwd/passwd.master")
_GROUP = Path("/usr/share/base-passwd/group.master")


def _base() -> Layer:
    """What every Debian or Alpine image has: the base accounts (root .. nobody, as Debian's
    base-passwd ships them), /tmp and the usual empty directories."""
    layer = Layer()
    layer.files["etc/passwd"] = _PASSWD
    layer.files["etc/group"] = _GROUP
    layer.directories.update({"tmp": 0o1777, "proc": 0o755, "sys": 0o755, "dev": 0o755, "etc": 0o755})
    layer.contents["etc/hosts"] = (b"127.0.0.1 localhost\n", 0o644)
    return layer


def _busybox_layer() -> Layer:
    busybox = debian_tools.pinned_busybox()
    if not debian_tools.installed("busybox"):
        raise AssertionError(f"{busybox} is missing: run `make debian-tools` (Debian's busybox-static)")
    layer = Layer()
    layer.add_file(busybox, "bin/busybox")
    applets = subprocess.run([str(busybox), "--list-full"], capture_output=True, text=True, check=True).stdout
    for applet in applets.split():
        if applet != "bin/busybox":
            layer.symlinks[applet] = "/bin/busybox"
    return layer


@functools.cache
def busybox_image(name: str = PLATFORM_JOB_IMAGE) -> Image:
    """The stand-in under ``name`` (the manifests' reference: the pull-through cache's, on EKS)."""
    return Image(
        name=name,
        layer=merge(_base(), _busybox_layer()),
        cmd=["/bin/sh"],
        env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
        leaves_out=(
            "Alpine itself: musl, apk and its package database, /etc/os-release, ssl_client (this"
            " busybox's wget speaks HTTPS with its own TLS code) and the CA bundle; busybox is Debian's"
            " 1.35 build, not Alpine's 1.37. The platform scripts' applets (sh, wget, tar, mkfifo, tee,"
            " sha256sum, mkdir, chown, chmod, stat) are all there."
        ),
    )


@functools.cache
def python_image(name: str = GANG_WATCHDOG_IMAGE) -> Image:
    """The stand-in under ``name`` (the manifests' reference: the pull-through cache's, on EKS)."""
    python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    stdlib = Path(sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["stdlib"])
    layer = merge(_base(), _busybox_layer())
    layer.add_file(python, f"usr/bin/{python.name}")
    layer.symlinks["usr/bin/python3"] = python.name
    layer.symlinks["usr/bin/python"] = python.name
    layer.add_tree(
        stdlib,
        str(stdlib),
        skip=lambda p: (
            "__pycache__" in p.parts
            or p.name in ("test", "idlelib", "tkinter", "ensurepip")
            or any(
                part in ("test", "idlelib", "tkinter", "ensurepip", "site-packages", "dist-packages")
                for part in p.relative_to(stdlib).parts
            )
        ),
    )
    dynload = sorted(stdlib.glob("lib-dynload/*.so"))
    for path, source in shared_libraries([python, *dynload]).items():
        layer.files.setdefault(path, source.resolve())
    # The CA bundle python:slim carries (ca-certificates), for an HTTPS client.
    certificates = Path("/etc/ssl/certs/ca-certificates.crt")
    if certificates.is_file():
        layer.add_file(certificates, "etc/ssl/certs/ca-certificates.crt")
    return Image(
        name=name,
        layer=layer,
        cmd=["python3"],
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
        leaves_out=(
            f"Python {sys.version_info.major}.{sys.version_info.minor} of this machine (Debian's), not"
            " 3.12.12 from python.org; Debian trixie's userland (bash, dash, coreutils: busybox's"
            " applets stand in), pip, setuptools, the test suite, tkinter and idle. The programs that"
            " run on it (the gang watchdog, kube_api.py) use the standard library only."
        ),
    )


TRAINING_TOOLS = (
    "bash", "find", "xargs", "sort", "sha256sum", "flock", "pgrep", "grep", "sed", "cut", "head", "tail",
    "diff", "date", "stat", "mkdir", "touch", "cp", "mv", "rm", "dirname", "basename", "wc", "cat",
    "chmod", "sleep", "id", "env",
)  # fmt: skip
"""The programs cluster_programs/run_worker.sh runs, as the training image (Ubuntu) has them: GNU's
(``find -printf``, ``sha256sum --check --strict --quiet``, ``flock --nonblock``, ``pgrep -c`` are not
busybox's), from this machine (Debian's)."""
_NEURON_PARALLEL_COMPILE = 'STANDIN_PHASE=precompile exec "$@"\n'
"""The Neuron SDK's tool runs the training command to extract and compile its graphs; the stand-in
runs it once, in the stand-in worker's precompile phase (tests/runtime/harness.py does the same)."""


@functools.cache
def training_image(name: str, torch_venv: Path, mounted_at: str) -> Image:
    """The stand-in under ``name`` (the run's rendered image). ``python3`` on its PATH is
    ``torch_venv``'s, which the test mounts read-only at ``mounted_at`` (not in the image: below)."""
    python = python_image(GANG_WATCHDOG_IMAGE).layer
    layer = merge(python, Layer())
    tools = {tool: Path(found).resolve() for tool in TRAINING_TOOLS if (found := shutil.which(tool))}
    missing = sorted(set(TRAINING_TOOLS) - set(tools))
    if missing:
        raise AssertionError(f"this machine lacks {', '.join(missing)} for the training image's stand-in")
    for tool, path in tools.items():
        for directory in ("bin", "usr/bin", "sbin", "usr/sbin"):
            layer.symlinks.pop(f"{directory}/{tool}", None)
        layer.add_file(path, f"usr/bin/{tool}")
    layer.add_file(tools["bash"], "bin/bash")
    # The system libraries the tools and torch's own libraries load (libstdc++, libgcc_s...: the
    # wheels bundle the rest, which the mount brings).
    extensions = sorted(torch_venv.glob("lib/python3*/site-packages/torch/lib/*.so*"))
    for path, source in shared_libraries([*tools.values(), *extensions]).items():
        if not source.resolve().is_relative_to(torch_venv.resolve()):
            layer.files.setdefault(path, source.resolve())
    # The virtualenv's python3 is a link to the interpreter that made it (pyvenv.cfg's home): the
    # image's copy of the same interpreter stands at that path.
    interpreter = (torch_venv / "bin" / "python3").resolve()
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    if interpreter.name != version:
        raise AssertionError(f"{torch_venv} runs {interpreter.name}, the image's Python is {version}")
    layer.symlinks[str(interpreter).lstrip("/")] = f"/usr/bin/{version}"
    layer.contents["usr/local/bin/neuron_parallel_compile"] = (
        f"#!/bin/sh\n{_NEURON_PARALLEL_COMPILE}".encode(),
        0o755,
    )
    return Image(
        name=name,
        layer=layer,
        cmd=["/bin/bash"],
        env={
            "PATH": f"{mounted_at}/bin:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            # The agents' workers' lines reach the pod's log as they come (the runtime tests' setting).
            "PYTHONUNBUFFERED": "1",
        },
        leaves_out=(
            "everything Neuron (the SDK, neuronx-cc, torch-neuronx, torch-xla, the runtime and"
            " tools; neuron_parallel_compile is a stand-in that runs the command once), EFA's"
            " libfabric, Ubuntu 24.04 (Debian's GNU tools of this machine stand in, busybox for the"
            " rest) and Python 3.12 (this machine's 3.11). torch 2.9.0, python-etcd 0.4.5 and"
            " urllib3 come from .venv-torch (the runtime tests' virtualenv, the CUDA build: PyPI has no"
            " CPU-only wheel), mounted by the test, not packed into a layer: see"
            " tests/cluster/test_run_pods.py for the measured cost of packing it."
        ),
    )


TENSORBOARD_LOCK = REPO_ROOT / "requirements-tensorboard.lock"


def _python_paths() -> tuple[Path, Path]:
    """This machine's interpreter's standard library and site-packages directories, as the image's
    copy of the interpreter finds them (python_image puts the library at the same path)."""
    paths = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})
    return Path(paths["stdlib"]), Path(paths["purelib"])


def tensorboard_packages() -> Path:
    """A directory of TensorBoard and its closure as requirements-tensorboard.lock pins them,
    installed by pip with ``--require-hashes`` (a wheel whose sha256 is not the lock's is refused)
    for this machine's Python, once per machine: ``~/.cache/trainium-cluster/tensorboard-<key>/``,
    keyed by the lock's bytes and the Python version, whole or absent (renamed into place).
    Needs PyPI the first time (about 4 s, 13 wheels, 133 MB installed)."""
    digest = hashlib.sha256(TENSORBOARD_LOCK.read_bytes())
    digest.update(sys.version.encode())
    target = cache_root() / f"tensorboard-{digest.hexdigest()[:16]}"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tensorboard-", dir=target.parent) as temporary:
        site = Path(temporary) / "site-packages"
        installed = subprocess.run(
            [
                sys.executable, "-m", "pip", "install", "--quiet", "--require-hashes", "--no-deps",
                "--only-binary=:all:", "--no-compile", "--no-cache-dir", "--disable-pip-version-check",
                "--target", str(site), "-r", str(TENSORBOARD_LOCK),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )  # fmt: skip
        if installed.returncode != 0:
            raise AssertionError(
                f"pip could not install {TENSORBOARD_LOCK.name} (PyPI needed once per machine):"
                f" {installed.stderr.strip()[-2000:]}"
            )
        site.rename(target)
    return target


@functools.cache
def tensorboard_image(name: str) -> Image:
    """TensorBoard's image under ``name`` (the rendered Deployment's: the training image, whose
    TensorBoard k8s_charts/runs/tensorboard.py runs): the Python stand-in with the packages of
    ``tensorboard_packages`` in its interpreter's site-packages, so the Deployment's own command
    (``python3 -m tensorboard.main``) runs the real TensorBoard, its fast loader (the
    tensorboard-data-server binary) included. It carries the training image's name but not the
    training stand-in's contents (``training_image``): a node holds one of the two under that name
    (this one on a system node, where TensorBoard runs; the other on a Trainium node)."""
    base = python_image()
    packages = tensorboard_packages()
    _, site_packages = _python_paths()
    layer = merge(base.layer, Layer())
    # The console scripts pip wrote name this machine's virtualenv in their first line: the
    # Deployment runs the module, not them.
    layer.add_tree(packages, str(site_packages), skip=lambda p: p.relative_to(packages).parts[0] == "bin")
    # The system libraries the wheels' extensions and the data server load (libstdc++, libgcc_s,
    # libz ...: manylinux wheels bundle the rest, which the tree brings).
    binaries = [p for p in packages.rglob("*") if p.is_file() and (".so" in p.name or p.name == "server")]
    for path, source in shared_libraries(binaries).items():
        if not source.resolve().is_relative_to(packages.resolve()):
            layer.files.setdefault(path, source.resolve())
    versions = ", ".join(
        f"{p.name.removesuffix('.dist-info').replace('-', ' ', 1)}"
        for p in sorted(packages.glob("*.dist-info"))
    )
    return Image(
        name=name,
        layer=layer,
        cmd=base.cmd,
        env=base.env,
        leaves_out=(
            "everything of the training image but TensorBoard: the Neuron SDK, torch and the rest of"
            " its Python packages, EFA's libfabric, Ubuntu 24.04 (busybox's applets stand in) and"
            f" Python 3.12 (this machine's {sys.version_info.major}.{sys.version_info.minor}); and"
            " whatever TensorBoard plugins it has beyond TensorBoard's own. TensorBoard and its closure"
            f" are PyPI's wheels as requirements-tensorboard.lock pins them ({versions}), not"
            " necessarily the versions the training image installed."
        ),
    )


def _built(component: str, binary: str) -> Path:
    path = binary_path(component, binary)
    if not path.is_file():
        raise AssertionError(f"{path} is missing: run `make cluster-binaries` ({component})")
    return path


@functools.cache
def node_check_image(name: str) -> Image:
    """The node check's image under ``name`` (the rendered DaemonSet's: the training image): the
    Python stand-in plus the tools the check runs, as tests/cluster/test_node_check.py stands them
    in (tests/k8s_charts/checks/test_node_check.py ``TOOLS``), printing the recorded outputs of a
    healthy trn1.32xlarge (its samples), chosen by the image's environment."""
    from tests.k8s_charts.checks.test_node_check import SAMPLES, TOOLS  # noqa: PLC0415 (test data)

    base = python_image()
    layer = merge(base.layer, Layer())
    for tool, body in TOOLS.items():
        layer.contents[f"usr/local/bin/{tool}"] = (f"#!/bin/sh\n{body}\n".encode(), 0o755)
    samples = "opt/node-check-samples"
    layer.add_tree(SAMPLES, samples)
    layer.directories["var/node-check"] = 0o1777
    return Image(
        name=name,
        layer=layer,
        cmd=base.cmd,
        env={
            **base.env,
            "SAMPLES": f"/{samples}",
            "RECORD": "/var/node-check/record",
            "NEURON_LS": "neuron_ls_trn1.json",
            "NCCOM": "nccom_local_trn1.txt",
            "FI_INFO": "fi_info_trn1.txt",
            "PINGPONG": "pingpong_ok.txt",
        },
        leaves_out=(
            "the whole Neuron training image (Ubuntu, torch, torch-neuronx, the Neuron runtime and"
            " tools, libfabric, the AWS CLI): neuron-ls, nccom-test, fi_info, fi_pingpong and aws are"
            " shell scripts printing a healthy trn1.32xlarge's recorded outputs (tests/k8s_charts/"
            "checks/node_check_samples) and recording their calls; the node check's own program is"
            " the real one, from its ConfigMap, on this machine's Python."
        ),
    )


@functools.cache
def etcd_image(name: str = ETCD_IMAGE) -> Image:
    """The stand-in under ``name`` (the manifests' reference: the pull-through cache's, on EKS)."""
    version = required_version(COMPONENTS["etcd"], "go.etcd.io/etcd/server/v3")
    layer = _base()
    # go build names a main package ending in a major version (server/v3) by the element before it.
    layer.add_file(_built("etcd", "server"), "usr/local/bin/etcd")
    layer.directories["var/etcd"] = 0o700
    return Image(
        name=name,
        layer=layer,
        cmd=["/usr/local/bin/etcd"],
        env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        leaves_out=(
            f"etcd {version} built here from go.etcd.io/etcd/server/v3 (static, -trimpath; the release"
            " build also stamps its Git SHA); etcdctl and etcdutl. Like the real image"
            " (distroless-static), no shell."
        ),
    )


@functools.cache
def coredns_image(name: str) -> Image:
    """CoreDNS under ``name`` (tests/cluster/cluster_dns.py names it)."""
    layer = _base()
    layer.add_file(_built("coredns", "coredns"), "coredns")
    return Image(
        name=name,
        layer=layer,
        entrypoint=["/coredns"],
        env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        leaves_out=(
            "the CA bundle of the upstream image (distroless-static); CoreDNS itself is the same"
            " upstream main package, built here (static, -trimpath). The EKS add-on's image is"
            " Amazon's build of CoreDNS."
        ),
    )


@functools.cache
def pause_image() -> Image:
    binary = _pause_binary()
    layer = Layer()
    layer.add_file(binary, "pause")
    return Image(
        name=SANDBOX_IMAGE,
        layer=layer,
        entrypoint=["/pause"],
        user="65535:65535",
        leaves_out="nothing the kubelet uses: the same pause.c, built with this machine's gcc, static.",
    )


def _pause_binary() -> Path:
    version = required_version(COMPONENTS["kubelet"], "k8s.io/kubernetes")
    target = cache_root() / f"pause-{version}" / "pause"
    if target.is_file():
        return target
    found = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=COMPONENTS["kubelet"].module,
        env=go_environment(),
    )
    source = Path(json.loads(found.stdout)["Dir"]) / "build" / "pause" / "linux" / "pause.c"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as temporary:
        out = Path(temporary) / "pause"
        subprocess.run(
            ["gcc", "-Os", "-Wall", "-static", f"-DVERSION={version}", "-o", str(out), str(source)],
            check=True,
            capture_output=True,
        )
        shutil.move(out, target)
    return target
