"""The node check's replacement budget (issue 30, item 2): a failure that hits every new node stops
costing Trainium time after a bounded number of replacements.

- the decision (cluster_programs/node_check_budget.py ``decide``) on recorded replacement
  records: the ConfigMaps as the API server returns them;
- the record's writes against a stand-in API with the API server's optimistic concurrency (a PUT
  with a stale resourceVersion is answered 409): two pods never both spend the last replacement;
- node_check.py end to end over one group (the stand-in tools and API of tests/k8s_charts/checks/test_node_check.py,
  every node write judged by the rendered admission policy): replaced, then withheld with the failed
  taint, then the group's launches suspended, then a pass ends the streak;
- the policy's part (only the failed taint, only on its own node, never lifted by the check), the
  chart's records and RBAC, the configuration's keys and their one-line errors.

The real API server, RBAC and the real cluster autoscaler decide the same in
tests/cluster/test_failing_group.py.
"""

from __future__ import annotations

import copy
import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_names import NODE_GROUP_LABEL
from cluster_facts.node_check import (
    DEFAULT_REPLACEMENT_WINDOW_MINUTES,
    DEFAULT_REPLACEMENTS_PER_WINDOW,
    NODE_CHECK_CONDITION,
    NODE_CHECK_FAILED_TAINT_KEY,
    NODE_CHECK_NAMESPACE,
    NODE_CHECK_TAINT,
    NODE_CHECK_TAINT_KEY,
    replacement_record,
)
from config import load_config
from k8s_charts.checks.node_check import NodeCheckChart, NodeCheckValues
from tests.conftest import DEFAULT_CONFIG
from tests.k8s_charts.checks.test_node_check import (  # the fixtures, with the helpers they serve
    IMAGE,
    NEURON_TAINT,
    Cluster,
    Fenced,
    aws_calls,
    decide,
    empty_record,
    file_system,
    needs_bash,
    node_tools,
    peers,
    repair,
    run_check,
    sysfs,
    token,
    trainium_node,
)
from tests.k8s_charts.manifests import Manifest, only, synth
from tests.k8s_validation import assert_valid
from tests.pod_programs import program
from tests.stand_in_api import json_api

FIXTURES = (file_system, node_tools, sysfs, token)
"""test_node_check.py's fixtures, used here by name: stand-in tools, a file system, a token, a sysfs."""
GROUP = "trn1-32xl"
RECORD = replacement_record(GROUP)
T0 = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)


def budget_module() -> Any:
    return program("node_check_budget")


def budget(per_window: int = 1, minutes: float = 30) -> Any:
    return budget_module().Budget(per_window=per_window, window_seconds=minutes * 60)


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def recorded(*replacements: tuple[datetime, str, str], passed: datetime | None = None) -> dict[str, Any]:
    """A group's ConfigMap as the API server returns it after the check's writes: replacements
    (when, which node, why), and the last pass that ended a streak."""
    data = {
        "replacements": json.dumps(
            [
                {"at": stamp(at), "node": node, "instance": f"i-0{index}abcdef", "reason": reason}
                for index, (at, node, reason) in enumerate(replacements)
            ],
            separators=(",", ":"),
        )
    }
    if passed is not None:
        data["last-pass"] = f"{stamp(passed)} ip-10-0-9-9"
    return {**empty_record(), "data": data}


def decision(
    configmap: dict[str, Any], *, reason: str, launched: datetime, now: datetime, **limits: Any
) -> Any:
    module = budget_module()
    return module.decide(
        module.GroupRecord.read(configmap),
        reason=reason,
        launched_at=launched,
        now=now,
        budget=budget(**limits),
    )


# --- The decision, on recorded records -----------------------------------------------------------


def test_a_group_with_no_record_has_its_first_failed_node_replaced() -> None:
    first = decision(
        empty_record(), reason="NeuronDevicesMissing", launched=T0, now=T0 + timedelta(minutes=12)
    )
    assert (first.replace, first.stop) == (True, False)
    assert first.why == "replacement 1 of 1 in 30 min"


def test_past_the_budget_a_failed_node_is_not_replaced_until_the_window_moves() -> None:
    record = recorded((T0, "ip-10-0-0-1", "NeuronDevicesMissing"))
    # Another node of the same scale-up (launched before the replacement), failing too.
    second = decision(
        record,
        reason="NeuronDevicesMissing",
        launched=T0 - timedelta(minutes=10),
        now=T0 + timedelta(minutes=1),
    )
    assert (second.replace, second.stop) == (False, False)
    assert (
        "budget is spent: 1 in the last 30 min (allowed 1); the next one from 2026-11-28T09:30:00Z"
        in second.why
    )
    # A different failure after the window: the budget allows one again.
    later = decision(
        record,
        reason="LustreUnreachable",
        launched=T0 + timedelta(minutes=20),
        now=T0 + timedelta(minutes=31),
    )
    assert (later.replace, later.stop) == (True, False)


def test_a_node_launched_after_a_replacement_that_fails_the_same_way_stops_the_group() -> None:
    record = recorded((T0, "ip-10-0-0-1", "NeuronDevicesMissing"))
    # The replacement (or any node launched after it) fails the same way: whatever the window says.
    for now in (T0 + timedelta(minutes=14), T0 + timedelta(hours=5)):
        repeat = decision(record, reason="NeuronDevicesMissing", launched=T0 + timedelta(minutes=2), now=now)
        assert (repeat.replace, repeat.stop) == (False, True), now
        assert "failed the same way, and no node of the group has passed since" in repeat.why
    # With a larger budget too: a repeat is never replaced.
    assert not decision(
        record,
        reason="NeuronDevicesMissing",
        launched=T0 + timedelta(minutes=2),
        now=T0 + timedelta(minutes=14),
        per_window=5,
    ).replace


def test_a_different_failure_after_a_replacement_is_judged_by_the_budget_alone() -> None:
    record = recorded((T0, "ip-10-0-0-1", "NeuronDevicesMissing"))
    other = decision(
        record,
        reason="EfaLoopbackFailed",
        launched=T0 + timedelta(minutes=2),
        now=T0 + timedelta(minutes=14),
        per_window=2,
    )
    assert (other.replace, other.stop) == (True, False)
    spent = decision(
        record, reason="EfaLoopbackFailed", launched=T0 + timedelta(minutes=2), now=T0 + timedelta(minutes=14)
    )
    assert (spent.replace, spent.stop) == (False, False)


def test_a_pass_ends_the_streak() -> None:
    record = recorded((T0, "ip-10-0-0-1", "NodeUnresponsive"), passed=T0 + timedelta(minutes=13))
    # A node launched after the replacement hangs too, but a node of the group passed since: the
    # budget decides (and the window has moved).
    again = decision(
        record, reason="NodeUnresponsive", launched=T0 + timedelta(hours=2), now=T0 + timedelta(hours=3)
    )
    assert (again.replace, again.stop) == (True, False)


def test_the_budget_counts_every_replacement_of_the_window() -> None:
    record = recorded(
        (T0, "ip-10-0-0-1", "NeuronDevicesMissing"),
        (T0 + timedelta(minutes=5), "ip-10-0-0-2", "EfaDevicesMissing"),
        (T0 + timedelta(minutes=40), "ip-10-0-0-3", "LustreUnreachable"),
    )
    now = T0 + timedelta(minutes=50)
    launched = T0 - timedelta(minutes=1)
    assert decision(record, reason="NeuronCoresMissing", launched=launched, now=now, per_window=2).replace
    full = decision(record, reason="NeuronCoresMissing", launched=launched, now=now, per_window=1)
    assert not full.replace and "1 in the last 30 min" in full.why


# --- The record's writes --------------------------------------------------------------------------


def api(url: str, tmp_path: Path) -> Any:
    token_file = tmp_path / "token"
    token_file.write_text("node-check-token\n")
    return program("kube_api").Api(server=url, token_file=str(token_file), ca_file=None)


def path() -> str:
    return budget_module().configmap_path(NODE_CHECK_NAMESPACE, RECORD)


def replacement(node: str, at: datetime, reason: str = "NeuronDevicesMissing") -> Any:
    return budget_module().Replacement(at, node, f"i-0{node[-1]}abcdef", reason)


def test_a_replacement_is_recorded_before_it_is_asked_for(tmp_path: Path) -> None:
    cluster = Cluster(nodes={}, token_node="ip-10-0-0-1")
    with json_api(cluster.answer) as url:
        first = budget_module().reserve(
            api(url, tmp_path),
            path(),
            replacement=replacement("ip-10-0-0-1", T0),
            launched_at=T0,
            budget=budget(),
        )
    assert first.replace
    stored = cluster.configmaps[RECORD]
    assert stored["metadata"]["resourceVersion"] == "8"
    assert json.loads(stored["data"]["replacements"]) == [
        {
            "at": "2026-11-28T09:00:00Z",
            "node": "ip-10-0-0-1",
            "instance": "i-01abcdef",
            "reason": "NeuronDevicesMissing",
        }
    ]


def test_two_pods_never_both_spend_the_last_replacement(tmp_path: Path) -> None:
    """Pod B reads the record, pod A writes its replacement first; B's write carries the version it
    read, is refused (409), and B reads again: the budget is spent."""
    cluster = Cluster(nodes={}, token_node="ip-10-0-0-2")
    served = cluster.answer
    raced = threading.Event()

    def answer(method: str, url_path: str, headers: Any, body: Any) -> tuple[int, Any]:
        if method == "PUT" and not raced.is_set():
            raced.set()  # pod A's write lands between pod B's read and its write
            stored = copy.deepcopy(cluster.configmaps[RECORD])
            stored["data"] = (
                budget_module().GroupRecord(replacements=(replacement("ip-10-0-0-1", T0),)).data()
            )
            cluster.configmaps[RECORD] = {
                **stored,
                "metadata": {**stored["metadata"], "resourceVersion": "8"},
            }
        return served(method, url_path, headers, body)

    with json_api(answer) as url:
        late = budget_module().reserve(
            api(url, tmp_path),
            path(),
            replacement=replacement("ip-10-0-0-2", T0 + timedelta(seconds=1)),
            launched_at=T0 - timedelta(minutes=5),
            budget=budget(),
        )
    assert raced.is_set()
    assert (late.replace, late.stop) == (False, False)
    assert [item["node"] for item in json.loads(cluster.configmaps[RECORD]["data"]["replacements"])] == [
        "ip-10-0-0-1"
    ]


@pytest.mark.parametrize("status", [403, 404])
def test_a_record_that_cannot_be_read_allows_no_replacement(tmp_path: Path, status: int) -> None:
    def answer(*_: Any) -> tuple[int, Any]:
        return status, {"kind": "Status", "code": status}

    with json_api(answer) as url:
        refused = budget_module().reserve(
            api(url, tmp_path),
            path(),
            replacement=replacement("ip-10-0-0-1", T0),
            launched_at=T0,
            budget=budget(),
        )
    assert (refused.replace, refused.stop) == (False, False)
    assert f"HTTP {status}" in refused.why


def test_old_replacements_go_when_a_new_one_is_recorded(tmp_path: Path) -> None:
    cluster = Cluster(nodes={}, token_node="ip-10-0-0-1")
    cluster.configmaps[RECORD] = recorded(
        (T0, "ip-10-0-0-1", "NeuronDevicesMissing"), passed=T0 + timedelta(minutes=15)
    )
    with json_api(cluster.answer) as url:
        later = budget_module().reserve(
            api(url, tmp_path),
            path(),
            replacement=replacement("ip-10-0-0-4", T0 + timedelta(hours=2), "LustreUnreachable"),
            launched_at=T0 + timedelta(hours=1),
            budget=budget(),
        )
    assert later.replace
    # Outside the window and before the last pass: forgotten.
    assert [item["node"] for item in json.loads(cluster.configmaps[RECORD]["data"]["replacements"])] == [
        "ip-10-0-0-4"
    ]


def test_a_pass_is_written_only_when_it_ends_something(tmp_path: Path) -> None:
    module = budget_module()
    cluster = Cluster(nodes={}, token_node="ip-10-0-0-1")
    with json_api(cluster.answer) as url:
        assert not module.record_pass(api(url, tmp_path), path(), node="ip-10-0-0-5", now=T0)
        assert cluster.configmaps[RECORD]["metadata"]["resourceVersion"] == "7"
        cluster.configmaps[RECORD] = {
            **recorded((T0, "ip-10-0-0-1", "NeuronDevicesMissing")),
            "data": {
                **recorded((T0, "ip-10-0-0-1", "NeuronDevicesMissing"))["data"],
                "launches-suspended": "2026-11-28T09:14:00Z eks-trn1-32xl-0ac9f7a2 after ip-10-0-0-3 failed NeuronDevicesMissing",
            },
        }
        assert module.record_pass(api(url, tmp_path), path(), node="ip-10-0-0-5", now=T0 + timedelta(hours=1))
    data = cluster.configmaps[RECORD]["data"]
    assert data["last-pass"] == "2026-11-28T10:00:00Z ip-10-0-0-5" and data["launches-suspended"] == ""
    assert module.GroupRecord.read(cluster.configmaps[RECORD]).streak() == ()


# --- node_check.py over one group ---------------------------------------------------------------


def created(node: dict[str, Any], at: datetime) -> dict[str, Any]:
    node["metadata"]["creationTimestamp"] = stamp(at)
    return node


def failing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURON_LS", "neuron_ls_trn1_device_missing.json")


def taints(cluster: Cluster, node: str) -> list[dict[str, Any]]:
    return list(cluster.nodes[node]["spec"].get("taints") or [])


@pytest.mark.process
@needs_bash
def test_a_failure_that_hits_every_new_node_of_a_group_costs_one_replacement_then_stops_its_launches(
    node_tools: Path,
    file_system: int,
    token: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A scale-up of two nodes (-1, -2), both missing a device; the replacement of -1 (-3) and a later
    node (-4) the same. Then the cause is fixed and a new node (-5) passes."""
    failing(monkeypatch)
    now = datetime.now(UTC)
    launched = now - timedelta(minutes=12)
    cluster = Cluster(
        nodes={
            "ip-10-0-0-1": created(trainium_node("ip-10-0-0-1"), launched),
            "ip-10-0-0-2": created(trainium_node("ip-10-0-0-2"), launched),
        },
        token_node="ip-10-0-0-1",
    )
    # -1: the group's first replacement.
    assert run_check(cluster, token, file_system) == 1
    assert aws_calls(node_tools) == [
        "aws autoscaling set-instance-health --instance-id i-01abcdef --health-status Unhealthy --no-should-respect-grace-period"
    ]
    assert NODE_CHECK_TAINT_KEY in [t["key"] for t in taints(cluster, "ip-10-0-0-1")]  # its instance goes
    # -2: the budget is spent. Not replaced; the startup taint gives way to the failed taint.
    cluster.token_node = "ip-10-0-0-2"
    assert run_check(cluster, token, file_system) == 1
    assert len(aws_calls(node_tools)) == 1
    assert taints(cluster, "ip-10-0-0-2") == [
        NEURON_TAINT,
        {"key": NODE_CHECK_FAILED_TAINT_KEY, "value": "NeuronDevicesMissing", "effect": "NoSchedule"},
    ]
    assert cluster.refused == []
    withheld = [e for e in cluster.events if e["reason"] == "ReplacementWithheld"]
    assert [e["involvedObject"]["name"] for e in withheld] == ["ip-10-0-0-2"]
    assert (
        "budget is spent" in withheld[0]["message"] and "removes it once unneeded" in withheld[0]["message"]
    )
    out = capsys.readouterr().out
    assert "TRAINIUM_NODE_CHECK node=ip-10-0-0-1 state=failed reason=NeuronDevicesMissing" in out
    assert "TRAINIUM_NODE_CHECK node=ip-10-0-0-2 state=withheld reason=NeuronDevicesMissing" in out
    # -3, the replacement (its Node registers after the replacement was recorded), fails the same
    # way: withheld, and the group's launches are suspended.
    now = datetime.now(UTC) + timedelta(minutes=1)
    cluster.nodes["ip-10-0-0-3"] = created(trainium_node("ip-10-0-0-3"), now)
    cluster.token_node = "ip-10-0-0-3"
    assert run_check(cluster, token, file_system) == 1
    assert aws_calls(node_tools)[1:] == [
        (
            "aws autoscaling describe-auto-scaling-instances --instance-ids i-03abcdef "
            "--query AutoScalingInstances[0].AutoScalingGroupName --output text"
        ),
        "aws autoscaling suspend-processes --auto-scaling-group-name eks-trn1-32xl-0ac9f7a2 --scaling-processes Launch",
    ]
    [stopped] = [e for e in cluster.events if e["reason"] == "NodeGroupLaunchesSuspended"]
    assert stopped["involvedObject"]["name"] == "ip-10-0-0-3"
    assert (
        "aws autoscaling resume-processes --auto-scaling-group-name eks-trn1-32xl-0ac9f7a2 --scaling-processes Launch"
        in (stopped["message"])
    )
    data = cluster.configmaps[RECORD]["data"]
    assert data["launches-suspended"].split()[1:] == [
        "eks-trn1-32xl-0ac9f7a2",
        "after",
        "ip-10-0-0-3",
        "failed",
        "NeuronDevicesMissing",
    ]
    assert (
        "TRAINIUM_NODE_CHECK node=ip-10-0-0-3 state=stopped reason=NeuronDevicesMissing"
        in capsys.readouterr().out
    )
    # -4 (a node that was already launching): withheld; the launches are not suspended twice.
    cluster.nodes["ip-10-0-0-4"] = created(trainium_node("ip-10-0-0-4"), now + timedelta(seconds=2))
    cluster.token_node = "ip-10-0-0-4"
    assert run_check(cluster, token, file_system) == 1
    assert len(aws_calls(node_tools)) == 3
    assert [
        e["involvedObject"]["name"] for e in cluster.events if e["reason"] == "NodeGroupLaunchesSuspended"
    ] == [
        "ip-10-0-0-3",
        "ip-10-0-0-4",
    ]
    assert "launches already suspended" in cluster.events[-1]["message"]
    # Fixed, resumed: a new node passes and ends the streak.
    monkeypatch.setenv("NEURON_LS", "neuron_ls_trn1.json")
    cluster.nodes["ip-10-0-0-5"] = created(trainium_node("ip-10-0-0-5"), now + timedelta(hours=1))
    cluster.token_node = "ip-10-0-0-5"
    assert run_check(cluster, token, file_system) == 0
    data = cluster.configmaps[RECORD]["data"]
    assert data["last-pass"].endswith(" ip-10-0-0-5") and data["launches-suspended"] == ""
    assert cluster.refused == []


@pytest.mark.process
@needs_bash
def test_with_replacement_off_a_failed_node_is_withheld_without_a_record_or_aws(
    node_tools: Path, file_system: int, token: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    failing(monkeypatch)
    cluster = Cluster(nodes={"ip-10-0-0-1": trainium_node()}, token_node="ip-10-0-0-1", configmaps={})
    module = program("node_check")
    with json_api(cluster.answer) as url:
        status = module.check_node(
            module.Api(server=url, token_file=str(token), ca_file=None),
            node_name="ip-10-0-0-1",
            taint_key=NODE_CHECK_TAINT_KEY,
            condition_type=NODE_CHECK_CONDITION,
            labels={
                "devices": "trainium/neuron-devices",
                "cores": "trainium/neuron-cores",
                "efa_interfaces": "trainium/efa-interfaces",
            },
            lustre_host="127.0.0.1",
            lustre_port=file_system,
            step_timeout=10,
            repair=repair(replace=False),
        )
    assert status == 1 and aws_calls(node_tools) == []
    assert [t["key"] for t in taints(cluster, "ip-10-0-0-1")] == [
        "aws.amazon.com/neuron",
        NODE_CHECK_FAILED_TAINT_KEY,
    ]
    [withheld] = [e for e in cluster.events if e["reason"] == "ReplacementWithheld"]
    assert "left for a person (REPAIR=none)" in withheld["message"]


@pytest.mark.process
@needs_bash
def test_a_node_of_a_group_without_a_record_is_not_replaced(
    node_tools: Path, file_system: int, token: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing(monkeypatch)
    cluster = Cluster(nodes={"ip-10-0-0-1": trainium_node()}, token_node="ip-10-0-0-1", configmaps={})
    assert run_check(cluster, token, file_system) == 1
    assert aws_calls(node_tools) == []
    assert NODE_CHECK_FAILED_TAINT_KEY in [t["key"] for t in taints(cluster, "ip-10-0-0-1")]


@pytest.mark.process
@needs_bash
def test_a_fence_past_the_budget_is_withheld_and_left_to_eks_repair(
    node_tools: Path, token: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = peers(6, ready=8)
    cluster.configmaps[RECORD] = recorded(
        (datetime.now(UTC) - timedelta(minutes=10), "ip-10-0-1-0", "EfaLoopbackFailed")
    )
    before = copy.deepcopy(cluster.nodes)
    Fenced(cluster, token).tick(passes=2)
    assert aws_calls(node_tools) == []
    assert cluster.nodes == before
    [event] = cluster.events
    assert (event["reason"], event["involvedObject"]["name"]) == ("ReplacementWithheld", "ip-10-0-0-2")
    assert "not fenced: EKS node auto repair replaces it after 30 minutes" in event["message"]
    out = capsys.readouterr().out
    assert out.count("TRAINIUM_NODE_CHECK node=ip-10-0-0-2 state=withheld reason=NodeUnresponsive") == 1


# --- The policy ----------------------------------------------------------------------------------


def swapped(
    node: dict[str, Any], value: str = "NeuronDevicesMissing", effect: str = "NoSchedule"
) -> dict[str, Any]:
    new = copy.deepcopy(node)
    new["spec"]["taints"] = [t for t in new["spec"]["taints"] if t["key"] != NODE_CHECK_TAINT_KEY]
    new["spec"]["taints"].append({"key": NODE_CHECK_FAILED_TAINT_KEY, "value": value, "effect": effect})
    return new


def test_the_check_may_trade_its_startup_taint_for_the_failed_taint_on_its_own_node() -> None:
    node = trainium_node()
    assert decide(node, swapped(node)).allowed


@pytest.mark.parametrize("change", ["another node", "a value that is no reason", "NoExecute", "lift it"])
def test_the_failed_taint_is_the_check_s_to_put_on_never_to_lift(change: str) -> None:
    node = trainium_node()
    new = swapped(node)
    token_node = "ip-10-0-0-1"
    if change == "another node":
        token_node = "ip-10-0-0-2"
    elif change == "a value that is no reason":
        new = swapped(node, value="x y")
    elif change == "NoExecute":
        new = swapped(node, effect="NoExecute")
    elif change == "lift it":
        node = swapped(trainium_node())
        new = copy.deepcopy(node)
        new["spec"]["taints"] = [NEURON_TAINT]
    decision_ = decide(node, new, token_node=token_node)
    assert decision_.matched and not decision_.allowed, change


# --- The chart -----------------------------------------------------------------------------------


def chart(**changes: Any) -> list[Manifest]:
    values = NodeCheckValues(
        image=IMAGE,
        lustre_host="fs-0123.fsx.us-west-2.amazonaws.com",
        region="us-west-2",
        vpc_cidr="10.0.0.0/16",
        node_groups=("trn1-32xl", "trn1n-32xl"),
        **changes,
    )
    manifests = synth(lambda app: NodeCheckChart(app, "check", values=values))
    assert_valid(manifests)
    return manifests


def test_each_group_has_a_record_the_check_may_read_and_update_and_nothing_more() -> None:
    manifests = chart()
    records = [
        m
        for m in manifests
        if m["kind"] == "ConfigMap" and m["metadata"]["name"].startswith("node-check-replacements-")
    ]
    assert [(m["metadata"]["name"], m["metadata"]["namespace"], m.get("data")) for m in records] == [
        ("node-check-replacements-trn1-32xl", NODE_CHECK_NAMESPACE, None),
        ("node-check-replacements-trn1n-32xl", NODE_CHECK_NAMESPACE, None),
    ]
    assert only(manifests, "Role")["rules"] == [
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["node-check-replacements-trn1-32xl", "node-check-replacements-trn1n-32xl"],
            "verbs": ["get", "update"],
        },
    ]
    env = {
        item["name"]: item.get("value")
        for item in only(manifests, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert (env["REPLACEMENTS_PER_WINDOW"], env["REPLACEMENT_WINDOW_SECONDS"]) == ("1", "1800")
    assert (env["NODE_GROUP_LABEL"], env["FAILED_TAINT_KEY"]) == (
        NODE_GROUP_LABEL,
        NODE_CHECK_FAILED_TAINT_KEY,
    )
    assert env["REPLACEMENT_RECORD_PREFIX"] + "trn1-32xl" == RECORD
    # Without replacement: no record, no right to one.
    quiet = chart(replace_failed_nodes=False)
    assert [m for m in quiet if m["kind"] == "ConfigMap" and m["metadata"]["name"] != "node-check"] == []
    assert only(quiet, "Role")["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]


def test_the_failed_taint_is_not_one_the_autoscaler_drops_or_the_check_tolerates() -> None:
    """A startup or status taint would be dropped from the autoscaler's picture of a new node of the
    group, and a startup taint would keep the node unready for it (cluster_facts/node_check.py)."""
    assert not NODE_CHECK_FAILED_TAINT_KEY.startswith(
        (
            "startup-taint.cluster-autoscaler.kubernetes.io/",
            "status-taint.cluster-autoscaler.kubernetes.io/",
            "ignore-taint.cluster-autoscaler.kubernetes.io/",
        )
    )
    assert NODE_CHECK_TAINT["key"] != NODE_CHECK_FAILED_TAINT_KEY


# --- The configuration ---------------------------------------------------------------------------


def test_the_defaults_are_one_replacement_per_group_in_thirty_minutes() -> None:
    config = load_config(DEFAULT_CONFIG)
    assert (config.node_check.replacements_per_window, config.node_check.replacement_window_minutes) == (
        DEFAULT_REPLACEMENTS_PER_WINDOW,
        DEFAULT_REPLACEMENT_WINDOW_MINUTES,
    )
    assert (DEFAULT_REPLACEMENTS_PER_WINDOW, DEFAULT_REPLACEMENT_WINDOW_MINUTES) == (1, 30)


def test_two_pods_never_both_suspend_the_groups_launches(tmp_path: Path) -> None:
    """Pod B reads the record (not suspended), pod A's claim lands first; B's claim carries the version
    it read, is refused (409), and B reads A's note: only A calls AWS (the tier's failing group saw
    two suspend-processes calls before the claim)."""
    cluster = Cluster(nodes={}, token_node="ip-10-0-0-2")
    served = cluster.answer
    raced = threading.Event()
    a_note = "2026-11-28T09:00:00Z after ip-10-0-0-1 failed NeuronDevicesMissing"

    def answer(method: str, url_path: str, headers: Any, body: Any) -> tuple[int, Any]:
        if method == "PUT" and not raced.is_set():
            raced.set()  # pod A's claim lands between pod B's read and its write
            stored = copy.deepcopy(cluster.configmaps[RECORD])
            stored["data"] = {**(stored.get("data") or {}), budget_module().SUSPENDED_KEY: a_note}
            cluster.configmaps[RECORD] = {
                **stored,
                "metadata": {**stored["metadata"], "resourceVersion": "8"},
            }
        return served(method, url_path, headers, body)

    with json_api(answer) as url:
        taken = budget_module().claim_suspension(api(url, tmp_path), path(), text="B's claim")
    assert raced.is_set()
    assert taken == a_note
    assert cluster.configmaps[RECORD]["data"][budget_module().SUSPENDED_KEY] == a_note
    with json_api(cluster.answer) as url:  # the record holds A's note: nobody claims again
        assert budget_module().claim_suspension(api(url, tmp_path), path(), text="C's claim") == a_note
