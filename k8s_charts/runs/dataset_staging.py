"""Stage a data set (an archive and single files, each checked by SHA-256) on the shared FSx volume.

One ``batch/v1`` Job per data set version, on the system nodes (no Trainium node waits for a
download). A version is identified by what defines it (the URLs and checksums), and everything
about it is named after that identity:

- the directory ``/datasets/<name>/<identity>`` (the same path in the staging pod and a run's): a new version never overwrites files a
  running job reads; older versions stay until removed by hand;
- the Job ``stage-<name>-<hash>``, the hash of everything in it (the version, the claim, the
  image): a Job's pod template is immutable, so a change is a new Job, and the old one is deleted
  with the deployment that drops it;
- the marker ``<directory>.staged`` beside it, written last: training pods wait for it. Next to it
  the script keeps ``.staged.failures`` (a line per failed attempt) and ``.staged.heartbeat``,
  which waiting pods read to give up within minutes of a failure (cluster_programs/run_worker.sh).

Re-running is cheap and safe: a staged version is skipped; an attempt that did not finish is
redone from an empty directory (nothing in it was verified).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.kubernetes_names import DATASETS_DIR, DATASETS_ROOT, PLATFORM_UID
from cluster_facts.script_files import program_body
from k8s_charts.network.system_network import pod_identity_egress_rule
from k8s_charts.network.tenant_network import https_egress
from k8s_charts.shared.identity import spec_hash
from k8s_charts.shared.platform_jobs import DEFAULT_IMAGE, platform_job
from k8s_charts.shared.policy_exceptions import PINNED_PULL_POLICY
from k8s_charts.shared.resources import container_resources

__all__ = [
    "DEFAULT_IMAGE",
    "FETCHED_DIR",
    "S3_FETCH_IMAGE",
    "STAGING_ATTEMPTS",
    "STAGING_DEADLINE_SECONDS",
    "STAGING_SCRIPT",
    "Dataset",
    "DatasetStagingChart",
    "RemoteFile",
    "s3_sources",
    "staging_job_name",
    "staging_service_account",
]

# POSIX sh (busybox ash); the Job passes its inputs as environment variables and arguments.
STAGING_SCRIPT = program_body("stage_dataset.sh")
# Each attempt starts over from the markers; more than a few failures means a real fault.
STAGING_BACKOFF_LIMIT = 3
STAGING_ATTEMPTS = STAGING_BACKOFF_LIMIT + 1
"""Failed attempts after which the Job has failed for good (and waiting pods give up)."""
# Streaming tens of GB from S3 takes minutes; a stalled run must not hang forever.
STAGING_DEADLINE_SECONDS = 6 * 3600

_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, kw_only=True)
class RemoteFile:
    """One file to fetch: from ``url`` (https), checked against ``sha256``, to ``name`` in the data set."""

    url: str
    sha256: str
    name: str


@dataclass(frozen=True, kw_only=True)
class Dataset:
    """What a data set is: an optional tar archive (streamed, unpacked) and single files."""

    name: str
    archive_url: str | None
    archive_sha256: str | None
    """Verified while the archive streams; None stages it unverified (the summary says so)."""
    files: tuple[RemoteFile, ...] = ()

    def __post_init__(self) -> None:
        urls = [self.archive_url] if self.archive_url else []
        urls += [remote.url for remote in self.files]
        if not urls:
            raise ValueError(f"data set {self.name!r} has neither an archive nor files")
        for url in urls:
            if not url.startswith(("https://", "s3://")):
                raise ValueError(f"data set {self.name!r}: {url!r} is not an https:// URL or an s3:// object")
        checksums = [remote.sha256 for remote in self.files]
        checksums += [self.archive_sha256] if self.archive_sha256 else []
        for checksum in checksums:
            if not _SHA256.fullmatch(checksum):
                raise ValueError(f"data set {self.name!r}: {checksum!r} is not a SHA-256 (64 hex digits)")
        names = [remote.name for remote in self.files]
        if len(set(names)) != len(names) or any("/" in name or name.startswith(".") for name in names):
            raise ValueError(f"data set {self.name!r}: file names must be distinct plain names, got {names}")

    @property
    def identity(self) -> str:
        """Eight hex digits of a hash of everything that defines this version."""
        definition = {
            "archive": [self.archive_url, self.archive_sha256],
            "files": [[remote.url, remote.sha256, remote.name] for remote in self.files],
        }
        return hashlib.sha256(json.dumps(definition, sort_keys=True).encode()).hexdigest()[:8]

    @property
    def staged_version(self) -> str:
        """What the staging job writes as the marker's first line once everything is verified, and
        what training pods require there: the version's identity and the archive checksum it was
        verified against (``unverified`` for an archive without one)."""
        return f"{self.identity} archive-sha256={self.archive_sha256 or 'unverified'}"

    @property
    def directory(self) -> str:
        return f"{DATASETS_ROOT}/{self.name}/{self.identity}"

    @property
    def marker(self) -> str:
        return f"{self.directory}.staged"

    def path(self, name: str) -> str:
        """Where the file ``name`` of this data set lands."""
        return f"{self.directory}/{name}"


S3_FETCH_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.36.7"
"""The AWS CLI image that copies a data set's s3:// sources before staging (``aws s3 cp``): AWS's
own, on ECR Public (so through the pull-through cache), version 2.36.7, the newest v2 tag of
aws/aws-cli readable here (2026-07-23). Pinned by tag (no digest is published); CLI v2 reads EKS
Pod Identity's credentials (2.15.0 and later). Its existence on ECR Public is not checked offline."""
FETCHED_DIR = "/fetched"
"""Where the fetch containers put the S3 objects (an emptyDir) for the staging script to check."""


def s3_sources(dataset: Dataset) -> dict[str, str]:
    """Each s3:// source of ``dataset`` -> where its fetch container writes it (the archive, then
    the files in order)."""
    found = {}
    if dataset.archive_url and dataset.archive_url.startswith("s3://"):
        found[dataset.archive_url] = f"{FETCHED_DIR}/archive"
    for index, remote in enumerate(dataset.files):
        if remote.url.startswith("s3://"):
            found[remote.url] = f"{FETCHED_DIR}/{index}"
    return found


def staging_service_account(dataset: Dataset) -> str:
    """The ServiceAccount of a data set with s3:// sources: its Pod Identity role may read exactly
    those objects (constructs_trn/dataset_access.py)."""
    return f"stage-{dataset.name}"


def _fetch_containers(dataset: Dataset, image: str, region: str) -> list[k8s.Container]:
    """One ``aws s3 cp`` per s3:// source, as the platform's uid with nothing writable but the scratch."""
    return [
        k8s.Container(
            name=f"fetch-{index}",
            image=image,
            image_pull_policy=PINNED_PULL_POLICY,
            command=["aws", "s3", "cp", "--only-show-errors", url, local],
            # The CLI keeps no state but what HOME holds; the root file system is read-only. It starts
            # in the cluster's region and follows S3's redirect to the bucket's.
            env=[k8s.EnvVar(name="HOME", value=FETCHED_DIR), k8s.EnvVar(name="AWS_REGION", value=region)],
            resources=container_resources(
                requests={"cpu": "250m", "memory": "256Mi"}, limits={"cpu": "1", "memory": "1Gi"}
            ),
            security_context=k8s.SecurityContext(
                allow_privilege_escalation=False,
                capabilities=k8s.Capabilities(drop=["ALL"]),
                read_only_root_filesystem=True,
            ),
            volume_mounts=[k8s.VolumeMount(name="scratch", mount_path=FETCHED_DIR)],
        )
        for index, (url, local) in enumerate(s3_sources(dataset).items())
    ]


def _pod_labels(dataset: Dataset, job_name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "dataset-staging",
        "app.kubernetes.io/instance": job_name,
        "trainium/dataset": dataset.name,
    }


def _staging_objects(
    scope: Construct,
    *,
    dataset: Dataset,
    namespace: str,
    claim_name: str,
    image: str,
    job_name: str,
    root_zones: Sequence[str],
    fetch_image: str = S3_FETCH_IMAGE,
    region: str = "us-east-1",
) -> None:
    # An s3:// source is copied by a fetch container first; the script reads it as a local file.
    local = {url: f"file://{path}" for url, path in s3_sources(dataset).items()}
    platform_job(
        scope,
        name=job_name,
        namespace=namespace,
        claim_name=claim_name,
        labels=_pod_labels(dataset, job_name),
        # cluster_programs/stage_dataset.sh, with the files as its arguments.
        script=STAGING_SCRIPT,
        script_name="stage-dataset",
        arguments=[
            part
            for remote in dataset.files
            for part in (local.get(remote.url, remote.url), remote.sha256, dataset.path(remote.name))
        ],
        environment={
            "DATASET_NAME": dataset.name,
            "DATASET_DIR": dataset.directory,
            "MARKER": dataset.marker,
            "STAGED_VERSION": dataset.staged_version,
            "ARCHIVE_URL": local.get(dataset.archive_url or "", dataset.archive_url or ""),
            "ARCHIVE_SHA256": dataset.archive_sha256 or "",
        },
        backoff_limit=STAGING_BACKOFF_LIMIT,
        deadline_seconds=STAGING_DEADLINE_SECONDS,
        root_zones=root_zones,
        image=image,
        # Only the data sets, at the path the teams' pods see them: the staging pod cannot touch a
        # team's directory. The kubelet makes a missing sub-path directory as root, which is root
        # on these nodes; the layout Job makes it first anyway (cluster_programs/fsx_layout.sh).
        mount_path=DATASETS_ROOT,
        sub_path=DATASETS_DIR,
        # Never root: the layout Job hands /datasets to the platform's uid.
        run_as=PLATFORM_UID,
        init_containers=_fetch_containers(dataset, fetch_image, region),
        scratch_path=FETCHED_DIR if local else None,
        service_account=staging_service_account(dataset) if local else None,
    )


def staging_job_name(
    dataset: Dataset,
    *,
    namespace: str,
    claim_name: str,
    root_zones: Sequence[str],
    image: str = DEFAULT_IMAGE,
    fetch_image: str = S3_FETCH_IMAGE,
    region: str = "us-east-1",
) -> str:
    """``stage-<name>-<hash>``: eight hex digits of a hash of everything the Job would hold.

    A Job's pod template is immutable, so anything that changes it (the data set, the claim of a
    replaced file system, the image, the script) makes a new Job.
    """

    def build(scope: Construct, job_name: str) -> None:
        _staging_objects(
            scope,
            dataset=dataset,
            namespace=namespace,
            claim_name=claim_name,
            image=image,
            job_name=job_name,
            root_zones=root_zones,
            fetch_image=fetch_image,
            region=region,
        )

    return f"stage-{dataset.name}-{spec_hash(build, kind='Job')}"


class DatasetStagingChart(cdk8s.Chart):
    """The Job ``stage-<name>-<hash>`` that stages ``dataset`` into the claim's ``/datasets``; with
    s3:// sources also its ServiceAccount (its Pod Identity role reads exactly those objects) and
    the way to the Pod Identity agent."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        dataset: Dataset,
        namespace: str,
        claim_name: str,
        root_zones: Sequence[str],
        vpc_cidr: str,
        image: str = DEFAULT_IMAGE,
        fetch_image: str = S3_FETCH_IMAGE,
        region: str = "us-east-1",
    ) -> None:
        super().__init__(scope, id)
        self.job_name = staging_job_name(
            dataset,
            namespace=namespace,
            claim_name=claim_name,
            root_zones=root_zones,
            image=image,
            fetch_image=fetch_image,
            region=region,
        )
        _staging_objects(
            self,
            dataset=dataset,
            namespace=namespace,
            claim_name=claim_name,
            image=image,
            job_name=self.job_name,
            root_zones=root_zones,
            fetch_image=fetch_image,
            region=region,
        )
        labels = _pod_labels(dataset, self.job_name)
        # The platform namespace denies all egress; the staging pod downloads over HTTPS (https://
        # URLs, and S3 for s3:// objects), from outside the cluster only.
        https_egress(
            self, name=f"{self.job_name}-egress", namespace=namespace, pod_labels=labels, vpc_cidr=vpc_cidr
        )
        if s3_sources(dataset):
            k8s.KubeServiceAccount(
                self,
                "ServiceAccount",
                metadata=k8s.ObjectMeta(name=staging_service_account(dataset), namespace=namespace),
                automount_service_account_token=False,
            )
            # Its AWS credentials come from the node's Pod Identity agent (link-local, port 80).
            k8s.KubeNetworkPolicy(
                self,
                "PodIdentity",
                metadata=k8s.ObjectMeta(
                    name=f"{self.job_name}-pod-identity", namespace=namespace, labels=labels
                ),
                spec=k8s.NetworkPolicySpec(
                    pod_selector=k8s.LabelSelector(match_labels=labels),
                    policy_types=["Egress"],
                    egress=[pod_identity_egress_rule()],
                ),
            )
