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
  ``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`` annotation (k8s_charts/runs/training_run.py), and
  finished pods never pin one. ``ignore-daemonsets-utilization``: the device plugins and agents on
  every Trainium node do not make an idle node look busy.
- ``balance-similar-node-groups`` off: each Trainium group is its own placement group and reservation.
- ``status-taint``: the taints a node takes for its own verdicts stay out of the autoscaler's picture of
  a new node of the group.
- ``scale-down-unready-time``, ``ok-total-unready-count``, ``max-total-unready-percentage``: a node that
  never becomes ready goes before EKS's repair would replace it in place, and the Trainium groups alone
  never halt the autoscaler (the arithmetic: ``cluster_facts.autoscaling``, ``SCALE_DOWN_UNREADY_MINUTES``
  and ``ok_total_unready_count``; docs/capacity.md, "A failure that hits every new node").

Credentials come from EKS Pod Identity (constructs_trn/cluster_autoscaler.py associates the
ServiceAccount named here with a least-privilege role); no key or annotation is set here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cluster_facts.autoscaling import (
    AUTOSCALER_NAME,
    AUTOSCALER_STATUS_CONFIGMAP,
    MAX_TOTAL_UNREADY_PERCENTAGE,
    SCALE_DOWN_UNREADY_MINUTES,
    cores_total,
    discovery_tags,
    memory_total,
    ok_total_unready_count,
)
from cluster_facts.cluster_scale import AUTOSCALER_FULL_CORE_NODES
from cluster_facts.images import pinned_image_problem
from cluster_facts.kubernetes_names import FABRIC_CHECK_TAINT_KEY
from cluster_facts.node_check import EFA_SUSPECT_TAINT_KEY
from cluster_facts.versions import CLUSTER_AUTOSCALER_IMAGE_REPOSITORY

__all__ = ["AutoscalerValues", "autoscaler_resources", "cluster_autoscaler_values"]


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
    trainium_max_nodes: int
    """The sum of the Trainium groups' ``max_size``: as many nodes as could be unready at once."""
    trainium_max_cores: int
    """The vCPUs of those nodes: room the cluster-wide ``--cores-total`` leaves them."""
    trainium_max_memory_gib: int
    """Their memory, in GiB, for ``--memory-total``."""
    dra: bool = False
    """Some node groups take their devices through DRA: the autoscaler simulates claims
    (``--enable-dynamic-resource-allocation``, off by default at 1.33 to 1.35; cluster_facts/dra.py
    says why it still cannot scale such a group up from zero nodes)."""

    def __post_init__(self) -> None:
        problem = pinned_image_problem(self.image)
        if problem is not None:
            raise ValueError(problem)
        if self.scale_down_unneeded_minutes < 1 or self.max_node_provision_minutes < 1:
            raise ValueError("the autoscaler's scale-down and provision times must be at least a minute")
        if self.trainium_max_nodes < 1:
            raise ValueError("the Trainium groups must be able to hold at least one node")

    @property
    def image(self) -> str:
        return f"{self.image_repository}:{self.image_tag}"


def autoscaler_resources(trainium_max_nodes: int) -> dict[str, dict[str, str]]:
    """The AWS example manifest's sizes (cluster-autoscaler cloudprovider/aws/examples/
    cluster-autoscaler-autodiscover.yaml: 100m and 600Mi, requests and limits). The CPU limit is
    higher: a scale-up decision simulates each pending pod on each group's template, CPU bound for
    the seconds it takes, and a 100m cap would stretch a gang's scale-up. From
    AUTOSCALER_FULL_CORE_NODES Trainium nodes the request is that core too (the autoscaler's FAQ:
    request a full core in a bigger cluster). The memory stays: 263 MiB peak at 1,024 simulated
    nodes (docs/performance.md, "Scale")."""
    cpu = "1" if trainium_max_nodes >= AUTOSCALER_FULL_CORE_NODES else "100m"
    return {"requests": {"cpu": cpu, "memory": "600Mi"}, "limits": {"cpu": "1", "memory": "600Mi"}}


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
            # A node that never becomes ready: NotStarted for MaxNodeStartupTime (15 min), Unready
            # then, removed this long after: 15 + 10 = 25 min from its creation, before EKS's repair
            # replaces it in place at 30 (cluster_facts.autoscaling.SCALE_DOWN_UNREADY_MINUTES).
            "scale-down-unready-time": _minutes(SCALE_DOWN_UNREADY_MINUTES),
            # The halt (clusterstate.IsClusterHealthy) needs more unready nodes than both limits: with
            # the count at every Trainium node the groups may hold, Trainium nodes alone never halt it.
            "ok-total-unready-count": ok_total_unready_count(values.trainium_max_nodes),
            "max-total-unready-percentage": MAX_TOTAL_UNREADY_PERCENTAGE,
            # The cluster-wide limits count every node: the defaults (320,000 cores) would cap a
            # 2,048-node trn2 cluster below its groups' max_size (cluster_facts.autoscaling.cores_total).
            "cores-total": cores_total(values.trainium_max_cores),
            "memory-total": memory_total(values.trainium_max_memory_gib),
            # A node's own verdicts (the node check's EFA suspicion, the fabric check's failure) are no
            # part of a new node of its group: status taints are dropped from the autoscaler's picture of
            # one (taints.SanitizeTaints; FAQ "Status taints"). Without this, a group whose Ready nodes all
            # carried one kept it in the picture the autoscaler caches (--node-info-cache-expire-time, 10
            # years), and no gang scaled the group up again until the autoscaler restarted. The node
            # check's failed taint is deliberately not one (cluster_facts/node_check.py). The chart
            # renders each key up to its first "_", so the flag is given twice.
            "status-taint_efa-errors": EFA_SUSPECT_TAINT_KEY,
            "status-taint_fabric-check": FABRIC_CHECK_TAINT_KEY,
            "skip-nodes-with-system-pods": True,
            "skip-nodes-with-local-storage": False,
            "ignore-daemonsets-utilization": True,
            "balance-similar-node-groups": False,
            "write-status-configmap": True,
            "status-config-map-name": AUTOSCALER_STATUS_CONFIGMAP,
            **({"enable-dynamic-resource-allocation": True} if values.dra else {}),
        },
        # One replica: the autoscaler is a single writer (leader election guards a second one anyway).
        "replicaCount": 1,
        "priorityClassName": "system-cluster-critical",
        "resources": autoscaler_resources(values.trainium_max_nodes),
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
