"""The fabric check's worker serves mpirun's SSH sessions with the capabilities its container gets,
and with none fewer (k8s_charts/checks/fabric_check.py, ``SSHD_CAPABILITIES``).

The rendered worker command (fabric_check_worker.sh: ``ssh-keygen -A``, then ``sshd -D`` with the
pod's variables passed on) runs as root with exactly the container's capability set and
``no_new_privs`` (``allowPrivilegeEscalation: false``), in mount, network and PID namespaces of its
own: /etc/ssh, /etc/pam.d, /etc/passwd, /root and /run are private copies there, as the image's own
are in a pod, and /root/.ssh holds the job's key as Volcano's ssh plugin mounts it. The launcher's
client (no capability at all, as its container) logs in as root and runs a command without a
terminal, as mpirun does; the session sees the pod's FI_PROVIDER. Each capability the worker adds,
left out in turn, breaks that.

Needs root (setpriv, unshare, mounts) and an OpenSSH server: the one `make debian-tools` unpacks
into .tools/openssh (a prerequisite of `make test`), the system's, or an unpacked openssh-server
package whose root ``SSHD_ROOT`` names (usr/sbin/sshd, etc/pam.d/sshd, usr/share/openssh/sshd_config,
and usr/lib/<arch> for libraries the system lacks). Skipped without them, saying which.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.instance_catalog import CATALOG
from k8s_charts.checks.fabric_check import SSHD_CAPABILITIES, FabricCheckChart
from tests.conftest import REPO_ROOT
from tests.k8s_charts.manifests import only, synth

# The OpenSSH server `make debian-tools` unpacks (tools/debian_tools.py), else the system's.
_UNPACKED = REPO_ROOT / ".tools" / "openssh"
SSHD_ROOT = Path(os.environ.get("SSHD_ROOT") or (_UNPACKED if (_UNPACKED / ".installed").is_file() else "/"))
SSHD = SSHD_ROOT / "usr/sbin/sshd"
PAM = SSHD_ROOT / "etc/pam.d/sshd"
CONFIG = next(
    (
        p
        for p in (SSHD_ROOT / "etc/ssh/sshd_config", SSHD_ROOT / "usr/share/openssh/sshd_config")
        if p.is_file()
    ),
    None,
)
TOOLS = ("setpriv", "unshare", "mount", "ip", "ssh", "ssh-keygen")
pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(
        os.geteuid() != 0
        or not all(shutil.which(tool) for tool in TOOLS)
        or not (SSHD.is_file() and PAM.is_file() and CONFIG is not None),
        reason=f"needs root, {', '.join(TOOLS)} and an OpenSSH server (the system's, or SSHD_ROOT)",
    ),
]


def containers() -> dict[str, dict[str, Any]]:
    manifests = synth(
        lambda app: FabricCheckChart(
            app,
            "fabric",
            instance=CATALOG["trn1.32xlarge"],
            node_group="trn1-32xl",
            nodes=2,
            image="public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.1-ubuntu24.04",
            queue="test",
            namespace="training",
            threshold=0.25,
        )
    )
    tasks = only(manifests, "Job")["spec"]["tasks"]
    return {task["name"]: task["template"]["spec"]["containers"][0] for task in tasks}


def bounding_set(container: dict[str, Any]) -> str:
    """setpriv's --bounding-set for the container's capabilities (drop ALL, then add)."""
    capabilities = container["securityContext"]["capabilities"]
    assert capabilities["drop"] == ["ALL"]
    return ",".join(["-all", *(f"+{name.lower()}" for name in capabilities.get("add", []))])


@pytest.fixture
def pod_files() -> Iterator[Path]:
    """The private copies the namespace mounts, and the job's key pair."""
    directory = Path(tempfile.mkdtemp(prefix="fabric-ssh-"))
    try:
        etc_ssh = directory / "etc-ssh"
        etc_ssh.mkdir()
        shutil.copy(CONFIG or "", etc_ssh / "sshd_config")
        shutil.copytree("/etc/pam.d", directory / "pam.d")
        shutil.copy(PAM, directory / "pam.d" / "sshd")
        passwd = Path("/etc/passwd").read_text()
        if not any(line.startswith("sshd:") for line in passwd.splitlines()):
            passwd += "sshd:x:100:65534::/run/sshd:/usr/sbin/nologin\n"  # the package makes it
        (directory / "passwd").write_text(passwd)
        home = directory / "root" / ".ssh"
        home.mkdir(parents=True)
        os.chmod(directory / "root", 0o700)
        os.chmod(home, 0o700)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(home / "id_ed25519")], check=True
        )
        shutil.copy(home / "id_ed25519.pub", home / "authorized_keys")
        yield directory
    finally:
        shutil.rmtree(directory)


def session(
    files: Path, worker: dict[str, Any], capabilities: str, launcher: str
) -> subprocess.CompletedProcess[str]:
    """The worker's command with ``capabilities``, then one session from the launcher's client."""
    libraries = ":".join(str(p) for p in (SSHD_ROOT / "usr/lib").glob("*-linux-gnu"))
    environment = " ".join(shlex.quote(f"{e['name']}={e['value']}") for e in worker["env"] if "value" in e)
    command = shlex.join(
        [
            "setpriv",
            "--no-new-privs",
            "--bounding-set",
            capabilities,
            "--inh-caps",
            "-all",
            *worker["command"],
        ]
    )
    client = shlex.join(
        [
            "setpriv", "--no-new-privs", "--bounding-set", launcher, "--inh-caps", "-all",
            "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "root@127.0.0.1", "echo session-ok uid=$(id -u) provider=$FI_PROVIDER",
        ]
    )  # fmt: skip
    script = f"""
set -u
ip link set lo up
mount -t tmpfs tmpfs /run
mount --bind {files}/etc-ssh /etc/ssh
mount --bind {files}/pam.d /etc/pam.d
mount --bind {files}/passwd /etc/passwd
mount --bind {files}/root /root
export PATH={SSHD_ROOT}/usr/sbin:/usr/sbin:/usr/bin:/sbin:/bin LD_LIBRARY_PATH={libraries}
env {environment} {command} > {files}/sshd.log 2>&1 &
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/22) 2>/dev/null && break; sleep 0.1; done
timeout 30 {client}
"""
    return subprocess.run(
        ["unshare", "--mount", "--net", "--pid", "--fork", "--propagation", "private", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_the_worker_serves_mpiruns_sessions_with_its_capabilities(pod_files: Path) -> None:
    rendered = containers()
    worker, launcher = rendered["worker"], rendered["launcher"]
    assert launcher["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    result = session(pod_files, worker, bounding_set(worker), bounding_set(launcher))
    log = (pod_files / "sshd.log").read_text()
    assert "session-ok uid=0 provider=efa" in result.stdout, (result.stdout, result.stderr, log)


@pytest.mark.parametrize("left_out", SSHD_CAPABILITIES["add"])
def test_each_capability_the_worker_adds_is_needed(pod_files: Path, left_out: str) -> None:
    worker = containers()["worker"]
    fewer = ",".join(part for part in bounding_set(worker).split(",") if part != f"+{left_out.lower()}")
    result = session(pod_files, worker, fewer, "-all")
    log = (pod_files / "sshd.log").read_text()
    assert "session-ok" not in result.stdout, (left_out, result.stdout, log)
    assert "Operation not permitted" in log or "Permission denied" in log, (left_out, log)
