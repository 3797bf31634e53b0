"""The node check on the real control plane (issue 24): every Trainium node registers with the startup
taint, no gang lands on it until the node check has passed it, and the check's own token can lift
that taint on its own node and change nothing else.

The node check's program runs whole (``node_check.py --once``), from its ConfigMap, with its
DaemonSet container's environment and a token bound to its DaemonSet pod on the node (kwok runs the
pod), against the real API server and its ``node-check`` admission policy. What cannot run here is
what it checks: stand-ins on PATH for the node's tools print recorded outputs of a healthy or a broken
trn1.32xlarge (tests/k8s_charts/checks/node_check_samples/, the same stand-ins as tests/k8s_charts/checks/test_node_check.py),
a local TCP listener answers for the file system, and ``aws`` records its call.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.instance_catalog import instance_type
from cluster_facts.kubernetes_names import NEURON_DEVICES_LABEL, NEURON_TAINT_KEY
from cluster_facts.node_check import (
    EFA_SUSPECT_TAINT,
    EFA_SUSPECT_TAINT_KEY,
    NODE_CHECK_CONDITION,
    NODE_CHECK_NAME,
    NODE_CHECK_NAMESPACE,
    NODE_CHECK_TAINT_KEY,
    NODE_FENCE_NAME,
)
from config import StackConfig
from tests.cluster.control_plane import ControlPlane
from tests.cluster.nodes import trainium_node
from tests.cluster.plans import deployed_plan
from tests.cluster.runs import RunHandle, run_handle
from tests.k8s_charts.checks.test_node_check import SAMPLES, write_tools

GROUP = "trn1-32xl"
HEALTHY = {
    "NEURON_LS": "neuron_ls_trn1.json",
    "NCCOM": "nccom_local_trn1.txt",
    "FI_INFO": "fi_info_trn1.txt",
    "PINGPONG": "pingpong_ok.txt",
}


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, default_config: StackConfig) -> Iterator[ControlPlane]:
    control_plane.apply_plan(deployed_plan(default_config))
    yield control_plane
    control_plane.remove_nodes(
        n["metadata"]["name"]
        for n in control_plane.kubectl.json("get", "nodes")["items"]
        if n["metadata"]["name"].startswith(f"{GROUP}-check-")
    )


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in tools' directory; each run's calls go to the RECORD file it is given."""
    return write_tools(tmp_path_factory.mktemp("node-tools"))


@pytest.fixture(scope="module")
def file_system() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def _nodes(plane: ControlPlane, config: StackConfig, names: list[str]) -> list[str]:
    """Nodes of the group as they register (the startup taint on), left unchecked."""
    settings = config.node_group(GROUP)
    return plane.add_nodes(
        [
            trainium_node(
                name,
                instance=instance_type(settings.instance_type),
                node_group=GROUP,
                zone=config.trainium.availability_zone,
                instance_id="i-0" + hashlib.sha1(name.encode()).hexdigest()[:16],
            )
            for name in names
        ],
        node_check=False,
    )


def _check(
    plane: ControlPlane, node: str, tools: Path, record: Path, lustre_port: int, **outputs: str
) -> int:
    """``node_check.py --once`` on ``node``, as its pod there runs it; its exit status."""
    directory, environment = plane.node_check_program()
    token = plane.node_check_token(node)
    record.touch()
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
            # The file system's address is the deploy's; here a listener on loopback.
            "LUSTRE_HOST": "127.0.0.1",
            "LUSTRE_PORT": str(lustre_port),
            "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
            "SAMPLES": str(SAMPLES),
            "RECORD": str(record),
            **HEALTHY,
            **outputs,
            **plane.kube_api_environment(token),
        },
    )
    print(result.stdout, result.stderr)
    return result.returncode


def _node(plane: ControlPlane, name: str) -> dict[str, Any]:
    found: dict[str, Any] = plane.kubectl.json("get", "node", name)
    return found


def _taints(node: dict[str, Any]) -> list[str]:
    return [t["key"] for t in node["spec"].get("taints", [])]


def _condition(node: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in node["status"]["conditions"] if c["type"] == NODE_CHECK_CONDITION)


def test_a_gang_waits_for_the_node_check_then_runs_on_the_checked_nodes(
    cluster: ControlPlane, default_config: StackConfig, tools: Path, file_system: int, tmp_path: Path
) -> None:
    run: RunHandle = run_handle(cluster, deployed_plan(default_config), "bert-large")
    names = _nodes(cluster, default_config, [f"{GROUP}-check-{i}" for i in range(run.replicas())])
    run.apply()
    try:
        cluster.wait_for(
            lambda: (
                len(run.pods()) == run.replicas() and all(not p["spec"].get("nodeName") for p in run.pods())
            ),
            timeout=60,
            what="the gang's pods, unplaced",
        )
        time.sleep(5)  # five scheduling sessions with every node of the gang free but unchecked
        assert all(not p["spec"].get("nodeName") for p in run.pods()), "a pod landed on an unchecked node"
        for name in names:
            assert _check(cluster, name, tools, tmp_path / f"{name}.record", file_system) == 0
            node = _node(cluster, name)
            assert NODE_CHECK_TAINT_KEY not in _taints(node) and NEURON_TAINT_KEY in _taints(node)
            condition = _condition(node)
            assert (condition["status"], condition["reason"]) == ("True", "NodeCheckPassed")
            # The local all-reduce ran across every NeuronCore of the node.
            assert "--check allr" in (tmp_path / f"{name}.record").read_text()
        pods = cluster.wait_for(
            lambda: (
                run.pods()
                if all(p["status"].get("phase") == "Running" for p in run.pods())
                and len(run.pods()) == run.replicas()
                else None
            ),
            timeout=60,
            what="the gang running on the checked nodes",
        )
        assert {p["spec"]["nodeName"] for p in pods} == set(names)
    finally:
        run.delete()
        cluster.remove_nodes(names)


def test_the_check_runs_on_every_trainium_node_and_on_no_system_node(
    cluster: ControlPlane, default_config: StackConfig
) -> None:
    """The DaemonSet controller and the scheduler place its pods: the system nodes carry the
    node-group label too, and a privileged check there would have nothing to check."""
    names = _nodes(cluster, default_config, [f"{GROUP}-check-placed"])
    try:
        nodes = cluster.kubectl.json("get", "nodes")["items"]
        trainium = {n["metadata"]["name"] for n in nodes if NEURON_DEVICES_LABEL in n["metadata"]["labels"]}
        system = {n["metadata"]["name"] for n in nodes} - trainium
        assert set(names) <= trainium and system, (trainium, system)

        def of(name: str) -> set[str]:
            pods = cluster.kubectl.json("get", "pods", "-n", NODE_CHECK_NAMESPACE)["items"]
            return {
                p["spec"].get("nodeName")
                for p in pods
                if (p["metadata"].get("labels") or {}).get("app.kubernetes.io/name") == name
            }

        def placed() -> set[str] | None:
            on = of(NODE_CHECK_NAME)
            return on if trainium <= on else None

        on = cluster.wait_for(placed, timeout=60, what="the node check's pod on every Trainium node")
        assert not on & system, f"the node check's pods on system nodes: {sorted(on & system)}"
        # The fence (one Deployment for the cluster) is the other way round: on a system node only,
        # so it answers while the Trainium nodes it watches do not.
        fence = cluster.wait_for(
            lambda: of(NODE_FENCE_NAME) - {None} or None, timeout=60, what="the fence placed"
        )
        assert fence <= system, f"the fence on {sorted(fence)}"
    finally:
        cluster.remove_nodes(names)


def test_a_node_that_fails_keeps_its_taint_says_why_and_is_replaced(
    cluster: ControlPlane, default_config: StackConfig, tools: Path, file_system: int, tmp_path: Path
) -> None:
    [name] = _nodes(cluster, default_config, [f"{GROUP}-check-broken"])
    record = tmp_path / "record"
    assert (
        _check(cluster, name, tools, record, file_system, NEURON_LS="neuron_ls_trn1_device_missing.json") == 1
    )
    node = _node(cluster, name)
    assert NODE_CHECK_TAINT_KEY in _taints(node)
    condition = _condition(node)
    assert (condition["status"], condition["reason"]) == ("False", "NeuronDevicesMissing")
    events = cluster.kubectl.json(
        "get", "events", "-n", NODE_CHECK_NAMESPACE, f"--field-selector=involvedObject.name={name}"
    )["items"]
    assert [e["reason"] for e in events] == ["NeuronDevicesMissing"], events
    instance = node["spec"]["providerID"].rsplit("/", 1)[-1]
    assert (
        f"autoscaling set-instance-health --instance-id {instance} --health-status Unhealthy"
        in record.read_text()
    )


def test_the_checks_token_lifts_only_its_own_nodes_startup_taint(
    cluster: ControlPlane, default_config: StackConfig
) -> None:
    """The fence the API server holds the check to (the ``node-check`` policy): with a token bound
    to its pod on one node, it may lift that node's startup taint, put on and lift exactly the EFA
    taint there, and touch no other node and no other taint."""
    own, other = _nodes(cluster, default_config, [f"{GROUP}-check-own", f"{GROUP}-check-other"])
    check = cluster.with_token("node-check-own", cluster.node_check_token(own).read_text())

    def without(node: str, key: str) -> str:
        kept = [t for t in _node(cluster, node)["spec"]["taints"] if t["key"] != key]
        return json.dumps([{"op": "replace", "path": "/spec/taints", "value": kept}])

    refused = check(
        "patch", "node", other, "--type=json", "-p", without(other, NODE_CHECK_TAINT_KEY), check=False
    )
    assert refused.returncode != 0 and "may only change its own node" in refused.stderr, refused.stderr
    refused = check("patch", "node", own, "--type=json", "-p", without(own, NEURON_TAINT_KEY), check=False)
    assert refused.returncode != 0 and f"may only remove the taint {NODE_CHECK_TAINT_KEY}" in refused.stderr
    lifted = check("patch", "node", own, "--type=json", "-p", without(own, NODE_CHECK_TAINT_KEY), check=False)
    assert lifted.returncode == 0, lifted.stderr
    assert NODE_CHECK_TAINT_KEY in _taints(_node(cluster, other))

    # The watch's EFA taint: exactly that taint may come and go on its own node, nothing like it.
    def with_taint(node: str, taint: dict[str, str]) -> str:
        taints = [*_node(cluster, node)["spec"]["taints"], taint]
        return json.dumps([{"op": "replace", "path": "/spec/taints", "value": taints}])

    other_value = {**EFA_SUSPECT_TAINT, "value": "bad"}
    refused = check("patch", "node", own, "--type=json", "-p", with_taint(own, other_value), check=False)
    assert refused.returncode != 0 and "may only remove the taint" in refused.stderr, refused.stderr
    put_on = check("patch", "node", own, "--type=json", "-p", with_taint(own, EFA_SUSPECT_TAINT), check=False)
    assert put_on.returncode == 0, put_on.stderr
    assert EFA_SUSPECT_TAINT_KEY in _taints(_node(cluster, own))
    lifted = check(
        "patch", "node", own, "--type=json", "-p", without(own, EFA_SUSPECT_TAINT_KEY), check=False
    )
    assert lifted.returncode == 0, lifted.stderr
    cluster.remove_nodes([own, other])
