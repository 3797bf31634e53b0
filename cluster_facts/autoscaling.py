"""What the Kubernetes Cluster Autoscaler and the stack agree on: names, tags and scale-from-zero capacity.

The autoscaler scales each Trainium node group's Auto Scaling group. EKS tags those groups for
auto-discovery (``k8s.io/cluster-autoscaler/enabled``, ``k8s.io/cluster-autoscaler/<cluster>``) but
copies neither the node group's labels nor its taint to them, and nothing says how many Neuron devices
and EFA interfaces a node will advertise. With no node running, the autoscaler builds its picture of a
new node from the group's instance type and from ``node-template`` tags; the stack writes those tags
(constructs_trn/trainium_node_group.py) from ``node_template_tags``, which reads the instance catalog,
so a scale-up from zero expects exactly what the node will have.

Pure data: the stack, the autoscaler's Helm values and the pipeline's deployment check read it.
"""

from __future__ import annotations

from cluster_facts.instance_catalog import TrainiumInstanceType
from cluster_facts.kubernetes_names import (
    EFA_RESOURCE,
    NEURON_CORE_RESOURCE,
    NEURON_RESOURCE,
    NEURON_TAINT_KEY,
    NEURON_TAINT_VALUE,
    NODE_GROUP_LABEL,
    trainium_node_labels,
)

__all__ = [
    "AUTOSCALER_NAME",
    "AUTOSCALER_NAMESPACE",
    "AUTOSCALER_STATUS_CONFIGMAP",
    "LABEL_TAG_PREFIX",
    "RESOURCE_TAG_PREFIX",
    "TAINT_TAG_PREFIX",
    "TEMPLATE_TAG_PREFIX",
    "TRAINIUM_DISCOVERY_TAG",
    "discovery_tags",
    "node_template_tags",
    "owner_tag",
    "scale_from_zero_resources",
]

AUTOSCALER_NAMESPACE = "kube-system"
AUTOSCALER_NAME = "cluster-autoscaler"
"""The Deployment, its ServiceAccount (the Pod Identity association names it) and the Helm release."""
AUTOSCALER_STATUS_CONFIGMAP = "cluster-autoscaler-status"
"""Where the autoscaler writes its health and each node group's sizes (its default name)."""

TEMPLATE_TAG_PREFIX = "k8s.io/cluster-autoscaler/node-template/"
LABEL_TAG_PREFIX = f"{TEMPLATE_TAG_PREFIX}label/"
TAINT_TAG_PREFIX = f"{TEMPLATE_TAG_PREFIX}taint/"
RESOURCE_TAG_PREFIX = f"{TEMPLATE_TAG_PREFIX}resources/"

TRAINIUM_DISCOVERY_TAG = f"{LABEL_TAG_PREFIX}{NODE_GROUP_LABEL}"
"""Only the Trainium groups' Auto Scaling groups carry it (the stack writes it): the autoscaler
discovers them and not the system node group, whose size stays the configuration's."""


def owner_tag(cluster_name: str) -> str:
    """The tag EKS puts on every Auto Scaling group of the cluster's managed node groups (value ``owned``)."""
    return f"k8s.io/cluster-autoscaler/{cluster_name}"


def discovery_tags(cluster_name: str) -> tuple[str, ...]:
    """The tag keys an Auto Scaling group must carry, all of them, for the autoscaler to scale it."""
    return ("k8s.io/cluster-autoscaler/enabled", owner_tag(cluster_name), TRAINIUM_DISCOVERY_TAG)


def scale_from_zero_resources(instance: TrainiumInstanceType) -> dict[str, int]:
    """The extended resources a new node of ``instance`` will advertise, from the catalog."""
    return {
        NEURON_RESOURCE: instance.chips,
        NEURON_CORE_RESOURCE: instance.neuron_cores,
        EFA_RESOURCE: instance.efa_interfaces,
    }


def node_template_tags(instance: TrainiumInstanceType, *, node_group: str) -> dict[str, str]:
    """The Auto Scaling group tags that describe a node of ``node_group`` before one exists:
    its labels, its taint and its Neuron and EFA devices (the autoscaler reads cpu and memory from
    the instance type in the launch template)."""
    return {
        **{
            f"{LABEL_TAG_PREFIX}{key}": value
            for key, value in trainium_node_labels(instance, node_group=node_group).items()
        },
        f"{TAINT_TAG_PREFIX}{NEURON_TAINT_KEY}": f"{NEURON_TAINT_VALUE}:NoSchedule",
        **{
            f"{RESOURCE_TAG_PREFIX}{resource}": str(amount)
            for resource, amount in scale_from_zero_resources(instance).items()
        },
    }
