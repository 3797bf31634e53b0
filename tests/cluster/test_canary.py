"""`make canary` against the tier: the canary's own entry point (``python -m operator_tools.canary
--config config/default.yaml``, what the target runs, with ``CANARY_ARGS``) as a process of its own,
through the official Kubernetes client and a kubeconfig the harness wrote (``KUBECONFIG``: the
admin's client certificate), on the default plan, whose Trainium group starts at zero nodes.

What decides each printed stage here: the API server (the canary's Job and ConfigMap created and
deleted, the pods' and PodGroup's removal by the garbage collector), Volcano (the Job admitted, its
pods made, the gang bound whole, the Job ``Completed``), the real cluster autoscaler with its kwok
provider in the place of the Auto Scaling group (``TriggeredScaleUp``, the group raised to the gang's
size, the empty nodes removed after the run; tests/cluster/autoscaler.py), kwok (the nodes Ready
with the template's Neuron and EFA resources, the containers "running"). Stand-ins: the node check
lifting the startup taint is ``NodeAgent`` (tests/cluster/autoscaler.py), and the containers' exit
is this test annotating the pods (kwok's ``pod-exit`` stage): no container runs on kwok's nodes, so
the canary runs with ``--control-plane-only`` and the stages its program reports from its container
(mounts, Neuron devices, EFA, rendezvous, collective, output) and TensorBoard print as not measured
here, as the flag is documented to (docs/health.md, "The canary").

The failure path: the group's Auto Scaling group cannot grow (the kwok provider's max-count 0, as an
Auto Scaling group whose maximum was set to 0 outside the stack): the autoscaler refuses the scale-up,
and the canary exits 1 within its timeout with ``scale_up`` as its last line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_names import NODE_GROUP_LABEL
from cluster_plan.canary_run import canary_manifests, canary_run
from config import StackConfig
from operator_tools.canary_report import CONTAINER_STAGES, stage_ids
from tests.cluster.autoscaler import MAX_COUNT_ANNOTATION, kwok_templates, start_autoscaler
from tests.cluster.control_plane import ControlPlane
from tests.cluster.plans import deployed_plan
from tests.conftest import DEFAULT_CONFIG, REPO_ROOT
from tools.cluster_binaries import AUTOSCALER_RELEASE

TIMEOUT_MINUTES = 2.0
"""The canary's --timeout-minutes: the scale-up (2 s loops), the node check's 5 s hold and the run
take about 20 s here; the product's default is max_node_provision_minutes + 30."""
SCALE_DOWN_MINUTES = 1.5
"""--scale-down-minutes: scale-down-unneeded-time and -delay-after-add are 20 s here (TEST_TIMINGS)."""
FAIL_TIMEOUT_MINUTES = 0.75
"""The failure path's --timeout-minutes: the autoscaler refuses within a few of its 2 s loops."""
MARGIN_SECONDS = 30
"""Beyond the canary's own bounds before the test kills it: its start-up, a last poll, the clean-up."""
REMOVAL_SECONDS = 60
"""The garbage collector removing the Job's pods and PodGroup after the canary deleted the Job."""
MEASURED = (
    "pods_pending",
    "scale_up",
    "instance_launch",
    "node_join",
    "device_plugins",
    "node_check",
    "pods_bound",
    "image_pull",
    "run_end",
    "scale_down",
)


@dataclass
class CanaryProcess:
    process: subprocess.Popen[str]
    started: float
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def wait(self, timeout: float) -> tuple[int, list[str], float]:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(
                f"the canary did not end within {timeout:.0f} s:\n" + "\n".join(self.lines)
            ) from None
        if self.reader is not None:
            self.reader.join(timeout=10)
        return code, self.lines, time.monotonic() - self.started


def start_canary(plane: ControlPlane, *args: str, config: Path = DEFAULT_CONFIG) -> CanaryProcess:
    """``make canary``'s command (CONFIG ``config``, CANARY_ARGS ``args``), its output read line by
    line as it prints."""
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
    process = subprocess.Popen(
        [sys.executable, "-m", "operator_tools.canary", "--config", str(config), *args],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    running = CanaryProcess(process, time.monotonic())

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            running.lines.append(line.rstrip("\n"))
            print(f"canary | {line.rstrip()}", flush=True)

    running.reader = threading.Thread(target=read, name="canary-output", daemon=True)
    running.reader.start()
    return running


def stage_status(lines: list[str]) -> dict[str, tuple[str, str]]:
    """Each printed stage's status and line."""
    found = {}
    for line in lines:
        words = line.split()
        if words[:1] in (["PASS"], ["FAIL"], ["SKIP"]) and len(words) > 2:
            found[words[2]] = (words[0], line)
    return found


@pytest.fixture(scope="module")
def canary(control_plane: ControlPlane, default_config: StackConfig) -> Iterator[tuple[str, str, str]]:
    """The default plan applied; the canary's run id, namespace and node group (from the product's
    own functions, so the test names what the canary creates)."""
    control_plane.apply_plan(deployed_plan(default_config))
    run = canary_run(default_config)
    run_id, _ = canary_manifests(run)
    left = [
        n["metadata"]["name"]
        for n in control_plane.kubectl.json("get", "nodes", "-l", f"{NODE_GROUP_LABEL}={run.node_group}")[
            "items"
        ]
    ]
    assert left == [], f"an earlier module left nodes of {run.node_group}: {left}"
    yield run_id, run.namespace, run.node_group
    control_plane.kubectl("delete", "job.batch.volcano.sh", run_id, "-n", run.namespace, "--ignore-not-found")


def _what_remains(plane: ControlPlane, run_id: str, namespace: str) -> list[str]:
    """Every object of the canary's run still in the API server (the ones it made and theirs)."""
    found = []
    for kind in ("jobs.batch.volcano.sh", "podgroups.scheduling.volcano.sh", "pods", "configmaps"):
        for item in plane.kubectl.json("get", kind, "-n", namespace)["items"]:
            name = item["metadata"]["name"]
            if name.startswith(run_id):
                found.append(f"{kind}/{name}")
    return found


def assert_nothing_remains(plane: ControlPlane, run_id: str, namespace: str) -> float:
    started = time.monotonic()
    plane.wait_for(
        lambda: not _what_remains(plane, run_id, namespace),
        timeout=REMOVAL_SECONDS,
        what=f"nothing of the canary {run_id} left (its Job, PodGroup, pods, ConfigMap)",
    )
    return time.monotonic() - started


def _end_the_containers(
    plane: ControlPlane, run_id: str, namespace: str, size: int, stop: threading.Event
) -> None:
    """What kwok cannot do: the canary's containers exit 0 once every pod of the gang runs."""
    while not stop.wait(1.0):
        pods = plane.kubectl.json(
            "get", "pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={run_id}"
        )["items"]
        if len(pods) == size and all(p["status"].get("phase") == "Running" for p in pods):
            time.sleep(2.0)  # a canary poll (1 s) sees them running first, as it would a real run
            for pod in pods:
                plane.kubectl(
                    "annotate", "pod", pod["metadata"]["name"], "-n", namespace,
                    "cluster-test/exit-code=0", "--overwrite",
                )  # fmt: skip
            return


def test_the_canary_prints_every_stage_the_tier_can_show_and_removes_its_run(
    canary: tuple[str, str, str], control_plane: ControlPlane, default_config: StackConfig
) -> None:
    run_id, namespace, group = canary
    size = canary_run(default_config).nodes
    autoscaler = start_autoscaler(control_plane, default_config)
    stop = threading.Event()
    try:
        running = start_canary(
            control_plane,
            "--control-plane-only",
            "--timeout-minutes", str(TIMEOUT_MINUTES),
            "--scale-down-minutes", str(SCALE_DOWN_MINUTES),
            "--poll-seconds", "1",
        )  # fmt: skip
        ender = threading.Thread(
            target=_end_the_containers, args=(control_plane, run_id, namespace, size, stop), daemon=True
        )
        ender.start()
        code, lines, took = running.wait((TIMEOUT_MINUTES + SCALE_DOWN_MINUTES) * 60 + MARGIN_SECONDS)
        log = autoscaler.log()
    finally:
        stop.set()
        autoscaler.stop()
    print(f"the canary took {took:.1f} s")
    output = "\n".join(lines)
    assert code == 0, output
    assert lines[0].startswith(f"canary {run_id}: {size} x "), output
    status = stage_status(lines)
    assert list(status) == list(stage_ids()), output
    for stage in MEASURED:
        assert status[stage][0] == "PASS", f"{stage}: {status[stage][1]}\n{output}"
    for stage in CONTAINER_STAGES:
        said, line = status[stage]
        assert said == "SKIP" and "(not measured here: " in line, line
    assert "TriggeredScaleUp" in status["scale_up"][1] or "the group grew" in status["scale_up"][1], output
    assert f"({size} nodes registered)" in status["instance_launch"][1], output
    assert f"({size} nodes removed)" in status["scale_down"][1], output
    assert f"canary {run_id}: removed Job {run_id}, ConfigMap {run_id}-program" in lines, output
    assert lines[-1] == (
        f"CANARY PASS: every stage it measured passed; not measured here: {', '.join(CONTAINER_STAGES)}"
    ), output
    # What the autoscaler decided: the group raised to the gang's size from zero, then emptied.
    assert f"Scale-up: setting group {group} size to {size}" in log, log[-3000:]
    assert log.count("Scale-down: removing empty node") >= size, log[-3000:]
    left = control_plane.kubectl.json("get", "nodes", "-l", f"{NODE_GROUP_LABEL}={group}")["items"]
    assert left == [], [n["metadata"]["name"] for n in left]
    gone = assert_nothing_remains(control_plane, run_id, namespace)
    print(f"nothing of the run left {gone:.1f} s after the canary ended")


def _no_room(group: str) -> Callable[[StackConfig], dict[str, Any]]:
    """The kwok templates with ``group``'s maximum at 0: an Auto Scaling group that cannot grow."""

    def templates(config: StackConfig) -> dict[str, Any]:
        listed = kwok_templates(config)
        for node in listed["items"]:
            if node["metadata"]["labels"][NODE_GROUP_LABEL] == group:
                node["metadata"]["annotations"][MAX_COUNT_ANNOTATION] = "0"
        return listed

    return templates


def test_a_group_that_cannot_grow_fails_the_canary_at_scale_up_within_its_timeout(
    canary: tuple[str, str, str], control_plane: ControlPlane, default_config: StackConfig
) -> None:
    run_id, namespace, group = canary
    autoscaler = start_autoscaler(control_plane, default_config, templates=_no_room(group))
    try:
        running = start_canary(
            control_plane,
            "--control-plane-only",
            "--timeout-minutes", str(FAIL_TIMEOUT_MINUTES),
            "--scale-down-minutes", str(SCALE_DOWN_MINUTES),
            "--poll-seconds", "1",
        )  # fmt: skip
        code, lines, took = running.wait(FAIL_TIMEOUT_MINUTES * 60 + MARGIN_SECONDS)
        log = autoscaler.log()
        nodes = autoscaler.nodes(group)
    finally:
        autoscaler.stop()
    print(f"the canary took {took:.1f} s")
    output = "\n".join(lines)
    assert code == 1, output
    assert lines[-1].startswith("CANARY FAIL at scale_up: NotTriggerScaleUp: pod didn't trigger scale-up"), (
        output
    )
    assert took < FAIL_TIMEOUT_MINUTES * 60 + MARGIN_SECONDS, took
    status = stage_status(lines)
    assert list(status) == list(stage_ids()), output
    assert status["pods_pending"][0] == "PASS" and status["scale_up"][0] == "FAIL", output
    after = list(status)[list(status).index("scale_up") + 1 :]
    assert {status[stage][0] for stage in after} == {"SKIP"}, output
    assert f"canary {run_id}: removed Job {run_id}, ConfigMap {run_id}-program" in lines, output
    # The autoscaler's own refusal, and no node. (Its log file holds the earlier test's process too.)
    log = log[log.rfind(f"Cluster Autoscaler {AUTOSCALER_RELEASE}") :]
    assert nodes == [], nodes
    assert "No expansion options" in log and "Scale-up: setting group" not in log, log[-3000:]
    gone = assert_nothing_remains(control_plane, run_id, namespace)
    print(f"nothing of the run left {gone:.1f} s after the canary ended")
