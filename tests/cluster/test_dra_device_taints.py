"""One bad device, not one bad node (issue 32), under the real API server, controller manager,
scheduler and Volcano 1.15.1: the node check's own program fences a DRA node's missing Neuron device
with a DeviceTaintRule, the node keeps serving claims that fit the rest, a run whose device is
fenced under it restarts on healthy devices, and the check can fence only its own node's devices.

The DeviceTaintRule API is beta and off at 1.36 (``DRADeviceTaintRules``; cluster_facts/dra.py
``DEVICE_TAINTS``), stable at 1.37, and Volcano 1.15.1 reads rules only at ``v1alpha3``, which EKS
never serves: the stack therefore renders no fencing for EKS today (``device_taints_usable``). The
module turns the gate on in the API server, controller manager and scheduler, serves the rule at
``v1beta2`` and ``v1alpha3``, and renders the plan with ``device_taints`` (the node check's
environment and RBAC, Volcano's gate): the cluster this feature waits for. The devices are the
drivers' stand-in's (tests/cluster/dra.py); the checks' tools are stand-ins printing a recorded
``neuron-ls`` with device 11 missing (tests/k8s_charts/checks/node_check_samples/).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.dra import (
    CLAIM_DEVICE_LIMIT,
    FAULTY_DEVICE_TAINT_KEY,
    NEURON_DRA_DRIVER,
    node_devices,
    whole_node_claim_devices,
)
from cluster_facts.instance_catalog import CATALOG
from cluster_facts.kubernetes_names import team_rbac_group
from cluster_facts.node_check import NODE_CHECK_NAMESPACE, NODE_CHECK_TAINT_KEY
from k8s_charts.devices.dra_admission import NODE_CHECK_DEVICES_POLICY
from tests.cluster.control_plane import ControlPlane, Kubectl
from tests.cluster.dra import DriverStandIn, UltraServerNode, claims_of
from tests.cluster.nodes import group_nodes
from tests.cluster.plans import plan_of
from tests.cluster.runs import RunHandle, end_runs, run_handle
from tests.cluster.test_dra import CONFIG, DRA, RESEARCH, TRN1, TRN2
from tests.k8s_charts.checks.test_node_check import SAMPLES, write_tools

GATES = {"DRADeviceTaintRules": True}
API_VERSIONS = (
    "resource.k8s.io/v1beta1=true",
    "resource.k8s.io/v1beta2=true",
    "resource.k8s.io/v1alpha3=true",
)
"""v1beta2 for the node check (the version 1.36 serves the rule at), v1alpha3 for Volcano 1.15.1, which
reads rules only there (cluster_facts/dra.py ``VOLCANO_DEVICE_TAINT_RULE_API``): a cluster serving
both is what this module stands for, not EKS."""
RULES = "devicetaintrules.v1beta2.resource.k8s.io"
DAMAGED, HEALTHY, SPARE = (f"{TRN1}-fence-{index}" for index in range(3))
ULTRASERVER_NODE = f"{TRN2}-ultraserver-0"
MISSING = 11
"""The device the recorded ``neuron-ls`` lacks (neuron_ls_trn1_device_missing.json)."""


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    with control_plane.reconfigured(feature_gates=GATES, runtime_config=API_VERSIONS):
        control_plane.apply_plan(plan_of(DRA, device_taints=True))
        try:
            yield control_plane
        finally:
            end_runs(control_plane, [team.name for team in CONFIG.teams])
            control_plane.kubectl("delete", RULES, "--all", "--ignore-not-found")
            control_plane.remove_nodes([DAMAGED, HEALTHY, SPARE, ULTRASERVER_NODE])


@pytest.fixture(scope="module")
def stand_in(cluster: ControlPlane) -> DriverStandIn:
    return DriverStandIn(cluster)


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tools(tmp_path_factory.mktemp("node-tools"))


@pytest.fixture(scope="module")
def damaged(
    cluster: ControlPlane, stand_in: DriverStandIn, tools: Path, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """DAMAGED registered unchecked, its slices published, then checked by the node check's program
    (``node_check.py --once``) with device 11 missing from ``neuron-ls``; HEALTHY checked and published."""
    cluster.add_nodes(group_nodes(CONFIG, TRN1, [DAMAGED]), node_check=False)
    cluster.add_nodes(group_nodes(CONFIG, TRN1, [HEALTHY]))
    for node in (DAMAGED, HEALTHY):
        stand_in.publish(node, instance_type="trn1.32xlarge", family="trn1")
    record = tmp_path_factory.mktemp("record") / "calls"
    record.touch()
    assert _check(cluster, DAMAGED, tools, record) == 0, "the node check failed the damaged node"
    return DAMAGED


def _check(plane: ControlPlane, node: str, tools: Path, record: Path) -> int:
    directory, environment = plane.node_check_program()
    assert environment.get("DEVICE_TAINT_RULE_API") == "resource.k8s.io/v1beta2"
    with socket.socket() as listener:  # the file system answers on loopback
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        result = subprocess.run(
            [sys.executable, str(directory / "node_check.py"), "--once"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={
                **os.environ,
                **environment,
                "NODE_NAME": node,
                "POD_NAMESPACE": NODE_CHECK_NAMESPACE,
                "LUSTRE_HOST": "127.0.0.1",
                "LUSTRE_PORT": str(listener.getsockname()[1]),
                "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
                "SAMPLES": str(SAMPLES),
                "RECORD": str(record),
                "NEURON_LS": "neuron_ls_trn1_device_missing.json",
                "NCCOM": "nccom_local_trn1.txt",
                "FI_INFO": "fi_info_trn1.txt",
                "PINGPONG": "pingpong_ok.txt",
                **plane.kube_api_environment(plane.node_check_token(node)),
            },
        )
    print(result.stdout, result.stderr)
    return result.returncode


def _rule(node: str, device: int, *, owner: dict[str, Any] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": f"probe-{node}-{device}"}
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": metadata,
        "spec": {
            "deviceSelector": {
                "driver": NEURON_DRA_DRIVER,
                "pool": node,
                "device": f"neuron-device-{device}",
            },
            "taint": {"key": FAULTY_DEVICE_TAINT_KEY, "value": "Probe", "effect": "NoExecute"},
        },
    }


def _owner(plane: ControlPlane, node: str) -> dict[str, Any]:
    uid = plane.kubectl.json("get", "node", node)["metadata"]["uid"]
    return {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}


def _allocated(plane: ControlPlane, pod: dict[str, Any]) -> set[tuple[str, str]]:
    """(pool, device) of the Neuron devices the pod's claims hold."""
    return {
        (result["pool"], result["device"])
        for claim in claims_of(plane, pod)
        for result in claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
        if result["driver"] == NEURON_DRA_DRIVER
    }


def _create(kubectl: Kubectl, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return kubectl("create", "-f", "-", input=json.dumps(obj), check=False)


def _run(plane: ControlPlane, name: str) -> RunHandle:
    return run_handle(plane, plan_of(DRA, device_taints=True), name)


def test_the_check_fences_the_missing_device_and_lets_the_node_serve(
    cluster: ControlPlane, damaged: str
) -> None:
    [rule] = cluster.kubectl.json("get", RULES)["items"]
    assert rule["spec"]["deviceSelector"] == {
        "driver": NEURON_DRA_DRIVER,
        "pool": damaged,
        "device": f"neuron-device-{MISSING}",
    }
    assert [o["name"] for o in rule["metadata"]["ownerReferences"]] == [damaged]
    node = cluster.kubectl.json("get", "node", damaged)
    assert NODE_CHECK_TAINT_KEY not in [t["key"] for t in node["spec"].get("taints", [])]
    reasons = [
        e["reason"]
        for e in cluster.kubectl.json("get", "events", "-n", NODE_CHECK_NAMESPACE)["items"]
        if e["involvedObject"].get("name") == damaged
    ]
    assert "NeuronDevicesFenced" in reasons


def test_a_whole_node_claim_avoids_the_fenced_node_and_a_restart_avoids_a_new_fence(
    cluster: ControlPlane, stand_in: DriverStandIn, damaged: str
) -> None:
    """research-2 (one whole trn1 node: 16 connected devices) is placed on HEALTHY, never on the
    damaged node. Then a device of HEALTHY is fenced under it, as HEALTHY's node check would: the
    controller manager's device taint eviction deletes the pod, Volcano restarts the gang, and its
    new claim is allocated on SPARE, the only node left with 16 untainted connected devices."""
    run = _run(cluster, "research-2")
    run.apply()
    [pod] = cluster.wait_for(run.running, timeout=120, what="research-2 running")
    assert pod["spec"]["nodeName"] == HEALTHY
    assert all(pool == HEALTHY for pool, _ in _allocated(cluster, pod))

    cluster.add_nodes(group_nodes(CONFIG, TRN1, [SPARE]))
    stand_in.publish(SPARE, instance_type="trn1.32xlarge", family="trn1")
    as_check = cluster.with_token("node-check-healthy", cluster.node_check_token(HEALTHY).read_text())
    created = _create(as_check, _rule(HEALTHY, 5, owner=_owner(cluster, HEALTHY)))
    assert created.returncode == 0, created.stderr

    def restarted() -> list[dict[str, Any]] | None:
        pods = run.running()
        return pods if pods and pods[0]["metadata"]["uid"] != pod["metadata"]["uid"] else None

    [again] = cluster.wait_for(restarted, timeout=180, what="research-2 restarted on healthy devices")
    assert again["spec"]["nodeName"] == SPARE
    assert all(pool == SPARE for pool, _ in _allocated(cluster, again))
    run.delete()


def test_the_check_fences_only_its_own_nodes_devices(cluster: ControlPlane, damaged: str) -> None:
    as_check = cluster.with_token("node-check-damaged", cluster.node_check_token(damaged).read_text())
    refusals = {
        "another node's device": _rule(HEALTHY, 3, owner=_owner(cluster, HEALTHY)),
        "no owner": _rule(damaged, 3, owner=None),
    }
    for what, rule in refusals.items():
        result = _create(as_check, rule)
        assert result.returncode != 0, f"{what} was admitted"
        assert NODE_CHECK_DEVICES_POLICY in result.stderr, (what, result.stderr)
    # A team member has no DeviceTaintRule at all (RBAC).
    member = cluster.impersonate("rita", [team_rbac_group(RESEARCH)])
    assert _create(member, _rule(damaged, 3, owner=_owner(cluster, damaged))).returncode != 0


def test_a_whole_trn2u_node_is_more_devices_than_one_claim_may_hold(
    cluster: ControlPlane, stand_in: DriverStandIn
) -> None:
    """Why a trn2u pod's node is two claims (cluster_facts/dra.py ``NodeDevices.claims``): a node
    publishing what a trn2u.48xlarge's drivers would (16 Neuron devices, its UltraServer's
    ``neuron_node``, 16 EFA interfaces) and a pod claiming the whole of it in one claim
    (``one_claim_spec``, as trn1 and trn2 pods do): the real scheduler refuses the claim for its
    size. The two claims a trn2u pod takes instead are placed in tests/cluster/test_dra.py
    (``test_a_trn2u_gang_takes_each_node_whole_in_two_claims``)."""
    instance = CATALOG["trn2u.48xlarge"]
    assert whole_node_claim_devices(instance) == CLAIM_DEVICE_LIMIT + 1
    cluster.add_nodes(group_nodes(CONFIG, TRN2, [ULTRASERVER_NODE]))
    place = UltraServerNode(server_id="us-0", node_id=0, capacity_block="cr-0123456789abcdef0")
    stand_in.publish(ULTRASERVER_NODE, instance_type=instance.name, family="trn2", ultraserver=place)
    namespace = "claim-limit"
    cluster.kubectl("create", "namespace", namespace)
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "whole-trn2u", "namespace": namespace},
        "spec": node_devices(instance, ultraserver_mode=4).one_claim_spec(),
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "whole-trn2u", "namespace": namespace},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": "node"}]},
                }
            ],
            "resourceClaims": [{"name": "node", "resourceClaimName": "whole-trn2u"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }
    try:
        cluster.create([claim, pod])

        def refused() -> list[str] | None:
            events = cluster.kubectl.json("get", "events", "-n", namespace)["items"]
            found = [e["message"] for e in events if e["reason"] == "FailedScheduling"]
            return found or None

        messages = cluster.wait_for(
            refused, timeout=60, what="the scheduler's verdict on the whole-trn2u claim"
        )
        assert any(
            f"number of requested devices 33 exceeds the claim limit of {CLAIM_DEVICE_LIMIT}" in m
            for m in messages
        ), messages
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")
