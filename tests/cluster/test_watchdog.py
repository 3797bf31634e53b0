"""Scenario e: a gang that only partly fits (volcano-sh/volcano#3976), under Volcano's real scheduler
and the gang watchdog program from its ConfigMap, with its own token against the real API server;
then a stuck run (issue 21.4) ended by the watchdog's guard through Volcano's real controller.

Shortened here: the watchdog's threshold (the product passes ``autoscaler.max_node_provision_minutes``,
15) to 0.2 minutes and its pass interval (60 s) to 2 s; its stuck-run guard's threshold is set to
``STUCK_MINUTES``; everything else is the rendered Deployment's.
The autoscaler's part (adding the whole gang once every pod of it is ``Unschedulable``) is played by
the test (``ControlPlane.autoscaler_note``); test_scale_from_zero.py runs this scenario again with the
real autoscaler deciding it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from cluster_facts.kubernetes_names import GANG_WATCHDOG_ANNOTATION, STUCK_MINUTES_ANNOTATION
from config import StackConfig
from tests.cluster.control_plane import ControlPlane, shortened_watchdog_args
from tests.cluster.nodes import group_nodes
from tests.cluster.plans import deployed_plan
from tests.cluster.runs import RunHandle, run_handle

THRESHOLD_MINUTES = 0.2
VOLCANO_JOB_CONTROLLER = "volcano-controllers"
VOLCANO_SCHEDULER = "volcano-scheduler"
"""The processes of Volcano's controller manager and scheduler (their Deployments, named as
ControlPlane starts them)."""
INTERVAL_SECONDS = 2.0
STUCK_MINUTES = 30
SHORT_STUCK_MINUTES = 0.2
"""The guard's threshold in the stuck-run scenario."""
ANNOTATED_STUCK_MINUTES = 1
"""A probe's own limit: the least a run's ``trainium/stuck-minutes`` may say (the team policy takes
whole minutes from 1 to the configured ceiling, k8s_charts/teams/tenant_admission.py)."""
WAITING_ANNOTATION = "cluster-test/waiting-reason"
"""kwok keeps a pod so annotated Pending, its containers waiting for that reason (kwok_stages.yaml)."""
"""The stuck-run guard's threshold, set here rather than inherited: kwok's pods never write a log
line, so the guard would end any run of this module that outlived it as silent; none lives that long."""


def _shortened(args: list[str]) -> list[str]:
    return shortened_watchdog_args(
        args,
        threshold_minutes=THRESHOLD_MINUTES,
        interval_seconds=INTERVAL_SECONDS,
        stuck_minutes=STUCK_MINUTES,
    )


@pytest.fixture(scope="module")
def run(control_plane: ControlPlane, default_config: StackConfig) -> Iterator[RunHandle]:
    plan = deployed_plan(default_config)
    control_plane.apply_plan(plan)
    control_plane.watchdog_args_override = _shortened
    control_plane.start_watchdog()
    handle = run_handle(control_plane, plan, "bert-large")
    yield handle
    control_plane.watchdog_args_override = None
    control_plane.start_watchdog()
    control_plane.kubectl(
        "delete", "jobs.batch.volcano.sh", handle.name, "-n", handle.namespace, "--ignore-not-found"
    )
    control_plane.remove_nodes(n for n in _nodes(control_plane) if n.startswith("trn1-32xl-gang-"))


def _nodes(plane: ControlPlane) -> list[str]:
    return [n["metadata"]["name"] for n in plane.kubectl.json("get", "nodes")["items"]]


def _add(plane: ControlPlane, config: StackConfig, names: list[str]) -> None:
    plane.add_nodes(group_nodes(config, "trn1-32xl", names))


def _cordoned_for(plane: ControlPlane, node: str) -> str | None:
    found: dict[str, Any] = plane.kubectl.json("get", "node", node)
    if not found["spec"].get("unschedulable"):
        return None
    return str(found["metadata"].get("annotations", {}).get(GANG_WATCHDOG_ANNOTATION, ""))


def test_a_partial_gang_is_cordoned_then_placed_whole_and_the_cordon_lifted(
    run: RunHandle, control_plane: ControlPlane, default_config: StackConfig
) -> None:
    # One idle node of the two the gang needs: Volcano places nothing, and marks the pod it could
    # place Schedulable (#3976), which the autoscaler ignores.
    _add(control_plane, default_config, ["trn1-32xl-gang-0"])
    time.sleep(THRESHOLD_MINUTES * 60)  # the node must be older than the threshold to be cordoned
    started = time.monotonic()
    run.apply()
    control_plane.wait_for(
        lambda: "Schedulable" in run.scheduling_reasons(),
        timeout=60,
        what="the #3976 signature (a pod marked Schedulable)",
    )
    # The watchdog cordons the idle node for this gang, within its threshold and a pass.
    owner = control_plane.wait_for(
        lambda: _cordoned_for(control_plane, "trn1-32xl-gang-0"),
        timeout=THRESHOLD_MINUTES * 60 + 3 * INTERVAL_SECONDS + 30,
        what="the watchdog's cordon on the idle node",
    )
    cordoned_after = time.monotonic() - started
    assert owner.startswith(f"{run.namespace}/{run.name}-"), owner
    # Now every pod of the gang is Unschedulable: what the autoscaler scales a whole gang up for.
    control_plane.wait_for(
        lambda: (r := run.scheduling_reasons()) and set(r) == {"Unschedulable"},
        timeout=30,
        what="every pod of the gang Unschedulable",
    )
    # The autoscaler adds the whole gang; the watchdog lifts its cordon, and the gang runs.
    _add(control_plane, default_config, ["trn1-32xl-gang-1", "trn1-32xl-gang-2"])
    control_plane.wait_for(
        lambda: (
            set(run.scheduling_reasons()) == {"bound"}
            and all(p["status"].get("phase") == "Running" for p in run.pods())
        ),
        timeout=60,
        what="the gang placed whole",
    )
    control_plane.wait_for(
        lambda: _cordoned_for(control_plane, "trn1-32xl-gang-0") is None,
        timeout=3 * INTERVAL_SECONDS + 30,
        what="the watchdog's cordon lifted",
    )
    assert cordoned_after <= THRESHOLD_MINUTES * 60 + 3 * INTERVAL_SECONDS + 30
    # The watchdog ran as its Deployment does (a loop, not --once): its passes read the real API
    # server's watches with its own token (cluster_programs/kube_mirror.py; the chart's ``watch``
    # verbs). A refused or broken watch fails the pass with its error line: none here.
    log = control_plane.processes.get("gang-watchdog").log.read_text(errors="replace")
    assert "watch has been broken" not in log and "HTTP 403" not in log, log[-2000:]


def test_a_stuck_run_is_ended_through_volcano_with_its_reason_kept(
    run: RunHandle, control_plane: ControlPlane
) -> None:
    """A run whose containers never start (CreateContainerError, as a bad mount leaves them) on the
    nodes the last test added: the guard, its threshold shortened, sends Volcano a TerminateJob
    Command, writes its reason into the Job's status and records an Event; Volcano's controller
    terminates the Job (its pods go) and keeps the reason through its own status updates."""
    run.delete()
    control_plane.wait_for(lambda: not run.pods(), timeout=60, what="the run's pods gone")
    stuck = run.copy_as("stuck-probe", pod_annotations={WAITING_ANNOTATION: "CreateContainerError"})
    control_plane.watchdog_args_override = lambda args: shortened_watchdog_args(
        args,
        threshold_minutes=THRESHOLD_MINUTES,
        interval_seconds=INTERVAL_SECONDS,
        stuck_minutes=SHORT_STUCK_MINUTES,
    )
    control_plane.start_watchdog()
    try:
        stuck.apply()
        control_plane.wait_for(
            lambda: (
                len(stuck.pods()) == stuck.replicas()
                and all(p["spec"].get("nodeName") and p["status"].get("startTime") for p in stuck.pods())
            ),
            timeout=60,
            what="the stuck run's pods bound, their containers waiting",
        )
        status = control_plane.wait_for(
            lambda: (
                s
                if (s := stuck.job_status()).get("state", {}).get("phase") in ("Terminating", "Terminated")
                else None
            ),
            timeout=SHORT_STUCK_MINUTES * 60 + 3 * INTERVAL_SECONDS + 30,
            what="the stuck run terminated by Volcano",
        )
        control_plane.wait_for(lambda: not stuck.pods(), timeout=60, what="the stuck run's pods gone")
        status = stuck.job_status()
        assert status["state"]["phase"] == "Terminated", status
        assert status["state"].get("reason") == "StuckRun", status
        assert "CreateContainerError" in status["state"].get("message", ""), status
        events = control_plane.kubectl.json(
            "get", "events", "-n", run.namespace, "--field-selector=involvedObject.name=stuck-probe"
        )["items"]
        assert "StuckRun" in {e["reason"] for e in events}, events
    finally:
        control_plane.kubectl(
            "delete", "jobs.batch.volcano.sh", "stuck-probe", "-n", run.namespace, "--ignore-not-found"
        )
        control_plane.watchdog_args_override = _shortened


@pytest.mark.parametrize(
    ("process", "phase", "says"),
    [
        pytest.param(
            VOLCANO_JOB_CONTROLLER,
            None,
            "Volcano's job controller has not picked this Job up in",
            id="the-job-controller-down",
        ),
        pytest.param(
            VOLCANO_SCHEDULER,
            "Pending",
            "Volcano's scheduler has not taken this Job's PodGroup up in",
            id="the-scheduler-down",
        ),
    ],
)
def test_a_job_volcano_does_not_pick_up_is_reported_then_cleared_when_it_does(
    run: RunHandle, control_plane: ControlPlane, process: str, phase: str | None, says: str
) -> None:
    """A part of Volcano down (stopped here; volcano#3968's dropped rerun looks like the job
    controller's case, and this machine reproduces it only by chance): a Job applied meanwhile gets no
    pod (the controller makes none before the scheduler moves its PodGroup on). The guard reports
    NotPickedUp on the Job (status and a Warning Event, naming the part) after the run's limit, and
    nothing else; when the part comes back and the Job's pods appear, the guard clears its report."""
    name = f"unsynced-{process.removeprefix('volcano-')}"
    probe = run.copy_as(name, annotations={STUCK_MINUTES_ANNOTATION: str(ANNOTATED_STUCK_MINUTES)})
    try:
        with control_plane.stopped(process):
            probe.apply()
            state = control_plane.wait_for(
                lambda: s if (s := probe.job_status().get("state", {})).get("reason") else None,
                timeout=ANNOTATED_STUCK_MINUTES * 60 + 3 * INTERVAL_SECONDS + 30,
                what="the guard's report on the Job",
            )
            assert state["reason"] == "NotPickedUp", state
            assert state.get("phase") == phase, state  # Volcano's to set, never the guard's
            assert state["message"].startswith(says), state
            events = control_plane.kubectl.json(
                "get", "events", "-n", run.namespace, f"--field-selector=involvedObject.name={name}"
            )["items"]
            assert [(e["reason"], e["type"]) for e in events] == [("NotPickedUp", "Warning")], events
            assert not probe.pods()
        # Back: the Job's pods are made; the guard clears its report (Volcano's writes kept it).
        control_plane.wait_for(
            lambda: len(probe.pods()) == probe.replicas(), timeout=60, what="the Job's pods made"
        )
        state = control_plane.wait_for(
            lambda: s if not (s := probe.job_status().get("state", {})).get("reason") else None,
            timeout=3 * INTERVAL_SECONDS + 30,
            what="the report cleared",
        )
        assert "message" not in state and state.get("phase"), state
    finally:
        control_plane.kubectl(
            "delete", "jobs.batch.volcano.sh", name, "-n", run.namespace, "--ignore-not-found"
        )


def test_a_run_volcano_does_not_end_is_reported_not_ended(
    run: RunHandle, control_plane: ControlPlane
) -> None:
    """The guard ends a stuck run while Volcano's job controller is down: its TerminateJob Command
    waits and the pods keep their Trainium nodes. A limit later the guard records a NotEnded Warning
    on the Job, naming the nodes and the way out; the controller back, the Command is carried out
    and the pods go."""
    probe = run.copy_as(
        "unended-probe",
        annotations={STUCK_MINUTES_ANNOTATION: str(ANNOTATED_STUCK_MINUTES)},
        pod_annotations={WAITING_ANNOTATION: "CreateContainerError"},
    )

    def events(reason: str) -> list[dict[str, Any]]:
        found = control_plane.kubectl.json(
            "get", "events", "-n", run.namespace, "--field-selector=involvedObject.name=unended-probe"
        )["items"]
        return [e for e in found if e["reason"] == reason]

    try:
        probe.apply()
        control_plane.wait_for(
            lambda: (
                len(probe.pods()) == probe.replicas()
                and all(p["spec"].get("nodeName") and p["status"].get("startTime") for p in probe.pods())
            ),
            timeout=60,
            what="the probe's pods bound, their containers waiting",
        )
        with control_plane.stopped(VOLCANO_JOB_CONTROLLER):
            control_plane.wait_for(
                lambda: probe.job_status().get("state", {}).get("reason") == "StuckRun",
                timeout=ANNOTATED_STUCK_MINUTES * 60 + 3 * INTERVAL_SECONDS + 30,
                what="the guard ending the run",
            )
            [event] = control_plane.wait_for(
                lambda: events("NotEnded"),
                timeout=ANNOTATED_STUCK_MINUTES * 60 + 3 * INTERVAL_SECONDS + 30,
                what="the guard's NotEnded on the Job",
            )
            nodes = sorted(p["spec"]["nodeName"] for p in probe.pods())
            assert len(nodes) == probe.replicas(), "the pods kept their nodes"
            assert event["type"] == "Warning"
            assert event["message"].startswith("Volcano has not carried out the TerminateJob sent"), event
            assert f"still hold Trainium nodes {', '.join(nodes)}." in event["message"], event
            assert (
                probe.job_status()["state"]["phase"] == "Pending"
            )  # its pods never started; nothing ended it
        control_plane.wait_for(
            lambda: probe.job_status().get("state", {}).get("phase") in ("Terminating", "Terminated"),
            timeout=60,
            what="Volcano carrying the Command out once back",
        )
        control_plane.wait_for(lambda: not probe.pods(), timeout=60, what="the run's pods gone")
        assert len(events("NotEnded")) == 1
    finally:
        control_plane.kubectl(
            "delete", "jobs.batch.volcano.sh", "unended-probe", "-n", run.namespace, "--ignore-not-found"
        )
