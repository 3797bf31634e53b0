"""Stage the BERT-large data set and training script on the shared FSx for Lustre volume.

A one-off ``batch/v1`` Job mounts the FSx claim at ``/data`` and

- streams the public, pre-tokenized WikiCorpus tarball from S3 straight into ``tar`` (no copy of
  the archive lands on the file system), giving ``/data/bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128``;
- downloads ``dp_bert_large_hf_pretrain_hdf5.py`` and the optimizer module it imports by default
  (``adamw_fp32_optim_params.py``, looked up next to the script) from aws-neuron-samples at a
  pinned commit, each checked against its SHA-256.

Re-running is cheap and safe: the data set is unpacked again only when its marker file is missing
or names another URL (the marker is written after a complete unpack, so a run that died half-way
is redone from scratch), and a script is downloaded again only when the file on ``/data`` does
not have the expected checksum (downloads land in ``*.partial`` and are renamed when verified).
"""

from __future__ import annotations

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.images import pinned_image_problem
from cluster_facts.kubernetes_names import DATA_MOUNT
from cluster_facts.script_files import script_body
from k8s_charts.isolation import deny_ingress
from k8s_charts.policy_exceptions import policy_exceptions
from k8s_charts.resources import container_resources

__all__ = [
    "DATASET_DIR",
    "DATASET_MARKER",
    "DATASET_URL",
    "DEFAULT_IMAGE",
    "JOB_NAME",
    "OPTIMIZER_MODULE_PATH",
    "OPTIMIZER_MODULE_SHA256",
    "OPTIMIZER_MODULE_URL",
    "SCRIPT_PATH",
    "SCRIPT_SHA256",
    "SCRIPT_URL",
    "STAGING_SCRIPT",
    "DataStagingChart",
]

JOB_NAME = "bert-data-staging"

# Docker Official Image (docker-library/official-images, library/alpine: 3.24.1), mirrored on ECR
# Public so pulls need no Docker Hub quota. Its busybox has sh, wget (HTTPS via ssl_client), tar
# and sha256sum: everything the script below uses.
DEFAULT_IMAGE = "public.ecr.aws/docker/library/alpine:3.24.1"

# s3://neuron-s3/training_datasets/... from the Neuron tutorials; the bucket is public, so the
# virtual-hosted HTTPS URL works without credentials or the AWS CLI.
DATASET_URL = (
    "https://neuron-s3.s3.amazonaws.com/training_datasets/bert_pretrain_wikicorpus_tokenized_hdf5/"
    "bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128.tar"
)
# The tarball's single top-level directory.
DATASET_DIR = f"{DATA_MOUNT}/bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128"

# aws-neuron/aws-neuron-samples tag v2.27.0 (Neuron SDK 2.27) = commit 4ed5764f; the directory is
# unchanged on master since. Pinned by commit: a tag can move, a commit cannot.
_SAMPLES_DIR = (
    "https://raw.githubusercontent.com/aws-neuron/aws-neuron-samples/"
    "4ed5764f27bc7bf49e264b08667a350169e6b120/torch-neuronx/training/dp_bert_hf_pretrain"
)
SCRIPT_URL = f"{_SAMPLES_DIR}/dp_bert_large_hf_pretrain_hdf5.py"
SCRIPT_SHA256 = "8cb9bd61592d3a8c0db3844f53a01415c6ac09eab9f33f0dbbc6de5a7891cc43"
# The script's default optimizer (AdamW_FP32OptimParams) is imported from this file, found next to it.
OPTIMIZER_MODULE_URL = f"{_SAMPLES_DIR}/adamw_fp32_optim_params.py"
OPTIMIZER_MODULE_SHA256 = "0706c68035c3f9a66315ea9097dc79d28a0c94b67a6e05a9c9f1060cfca6fbae"
SCRIPT_PATH = f"{DATA_MOUNT}/dp_bert_large_hf_pretrain_hdf5.py"
# Written after a complete unpack (it holds the dataset URL); the training jobs wait for it.
DATASET_MARKER = f"{DATASET_DIR}.staged"
OPTIMIZER_MODULE_PATH = f"{DATA_MOUNT}/adamw_fp32_optim_params.py"

# POSIX sh (busybox ash); every value arrives as an environment variable set by the Job.
STAGING_SCRIPT = script_body("k8s_charts", "data_staging.sh")


class DataStagingChart(cdk8s.Chart):
    """The Job ``bert-data-staging``: data set and script onto the claim ``claim_name`` at ``/data``."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        namespace: str,
        claim_name: str,
        image: str = DEFAULT_IMAGE,
        dataset_url: str = DATASET_URL,
        script_url: str = SCRIPT_URL,
        script_sha256: str = SCRIPT_SHA256,
        optimizer_module_url: str = OPTIMIZER_MODULE_URL,
        optimizer_module_sha256: str = OPTIMIZER_MODULE_SHA256,
    ) -> None:
        super().__init__(scope, id)
        urls = {
            "dataset_url": dataset_url,
            "script_url": script_url,
            "optimizer_module_url": optimizer_module_url,
        }
        for label, url in urls.items():
            if not url.startswith("https://"):
                raise ValueError(f"{label} must be an https:// URL, got {url!r}")
        problem = pinned_image_problem(image)
        if problem is not None:
            raise ValueError(problem)

        environment = {
            "DATA_MOUNT": DATA_MOUNT,
            "DATASET_URL": dataset_url,
            "DATASET_DIR": DATASET_DIR,
            "DATASET_MARKER": DATASET_MARKER,
            "SCRIPT_URL": script_url,
            "SCRIPT_SHA256": script_sha256,
            "SCRIPT_PATH": SCRIPT_PATH,
            "OPTIMIZER_MODULE_URL": optimizer_module_url,
            "OPTIMIZER_MODULE_SHA256": optimizer_module_sha256,
            "OPTIMIZER_MODULE_PATH": OPTIMIZER_MODULE_PATH,
        }
        container = k8s.Container(
            name="stage",
            image=image,
            # The tag is pinned; Always only re-checks it against the registry at start.
            image_pull_policy="Always",
            command=["/bin/sh", "-c", STAGING_SCRIPT],  # k8s_charts/scripts/data_staging.sh
            env=[k8s.EnvVar(name=name, value=value) for name, value in environment.items()],
            resources=container_resources(
                # wget | tar is I/O bound; the memory limit leaves room for the page cache of the writes.
                requests={"cpu": "250m", "memory": "256Mi"},
                limits={"cpu": "1", "memory": "1Gi"},
            ),
            # Root only to own what it writes on the (root-owned) Lustre root; no capabilities needed.
            security_context=k8s.SecurityContext(
                allow_privilege_escalation=False,
                capabilities=k8s.Capabilities(drop=["ALL"]),
                read_only_root_filesystem=True,
            ),
            volume_mounts=[k8s.VolumeMount(name="data", mount_path=DATA_MOUNT)],
        )
        pod_labels = {"app.kubernetes.io/name": "bert-large", "app.kubernetes.io/component": "data-staging"}
        root_writer = (
            "the first writer on a new Lustre file system, whose root directory is root-owned; it runs "
            "with no capabilities, no privilege escalation and a read-only root file system"
        )
        k8s.KubeJob(
            self,
            "Job",
            metadata=k8s.ObjectMeta(
                name=JOB_NAME,
                namespace=namespace,
                labels=pod_labels,
                annotations=policy_exceptions({"CKV_K8S_23": root_writer, "CKV_K8S_40": root_writer}),
            ),
            spec=k8s.JobSpec(
                # Each retry starts over from the markers above; more than a few means a real fault.
                backoff_limit=3,
                # Streaming tens of GB from S3 takes minutes; a stalled run must not hang forever.
                active_deadline_seconds=6 * 3600,
                # No ttlSecondsAfterFinished: the finished Job stays as the record that staging ran.
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(labels=pod_labels),
                    spec=k8s.PodSpec(
                        restart_policy="Never",
                        automount_service_account_token=False,
                        enable_service_links=False,
                        security_context=k8s.PodSecurityContext(
                            seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
                        ),
                        containers=[container],
                        volumes=[
                            k8s.Volume(
                                name="data",
                                persistent_volume_claim=k8s.PersistentVolumeClaimVolumeSource(
                                    claim_name=claim_name
                                ),
                            )
                        ],
                    ),
                ),
            ),
        )
        # The job only downloads; nothing has a reason to connect to it.
        deny_ingress(self, name=JOB_NAME, namespace=namespace, pod_labels=pod_labels)
