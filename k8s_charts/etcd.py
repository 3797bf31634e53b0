"""A single etcd member for TorchElastic's ``etcd`` rendezvous backend.

``torch.distributed.run --rdzv_backend etcd --rdzv_endpoint etcd-server:2379`` talks to etcd
through python-etcd, i.e. the etcd **v2** API. etcd 3.6 removed it, so the image is a 3.5.x
release and the server runs with ``--enable-v2``. Rendezvous state lives only as long as a job,
so one replica on an emptyDir is enough; the Deployment recreates (never surges) so two members
with different data are never behind the Service at once.

The Service ``etcd-server`` is ClusterIP only. A NetworkPolicy admits port 2379 only from pods of
the same namespace that carry ``client_label`` (default ``volcano.sh/job-name``, which Volcano's job
controller puts on every pod of a Job and which, in a team's namespace, no one else may set:
k8s_charts/job_pod_admission.py), and denies all other ingress. (Enforced only where network
policy is on: on EKS, the VPC CNI's ``enableNetworkPolicy``. Its agent always admits the node's
own IP, so kubelet probes keep working.)
"""

from __future__ import annotations

import cdk8s
import cdk8s_plus_27 as kplus
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.image_pins import ETCD_IMAGE
from cluster_facts.kubernetes_names import (
    ETCD_CLIENT_PORT,
    ETCD_REPLICAS,
    ETCD_SERVICE_NAME,
    PLATFORM_PRIORITY_CLASS,
    VOLCANO_JOB_NAME_LABEL,
)
from k8s_charts.policy_exceptions import (
    PINNED_PULL_POLICY,
    digest_exceptions,
    policy_exceptions,
    pull_policy_exceptions,
)
from k8s_charts.resources import container_resources

__all__ = ["DEFAULT_IMAGE", "ETCD_LABELS", "EtcdChart"]

# The etcd release pinned in cluster_facts/image_pins.py (with its source): distroless-static, no
# shell, any uid works.
DEFAULT_IMAGE = ETCD_IMAGE
ETCD_LABELS: dict[str, str] = {"app.kubernetes.io/name": "etcd", "app.kubernetes.io/component": "rendezvous"}

_DATA_DIR = "/var/lib/etcd"
_UID = 65532  # distroless "nonroot"; etcd needs no root, and the emptyDir is writable by any uid


class EtcdChart(cdk8s.Chart):
    """Deployment, Service ``etcd-server`` and its NetworkPolicy, all in ``namespace``."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        namespace: str,
        image: str = DEFAULT_IMAGE,
        client_label: str = VOLCANO_JOB_NAME_LABEL,
    ) -> None:
        super().__init__(scope, id)
        if not client_label:
            # An empty podSelector would admit every pod of the namespace.
            raise ValueError("client_label must name a label")

        # Raw Deployment: the cdk8s-plus L2 adds its own selector label and resource defaults.
        k8s.KubeDeployment(
            self,
            "Deployment",
            metadata=k8s.ObjectMeta(
                name=ETCD_SERVICE_NAME,
                namespace=namespace,
                labels=ETCD_LABELS,
                annotations=policy_exceptions({**digest_exceptions(image), **pull_policy_exceptions()}),
            ),
            spec=k8s.DeploymentSpec(
                replicas=ETCD_REPLICAS,
                strategy=k8s.DeploymentStrategy(type="Recreate"),
                selector=k8s.LabelSelector(match_labels=ETCD_LABELS),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(labels=ETCD_LABELS),
                    spec=_pod_spec(image),
                ),
            ),
        )

        etcd_pods = kplus.Pods.select(self, "EtcdPods", labels=ETCD_LABELS)
        kplus.Service(
            self,
            "Service",
            metadata=cdk8s.ApiObjectMetadata(name=ETCD_SERVICE_NAME, namespace=namespace, labels=ETCD_LABELS),
            type=kplus.ServiceType.CLUSTER_IP,
            selector=etcd_pods,
            ports=[kplus.ServicePort(name="client", port=ETCD_CLIENT_PORT, target_port=ETCD_CLIENT_PORT)],
        )
        k8s.KubeNetworkPolicy(
            self,
            "NetworkPolicy",
            metadata=k8s.ObjectMeta(name=ETCD_SERVICE_NAME, namespace=namespace, labels=ETCD_LABELS),
            spec=k8s.NetworkPolicySpec(
                pod_selector=k8s.LabelSelector(match_labels=ETCD_LABELS),
                # Selected for Ingress: everything not listed below is denied.
                policy_types=["Ingress"],
                ingress=[
                    k8s.NetworkPolicyIngressRule(
                        # Pods of this namespace only (no namespaceSelector) that carry the label.
                        from_=[
                            k8s.NetworkPolicyPeer(
                                pod_selector=k8s.LabelSelector(
                                    match_expressions=[
                                        k8s.LabelSelectorRequirement(key=client_label, operator="Exists")
                                    ]
                                )
                            )
                        ],
                        ports=[
                            k8s.NetworkPolicyPort(
                                protocol="TCP", port=k8s.IntOrString.from_number(ETCD_CLIENT_PORT)
                            )
                        ],
                    )
                ],
            ),
        )


def _pod_spec(image: str) -> k8s.PodSpec:
    client_port = k8s.IntOrString.from_number(ETCD_CLIENT_PORT)
    return k8s.PodSpec(
        # etcd never calls the Kubernetes API.
        automount_service_account_token=False,
        priority_class_name=PLATFORM_PRIORITY_CLASS,
        enable_service_links=False,
        security_context=k8s.PodSecurityContext(
            run_as_non_root=True,
            run_as_user=_UID,
            run_as_group=_UID,
            fs_group=_UID,
            seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
        ),
        containers=[
            k8s.Container(
                name="etcd",
                image=image,
                command=["/usr/local/bin/etcd"],
                args=[
                    "--name=etcd-server",
                    f"--data-dir={_DATA_DIR}/data",
                    # TorchElastic's etcd rendezvous (python-etcd) speaks only the v2 API.
                    "--enable-v2=true",
                    f"--listen-client-urls=http://0.0.0.0:{ETCD_CLIENT_PORT}",
                    f"--advertise-client-urls=http://{ETCD_SERVICE_NAME}:{ETCD_CLIENT_PORT}",
                    # A single member: its peer port stays on loopback.
                    "--listen-peer-urls=http://127.0.0.1:2380",
                    "--initial-advertise-peer-urls=http://127.0.0.1:2380",
                    "--initial-cluster=etcd-server=http://127.0.0.1:2380",
                    "--initial-cluster-state=new",
                ],
                # Pinned, from a repository that keeps its tags (k8s_charts/policy_exceptions.py).
                image_pull_policy=PINNED_PULL_POLICY,
                ports=[k8s.ContainerPort(name="client", container_port=ETCD_CLIENT_PORT, protocol="TCP")],
                resources=container_resources(
                    requests={"cpu": "100m", "memory": "256Mi"}, limits={"cpu": "1", "memory": "1Gi"}
                ),
                security_context=k8s.SecurityContext(
                    allow_privilege_escalation=False,
                    capabilities=k8s.Capabilities(drop=["ALL"]),
                    read_only_root_filesystem=True,
                ),
                # /readyz and /livez exist since etcd 3.5.11; readiness also waits for a leader.
                readiness_probe=k8s.Probe(
                    http_get=k8s.HttpGetAction(path="/readyz", port=client_port),
                    period_seconds=5,
                    timeout_seconds=3,
                ),
                liveness_probe=k8s.Probe(
                    http_get=k8s.HttpGetAction(path="/livez", port=client_port),
                    initial_delay_seconds=10,
                    period_seconds=10,
                    timeout_seconds=5,
                    failure_threshold=6,
                ),
                volume_mounts=[k8s.VolumeMount(name="data", mount_path=_DATA_DIR)],
            )
        ],
        # Rendezvous state is per job: losing it with the pod is fine.
        volumes=[
            k8s.Volume(
                name="data", empty_dir=k8s.EmptyDirVolumeSource(size_limit=k8s.Quantity.from_string("1Gi"))
            )
        ],
    )
