"""``ControlPlane.apply_plan(concurrent=True)`` (tests/cluster/control_plane.py), the order it keeps,
without a cluster: each step's work is replaced by a recorder, so what is tested is the scheduling of
steps by their ``after``, as CloudFormation starts a resource once its dependencies are created.
`make bench-scale` applies the plan this way; the tier's scenarios apply it one step at a time."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_plan import KubernetesLayerPlan, ManifestSet, ReadinessGate
from tests.cluster.control_plane import ControlPlane


def _plan() -> KubernetesLayerPlan:
    def manifest(name: str, *after: str) -> ManifestSet:
        return ManifestSet(
            name=name, manifests=({"kind": "ConfigMap", "metadata": {"name": name}},), after=after
        )

    def gate(name: str, *after: str) -> ReadinessGate:
        return ReadinessGate(
            name=name, object_type="queue", object_name=name, json_path=".status.state", after=after
        )

    return KubernetesLayerPlan(
        steps=(
            manifest("volcano"),
            manifest("namespace"),
            gate("webhook-ready", "volcano"),
            manifest("queue-a", "webhook-ready"),
            manifest("queue-b", "webhook-ready"),
            gate("quota-counted", "namespace"),
            manifest("etcd", "namespace", "quota-counted"),
        )
    )


class _Recorder:
    def __init__(self, fail: str | None = None) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str]] = []
        self.running = 0
        self.most_at_once = 0
        self.fail = fail

    def run_step(self, resource_id: str, step: Any, action: str) -> str:
        with self.lock:
            self.events.append(("start", step.name))
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        time.sleep(0.05)
        with self.lock:
            self.running -= 1
            self.events.append(("end", step.name))
        if step.name == self.fail:
            raise AssertionError(f"step {step.name} (Create): kubectl apply refused")
        return f"{step.name} created"


def _plane(tmp_path: Path, recorder: _Recorder, monkeypatch: pytest.MonkeyPatch) -> ControlPlane:
    plane = ControlPlane(binaries=None, work_dir=tmp_path)  # type: ignore[arg-type]  # no process is started
    monkeypatch.setattr(plane, "_run_step", recorder.run_step)
    monkeypatch.setattr(plane, "_after_step", lambda step: None)
    return plane


def test_a_step_starts_only_after_the_steps_it_follows_have_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = _Recorder()
    plan = _plan()
    report = _plane(tmp_path, recorder, monkeypatch).apply_plan(plan, concurrent=True)

    assert sorted(result.name for result in report.steps) == sorted(plan.names)
    assert {result.action for result in report.steps} == {"Create"}
    for step in plan:
        started = recorder.events.index(("start", step.name))
        for prerequisite in step.after:
            assert recorder.events.index(("end", prerequisite)) < started, (step.name, prerequisite)
    assert recorder.most_at_once >= 2, "steps that follow nothing in common ran one at a time"


def test_a_second_apply_of_the_same_plan_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = _Recorder()
    plane = _plane(tmp_path, recorder, monkeypatch)
    plane.apply_plan(_plan(), concurrent=True)
    recorder.events.clear()

    report = plane.apply_plan(_plan(), concurrent=True)

    assert {result.action for result in report.steps} == {"Unchanged"}
    assert recorder.events == []


def test_a_failed_step_stops_what_follows_it_and_is_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = _Recorder(fail="webhook-ready")
    plane = _plane(tmp_path, recorder, monkeypatch)

    with pytest.raises(AssertionError, match="step webhook-ready"):
        plane.apply_plan(_plan(), concurrent=True)

    started = {name for event, name in recorder.events if event == "start"}
    assert not started & {"queue-a", "queue-b"}
    assert "webhook-ready" not in plane.deployed
