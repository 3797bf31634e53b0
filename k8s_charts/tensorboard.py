"""TensorBoard served by the cluster over every run's output on FSx, for ``kubectl port-forward``.

A team's runs write under ``/teams/<team>/runs/<run id>/`` of the file system (their pods see it as
``/data/runs``; k8s_charts/training_run.py); the BERT script puts its TensorBoard event files in
``neuron_tblogs_<time>_...`` directories there, one per attempt. TensorBoard runs in the platform
namespace and reads ``/teams`` through the platform's claim of the whole file system, mounted
read-only, so it lists every team's runs and attempts (``<team>/runs/<run id>/...``) and outlives them.

The image: no maintained TensorBoard image is published on ECR Public, and the Docker Hub ones are
either the full TensorFlow image or unofficial. The pod instead runs a Docker Official Python image
from ECR Public (no Docker Hub quota) and, in an init container, installs TensorBoard and its
dependencies from PyPI into an emptyDir with ``pip --require-hashes --only-binary=:all: --no-deps``:
every file is named by version and SHA-256 (wheels for x86_64 and arm64, so any system node type
works), nothing is built, nothing unlisted is fetched. A new pin is a new ConfigMap content, and the
pod template carries its hash, so the Deployment rolls.

Placement and access: no toleration for the Trainium taint, so the pod runs on the system nodes.
The Service is ClusterIP; a NetworkPolicy admits no pod at all. ``kubectl port-forward`` still
works: the container runtime opens the forwarded connection from the pod's own node (containerd
1.x from inside the pod's network namespace to localhost, 2.x from the node to the pod's address),
and NetworkPolicy never blocks a pod's own node (Kubernetes' NetworkPolicy documentation; the VPC
CNI's policy agent always admits the node's address, aws/aws-network-policy-agent#65).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import cdk8s
import cdk8s_plus_27 as kplus
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.images import pinned_image_problem
from cluster_facts.kubernetes_names import DATA_MOUNT, TEAMS_DIR
from k8s_charts.isolation import deny_ingress
from k8s_charts.policy_exceptions import (
    PINNED_PULL_POLICY,
    digest_exceptions,
    policy_exceptions,
    pull_policy_exceptions,
)
from k8s_charts.resources import container_resources

__all__ = [
    "DEFAULT_IMAGE",
    "PORT",
    "REQUIREMENTS",
    "TENSORBOARD_LABELS",
    "TENSORBOARD_NAME",
    "TensorBoardChart",
    "TensorBoardValues",
    "runs_directory",
]

# Docker Official Image python:3.12.12-slim-trixie (docker-library/official-images library/python,
# amd64 and arm64v8), mirrored on ECR Public.
DEFAULT_IMAGE = "public.ecr.aws/docker/library/python:3.12.12-slim-trixie"
TENSORBOARD_NAME = "tensorboard"
TENSORBOARD_LABELS: dict[str, str] = {
    "app.kubernetes.io/name": TENSORBOARD_NAME,
    "app.kubernetes.io/component": "run-viewer",
}
PORT = 6006  # TensorBoard's default

# TensorBoard 2.21.0 and its full dependency closure for CPython 3.12 on Linux (pip download
# --only-binary=:all: --python-version 3.12 for manylinux x86_64 and aarch64), every wheel of each
# version that pip could pick there, hashes from PyPI's simple API.
_PINS: dict[str, tuple[str, ...]] = {
    "tensorboard==2.21.0": ("7279316dcb6bd5bc391d623dea841531299cde1887310e8133bc34a996d32255",),
    "absl-py==2.5.1": ("721200f2f0e9960f2ca9dc3a2a706b201f5f75d812c158f059cbbe29eeafbdb8",),
    "grpcio==1.85.1": (
        "843aa281a48188621f50880496d35defed51298bcb66d5345d5f282fd3f87354",
        "a1a72d19c0ab84b4b73b6c47eeaade76d84b1973a51593ff1160a73df33d03d9",
    ),
    "markdown==3.11.3": ("e1a31a112232504d753e5c01bb8c2de90d3f0ba986b063e10770cf7695b09e73",),
    "markupsafe==3.0.4": (
        "6a45c3d514f2436064db00d7fc8778d888f0236ebfed649b53d13a59e69ad51b",
        "8e124f974786f831d6043728e38296969d3579db8896fe004682f5758e613581",
    ),
    "numpy==2.5.5": (
        "a0750f2156d53446caca85663d0b65d67214e1664b9050454a731ea1418d176a",
        "704d819265e5d1064d932968e9ee85fff2103ccc78c05b878c06943ba27b8507",
    ),
    "packaging==26.3": ("d7193f7c8e4e93f444fde0262bf90af30e16fa0ad0ad44cb553c87339b23cd1c",),
    "pillow==13.0.0": (
        "8bf295fe459343bc6093c8e5e0df60bfa189e0fcb775a22e2c2488fdeccc6c0d",
        "42d63be3af4f9b951b199b0a9d23365d37ab14687e6d77b74940432c8515c4ca",
    ),
    "protobuf==7.36.2": (
        "e11e1f0180583a2af89db6a2ecd9e8dc40aa6d2988ca175bfd0e6d12ea72d74e",
        "89f23aa53c24553a2416fd4fd1ec06f74fa42b14b546d8883128813f775bbfd2",
        "bdb3a345d48db958e6ce1f18e508beb0cc981d64f24088427549c866cd039f1e",
    ),
    "setuptools==84.2.1": ("ca140b45d5325a9478f880e351484f62fef15f336462e449ca0c03c873d589c2",),
    "tensorboard-data-server==0.7.2": (
        "7e0610d205889588983836ec05dc098e80f97b7e7bbff7e994ebb78f578d0ddb",
        "ef687163c24185ae9754ed5650eb5bc4d84ff257aabdc33f0cc6f74d8ba54530",
    ),
    "typing-extensions==4.16.0": ("481caa481374e813c1b176ada14e97f1f67a4539ce9cfeb3f350d78d6370c2e8",),
    "werkzeug==3.1.9": ("6392e50c78460ba618e5b21f08a71f59c99ce99cdc6cf6e3dd7e6ccca8754fab",),
}
REQUIREMENTS: tuple[str, ...] = tuple(
    " ".join([pin, *(f"--hash=sha256:{digest}" for digest in digests)]) for pin, digests in _PINS.items()
)
"""pip requirement lines, each with the hash of every wheel pip may choose on Linux x86_64 or arm64."""

_UID = 65532  # any non-root uid: the image needs none, emptyDirs are writable by all, FSx is read
_PACKAGES = "/opt/tensorboard"
_REQUIREMENTS_DIR = "/etc/tensorboard"
_REQUIREMENTS_FILE = "requirements.txt"
_TMP = "/tmp"


@dataclass(frozen=True, kw_only=True)
class TensorBoardValues:
    """What the configuration decides about the plan's TensorBoard step."""

    applied: bool = True
    """False: rendered for review and ``kubectl apply`` only."""
    memory_gib: int = 2
    """The container's memory request and limit."""


def runs_directory() -> str:
    """Where TensorBoard reads: every team's directory, ``<team>/runs/<run id>`` in each."""
    return f"{DATA_MOUNT}/{TEAMS_DIR}"


def _quantity(value: str) -> k8s.Quantity:
    return k8s.Quantity.from_string(value)


class TensorBoardChart(cdk8s.Chart):
    """ConfigMap, Deployment, Service and NetworkPolicy ``tensorboard`` in ``namespace``."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        namespace: str,
        claim_name: str,
        memory_gib: int = 2,
        team_groups: Sequence[int] = (),
        image: str = DEFAULT_IMAGE,
    ) -> None:
        super().__init__(scope, id)
        problem = pinned_image_problem(image)
        if problem is not None:
            raise ValueError(problem)
        if memory_gib < 1:
            raise ValueError(f"memory_gib must be at least 1, got {memory_gib}")

        requirements = "\n".join(REQUIREMENTS) + "\n"
        metadata = k8s.ObjectMeta(name=TENSORBOARD_NAME, namespace=namespace, labels=TENSORBOARD_LABELS)
        k8s.KubeConfigMap(self, "Requirements", metadata=metadata, data={_REQUIREMENTS_FILE: requirements})

        # Raw Deployment: the cdk8s-plus L2 adds its own selector label and resource defaults.
        k8s.KubeDeployment(
            self,
            "Deployment",
            metadata=k8s.ObjectMeta(
                name=TENSORBOARD_NAME,
                namespace=namespace,
                labels=TENSORBOARD_LABELS,
                annotations=policy_exceptions({**digest_exceptions(image), **pull_policy_exceptions()}),
            ),
            spec=k8s.DeploymentSpec(
                replicas=1,
                selector=k8s.LabelSelector(match_labels=TENSORBOARD_LABELS),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(
                        labels=TENSORBOARD_LABELS,
                        # A new pin is a new pod: the ConfigMap alone would not restart it.
                        annotations={
                            "trainium/requirements-sha256": hashlib.sha256(requirements.encode()).hexdigest()
                        },
                    ),
                    spec=_pod_spec(
                        image=image,
                        claim_name=claim_name,
                        logdir=runs_directory(),
                        memory=f"{memory_gib}Gi",
                        team_groups=team_groups,
                    ),
                ),
            ),
        )
        pods = kplus.Pods.select(self, "TensorBoardPods", labels=TENSORBOARD_LABELS)
        kplus.Service(
            self,
            "Service",
            metadata=cdk8s.ApiObjectMetadata(
                name=TENSORBOARD_NAME, namespace=namespace, labels=TENSORBOARD_LABELS
            ),
            type=kplus.ServiceType.CLUSTER_IP,
            selector=pods,
            ports=[kplus.ServicePort(name="http", port=PORT, target_port=PORT)],
        )
        # No pod may connect; port-forward comes from the node, which NetworkPolicy never blocks.
        deny_ingress(self, name=TENSORBOARD_NAME, namespace=namespace, pod_labels=TENSORBOARD_LABELS)


def _pod_spec(
    *, image: str, claim_name: str, logdir: str, memory: str, team_groups: Sequence[int]
) -> k8s.PodSpec:
    http = k8s.IntOrString.from_number(PORT)
    environment = [
        k8s.EnvVar(name="HOME", value=_TMP),
        k8s.EnvVar(name="PYTHONPATH", value=_PACKAGES),
        k8s.EnvVar(name="PYTHONUNBUFFERED", value="1"),
    ]
    security = k8s.SecurityContext(
        allow_privilege_escalation=False,
        capabilities=k8s.Capabilities(drop=["ALL"]),
        read_only_root_filesystem=True,
    )
    tmp = k8s.VolumeMount(name="tmp", mount_path=_TMP)
    return k8s.PodSpec(
        # TensorBoard never calls the Kubernetes API.
        automount_service_account_token=False,
        enable_service_links=False,
        security_context=k8s.PodSecurityContext(
            run_as_non_root=True,
            run_as_user=_UID,
            run_as_group=_UID,
            supplemental_groups=list(team_groups) or None,
            seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
        ),
        init_containers=[
            k8s.Container(
                name="install",
                image=image,
                command=["python", "-m", "pip"],
                args=[
                    "install",
                    "--require-hashes",
                    "--only-binary=:all:",
                    "--no-deps",
                    "--no-cache-dir",
                    "--disable-pip-version-check",
                    "--no-input",
                    "--progress-bar=off",
                    f"--target={_PACKAGES}",
                    f"--requirement={_REQUIREMENTS_DIR}/{_REQUIREMENTS_FILE}",
                ],
                env=environment,
                image_pull_policy=PINNED_PULL_POLICY,
                resources=container_resources(
                    requests={"cpu": "250m", "memory": "256Mi"}, limits={"cpu": "1", "memory": "1Gi"}
                ),
                security_context=security,
                volume_mounts=[
                    k8s.VolumeMount(name="packages", mount_path=_PACKAGES),
                    k8s.VolumeMount(name="requirements", mount_path=_REQUIREMENTS_DIR, read_only=True),
                    tmp,
                ],
            )
        ],
        containers=[
            k8s.Container(
                name=TENSORBOARD_NAME,
                image=image,
                command=["python", "-m", "tensorboard.main"],
                args=[
                    f"--logdir={logdir}",
                    # Every address of the pod (port-forward reaches it on its pod IP or on localhost).
                    "--bind_all",
                    f"--port={PORT}",
                    # Lustre metadata is shared with training: look for new events every 30 s, not 5.
                    "--reload_interval=30",
                ],
                env=environment,
                # Pinned, from a repository that keeps its tags (k8s_charts/policy_exceptions.py).
                image_pull_policy=PINNED_PULL_POLICY,
                ports=[k8s.ContainerPort(name="http", container_port=PORT, protocol="TCP")],
                resources=container_resources(
                    requests={"cpu": "100m", "memory": memory}, limits={"cpu": "2", "memory": memory}
                ),
                security_context=security,
                # The first scan of many runs can take a while; the server answers once it is up.
                startup_probe=k8s.Probe(
                    http_get=k8s.HttpGetAction(path="/", port=http), period_seconds=10, failure_threshold=30
                ),
                readiness_probe=k8s.Probe(
                    http_get=k8s.HttpGetAction(path="/", port=http), period_seconds=10, timeout_seconds=5
                ),
                liveness_probe=k8s.Probe(
                    http_get=k8s.HttpGetAction(path="/", port=http),
                    period_seconds=30,
                    timeout_seconds=10,
                    failure_threshold=5,
                ),
                volume_mounts=[
                    k8s.VolumeMount(name="data", mount_path=DATA_MOUNT, read_only=True),
                    k8s.VolumeMount(name="packages", mount_path=_PACKAGES, read_only=True),
                    tmp,
                ],
            )
        ],
        volumes=[
            k8s.Volume(
                name="data",
                persistent_volume_claim=k8s.PersistentVolumeClaimVolumeSource(
                    claim_name=claim_name, read_only=True
                ),
            ),
            k8s.Volume(name="packages", empty_dir=k8s.EmptyDirVolumeSource(size_limit=_quantity("1Gi"))),
            k8s.Volume(
                name="requirements",
                config_map=k8s.ConfigMapVolumeSource(name=TENSORBOARD_NAME),
            ),
            k8s.Volume(name="tmp", empty_dir=k8s.EmptyDirVolumeSource(size_limit=_quantity("1Gi"))),
        ],
    )
