"""The Kubernetes Cluster Autoscaler's Helm values: scale the Trainium node groups from zero for queued
gangs, never take a node from under a training pod, let idle nodes go after a few minutes.

The chart (``cluster-autoscaler`` CLUSTER_AUTOSCALER_CHART_VERSION, vendored in charts/)
renders ``extraArgs`` as ``--<key>=<value>`` flags of the autoscaler (templates/deployment.yaml). What
each flag does is from the autoscaler's FAQ and ``config/flags/flags.go`` at the pinned release:

- ``node-group-auto-discovery`` (``autoDiscovery.tags``): every Auto Scaling group carrying all the
  tags in ``cluster_facts.autoscaling.discovery_tags``: EKS's two on each managed node group, plus the
  one the stack writes only on Trainium groups. The system node group keeps its configured size.
- ``scale-down-unneeded-time``: a node with no training pod (DaemonSets do not count, see below) goes
  after this long. ``scale-down-delay-after-add``: no scale-down this long after a scale-up.
- ``max-node-provision-time``: a node that has not joined by then is given up; the autoscaler lowers
  the group's desired size again and backs the group off (a partial scale-up is bounded).
- ``skip-nodes-with-system-pods`` (true) keeps kube-system Deployments' nodes; ``skip-nodes-with-local-storage``
  (false): a pod's emptyDir alone does not pin a node; a training pod is pinned by its
  ``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`` annotation (k8s_charts/training_run.py), and
  finished pods never pin one. ``ignore-daemonsets-utilization``: the device plugins and agents on
  every Trainium node do not make an idle node look busy.
- ``balance-similar-node-groups`` off: each Trainium group is its own placement group and reservation.

Credentials come from EKS Pod Identity (constructs_trn/cluster_autoscaler.py associates the
ServiceAccount named here with a least-privilege role); no key or annotation is set here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cluster_facts.autoscaling import AUTOSCALER_NAME, AUTOSCALER_STATUS_CONFIGMAP, discovery_tags
from cluster_facts.images import pinned_image_problem
from cluster_facts.versions import CLUSTER_AUTOSCALER_IMAGE_REPOSITORY

__all__ = ["AutoscalerValues", "cluster_autoscaler_values"]


@dataclass(frozen=True, kw_only=True)
class AutoscalerValues:
    cluster_name: str
    region: str
    image_tag: str
    """The autoscaler release matching the cluster's Kubernetes minor version."""
    image_repository: str = CLUSTER_AUTOSCALER_IMAGE_REPOSITORY
    """Upstream's repository, or its pull-through cache in the account's registry."""
    scale_down_unneeded_minutes: int
    scale_down_delay_after_add_minutes: int
    max_node_provision_minutes: int
    expander: str

    def __post_init__(self) -> None:
        problem = pinned_image_problem(self.image)
        if problem is not None:
            raise ValueError(problem)
        if self.scale_down_unneeded_minutes < 1 or self.max_node_provision_minutes < 1:
            raise ValueError("the autoscaler's scale-down and provision times must be at least a minute")

    @property
    def image(self) -> str:
        return f"{self.image_repository}:{self.image_tag}"


def _minutes(minutes: int) -> str:
    return f"{minutes}m"


def cluster_autoscaler_values(values: AutoscalerValues) -> dict[str, Any]:
    """The chart's values (every key exists in the chart's values.yaml; tests/schemas holds their types)."""
    return {
        "cloudProvider": "aws",
        "awsRegion": values.region,
        "autoDiscovery": {
            "clusterName": values.cluster_name,
            "tags": list(discovery_tags(values.cluster_name)),
        },
        "fullnameOverride": AUTOSCALER_NAME,
        "image": {
            "repository": values.image_repository,
            "tag": values.image_tag,
            "pullPolicy": "IfNotPresent",
        },
        "rbac": {"serviceAccount": {"create": True, "name": AUTOSCALER_NAME}},
        "extraArgs": {
            "logtostderr": True,
            "stderrthreshold": "info",
            "v": 2,
            "expander": values.expander,
            "scale-down-unneeded-time": _minutes(values.scale_down_unneeded_minutes),
            "scale-down-delay-after-add": _minutes(values.scale_down_delay_after_add_minutes),
            "max-node-provision-time": _minutes(values.max_node_provision_minutes),
            "skip-nodes-with-system-pods": True,
            "skip-nodes-with-local-storage": False,
            "ignore-daemonsets-utilization": True,
            "balance-similar-node-groups": False,
            "write-status-configmap": True,
            "status-config-map-name": AUTOSCALER_STATUS_CONFIGMAP,
        },
        # One replica: the autoscaler is a single writer (leader election guards a second one anyway).
        "replicaCount": 1,
        "priorityClassName": "system-cluster-critical",
        # The AWS example manifest's sizes (cluster-autoscaler cloudprovider/aws/examples/
        # cluster-autoscaler-autodiscover.yaml: 100m and 600Mi, requests and limits). The CPU limit
        # is higher: a scale-up decision simulates each pending pod on each group's template, CPU
        # bound for the seconds it takes, and a 100m cap would stretch a gang's scale-up.
        "resources": {
            "requests": {"cpu": "100m", "memory": "600Mi"},
            "limits": {"cpu": "1", "memory": "600Mi"},
        },
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "runAsGroup": 65534,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containerSecurityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
