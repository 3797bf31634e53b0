"""VolcanoQueueChart and queue_capability: the queue TorchX submits to, sized from the catalog."""

from __future__ import annotations

import pytest

from cluster_facts.instance_catalog import CATALOG
from k8s_charts.volcano_queue import VolcanoQueueChart, queue_capability
from tests.k8s.manifests import only, synth
from tests.k8s_validation import assert_valid


def queue(**props):
    props.setdefault("name", "test")
    manifests = synth(lambda app: VolcanoQueueChart(app, "volcano-queue", **props))
    assert_valid(manifests)
    return only(manifests, "Queue")


def test_a_queue_without_capability_is_torchx_test_queue() -> None:
    manifest = queue()
    assert manifest["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert manifest["metadata"] == {"name": "test"}  # cluster-scoped: no namespace
    assert manifest["spec"] == {"weight": 1, "reclaimable": False}


def test_capability_for_two_trn1_32xlarge() -> None:
    assert queue_capability(CATALOG["trn1.32xlarge"], 2) == {
        "cpu": "256",
        "memory": "1024Gi",
        "aws.amazon.com/neuron": "32",
        "vpc.amazonaws.com/efa": "16",
    }


def test_capability_follows_the_catalog_for_every_type() -> None:
    for entry in CATALOG.values():
        capability = queue_capability(entry, 3)
        assert capability["aws.amazon.com/neuron"] == str(3 * entry.chips)
        assert capability["vpc.amazonaws.com/efa"] == str(3 * entry.efa_interfaces)
    assert queue_capability(CATALOG["trn1n.32xlarge"], 2)["vpc.amazonaws.com/efa"] == "32"


def test_capability_admits_a_job_holding_every_chip_and_efa_of_the_nodes() -> None:
    nodes, entry = 2, CATALOG["trn1.32xlarge"]
    capability = queue_capability(entry, nodes)
    # One pod per node requests the whole node's chips and EFA interfaces.
    assert int(capability["aws.amazon.com/neuron"]) >= nodes * entry.chips
    assert int(capability["vpc.amazonaws.com/efa"]) >= nodes * entry.efa_interfaces


def test_capability_is_rendered_into_a_valid_queue() -> None:
    manifest = queue(
        name="training", weight=5, reclaimable=True, capability=queue_capability(CATALOG["trn2.48xlarge"], 4)
    )
    assert manifest["metadata"]["name"] == "training"
    assert manifest["spec"] == {
        "weight": 5,
        "reclaimable": True,
        "capability": {
            "cpu": "768",
            "memory": "8192Gi",
            "aws.amazon.com/neuron": "64",
            "vpc.amazonaws.com/efa": "64",
        },
    }


def test_bad_sizes_fail() -> None:
    with pytest.raises(ValueError, match="nodes must be at least 1"):
        queue_capability(CATALOG["trn1.32xlarge"], 0)
    with pytest.raises(ValueError, match="weight"):
        queue(weight=0)
