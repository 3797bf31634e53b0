"""Simulated nodes (kwok): the system nodes as the stack's system node group labels them, and Trainium
nodes made from exactly the facts the stack writes into each Auto Scaling group's node-template tags,
registered with the node group's startup taint (the node check's, cluster_facts/node_check.py).

``trainium_node`` is the one conversion from those tags (``cluster_facts.autoscaling.node_template_tags``:
labels, taint, Neuron and EFA resources) plus the catalog's CPU and memory (the autoscaler reads those
from the instance type) to a Node: when the facts lose the Neuron resource, so do these nodes, and
a training pod no longer fits on them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cluster_facts.autoscaling import (
    LABEL_TAG_PREFIX,
    RESOURCE_TAG_PREFIX,
    TAINT_TAG_PREFIX,
    node_template_tags,
)
from cluster_facts.instance_catalog import TrainiumInstanceType, instance_type
from cluster_facts.kubernetes_names import INSTANCE_TYPE_LABEL, NODE_GROUP_LABEL, system_node_group
from cluster_facts.node_check import NODE_CHECK_TAINT
from config import StackConfig

__all__ = [
    "FSX_CSI_DRIVER",
    "KWOK_NODE_ANNOTATION",
    "SIMULATED_GROUP_ANNOTATION",
    "csi_node",
    "group_nodes",
    "system_nodes",
    "trainium_node",
]

KWOK_NODE_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
"""kwok manages exactly the nodes with this annotation (``--manage-nodes-with-annotation-selector``)."""
SIMULATED_GROUP_ANNOTATION = "cluster-test/node-group"

# An m6i.2xlarge (the shipped system node type): 8 vCPUs, 32 GiB; EKS's max pods with the VPC CNI: 58.
_SYSTEM_CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "58", "ephemeral-storage": "100Gi"}
# A Trainium node's pod limit: EKS's max pods for trn1.32xlarge and trn1n.32xlarge (VPC CNI, no prefixes).
_TRAINIUM_PODS = "247"


FSX_CSI_DRIVER = "fsx.csi.aws.com"


def csi_node(node: str) -> dict[str, Any]:
    """What the FSx CSI driver's node plugin (the ``aws-fsx-csi-driver`` add-on's DaemonSet, on every
    node) registers: the driver, with no attach limit. Volcano counts a pod's CSI volumes as a
    resource (``attachable-volumes-csi-fsx.csi.aws.com``) and a node without the driver offers none of
    it: its queue then counts as overused and no pod that mounts the file system is ever placed."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": node},
        "spec": {"drivers": [{"name": FSX_CSI_DRIVER, "nodeID": node}]},
    }


def _node(
    name: str, *, labels: dict[str, str], capacity: dict[str, str], taints: list[dict[str, str]]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": dict(KWOK_NODE_ANNOTATION),
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **labels,
            },
        },
        "spec": {"taints": taints},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def system_nodes(config: StackConfig) -> list[dict[str, Any]]:
    """``system_nodes.desired_size`` untainted nodes with the labels EKS and the stack give them."""
    group = system_node_group(config.name)
    zones = config.vpc.availability_zones
    return [
        _node(
            f"{group}-{index}",
            labels={
                NODE_GROUP_LABEL: group,
                "eks.amazonaws.com/nodegroup": group,
                INSTANCE_TYPE_LABEL: config.system_nodes.instance_type,
                "topology.kubernetes.io/zone": zones[index % len(zones)],
            },
            capacity=dict(_SYSTEM_CAPACITY),
            taints=[],
        )
        for index in range(config.system_nodes.desired_size)
    ]


def trainium_node(
    name: str,
    *,
    instance: TrainiumInstanceType,
    node_group: str,
    zone: str,
    instance_id: str | None = None,
    dra: bool = False,
) -> dict[str, Any]:
    """A node of ``node_group`` as the autoscaler pictures it from the group's tags, and as EKS labels
    it, registered as every Trainium node registers: with the node check's startup taint besides the
    template's (constructs_trn/trainium_node_group.py; the autoscaler's template leaves it out, as a
    startup taint). ``ControlPlane.add_nodes`` plays the check that lifts it. ``instance_id``: the
    ``providerID`` EKS gives the node (``aws:///<zone>/<instance>``), which the node check reads.
    ``dra``: a node of a ``devices: dra`` group (its devices are in ResourceSlices, tests/cluster/dra.py)."""
    tags = node_template_tags(instance, node_group=node_group, dra=dra)
    labels = {k.removeprefix(LABEL_TAG_PREFIX): v for k, v in tags.items() if k.startswith(LABEL_TAG_PREFIX)}
    taints = []
    for key, value in tags.items():
        if key.startswith(TAINT_TAG_PREFIX):
            taint_value, _, effect = value.rpartition(":")
            taints.append({"key": key.removeprefix(TAINT_TAG_PREFIX), "value": taint_value, "effect": effect})
    taints.append(dict(NODE_CHECK_TAINT))
    resources = {
        k.removeprefix(RESOURCE_TAG_PREFIX): v for k, v in tags.items() if k.startswith(RESOURCE_TAG_PREFIX)
    }
    capacity = {
        "cpu": str(instance.vcpus),
        "memory": f"{instance.memory_gib}Gi",
        "pods": _TRAINIUM_PODS,
        "ephemeral-storage": "500Gi",
        **resources,
    }
    node = _node(
        name,
        labels={
            **labels,
            "eks.amazonaws.com/nodegroup": node_group,
            INSTANCE_TYPE_LABEL: instance.name,
            "topology.kubernetes.io/zone": zone,
        },
        capacity=capacity,
        taints=taints,
    )
    node["metadata"]["annotations"][SIMULATED_GROUP_ANNOTATION] = node_group
    if instance_id is not None:
        node["spec"]["providerID"] = f"aws:///{zone}/{instance_id}"
    return node


def group_nodes(config: StackConfig, group: str, names: Iterable[str]) -> list[dict[str, Any]]:
    """A node of ``group`` (as the configuration sets it up) for each of ``names``: the nodes a
    scale-up of the group would add."""
    settings = config.node_group(group)
    instance = instance_type(settings.instance_type)
    return [
        trainium_node(
            name,
            instance=instance,
            node_group=group,
            zone=config.trainium.availability_zone,
            dra=settings.uses_dra,
        )
        for name in names
    ]
