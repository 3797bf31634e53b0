"""The restart path against the real control plane (issue 24): what ``retries`` gives, and what a node
lost mid-run costs, step by step, measured with the real controller manager (node lifecycle, taint
eviction, pod garbage collector), Volcano's controller and scheduler, and the node check's program.

What stands in, and why:

- **a failing worker**: kwok's ``pod-exit`` stage writes the pod's container terminated with exit
  code 1 and the phase ``Failed``, as the kubelet reports a container that exited so under
  ``restartPolicy: Never``; Volcano's controller then sees ``PodFailed``.
- **a lost node**: its kubelet is a kwok process of its own (``ControlPlane.start_kubelet``); the
  test kills it, so its Lease and status are no longer renewed and its pods are left as they were.
  The controller manager's ``--node-monitor-grace-period`` is 20 s here instead of 50 s
  (``NODE_MONITOR_GRACE_SECONDS``, a harness flag); nothing of the product is shortened.
- **the fence and the cloud**: the fence's program (cluster_programs/node_fence.py) runs whole as
  its Deployment ``node-check-fence`` runs it, here as a process (its ``FENCE_AFTER_SECONDS`` shortened from the 5 minutes of ``replace_unresponsive_after_minutes`` to
  a few seconds past the pod's toleration, so the order of the product's path holds: the pod is
  evicted first, the instance fenced after), with ``aws`` a stand-in that records its call. The
  test then plays EC2 Auto Scaling terminating the instance and the cloud node lifecycle controller
  deleting its Node (no cloud controller runs here), and adds the replacement with ``add_nodes``
  (checked by the node check's own writes). The real autoscaler is not run here
  (test_scale_from_zero.py runs it).

Measured figures are printed (``-s``) and written beside the model's in docs/health.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from cluster_facts.failure_recovery import NODE_LOST_TOLERATION_SECONDS, POD_GC_SECONDS
from cluster_facts.instance_catalog import instance_type
from cluster_facts.kubernetes_plan import ManifestSet
from cluster_facts.node_check import NODE_CHECK_NAMESPACE
from config import StackConfig
from tests.cluster.control_plane import NODE_MONITOR_GRACE_SECONDS, ControlPlane
from tests.cluster.nodes import KWOK_NODE_ANNOTATION, trainium_node
from tests.cluster.plans import deployed_plan, plan_of
from tests.cluster.runs import RunHandle, run_handle
from tests.k8s_charts.checks.test_node_check import SAMPLES, write_tools

T = TypeVar("T")
GROUP = "trn1-32xl"
RUN = "bert-large"
SURVIVOR = f"{GROUP}-rec-a"
"""Runs under the session's kwok: the Trainium node that still answers (the fence acts only while one does)."""
FENCE_PROCESS = "node-check-fence"
LOST = f"{GROUP}-rec-b"
"""Runs under a kwok of its own, which the node-lost test kills."""
REPLACEMENT = f"{GROUP}-rec-c"
LOST_KUBELET = "recovery-lost"
NODE_MONITOR_PERIOD_SECONDS = 5
"""kube-controller-manager ``--node-monitor-period`` (default 5 s): how often the node lifecycle
controller looks at the Leases."""
LEASE_RENEW_SECONDS = 10
"""kwok renews a Lease every quarter of its 40 s duration (as the kubelet does)."""
FENCE_AFTER_SECONDS = NODE_LOST_TOLERATION_SECONDS + 5
WATCH_SECONDS = 1
SLACK_SECONDS = 10
"""What a loaded 2-core machine adds to a controller's step (informers, queues, kwok)."""


def _instance(name: str) -> str:
    return "i-0" + hashlib.sha1(name.encode()).hexdigest()[:16]


def _node(config: StackConfig, name: str) -> dict[str, Any]:
    settings = config.node_group(GROUP)
    return trainium_node(
        name,
        instance=instance_type(settings.instance_type),
        node_group=GROUP,
        zone=config.trainium.availability_zone,
        instance_id=_instance(name),
    )


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, default_config: StackConfig) -> Iterator[ControlPlane]:
    """The default plan; two checked Trainium nodes, the second one's kubelet a kwok of its own."""
    control_plane.apply_plan(deployed_plan(default_config))
    control_plane.start_kubelet(LOST_KUBELET)
    lost = _node(default_config, LOST)
    lost["metadata"]["annotations"].update(dict.fromkeys(KWOK_NODE_ANNOTATION, LOST_KUBELET))
    control_plane.add_nodes([_node(default_config, SURVIVOR), lost])
    yield control_plane
    control_plane.processes.stop(f"kwok-{LOST_KUBELET}")
    control_plane.processes.stop(f"node-check-{SURVIVOR}")
    control_plane.remove_nodes([SURVIVOR, LOST, REPLACEMENT])


def _run(cluster: ControlPlane, config: StackConfig, **changes: Any) -> RunHandle:
    """The default configuration's run with ``changes`` to its settings."""
    data = config.model_dump(mode="json", exclude_unset=True)
    data["runs"] = [{**run, **changes} if run["name"] == RUN else run for run in data["runs"]]
    step = plan_of(data).step(f"run-{RUN}")
    assert isinstance(step, ManifestSet)
    return RunHandle(cluster, step)


def _all_pods(run: RunHandle) -> list[dict[str, Any]]:
    """Every pod of the run, terminating ones included."""
    found: list[dict[str, Any]] = run.plane.kubectl.json(
        "get", "pods", "-n", run.namespace, "-l", f"volcano.sh/job-name={run.name}"
    )["items"]
    return found


def _version(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["annotations"]["volcano.sh/job-version"])


def _attempt_running(run: RunHandle, version: int) -> bool:
    pods = run.pods()
    return (
        len(pods) == run.replicas()
        and all(_version(p) == version and p["status"].get("phase") == "Running" for p in pods)
        and run.job_status().get("state", {}).get("phase") == "Running"
    )


def _fail_one_pod(run: RunHandle, version: int) -> None:
    """One worker of the attempt exits 1 (kwok's pod-exit stage writes it as the kubelet would)."""
    victim = next(p for p in run.pods() if _version(p) == version)
    run.plane.kubectl(
        "annotate", "pod", victim["metadata"]["name"], "-n", run.namespace, "cluster-test/exit-code=1"
    )


@pytest.mark.parametrize("retries", [0, 1, 2])
def test_retries_n_restarts_the_gang_n_times_then_the_run_fails(
    cluster: ControlPlane, default_config: StackConfig, retries: int
) -> None:
    """``retries: N``: each of the first N failed workers restarts the whole gang (a new job version,
    ``retryCount`` one more), the (N+1)-th ends the Job ``Failed`` with no attempt more running.

    Volcano 1.15.1 may create the pods of version N+1 and delete them at once: in ``Restarting``, a
    pod event's SyncJob creates the next version's pods before its status update finds
    ``retryCount >= maxRetry`` and sets ``Failed`` (state/restarting.go ``Execute``), after which
    the finished state kills them (seen here within 100 ms, in one run of several). Those pods never
    run; the test allows them, and requires that they go."""
    run = _run(cluster, default_config, retries=retries)
    versions_seen: set[int] = set()
    versions_run: set[int] = set()

    def watching(probe: Callable[[], T]) -> Callable[[], T]:
        def check() -> T:
            pods = _all_pods(run)
            versions_seen.update(_version(p) for p in pods)
            versions_run.update(_version(p) for p in pods if p["status"].get("phase") == "Running")
            return probe()

        return check

    def restarted(attempt: int) -> Callable[[], bool]:
        return lambda: _attempt_running(run, attempt + 1)

    def failed() -> dict[str, Any] | None:
        found = run.job_status()
        return found if found.get("state", {}).get("phase") == "Failed" else None

    run.apply()
    try:
        cluster.wait_for(watching(lambda: _attempt_running(run, 0)), timeout=60, what=f"{run.name} running")
        # What a wait saw running (the watcher's own look may come a moment before the pods run).
        versions_run.add(0)
        for attempt in range(retries + 1):
            _fail_one_pod(run, attempt)
            if attempt < retries:
                cluster.wait_for(
                    watching(restarted(attempt)),
                    timeout=60,
                    what=f"{run.name} restarted as job version {attempt + 1}",
                )
                versions_run.add(attempt + 1)
                assert run.job_status().get("retryCount") == attempt + 1
        status = cluster.wait_for(
            watching(failed),
            timeout=60,
            what=f"{run.name} Failed after {retries + 1} failed workers",
        )
        cluster.wait_for(
            watching(lambda: all(_version(p) <= retries for p in _all_pods(run))),
            timeout=10,
            what=f"the pods of a version past {retries} gone",
        )
        time.sleep(2)  # two of the controller's sync periods: nothing more may be created
        cluster.wait_for(watching(lambda: True), timeout=1, what="a last look")
        assert status.get("retryCount") == retries + 1, status
        assert versions_run == set(range(retries + 1)), (
            f"retries {retries}: attempts run {sorted(versions_run)}, want 0..{retries}"
        )
        assert versions_seen <= set(range(retries + 2)), versions_seen
        assert all(_version(p) <= retries for p in _all_pods(run))
    finally:
        run.plane.kubectl("delete", "job.batch.volcano.sh", run.name, "-n", run.namespace, "--wait=true")


@dataclass
class Clock:
    """Seconds since the node was lost, by step."""

    start: float = field(default_factory=time.monotonic)
    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, step: str) -> float:
        self.marks[step] = time.monotonic() - self.start
        print(f"  {self.marks[step]:6.1f} s  {step}", flush=True)
        return self.marks[step]

    def between(self, first: str, second: str) -> float:
        return self.marks[second] - self.marks[first]


def _ready(node: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


def _start_fence(cluster: ControlPlane, tmp_path: Path) -> Path:
    """The fence's program, whole, as its Deployment runs it (its command, its environment), with a
    token of the node check's account (the fence's), its fence after ``FENCE_AFTER_SECONDS``,
    ``aws`` a stand-in that records."""
    bin_dir = write_tools(tmp_path / "bin")
    record = tmp_path / "record"
    record.touch()
    args, environment = cluster.node_fence_program()
    token = cluster.node_check_token(SURVIVOR)
    cluster.processes.start(
        FENCE_PROCESS,
        [sys.executable, *args],
        env={
            **os.environ,
            **environment,
            "POD_NAMESPACE": NODE_CHECK_NAMESPACE,
            "FENCE_AFTER_SECONDS": str(FENCE_AFTER_SECONDS),
            "WATCH_SECONDS": str(WATCH_SECONDS),
            "HOME": str(tmp_path),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "SAMPLES": str(SAMPLES),
            "RECORD": str(record),
            **cluster.kube_api_environment(token),
        },
    )
    return record


def _lose_the_node(cluster: ControlPlane, run: RunHandle, lost_pod: str, record: Path) -> Clock:
    """Kill the lost node's kubelet; time its detection, its pod's eviction and its fencing."""
    kubelet = cluster.processes.get(f"kwok-{LOST_KUBELET}")
    clock = Clock()
    os.kill(kubelet.pid, signal.SIGKILL)
    print(f"\nnode {LOST} lost (its kubelet killed):", flush=True)

    def node() -> dict[str, Any]:
        found: dict[str, Any] = cluster.kubectl.json("get", "node", LOST)
        return found

    cluster.wait_for(lambda: _ready(node())["status"] == "Unknown", timeout=90, what=f"{LOST} Ready Unknown")
    clock.mark("detection: Ready Unknown")
    cluster.wait_for(
        lambda: any(
            t["key"] == "node.kubernetes.io/unreachable" and t["effect"] == "NoExecute"
            for t in node()["spec"].get("taints", [])
        ),
        timeout=30,
        what=f"{LOST} tainted unreachable:NoExecute",
    )
    clock.mark("taint node.kubernetes.io/unreachable:NoExecute")
    cluster.wait_for(
        lambda: (p := _pod(run, lost_pod)) is not None and "deletionTimestamp" in p["metadata"],
        timeout=NODE_LOST_TOLERATION_SECONDS + 60,
        what=f"{lost_pod} evicted (deletionTimestamp)",
    )
    clock.mark("eviction: the lost pod Terminating")
    cluster.wait_for(
        lambda: "set-instance-health" in record.read_text(),
        timeout=FENCE_AFTER_SECONDS + 30,
        what=f"the fence (node-check-fence) fencing {LOST}",
    )
    clock.mark("fence: the node check marks the instance Unhealthy")
    cluster.processes.stop(FENCE_PROCESS)
    assert (
        f"autoscaling set-instance-health --instance-id {_instance(LOST)} --health-status Unhealthy"
        in record.read_text()
    )
    return clock


def _pod(run: RunHandle, name: str) -> dict[str, Any] | None:
    result = run.plane.kubectl("get", "pod", name, "-n", run.namespace, "-o", "json", check=False)
    return None if result.returncode else dict(json.loads(result.stdout))


def test_a_node_lost_mid_run_costs_what_the_model_says_up_to_the_replacement(
    cluster: ControlPlane, default_config: StackConfig, tmp_path: Path
) -> None:
    run = run_handle(cluster, deployed_plan(default_config), RUN)
    run.apply()
    try:
        clock, first_id, second_id, placed = _lose_a_node_mid_run(cluster, default_config, run, tmp_path)
    finally:
        run.plane.kubectl(
            "delete", "job.batch.volcano.sh", run.name, "-n", run.namespace, "--ignore-not-found"
        )

    assert second_id != first_id
    assert placed == {SURVIVOR, REPLACEMENT}, placed
    marks = clock.marks
    assert (
        marks["detection: Ready Unknown"]
        <= NODE_MONITOR_GRACE_SECONDS + NODE_MONITOR_PERIOD_SECONDS + SLACK_SECONDS
    )
    evicted = clock.between(
        "taint node.kubernetes.io/unreachable:NoExecute", "eviction: the lost pod Terminating"
    )
    assert NODE_LOST_TOLERATION_SECONDS - 2 <= evicted <= NODE_LOST_TOLERATION_SECONDS + SLACK_SECONDS
    collected = clock.between(
        "the Node deleted (played: the instance terminated)", "the lost pod gone (pod garbage collector)"
    )
    # podgc's quarantine starts at its first pass after the Node went: up to one period (20 s) more.
    assert collected <= POD_GC_SECONDS + 20 + SLACK_SECONDS
    assert (
        clock.between("the lost pod gone (pod garbage collector)", "every pod Running again") <= SLACK_SECONDS
    )


def _lose_a_node_mid_run(
    cluster: ControlPlane, config: StackConfig, run: RunHandle, tmp_path: Path
) -> tuple[Clock, str, str, set[str]]:
    """The run on both nodes, one lost, the gang back on the survivor and a replacement; the clock,
    the two attempts' rendezvous ids and where the second attempt runs."""
    cluster.wait_for(lambda: _attempt_running(run, 0), timeout=60, what=f"{run.name} running on both nodes")
    assert {p["spec"]["nodeName"] for p in run.pods()} == {SURVIVOR, LOST}
    (first_id,) = run.rendezvous_ids()
    ((lost_pod, lost_uid),) = [
        (p["metadata"]["name"], p["metadata"]["uid"]) for p in run.pods() if p["spec"]["nodeName"] == LOST
    ]
    clock = _lose_the_node(cluster, run, lost_pod, _start_fence(cluster, tmp_path))

    # Until the Node goes, the lost pod stays Terminating and Volcano restarts nothing: the job is
    # still version 0, its survivor running (the worker there fails on its own once its collective
    # breaks; kwok's pods do not).
    still = _pod(run, lost_pod)
    assert still is not None and "deletionTimestamp" in still["metadata"], still
    status = run.job_status()
    assert (status.get("version", 0), status.get("running"), status.get("terminating")) == (0, 1, 1), status

    # EC2 Auto Scaling terminates the instance and launches its replacement; the cloud node
    # lifecycle controller deletes the Node: played here.
    cluster.remove_nodes([LOST])
    clock.mark("the Node deleted (played: the instance terminated)")
    cluster.add_nodes([_node(config, REPLACEMENT)])
    clock.mark("replacement node added and checked (played: add_nodes)")

    def collected() -> bool:
        # Volcano recreates the pod under the same name at once: the lost one is gone when its uid is.
        found = _pod(run, lost_pod)
        return found is None or found["metadata"]["uid"] != lost_uid

    cluster.wait_for(collected, timeout=POD_GC_SECONDS + 60, what=f"{lost_pod} garbage-collected")
    clock.mark("the lost pod gone (pod garbage collector)")
    cluster.wait_for(
        lambda: run.job_status().get("version", 0) >= 1, timeout=60, what=f"{run.name} restarted (version 1)"
    )
    clock.mark("Volcano's RestartJob: job version 1")
    cluster.wait_for(
        lambda: _attempt_running(run, 1), timeout=60, what=f"{run.name} running again as version 1"
    )
    clock.mark("every pod Running again")
    (second_id,) = run.rendezvous_ids()
    placed = {str(p["spec"].get("nodeName")) for p in run.pods()}
    return clock, first_id, second_id, placed
