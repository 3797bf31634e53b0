"""The bound on a failure that hits every new node (issue 30, item 2): cluster_facts/systematic_failure.py
against docs/capacity.md and the shipped configurations.

The arithmetic, and the node check's AWS role that the stop needs; the behaviour behind each term is tested where it is decided: the budget and the
withheld node in tests/cluster_programs/test_node_check_budget.py, the autoscaler's removal and its halt with the
real autoscaler in tests/cluster/test_failing_group.py, its flags in tests/stacks/test_unready_limits.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from cluster_facts.node_check import (
    NODE_CHECK_NAME,
    NODE_CHECK_NAMESPACE,
    STEP_TIMEOUT_SECONDS,
    check_time_limit_seconds,
)
from cluster_facts.systematic_failure import (
    IMAGE_PULL_SECONDS,
    LAUNCH_SECONDS,
    systematic_failure_cost,
)
from config import load_config
from tests.conftest import REPO_ROOT, Synthesized

CAPACITY = REPO_ROOT / "docs" / "capacity.md"
_ROW = re.compile(
    r"^\| (config/[a-z.]+) \| ([a-z0-9-]+) \| ([a-z0-9-]+) \| (\d+) \| (\d+) \| ([0-9.]+) \| ([0-9.]+) min \|$"
)


def rows() -> list[tuple[str, ...]]:
    return [match.groups() for line in CAPACITY.read_text().splitlines() if (match := _ROW.match(line))]


def test_the_documented_bound_is_the_computed_one_for_every_shipped_run() -> None:
    expected = []
    for path in ("config/default.yaml", "config/example.yaml"):
        config = load_config(REPO_ROOT / path)
        for run in config.runs:
            group = config.run_node_group(run)
            cost = systematic_failure_cost(
                nodes=run.nodes,
                efa_interfaces=group.instance.efa_interfaces,
                replacements_per_window=config.node_check.replacements_per_window,
                scale_down_unneeded_minutes=config.autoscaler.scale_down_unneeded_minutes,
            )
            expected.append(
                (
                    path,
                    run.name,
                    group.name,
                    str(run.nodes),
                    str(cost.replaced),
                    f"{cost.node_hours:.2f}",
                    f"{cost.per_extra_node_seconds / 60:.1f}",
                )
            )
    assert rows() == expected


def test_the_default_run_costs_about_one_node_hour() -> None:
    cost = systematic_failure_cost(
        nodes=2, efa_interfaces=8, replacements_per_window=1, scale_down_unneeded_minutes=5
    )
    check = check_time_limit_seconds(8)
    # Two nodes to their verdict; the withheld one until the autoscaler removes it; the replacement
    # to its verdict and its removal.
    assert cost.node_seconds == (
        2 * (LAUNCH_SECONDS + IMAGE_PULL_SECONDS + check)
        + 1 * (5 * 60 + 60)
        + 1 * (LAUNCH_SECONDS + IMAGE_PULL_SECONDS + check + 5 * 60 + 60)
    )
    assert round(cost.node_hours, 2) == 1.04


def test_the_check_judges_a_node_before_the_autoscaler_could_count_it_unready() -> None:
    """The pull and the check at its limits end within MaxNodeStartupTime (15 minutes), on the
    instance type with the most EFA devices."""
    assert check_time_limit_seconds(16) == 2 * 30 + 4 * 30 + 30 + 16 * 30.5 + 10 == 708
    assert STEP_TIMEOUT_SECONDS == 30
    assert IMAGE_PULL_SECONDS + check_time_limit_seconds(16) < 15 * 60


def test_a_larger_budget_costs_one_node_more_for_each_replacement() -> None:
    one = systematic_failure_cost(
        nodes=4, efa_interfaces=16, replacements_per_window=1, scale_down_unneeded_minutes=5
    )
    three = systematic_failure_cost(
        nodes=4, efa_interfaces=16, replacements_per_window=3, scale_down_unneeded_minutes=5
    )
    assert three.replaced == 3
    assert three.node_seconds - one.node_seconds == 2 * (
        LAUNCH_SECONDS + IMAGE_PULL_SECONDS + check_time_limit_seconds(16)
    )
    assert Path(CAPACITY).read_text().count("A failure that hits every new node") >= 1


def test_the_node_checks_role_may_replace_and_stop_only_this_clusters_trainium_groups(
    default_stack: Synthesized,
) -> None:
    """SetInstanceHealth and SuspendProcesses on groups with the cluster's owned tag and the Trainium
    node-template tag; DescribeAutoScalingInstances, which has no resource type, on ``*``; nothing else."""
    [association] = [
        resource
        for resource in default_stack.resources("AWS::EKS::PodIdentityAssociation").values()
        if resource["Properties"]["ServiceAccount"] == NODE_CHECK_NAME
    ]
    assert association["Properties"]["Namespace"] == NODE_CHECK_NAMESPACE
    role_id = association["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    [policy] = [
        p["Properties"]["PolicyDocument"]
        for p in default_stack.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    statements = {
        tuple(sorted([s["Action"]] if isinstance(s["Action"], str) else s["Action"])): s
        for s in policy["Statement"]
    }
    assert set(statements) == {
        ("autoscaling:SetInstanceHealth", "autoscaling:SuspendProcesses"),
        ("autoscaling:DescribeAutoScalingInstances",),
    }
    writes = statements[("autoscaling:SetInstanceHealth", "autoscaling:SuspendProcesses")]
    assert writes["Condition"] == {
        "StringEquals": {"aws:ResourceTag/k8s.io/cluster-autoscaler/trainium": "owned"},
        "Null": {
            "aws:ResourceTag/k8s.io/cluster-autoscaler/node-template/label/trainium/node-group": "false"
        },
    }
    assert "autoScalingGroupName/*" in json.dumps(writes["Resource"])
    assert statements[("autoscaling:DescribeAutoScalingInstances",)]["Resource"] == "*"
