"""run_worker.sh once per team namespace, not in each pod (k8s_charts/runs/worker_script.py), across the
plans of the shipped configurations: every team namespace holds the script's ConfigMap, every run's
pod mounts the one of its own namespace, applied before the run, and no pod carries the script."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_plan import KubernetesLayerPlan, ManifestSet
from config import load_config
from k8s_charts.plan import TEAMS_STEP
from k8s_charts.runs.worker_script import (
    WORKER_SCRIPT,
    WORKER_SCRIPT_CONFIGMAP,
    WORKER_SCRIPT_DIR,
    WORKER_SCRIPT_FILE,
    WORKER_SCRIPT_VOLUME,
)
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG
from tests.plans import shared_review_plan

CONFIGS = pytest.mark.parametrize("config", [DEFAULT_CONFIG, EXAMPLE_CONFIG], ids=lambda path: path.stem)
# A line of the script's body that no pod needs to carry.
_BODY_LINE = "set -euo pipefail"


def _plan(config: Path) -> KubernetesLayerPlan:
    return shared_review_plan(load_config(config))


def _waits_for(plan: KubernetesLayerPlan, name: str) -> set[str]:
    """Every step ``name`` goes after, directly or through others."""
    seen: set[str] = set()
    todo = list(plan.step(name).after)
    while todo:
        step = todo.pop()
        if step not in seen:
            seen.add(step)
            todo.extend(plan.step(step).after)
    return seen


def _run_jobs(plan: KubernetesLayerPlan) -> list[tuple[str, dict[str, Any]]]:
    return [
        (step.name, manifest)
        for step in plan
        if isinstance(step, ManifestSet) and step.name.startswith("run-")
        for manifest in step.manifests
        if manifest["kind"] == "Job" and manifest["apiVersion"].startswith("batch.volcano.sh/")
    ]


@CONFIGS
def test_every_team_namespace_holds_the_worker_script(config: Path) -> None:
    step = _plan(config).step(TEAMS_STEP)
    assert isinstance(step, ManifestSet)
    scripts = {
        m["metadata"]["namespace"]: m
        for m in step.manifests
        if m["kind"] == "ConfigMap" and m["metadata"]["name"] == WORKER_SCRIPT_CONFIGMAP
    }
    assert set(scripts) == {team.name for team in load_config(config).teams}
    for config_map in scripts.values():
        assert config_map["immutable"] is True
        assert config_map["data"] == {WORKER_SCRIPT_FILE: WORKER_SCRIPT}


@CONFIGS
def test_every_runs_pod_mounts_its_namespaces_script_and_carries_none(config: Path) -> None:
    plan = _plan(config)
    jobs = _run_jobs(plan)
    assert jobs, "the configuration renders no run"
    for step_name, job in jobs:
        # The teams step (and with it the ConfigMap) goes before the run's step.
        assert TEAMS_STEP in _waits_for(plan, step_name), step_name
        [task] = job["spec"]["tasks"]
        pod = task["template"]["spec"]
        [container] = pod["containers"]
        assert container["command"] == ["/bin/bash", f"{WORKER_SCRIPT_DIR}/{WORKER_SCRIPT_FILE}"]
        assert {
            "name": WORKER_SCRIPT_VOLUME,
            "configMap": {"name": WORKER_SCRIPT_CONFIGMAP, "defaultMode": 0o444},
        } in pod["volumes"]
        assert {"name": WORKER_SCRIPT_VOLUME, "mountPath": WORKER_SCRIPT_DIR, "readOnly": True} in container[
            "volumeMounts"
        ]
        assert _BODY_LINE in WORKER_SCRIPT and _BODY_LINE not in json.dumps(job), step_name
