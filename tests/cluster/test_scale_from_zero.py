"""Scenarios c and e with the real cluster autoscaler: a gang queued on zero Trainium nodes, the
autoscaler adding exactly the gang's nodes (its group may hold more), Volcano binding every pod at
once, and the autoscaler removing the nodes after the pods finish; then a gang that only partly fits
(volcano-sh/volcano#3976): the autoscaler adds nothing while it stalls, the gang watchdog cordons the
idle node, the autoscaler adds the whole gang, the watchdog lifts its cordon.

The cluster is as large as the autoscaler's default cluster-wide limit allows before the gang comes:
one more simulated node, outside every group and tainted so nothing lands on it, brings the nodes'
cpu to ``--cores-total``'s default maximum (320,000, ``DEFAULT_MAX_CLUSTER_CORES``), as 1,667
trn2.48xlarge would. The autoscaler counts every node against that limit, so with the default any
scale-up is refused ("max cluster cpu limit reached"); the product's flag leaves room for the groups'
whole capacity (cluster_facts.autoscaling.cores_total), and the first test fails without it.

The autoscaler is the real binary with the Helm release's arguments (tests/cluster/autoscaler.py), at
release 1.33.0 where the product deploys 1.36.1 (tools/cluster_binaries.py AUTOSCALER_INSTEAD_OF);
its cloud is the kwok provider, whose node template is the stack's node-template tags read by
tests/cluster/nodes.py: when those facts lose the Neuron resource, no group fits the gang and the
first test fails. The product's scale-down minutes are shortened to seconds (``TEST_TIMINGS``).

Its name sorts after test_deploy.py, which expects to make the session's first deployment.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from cluster_facts.autoscaling import DEFAULT_MAX_CLUSTER_CORES
from cluster_facts.kubernetes_names import GANG_WATCHDOG_ANNOTATION
from config import StackConfig, parse_config
from tests.cluster.autoscaler import TEST_TIMINGS, Autoscaler, start_autoscaler
from tests.cluster.control_plane import ControlPlane, shortened_watchdog_args
from tests.cluster.nodes import KWOK_NODE_ANNOTATION, group_nodes
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


FULL_NODE = "cluster-cpu-at-the-default-limit"


def _cores(node: dict[str, Any]) -> int:
    """``utils.GetNodeCoresAndMemory``: the capacity's cpu, rounded up to whole cores."""
    text = str(node["status"]["capacity"]["cpu"])
    return -(-int(text[:-1]) // 1000) if text.endswith("m") else int(text)


def _fill_to_the_default_cpu_limit(control_plane: ControlPlane) -> None:
    """The node that brings the cluster's cpu to the default ``--cores-total`` maximum (module docstring)."""
    nodes = control_plane.kubectl.json("get", "nodes")["items"]
    used = sum(_cores(node) for node in nodes if node["metadata"]["name"] != FULL_NODE)
    capacity = {"cpu": str(DEFAULT_MAX_CLUSTER_CORES - used), "memory": "1Gi", "pods": "0"}
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": FULL_NODE, "annotations": dict(KWOK_NODE_ANNOTATION)},
        "spec": {"taints": [{"key": "cluster-test/full", "value": "true", "effect": "NoSchedule"}]},
        "status": {"capacity": capacity, "allocatable": capacity},
    }
    control_plane.kubectl("delete", "node", FULL_NODE, "--ignore-not-found", "--wait=true")
    control_plane.create([node])


@pytest.fixture(scope="module")
def gang(
    control_plane: ControlPlane, config: StackConfig, config_data: dict[str, Any]
) -> Iterator[tuple[RunHandle, Autoscaler, str]]:
    plan = plan_of(config_data)
    control_plane.apply_plan(plan)
    handle = run_handle(control_plane, plan, RUN)
    # A Job of the same name that an earlier module left (after its own failure) must not be reused.
    control_plane.kubectl(
        "delete",
        "job.batch.volcano.sh",
        handle.name,
        "-n",
        handle.namespace,
        "--ignore-not-found",
        "--wait=true",
    )
    run = next(r for r in config.runs if r.name == RUN)
    group = config.run_node_group(run).name
    _fill_to_the_default_cpu_limit(control_plane)
    autoscaler = start_autoscaler(control_plane, config)
    try:
        yield handle, autoscaler, group
    finally:
        control_plane.kubectl(
            "delete", "job.batch.volcano.sh", handle.name, "-n", handle.namespace, "--ignore-not-found"
        )
        autoscaler.stop()
        control_plane.remove_nodes([FULL_NODE])


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
    assert "max cluster cpu limit reached" not in autoscaler.log()

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


WATCHDOG_THRESHOLD_MINUTES = 0.2
"""The watchdog's threshold here (the product's ``autoscaler.max_node_provision_minutes``, 15)."""
WATCHDOG_INTERVAL_SECONDS = 2.0
STALL_SECONDS = WATCHDOG_THRESHOLD_MINUTES * 60
"""How long the gang stalls before the watchdog acts: the autoscaler's loop (2 s) runs six times."""


def test_a_partial_gang_stalls_the_autoscaler_until_the_watchdog_cordons_the_idle_node(
    gang: tuple[RunHandle, Autoscaler, str], control_plane: ControlPlane, config: StackConfig
) -> None:
    """Scenario e, the autoscaler's part real: one idle, checked node of the group (a node left from
    an earlier scale-up: the kwok provider's by its providerID, so the autoscaler counts it in the
    group and may remove it), a gang of two."""
    run, autoscaler, group = gang
    run.delete()
    idle = f"{group}-idle-0"
    (node,) = group_nodes(config, group, [idle])
    # The kwok provider's own form (kwok_helpers.go getProviderID): without it the provider counts the
    # node in the group's size by its label but finds no readiness for it, and calls the group
    # unhealthy, which blocks every scale-up.
    node["spec"]["providerID"] = f"kwok:{idle}"
    control_plane.add_nodes([node])
    control_plane.watchdog_args_override = lambda args: shortened_watchdog_args(
        args,
        threshold_minutes=WATCHDOG_THRESHOLD_MINUTES,
        interval_seconds=WATCHDOG_INTERVAL_SECONDS,
        stuck_minutes=30,
    )
    control_plane.start_watchdog()
    time.sleep(STALL_SECONDS)  # the idle node must be older than the threshold to be cordoned
    try:
        run.apply()
        # The stall (#3976): one pod Schedulable, which the autoscaler ignores; the other
        # Unschedulable, which its simulation places on the idle node. So it adds nothing.
        control_plane.wait_for(
            lambda: "Schedulable" in run.scheduling_reasons(), timeout=60, what="the #3976 signature"
        )
        added_during_stall: set[str] = set()

        def cordon_owner() -> str | None:
            node = control_plane.kubectl.json("get", "node", idle)
            annotation = node["metadata"].get("annotations", {}).get(GANG_WATCHDOG_ANNOTATION)
            return str(annotation) if node["spec"].get("unschedulable") and annotation else None

        def cordoned() -> str | None:
            # The group's nodes count as added during the stall only when the idle node is uncordoned
            # both before and after they were read: once the cordon lands, the autoscaler may rightly
            # add the gang's nodes before this poll comes round (it did under a loaded CI machine).
            if (owner := cordon_owner()) is not None:
                return owner
            nodes = _names(autoscaler.nodes(group))
            if (owner := cordon_owner()) is None:
                added_during_stall.update(nodes)
            return owner

        owner = control_plane.wait_for(
            cordoned,
            timeout=STALL_SECONDS + 3 * WATCHDOG_INTERVAL_SECONDS + 30,
            what=f"the watchdog's cordon on {idle}",
        )
        assert owner.startswith(f"{run.namespace}/{run.name}-"), owner
        assert added_during_stall == set(), (
            f"the autoscaler added nodes while the gang stalled: {added_during_stall}"
        )

        # Every pod Unschedulable now: the autoscaler adds the whole gang, Volcano binds it there.
        def placed() -> list[dict[str, Any]] | None:
            pods = run.pods()
            running = len(pods) == run.replicas() and all(p["status"].get("phase") == "Running" for p in pods)
            return pods if running else None

        pods = control_plane.wait_for(
            placed, timeout=120, what="the gang running on the nodes the autoscaler added"
        )
        added = _names(autoscaler.nodes(group))
        assert len(added) == run.replicas(), added
        # Which two of the three nodes Volcano binds depends on the watchdog's timing: it lifts its
        # cordon as soon as the gang's idle nodes, the cordoned one included, hold the whole gang
        # (gang_watchdog.py, step 4), which can be before Volcano's next session binds the gang.
        assert {p["spec"]["nodeName"] for p in pods} <= added | {idle}, "the gang on its group's nodes"
        assert f"Scale-up: setting group {group} size to {1 + run.replicas()}" in autoscaler.log()

        def lifted_or_gone() -> bool:
            found = control_plane.kubectl("get", "node", idle, "-o", "json", check=False)
            return found.returncode != 0 or not json.loads(found.stdout)["spec"].get("unschedulable")

        control_plane.wait_for(
            lifted_or_gone,
            timeout=3 * WATCHDOG_INTERVAL_SECONDS + 30,
            what=f"the watchdog's cordon on {idle} lifted",
        )
        # The idle node, unneeded now, goes as any empty node does.
        control_plane.wait_for(
            lambda: idle not in _names(control_plane.kubectl.json("get", "nodes")["items"]),
            timeout=SCALE_DOWN_BOUND,
            what=f"the autoscaler removing {idle}",
        )
        assert f'Scale-down: removing empty node "{idle}"' in autoscaler.log()
    finally:
        control_plane.watchdog_args_override = None
        control_plane.start_watchdog()
        run.delete()
        control_plane.remove_nodes([idle])
