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
  which waiting pods read to give up within minutes of a failure (k8s_charts/scripts/run_worker.sh).

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
from constructs import Construct

from cluster_facts.kubernetes_names import DATASETS_DIR, DATASETS_ROOT, PLATFORM_UID
from cluster_facts.script_files import script_body
from k8s_charts.identity import spec_hash
from k8s_charts.platform_jobs import DEFAULT_IMAGE, platform_job
from k8s_charts.tenant_network import https_egress

__all__ = [
    "DEFAULT_IMAGE",
    "STAGING_ATTEMPTS",
    "STAGING_DEADLINE_SECONDS",
    "STAGING_SCRIPT",
    "Dataset",
    "DatasetStagingChart",
    "RemoteFile",
    "staging_job_name",
]

# POSIX sh (busybox ash); the Job passes its inputs as environment variables and arguments.
STAGING_SCRIPT = script_body("k8s_charts", "stage_dataset.sh")
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
            if not url.startswith("https://"):
                raise ValueError(f"data set {self.name!r}: {url!r} is not an https:// URL")
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
) -> None:
    platform_job(
        scope,
        name=job_name,
        namespace=namespace,
        claim_name=claim_name,
        labels=_pod_labels(dataset, job_name),
        # k8s_charts/scripts/stage_dataset.sh, with the files as its arguments.
        script=STAGING_SCRIPT,
        script_name="stage-dataset",
        arguments=[
            part
            for remote in dataset.files
            for part in (remote.url, remote.sha256, dataset.path(remote.name))
        ],
        environment={
            "DATASET_NAME": dataset.name,
            "DATASET_DIR": dataset.directory,
            "MARKER": dataset.marker,
            "STAGED_VERSION": dataset.staged_version,
            "ARCHIVE_URL": dataset.archive_url or "",
            "ARCHIVE_SHA256": dataset.archive_sha256 or "",
        },
        backoff_limit=STAGING_BACKOFF_LIMIT,
        deadline_seconds=STAGING_DEADLINE_SECONDS,
        root_zones=root_zones,
        image=image,
        # Only the data sets, at the path the teams' pods see them: the staging pod cannot touch a
        # team's directory. The kubelet makes a missing sub-path directory as root, which is root
        # on these nodes; the layout Job makes it first anyway (k8s_charts/scripts/fsx_layout.sh).
        mount_path=DATASETS_ROOT,
        sub_path=DATASETS_DIR,
        # Never root: the layout Job hands /datasets to the platform's uid.
        run_as=PLATFORM_UID,
    )


def staging_job_name(
    dataset: Dataset,
    *,
    namespace: str,
    claim_name: str,
    root_zones: Sequence[str],
    image: str = DEFAULT_IMAGE,
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
        )

    return f"stage-{dataset.name}-{spec_hash(build, kind='Job')}"


class DatasetStagingChart(cdk8s.Chart):
    """The Job ``stage-<name>-<hash>`` that stages ``dataset`` into the claim's ``/datasets``."""

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
    ) -> None:
        super().__init__(scope, id)
        self.job_name = staging_job_name(
            dataset, namespace=namespace, claim_name=claim_name, root_zones=root_zones, image=image
        )
        _staging_objects(
            self,
            dataset=dataset,
            namespace=namespace,
            claim_name=claim_name,
            image=image,
            job_name=self.job_name,
            root_zones=root_zones,
        )
        # The platform namespace denies all egress; the staging pod downloads over HTTPS (the
        # configuration accepts only https:// URLs), from outside the cluster only.
        https_egress(
            self,
            name=f"{self.job_name}-egress",
            namespace=namespace,
            pod_labels=_pod_labels(dataset, self.job_name),
            vpc_cidr=vpc_cidr,
        )
