"""Every container of every Helm release has requests and limits for cpu and memory, as the real
``helm template`` renders the release's chart with the plan's values, for the default and the example
configuration (hooks included: Volcano's admission-init Job). The charts' own defaults set none.

The helm binary is the control plane tier's (``make cluster-binaries``; ``make test`` builds it first).
The rule and its one exception: tests/k8s_charts/resources.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_facts.kubernetes_plan import HelmRelease
from cluster_facts.vendored_charts import repository_path
from config import load_config
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG
from tests.k8s_charts.manifests import containers
from tests.k8s_charts.resources import missing_resources
from tests.plans import shared_review_plan
from tools.cluster_binaries import binary_path

pytestmark = pytest.mark.process

CONFIGS = {"default": DEFAULT_CONFIG, "example": EXAMPLE_CONFIG}


def releases(config: str) -> dict[str, HelmRelease]:
    plan = shared_review_plan(load_config(CONFIGS[config]))
    return {step.name: step for step in plan if isinstance(step, HelmRelease)}


CASES = [(config, name) for config in sorted(CONFIGS) for name in releases(config)]


@cache
def helm() -> Path:
    path = binary_path("helm", "helm")
    assert path.is_file(), f"{path} is missing: run `make cluster-binaries` (`make test` does)"
    return path


def rendered(config: str, name: str, work_dir: Path) -> list[dict[str, Any]]:
    """``helm template`` of the release as the stack installs it (its chart, values, namespace and
    the configuration's Kubernetes version)."""
    step = releases(config)[name]
    assert step.chart_directory is not None, f"{name}: only charts kept in the repository are rendered here"
    values = work_dir / f"{name}.values.json"
    values.write_text(json.dumps(dict(step.values)))
    home = work_dir / "helm-home"
    result = subprocess.run(
        [
            str(helm()), "template", step.release, str(repository_path(step.chart_directory)),
            "--namespace", step.namespace, "--values", str(values),
            "--kube-version", load_config(CONFIGS[config]).cluster.kubernetes_version,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={
            **os.environ,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        },
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


@pytest.mark.parametrize(("config", "name"), CASES, ids=[f"{config}-{name}" for config, name in CASES])
def test_every_container_of_the_release_has_requests_and_limits(
    config: str, name: str, tmp_path: Path
) -> None:
    manifests = rendered(config, name, tmp_path)
    checked = [
        (manifest["kind"], manifest["metadata"]["name"], container["name"], missing_resources(container))
        for manifest in manifests
        for container in containers(manifest)
    ]
    assert checked, f"{name} renders no container"
    assert [entry for entry in checked if entry[3]] == []
