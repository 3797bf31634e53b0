"""A failed fabric check taints its nodes out of training, with no more power than that.

- which verdicts taint (the verdict program's own lines on the recorded samples);
- fabric_taint.py against a small Kubernetes API on loopback that applies its JSON patches and
  runs every node update through the rendered ValidatingAdmissionPolicy (the CEL evaluator of
  tests/k8s_charts/devices/test_device_plugin_admission.py), so the program's real request is what the policy judges;
- the launcher script end to end: a TCP fallback taints both workers' nodes and says so in the verdict;
- the access chart: least-privilege RBAC, the token only on the launcher, the policy's refusals.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from cluster_facts.kubernetes_names import FABRIC_CHECK_TAINT, NEURON_TAINT_KEY, NODE_GROUP_LABEL
from k8s_charts.checks.fabric_check import FabricCheckAccessChart, taint_text, worker_pods
from tests.conftest import REPO_ROOT
from tests.k8s_charts.checks import test_fabric_check as fabric_check_tests
from tests.k8s_charts.checks.test_fabric_check import (
    chart,
    container,
    needs_bash,
    plain_environment,
    run_launcher,
    sample,
    task,
    verdict,
)
from tests.k8s_charts.devices.test_device_plugin_admission import Decision, admission_request, admit
from tests.k8s_charts.manifests import Manifest, only, synth
from tests.k8s_validation import assert_valid
from tests.pod_programs import program
from tests.stand_in_api import json_api

# The two workers' sshd on loopback, as the launcher's tests use it (a fixture of that module).
workers_listening = fabric_check_tests.workers_listening

GROUP = "trn1"
NAMESPACE = "training"
LAUNCHER = f"system:serviceaccount:{NAMESPACE}:fabric-check-{GROUP}"
NEURON_TAINT = {"key": NEURON_TAINT_KEY, "value": "present", "effect": "NoSchedule"}


def taint_module() -> ModuleType:
    return program("fabric_taint")


@functools.cache
def access(*, taint: bool = True, nodes: int = 2) -> list[Manifest]:
    manifests = synth(
        lambda app: FabricCheckAccessChart(
            app,
            "access",
            node_group=GROUP,
            nodes=nodes,
            namespace=NAMESPACE,
            taint=taint,
            vpc_cidr="10.0.0.0/16",
        )
    )
    assert_valid(manifests)
    return manifests


# --- Which verdicts taint ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "status", "taints"),
    [
        ("healthy_efa", 0, False),
        ("tcp_fallback", 0, True),
        ("efa_degraded", 0, True),
        ("missing_rank", 1, True),
    ],
)
def test_only_a_verdict_against_the_nodes_taints_them(name: str, status: int, taints: bool) -> None:
    line = verdict.judge(sample(name), network_gbps=800, threshold=0.25, exit_status=status).line
    assert taint_module().implicates_nodes(line) is taints, line


def test_a_verdict_that_says_nothing_about_the_nodes_taints_nothing() -> None:
    text = sample("healthy_efa").replace("Selected Provider is efa", "Picked something")
    line = verdict.judge(text, network_gbps=800, threshold=0.25).line
    assert line.startswith("FABRIC CHECK FAIL: the log names no network provider")
    implicates = taint_module().implicates_nodes
    assert not implicates(line)
    for line in (
        "FABRIC CHECK FAIL: worker fabric-check-trn1-worker-0.fabric-check-trn1 (unresolved) did not answer",
        "FABRIC CHECK FAIL: a fabric check needs at least 2 nodes (EFA carries traffic between nodes), got 1",
        "FABRIC CHECK PASS: all-reduce bus bandwidth ...",
    ):
        assert not implicates(line), line


# --- fabric_taint.py against an API server on loopback ---------------------------------------------


def node(name: str, *, group: str = GROUP, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "100", "labels": {NODE_GROUP_LABEL: group}},
        "spec": {
            "providerID": f"aws:///us-west-2d/i-{name}",
            "taints": taints if taints is not None else [NEURON_TAINT],
        },
        "status": {"allocatable": {"aws.amazon.com/neuron": "16"}},
    }


def _apply_json_patch(document: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any] | None:
    """RFC 6902 for the operations the program sends (test, add); None when a test fails."""
    result = copy.deepcopy(document)
    for operation in patch:
        *parents, last = operation["path"].strip("/").split("/")
        target: Any = result
        for part in parents:
            target = target[part]
        if operation["op"] == "test":
            if target.get(last) != operation["value"]:
                return None
        elif operation["op"] == "add" and last == "-":
            target.append(operation["value"])
        elif operation["op"] == "add":
            target[last] = operation["value"]
        else:
            raise AssertionError(f"unexpected operation {operation}")
    return result


@dataclass
class FakeApi:
    """Pods and nodes; node PATCHes go through the rendered admission policy, as the user ``user``."""

    policy: list[Manifest]
    user: str = LAUNCHER
    pods: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    conflicts: int = 0
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        self.requests.append((method, path, body))
        parts = path.strip("/").split("/")
        pod = (
            parts[5] if parts[:3] == ["api", "v1", "namespaces"] and parts[3:5] == [NAMESPACE, "pods"] else ""
        )
        if method == "GET" and pod in self.pods:
            return 200, {"metadata": {"name": pod}, "spec": {"nodeName": self.pods[pod]}}
        if parts[:3] == ["api", "v1", "nodes"] and parts[3] in self.nodes:
            return self._node(method, parts[3], body)
        return 404, {"kind": "Status", "code": 404}

    def _node(self, method: str, name: str, body: Any) -> tuple[int, Any]:
        current = self.nodes[name]
        if method == "GET":
            return 200, current
        if method == "PATCH":
            if self.conflicts:  # someone else changed the node in between
                self.conflicts -= 1
                current["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
            updated = _apply_json_patch(current, body)
            if updated is None:
                return 422, {"kind": "Status", "code": 422, "reason": "Invalid"}
            updated["metadata"]["resourceVersion"] = str(int(current["metadata"]["resourceVersion"]) + 1)
            decision = admit(
                self.policy,
                admission_request(
                    user=self.user, operation="UPDATE", resource="nodes", name=name, kind="Node"
                ),
                obj=updated,
                old=current,
            )
            self.decisions.append(decision)
            if not decision.allowed:
                return 403, {"kind": "Status", "code": 403, "message": "; ".join(decision.messages)}
            self.nodes[name] = updated
            return 200, updated
        return 404, {"kind": "Status", "code": 404}


@pytest.fixture
def api() -> Iterator[tuple[FakeApi, str]]:
    state = FakeApi(policy=access())

    def answer(method: str, path: str, headers: Mapping[str, str], body: Any) -> tuple[int, Any]:
        assert headers["Authorization"] == "Bearer launcher-token"
        if body is not None:
            assert headers["Content-Type"] == "application/json-patch+json"
        return state.handle(method, path, body)

    with json_api(answer) as url:
        yield state, url


@pytest.fixture
def token_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "serviceaccount"
    directory.mkdir()
    (directory / "token").write_text("launcher-token\n")
    return directory


TCP_VERDICT = "FABRIC CHECK FAIL: network provider is tcp, not EFA (...)"


def run_taint(server: str, token_dir: Path, verdict: str = TCP_VERDICT, pods: str = "") -> tuple[int, str]:
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        status = taint_module().main(
            [
                "--verdict", verdict, "--namespace", NAMESPACE,
                "--pods", pods or ",".join(worker_pods(GROUP, 2)), "--taint", taint_text(),
                "--server", server, "--token-file", str(token_dir / "token"),
            ]
        )  # fmt: skip
    return status, output.getvalue()


def test_a_failed_check_taints_every_node_it_ran_on_and_the_policy_admits_it(
    api: tuple[FakeApi, str], token_dir: Path
) -> None:
    state, server = api
    state.pods = {"fabric-check-trn1-worker-0": "node-a", "fabric-check-trn1-worker-1": "node-b"}
    state.nodes = {"node-a": node("node-a"), "node-b": node("node-b", taints=[])}
    status, output = run_taint(server, token_dir)
    assert status == 0, output
    assert output.splitlines()[-1] == "tainted nodes: node-a node-b"
    for name in ("node-a", "node-b"):
        assert FABRIC_CHECK_TAINT in state.nodes[name]["spec"]["taints"]
    # The Neuron taint stays; the node changed in nothing else.
    assert state.nodes["node-a"]["spec"]["taints"] == [NEURON_TAINT, FABRIC_CHECK_TAINT]
    assert all(decision.matched and decision.allowed for decision in state.decisions)
    patches = [body for method, _, body in state.requests if method == "PATCH"]
    assert patches[0][0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "100"}


def test_a_node_already_tainted_is_left_alone_and_a_concurrent_change_is_retried(
    api: tuple[FakeApi, str], token_dir: Path
) -> None:
    state, server = api
    state.pods = {"fabric-check-trn1-worker-0": "node-a", "fabric-check-trn1-worker-1": "node-b"}
    state.nodes = {
        "node-a": node("node-a", taints=[NEURON_TAINT, FABRIC_CHECK_TAINT]),
        "node-b": node("node-b"),
    }
    state.conflicts = 1
    status, output = run_taint(server, token_dir)
    assert status == 0, output
    assert "node node-a: already tainted trainium/fabric-check=failed:NoSchedule" in output
    assert "node node-b: tainted trainium/fabric-check=failed:NoSchedule" in output
    assert sum(method == "PATCH" for method, _, _ in state.requests) == 2  # node-b: conflict, then done


def test_a_verdict_that_does_not_implicate_the_nodes_calls_no_api(
    api: tuple[FakeApi, str], token_dir: Path
) -> None:
    state, server = api
    status, output = run_taint(
        server, token_dir, verdict="FABRIC CHECK FAIL: the log names no network provider"
    )
    assert (status, output.strip()) == (0, "no node tainted: the verdict does not implicate the nodes")
    assert state.requests == []


def test_a_node_of_another_group_is_refused_by_the_policy_and_reported(
    api: tuple[FakeApi, str], token_dir: Path
) -> None:
    state, server = api
    state.pods = {"fabric-check-trn1-worker-0": "node-a", "fabric-check-trn1-worker-1": "node-x"}
    state.nodes = {"node-a": node("node-a"), "node-x": node("node-x", group="trn2")}
    status, output = run_taint(server, token_dir)
    assert status == 1
    assert "node node-x: NOT tainted: PATCH /api/v1/nodes/node-x: HTTP 403" in output
    assert "may only change nodes of that group" in output
    assert output.splitlines()[-1] == "tainted nodes: node-a"
    assert FABRIC_CHECK_TAINT not in state.nodes["node-x"]["spec"]["taints"]


# --- The launcher, end to end ----------------------------------------------------------------------


@pytest.mark.process
@needs_bash
def test_the_launcher_taints_the_nodes_of_a_tcp_fallback_and_says_so_last(
    tmp_path: Path, api: tuple[FakeApi, str], token_dir: Path, workers_listening: int
) -> None:
    state, server = api
    state.pods = {"fabric-check-trn1-worker-0": "node-a", "fabric-check-trn1-worker-1": "node-b"}
    state.nodes = {"node-a": node("node-a"), "node-b": node("node-b")}
    result, _, termination = run_launcher(
        tmp_path,
        output=sample("tcp_fallback"),
        ssh_port=workers_listening,
        manifests=chart(taint=True),
        environ={"KUBE_API_URL": server, "KUBE_API_TOKEN_FILE": str(token_dir / "token")},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    last = result.stdout.splitlines()[-1]
    assert last.startswith("FABRIC CHECK FAIL: network provider is tcp, not EFA")
    assert last.endswith("; tainted node-a node-b with trainium/fabric-check=failed:NoSchedule")
    assert termination.read_text() == last + "\n"
    assert all(FABRIC_CHECK_TAINT in state.nodes[name]["spec"]["taints"] for name in ("node-a", "node-b"))


@pytest.mark.process
@needs_bash
def test_a_passing_launcher_touches_no_node(
    tmp_path: Path, api: tuple[FakeApi, str], token_dir: Path, workers_listening: int
) -> None:
    state, server = api
    result, _, _ = run_launcher(
        tmp_path,
        output=sample("healthy_efa"),
        ssh_port=workers_listening,
        manifests=chart(taint=True),
        environ={"KUBE_API_URL": server, "KUBE_API_TOKEN_FILE": str(token_dir / "token")},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert state.requests == []


# --- The access chart ------------------------------------------------------------------------------


def test_only_the_launcher_gets_a_token_and_only_when_it_taints() -> None:
    launcher = task(chart(taint=True), "launcher")["template"]["spec"]
    assert (launcher["serviceAccountName"], launcher["automountServiceAccountToken"]) == (
        "fabric-check-trn1",
        True,
    )
    assert task(chart(taint=True), "worker")["template"]["spec"]["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in task(chart(), "launcher")["template"]["spec"]
    environment = plain_environment(chart(taint=True), "launcher")
    assert environment["TAINT"] == "trainium/fabric-check=failed:NoSchedule"
    assert environment["WORKER_PODS"] == "fabric-check-trn1-worker-0,fabric-check-trn1-worker-1"
    assert "TAINT" not in plain_environment(chart(), "launcher")
    # The taint program, then the API client it imports.
    *_, taint_program, api_client = container(chart(), "launcher")["command"]
    assert taint_program.startswith('"""Taint the nodes of a failed fabric check')
    assert api_client == (REPO_ROOT / "cluster_programs" / "kube_api.py").read_text()


def test_without_taint_the_access_chart_is_the_network_policy_alone() -> None:
    assert [manifest["kind"] for manifest in access(taint=False)] == ["NetworkPolicy"]


def test_the_launchers_rbac_is_its_worker_pods_and_nodes_get_and_patch() -> None:
    manifests = access(nodes=3)
    assert only(manifests, "ServiceAccount")["automountServiceAccountToken"] is False
    assert only(manifests, "Role")["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "resourceNames": [
                "fabric-check-trn1-worker-0",
                "fabric-check-trn1-worker-1",
                "fabric-check-trn1-worker-2",
            ],
            "verbs": ["get"],
        }
    ]
    assert only(manifests, "ClusterRole")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}
    ]
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        assert only(manifests, kind)["subjects"] == [
            {"kind": "ServiceAccount", "name": "fabric-check-trn1", "namespace": NAMESPACE}
        ]


def _node_update(
    old: dict[str, Any], new: dict[str, Any], *, user: str = LAUNCHER, sub: str = ""
) -> Decision:
    return admit(
        access(),
        admission_request(
            user=user, operation="UPDATE", resource="nodes", name="node-a", kind="Node", sub_resource=sub
        ),
        obj=new,
        old=old,
    )


def test_the_policy_lets_the_launcher_add_its_taint_and_nothing_else() -> None:
    old = node("node-a")
    tainted = copy.deepcopy(old)
    tainted["spec"]["taints"].append(dict(FABRIC_CHECK_TAINT))
    assert _node_update(old, tainted).allowed
    only_taint = "the fabric check of node group trn1 may only add the taint trainium/fabric-check=failed:NoSchedule to a node"

    untainted = copy.deepcopy(old)
    untainted["spec"]["taints"] = []  # lifting the Neuron taint would let any pod onto the node
    cordoned = copy.deepcopy(old)
    cordoned["spec"]["unschedulable"] = True
    relabelled = copy.deepcopy(tainted)
    relabelled["metadata"]["labels"]["team"] = "mine"
    other_taint = copy.deepcopy(old)
    other_taint["spec"]["taints"].append(
        {"key": "trainium/fabric-check", "value": "passed", "effect": "NoSchedule"}
    )
    for changed in (untainted, cordoned, relabelled, other_taint):
        decision = _node_update(old, changed)
        assert not decision.allowed and decision.messages == (only_taint,), changed

    elsewhere = node("node-a", group="trn2")
    decision = _node_update(elsewhere, {**elsewhere, "spec": {"taints": [NEURON_TAINT, FABRIC_CHECK_TAINT]}})
    assert "the fabric check of node group trn1 may only change nodes of that group" in decision.messages
    assert not _node_update(old, tainted, sub="status").allowed
    # Nobody else is judged by it.
    assert not _node_update(old, untainted, user="kubernetes-admin").matched
