"""The deploy's critical path (operator_tools/deploy_path.py): no Kubernetes-layer step waits for an add-on
it does not use, and the modelled path stays within 1.05 of its floor."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cluster_facts.step_needs import FILE_SYSTEM, RUNNING_PODS, deploy_needs
from k8s_charts.checks.node_check import STEP as NODE_CHECK
from k8s_charts.plan import CLUSTER_AUTOSCALER
from operator_tools.deploy_path import (
    USES,
    Step,
    dependencies,
    longest_path,
    resource_minutes,
    unused_waits,
    without_unused_waits,
)
from tests.cluster_plan.test_kubernetes_layer import applied
from tests.conftest import Synthesized

GOAL_RATIO = 1.05


def layer_steps(synthesized: Synthesized) -> dict[str, Step]:
    """Logical id -> the step it applies, with what the step needs and may wait for by name."""
    plan = synthesized.stack.kubernetes_plan
    autoscaler = synthesized.stack.autoscaler.association
    pod_identity_agent = synthesized.stack.addons.pod_identity_agent
    node_check = synthesized.stack.node_check.association
    # Pods that get AWS credentials through Pod Identity need their association (and its agent)
    # before they start.
    by_name = {
        CLUSTER_AUTOSCALER: frozenset(
            {synthesized.logical_id(autoscaler), synthesized.logical_id(pod_identity_agent)}
        ),
        NODE_CHECK: frozenset(
            {synthesized.logical_id(node_check), synthesized.logical_id(pod_identity_agent)}
        ),
    }
    return {
        logical_id: Step(name, deploy_needs(plan.step(name)), by_name.get(name, frozenset()))
        for name, logical_id in applied(synthesized).items()
    }


def addon_ids(synthesized: Synthesized) -> dict[str, str]:
    return {
        resource["Properties"]["AddonName"]: logical_id
        for logical_id, resource in synthesized.resources("AWS::EKS::Addon").items()
    }


@pytest.fixture(params=["default_stack", "example_stack"])
def synthesized(request: pytest.FixtureRequest) -> Synthesized:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def test_no_step_waits_for_an_addon_or_the_nodes_it_does_not_use(synthesized: Synthesized) -> None:
    graph = dependencies(synthesized.json)
    system_nodes = synthesized.logical_id(synthesized.stack.system_nodes)
    assert unused_waits(synthesized.json, graph, layer_steps(synthesized), system_nodes=system_nodes) == []


def test_no_step_waits_even_indirectly_for_cloudwatch_or_node_monitoring(synthesized: Synthesized) -> None:
    graph = dependencies(synthesized.json)
    unused = {
        addon_ids(synthesized)[name]
        for name in ("amazon-cloudwatch-observability", "eks-node-monitoring-agent")
    }

    def upstream(logical_id: str) -> set[str]:
        seen: set[str] = set()
        pending = [logical_id]
        while pending:
            for dependency in graph[pending.pop()] - seen:
                seen.add(dependency)
                pending.append(dependency)
        return seen

    for logical_id, step in layer_steps(synthesized).items():
        assert not unused & upstream(logical_id), step.name


def test_the_steps_that_wait_for_pods_wait_for_what_pods_use(synthesized: Synthesized) -> None:
    graph = dependencies(synthesized.json)
    addons = addon_ids(synthesized)
    system_nodes = synthesized.logical_id(synthesized.stack.system_nodes)
    pods = {system_nodes, addons["vpc-cni"], addons["kube-proxy"], addons["coredns"]}
    steps = layer_steps(synthesized)
    waiting = {step.name for step in steps.values() if RUNNING_PODS in step.needs}
    # The Helm releases (they wait for their pods) and the readiness gates.
    assert {"volcano", CLUSTER_AUTOSCALER, "volcano-webhook-ready"} <= waiting
    for logical_id, step in steps.items():
        if RUNNING_PODS in step.needs:
            assert pods <= graph[logical_id], step.name
        if FILE_SYSTEM in step.needs:
            assert addons["aws-fsx-csi-driver"] in graph[logical_id], step.name
    # The autoscaler's pods call AWS as their own role: its association and the agent first.
    [autoscaler] = [i for i, step in steps.items() if step.name == CLUSTER_AUTOSCALER]
    assert steps[autoscaler].also_uses <= graph[autoscaler]
    # A step that only applies objects starts as soon as the cluster does.
    [namespace] = [i for i, step in steps.items() if step.name == "volcano-namespace"]
    assert not (pods | set(addons.values())) & graph[namespace]


def test_the_modelled_path_is_within_five_percent_of_its_floor(synthesized: Synthesized) -> None:
    graph = dependencies(synthesized.json)
    system_nodes = synthesized.logical_id(synthesized.stack.system_nodes)
    floor = longest_path(
        synthesized.json,
        without_unused_waits(synthesized.json, graph, layer_steps(synthesized), system_nodes=system_nodes),
    )
    path = longest_path(synthesized.json, graph)
    assert path.minutes <= GOAL_RATIO * floor.minutes, (path, floor)


def test_the_old_waits_put_cloudwatch_on_the_path_and_the_check_reports_them(
    default_stack: Synthesized,
) -> None:
    """Every step waiting for every add-on and the system nodes, as before: the checker names each
    unused wait with its reason, and the path grows."""
    template = copy.deepcopy(default_stack.json)
    old_waits = [
        *addon_ids(default_stack).values(),
        default_stack.logical_id(default_stack.stack.system_nodes),
    ]
    steps = layer_steps(default_stack)
    for logical_id in steps:
        resource: dict[str, Any] = template["Resources"][logical_id]
        resource["DependsOn"] = sorted({*resource.get("DependsOn", []), *old_waits})
    graph = dependencies(template)
    system_nodes = default_stack.logical_id(default_stack.stack.system_nodes)
    problems = unused_waits(template, graph, steps, system_nodes=system_nodes)
    assert any(
        line.startswith("volcano-namespace waits for amazon-cloudwatch-observability") for line in problems
    )
    assert any("no step uses it" in line for line in problems)
    old = longest_path(template, graph)
    now = longest_path(default_stack.json, dependencies(default_stack.json))
    assert old.minutes > now.minutes
    assert addon_ids(default_stack)["amazon-cloudwatch-observability"] in old.resources


def test_every_use_has_a_need_and_a_reason() -> None:
    assert all(need in (RUNNING_PODS, FILE_SYSTEM) and len(reason) > 30 for need, reason in USES.values())


def test_resources_are_weighted_by_kind() -> None:
    assert resource_minutes({"Type": "AWS::EKS::Cluster"}) == 10
    assert (
        resource_minutes(
            {"Type": "AWS::EKS::Addon", "Properties": {"AddonName": "amazon-cloudwatch-observability"}}
        )
        == 4
    )
    empty = {"Type": "AWS::EKS::Nodegroup", "Properties": {"ScalingConfig": {"MinSize": 0, "MaxSize": 2}}}
    assert resource_minutes(empty) < resource_minutes(
        {"Type": "AWS::EKS::Nodegroup", "Properties": {"ScalingConfig": {"MinSize": 2, "DesiredSize": 2}}}
    )
