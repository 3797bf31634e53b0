"""DataStagingChart: one idempotent Job that puts the BERT data set and script on the FSx volume."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from k8s_charts.data_staging import (
    DATASET_DIR,
    DATASET_URL,
    DEFAULT_IMAGE,
    OPTIMIZER_MODULE_URL,
    SCRIPT_PATH,
    SCRIPT_URL,
    STAGING_SCRIPT,
    DataStagingChart,
)
from tests.k8s.manifests import Manifest, only, pod_spec, synth
from tests.k8s_validation import assert_valid


def staging(**props: Any) -> list[Manifest]:
    props = {"namespace": "training", "claim_name": "fsx-claim", **props}
    return synth(lambda app: DataStagingChart(app, "data-staging", **props))


@pytest.fixture(scope="module")
def manifests() -> list[Manifest]:
    return staging()


@pytest.fixture(scope="module")
def job(manifests: list[Manifest]) -> Manifest:
    return only(manifests, "Job")


def container_of(job: Manifest) -> dict[str, Any]:
    [container] = pod_spec(job)["containers"]
    return container


def environment_of(job: Manifest) -> dict[str, str]:
    return {variable["name"]: variable["value"] for variable in container_of(job)["env"]}


# --- The Job ----------------------------------------------------------------------------------


def test_one_valid_batch_job_with_a_fixed_name(manifests: list[Manifest], job: Manifest) -> None:
    assert_valid(manifests)
    assert [manifest["kind"] for manifest in manifests] == ["Job", "NetworkPolicy"]
    assert job["apiVersion"] == "batch/v1"
    assert job["metadata"]["name"] == "bert-data-staging"
    assert job["metadata"]["namespace"] == "training"


def test_namespace_and_claim_are_configurable() -> None:
    manifests = staging(namespace="ml", claim_name="lustre")
    assert_valid(manifests)
    job = only(manifests, "Job")
    assert job["metadata"]["namespace"] == "ml"
    assert pod_spec(job)["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "lustre"}}]


def test_the_claim_is_mounted_at_data(job: Manifest) -> None:
    assert pod_spec(job)["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "fsx-claim"}}]
    assert container_of(job)["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]


def test_retries_are_few_and_the_finished_job_is_kept(job: Manifest) -> None:
    assert 1 <= job["spec"]["backoffLimit"] <= 3
    assert job["spec"].get("ttlSecondsAfterFinished", 86400) >= 86400
    assert pod_spec(job)["restartPolicy"] == "Never"


def test_the_container_has_requests_and_limits(job: Manifest) -> None:
    resources = container_of(job)["resources"]
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}


def test_the_container_runs_without_privileges(job: Manifest) -> None:
    security = container_of(job)["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    assert pod_spec(job)["automountServiceAccountToken"] is False


def test_the_image_is_pinned(job: Manifest) -> None:
    image = container_of(job)["image"]
    assert image == DEFAULT_IMAGE
    repository, _, tag = image.rpartition(":")
    assert repository == "public.ecr.aws/docker/library/alpine"
    assert tag and tag != "latest" and tag.count(".") == 2


@pytest.mark.parametrize(
    "image",
    ["alpine", "alpine:3.24.1", "public.ecr.aws/docker/library/alpine:latest", "registry:5000/alpine"],
)
def test_unpinned_images_are_refused(image: str) -> None:
    with pytest.raises(ValueError, match="not a pinned image"):
        staging(image=image)


@pytest.mark.parametrize("prop", ["dataset_url", "script_url", "optimizer_module_url"])
def test_downloads_use_https(prop: str) -> None:
    with pytest.raises(ValueError, match=f"{prop} must be an https:// URL"):
        staging(**{prop: "http://example.com/file"})


def test_sources_are_the_public_data_set_and_the_script_pinned_by_commit(job: Manifest) -> None:
    env = environment_of(job)
    assert env["DATASET_URL"] == DATASET_URL
    assert DATASET_URL.endswith(
        "/training_datasets/bert_pretrain_wikicorpus_tokenized_hdf5/bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128.tar"
    )
    for url in (SCRIPT_URL, OPTIMIZER_MODULE_URL):
        owner, repository, commit = url.removeprefix("https://raw.githubusercontent.com/").split("/")[:3]
        assert (owner, repository, len(commit)) == ("aws-neuron", "aws-neuron-samples", 40)
    assert env["SCRIPT_URL"] == SCRIPT_URL
    assert env["DATASET_DIR"] == DATASET_DIR == "/data/bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128"
    assert env["SCRIPT_PATH"] == SCRIPT_PATH == "/data/dp_bert_large_hf_pretrain_hdf5.py"
    assert env["OPTIMIZER_MODULE_PATH"] == "/data/adamw_fp32_optim_params.py"


def test_the_script_fails_fast_and_marks_the_data_set_only_after_a_complete_unpack(job: Manifest) -> None:
    command = container_of(job)["command"]
    assert command == ["/bin/sh", "-c", STAGING_SCRIPT]
    lines = [line.strip() for line in STAGING_SCRIPT.splitlines()]
    assert lines[:2] == ["set -eu", "set -o pipefail"]
    clear = lines.index('rm -rf "$DATASET_DIR" "$DATASET_MARKER"')
    unpack = next(i for i, line in enumerate(lines) if "| tar -x" in line)
    mark = lines.index('echo "$DATASET_URL" > "$DATASET_MARKER"')
    assert clear < unpack < mark
    assert environment_of(job)["DATASET_MARKER"] == f"{DATASET_DIR}.staged"


# --- The script, run against a stand-in for wget ----------------------------------------------

FAKE_WGET = """\
#!{python}
# wget -q -O DEST URL, served from $FAKE_WGET_ROOT by file name; every call is logged.
import os, pathlib, sys
dest, url = sys.argv[sys.argv.index("-O") + 1], sys.argv[-1]
with open(os.environ["FAKE_WGET_LOG"], "a") as log:
    log.write(url + "\\n")
source = pathlib.Path(os.environ["FAKE_WGET_ROOT"]) / url.rsplit("/", 1)[1]
if not source.is_file():
    sys.exit("wget: server returned error: 404")
if dest == "-":
    sys.stdout.buffer.write(source.read_bytes())
else:
    pathlib.Path(dest).write_bytes(source.read_bytes())
"""
SCRIPT_TEXT = b"print('bert')\n"
OPTIMIZER_TEXT = b"class AdamW_FP32OptimParams: ...\n"


class Staging:
    """The chart's script and environment, with /data moved under tmp_path and wget faked."""

    def __init__(self, tmp_path: Path) -> None:
        self.data = tmp_path / "data"
        self.server = tmp_path / "server"
        self.log = tmp_path / "wget.log"
        bin_dir = tmp_path / "bin"
        for directory in (self.data, self.server, bin_dir):
            directory.mkdir()
        (bin_dir / "wget").write_text(FAKE_WGET.format(python=sys.executable))
        (bin_dir / "wget").chmod(0o755)
        self.publish_dataset({"part-0.hdf5": b"hdf5"})
        (self.server / "dp_bert_large_hf_pretrain_hdf5.py").write_bytes(SCRIPT_TEXT)
        (self.server / "adamw_fp32_optim_params.py").write_bytes(OPTIMIZER_TEXT)
        job = only(
            staging(
                script_sha256=hashlib.sha256(SCRIPT_TEXT).hexdigest(),
                optimizer_module_sha256=hashlib.sha256(OPTIMIZER_TEXT).hexdigest(),
            ),
            "Job",
        )
        self.env = {
            name: value.replace("/data", str(self.data), 1) if value.startswith("/data") else value
            for name, value in environment_of(job).items()
        }
        self.env |= {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "FAKE_WGET_ROOT": str(self.server),
            "FAKE_WGET_LOG": str(self.log),
        }
        self.script = container_of(job)["command"][2]
        self.dataset = Path(self.env["DATASET_DIR"])

    def publish_dataset(self, files: dict[str, bytes]) -> None:
        with tarfile.open(self.server / DATASET_URL.rsplit("/", 1)[1], "w") as archive:
            for name, content in files.items():
                info = tarfile.TarInfo(f"{Path(DATASET_DIR).name}/{name}")
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))

    def run(self) -> subprocess.CompletedProcess[str]:
        self.log.write_text("")
        return subprocess.run(
            ["bash", "-c", self.script], env=self.env, capture_output=True, text=True, timeout=60, check=False
        )

    def downloads(self) -> list[str]:
        return [url.rsplit("/", 1)[1] for url in self.log.read_text().split()]


needs_tools = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("bash", "tar", "sha256sum")),
    reason="needs bash, tar and sha256sum",
)


@pytest.fixture
def stage(tmp_path: Path) -> Staging:
    return Staging(tmp_path)


@needs_tools
def test_a_first_run_stages_everything(stage: Staging) -> None:
    result = stage.run()
    assert result.returncode == 0, result.stderr
    assert (stage.dataset / "part-0.hdf5").read_bytes() == b"hdf5"
    assert Path(stage.env["DATASET_MARKER"]).read_text().strip() == DATASET_URL
    assert Path(stage.env["SCRIPT_PATH"]).read_bytes() == SCRIPT_TEXT
    assert Path(stage.env["OPTIMIZER_MODULE_PATH"]).read_bytes() == OPTIMIZER_TEXT
    assert not list(stage.data.glob("*.partial"))


@needs_tools
def test_a_second_run_downloads_nothing(stage: Staging) -> None:
    assert stage.run().returncode == 0
    result = stage.run()
    assert result.returncode == 0, result.stderr
    assert stage.downloads() == []
    assert "already staged" in result.stdout


@needs_tools
def test_a_half_unpacked_data_set_is_unpacked_again_from_scratch(stage: Staging) -> None:
    # A run that died mid-unpack: files present, marker never written.
    stage.dataset.mkdir()
    (stage.dataset / "part-0.hdf5").write_bytes(b"trunc")
    (stage.dataset / "leftover").write_bytes(b"x")
    assert stage.run().returncode == 0
    assert sorted(path.name for path in stage.dataset.iterdir()) == ["part-0.hdf5"]
    assert (stage.dataset / "part-0.hdf5").read_bytes() == b"hdf5"


@needs_tools
def test_a_changed_script_on_data_is_downloaded_again(stage: Staging) -> None:
    assert stage.run().returncode == 0
    Path(stage.env["SCRIPT_PATH"]).write_text("edited\n")
    assert stage.run().returncode == 0
    assert stage.downloads() == ["dp_bert_large_hf_pretrain_hdf5.py"]
    assert Path(stage.env["SCRIPT_PATH"]).read_bytes() == SCRIPT_TEXT


@needs_tools
def test_a_download_with_the_wrong_checksum_fails_and_installs_nothing(stage: Staging) -> None:
    (stage.server / "dp_bert_large_hf_pretrain_hdf5.py").write_bytes(b"tampered\n")
    result = stage.run()
    assert result.returncode != 0
    assert not Path(stage.env["SCRIPT_PATH"]).exists()


@needs_tools
def test_a_failed_data_set_download_fails_the_job_and_leaves_no_marker(stage: Staging) -> None:
    (stage.server / DATASET_URL.rsplit("/", 1)[1]).unlink()
    result = stage.run()
    assert result.returncode != 0
    assert not Path(stage.env["DATASET_MARKER"]).exists()
    assert stage.downloads() == [DATASET_URL.rsplit("/", 1)[1]]
