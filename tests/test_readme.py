"""README's figures that the code decides, checked against the code (issue 33: it said 9 charts where
synth wrote 24)."""

from __future__ import annotations

from cluster_plan.kubernetes_values import review_plan
from config import load_config
from tests.conftest import DEFAULT_CONFIG, REPO_ROOT


def test_the_synth_line_names_the_charts_synth_writes() -> None:
    # make synth writes one cdk.out/k8s/<step>.yaml per manifest set of the review plan
    # (cluster_plan/review_files.write_kubernetes_yaml; tests/test_cli.py checks the files on the real CLI).
    charts = len(review_plan(load_config(DEFAULT_CONFIG)).manifest_sets())
    line = (
        f"wrote cdk.out/: TrainiumStack.template.json, {charts} charts in cdk.out/k8s/, "
        "summary in cdk.out/summary/TrainiumStack.md"
    )
    assert line in (REPO_ROOT / "README.md").read_text()
