"""How teams share Trainium capacity through their Volcano queues.

The rendered queues and scheduler configuration are the project's; what Volcano makes of them is
judged by tests/volcano_queue_model.py, a model of Volcano v1.15.1's ``proportion`` and ``capacity``
plugins written here (each function names its source lines). The real scheduler decides the same
questions in tests/cluster/ for a group two teams share: borrowing, giving back and the
capability at equal weights, the order by share at weights 1 and 2 (test_queues.py; the model's
tests of the same names here run the example's two groups of different types, weights 1 and 2),
the zero-node case (test_scale_from_zero.py), and a borrowing queue's capability over a trn1 and a
trn1n group (test_queues.py). ``proportion``, and the order by share over mixed instance types,
stay on the model.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from cluster_facts.instance_catalog import CATALOG
from cluster_facts.kubernetes_names import TRAINING_PRIORITY_CLASS
from config import StackConfig, parse_config
from config.loader import read_yaml
from k8s_charts.addons.volcano_scheduler import QUEUE_PLUGIN, VOLCANO_SCHEDULER_CONFIG
from k8s_charts.teams.volcano_queue import quantity_value, queue_capability
from tests.conftest import EXAMPLE_CONFIG
from tests.plans import shared_review_plan
from tests.volcano_queue_model import (
    QueueState,
    Resource,
    capacity_allocatable,
    capacity_queue_order,
    capacity_queues,
    proportion_allocatable,
    proportion_overused,
    proportion_queues,
    resource,
)
from tests.yaml_edits import with_change

TRN1N = CATALOG["trn1n.32xlarge"]
TRN1 = CATALOG["trn1.32xlarge"]
SYSTEM_NODES = resource({"cpu": "16", "memory": "64Gi"})  # two m6i.2xlarge: in the cluster's total, no team's


def objects(config: StackConfig) -> list[dict[str, Any]]:
    return [dict(m) for step in shared_review_plan(config).manifest_sets() for m in step.manifests]


def queues(config: StackConfig) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m for m in objects(config) if m["kind"] == "Queue"}


def nodes(instance: Any, count: int) -> Resource:
    """What ``count`` nodes add to the cluster's total (the catalog's figures, as the queue's)."""
    return resource(queue_capability(instance, count)) if count else {}


def add(*resources: Resource) -> Resource:
    total: Resource = {}
    for amounts in resources:
        for name, amount in amounts.items():
            total[name] = total.get(name, 0.0) + amount
    return total


def pod(config: StackConfig, run: str) -> Resource:
    """What one pod of a rendered run asks for (requests, and extended resources as limits)."""
    [job] = [m for m in objects(config) if m["kind"] == "Job" and m["metadata"]["name"].startswith(f"{run}-")]
    [task] = job["spec"]["tasks"]
    [container] = task["template"]["spec"]["containers"]
    return resource({**container["resources"]["requests"], **container["resources"]["limits"]})


def pods(one: Resource, count: int) -> Resource:
    return {name: amount * count for name, amount in one.items()}


def state(
    queue: dict[str, Any], *, allocated: Resource | None = None, pending: Resource | None = None
) -> QueueState:
    spec = queue["spec"]
    return QueueState(
        name=queue["metadata"]["name"],
        weight=spec["weight"],
        capability=resource(spec["capability"]),
        deserved_spec=resource(spec["deserved"]),
        allocated=allocated or {},
        pending=pending or {},
    )


@pytest.fixture(scope="module")
def example() -> StackConfig:
    return parse_config(read_yaml(EXAMPLE_CONFIG), source=str(EXAMPLE_CONFIG))


@pytest.fixture(scope="module")
def shared() -> StackConfig:
    """The example with both teams on both node groups (``node_groups`` left out: all of them)."""
    data = read_yaml(EXAMPLE_CONFIG)
    for index in (0, 1):
        data = with_change(data, f"teams.{index}.node_groups", ...)
    data = with_change(data, "runs.1.node_group", "trn1-32xl-block")
    return parse_config(data, source="shared.yaml")


# --- The configuration --------------------------------------------------------------------------


def test_the_scheduler_shares_queues_with_capacity_and_evicts_nothing(example: StackConfig) -> None:
    configuration = yaml.safe_load(VOLCANO_SCHEDULER_CONFIG)
    plugins = [plugin["name"] for tier in configuration["tiers"] for plugin in tier["plugins"]]
    assert QUEUE_PLUGIN == "capacity" and "capacity" in plugins
    assert "proportion" not in plugins  # mutually exclusive with capacity; ignores a Queue's deserved
    actions = {action.strip() for action in configuration["actions"].split(",")}
    assert not actions & {"reclaim", "preempt", "gangreclaim", "gangpreempt"}
    for queue in queues(example).values():
        assert queue["spec"]["reclaimable"] is False
        assert "guarantee" not in queue["spec"]
    # Were reclaim ever turned on, a training pod could still not reclaim (reclaim.go line 144).
    [training_class] = [
        m
        for m in objects(example)
        if m["kind"] == "PriorityClass" and m["metadata"]["name"] == TRAINING_PRIORITY_CLASS
    ]
    assert training_class["preemptionPolicy"] == "Never"


def test_a_team_alone_on_its_groups_deserves_them_whole(example: StackConfig) -> None:
    rendered = queues(example)
    for team in example.teams:
        spec = rendered[team.queue_name]["spec"]
        assert spec["deserved"] == spec["capability"], team.name


def test_teams_on_a_shared_group_deserve_it_by_weight_and_may_borrow_all_of_it(shared: StackConfig) -> None:
    rendered = queues(shared)
    weights = {team.queue_name: team.weight for team in shared.teams}
    assert sorted(weights.values()) == [1, 2]
    whole = queue_capability(TRN1N, 4)
    block = queue_capability(TRN1, 8)
    for name, queue in rendered.items():
        spec = queue["spec"]
        share = weights[name] / sum(weights.values())
        for resource_name in whole:
            group_total = quantity_value(whole[resource_name]) + quantity_value(block[resource_name])
            assert spec["capability"][resource_name] == str(group_total) or resource_name == "memory"
            assert quantity_value(spec["deserved"][resource_name]) <= quantity_value(
                spec["capability"][resource_name]
            )
            assert abs(float(quantity_value(spec["deserved"][resource_name]) - share * group_total)) < 1
    # Together the teams deserve the groups, less rounding down: under one unit a queue (chips and
    # EFA interfaces are whole units, which Volcano's queue webhook requires).
    for resource_name in whole:
        total = sum(quantity_value(q["spec"]["deserved"][resource_name]) for q in rendered.values())
        group_total = quantity_value(whole[resource_name]) + quantity_value(block[resource_name])
        assert group_total - len(rendered) < total <= group_total


# --- Why capacity: proportion keeps a team off its own idle nodes --------------------------------


def test_proportion_would_keep_a_team_off_its_own_idle_node_and_capacity_does_not(
    example: StackConfig,
) -> None:
    """Teams on groups of their own (the example): training on trn1n (weight 1), research on the
    Capacity Block (weight 2). Research has 2 block nodes up and waits for 8 more; training runs 3
    of its 4 trn1n nodes and queues a 1-node job for the fourth, idle one. proportion divides the
    whole cluster by weight, so training (1/3 of it) is over its share and gets nothing, while its
    idle node is one no other team may use; capacity lets it have its own node."""
    rendered = queues(example)
    training_pod, research_pod = pod(example, "bert-large"), pod(example, "llm")
    total = add(nodes(TRN1N, 4), nodes(TRN1, 2), SYSTEM_NODES)

    def teams() -> list[QueueState]:
        return [
            state(rendered["test"], allocated=pods(training_pod, 3), pending=training_pod),
            state(rendered["research"], allocated=pods(research_pod, 2), pending=pods(research_pod, 8)),
        ]

    training, _ = proportion_queues(teams(), total)
    assert proportion_overused(training) or not proportion_allocatable(training, training_pod)

    training, research = capacity_queues(teams(), total)
    assert capacity_allocatable(training, training_pod)
    # Research's pods pass its queue too: they wait for nodes, which the autoscaler adds.
    assert capacity_allocatable(research, research_pod)


# --- Borrowing and returning, on a shared group ---------------------------------------------------


def test_a_team_borrows_an_idle_teams_share_up_to_its_capability(shared: StackConfig) -> None:
    rendered = queues(shared)
    on_trn1n, on_trn1 = pod(shared, "bert-large"), pod(shared, "llm")  # a pod's shape is its node's
    # Research is idle (no job: not in the session). Training (a third of both groups) holds all 4
    # trn1n nodes and 4 of the block's, and wants the idle fifth.
    total = add(nodes(TRN1N, 4), nodes(TRN1, 5), SYSTEM_NODES)
    holds = add(pods(on_trn1n, 4), pods(on_trn1, 4))
    [training] = capacity_queues(
        [state(rendered["test"], allocated=holds, pending=on_trn1), state(rendered["research"])], total
    )
    assert training.allocated["aws.amazon.com/neuron"] == 2 * training.deserved["aws.amazon.com/neuron"]
    assert capacity_allocatable(training, on_trn1)
    # Up to its capability (every node of both groups), never past it.
    full = add(nodes(TRN1N, 4), nodes(TRN1, 9), SYSTEM_NODES)
    holds = add(pods(on_trn1n, 4), pods(on_trn1, 8))
    [training] = capacity_queues([state(rendered["test"], allocated=holds, pending=on_trn1)], full)
    assert not capacity_allocatable(training, on_trn1)


def test_a_returning_team_goes_first_for_the_next_free_node_and_nothing_is_evicted(
    shared: StackConfig,
) -> None:
    """Both teams wait on the shared groups; training is far above its share, research at none of
    it: research's gang is offered the next free nodes first. Nothing is evicted for it (no reclaim:
    test_the_scheduler_shares_queues_with_capacity_and_evicts_nothing); it waits for a run to end,
    or for nodes the autoscaler adds while the group is below max_size."""
    rendered = queues(shared)
    training_pod, research_pod = pod(shared, "bert-large"), pod(shared, "llm")
    total = add(nodes(TRN1N, 4), nodes(TRN1, 8), SYSTEM_NODES)
    both = capacity_queues(
        [
            state(
                rendered["test"],
                allocated=add(pods(training_pod, 4), pods(research_pod, 8)),  # every node of both groups
                pending=pods(training_pod, 4),
            ),
            state(rendered["research"], pending=pods(research_pod, 8)),
        ],
        total,
    )
    assert capacity_queue_order(both) == ["research", "test"]
    assert all(capacity_allocatable(queue, research_pod) for queue in both if queue.name == "research")


def test_at_zero_trainium_nodes_the_queue_refuses_every_task_so_it_stays_unschedulable(
    example: StackConfig,
) -> None:
    """With no Trainium node the cluster's total has no Neuron chips: the queue is not allocatable
    and the task stays Pending, which Volcano reports as Unschedulable (job_info.go 876-882), what
    the autoscaler scales up for; as proportion did before. Once the nodes exist it is allocatable."""
    rendered = queues(example)
    one = pod(example, "bert-large")
    [training] = capacity_queues([state(rendered["test"], pending=pods(one, 4))], SYSTEM_NODES)
    assert not capacity_allocatable(training, one)
    [before] = proportion_queues([state(rendered["test"], pending=pods(one, 4))], SYSTEM_NODES)
    assert not proportion_allocatable(before, one)
    [training] = capacity_queues(
        [state(rendered["test"], pending=pods(one, 4))], add(nodes(TRN1N, 4), SYSTEM_NODES)
    )
    assert capacity_allocatable(training, one)
