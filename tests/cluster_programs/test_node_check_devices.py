"""One bad device, not one bad node (issue 32): on a DRA node, the node check fences the Neuron devices
``neuron-ls`` misses with DeviceTaintRules and lets the node serve the rest, while a connected half
stays whole; otherwise, or where DeviceTaintRule is not served, the node fails as before.

The program runs as in test_node_check.py (stand-in tools on PATH, a small API on loopback that
applies its writes); the policy that judges its DeviceTaintRules is the real API server's in
tests/cluster/test_dra_device_taints.py.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.dra import (
    DEVICE_TAINTS,
    DEVICES_LABEL,
    FAULTY_DEVICE_TAINT_KEY,
    NEURON_DRA_DRIVER,
    VOLCANO_DEVICE_TAINT_RULE_API,
    device_taints_usable,
)
from cluster_facts.node_check import NODE_CHECK_CONDITION, NODE_CHECK_NAMESPACE, NODE_CHECK_TAINT_KEY
from cluster_plan.kubernetes_values import device_taint_rule_api, dra_values
from config import parse_config
from k8s_charts.checks.node_check import NodeCheckChart, NodeCheckValues
from tests.cluster.test_dra import DRA
from tests.k8s_charts.checks.test_node_check import (
    IMAGE,
    Cluster,
    file_system,
    node_tools,
    token,
    trainium_node,
)
from tests.k8s_charts.checks.test_node_check import run_check as node_check_run
from tests.k8s_charts.manifests import only, synth
from tests.pod_programs import program

__all__ = ["file_system", "node_tools", "token"]  # fixtures, used by name

RULES_PATH = "/apis/resource.k8s.io/v1beta2/devicetaintrules"


def fence() -> Any:
    return program("node_check_devices").DeviceFence(
        api_version="resource.k8s.io/v1beta2",
        taint_key=FAULTY_DEVICE_TAINT_KEY,
        driver=NEURON_DRA_DRIVER,
        devices_label=DEVICES_LABEL,
    )


def dra_node(name: str = "ip-10-0-0-1") -> dict[str, Any]:
    node = trainium_node(name)
    node["metadata"]["labels"][DEVICES_LABEL] = "dra"
    node["metadata"]["uid"] = "0b7c6d5e-0000-4000-8000-000000000001"
    return node


@dataclass
class DraCluster(Cluster):
    """``Cluster``, and the DeviceTaintRules the check creates (409 for a name that exists)."""

    rules: dict[str, dict[str, Any]] = field(default_factory=dict)

    def answer(self, method: str, path: str, headers: Mapping[str, str], body: Any) -> tuple[int, Any]:
        if path == RULES_PATH and method == "POST":
            name = body["metadata"]["name"]
            if name in self.rules:
                return 409, {"kind": "Status", "code": 409, "reason": "AlreadyExists"}
            self.rules[name] = body
            return 201, body
        return super().answer(method, path, headers, body)


def run_check(cluster: Cluster, token: Path, lustre_port: int, *, with_fence: bool = True) -> int:
    return node_check_run(cluster, token, lustre_port, fence=fence() if with_fence else None)


def test_a_device_is_fenced_only_while_a_connected_half_stays_whole() -> None:
    devices = program("node_check_devices")
    listed = [{"neuron_device": index} for index in range(16) if index != 11]
    assert devices.missing_devices(listed, 16) == [11]
    assert devices.fenceable([11], 16)
    assert devices.fenceable([8, 9, 15], 16)  # devices 0-7 stay one connected set
    assert not devices.fenceable([3, 11], 16)  # no connected eight left
    assert not devices.fenceable([], 16)


def test_the_rule_selects_one_device_of_its_own_nodes_pool_and_goes_with_the_node() -> None:
    rule = program("node_check_devices").taint_rule(dra_node(), 11, "NeuronDeviceMissing", fence())
    assert rule["kind"] == "DeviceTaintRule" and rule["apiVersion"] == "resource.k8s.io/v1beta2"
    assert rule["spec"] == {
        "deviceSelector": {"driver": NEURON_DRA_DRIVER, "pool": "ip-10-0-0-1", "device": "neuron-device-11"},
        "taint": {"key": FAULTY_DEVICE_TAINT_KEY, "value": "NeuronDeviceMissing", "effect": "NoExecute"},
    }
    [owner] = rule["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Node",
        "ip-10-0-0-1",
        dra_node()["metadata"]["uid"],
    )


@pytest.mark.process
def test_a_dra_node_missing_one_device_fences_it_and_serves_the_rest(
    node_tools: Path, file_system: int, token: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEURON_LS", "neuron_ls_trn1_device_missing.json")  # device 11 missing
    cluster = DraCluster(nodes={"ip-10-0-0-1": dra_node()}, token_node="ip-10-0-0-1")
    assert run_check(cluster, token, file_system) == 0
    assert list(cluster.rules) == ["faulty-ip-10-0-0-1-neuron-device-11"]
    node = cluster.nodes["ip-10-0-0-1"]
    assert NODE_CHECK_TAINT_KEY not in [taint["key"] for taint in node["spec"]["taints"]]
    [condition] = [c for c in node["status"]["conditions"] if c["type"] == NODE_CHECK_CONDITION]
    assert (condition["status"], condition["reason"]) == ("True", "NodeCheckPassed")
    [event] = cluster.events
    assert event["reason"] == "NeuronDevicesFenced" and "[11]" in event["message"]
    # The local all-reduce ran across the 30 NeuronCores of the 15 devices left; nothing was replaced.
    assert "-r 30 " in node_tools.read_text() and "aws" not in node_tools.read_text()
    assert cluster.refused == []
    # A second pass (the pod restarted before it lifted the taint) finds the rule there and passes.
    cluster.nodes["ip-10-0-0-1"] = dra_node()
    assert run_check(cluster, token, file_system) == 0
    assert list(cluster.rules) == ["faulty-ip-10-0-0-1-neuron-device-11"]


@pytest.mark.process
def test_without_device_taint_rules_or_on_a_device_plugin_node_the_node_fails(
    node_tools: Path, file_system: int, token: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEURON_LS", "neuron_ls_trn1_device_missing.json")
    served = DraCluster(nodes={"ip-10-0-0-1": dra_node()}, token_node="ip-10-0-0-1")
    assert run_check(served, token, file_system, with_fence=False) == 1
    plugin = DraCluster(nodes={"ip-10-0-0-1": trainium_node()}, token_node="ip-10-0-0-1")
    assert run_check(plugin, token, file_system) == 1
    assert served.rules == {} and plugin.rules == {}
    assert [e["reason"] for e in [*served.events, *plugin.events]] == ["NeuronDevicesMissing"] * 2


@pytest.mark.process
def test_devices_missing_from_both_halves_fail_the_node(
    node_tools: Path, file_system: int, token: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import json  # noqa: PLC0415 - only this test writes a sample

    samples = Path(os.environ["SAMPLES"])
    listed = [d for d in json.loads((samples / "neuron_ls_trn1.json").read_text()) if d["neuron_device"] != 3]
    listed = [d for d in listed if d["neuron_device"] != 11]
    (tmp_path / "two_missing.json").write_text(json.dumps(listed))
    for name in ("nccom_local_trn1.txt", "fi_info_trn1.txt", "pingpong_ok.txt"):
        (tmp_path / name).write_text((samples / name).read_text())
    monkeypatch.setenv("SAMPLES", str(tmp_path))
    monkeypatch.setenv("NEURON_LS", "two_missing.json")
    cluster = DraCluster(nodes={"ip-10-0-0-1": dra_node()}, token_node="ip-10-0-0-1")
    assert run_check(cluster, token, file_system) == 1
    assert cluster.rules == {}


def _chart(api: str | None) -> Any:
    values = NodeCheckValues(
        image=IMAGE,
        lustre_host="fs.example",
        region="us-west-2",
        vpc_cidr="10.0.0.0/16",
        device_taint_rule_api=api,
    )
    return synth(lambda app: NodeCheckChart(app, "NodeCheck", values=values))


def test_the_daemon_set_fences_devices_only_where_the_rules_are_served() -> None:
    for api, expected in (("resource.k8s.io/v1beta2", True), (None, False)):
        manifests = _chart(api)
        role = only(manifests, "ClusterRole")
        writes_rules = any("devicetaintrules" in rule.get("resources", []) for rule in role["rules"])
        [container] = only(manifests, "DaemonSet")["spec"]["template"]["spec"]["containers"]
        environment = {variable["name"]: variable.get("value") for variable in container["env"]}
        assert writes_rules is expected
        assert (environment.get("DEVICE_TAINT_RULE_API") == api) is True
        assert ("FAULTY_DEVICE_TAINT_KEY" in environment) is expected
    assert NODE_CHECK_NAMESPACE == "kube-system"


def test_no_eks_version_gets_fencing_while_volcano_reads_rules_only_at_v1alpha3() -> None:
    """EKS serves no alpha API and Volcano 1.15.1 reads DeviceTaintRules only at v1alpha3: a fence
    Volcano cannot see would evict a run and let Volcano place it on the same device again."""
    assert VOLCANO_DEVICE_TAINT_RULE_API == "resource.k8s.io/v1alpha3"
    assert [version for version in DEVICE_TAINTS if device_taints_usable(version)] == []
    config = parse_config(DRA)
    assert device_taint_rule_api(config, dra_values(config)) is None
    assert device_taint_rule_api(config, dra_values(config, device_taints=True)) == "resource.k8s.io/v1beta2"
