"""A run on a trn2u UltraServer group on ``devices: dra`` (issue 32), under the real API server,
scheduler, controller manager and Volcano 1.15.1: each pod's claim, made from the run's template,
asks for its node's 16 connected Neuron devices, their EFA interfaces and the node's ``neuron_node``
device with the run's ``UltraServerConfig``; the queue's capability counts that device too.

The configuration is config/native.example.yaml with its native group on trn2u.48xlarge and ``devices:
dra`` (trn2u runs only the native stack), one UltraServer's four nodes, and its native run on them.
The slices are the stand-in's (tests/cluster/dra.py), with the ``neuron_node`` device dra.rst's
"Example 3" asks for. What no component here decides: that the four nodes are one UltraServer (the
Neuron driver and its UltraServer operator place a job within one by ``ultraserverMode``; EKS labels
the nodes) and NeuronLink itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from config import parse_config
from tests.cluster.control_plane import ControlPlane
from tests.cluster.dra import DriverStandIn, UltraServerNode, claims_of, kubelet_refusals
from tests.cluster.nodes import group_nodes
from tests.cluster.plans import plan_of
from tests.cluster.runs import end_runs, run_handle
from tests.conftest import DEFAULT_CONFIG
from tests.yaml_edits import with_change

GROUP, RUN, NODES = "trn2-native", "llama-fsdp2", 4


def _data() -> dict[str, Any]:
    data = yaml.safe_load((DEFAULT_CONFIG.parent / "native.example.yaml").read_text())
    xla, native = data["trainium"]["node_groups"]
    native = {**native, "instance_type": "trn2u.48xlarge", "devices": "dra", "min_size": 1, "max_size": NODES}
    data = with_change(data, "trainium.node_groups", [xla, native])
    [run] = [run for run in data["runs"] if run["name"] == RUN]
    return with_change(data, "runs", [{**run, "nodes": NODES, "apply": False}])


DATA = _data()
CONFIG = parse_config(DATA)
NAMES = [f"trn2u-dra-{index}" for index in range(NODES)]


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    control_plane.apply_plan(plan_of(DATA))
    try:
        yield control_plane
    finally:
        end_runs(control_plane, [team.name for team in CONFIG.teams])
        control_plane.remove_nodes(NAMES)


def test_an_ultraserver_run_claims_each_nodes_devices_and_its_node_device(cluster: ControlPlane) -> None:
    stand_in = DriverStandIn(cluster)
    cluster.add_nodes(group_nodes(CONFIG, GROUP, NAMES))
    for index, name in enumerate(NAMES):
        place = UltraServerNode(server_id="us-0", node_id=index, capacity_block="cr-0123456789abcdef0")
        stand_in.publish(name, instance_type="trn2u.48xlarge", family="trn2", ultraserver=place)
    queue = cluster.kubectl.json("get", "queue", CONFIG.teams[0].queue_name)
    assert queue["spec"]["capability"]["deviceclass/neuron.aws.com"] == str(17 * NODES)

    run = run_handle(cluster, plan_of(DATA), RUN)
    run.apply()
    pods = cluster.wait_for(run.running, timeout=120, what=f"{RUN}'s gang on the UltraServer's nodes")
    assert {p["spec"]["nodeName"] for p in pods} == set(NAMES)
    assert kubelet_refusals(cluster, pods) == []
    for pod in pods:
        [claim] = claims_of(cluster, pod)
        results = claim["status"]["allocation"]["devices"]["results"]
        by_request: dict[str, list[str]] = {}
        for result in results:
            assert result["pool"] == pod["spec"]["nodeName"]
            by_request.setdefault(result["request"], []).append(result["device"])
        assert by_request["ultraserver"] == ["neuron-node"]
        assert len(by_request["neurons"]) == 16 and len(by_request["efa"]) == 16
        [mode] = [
            c["opaque"]["parameters"]["ultraserverMode"]
            for c in claim["status"]["allocation"]["devices"]["config"]
            if c["opaque"]["parameters"]["kind"] == "UltraServerConfig"
        ]
        assert mode == NODES
    run.delete()
