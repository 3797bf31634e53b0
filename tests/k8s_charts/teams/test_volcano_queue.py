"""VolcanoQueueChart and queue_capability: the queue TorchX submits to, sized from the catalog."""

from __future__ import annotations

from fractions import Fraction

import pytest

from cluster_facts.instance_catalog import CATALOG
from k8s_charts.teams.volcano_queue import VolcanoQueueChart, deserved_share, quantity_value, queue_capability
from tests.k8s_charts.manifests import only, synth
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


def test_a_team_alone_on_its_groups_deserves_what_they_hold() -> None:
    whole = deserved_share([(CATALOG["trn1.32xlarge"], 2, Fraction(1))])
    assert whole == queue_capability(CATALOG["trn1.32xlarge"], 2)


def test_a_shared_group_is_deserved_by_weight_rounded_down() -> None:
    # A third of 2 trn1.32xlarge: 256 vCPU, 1024 GiB, 32 chips, 16 EFA interfaces. Chips and
    # interfaces in whole units: Volcano's webhook refuses a fraction of an extended resource.
    assert deserved_share([(CATALOG["trn1.32xlarge"], 2, Fraction(1, 3))]) == {
        "cpu": "85333m",
        "memory": "349525Mi",
        "aws.amazon.com/neuron": "10",
        "vpc.amazonaws.com/efa": "5",
    }
    # make bench-scale's refusal: five teams on 512 trn1 nodes (8,192 chips, 4,096 interfaces).
    fifth = deserved_share([(CATALOG["trn1.32xlarge"], 512, Fraction(1, 5))])
    assert (fifth["aws.amazon.com/neuron"], fifth["vpc.amazonaws.com/efa"]) == ("1638", "819")
    with pytest.raises(ValueError, match="share"):
        deserved_share([(CATALOG["trn1.32xlarge"], 2, Fraction(0))])


def test_deserved_is_rendered_into_a_queue_valid_against_the_crd() -> None:
    capability = queue_capability(CATALOG["trn1.32xlarge"], 2)
    deserved = deserved_share([(CATALOG["trn1.32xlarge"], 2, Fraction(1, 3))])
    manifest = queue(name="research", weight=1, capability=capability, deserved=deserved)
    assert manifest["spec"]["deserved"] == deserved
    assert manifest["spec"]["capability"] == capability
    assert "guarantee" not in manifest["spec"]


def test_a_deserved_amount_above_the_capability_is_refused_as_volcanos_webhook_refuses_it() -> None:
    """validate_queue.go (v1.15.1) lines 271-290: deserved[r] must be <= capability[r]."""
    capability = queue_capability(CATALOG["trn1.32xlarge"], 1)
    with pytest.raises(ValueError, match=r"deserved aws.amazon.com/neuron 17 exceeds its capability 16"):
        queue(capability=capability, deserved={**capability, "aws.amazon.com/neuron": "17"})
    assert quantity_value("16001m") > quantity_value("16") > quantity_value("15999m")
    assert quantity_value("1Gi") == quantity_value("1024Mi")
