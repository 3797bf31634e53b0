"""Every new Trainium node proves itself before a gang lands on it, and the check can do no more than that.

- the verdict parser on recorded tool outputs (tests/k8s/node_check_samples/, from documented formats);
- node_check.py end to end: stand-ins for the node's tools on PATH, a real TCP listener for the
  file system, and a small Kubernetes API on loopback that applies the program's patches and runs
  every node write through the rendered ValidatingAdmissionPolicy (tests/admission.py), so the
  program's real requests are what the policy judges;
- the policy's refusals; the chart (RBAC, tolerations, what runs where);
- who tolerates the startup taint: the device plugins and the check, never a training pod.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from cluster_facts.autoscaling import TAINT_TAG_PREFIX, node_template_tags
from cluster_facts.instance_catalog import CATALOG
from cluster_facts.kubernetes_names import (
    EFA_INTERFACES_LABEL,
    NEURON_CORES_LABEL,
    NEURON_DEVICES_LABEL,
    NEURON_TAINT_KEY,
    NODE_GROUP_LABEL,
    trainium_node_labels,
)
from cluster_facts.node_check import (
    NODE_CHECK_CONDITION,
    NODE_CHECK_NAME,
    NODE_CHECK_NAMESPACE,
    NODE_CHECK_TAINT,
    NODE_CHECK_TAINT_KEY,
    STARTUP_TAINT_PREFIX,
)
from k8s_charts.device_plugin_admission import NODE_NAME_EXTRA
from k8s_charts.node_check import NodeCheckAdmissionChart, NodeCheckChart, NodeCheckValues
from k8s_charts.training_run import TrainingRunChart
from k8s_charts.trainium_scheduling import device_plugin_tolerations
from tests.admission import Decision, admission_request, admit
from tests.k8s.manifests import Manifest, only, synth
from tests.k8s.test_training_run import RUN
from tests.k8s_validation import assert_valid
from tests.pod_programs import program
from tests.stand_in_api import json_api

SAMPLES = Path(__file__).parent / "node_check_samples"
TRN1 = CATALOG["trn1.32xlarge"]
USER = f"system:serviceaccount:{NODE_CHECK_NAMESPACE}:{NODE_CHECK_NAME}"
NEURON_TAINT = {"key": NEURON_TAINT_KEY, "value": "present", "effect": "NoSchedule"}
IMAGE = "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.27.1-ubuntu24.04"


def verdicts() -> ModuleType:
    return program("node_check_verdict")


def checker() -> ModuleType:
    return program("node_check")


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def expected_trn1() -> Any:
    return verdicts().Expected(
        devices=TRN1.chips, cores=TRN1.neuron_cores, efa_interfaces=TRN1.efa_interfaces
    )


def healthy_outputs(**changes: Any) -> Any:
    domains = verdicts().efa_domains(sample("fi_info_trn1.txt"))
    fields: dict[str, Any] = {
        "neuron_ls": sample("neuron_ls_trn1.json"),
        "nccom": sample("nccom_local_trn1.txt"),
        "fi_info": sample("fi_info_trn1.txt"),
        "pingpongs": {domain: (sample("pingpong_ok.txt"), 0) for domain in domains},
        "lustre_problem": None,
    }
    return verdicts().Outputs(**(fields | changes))


# --- The verdict on recorded outputs -------------------------------------------------------------


def test_a_healthy_trn1_node_passes() -> None:
    verdict = verdicts().judge(healthy_outputs(), expected_trn1())
    assert verdict.passed, verdict.line
    assert verdict.reason == "NodeCheckPassed"
    assert "16 Neuron devices, 32 NeuronCores" in verdict.message
    assert "8 EFA devices pass loopback" in verdict.message


def test_the_parsers_read_the_documented_formats() -> None:
    module = verdicts()
    devices = module.neuron_devices(sample("neuron_ls_trn1.json"))
    assert devices is not None and len(devices) == 16
    assert module.efa_domains(sample("fi_info_trn1.txt"))[:2] == ["rdmap16s27-rdm", "rdmap32s27-rdm"]
    assert module.pingpong_ok(sample("pingpong_ok.txt"), 0)
    assert not module.pingpong_ok(sample("pingpong_lost.txt"), 0)
    assert not module.pingpong_ok(sample("pingpong_ok.txt"), 1)
    assert not module.pingpong_ok("", 0)


@pytest.mark.parametrize(
    ("changes", "reason", "words"),
    [
        ({"neuron_ls": "", "neuron_ls_status": 127}, "NeuronToolsFailed", "neuron-ls exited 127"),
        ({"neuron_ls": "Neuron DKMS Driver is not running"}, "NeuronToolsFailed", "without a device list"),
        (
            {"neuron_ls": sample("neuron_ls_trn1_device_missing.json")},
            "NeuronDevicesMissing",
            "lists 15 Neuron devices; the instance type has 16",
        ),
        (
            {"neuron_ls": sample("neuron_ls_trn1.json").replace('"nc_count": 2', '"nc_count": 1', 1)},
            "NeuronCoresMissing",
            "lists 31 NeuronCores; the instance type has 32",
        ),
        (
            {"nccom": sample("nccom_local_trn1_failed.txt"), "nccom_status": 1},
            "NeuronCollectiveFailed",
            "Failure running neuron-bench",
        ),
        (
            {"nccom": "nccom-test timed out after 120s", "nccom_status": 124},
            "NeuronCollectiveFailed",
            "exited 124",
        ),
        (
            {"fi_info": sample("fi_info_trn1_one_missing.txt")},
            "EfaDevicesMissing",
            "fi_info lists 7 EFA devices",
        ),
        (
            {"fi_info": "fi_getinfo: -61 (No data available)", "fi_info_status": 1},
            "EfaDevicesMissing",
            "none",
        ),
        (
            {"pingpongs": {"rdmap16s27-rdm": (sample("pingpong_lost.txt"), 0)}},
            "EfaLoopbackFailed",
            "failed on 8 of 8 devices",
        ),
        (
            {"lustre_problem": "no TCP connection to the file system at fs:988 within 10s: timed out"},
            "LustreUnreachable",
            "fs:988",
        ),
    ],
)
def test_each_fault_fails_the_node_with_a_reason_a_person_can_read(
    changes: dict[str, Any], reason: str, words: str
) -> None:
    verdict = verdicts().judge(healthy_outputs(**changes), expected_trn1())
    assert not verdict.passed
    assert verdict.reason == reason, verdict.line
    assert words in verdict.message, verdict.message
    # A node condition's reason is CamelCase without spaces (what `kubectl describe node` lists).
    assert verdict.reason.isalnum()


def test_one_lost_efa_device_is_named() -> None:
    domains = verdicts().efa_domains(sample("fi_info_trn1.txt"))
    pingpongs = {domain: (sample("pingpong_ok.txt"), 0) for domain in domains}
    pingpongs[domains[5]] = ("fi_pingpong: fi_getinfo(): -61", 1)
    verdict = verdicts().judge(healthy_outputs(pingpongs=pingpongs), expected_trn1())
    assert verdict.reason == "EfaLoopbackFailed"
    assert verdict.message.endswith(f"1 of 8 devices: {domains[5]}")


# --- The policy ----------------------------------------------------------------------------------


def policy() -> list[Manifest]:
    manifests = synth(lambda app: NodeCheckAdmissionChart(app, "admission"))
    assert_valid(manifests)
    return manifests


def trainium_node(name: str = "ip-10-0-0-1", *, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": "100",
            "labels": {**trainium_node_labels(TRN1, node_group="trn1-32xl"), "kubernetes.io/hostname": name},
        },
        "spec": {
            "providerID": f"aws:///us-west-2d/i-0{name[-1]}abcdef",
            "taints": taints if taints is not None else [NEURON_TAINT, dict(NODE_CHECK_TAINT)],
        },
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                },
                {
                    "type": "AcceleratedHardwareReady",
                    "status": "True",
                    "reason": "NeuronHealthy",
                    "message": "",
                },
            ],
            "allocatable": {"aws.amazon.com/neuron": "16"},
        },
    }


def decide(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    sub_resource: str = "",
    token_node: str | None = "ip-10-0-0-1",
    user: str = USER,
) -> Decision:
    extra = {NODE_NAME_EXTRA: [token_node]} if token_node else None
    request = admission_request(
        user=user,
        operation="UPDATE",
        resource="nodes",
        name=old["metadata"]["name"],
        sub_resource=sub_resource,
        extra=extra,
        kind="Node",
    )
    return admit(policy(), request, obj=new, old=old)


def without_startup_taint(node: dict[str, Any]) -> dict[str, Any]:
    new = copy.deepcopy(node)
    new["spec"]["taints"] = [taint for taint in new["spec"]["taints"] if taint["key"] != NODE_CHECK_TAINT_KEY]
    return new


def with_condition(
    node: dict[str, Any], condition_type: str = NODE_CHECK_CONDITION, status: str = "True"
) -> dict[str, Any]:
    new = copy.deepcopy(node)
    new["status"]["conditions"].append(
        {"type": condition_type, "status": status, "reason": "NodeCheckPassed", "message": "ok"}
    )
    return new


def test_the_check_may_lift_the_startup_taint_of_its_own_trainium_node() -> None:
    node = trainium_node()
    assert decide(node, without_startup_taint(node)).allowed
    # Also when it is the last taint (spec.taints goes).
    lone = trainium_node(taints=[dict(NODE_CHECK_TAINT)])
    emptied = copy.deepcopy(lone)
    del emptied["spec"]["taints"]
    assert decide(lone, emptied).allowed


def test_the_check_may_set_its_own_condition() -> None:
    node = trainium_node()
    assert decide(node, with_condition(node), sub_resource="status").allowed


@pytest.mark.parametrize(
    "change",
    [
        "remove the Neuron taint",
        "add a taint",
        "cordon",
        "relabel",
        "another node",
        "a system node",
        "a token without a node",
    ],
)
def test_the_check_may_change_nothing_else_of_a_node(change: str) -> None:
    node = trainium_node()
    new = without_startup_taint(node)
    token_node: str | None = "ip-10-0-0-1"
    if change == "remove the Neuron taint":
        new["spec"]["taints"] = [dict(NODE_CHECK_TAINT)]
    elif change == "add a taint":
        new["spec"]["taints"].append({"key": "example.com/mine", "value": "x", "effect": "NoSchedule"})
    elif change == "cordon":
        new["spec"]["unschedulable"] = True
    elif change == "relabel":
        new["metadata"]["labels"][NODE_GROUP_LABEL] = "other"
    elif change == "another node":
        token_node = "ip-10-0-0-2"
    elif change == "a system node":
        del node["metadata"]["labels"][NODE_GROUP_LABEL]
        new = without_startup_taint(node)
    elif change == "a token without a node":
        token_node = None
    decision = decide(node, new, token_node=token_node)
    assert decision.matched and not decision.allowed, change


@pytest.mark.parametrize("change", ["another condition", "two of its own", "status field"])
def test_the_check_may_set_no_other_status(change: str) -> None:
    node = trainium_node()
    new = with_condition(node)
    if change == "another condition":
        new["status"]["conditions"][1]["status"] = "False"
    elif change == "two of its own":
        new = with_condition(new)
    elif change == "status field":
        new["status"]["allocatable"]["aws.amazon.com/neuron"] = "32"
    decision = decide(node, new, sub_resource="status")
    assert decision.matched and not decision.allowed, change


def test_nobody_else_is_judged() -> None:
    node = trainium_node()
    new = copy.deepcopy(node)
    new["spec"]["taints"] = []
    decision = decide(node, new, user="system:node:ip-10-0-0-1")
    assert not decision.matched and decision.allowed


# --- The program end to end ----------------------------------------------------------------------


@dataclass
class Cluster:
    """The nodes; every write of the check's account runs through the rendered policy first."""

    nodes: dict[str, dict[str, Any]]
    token_node: str
    events: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    def answer(self, method: str, path: str, headers: Mapping[str, str], body: Any) -> tuple[int, Any]:
        if method == "POST" and path == f"/api/v1/namespaces/{NODE_CHECK_NAMESPACE}/events":
            self.events.append(body)
            return 201, body
        parts = path.split("?", maxsplit=1)[0].strip("/").split("/")
        if parts[:3] != ["api", "v1", "nodes"] or parts[3] not in self.nodes:
            return 404, {"kind": "Status", "code": 404}
        name, sub = parts[3], (parts[4] if len(parts) > 4 else "")
        old = self.nodes[name]
        if method == "GET":
            return 200, old
        if sub == "status":
            assert headers.get("Content-Type") == "application/strategic-merge-patch+json"
            new = copy.deepcopy(old)
            conditions = {condition["type"]: condition for condition in new["status"]["conditions"]}
            for condition in body["status"]["conditions"]:
                conditions[condition["type"]] = {**conditions.get(condition["type"], {}), **condition}
            new["status"]["conditions"] = list(conditions.values())
        else:
            assert headers.get("Content-Type") == "application/json-patch+json"
            new = copy.deepcopy(old)
            for operation in body:
                *parents, last = operation["path"].strip("/").split("/")
                target = new
                for part in parents:
                    target = target[part]
                if operation["op"] == "test" and target.get(last) != operation["value"]:
                    return 422, {"kind": "Status", "code": 422}
                if operation["op"] == "replace":
                    target[last] = operation["value"]
        decision = decide(old, new, sub_resource=sub, token_node=self.token_node)
        if not decision.allowed:
            self.refused.extend(decision.messages)
            return 403, {"kind": "Status", "code": 403, "message": "; ".join(decision.messages)}
        new["metadata"]["resourceVersion"] = str(int(old["metadata"]["resourceVersion"]) + 1)
        self.nodes[name] = new
        return 200, new


TOOLS = {
    "neuron-ls": 'cat "$SAMPLES/$NEURON_LS"',
    "nccom-test": 'echo "$@" >> "$RECORD"; cat "$SAMPLES/$NCCOM"; exit "${NCCOM_EXIT:-0}"',
    "fi_info": 'cat "$SAMPLES/$FI_INFO"',
    # The server waits until it is killed; the client prints its statistics.
    "fi_pingpong": 'case " $* " in *" 127.0.0.1 "*) cat "$SAMPLES/$PINGPONG";; *) exec sleep 30;; esac',
    "aws": 'echo "aws $*" >> "$RECORD"; exit "${AWS_EXIT:-0}"',
}


@pytest.fixture
def node_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stand-ins for the node's tools, printing the recorded samples; returns the record of calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in TOOLS.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "record"
    record.touch()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for variable, value in {
        "SAMPLES": str(SAMPLES),
        "RECORD": str(record),
        "NEURON_LS": "neuron_ls_trn1.json",
        "NCCOM": "nccom_local_trn1.txt",
        "FI_INFO": "fi_info_trn1.txt",
        "PINGPONG": "pingpong_ok.txt",
    }.items():
        monkeypatch.setenv(variable, value)
    return record


@pytest.fixture
def file_system() -> Iterator[int]:
    """A listening TCP port: the file system answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def run_check(cluster: Cluster, token: Path, lustre_port: int) -> int:
    module = checker()
    with json_api(cluster.answer) as url:
        api = module.Api(server=url, token_file=str(token), ca_file=None)
        return int(
            module.check_node(
                api,
                node_name=cluster.token_node,
                taint_key=NODE_CHECK_TAINT_KEY,
                condition_type=NODE_CHECK_CONDITION,
                labels={
                    "devices": NEURON_DEVICES_LABEL,
                    "cores": NEURON_CORES_LABEL,
                    "efa_interfaces": EFA_INTERFACES_LABEL,
                },
                lustre_host="127.0.0.1",
                lustre_port=lustre_port,
                step_timeout=10,
                repair="replace",
                namespace=NODE_CHECK_NAMESPACE,
            )
        )


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("node-check-token\n")
    return path


needs_bash = pytest.mark.skipif(sys.platform == "win32", reason="stand-in tools are bash scripts")


@pytest.mark.process
@needs_bash
def test_a_healthy_node_loses_its_startup_taint_through_the_policy(
    node_tools: Path, file_system: int, token: Path
) -> None:
    cluster = Cluster(nodes={"ip-10-0-0-1": trainium_node()}, token_node="ip-10-0-0-1")
    assert run_check(cluster, token, file_system) == 0
    node = cluster.nodes["ip-10-0-0-1"]
    assert node["spec"]["taints"] == [NEURON_TAINT]
    [condition] = [c for c in node["status"]["conditions"] if c["type"] == NODE_CHECK_CONDITION]
    assert (condition["status"], condition["reason"]) == ("True", "NodeCheckPassed")
    assert cluster.refused == [] and cluster.events == []
    # The local all-reduce ran across every NeuronCore of the node, with its result checked.
    assert "-r 32 -d fp32 -b 32M -e 32M --check allr" in node_tools.read_text()
    assert "aws" not in node_tools.read_text()


@pytest.mark.process
@needs_bash
def test_a_node_missing_a_device_keeps_its_taint_says_why_and_is_replaced(
    node_tools: Path, file_system: int, token: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEURON_LS", "neuron_ls_trn1_device_missing.json")
    cluster = Cluster(nodes={"ip-10-0-0-1": trainium_node()}, token_node="ip-10-0-0-1")
    assert run_check(cluster, token, file_system) == 1
    node = cluster.nodes["ip-10-0-0-1"]
    assert NODE_CHECK_TAINT_KEY in [taint["key"] for taint in node["spec"]["taints"]]
    [condition] = [c for c in node["status"]["conditions"] if c["type"] == NODE_CHECK_CONDITION]
    assert (condition["status"], condition["reason"]) == ("False", "NeuronDevicesMissing")
    assert "15 Neuron devices" in condition["message"]
    [event] = cluster.events
    assert event["reason"] == "NeuronDevicesMissing" and event["involvedObject"]["kind"] == "Node"
    assert cluster.refused == []
    assert (
        "aws autoscaling set-instance-health --instance-id i-01abcdef --health-status Unhealthy "
        "--no-should-respect-grace-period"
    ) in node_tools.read_text()


@pytest.mark.process
@needs_bash
def test_an_unreachable_file_system_fails_the_node(node_tools: Path, token: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = unused.getsockname()[1]
    cluster = Cluster(nodes={"ip-10-0-0-1": trainium_node()}, token_node="ip-10-0-0-1")
    assert run_check(cluster, token, closed) == 1
    [condition] = [
        c for c in cluster.nodes["ip-10-0-0-1"]["status"]["conditions"] if c["type"] == NODE_CHECK_CONDITION
    ]
    assert condition["reason"] == "LustreUnreachable"


@pytest.mark.process
@needs_bash
def test_a_checked_node_is_never_checked_again(node_tools: Path, file_system: int, token: Path) -> None:
    """A restarted pod on a node in use: no collective next to a training pod, no write."""
    cluster = Cluster(nodes={"ip-10-0-0-1": trainium_node(taints=[NEURON_TAINT])}, token_node="ip-10-0-0-1")
    before = copy.deepcopy(cluster.nodes)
    assert run_check(cluster, token, file_system) == 0
    assert cluster.nodes == before
    assert node_tools.read_text() == ""


@pytest.mark.process
@needs_bash
def test_a_node_already_in_use_is_not_checked_but_released(
    node_tools: Path, file_system: int, token: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The taint back on a node whose devices a training run uses (a node group's taints changed):
    no all-reduce next to the run."""
    devices = json.loads(sample("neuron_ls_trn1.json"))
    devices[3]["neuron_processes"] = [
        {"pid": 4242, "command": "python3 train.py", "neuron_runtime_version": "2.0.0"}
    ]
    (tmp_path / "busy.json").write_text(json.dumps(devices))
    monkeypatch.setenv("SAMPLES", str(tmp_path))
    monkeypatch.setenv("NEURON_LS", "busy.json")
    cluster = Cluster(nodes={"ip-10-0-0-1": trainium_node()}, token_node="ip-10-0-0-1")
    assert run_check(cluster, token, file_system) == 0
    assert cluster.nodes["ip-10-0-0-1"]["spec"]["taints"] == [NEURON_TAINT]
    assert "allr" not in node_tools.read_text() and cluster.refused == []


# --- The chart -----------------------------------------------------------------------------------


def chart() -> list[Manifest]:
    manifests = synth(
        lambda app: NodeCheckChart(
            app,
            "check",
            values=NodeCheckValues(
                image=IMAGE, lustre_host="fs-0123.fsx.us-west-2.amazonaws.com", region="us-west-2"
            ),
            vpc_cidr="10.0.0.0/16",
        )
    )
    assert_valid(manifests)
    return manifests


def test_the_check_runs_on_every_trainium_node_tolerating_only_what_it_must() -> None:
    spec = only(chart(), "DaemonSet")["spec"]["template"]["spec"]
    [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [{"key": NODE_GROUP_LABEL, "operator": "Exists"}]
    assert {(t["key"], t["effect"]) for t in spec["tolerations"]} == {
        (NEURON_TAINT_KEY, "NoSchedule"),
        (NODE_CHECK_TAINT_KEY, "NoSchedule"),
    }
    [container] = spec["containers"]
    # It takes no Neuron device or EFA interface from the scheduler: training gets them all.
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert env["TAINT_KEY"] == NODE_CHECK_TAINT_KEY and env["CONDITION_TYPE"] == NODE_CHECK_CONDITION
    assert env["REPAIR"] == "replace" and env["LUSTRE_PORT"] == "988"


def test_rbac_grants_the_nodes_and_events_the_policy_then_narrows() -> None:
    manifests = chart()
    rules = only(manifests, "ClusterRole")["rules"]
    assert rules == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    ]
    assert only(manifests, "Role")["rules"] == [
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}
    ]
    assert only(manifests, "ServiceAccount")["automountServiceAccountToken"] is False


def test_the_pod_carries_every_program_it_imports() -> None:
    data = only(chart(), "ConfigMap")["data"]
    assert set(data) == {"node_check.py", "node_check_verdict.py", "fabric_verdict.py", "kube_api.py"}


# --- Who tolerates the startup taint -------------------------------------------------------------


def tolerates_startup_taint(pod_spec: Mapping[str, Any]) -> bool:
    return any(
        (toleration.get("operator") == "Exists" and toleration.get("key") in (None, NODE_CHECK_TAINT_KEY))
        or toleration.get("key") == NODE_CHECK_TAINT_KEY
        for toleration in pod_spec.get("tolerations") or []
    )


def test_training_pods_never_tolerate_the_startup_taint() -> None:
    job = only(synth(lambda app: TrainingRunChart(app, "run", run=RUN)), "Job")
    for task in job["spec"]["tasks"]:
        assert not tolerates_startup_taint(task["template"]["spec"])
    # EKS's ExtendedResourceToleration adds a toleration only for a requested resource's own name.
    assert NODE_CHECK_TAINT_KEY not in {
        "aws.amazon.com/neuron",
        "aws.amazon.com/neuroncore",
        "vpc.amazonaws.com/efa",
    }


def test_the_device_plugins_run_on_an_unchecked_node() -> None:
    keys = {toleration.key for toleration in device_plugin_tolerations()}
    assert NODE_CHECK_TAINT_KEY in keys


def test_scale_up_from_zero_does_not_see_the_startup_taint() -> None:
    """The autoscaler's node template from the Auto Scaling group's tags names only the Neuron taint,
    which every training pod tolerates; the startup taint is one the autoscaler drops when it builds
    a template from a real node (utils/taints/taints.go SanitizeTaints, read in its source at the
    pinned 1.34 release; cluster_facts/node_check.py). No autoscaler runs here: this checks the
    project's side of that reading, not the autoscaler."""
    tags = node_template_tags(TRN1, node_group="trn1-32xl")
    taints = {key.removeprefix(TAINT_TAG_PREFIX) for key in tags if key.startswith(TAINT_TAG_PREFIX)}
    assert taints == {NEURON_TAINT_KEY}
    assert NODE_CHECK_TAINT_KEY.startswith(STARTUP_TAINT_PREFIX)
    assert STARTUP_TAINT_PREFIX == "startup-taint.cluster-autoscaler.kubernetes.io/"
    json.dumps(tags)  # plain strings, as the tagging call sends them
