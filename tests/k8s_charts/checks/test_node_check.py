"""Every new Trainium node proves itself before a gang lands on it, and the check can do no more than that.

- the verdict parser on recorded tool outputs (tests/k8s_charts/checks/node_check_samples/, from documented formats);
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
import shutil
import socket
import sys
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from cluster_facts.autoscaling import TAINT_TAG_PREFIX, node_template_tags
from cluster_facts.instance_catalog import CATALOG
from cluster_facts.kubernetes_names import (
    EFA_INTERFACES_LABEL,
    KUBE_DNS_LABELS,
    NEURON_CORES_LABEL,
    NEURON_DEVICES_LABEL,
    NEURON_TAINT_KEY,
    NODE_GROUP_LABEL,
    VOLCANO_JOB_NAME_LABEL,
    system_node_group,
    trainium_node_labels,
)
from cluster_facts.node_check import (
    EFA_ERROR_COUNTERS,
    EFA_ERROR_LIMIT,
    EFA_ERROR_WINDOW_SECONDS,
    EFA_SUSPECT_TAINT,
    EFA_SUSPECT_TAINT_KEY,
    NODE_CHECK_CONDITION,
    NODE_CHECK_FAILED_TAINT_KEY,
    NODE_CHECK_NAME,
    NODE_CHECK_NAMESPACE,
    NODE_CHECK_TAINT,
    NODE_CHECK_TAINT_KEY,
    NODE_FENCE_NAME,
    NODE_READ_SECONDS,
    REPLACEMENT_RECORD_PREFIX,
    STARTUP_TAINT_PREFIX,
    WATCH_SECONDS,
    replacement_record,
)
from k8s_charts.checks.node_check import NodeCheckAdmissionChart, NodeCheckChart, NodeCheckValues
from k8s_charts.devices.device_plugin_admission import NODE_NAME_EXTRA
from k8s_charts.devices.trainium_scheduling import device_plugin_tolerations
from k8s_charts.runs.training_run import TrainingRunChart
from tests.admission import Decision, admission_request, admit
from tests.k8s_charts.manifests import Manifest, only, synth
from tests.k8s_charts.runs.test_training_run import RUN
from tests.k8s_validation import assert_valid
from tests.netpol import Cluster as NetworkCluster
from tests.netpol import Pod
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


def repair(**changes: Any) -> Any:
    """The check's repair settings as its DaemonSet gives them (one replacement per group in 30 minutes)."""
    fields: dict[str, Any] = {
        "replace": True,
        "namespace": NODE_CHECK_NAMESPACE,
        "group_label": NODE_GROUP_LABEL,
        "record_prefix": REPLACEMENT_RECORD_PREFIX,
        "budget": program("node_check_budget").Budget(per_window=1, window_seconds=1800),
        "failed_taint_key": NODE_CHECK_FAILED_TAINT_KEY,
        "timeout": 10,
    }
    return checker().Repair(**(fields | changes))


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
        # As the system group labels its nodes: its own node-group value, no Neuron labels.
        node["metadata"]["labels"] = {NODE_GROUP_LABEL: system_node_group("trainium")}
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


def empty_record(group: str = "trn1-32xl") -> dict[str, Any]:
    """A group's replacement record as the chart creates it (no data) and the API server stores it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": replacement_record(group),
            "namespace": NODE_CHECK_NAMESPACE,
            "resourceVersion": "7",
        },
    }


@dataclass
class Cluster:
    """The nodes and the groups' replacement records; every node write of the check's account runs
    through the rendered policy first; a record write must carry the version it read (409 otherwise),
    as the API server's optimistic concurrency has it."""

    nodes: dict[str, dict[str, Any]]
    token_node: str
    events: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    configmaps: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {replacement_record("trn1-32xl"): empty_record()}
    )
    listed: list[int] = field(default_factory=list)
    """The items of each page of nodes listed."""
    reads: list[str] = field(default_factory=list)
    """The nodes read one by one (GET), in order."""

    def answer_configmap(self, method: str, name: str, body: Any) -> tuple[int, Any]:
        if name not in self.configmaps:
            return 404, {"kind": "Status", "code": 404}
        current = self.configmaps[name]
        if method == "GET":
            return 200, copy.deepcopy(current)
        assert method == "PUT", method
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
        self.configmaps[name] = stored
        return 200, stored

    def answer(  # noqa: PLR0911, PLR0912 - one answer per kind of request
        self, method: str, path: str, headers: Mapping[str, str], body: Any
    ) -> tuple[int, Any]:
        if method == "POST" and path == f"/api/v1/namespaces/{NODE_CHECK_NAMESPACE}/events":
            self.events.append(body)
            return 201, body
        parts = path.split("?", maxsplit=1)[0].strip("/").split("/")
        if parts[:5] == ["api", "v1", "namespaces", NODE_CHECK_NAMESPACE, "configmaps"]:
            return self.answer_configmap(method, parts[5], body)
        if method == "GET" and parts == ["api", "v1", "nodes"]:
            # An existence selector, as the API server reads it; pages in name order (etcd's keys).
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
            selector = query["labelSelector"][0]
            items = sorted(
                (n for n in self.nodes.values() if selector in n["metadata"].get("labels", {})),
                key=lambda n: n["metadata"]["name"],
            )
            start = int(query.get("continue", ["0"])[0])
            limit = int(query.get("limit", ["0"])[0]) or len(items)
            page = items[start : start + limit]
            self.listed.append(len(page))
            more = {"continue": str(start + limit)} if start + limit < len(items) else {}
            return 200, {"kind": "NodeList", "metadata": more, "items": page}
        if parts[:3] != ["api", "v1", "nodes"] or parts[3] not in self.nodes:
            return 404, {"kind": "Status", "code": 404}
        name, sub = parts[3], (parts[4] if len(parts) > 4 else "")
        old = self.nodes[name]
        if method == "GET":
            self.reads.append(name)
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
                if operation["op"] in ("replace", "add"):
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
    # The group of an instance, for describe-auto-scaling-instances --query ... --output text.
    "aws": (
        'echo "aws $*" >> "$RECORD"; case "$*" in *describe-auto-scaling-instances*) '
        'echo "${AWS_GROUP:-eks-trn1-32xl-0ac9f7a2}";; esac; exit "${AWS_EXIT:-0}"'
    ),
}


def write_tools(bin_dir: Path) -> Path:
    """``TOOLS`` as executables in ``bin_dir`` (made if missing), for a PATH."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, body in TOOLS.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


@pytest.fixture
def node_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Stand-ins for the node's tools, printing the recorded samples; returns the record of calls."""
    bin_dir = write_tools(tmp_path / "bin")
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


def run_check(cluster: Cluster, token: Path, lustre_port: int, *, fence: Any = None) -> int:
    """``check_node`` on the cluster's token node; ``fence``: a DeviceFence (node_check_devices.py)."""
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
                repair=repair(),
                fence=fence,
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
                image=IMAGE,
                lustre_host="fs-0123.fsx.us-west-2.amazonaws.com",
                region="us-west-2",
                vpc_cidr="10.0.0.0/16",
            ),
        )
    )
    assert_valid(manifests)
    return manifests


def test_the_check_runs_on_every_trainium_node_tolerating_only_what_it_must() -> None:
    spec = only(chart(), "DaemonSet")["spec"]["template"]["spec"]
    [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    # The system nodes carry the node-group label too: only the Neuron labels tell Trainium nodes.
    assert term["matchExpressions"] == [{"key": NEURON_DEVICES_LABEL, "operator": "Exists"}]
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
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    ]
    assert only(manifests, "Role")["rules"] == [
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}
    ]
    assert only(manifests, "ServiceAccount")["automountServiceAccountToken"] is False


def test_the_pod_carries_every_program_it_imports() -> None:
    data = only(chart(), "ConfigMap")["data"]
    assert set(data) == {
        "node_check.py",
        "node_check_budget.py",
        "node_check_devices.py",
        "node_check_verdict.py",
        "fabric_verdict.py",
        "node_fence.py",
        "kube_api.py",
    }


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


# --- The policy: the EFA taint -------------------------------------------------------------------


def with_efa_taint(node: dict[str, Any], taint: dict[str, str] | None = None) -> dict[str, Any]:
    new = copy.deepcopy(node)
    new["spec"]["taints"] = [*new["spec"]["taints"], dict(taint or EFA_SUSPECT_TAINT)]
    return new


def test_the_check_may_put_on_and_lift_the_efa_taint_of_its_own_node() -> None:
    checked = trainium_node(taints=[NEURON_TAINT])
    suspect = with_efa_taint(checked)
    assert decide(checked, suspect).allowed
    assert decide(suspect, checked).allowed


@pytest.mark.parametrize(
    "change",
    [
        "another value",
        "NoExecute",
        "the startup taint back",
        "on another node",
        "and remove the Neuron taint",
    ],
)
def test_the_efa_taint_is_the_only_one_the_check_may_put_on(change: str) -> None:
    checked = trainium_node(taints=[NEURON_TAINT])
    token_node = "ip-10-0-0-1"
    if change == "another value":
        new = with_efa_taint(checked, {**EFA_SUSPECT_TAINT, "value": "x"})
    elif change == "NoExecute":
        new = with_efa_taint(checked, {**EFA_SUSPECT_TAINT, "effect": "NoExecute"})
    elif change == "the startup taint back":
        new = with_efa_taint(checked, dict(NODE_CHECK_TAINT))
    elif change == "on another node":
        new, token_node = with_efa_taint(checked), "ip-10-0-0-2"
    else:
        new = with_efa_taint(checked)
        new["spec"]["taints"] = [dict(EFA_SUSPECT_TAINT)]
    decision = decide(checked, new, token_node=token_node)
    assert decision.matched and not decision.allowed, change


# --- The watch: EFA errors on a node in use, a held node, an unresponsive peer -------------------


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """This node's sysfs, from the recorded tree (two EFA devices and one other RDMA device)."""
    root = tmp_path / "sys"
    shutil.copytree(SAMPLES / "efa_sysfs", root)
    return root


def grow(sysfs: Path, device: str, counter: str, by: int) -> None:
    path = sysfs / "class/infiniband" / device / "ports/1/hw_counters" / counter
    path.write_text(f"{int(path.read_text()) + by}\n")


NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def watch_settings(sysfs: Path, **changes: Any) -> Any:
    fields: dict[str, Any] = {
        "node_name": "ip-10-0-0-1",
        "taint_key": NODE_CHECK_TAINT_KEY,
        "efa_taint": EFA_SUSPECT_TAINT,
        "condition_type": NODE_CHECK_CONDITION,
        "labels": {
            "devices": NEURON_DEVICES_LABEL,
            "cores": NEURON_CORES_LABEL,
            "efa_interfaces": EFA_INTERFACES_LABEL,
        },
        "efa_counters": EFA_ERROR_COUNTERS,
        "efa_limit": EFA_ERROR_LIMIT,
        "efa_window_seconds": EFA_ERROR_WINDOW_SECONDS,
        "watch_seconds": WATCH_SECONDS,
        "node_read_seconds": NODE_READ_SECONDS,
        "step_timeout": 10,
        "repair": repair(),
        "sysfs": str(sysfs),
    }
    return checker().WatchSettings(**(fields | changes))


class Watched:
    """The watch of node ip-10-0-0-1 against the stand-in API; each ``tick`` is one pass."""

    def __init__(self, cluster: Cluster, settings: Any, token: Path, now: datetime = NOW) -> None:
        self.cluster, self.settings, self.token, self.now = cluster, settings, token, now
        self.watch: Any = None

    def tick(self, passes: int = 1) -> None:
        with json_api(self.cluster.answer) as url:
            api = checker().Api(server=url, token_file=str(self.token), ca_file=None)
            if self.watch is None:
                self.watch = checker().Watch(api, self.settings)
            self.watch.api = api
            for _ in range(passes):
                self.watch.run_pass()


def node_condition(cluster: Cluster, name: str = "ip-10-0-0-1") -> dict[str, Any] | None:
    return next(
        (c for c in cluster.nodes[name]["status"]["conditions"] if c["type"] == NODE_CHECK_CONDITION), None
    )


def taint_keys(cluster: Cluster, name: str = "ip-10-0-0-1") -> list[str]:
    return [taint["key"] for taint in cluster.nodes[name]["spec"].get("taints") or []]


def test_the_watch_reads_only_the_efa_devices_error_counters(sysfs: Path) -> None:
    counters = checker().efa_counters(EFA_ERROR_COUNTERS, str(sysfs))
    assert {device for device, _, _ in counters} == {"rdmap16s27", "rdmap32s27"}  # not mlx5_0
    assert {name for _, _, name in counters} == set(EFA_ERROR_COUNTERS)
    assert all(value == 0 for value in counters.values())


@pytest.mark.process
@needs_bash
def test_efa_errors_on_a_node_in_use_keep_new_work_off_it_and_touch_nothing_running(
    node_tools: Path, sysfs: Path, token: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = Cluster(nodes={"ip-10-0-0-1": trainium_node(taints=[NEURON_TAINT])}, token_node="ip-10-0-0-1")
    watched = Watched(cluster, watch_settings(sysfs), token)
    watched.tick()  # the first reading
    grow(sysfs, "rdmap32s27", "rdma_read_wr_err", EFA_ERROR_LIMIT)  # at the limit: nothing yet
    watched.tick()
    assert taint_keys(cluster) == [NEURON_TAINT_KEY] and node_condition(cluster) is None
    grow(sysfs, "rdmap32s27", "rdma_read_wr_err", 1)
    watched.tick()
    assert taint_keys(cluster) == [NEURON_TAINT_KEY, EFA_SUSPECT_TAINT_KEY]
    condition = node_condition(cluster)
    assert condition is not None and (condition["status"], condition["reason"]) == ("False", "EfaErrors")
    assert "rdmap32s27:1 rdma_read_wr_err +401" in condition["message"]
    [event] = cluster.events
    assert event["reason"] == "EfaErrors" and cluster.refused == []
    out = capsys.readouterr().out
    assert "TRAINIUM_NODE_CHECK node=ip-10-0-0-1 state=suspect reason=EfaErrors" in out
    # Nothing ran on the node, nothing was replaced: the run goes on.
    assert node_tools.read_text() == ""


@pytest.mark.process
@needs_bash
def test_errors_spread_over_more_than_the_window_are_not_a_fault(
    node_tools: Path, sysfs: Path, token: Path
) -> None:
    cluster = Cluster(nodes={"ip-10-0-0-1": trainium_node(taints=[NEURON_TAINT])}, token_node="ip-10-0-0-1")
    watched = Watched(cluster, watch_settings(sysfs), token)
    watched.tick()
    for _ in range(12):  # 100 a minute for 12 minutes: never more than 400 within five
        grow(sysfs, "rdmap16s27", "unresponsive_remote_events", 80)
        watched.tick()
    assert taint_keys(cluster) == [NEURON_TAINT_KEY]


@pytest.mark.process
@needs_bash
def test_a_quiet_node_in_use_is_read_every_node_read_seconds_not_every_pass(
    node_tools: Path, sysfs: Path, token: Path
) -> None:
    """Issue #36: a read of its own Node on every pass was one request per node per minute."""
    cluster = Cluster(nodes={"ip-10-0-0-1": trainium_node(taints=[NEURON_TAINT])}, token_node="ip-10-0-0-1")
    watched = Watched(cluster, watch_settings(sysfs), token)
    every = NODE_READ_SECONDS // WATCH_SECONDS
    watched.tick(passes=2 * every)
    assert len(cluster.reads) == 2  # the first pass, then one read every ``every`` passes
    # Counters that grow past the limit are acted on at once, from a fresh read of the node.
    grow(sysfs, "rdmap32s27", "rdma_read_wr_err", EFA_ERROR_LIMIT + 1)
    watched.tick()
    # The pass's own read, and the taint's read before its patch.
    assert len(cluster.reads) == 4 and EFA_SUSPECT_TAINT_KEY in taint_keys(cluster)
    # While its taint is on, the node is read every pass (the check acts on it once idle).
    watched.tick(passes=3)
    assert len(cluster.reads) >= 4 + 3


def test_the_check_reads_its_node_less_often_than_it_looks_at_its_counters() -> None:
    assert NODE_READ_SECONDS % WATCH_SECONDS == 0 and NODE_READ_SECONDS >= 10 * WATCH_SECONDS
    env = _environment(only(network_chart(), "DaemonSet"))
    assert env["NODE_READ_SECONDS"] == str(NODE_READ_SECONDS)


def suspect_cluster() -> Cluster:
    return Cluster(
        nodes={"ip-10-0-0-1": trainium_node(taints=[NEURON_TAINT, dict(EFA_SUSPECT_TAINT)])},
        token_node="ip-10-0-0-1",
    )


@pytest.mark.process
@needs_bash
def test_a_suspect_node_in_use_waits_for_its_run(  # noqa: PLR0917 - fixtures
    node_tools: Path,
    sysfs: Path,
    token: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    devices = json.loads(sample("neuron_ls_trn1.json"))
    devices[0]["neuron_processes"] = [
        {"pid": 7, "command": "python3 train.py", "neuron_runtime_version": "2"}
    ]
    (tmp_path / "busy.json").write_text(json.dumps(devices))
    monkeypatch.setenv("SAMPLES", str(tmp_path))
    monkeypatch.setenv("NEURON_LS", "busy.json")
    cluster = suspect_cluster()
    Watched(cluster, watch_settings(sysfs), token).tick()
    assert EFA_SUSPECT_TAINT_KEY in taint_keys(cluster)
    assert "fi_pingpong" not in node_tools.read_text() and "aws" not in node_tools.read_text()
    assert "state=held reason=EfaErrors" in capsys.readouterr().out


@pytest.mark.process
@needs_bash
def test_an_idle_suspect_node_that_passes_its_loopback_takes_work_again(
    node_tools: Path, sysfs: Path, token: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = suspect_cluster()
    Watched(cluster, watch_settings(sysfs), token).tick()
    assert taint_keys(cluster) == [NEURON_TAINT_KEY]
    condition = node_condition(cluster)
    assert condition is not None and (condition["status"], condition["reason"]) == ("True", "NodeCheckPassed")
    assert "aws" not in node_tools.read_text() and cluster.refused == []
    assert "state=cleared reason=NodeCheckPassed" in capsys.readouterr().out


@pytest.mark.process
@needs_bash
def test_an_idle_suspect_node_that_fails_its_loopback_is_replaced_once(
    node_tools: Path, sysfs: Path, token: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINGPONG", "pingpong_lost.txt")
    cluster = suspect_cluster()
    watched = Watched(cluster, watch_settings(sysfs), token)
    watched.tick(passes=2)
    assert EFA_SUSPECT_TAINT_KEY in taint_keys(cluster)
    condition = node_condition(cluster)
    assert condition is not None and (condition["status"], condition["reason"]) == (
        "False",
        "EfaLoopbackFailed",
    )
    calls = [line for line in node_tools.read_text().splitlines() if line.startswith("aws ")]
    assert calls == [
        (
            "aws autoscaling set-instance-health --instance-id i-01abcdef --health-status Unhealthy "
            "--no-should-respect-grace-period"
        )
    ]


def silent(node: dict[str, Any], minutes: float) -> dict[str, Any]:
    """The node controller's view of a node whose kubelet stopped renewing its lease ``minutes`` ago."""
    new = copy.deepcopy(node)
    since = (NOW - timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
    new["status"]["conditions"][0] |= {
        "status": "Unknown",
        "reason": "NodeStatusUnknown",
        "lastTransitionTime": since,
    }
    return new


def peers(*silent_minutes: float, me: str = "ip-10-0-0-1", ready: int = 0) -> Cluster:
    """A Ready system node first by name (the system group labels it with its node group too), this
    node, nodes silent for the given minutes (ip-10-0-0-2, -3, ...), then ``ready`` more."""
    system = trainium_node("ip-10-0-0-0")
    system["metadata"]["labels"] = {NODE_GROUP_LABEL: system_node_group("trainium")}
    system["spec"]["taints"] = []
    nodes = {"ip-10-0-0-0": system, me: trainium_node(me, taints=[NEURON_TAINT])}
    for index, minutes in enumerate(silent_minutes, start=2):
        name = f"ip-10-0-0-{index}"
        nodes[name] = silent(trainium_node(name, taints=[NEURON_TAINT]), minutes)
    for index in range(ready):
        name = f"ip-10-0-1-{index}"
        nodes[name] = trainium_node(name, taints=[NEURON_TAINT])
    return Cluster(nodes=nodes, token_node=me)


def aws_calls(record: Path) -> list[str]:
    return [line for line in record.read_text().splitlines() if line.startswith("aws ")]


def fencer() -> ModuleType:
    return program("node_fence")


class Fenced:
    """The fence (node_fence.py, the Deployment ``node-check-fence``) against the stand-in API;
    each ``tick`` is one pass."""

    def __init__(self, cluster: Cluster, token: Path, now: datetime = NOW, **repair_changes: Any) -> None:
        self.cluster, self.token, self.now = cluster, token, now
        self.settings = fencer().FenceSettings(
            devices_label=NEURON_DEVICES_LABEL,
            fence_after_seconds=300,
            watch_seconds=WATCH_SECONDS,
            repair=repair(**repair_changes),
        )
        self.fence: Any = None

    def tick(self, passes: int = 1) -> None:
        with json_api(self.cluster.answer) as url:
            api = checker().Api(server=url, token_file=str(self.token), ca_file=None)
            if self.fence is None:
                self.fence = fencer().Fence(api, self.settings, now=lambda: self.now)
            self.fence.api = api
            for _ in range(passes):
                self.fence.run_pass()


@pytest.mark.process
@needs_bash
def test_a_node_silent_past_the_limit_is_terminated_through_its_group_once(
    node_tools: Path, token: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Ten Trainium nodes: two may be silent at once; one for six minutes, one for four.
    cluster = peers(6, 4, ready=7)
    before = copy.deepcopy(cluster.nodes)
    Fenced(cluster, token).tick(passes=2)
    assert aws_calls(node_tools) == [
        (
            "aws autoscaling set-instance-health --instance-id i-02abcdef --health-status Unhealthy "
            "--no-should-respect-grace-period"
        )
    ]
    assert cluster.nodes == before  # no write to any node: the instance goes through its group
    [event] = cluster.events
    assert (event["reason"], event["involvedObject"]["name"]) == ("NodeUnresponsive", "ip-10-0-0-2")
    assert (
        "TRAINIUM_NODE_CHECK node=ip-10-0-0-2 state=fenced reason=NodeUnresponsive" in capsys.readouterr().out
    )


@pytest.mark.process
@needs_bash
@pytest.mark.parametrize("answering", [10, 1_200])
def test_the_fence_reads_the_nodes_once_a_pass_and_no_node_check_reads_them(
    answering: int, node_tools: Path, sysfs: Path, token: Path
) -> None:
    """Issue #36: the fence's requests do not grow with the nodes but by a page of 500, and a node's
    own watch reads no node but its own (it read a page of nodes each pass before the fence moved)."""
    cluster = peers(6, ready=answering)  # this node, one silent, ``answering`` more, the system node
    Fenced(cluster, token).tick()
    page = program("kube_api").PAGE
    trainium = answering + 2
    assert cluster.listed == [min(page, trainium - start) for start in range(0, trainium, page)]
    assert len(aws_calls(node_tools)) == 1  # it fenced ip-10-0-0-2
    cluster.listed.clear()
    Watched(cluster, watch_settings(sysfs), token).tick(passes=3)
    assert cluster.listed == []


@pytest.mark.process
@needs_bash
@pytest.mark.parametrize(
    ("case", "cluster", "settings"),
    [
        ("no other Trainium node answers", lambda: peers(6, me="ip-10-0-0-9"), {}),
        ("two of three silent: the network, not the nodes", lambda: peers(6, 6), {}),
        ("silent for less than the limit", lambda: peers(4), {}),
        ("replacement off", lambda: peers(6), {"replace": False}),
    ],
)
def test_no_node_is_fenced_when(
    case: str, cluster: Any, settings: dict[str, Any], node_tools: Path, token: Path
) -> None:
    state = cluster()
    if case.startswith("no other"):
        del state.nodes["ip-10-0-0-9"]  # only the silent node and the system node are left
    Fenced(state, token, **settings).tick()
    assert aws_calls(node_tools) == [], case


# --- Network -------------------------------------------------------------------------------------


def network_chart(**changes: Any) -> list[Manifest]:
    values = NodeCheckValues(
        image=IMAGE,
        lustre_host="fs-0123.fsx.us-west-2.amazonaws.com",
        region="us-west-2",
        vpc_cidr="10.0.0.0/16",
        **changes,
    )
    return synth(lambda app: NodeCheckChart(app, "check", values=values))


def test_the_check_reaches_dns_the_api_server_the_file_system_and_with_replacement_the_aws_api() -> None:
    labels = only(network_chart(), "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    check = Pod(NODE_CHECK_NAMESPACE, labels, "10.0.5.20", "node-check")
    dns = Pod("kube-system", dict(KUBE_DNS_LABELS), "10.0.2.2", "coredns")
    worker = Pod("training", {VOLCANO_JOB_NAME_LABEL: "bert"}, "10.0.5.21", "worker")
    cluster = NetworkCluster(network_chart(), [check, dns, worker])
    assert cluster.may_connect(check, dns, 53, "UDP") and cluster.may_connect(check, dns, 53, "TCP")
    for api_server in ("172.20.0.1", "10.100.0.1", "10.0.3.4"):
        assert cluster.may_connect_to_ip(check, api_server, 443), api_server
    assert cluster.may_connect_to_ip(check, "10.0.5.99", 988)  # the file system, in the VPC
    assert not cluster.may_connect_to_ip(
        check, "10.0.5.99", 1021
    )  # the kernel's client ports are not the pod's
    # The role's credentials, then the Auto Scaling API through the NAT gateway.
    assert cluster.may_connect_to_ip(check, "169.254.170.23", 80)
    assert cluster.may_connect_to_ip(check, "203.0.113.10", 443)
    assert not cluster.may_connect_to_ip(check, "169.254.169.254", 80)  # instance metadata
    assert not cluster.may_connect_to_ip(check, "203.0.113.10", 80)
    assert not cluster.may_connect(check, worker, 2379)
    assert not any(cluster.may_connect(worker, check, port) for port in (80, 443, 47600))
    # Without replacement, no AWS API at all.
    quiet = NetworkCluster(network_chart(replace_failed_nodes=False), [check])
    assert not quiet.may_connect_to_ip(check, "169.254.170.23", 80)
    assert not quiet.may_connect_to_ip(check, "203.0.113.10", 443)
    assert quiet.may_connect_to_ip(check, "10.0.5.99", 988)


def test_the_fence_runs_once_for_the_cluster_unprivileged_on_the_system_nodes() -> None:
    manifests = network_chart()
    fence = only(manifests, "Deployment")
    assert fence["metadata"]["name"] == NODE_FENCE_NAME
    assert (fence["spec"]["replicas"], fence["spec"]["strategy"]["type"]) == (1, "Recreate")
    pod = fence["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NODE_CHECK_NAME  # the check's account and AWS role: nothing new
    assert "tolerations" not in pod  # never on a Trainium node it may have to fence
    assert pod["securityContext"]["runAsNonRoot"] is True
    [container] = pod["containers"]
    assert container["command"][-1].endswith("/node_fence.py")
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    assert {v["name"] for v in pod["volumes"]} == {"program", "scratch"}
    labels = fence["spec"]["template"]["metadata"]["labels"]
    me = Pod(NODE_CHECK_NAMESPACE, labels, "10.0.2.30", NODE_FENCE_NAME)
    dns = Pod("kube-system", dict(KUBE_DNS_LABELS), "10.0.2.2", "coredns")
    cluster = NetworkCluster(manifests, [me, dns])
    assert cluster.may_connect(me, dns, 53, "UDP")
    assert cluster.may_connect_to_ip(me, "172.20.0.1", 443)  # the API server
    assert cluster.may_connect_to_ip(me, "169.254.170.23", 80)  # the role's credentials
    assert cluster.may_connect_to_ip(me, "203.0.113.10", 443)  # the Auto Scaling API
    assert not cluster.may_connect_to_ip(me, "169.254.169.254", 80)  # instance metadata
    assert not cluster.may_connect_to_ip(me, "10.0.5.99", 988)  # no file system
    assert not cluster.may_connect(dns, me, 443)


def _environment(manifest: Manifest) -> dict[str, str | None]:
    return {
        item["name"]: item.get("value")
        for item in manifest["spec"]["template"]["spec"]["containers"][0]["env"]
    }


def test_the_watch_and_the_fence_get_their_numbers_from_one_place() -> None:
    manifests = network_chart()
    env = _environment(only(manifests, "DaemonSet"))
    assert env["EFA_TAINT"] == f"{EFA_SUSPECT_TAINT_KEY}:suspect:NoSchedule"
    assert env["EFA_ERROR_COUNTERS"].split() == list(EFA_ERROR_COUNTERS)  # type: ignore[union-attr]
    assert (env["EFA_ERROR_LIMIT"], env["EFA_ERROR_WINDOW_SECONDS"]) == (str(EFA_ERROR_LIMIT), "300")
    assert env["WATCH_SECONDS"] == str(WATCH_SECONDS) and "FENCE_AFTER_SECONDS" not in env
    fence = _environment(only(manifests, "Deployment"))
    assert (fence["WATCH_SECONDS"], fence["FENCE_AFTER_SECONDS"]) == (str(WATCH_SECONDS), "300")
    for key in (
        "REPLACEMENTS_PER_WINDOW",
        "REPLACEMENT_WINDOW_SECONDS",
        "REPLACEMENT_RECORD_PREFIX",
        "AWS_REGION",
    ):
        assert fence[key] == env[key], key
    # Without replacement, or with unresponsive nodes left to EKS's repair: no fence at all.
    for changes in ({"replace_failed_nodes": False}, {"replace_unresponsive_after_seconds": None}):
        assert not [m for m in network_chart(**changes) if m["kind"] == "Deployment"], changes
    assert _environment(only(network_chart(replace_failed_nodes=False), "DaemonSet"))["REPAIR"] == "none"
