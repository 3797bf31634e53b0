"""A data set's s3:// sources (issue 33): the staging Job's fetch containers copy each object with the
AWS CLI through the data set's Pod Identity role, and the staging script checks each by SHA-256
before anything reaches the file system.

The fetch and the check run for real: the rendered fetch commands with the real AWS CLI (skipped
where there is none) against a local S3 stand-in (GetObject and HeadObject on loopback, no AWS), then
the rendered staging script on what they wrote. The role's exact objects are in the template test
below.
"""

from __future__ import annotations

import email.utils
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from config import ConfigError, parse_config
from k8s_charts.runs.dataset_staging import FETCHED_DIR, Dataset, RemoteFile, s3_sources
from tests.config.test_config import default_data
from tests.k8s_charts.expansion import container_environment, expanded_command
from tests.k8s_charts.manifests import Manifest, only, pod_spec
from tests.k8s_charts.runs.test_dataset_staging import SHELL, needs_tools, staging, tarball

SCRIPT = b"print('my own code')\n"
ARCHIVE = tarball({"part-0.hdf5": b"hdf5"})
DATASET = Dataset(
    name="code",
    archive_url="s3://my-data/sets/corpus.tar",
    archive_sha256=hashlib.sha256(ARCHIVE).hexdigest(),
    files=(
        RemoteFile(
            url="s3://my-code/team/train.py", sha256=hashlib.sha256(SCRIPT).hexdigest(), name="train.py"
        ),
    ),
)
OBJECTS = {"/my-data/sets/corpus.tar": ARCHIVE, "/my-code/team/train.py": SCRIPT}


def test_the_configuration_takes_s3_objects_for_files_and_archives() -> None:
    data = default_data()
    data["datasets"] = [
        {
            "name": "code",
            "archive_url": "s3://my-data/sets/corpus.tar",
            "archive_sha256": "b" * 64,
            "files": [{"url": "s3://my-code/team/train.py", "sha256": "a" * 64, "name": "train.py"}],
        }
    ]
    data["runs"].append(
        {"name": "mine", "script": "$(DATASET_CODE)/train.py", "datasets": ["code"], "nodes": 1}
    )
    parse_config(data)
    data["datasets"][0]["files"][0]["url"] = "s3://my-code"
    with pytest.raises(ConfigError) as raised:
        parse_config(data, source="env.yaml")
    assert raised.value.lines() == [
        (
            "env.yaml: datasets[0].files[0].url: 's3://my-code' is not an https:// URL or an S3 object such as "
            "s3://bucket/key"
        )
    ]


def _job(manifests: list[Manifest]) -> Manifest:
    return only(manifests, "Job")


def test_each_s3_object_has_a_fetch_container_and_the_script_reads_it_locally() -> None:
    manifests = staging(DATASET, region="us-west-2")
    spec = pod_spec(_job(manifests))
    fetches = spec["initContainers"]
    assert [container["command"] for container in fetches] == [
        ["aws", "s3", "cp", "--only-show-errors", "s3://my-data/sets/corpus.tar", f"{FETCHED_DIR}/archive"],
        ["aws", "s3", "cp", "--only-show-errors", "s3://my-code/team/train.py", f"{FETCHED_DIR}/0"],
    ]
    for fetch in fetches:
        assert fetch["securityContext"]["readOnlyRootFilesystem"] is True
        assert {"name": "AWS_REGION", "value": "us-west-2"} in fetch["env"]
    assert spec["serviceAccountName"] == "stage-code" and spec["automountServiceAccountToken"] is False
    [main] = spec["containers"]
    assert main["args"][0] == f"file://{FETCHED_DIR}/0"
    assert {"name": "ARCHIVE_URL", "value": f"file://{FETCHED_DIR}/archive"} in main["env"]
    # The Pod Identity agent is the one new way out.
    policies = [
        m
        for m in manifests
        if m["kind"] == "NetworkPolicy" and m["metadata"]["name"].endswith("-pod-identity")
    ]
    assert [rule["to"] for rule in policies[0]["spec"]["egress"]] == [
        [{"ipBlock": {"cidr": "169.254.170.23/32"}}]
    ]
    assert only(manifests, "ServiceAccount")["metadata"]["name"] == "stage-code"


def test_an_https_only_data_set_is_staged_as_before() -> None:
    https = Dataset(name="web", archive_url="https://example.com/c.tar", archive_sha256=None)
    spec = pod_spec(_job(staging(https)))
    assert "initContainers" not in spec and "serviceAccountName" not in spec
    assert s3_sources(https) == {}


class _S3StandIn(http.server.BaseHTTPRequestHandler):
    """HeadObject and GetObject, path-style, as S3 answers them; 404 NoSuchKey for anything else."""

    objects: ClassVar[dict[str, bytes]] = {}
    requests: ClassVar[list[str]] = []

    def _object(self) -> bytes | None:
        self.requests.append(f"{self.command} {self.path}")
        return self.objects.get(self.path.split("?", 1)[0])

    def _headers(self, body: bytes) -> None:
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", f'"{hashlib.md5(body).hexdigest()}"')
        self.send_header("Last-Modified", email.utils.formatdate(usegmt=True))
        self.send_header("Content-Type", "binary/octet-stream")
        self.end_headers()

    def do_HEAD(self) -> None:
        body = self._object()
        self.send_response(200 if body is not None else 404)
        self._headers(body or b"")

    def do_GET(self) -> None:
        body = self._object()
        if body is None:
            error = (
                b"<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>"
            )
            self.send_response(404)
            self._headers(error)
            self.wfile.write(error)
            return
        self.send_response(200)
        self._headers(body)
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def s3() -> Iterator[str]:
    _S3StandIn.objects = dict(OBJECTS)
    _S3StandIn.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _S3StandIn)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=10)


def _moved(value: str, moves: dict[str, Path]) -> str:
    for prefix, target in moves.items():
        value = value.replace(prefix, str(target))
    return value


def _stage(tmp_path: Path, endpoint: str, dataset: Dataset = DATASET) -> subprocess.CompletedProcess[str]:
    """The rendered fetch containers with the real AWS CLI, then the rendered staging script."""
    fetched, data = tmp_path / "fetched", tmp_path / "datasets"
    fetched.mkdir()
    data.mkdir()
    config = tmp_path / "aws-config"
    config.write_text("[default]\ns3 =\n    addressing_style = path\n")
    aws_env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "AWS_CONFIG_FILE": str(config),
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "fake",
        "AWS_ENDPOINT_URL_S3": endpoint,
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    spec = pod_spec(_job(staging(dataset, region="us-west-2")))
    moves = {FETCHED_DIR: fetched, "/datasets": data}
    for fetch in spec["initContainers"]:
        env = aws_env | {v["name"]: _moved(v["value"], moves) for v in fetch["env"]}
        done = subprocess.run(
            [_moved(part, moves) for part in fetch["command"]],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            return done
    [main] = spec["containers"]
    moved = {
        **main,
        "env": [{**v, "value": _moved(v["value"], moves)} for v in main["env"]],
        "args": [_moved(a, moves) for a in main["args"]],
    }
    env = container_environment(moved) | {"PATH": os.environ["PATH"]}
    return subprocess.run(
        [*SHELL, *expanded_command(moved, env)[1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


needs_aws = pytest.mark.skipif(shutil.which("aws") is None, reason="needs the AWS CLI")


@pytest.mark.process
@needs_tools
@needs_aws
def test_s3_objects_are_fetched_and_checked_before_they_are_staged(tmp_path: Path, s3: str) -> None:
    result = _stage(tmp_path, s3)
    assert result.returncode == 0, result.stdout + result.stderr
    staged = tmp_path / "datasets" / "code" / DATASET.identity
    assert (staged / "train.py").read_bytes() == SCRIPT
    assert (staged / "seqlen128" / "part-0.hdf5").read_bytes() == b"hdf5"
    assert (tmp_path / "datasets" / "code" / f"{DATASET.identity}.staged").read_text().splitlines()[0] == (
        DATASET.staged_version
    )
    assert {"GET /my-code/team/train.py", "GET /my-data/sets/corpus.tar"} <= set(_S3StandIn.requests)


@pytest.mark.process
@needs_tools
@needs_aws
def test_an_s3_object_that_is_not_the_checksummed_one_is_refused(tmp_path: Path, s3: str) -> None:
    _S3StandIn.objects["/my-code/team/train.py"] = b"import os; os.system('something else')\n"
    result = _stage(tmp_path, s3)
    assert result.returncode != 0
    assert f"checksum mismatch for file://{tmp_path}/fetched/0" in result.stderr
    assert not (tmp_path / "datasets" / "code" / f"{DATASET.identity}.staged").exists()


@pytest.mark.process
@needs_aws
def test_a_missing_s3_object_fails_the_fetch(tmp_path: Path, s3: str) -> None:
    del _S3StandIn.objects["/my-data/sets/corpus.tar"]
    result = _stage(tmp_path, s3)
    assert result.returncode != 0
    assert "404" in result.stderr or "Not Found" in result.stderr


def test_the_staging_role_reads_exactly_the_s3_objects() -> None:
    """The template: the data set's Pod Identity role may s3:GetObject those two objects, nothing else,
    and its association names the staging Job's ServiceAccount."""
    from tests.conftest import synthesize  # noqa: PLC0415

    data = default_data()
    data["datasets"] = [
        {
            "name": "code",
            "archive_url": DATASET.archive_url,
            "archive_sha256": DATASET.archive_sha256,
            "files": [{"url": DATASET.files[0].url, "sha256": DATASET.files[0].sha256, "name": "train.py"}],
        }
    ]
    data["runs"].append(
        {"name": "mine", "script": "$(DATASET_CODE)/train.py", "datasets": ["code"], "nodes": 1}
    )
    built = synthesize(parse_config(data))
    policies = [
        p for k, p in built.resources("AWS::IAM::Policy").items() if k.startswith("DatasetAccesscode")
    ]
    [statement] = policies[0]["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Action"] == "s3:GetObject"
    assert json.dumps(statement["Resource"]).count(":s3:::") == 2
    assert ":s3:::my-code/team/train.py" in json.dumps(statement["Resource"])
    associations = [
        a["Properties"]
        for a in built.resources("AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == "stage-code"
    ]
    assert [a["Namespace"] for a in associations] == ["trainium-system"]
