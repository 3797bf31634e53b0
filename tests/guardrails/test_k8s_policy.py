"""checkov's Kubernetes checks over every chart, as `make synth` writes them to cdk.out/k8s/.

Exceptions are annotations on the one object that needs them (k8s_charts/shared/policy_exceptions.py)
plus the project-wide skips in .checkov.yaml; everything else must pass.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cluster_plan.kubernetes_values import review_plan
from cluster_plan.review_files import write_kubernetes_yaml
from config import load_config
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG, REPO_ROOT

CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"
# Checks a device plugin may break: it is privileged, on the host network, or root on host paths.
HOST_ACCESS_CHECKS = {"CKV_K8S_16", "CKV_K8S_19", "CKV_K8S_20", "CKV_K8S_28", "CKV_K8S_37", "CKV2_K8S_6"}


def checkov(directory: Path) -> dict[str, Any]:
    """checkov's Kubernetes report for the manifests in ``directory``, with .checkov.yaml."""
    assert CHECKOV.exists(), "checkov is missing: run the tests through `make test`, which installs it"
    result = subprocess.run(
        [str(CHECKOV), "--config-file", ".checkov.yaml", "-d", str(directory), "-o", "json", "--compact"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.stdout.startswith("{"), (
        f"checkov failed (exit {result.returncode}): {result.stderr[-2000:]}"
    )
    report: dict[str, Any] = json.loads(result.stdout)
    assert report["check_type"] == "kubernetes"
    return report


def failures(report: dict[str, Any]) -> list[str]:
    return [
        f"{item['resource']}: {item['check_id']} {item['check_name']}"
        for item in report["results"]["failed_checks"]
    ]


@pytest.fixture(scope="module", params=[DEFAULT_CONFIG, EXAMPLE_CONFIG], ids=["default", "example"])
def chart_report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """checkov over the YAML that app.py writes for one configuration."""
    directory = tmp_path_factory.mktemp("k8s")
    write_kubernetes_yaml(review_plan(load_config(request.param)), directory)
    return checkov(directory)


def test_every_chart_passes_the_policy_checks(chart_report: dict[str, Any]) -> None:
    assert chart_report["summary"]["parsing_errors"] == 0
    assert chart_report["summary"]["resource_count"] >= 20
    assert failures(chart_report) == []


def test_every_exception_has_a_reason(chart_report: dict[str, Any]) -> None:
    skipped = chart_report["results"]["skipped_checks"]
    assert skipped, "no exception recorded: the device plugins cannot pass the host-access checks"
    for item in skipped:
        comment = item.get("check_result", {}).get("suppress_comment", "")
        assert len(comment) >= 40, f"{item['resource']}: {item['check_id']} needs a reason, got {comment!r}"


def test_host_access_exceptions_belong_to_the_device_plugins(chart_report: dict[str, Any]) -> None:
    excused = {
        item["resource"]
        for item in chart_report["results"]["skipped_checks"]
        if item["check_id"] in HOST_ACCESS_CHECKS
    }
    assert excused, "the EFA plugin is privileged and on the host network: its exceptions are missing"
    # The EFA plugin, and the node check, which reads the same devices before the node is in use.
    assert all(
        ".kube-system.aws-efa-k8s-device-plugin" in resource or ".kube-system.node-check" in resource
        for resource in excused
    ), excused


BAD_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: fixture, namespace: training}
spec:
  selector: {matchLabels: {app: fixture}}
  template:
    metadata: {labels: {app: fixture}}
    spec:
      containers:
        - name: web
          image: nginx:latest
          securityContext: {privileged: true}
"""


def test_an_unpinned_privileged_container_fails_the_policy_checks(tmp_path: Path) -> None:
    (tmp_path / "fixture.yaml").write_text(BAD_DEPLOYMENT)
    failed = {item["check_id"] for item in checkov(tmp_path)["results"]["failed_checks"]}
    assert {"CKV_K8S_14", "CKV_K8S_16"} <= failed  # image tag latest; privileged container


def test_an_exception_annotation_only_excuses_its_own_check(tmp_path: Path) -> None:
    excused = BAD_DEPLOYMENT.replace(
        "metadata: {name: fixture, namespace: training}",
        "metadata:\n  name: fixture\n  namespace: training\n"
        "  annotations: {checkov.io/skip1: CKV_K8S_16=fixture that shows one check excused}",
    )
    (tmp_path / "fixture.yaml").write_text(excused)
    report = checkov(tmp_path)
    failed = {item["check_id"] for item in report["results"]["failed_checks"]}
    skipped = {item["check_id"] for item in report["results"]["skipped_checks"]}
    assert "CKV_K8S_16" in skipped
    assert "CKV_K8S_16" not in failed
    assert "CKV_K8S_14" in failed
