"""Scenarios c and d: a run queued on zero Trainium nodes, placed as one gang by Volcano's real
scheduler, run to the end on simulated nodes; then a pod lost mid-run, twice, and a rerun, each a new
attempt with a rendezvous id of its own.

What stands in for the cluster autoscaler here (``ControlPlane.autoscaler_note``; test_scale_from_zero.py
runs the real one): the test adds one node first, which no scale-up of the whole gang would do.
The test checks what the autoscaler reads (every pod of the gang exists and is ``Unschedulable``, none
bound) and then adds the nodes a scale-up of the group would add, made from the same facts the stack
writes into the group's node-template tags (tests/cluster/nodes.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from config import StackConfig
from tests.cluster.control_plane import ControlPlane
from tests.cluster.nodes import SIMULATED_GROUP_ANNOTATION, group_nodes
from tests.cluster.plans import deployed_plan
from tests.cluster.runs import RunHandle, run_handle

RUN = "bert-large"


def _condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in pod.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def _unschedulable(pod: dict[str, Any]) -> bool:
    condition = _condition(pod, "PodScheduled")
    return (
        condition is not None
        and condition["status"] == "False"
        and condition.get("reason") == "Unschedulable"
    )


def _scale_up(plane: ControlPlane, config: StackConfig, group: str, count: int, first: int = 0) -> list[str]:
    names = [f"{group}-sim-{index}" for index in range(first, first + count)]
    plane.add_nodes(group_nodes(config, group, names))
    return names


def _trainium_nodes(plane: ControlPlane) -> list[str]:
    nodes = plane.kubectl.json("get", "nodes")["items"]
    return [
        n["metadata"]["name"]
        for n in nodes
        if SIMULATED_GROUP_ANNOTATION in n["metadata"].get("annotations", {})
    ]


@pytest.fixture(scope="module")
def run(control_plane: ControlPlane, default_config: StackConfig) -> Iterator[RunHandle]:
    plan = deployed_plan(default_config)
    control_plane.apply_plan(plan)
    handle = run_handle(control_plane, plan, RUN)
    yield handle
    control_plane.kubectl(
        "delete", "job.batch.volcano.sh", handle.name, "-n", handle.namespace, "--ignore-not-found"
    )
    control_plane.remove_nodes(_trainium_nodes(control_plane))


def test_a_run_queued_on_zero_nodes_gets_every_pod_unschedulable_then_binds_as_one_gang(
    run: RunHandle, control_plane: ControlPlane, default_config: StackConfig
) -> None:
    assert _trainium_nodes(control_plane) == []
    run.apply()
    gang = run.replicas()
    # Without `enqueue`, Volcano creates the gang's pods at once and marks each Unschedulable:
    # what the cluster autoscaler scales up for.
    pods = control_plane.wait_for(
        lambda: (p := run.pods()) and len(p) == gang and all(_unschedulable(pod) for pod in p) and p,
        timeout=60,
        what=f"{gang} pods of {run.name}, each PodScheduled=False reason Unschedulable",
    )
    assert all(not pod["spec"].get("nodeName") for pod in pods)
    group = pods[0]["spec"]["nodeSelector"]["trainium/node-group"]

    # One node of the gang's two: Volcano binds nothing (gang), the pods stay waiting.
    _scale_up(control_plane, default_config, group, 1)
    time.sleep(5)
    assert all(not pod["spec"].get("nodeName") for pod in run.pods())

    # The rest of the gang's nodes: every pod binds, each to a node of its own, and runs.
    _scale_up(control_plane, default_config, group, gang - 1, first=1)
    running = control_plane.wait_for(
        lambda: (
            (p := run.pods())
            and all(pod["status"].get("phase") == "Running" for pod in p)
            and len(p) == gang
            and p
        ),
        timeout=60,
        what=f"every pod of {run.name} Running on the simulated nodes",
    )
    assert len({pod["spec"]["nodeName"] for pod in running}) == gang
    assert set(_trainium_nodes(control_plane)) == {pod["spec"]["nodeName"] for pod in running}


def test_a_pod_lost_mid_run_restarts_the_gang_under_a_new_rendezvous_id(
    run: RunHandle, control_plane: ControlPlane
) -> None:
    """Volcano's RestartJob (policy PodEvicted) kills and recreates the whole gang with the next job
    version; RDZV_ID, resolved from the real pods' annotations, is new for each attempt."""
    seen = [_single(run.rendezvous_ids())]
    for attempt in (1, 2):
        victim = run.pods()[0]["metadata"]["name"]
        control_plane.kubectl("delete", "pod", victim, "-n", run.namespace, "--wait=false")
        control_plane.wait_for(
            lambda attempt=attempt: _attempt_running(run, attempt),
            timeout=90,
            what=f"the gang of {run.name} running again as job version {attempt}",
        )
        seen.append(_single(run.rendezvous_ids()))
    assert len(set(seen)) == 3, seen


def test_a_rerun_gets_a_rendezvous_id_of_its_own(run: RunHandle, control_plane: ControlPlane) -> None:
    before = _single(run.rendezvous_ids())
    run.delete()
    run.apply()
    control_plane.wait_for(
        lambda: _attempt_running(run, 0), timeout=90, what=f"the re-applied {run.name} running at version 0"
    )
    assert _single(run.rendezvous_ids()) != before


def test_the_run_finishes_and_its_nodes_are_free(run: RunHandle, control_plane: ControlPlane) -> None:
    run.finish(0)
    control_plane.wait_for(
        lambda: run.job_status().get("state", {}).get("phase") == "Completed",
        timeout=60,
        what=f"Volcano Job {run.name} Completed",
    )
    # Finished pods hold no node: what lets the autoscaler take the nodes away.
    assert all(pod["status"]["phase"] == "Succeeded" for pod in run.pods())


def _single(ids: set[str]) -> str:
    assert len(ids) == 1, f"the pods of one attempt disagree on RDZV_ID: {ids}"
    return next(iter(ids))


def _attempt_running(run: RunHandle, version: int) -> bool:
    pods = run.pods()
    return (
        len(pods) == run.replicas()
        and all(
            p["metadata"].get("annotations", {}).get("volcano.sh/job-version") == str(version) for p in pods
        )
        and all(p["status"].get("phase") == "Running" for p in pods)
    )
