"""Scenario c with the real cluster autoscaler: a gang queued on zero Trainium nodes, the autoscaler
adding exactly the gang's nodes (its group may hold more), Volcano binding every pod at once, and the
autoscaler removing the nodes after the pods finish.

The autoscaler is the real binary with the Helm release's arguments (tests/cluster/autoscaler.py), at
release 1.33.0 where the product deploys 1.34.5 (tools/cluster_binaries.py AUTOSCALER_INSTEAD_OF);
its cloud is the kwok provider, whose node template is the stack's node-template tags read by
tests/cluster/nodes.py: when those facts lose the Neuron resource, no group fits the gang and the
first test fails. The product's scale-down minutes are shortened to seconds (``TEST_TIMINGS``).

Its name sorts after test_deploy.py, which expects to make the session's first deployment.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from config import StackConfig, parse_config
from tests.cluster.autoscaler import TEST_TIMINGS, Autoscaler, start_autoscaler
from tests.cluster.control_plane import ControlPlane
from tests.cluster.plans import plan_of
from tests.cluster.runs import RunHandle, run_handle

RUN = "bert-large"
SPARE = 2
"""The run's group may hold this many nodes more than the gang: the autoscaler must not add them."""
HOLD_SECONDS = 30
"""How long the test watches the running gang's nodes: longer than scale-down-unneeded-time plus a
few loops, so a node the autoscaler would add or take away meanwhile is seen."""
SCALE_DOWN_BOUND = 75
"""Seconds from the run's completion until its nodes are gone: scale-down-unneeded-time (20 s) after
the autoscaler first finds them empty, a loop (2 s) to act, and the margin of two busy cores."""


@pytest.fixture(scope="module")
def config_data(default_config: StackConfig) -> dict[str, Any]:
    data = default_config.model_dump(mode="json", exclude_unset=True)
    run = next(r for r in default_config.runs if r.name == RUN)
    group = default_config.run_node_group(run).name
    for settings in data["trainium"]["node_groups"]:
        if settings["name"] == group:
            settings["max_size"] = run.nodes + SPARE
    return data


@pytest.fixture(scope="module")
def config(config_data: dict[str, Any]) -> StackConfig:
    return parse_config(config_data)


@pytest.fixture(scope="module")
def gang(
    control_plane: ControlPlane, config: StackConfig, config_data: dict[str, Any]
) -> Iterator[tuple[RunHandle, Autoscaler, str]]:
    plan = plan_of(config_data)
    control_plane.apply_plan(plan)
    handle = run_handle(control_plane, plan, RUN)
    run = next(r for r in config.runs if r.name == RUN)
    group = config.run_node_group(run).name
    autoscaler = start_autoscaler(control_plane, config)
    try:
        yield handle, autoscaler, group
    finally:
        control_plane.kubectl(
            "delete", "job.batch.volcano.sh", handle.name, "-n", handle.namespace, "--ignore-not-found"
        )
        autoscaler.stop()


def _names(nodes: list[dict[str, Any]]) -> set[str]:
    return {str(n["metadata"]["name"]) for n in nodes}


def _bound_at(pod: dict[str, Any]) -> datetime | None:
    for condition in pod.get("status", {}).get("conditions", []):
        if condition["type"] == "PodScheduled" and condition["status"] == "True":
            return datetime.fromisoformat(condition["lastTransitionTime"])
    return None


def test_a_gang_on_zero_nodes_gets_exactly_its_nodes_and_binds_at_once(
    gang: tuple[RunHandle, Autoscaler, str], control_plane: ControlPlane, config: StackConfig
) -> None:
    run, autoscaler, group = gang
    (settings,) = [g for g in config.trainium.node_groups if g.name == group]
    size = run.replicas()
    assert settings.min_size == 0 and settings.max_size == size + SPARE
    assert autoscaler.nodes(group) == [], "the group must start from zero nodes"
    run.apply()
    applied = time.monotonic()

    # While the gang waits: never more nodes than the gang, never part of the gang bound.
    seen_nodes: set[str] = set()
    partial: list[int] = []

    def placed() -> list[dict[str, Any]] | None:
        seen_nodes.update(_names(autoscaler.nodes(group)))
        pods = run.pods()
        bound = [p for p in pods if p["spec"].get("nodeName")]
        if bound and len(bound) != size:
            partial.append(len(bound))
        running = len(pods) == size and all(p["status"].get("phase") == "Running" for p in pods)
        return pods if running else None

    pods = control_plane.wait_for(
        placed, timeout=120, what=f"the autoscaler's nodes for {run.name} and every pod Running on them"
    )
    print(f"from the run applied to every pod Running on the added nodes: {time.monotonic() - applied:.0f} s")
    assert len(seen_nodes) == size, f"nodes added for a gang of {size}: {sorted(seen_nodes)}"
    assert {p["spec"]["nodeName"] for p in pods} == seen_nodes, "one pod on each added node"
    assert partial == [], f"Volcano bound part of the gang: {partial} of {size} pods"
    bound = [t for t in (_bound_at(p) for p in pods) if t is not None]
    assert len(bound) == size and (max(bound) - min(bound)).total_seconds() <= 2, bound
    # Every added node registered with the node check's startup taint, and no pod bound before the
    # check had lifted it from every node (the API server's times are whole seconds, rounded down).
    assert autoscaler.agent.registered_tainted == seen_nodes, autoscaler.agent.registered_tainted
    lifted = [autoscaler.agent.lifted_at[name] for name in seen_nodes]
    assert min(bound).timestamp() >= int(max(lifted)), (bound, lifted)
    assert f"Scale-up: setting group {group} size to {size}" in autoscaler.log()

    # The running gang keeps its nodes, and nothing is added for it.
    deadline = time.monotonic() + HOLD_SECONDS
    while time.monotonic() < deadline:
        assert _names(autoscaler.nodes(group)) == seen_nodes
        time.sleep(1)
    assert autoscaler.process.alive()
    assert autoscaler.agent.errors == []


def test_the_nodes_go_after_the_gang_finishes(
    gang: tuple[RunHandle, Autoscaler, str], control_plane: ControlPlane
) -> None:
    run, autoscaler, group = gang
    nodes = _names(autoscaler.nodes(group))
    assert nodes, "the previous test left the gang running"
    run.finish(0)
    control_plane.wait_for(
        lambda: run.job_status().get("state", {}).get("phase") == "Completed",
        timeout=60,
        what=f"Volcano Job {run.name} Completed",
    )
    finished = time.monotonic()
    control_plane.wait_for(
        lambda: autoscaler.nodes(group) == [],
        timeout=SCALE_DOWN_BOUND,
        what=f"the autoscaler removing {sorted(nodes)} (scale-down-unneeded-time "
        f"{TEST_TIMINGS['scale-down-unneeded-time']})",
    )
    took = time.monotonic() - finished
    log = autoscaler.log()
    assert all(f'Scale-down: removing empty node "{name}"' in log for name in nodes), log[-3000:]
    print(f"nodes removed {took:.0f} s after the run completed")
