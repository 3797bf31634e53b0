"""A training pod fits both the node the autoscaler imagines and the node the kubelet allocates.

The autoscaler's node at zero and the kubelet's allocatable are models written here, from their
sources (cluster_facts/node_allocatable.py names them): neither runs offline against a Trainium
node. For every catalog entry: the node-template tags never promise more cpu or memory than the
kubelet can allocate even if the kernel saw the instance's whole nominal memory; the EFA hugepages
are in the template; and a training pod with the DaemonSets the stack runs on the node fits both
the template and the kubelet's allocatable at the lowest MemTotal the estimate allows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pytest
from kubernetes.utils.quantity import parse_quantity

from cluster_facts.autoscaling import RESOURCE_TAG_PREFIX, node_template_tags
from cluster_facts.instance_catalog import CATALOG, TrainiumInstanceType
from cluster_facts.kubernetes_names import INSTANCE_TYPE_LABEL, NODE_GROUP_LABEL
from cluster_facts.node_allocatable import (
    EFA_HUGEPAGES_2MI,
    MEMTOTAL_OVERHEAD,
    kube_reserved,
    kubelet_allocatable,
    max_pods,
)
from config import load_config
from tests.conftest import DEFAULT_CONFIG
from tests.k8s_charts.runs.test_training_run import RUN, container, job
from tests.plans import shared_review_plan

MIB = 1024 * 1024


def autoscaler_node(instance: TrainiumInstanceType, tags: Mapping[str, str]) -> dict[str, Decimal]:
    """cluster-autoscaler v1.34.5 buildNodeFromTemplate: capacity from its instance list (the vCPUs,
    MemoryMb x 1 MiB: the nominal memory for every catalog type, e.g. trn1.32xlarge 524288), each
    ``resources/<name>`` tag overriding or adding its resource, allocatable = capacity."""
    capacity = {"cpu": Decimal(instance.vcpus), "memory": Decimal(instance.memory_gib * 1024 * MIB)}
    for key, value in tags.items():
        if key.startswith(RESOURCE_TAG_PREFIX):
            capacity[key.removeprefix(RESOURCE_TAG_PREFIX)] = parse_quantity(value)
    return capacity


def kubelet_node(instance: TrainiumInstanceType, *, memtotal_mib: int) -> dict[str, Decimal]:
    allocatable = kubelet_allocatable(instance, memtotal_mib=memtotal_mib)
    return {
        "cpu": Decimal(allocatable.cpu_millicores) / 1000,
        "memory": Decimal(allocatable.memory_mib * MIB),
        "hugepages-2Mi": Decimal(allocatable.hugepages_2mi_mib * MIB),
    }


def requests(containers: list[dict[str, Any]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for spec in containers:
        resources = spec.get("resources", {})
        # Extended resources are limits only; Kubernetes copies them to requests.
        for name, value in {**resources.get("limits", {}), **resources.get("requests", {})}.items():
            if name in {"cpu", "memory"} and name not in resources.get("requests", {}):
                continue  # a cpu or memory limit without a request is not a request
            total[name] = total.get(name, Decimal(0)) + parse_quantity(value)
    return total


def _matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    operator = expression["operator"]
    if operator == "Exists":
        return expression["key"] in labels
    if operator == "In":
        return labels.get(expression["key"]) in expression["values"]
    raise AssertionError(f"a node selector operator this test does not read: {operator}")


def daemon_sets_on(instance: TrainiumInstanceType) -> dict[str, Decimal]:
    """Requests of the stack's own DaemonSets that run on a node of ``instance`` (the device plugins,
    the node check)."""
    total: dict[str, Decimal] = {}
    for step in shared_review_plan(load_config(DEFAULT_CONFIG)).manifest_sets():
        for manifest in step.manifests:
            if manifest["kind"] != "DaemonSet":
                continue
            spec = manifest["spec"]["template"]["spec"]
            terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            # A Trainium node of this type: its instance-type label and a node group's label.
            labels = {INSTANCE_TYPE_LABEL: instance.name, NODE_GROUP_LABEL: "any-group"}
            if any(
                all(_matches(expression, labels) for expression in term["matchExpressions"])
                for term in terms["nodeSelectorTerms"]
            ):
                for name, value in requests(spec["containers"]).items():
                    total[name] = total.get(name, Decimal(0)) + value
    return total


def training_pod(instance: TrainiumInstanceType) -> dict[str, Decimal]:
    return requests([container(job(dataclasses.replace(RUN, instance=instance)))])


def test_nodeadms_reservation_for_the_catalog() -> None:
    """The AMI's own arithmetic, worked by hand: trn1.32xlarge 5 ENIs x 49 + 2 = 247 pods, 11 x 247 +
    255 = 2972 MiB; cpu 60 + 10 + 10 + 124 x 2.5 = 390 millicores. trn2.48xlarge: 2 ENIs."""
    trn1 = CATALOG["trn1.32xlarge"]
    assert (max_pods(trn1), kube_reserved(trn1)) == (247, (390, 2972))
    trn2 = CATALOG["trn2.48xlarge"]
    assert (max_pods(trn2), kube_reserved(trn2)) == (100, (550, 1355))
    assert EFA_HUGEPAGES_2MI * 2 == 10256


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_the_template_never_promises_more_than_the_kubelet_allocates(instance_type: str) -> None:
    """Even were MemTotal the whole nominal memory, the kubelet allocates no more than the template
    says; and the template carries the EFA hugepages the node reports."""
    instance = CATALOG[instance_type]
    template = autoscaler_node(instance, node_template_tags(instance, node_group="g"))
    most = kubelet_node(instance, memtotal_mib=instance.memory_gib * 1024)
    assert template["cpu"] <= most["cpu"]
    assert template["memory"] <= most["memory"]
    assert template["hugepages-2Mi"] == most["hugepages-2Mi"] == EFA_HUGEPAGES_2MI * 2 * MIB


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_a_training_pod_fits_the_template_and_the_node(instance_type: str) -> None:
    instance = CATALOG[instance_type]
    needed = training_pod(instance)
    for name, value in daemon_sets_on(instance).items():
        needed[name] = needed.get(name, Decimal(0)) + value
    assert {"cpu", "memory", "aws.amazon.com/neuron", "vpc.amazonaws.com/efa"} <= set(needed)

    template = autoscaler_node(instance, node_template_tags(instance, node_group="g"))
    least = kubelet_node(instance, memtotal_mib=int(instance.memory_gib * 1024 * (1 - MEMTOTAL_OVERHEAD)))
    for name, value in needed.items():
        assert value <= template.get(name, Decimal(0)), (name, value, template.get(name))
        if name in least:
            assert value <= least[name], (name, value, least[name])
    # What is left on the node for the EKS add-ons' DaemonSets (VPC CNI, kube-proxy, the CSI and
    # monitoring agents), whose requests the stack does not render: at least 8 GiB and 8 vCPUs.
    assert least["memory"] - needed["memory"] >= 8 * 1024 * MIB
    assert least["cpu"] - needed["cpu"] >= 8
