"""The team uid's passwd entry (cluster_facts/pod_user.py): rendered into every training pod (the
stack's runs and TorchX's), and the rendered init container's script run as that uid, its files
mounted read-only over /etc/passwd and /etc/group as the kubelet's subPath mounts do, and the user
looked up through them as the pod's programs do (getpwuid, getgrgid, getpass.getuser with no USER
or LOGNAME, ``id -un``). Without the files the same lookup fails.

Running as another uid and mounting over /etc need root: those tests are skipped otherwise, as
tests/k8s_charts/runs/test_dataset_staging.py's are.
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

from cluster_facts.kubernetes_names import POD_USER_ENVIRONMENT
from cluster_facts.pod_user import POD_USER_DIR, POD_USER_FILES, POD_USER_NAME, POD_USER_VOLUME
from config import load_config
from tests.conftest import DEFAULT_CONFIG
from tests.k8s_charts.resources import missing_resources
from tests.plans import shared_review_plan
from tests.torchx_trn.test_torchx_admitted_job import JOB, rendered

SYSTEM_PYTHON = "/usr/bin/python3"
needs_root = pytest.mark.skipif(
    os.geteuid() != 0
    or not all(shutil.which(tool) for tool in ("setpriv", "unshare", "mount"))
    or not os.access(SYSTEM_PYTHON, os.X_OK),
    reason="running as another uid and mounting over /etc need root, setpriv, unshare and a system python3",
)
LOOKUP = (
    "import getpass, grp, os, pwd; entry = pwd.getpwuid(os.getuid()); "
    "print(entry.pw_name, entry.pw_dir, grp.getgrgid(os.getgid()).gr_name, getpass.getuser())"
)


def run_pods() -> list[dict[str, Any]]:
    """The pod specs of the default configuration's runs."""
    plan = shared_review_plan(load_config(DEFAULT_CONFIG))
    return [
        task["template"]["spec"]
        for step in plan.manifest_sets()
        if step.name.startswith("run-")
        for job in step.manifests
        for task in job["spec"]["tasks"]
    ]


def torchx_pods() -> list[dict[str, Any]]:
    """A TorchX Job as the component admits it (tests/torchx_trn/test_torchx_admitted_job.py), its container
    with the image TorchX writes there."""
    job = rendered(JOB)
    for task in job["spec"]["tasks"]:
        for container in task["template"]["spec"]["containers"]:
            container["image"] = JOB.image
    admitted = JOB.admitted_job(job, priority_class=None)
    return [task["template"]["spec"] for task in admitted["spec"]["tasks"]]


@pytest.mark.parametrize("pods", [run_pods, torchx_pods], ids=["run", "torchx"])
def test_every_training_pod_writes_and_mounts_its_passwd_entry(pods: Any) -> None:
    found = pods()
    assert found
    for pod in found:
        [init] = [c for c in pod["initContainers"] if c["name"] == POD_USER_VOLUME]
        [trainer] = pod["containers"]
        # The pod's own image and uid; no privilege; requests and limits.
        assert init["image"] == trainer["image"]
        assert "runAsUser" not in init.get("securityContext", {})
        assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["runAsGroup"] >= 10000
        assert init["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        }
        assert missing_resources(init) == []
        assert init["volumeMounts"] == [{"name": POD_USER_VOLUME, "mountPath": POD_USER_DIR}]
        [volume] = [v for v in pod["volumes"] if v["name"] == POD_USER_VOLUME]
        assert "emptyDir" in volume
        mounts = [m for m in trainer["volumeMounts"] if m["name"] == POD_USER_VOLUME]
        assert mounts == [
            {"name": POD_USER_VOLUME, "mountPath": path, "subPath": file, "readOnly": True}
            for path, file in POD_USER_FILES.items()
        ]


def _as(uid: int, *command: str) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *command]


def _lookup(uid: int, files: Path | None) -> subprocess.CompletedProcess[str]:
    """The lookup as ``uid`` with no user in the environment; with ``files``, in a mount namespace of
    its own where they are bind-mounted read-only over /etc/passwd and /etc/group."""
    python = shlex.join(_as(uid, "env", "-i", "PATH=/usr/bin:/bin", SYSTEM_PYTHON, "-c", LOOKUP))
    lookup = f"{python} && {shlex.join(_as(uid, 'id', '-un'))}"
    mounts = (
        [
            f"mount --bind {files / file} {path} && mount -o remount,bind,ro {path}"
            for path, file in POD_USER_FILES.items()
        ]
        if files is not None
        else []
    )
    script = " && ".join([*mounts, lookup])
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def empty_dir() -> Iterator[Path]:
    """A directory another uid can reach (pytest's own temporary directories are root's alone)."""
    parent = Path(tempfile.mkdtemp(prefix="pod-user-"))
    parent.chmod(0o755)
    try:
        yield parent / POD_USER_VOLUME
    finally:
        shutil.rmtree(parent)


def _write_files(uid: int, directory: Path) -> subprocess.CompletedProcess[str]:
    """The rendered init container's command, as ``uid``, writing into ``directory`` (its emptyDir)."""
    [pod] = run_pods()[:1]
    [init] = [c for c in pod["initContainers"] if c["name"] == POD_USER_VOLUME]
    command = [directory.as_posix() if part == POD_USER_DIR else part for part in init["command"]]
    directory.mkdir()
    os.chown(directory, uid, uid)
    return subprocess.run(_as(uid, *command), capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.process
@needs_root
def test_the_team_uid_is_found_through_the_pods_files_and_not_without_them(empty_dir: Path) -> None:
    uid = run_pods()[0]["securityContext"]["runAsUser"]
    without = _lookup(uid, None)
    assert without.returncode != 0
    assert "KeyError" in without.stderr and "getpwuid(): uid not found" in without.stderr, without.stderr

    written = _write_files(uid, empty_dir)
    assert written.returncode == 0, written.stderr
    files = empty_dir
    image_passwd = Path("/etc/passwd").read_text()
    # The image's entries stay, the team's is added once.
    assert (files / "passwd").read_text().startswith(image_passwd)
    assert (files / "passwd").read_text().count(f":{uid}:{uid}:") == 1

    found = _lookup(uid, files)
    assert found.returncode == 0, found.stderr
    home = POD_USER_ENVIRONMENT["HOME"]
    assert found.stdout.split() == [POD_USER_NAME, home, POD_USER_NAME, POD_USER_NAME, POD_USER_NAME]


@pytest.mark.process
@needs_root
def test_a_uid_the_image_knows_keeps_its_own_entry(empty_dir: Path) -> None:
    nobody = 65534  # in every Debian and Ubuntu image's passwd and group
    written = _write_files(nobody, empty_dir)
    assert written.returncode == 0, written.stderr
    files = empty_dir
    assert (files / "passwd").read_text() == Path("/etc/passwd").read_text()
    assert (files / "group").read_text() == Path("/etc/group").read_text()
