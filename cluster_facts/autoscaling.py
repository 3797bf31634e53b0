"""What the Kubernetes Cluster Autoscaler and the stack agree on: names, tags and scale-from-zero capacity.

The autoscaler scales each Trainium node group's Auto Scaling group. EKS tags those groups for
auto-discovery (``k8s.io/cluster-autoscaler/enabled``, ``k8s.io/cluster-autoscaler/<cluster>``) but
copies neither the node group's labels nor its taint to them, and nothing says how many Neuron devices
and EFA interfaces a node will advertise. With no node running, the autoscaler builds its picture of a
new node from the group's instance type and from ``node-template`` tags; the stack writes those tags
(constructs_trn/trainium_node_group.py) from ``node_template_tags``, which reads the instance catalog,
so a scale-up from zero expects exactly what the node will have. The autoscaler takes a template
node's allocatable to be its capacity; the tags give it the kubelet's allocatable cpu and memory
instead, and the EFA hugepages (cluster_facts/node_allocatable.py).

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
from cluster_facts.node_allocatable import HUGEPAGES_2MI_RESOURCE, template_allocatable

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
    "template_capacity",
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


def template_capacity(instance: TrainiumInstanceType) -> dict[str, str]:
    """cpu, memory and hugepages as the kubelet will allocate them, for the node template.

    The autoscaler reads cpu and memory from the instance type and takes them as allocatable
    (cluster-autoscaler v1.34.5 and v1.36.1 ``aws_manager.go`` ``buildNodeFromTemplate``); a tag of the same name
    overrides each, and any other ``resources/<name>`` tag (``hugepages-2Mi``) becomes one more.
    """
    allocatable = template_allocatable(instance)
    return {
        "cpu": f"{allocatable.cpu_millicores}m",
        "memory": f"{allocatable.memory_mib}Mi",
        HUGEPAGES_2MI_RESOURCE: f"{allocatable.hugepages_2mi_mib}Mi",
    }


def node_template_tags(instance: TrainiumInstanceType, *, node_group: str) -> dict[str, str]:
    """The Auto Scaling group tags that describe a node of ``node_group`` before one exists:
    its labels, its taint, its Neuron and EFA devices, and the cpu, memory and hugepages its kubelet
    will allocate (without which the autoscaler counts the instance type's whole memory)."""
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
        **{
            f"{RESOURCE_TAG_PREFIX}{resource}": amount
            for resource, amount in template_capacity(instance).items()
        },
    }
