"""TensorBoard served by the cluster over every run's output on FSx, for ``kubectl port-forward``.

A team's runs write under ``/teams/<team>/runs/<run id>/`` of the file system (their pods see it as
``/data/runs``; k8s_charts/runs/training_run.py); the BERT script puts its TensorBoard event files in
``neuron_tblogs_<time>_...`` directories there, one per attempt. TensorBoard runs in the platform
namespace and reads ``/teams`` through the platform's claim of the whole file system, mounted
read-only, so it lists every team's runs and attempts (``<team>/runs/<run id>/...``) and outlives them.

The image: the cluster's training image (cluster_facts/neuron_stack.py), which has TensorBoard
already: Neuron's pytorch-training-neuronx Dockerfile installs it "for running bert training
scripts" (aws-neuron/deep-learning-containers pytorch/training/2.9.0/Dockerfile.neuronx, tag 2.29.1).
Nothing is installed at run time: ``trainium-system`` denies all egress (k8s_charts/shared/isolation.py) and
TensorBoard needs none. The image comes through the account's pull-through cache (public.ecr.aws),
pinned by tag, is the same TensorBoard that wrote the runs' events, and is x86_64 like the system
nodes (AL2023_x86_64_STANDARD). Its size (several GB) is pulled once per system node; no maintained
TensorBoard image is published on ECR Public, quay.io or registry.k8s.io, and the Docker Hub ones
are the full TensorFlow image or unofficial (and need a Docker Hub credential for the cache).

Placement and access: no toleration for the Trainium taint, so the pod runs on the system nodes.
The Service is ClusterIP. ``kubectl port-forward`` works: the container runtime opens the forwarded
connection from the pod's own node (containerd 1.x from inside the pod's network namespace to
localhost, 2.x from the node to the pod's address), and NetworkPolicy never blocks a pod's own node
(Kubernetes' NetworkPolicy documentation; the VPC CNI's policy agent always admits the node's
address, aws/aws-network-policy-agent#65).

The API server's service proxy (``/api/v1/namespaces/<ns>/services/tensorboard:6006/proxy/``, what
the canary reads the run list through, with RBAC ``get`` on that one ``services/proxy``) is another
path: the API server dials the pod's address itself, from the EKS control plane's network interfaces
in the cluster's subnets. In the VPC, the cluster security group admits it: EKS puts that group on
the control plane's interfaces and, when a managed node group's launch template names no security
group (the system nodes'), on the nodes, whose pods share the node's; its default inbound rule
admits all traffic from the group itself (EKS user guide, "View Amazon EKS security group
requirements for clusters"). In the cluster, the NetworkPolicy admits exactly that: TCP 6006 from
the VPC's CIDR, the narrowest block that holds those interfaces (EKS places and replaces them in the
same private subnets as the nodes and pods, at addresses it chooses). Pods with addresses in the VPC
match the block too, so the reach of TensorBoard is decided by the senders' egress: team pods may
open no connection inside the VPC but to etcd, DNS and the API server
(k8s_charts/network/tenant_network.py), the platform namespace denies all egress, and Volcano's pods reach
only DNS and the API server on 443 (k8s_charts/network/system_network.py); pods without an egress policy
(the EKS add-ons' in kube-system: the cluster's own components) can reach it, read-only, as they
can reach the API server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cdk8s
import cdk8s_plus_27 as kplus
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.images import pinned_image_problem
from cluster_facts.kubernetes_names import DATA_MOUNT, TEAMS_DIR
from cluster_facts.neuron_stack import TRAINING_IMAGE
from k8s_charts.network.tenant_network import tcp_port
from k8s_charts.shared.policy_exceptions import (
    PINNED_PULL_POLICY,
    digest_exceptions,
    policy_exceptions,
    pull_policy_exceptions,
)
from k8s_charts.shared.resources import container_resources

__all__ = [
    "DEFAULT_IMAGE",
    "PORT",
    "RELOAD_SECONDS",
    "SERVICE_PROXY_NAME",
    "TENSORBOARD_LABELS",
    "TENSORBOARD_NAME",
    "TensorBoardChart",
    "TensorBoardValues",
    "runs_directory",
]

# The training image, TensorBoard included (see above).
DEFAULT_IMAGE = TRAINING_IMAGE
TENSORBOARD_NAME = "tensorboard"
TENSORBOARD_LABELS: dict[str, str] = {
    "app.kubernetes.io/name": TENSORBOARD_NAME,
    "app.kubernetes.io/component": "run-viewer",
}
PORT = 6006  # TensorBoard's default
RELOAD_SECONDS = 30
"""``--reload_interval``: Lustre metadata is shared with training, so TensorBoard looks for new
events every 30 s, not 5; a new run is listed from the first reload after its event file appears
(the canary waits for that: operator_tools/canary.py)."""
# How the API server's service proxy names the Service's port, and what RBAC's resourceNames must
# name for ``get`` on ``services/proxy`` (/api/v1/namespaces/<ns>/services/<this>/proxy/...).
SERVICE_PROXY_NAME = f"{TENSORBOARD_NAME}:{PORT}"

_UID = 65532  # any non-root uid: the image needs none, emptyDirs are writable by all, FSx is read
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
    """Deployment, Service and NetworkPolicy ``tensorboard`` in ``namespace``."""

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
        api_server_cidr: str | None = None,
    ) -> None:
        """``api_server_cidr``: where the API server's service proxy connects from (the VPC's CIDR);
        None: no connection at all is admitted (port-forward still works)."""
        super().__init__(scope, id)
        problem = pinned_image_problem(image)
        if problem is not None:
            raise ValueError(problem)
        if memory_gib < 1:
            raise ValueError(f"memory_gib must be at least 1, got {memory_gib}")

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
                    metadata=k8s.ObjectMeta(labels=TENSORBOARD_LABELS),
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
        # Only the API server's service proxy, on TensorBoard's port; port-forward comes from the
        # node, which NetworkPolicy never blocks (see the module's docstring).
        k8s.KubeNetworkPolicy(
            self,
            "DenyIngress",
            metadata=k8s.ObjectMeta(name=TENSORBOARD_NAME, namespace=namespace, labels=TENSORBOARD_LABELS),
            spec=k8s.NetworkPolicySpec(
                pod_selector=k8s.LabelSelector(match_labels=TENSORBOARD_LABELS),
                policy_types=["Ingress"],
                ingress=[
                    k8s.NetworkPolicyIngressRule(
                        from_=[k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=api_server_cidr))],
                        ports=[tcp_port(PORT)],
                    )
                ]
                if api_server_cidr
                else None,
            ),
        )


def _pod_spec(
    *, image: str, claim_name: str, logdir: str, memory: str, team_groups: Sequence[int]
) -> k8s.PodSpec:
    http = k8s.IntOrString.from_number(PORT)
    environment = [
        k8s.EnvVar(name="HOME", value=_TMP),
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
        containers=[
            k8s.Container(
                name=TENSORBOARD_NAME,
                image=image,
                command=["python3", "-m", "tensorboard.main"],
                args=[
                    f"--logdir={logdir}",
                    # Every address of the pod (port-forward reaches it on its pod IP or on localhost).
                    "--bind_all",
                    f"--port={PORT}",
                    f"--reload_interval={RELOAD_SECONDS}",
                ],
                env=environment,
                # Pinned, from a repository that keeps its tags (k8s_charts/shared/policy_exceptions.py).
                image_pull_policy=PINNED_PULL_POLICY,
                ports=[k8s.ContainerPort(name="http", container_port=PORT, protocol="TCP")],
                # TensorBoard holds every run's scalars in memory: ``memory_gib`` (configured) is its
                # request and its limit alike, so it is never over-committed on a system node; a
                # reload of many runs is CPU bound for a while, idle in between.
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
            k8s.Volume(name="tmp", empty_dir=k8s.EmptyDirVolumeSource(size_limit=_quantity("1Gi"))),
        ],
    )
