"""DatasetStagingChart: one Job per data set version, and its script run against a stand-in wget."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_names import PLATFORM_PRIORITY_CLASS, PLATFORM_UID
from k8s_charts.runs.dataset_staging import (
    DEFAULT_IMAGE,
    STAGING_ATTEMPTS,
    Dataset,
    DatasetStagingChart,
    RemoteFile,
    staging_job_name,
)
from tests.k8s_charts.expansion import container_environment, expanded_command
from tests.k8s_charts.manifests import Manifest, only, pod_spec, synth
from tests.k8s_validation import assert_valid
from tests.netpol import Cluster, Pod
from tools import debian_tools

ARCHIVE = "https://example.com/data/corpus.tar"
SCRIPT_TEXT = b"print('train')\n"
DATASET = Dataset(
    name="corpus",
    archive_url=ARCHIVE,
    archive_sha256=None,
    files=(
        RemoteFile(
            url="https://example.com/code/train.py",
            sha256=hashlib.sha256(SCRIPT_TEXT).hexdigest(),
            name="train.py",
        ),
    ),
)


ROOT_ZONES = ("us-west-2a",)


def staging(dataset: Dataset = DATASET, **props: Any) -> list[Manifest]:
    props = {
        "namespace": "training",
        "claim_name": "fsx-abc123",
        "root_zones": ROOT_ZONES,
        "vpc_cidr": "10.0.0.0/16",
        **props,
    }
    manifests = synth(lambda app: DatasetStagingChart(app, "data", dataset=dataset, **props))
    assert_valid(manifests)
    return manifests


def container(job: Manifest) -> dict[str, Any]:
    [only_container] = pod_spec(job)["containers"]
    return only_container


# --- The Job --------------------------------------------------------------------------------------


def test_a_data_set_version_is_one_job_named_after_its_identity() -> None:
    job = only(staging(), "Job")
    assert job["apiVersion"] == "batch/v1"
    assert re.fullmatch(r"stage-corpus-[0-9a-f]{8}", job["metadata"]["name"])
    assert job["metadata"]["name"] == staging_job_name(
        DATASET, namespace="training", claim_name="fsx-abc123", root_zones=ROOT_ZONES
    )
    assert DATASET.directory == f"/datasets/corpus/{DATASET.identity}"
    assert DATASET.marker == f"{DATASET.directory}.staged"


def test_the_job_mounts_only_the_data_sets_at_the_path_runs_see_them() -> None:
    """The file system's /datasets, by sub-path, at /datasets: what a team's pods mount read-only
    there (k8s_charts/addons/fsx_storage.py), and no team's directory."""
    job = only(staging(), "Job")
    assert container(job)["volumeMounts"] == [
        {"mountPath": "/datasets", "name": "data", "subPath": "datasets"}
    ]
    [volume] = pod_spec(job)["volumes"]
    assert volume == {"name": "data", "persistentVolumeClaim": {"claimName": "fsx-abc123"}}


@pytest.mark.parametrize(
    "change",
    [
        {"archive_url": ARCHIVE.replace("corpus", "corpus2")},
        {"archive_sha256": "c" * 64},
        {"files": ()},
        {"files": (RemoteFile(url="https://example.com/code/train.py", sha256="d" * 64, name="train.py"),)},
    ],
)
def test_a_changed_data_set_is_a_new_version_in_a_new_directory(change: dict[str, Any]) -> None:
    changed = dataclasses.replace(DATASET, **change)
    assert changed.identity != DATASET.identity
    assert changed.directory != DATASET.directory
    assert only(staging(changed), "Job")["metadata"]["name"] != only(staging(), "Job")["metadata"]["name"]


def test_a_replaced_file_system_is_a_new_staging_job() -> None:
    # The pod template names the claim, and a Job's template is immutable.
    assert (
        only(staging(claim_name="fsx-def456"), "Job")["metadata"]["name"]
        != only(staging(), "Job")["metadata"]["name"]
    )


def test_the_job_retries_a_few_times_and_is_bounded_in_time() -> None:
    spec = only(staging(), "Job")["spec"]
    assert spec["backoffLimit"] == STAGING_ATTEMPTS - 1
    assert spec["activeDeadlineSeconds"] == 6 * 3600
    assert "ttlSecondsAfterFinished" not in spec  # the finished Job stays as the record


def test_the_pod_runs_locked_down_as_the_platforms_uid_never_root_with_no_token() -> None:
    job = only(staging(), "Job")
    spec = pod_spec(job)
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == {
        "runAsGroup": PLATFORM_UID,
        "runAsNonRoot": True,
        "runAsUser": PLATFORM_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["priorityClassName"] == PLATFORM_PRIORITY_CLASS
    assert container(job)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    assert container(job)["image"] == DEFAULT_IMAGE


def test_nothing_may_connect_to_the_staging_pod_and_it_reaches_only_dns_and_https_outside() -> None:
    manifests = staging()
    job = only(manifests, "Job")
    policies = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "NetworkPolicy"}
    ingress, egress = policies[job["metadata"]["name"]], policies[job["metadata"]["name"] + "-egress"]
    assert ingress["spec"]["policyTypes"] == ["Ingress"] and "ingress" not in ingress["spec"]
    assert egress["spec"]["policyTypes"] == ["Egress"]
    pod = Pod("training", job["spec"]["template"]["metadata"]["labels"], "10.0.1.22", "stage")
    dns = Pod("kube-system", {"k8s-app": "kube-dns"}, "10.0.2.2", "coredns")
    cluster = Cluster(manifests, [pod, dns])
    assert cluster.may_connect(pod, dns, 53, "UDP") and cluster.may_connect(pod, dns, 53, "TCP")
    assert cluster.may_connect_to_ip(pod, "203.0.113.10", 443)
    assert not cluster.may_connect_to_ip(pod, "203.0.113.10", 80)
    assert not cluster.may_connect_to_ip(pod, "169.254.169.254", 80)
    assert not cluster.may_connect_to_ip(pod, "169.254.169.254", 443)
    assert not cluster.may_connect_to_ip(pod, "10.0.3.4", 443)  # the VPC: nodes, pods, the API endpoint
    assert not cluster.may_connect_to_ip(pod, "172.20.0.1", 443)  # the kubernetes Service


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"archive_url": "http://example.com/a.tar"}, "not an https"),
        ({"archive_sha256": "abc"}, "not a SHA-256"),
        ({"archive_url": None, "files": ()}, "neither an archive nor files"),
        ({"files": (RemoteFile(url="https://e.com/a", sha256="a" * 64, name="../a"),)}, "plain names"),
    ],
)
def test_a_data_set_that_cannot_be_staged_safely_is_refused(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(DATASET, **bad)


def test_an_unpinned_image_is_refused() -> None:
    with pytest.raises(ValueError, match="not a pinned image"):
        staging(image="alpine:3.24.1")


# --- The script, run as the pod runs it, against a stand-in for wget ------------------------------

FAKE_WGET = """\
#!{python}
# wget -q -O DEST URL, served from $FAKE_WGET_ROOT by file name; every call is logged.
import os, pathlib, sys, time
dest, url = sys.argv[sys.argv.index("-O") + 1], sys.argv[-1]
with open(os.environ["FAKE_WGET_LOG"], "a") as log:
    log.write(url + "\\n")
if os.environ.get("FAKE_WGET_HANG"):
    time.sleep(float(os.environ["FAKE_WGET_HANG"]))
source = pathlib.Path(os.environ["FAKE_WGET_ROOT"]) / url.rsplit("/", 1)[1]
if not source.is_file():
    sys.exit("wget: server returned error: HTTP/1.1 403 Forbidden")
if dest == "-":
    sys.stdout.buffer.write(source.read_bytes())
else:
    pathlib.Path(dest).write_bytes(source.read_bytes())
"""


def moved_path(value: str, data: Path, mount_path: str) -> str:
    """A path under the pod's ``mount_path``, moved under ``data``; anything else (a URL, a checksum)
    as it is."""
    return str(data) + value.removeprefix(mount_path) if value.startswith(f"{mount_path}/") else value


def tarball(files: dict[str, bytes], *, mode: int = 0o644) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo(f"seqlen128/{name}")
            info.size = len(content)
            info.mode = mode
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


class Staging:
    """The rendered Job's command and environment, with /data moved under tmp_path and wget faked."""

    def __init__(self, tmp_path: Path, dataset: Dataset = DATASET, archive: bytes | None = None) -> None:
        self.data = tmp_path / "data"
        self.server = tmp_path / "server"
        self.log = tmp_path / "wget.log"
        bin_dir = tmp_path / "bin"
        for directory in (self.data, self.server, bin_dir):
            directory.mkdir(parents=True, exist_ok=True)
        (bin_dir / "wget").write_text(FAKE_WGET.format(python=sys.executable))
        (bin_dir / "wget").chmod(0o755)
        (self.server / "corpus.tar").write_bytes(archive or tarball({"part-0.hdf5": b"hdf5"}))
        (self.server / "train.py").write_bytes(SCRIPT_TEXT)
        self.dataset = dataset
        job_container = container(only(staging(dataset), "Job"))
        [mount] = job_container["volumeMounts"]
        mount_path = mount["mountPath"]
        moved = {
            **job_container,
            "env": [
                {**variable, "value": moved_path(variable["value"], self.data, mount_path)}
                for variable in job_container["env"]
            ],
            "args": [moved_path(argument, self.data, mount_path) for argument in job_container["args"]],
        }
        self.env = container_environment(moved) | {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "FAKE_WGET_ROOT": str(self.server),
            "FAKE_WGET_LOG": str(self.log),
        }
        self.command = [*SHELL, *expanded_command(moved, self.env)[1:]]
        self.directory = Path(self.env["DATASET_DIR"])
        self.marker = Path(self.env["MARKER"])

    def run(self, **extra: str) -> subprocess.CompletedProcess[str]:
        self.log.write_text("")
        return subprocess.run(
            self.command, env=self.env | extra, capture_output=True, text=True, timeout=60, check=False
        )

    def failures(self) -> list[str]:
        path = Path(f"{self.marker}.failures")
        return path.read_text().splitlines() if path.exists() else []

    def downloads(self) -> list[str]:
        return [url.rsplit("/", 1)[1] for url in self.log.read_text().split()]


def _runs_path_before_applets(busybox: str) -> bool:
    """Whether this busybox's ash runs a ``wget`` found on PATH. Debian's build prefers its own
    applets (FEATURE_PREFER_APPLETS), which would send the script's wget to the network instead of
    to the stand-in (CI failed on exactly that: "wget: bad address 'example.com'")."""
    with tempfile.TemporaryDirectory() as directory:
        probe = Path(directory) / "wget"
        probe.write_text("#!/bin/sh\necho stand-in\n")
        probe.chmod(0o755)
        result = subprocess.run(
            [busybox, "sh", "-c", "wget"],
            env=os.environ | {"PATH": f"{directory}{os.pathsep}{os.environ['PATH']}"},
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    return result.stdout.strip() == "stand-in"


def _shell() -> list[str]:
    """The pod runs busybox ash (alpine); busybox from the project's tools or the machine when its
    ash runs the stand-in wget, else bash, which accepts everything ash does (``set -o pipefail``
    included, which dash does not)."""
    busybox = debian_tools.busybox()
    if busybox and _runs_path_before_applets(busybox):
        return [busybox, "sh"]
    return [shutil.which("bash") or "bash"]


SHELL = _shell()
needs_tools = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("tar", "sha256sum", "mkfifo", "tee")),
    reason="needs tar, sha256sum, mkfifo and tee",
)


@pytest.mark.process
@needs_tools
def test_a_first_run_stages_everything_and_marks_it_last(tmp_path: Path) -> None:
    stage = Staging(tmp_path)
    result = stage.run()
    assert result.returncode == 0, result.stderr
    assert (stage.directory / "seqlen128" / "part-0.hdf5").read_bytes() == b"hdf5"
    assert (stage.directory / "train.py").read_bytes() == SCRIPT_TEXT
    assert stage.marker.exists() and stage.failures() == []
    assert sorted(path.name for path in stage.directory.iterdir()) == ["seqlen128", "train.py"]


SYSTEM_PYTHON = "/usr/bin/python3"
needs_setpriv = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None or not os.access(SYSTEM_PYTHON, os.X_OK),
    reason="running as another uid needs root, setpriv and a system python3",
)


def as_platform_uid(stage: Staging) -> None:
    """Run the script as the Job does: the platform's uid and gid, no other group."""
    uid = str(PLATFORM_UID)
    stage.command = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *stage.command]


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A directory the platform's uid can reach (pytest's own are private to their user)."""
    path = Path(tempfile.mkdtemp(prefix="staging-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.mark.process
@needs_tools
@needs_setpriv
def test_staging_as_the_platforms_uid_waits_for_the_layout_then_owns_what_it_unpacks(open_tmp: Path) -> None:
    stage = Staging(open_tmp)
    for path in (stage.server, stage.log.parent / "bin"):
        path.chmod(0o755)
    stage.log.write_text("")
    stage.log.chmod(0o666)
    # The test's own Python lives under root's home; the stand-in wget needs one this uid can run.
    (stage.log.parent / "bin" / "wget").write_text(FAKE_WGET.format(python=SYSTEM_PYTHON))
    # The Job mounts the file system's /datasets itself (stage.data stands in for it): root's, as
    # before the layout hands it over.
    datasets = stage.data
    as_platform_uid(stage)
    result = stage.run(LAYOUT_WAIT_SECONDS="0")
    assert result.returncode != 0 and not stage.marker.exists()
    assert (
        f"{stage.marker.parent} is not writable by uid {PLATFORM_UID} after 0s: has the fsx-layout Job run?"
        in result.stderr
    )
    os.chown(datasets, PLATFORM_UID, PLATFORM_UID)  # what the layout Job does
    result = stage.run(LAYOUT_WAIT_SECONDS="0")
    assert result.returncode == 0, result.stderr
    for path in (stage.marker, stage.directory / "seqlen128" / "part-0.hdf5", stage.directory / "train.py"):
        assert (path.stat().st_uid, path.stat().st_gid) == (PLATFORM_UID, PLATFORM_UID), path


@pytest.mark.process
@needs_tools
def test_a_second_run_downloads_nothing(tmp_path: Path) -> None:
    stage = Staging(tmp_path)
    assert stage.run().returncode == 0
    result = stage.run()
    assert result.returncode == 0, result.stderr
    assert stage.downloads() == []
    assert "already staged" in result.stdout


@pytest.mark.process
@needs_tools
def test_an_unfinished_attempt_is_redone_from_an_empty_directory(tmp_path: Path) -> None:
    stage = Staging(tmp_path)
    stage.directory.mkdir(parents=True)
    (stage.directory / "leftover").write_bytes(b"x")
    assert stage.run().returncode == 0
    assert sorted(path.name for path in stage.directory.iterdir()) == ["seqlen128", "train.py"]


@pytest.mark.process
@needs_tools
def test_the_archive_is_verified_while_it_streams(tmp_path: Path) -> None:
    archive = tarball({"part-0.hdf5": b"hdf5"})
    good = dataclasses.replace(DATASET, archive_sha256=hashlib.sha256(archive).hexdigest())
    assert Staging(tmp_path / "good", good, archive).run().returncode == 0

    tampered = Staging(tmp_path / "bad", good, tarball({"part-0.hdf5": b"poisoned"}))
    result = tampered.run()
    assert result.returncode != 0
    assert not tampered.marker.exists()
    [failure] = tampered.failures()
    assert "checksum mismatch for https://example.com/data/corpus.tar" in failure


@pytest.mark.process
@needs_tools
def test_a_file_with_the_wrong_checksum_fails_the_attempt_and_says_why(tmp_path: Path) -> None:
    stage = Staging(tmp_path)
    (stage.server / "train.py").write_bytes(b"tampered\n")
    result = stage.run()
    assert result.returncode != 0 and not stage.marker.exists()
    assert "checksum mismatch for https://example.com/code/train.py" in stage.failures()[0]


@pytest.mark.process
@needs_tools
def test_each_failed_attempt_is_recorded_for_the_pods_that_wait(tmp_path: Path) -> None:
    stage = Staging(tmp_path)
    (stage.server / "corpus.tar").unlink()  # a 403 from the bucket
    for attempt in range(1, STAGING_ATTEMPTS + 1):
        assert stage.run().returncode != 0
        assert len(stage.failures()) == attempt
    assert "cannot download or unpack https://example.com/data/corpus.tar" in stage.failures()[-1]
    # A later success clears the record.
    (stage.server / "corpus.tar").write_bytes(tarball({"part-0.hdf5": b"hdf5"}))
    assert stage.run().returncode == 0 and stage.failures() == []


@pytest.mark.process
@needs_tools
def test_a_terminated_attempt_is_recorded_too(tmp_path: Path) -> None:
    stage = Staging(tmp_path)
    stage.log.write_text("")
    # Its own process group, so that the stand-in wget is stopped with it whatever happens.
    with subprocess.Popen(
        stage.command,
        env=stage.env | {"FAKE_WGET_HANG": "30"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    ) as process:
        try:
            deadline = time.monotonic() + 20
            while not stage.log.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            process.send_signal(signal.SIGTERM)  # what the kubelet sends at a deadline or deletion
            process.wait(timeout=10)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode != 0
    assert "terminated" in stage.failures()[0]
    assert Path(f"{stage.marker}.heartbeat").exists()


@pytest.mark.process
@needs_tools
def test_the_marker_records_the_version_the_pods_require(tmp_path: Path) -> None:
    archive = tarball({"part-0.hdf5": b"hdf5"})
    checked = dataclasses.replace(DATASET, archive_sha256=hashlib.sha256(archive).hexdigest())
    stage = Staging(tmp_path, checked, archive)
    assert stage.run().returncode == 0
    first, streamed = stage.marker.read_text().splitlines()
    assert first == checked.staged_version == f"{checked.identity} archive-sha256={checked.archive_sha256}"
    assert streamed == f"archive-sha256-streamed={checked.archive_sha256}"


@pytest.mark.process
@needs_tools
def test_a_marker_without_the_version_is_restaged(tmp_path: Path) -> None:
    stage = Staging(tmp_path)
    stage.marker.parent.mkdir(parents=True)
    stage.marker.touch()  # an empty marker, as an older release wrote it, vouches for nothing
    result = stage.run()
    assert result.returncode == 0, result.stderr
    assert "already staged" not in result.stdout and stage.downloads() != []
    assert stage.marker.read_text().splitlines()[0] == stage.env["STAGED_VERSION"]


@pytest.mark.process
@needs_tools
def test_staged_files_are_readable_by_every_team_and_writable_by_none(tmp_path: Path) -> None:
    """Training pods run as their team's uid: an archive's private modes would lock them out."""
    stage = Staging(tmp_path, archive=tarball({"part-0.hdf5": b"hdf5"}, mode=0o666))
    assert stage.run().returncode == 0
    staged = stage.directory / "seqlen128" / "part-0.hdf5"
    assert stat.S_IMODE(staged.stat().st_mode) == 0o644
    private = Staging(tmp_path / "private", archive=tarball({"part-0.hdf5": b"hdf5"}, mode=0o600))
    assert private.run().returncode == 0
    assert stat.S_IMODE((private.directory / "seqlen128" / "part-0.hdf5").stat().st_mode) == 0o644
