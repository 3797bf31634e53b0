"""DRA node groups (issue 32) under the real API server, controller manager, scheduler, Volcano 1.15.1
and cluster autoscaler: the drivers' objects as rendered, their slices as the drivers would publish
them (tests/cluster/dra.py, the stand-in, and what it stands in for), and what the real components
decide about claims of connected Neuron devices with their EFA interfaces.

The configuration (``DRA``): beside the default's device-plugin group ``trn1-32xl``, two ``devices:
dra`` groups, ``trn1-dra`` (trn1.32xlarge) and ``trn2-dra`` (trn2.48xlarge, LNC 2), each with one
warm node (``min_size`` 1: cluster_facts/dra.py ``AUTOSCALER_FROM_ZERO_ISSUE``). Teams: ``training``
(queue ``test``) on both DRA groups with a quota of 32 Neuron devices; ``research`` on ``trn1-dra``
alone (no quota: its queue's capability, 2 nodes' worth of devices, decides); ``vision`` on the
device-plugin group only. The trn2u UltraServer is not in this branch's instance catalog, so its
scenario runs an admin's Job in a namespace of its own, on four nodes labelled as an UltraServer's.

The API server serves ``resource.k8s.io/v1beta1`` for the module (``API_VERSIONS``): the tier's
autoscaler, release 1.33.0, reads DRA objects only at v1beta1 (simulator/dynamicresources at that
release); EKS serves that version (its 1.33 release enabled "the Dynamic Resource Allocation beta
Kubernetes API", and EKS keeps the beta APIs it served). No feature gate is changed but in
``test_a_tainted_device_...``, which says so.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from cluster_facts.dra import (
    EFA_DEVICE_CLASS,
    NEURON_DEVICE_CLASS,
    device_group_attribute,
    device_quota_resource,
    node_claim_template,
    queue_device_resource,
)
from cluster_facts.kubernetes_names import team_rbac_group
from config import parse_config
from k8s_charts import efa_device_plugin, efa_dra_driver, neuron_device_plugin, neuron_dra_driver
from k8s_charts.dra_admission import DRIVER_POLICIES, OBJECTS_POLICY, TEAM_CLAIMS_POLICY
from tests.cluster.control_plane import ControlPlane
from tests.cluster.dra import (
    DriverStandIn,
    claims_of,
    device_group_id,
    kubelet_refusals,
)
from tests.cluster.nodes import group_nodes
from tests.cluster.plans import config_data, plan_of
from tests.cluster.runs import RunHandle, end_runs, run_handle
from tests.cluster.scheduler_log import SchedulerLog
from tests.conftest import DEFAULT_CONFIG
from tests.yaml_edits import with_change

TRAINING, RESEARCH, VISION = "training", "research", "vision"
TRN1, TRN2, PLUGIN_GROUP = "trn1-dra", "trn2-dra", "trn1-32xl"


def _group(name: str, instance_type: str, max_size: int) -> dict[str, Any]:
    return {
        "name": name,
        "instance_type": instance_type,
        "devices": "dra",
        "min_size": 1,
        "desired_size": 1,
        "max_size": max_size,
        "capacity_type": "on_demand",
        "capacity_reservation_id": None,
        "placement_group": True,
    }


DRA = with_change(
    with_change(
        with_change(
            config_data(DEFAULT_CONFIG),
            "trainium.node_groups",
            [
                config_data(DEFAULT_CONFIG)["trainium"]["node_groups"][0],
                _group(TRN1, "trn1.32xlarge", 2),
                _group(TRN2, "trn2.48xlarge", 1),
            ],
        ),
        "teams",
        [
            {"name": TRAINING, "queue": "test", "node_groups": [TRN1, TRN2], "quota": {"neuron_devices": 32}},
            {"name": RESEARCH, "node_groups": [TRN1]},
            {"name": VISION, "node_groups": [PLUGIN_GROUP]},
        ],
    ),
    "runs",
    [
        {"name": "bert-large", "preset": "bert-large", "team": TRAINING, "node_group": TRN1, "nodes": 2},
        {"name": "trn2-run", "preset": "bert-large", "team": TRAINING, "node_group": TRN2, "nodes": 1},
        {"name": "research-1", "preset": "bert-large", "team": RESEARCH, "node_group": TRN1, "nodes": 2},
        {"name": "research-2", "preset": "bert-large", "team": RESEARCH, "node_group": TRN1, "nodes": 1},
    ],
)
CONFIG = parse_config(DRA)
API_VERSIONS = ("resource.k8s.io/v1beta1=true",)
TRN1_NODES = [f"{TRN1}-{index}" for index in range(3)]
"""The group at max_size, and one beyond (a manual scale-up)."""
TRN2_NODES = [f"{TRN2}-{index}" for index in range(2)]
PLUGIN_NODE = f"{PLUGIN_GROUP}-dra-0"


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """``DRA`` deployed, with the module's API versions served."""
    with control_plane.reconfigured(feature_gates={}, runtime_config=API_VERSIONS):
        control_plane.apply_plan(plan_of(DRA))
        try:
            yield control_plane
        finally:
            end_runs(control_plane, [team.name for team in CONFIG.teams])
            control_plane.remove_nodes([*TRN1_NODES, *TRN2_NODES, PLUGIN_NODE])


@pytest.fixture(scope="module")
def stand_in(cluster: ControlPlane) -> DriverStandIn:
    return DriverStandIn(cluster)


@pytest.fixture(scope="module")
def nodes(cluster: ControlPlane, stand_in: DriverStandIn) -> dict[str, list[str]]:
    """The DRA groups' nodes, checked, each with its two slices published by its drivers' stand-in;
    one node of the device-plugin group."""
    cluster.add_nodes(group_nodes(CONFIG, TRN1, TRN1_NODES[:2]))
    cluster.add_nodes(group_nodes(CONFIG, TRN2, TRN2_NODES[:1]))
    cluster.add_nodes(group_nodes(CONFIG, PLUGIN_GROUP, [PLUGIN_NODE]))
    for name in TRN1_NODES[:2]:
        stand_in.publish(name, instance_type="trn1.32xlarge", family="trn1")
    stand_in.publish(TRN2_NODES[0], instance_type="trn2.48xlarge", family="trn2")
    return {TRN1: TRN1_NODES[:2], TRN2: TRN2_NODES[:1]}


def _runs(plane: ControlPlane) -> dict[str, RunHandle]:
    plan = plan_of(DRA)
    return {run.name: run_handle(plane, plan, run.name) for run in CONFIG.runs}


def _daemon_set_nodes(plane: ControlPlane, namespace: str, name: str) -> set[str]:
    pods = plane.kubectl.json("get", "pods", "-n", namespace)["items"]
    return {
        p["spec"].get("nodeName", "")
        for p in pods
        if p["metadata"].get("ownerReferences", [{}])[0].get("name") == name and p["spec"].get("nodeName")
    }


def test_the_stand_in_computes_the_device_groups_a_real_driver_published() -> None:
    # trn1.32xlarge EFA 0000:10:19.0 (DRANET's captured slice) serves Neuron devices 12 and 13;
    # trn2.48xlarge Neuron devices 0-3 (the Neuron driver's captured slice).
    assert device_group_id("trn1", 12, 4) == "178a9e264a26793e"
    assert device_group_id("trn1", 12, 8) == "aa86c05423d6e8cd"
    assert device_group_id("trn1", 12, 16) == "fb838249c99a6341"
    assert device_group_id("trn2", 0, 4) == "13713e551cd37c19"


def test_the_drivers_run_only_on_dra_nodes_and_the_device_plugins_never_there(
    cluster: ControlPlane, nodes: dict[str, list[str]]
) -> None:
    dra_nodes = {*nodes[TRN1], *nodes[TRN2]}
    classes = {c["metadata"]["name"] for c in cluster.kubectl.json("get", "deviceclasses")["items"]}
    assert classes == {NEURON_DEVICE_CLASS, EFA_DEVICE_CLASS}
    namespace = neuron_dra_driver.NAMESPACE

    def placed() -> bool:
        return (
            _daemon_set_nodes(cluster, namespace, neuron_dra_driver.NAME) == dra_nodes
            and _daemon_set_nodes(cluster, namespace, efa_dra_driver.NAME) == dra_nodes
            and _daemon_set_nodes(cluster, namespace, neuron_device_plugin.NAME) == {PLUGIN_NODE}
            and _daemon_set_nodes(cluster, namespace, efa_device_plugin.NAME) == {PLUGIN_NODE}
        )

    cluster.wait_for(placed, timeout=60, what="the DRA drivers on the DRA nodes, the device plugins elsewhere")
    slices = cluster.kubectl.json("get", "resourceslices")["items"]
    published = {(s["spec"]["nodeName"], s["spec"]["driver"]) for s in slices}
    assert published == {(node, driver) for node in dra_nodes for driver in ("neuron.aws.com", "dra.net")}


def test_a_driver_writes_only_its_own_drivers_slices_of_its_own_node(
    cluster: ControlPlane, nodes: dict[str, list[str]], stand_in: DriverStandIn
) -> None:
    mine, other = nodes[TRN1]
    node = cluster.kubectl.json("get", "node", other)
    from tests.cluster.dra import efa_slice, neuron_slice

    neuron = stand_in.as_driver(neuron_dra_driver.NAME, mine)
    foreign = neuron_slice(node, instance_type="trn1.32xlarge", family="trn1")
    refused = neuron("create", "-f", "-", input=json.dumps(foreign), check=False)
    assert refused.returncode != 0 and DRIVER_POLICIES["neuron.aws.com"] in refused.stderr, refused.stderr
    own = cluster.kubectl.json("get", "node", mine)
    wrong_driver = efa_slice(own, family="trn1")
    refused = neuron("create", "-f", "-", input=json.dumps(wrong_driver), check=False)
    assert refused.returncode != 0 and "only ResourceSlices of driver neuron.aws.com" in refused.stderr
    # Another node's labels, through the driver's nodes grant.
    refused = neuron("label", "node", other, "neuron.amazonaws.com/probe=1", check=False)
    assert refused.returncode != 0 and "only its own node" in refused.stderr, refused.stderr
    # Volcano's scheduler holds `create` on resourceslices and deviceclasses (its chart's RBAC).
    scheduler = cluster.as_service_account("volcano-system", "volcano-scheduler")
    refused = scheduler("create", "-f", "-", input=json.dumps(foreign), check=False)
    assert refused.returncode != 0 and OBJECTS_POLICY in refused.stderr, refused.stderr
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "every-device"},
        "spec": {},
    }
    refused = scheduler("create", "-f", "-", input=json.dumps(device_class), check=False)
    assert refused.returncode != 0 and OBJECTS_POLICY in refused.stderr, refused.stderr


def _connected(plane: ControlPlane, claim: dict[str, Any], size: int) -> set[str]:
    """The ``devicegroup<size>_id`` values of the claim's allocated devices (one value: connected)."""
    attribute = device_group_attribute(size)
    values = set()
    for result in claim["status"]["allocation"]["devices"]["results"]:
        slices = plane.kubectl.json("get", "resourceslices")["items"]
        for published in slices:
            if published["spec"]["driver"] != result["driver"] or published["spec"]["pool"]["name"] != result["pool"]:
                continue
            for device in published["spec"]["devices"]:
                if device["name"] == result["device"] and attribute in device.get("attributes", {}):
                    values.add(device["attributes"][attribute]["string"])
    return values


def _results(claim: dict[str, Any]) -> dict[str, list[str]]:
    by_request: dict[str, list[str]] = {}
    for result in claim["status"]["allocation"]["devices"]["results"]:
        by_request.setdefault(result["request"], []).append(result["device"])
    return by_request


def test_a_gang_of_connected_claims_is_allocated_whole_nodes_and_reserved_for_its_pods(
    cluster: ControlPlane, nodes: dict[str, list[str]]
) -> None:
    run = _runs(cluster)["bert-large"]
    run.apply()
    pods = cluster.wait_for(run.running, timeout=90, what="bert-large's gang running on the trn1 DRA nodes")
    assert {p["spec"]["nodeName"] for p in pods} == set(nodes[TRN1])
    assert kubelet_refusals(cluster, pods) == []
    for pod in pods:
        [claim] = claims_of(cluster, pod)
        results = _results(claim)
        assert len(results["neurons"]) == 16 and len(results["efa"]) == 8
        assert len(_connected(cluster, claim, 16)) == 1, "the node's 16 devices and its EFA, one connected set"
        assert claim["status"]["allocation"]["devices"]["results"][0]["pool"] == pod["spec"]["nodeName"]
    run.finish()
    cluster.wait_for(lambda: run.job_status().get("state", {}).get("phase") == "Completed", timeout=60, what="done")
    end_runs(cluster, [TRAINING])
