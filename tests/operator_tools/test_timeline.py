"""The time-to-first-step model (operator_tools/first_step_model.py) and `make timeline` (operator_tools/timeline.py).

A model: these tests check its arithmetic, its order and its sources, not the figures themselves,
which the canary measures on a real account."""

from __future__ import annotations

import dataclasses
import io

import pytest

from cluster_facts.run_stages import stage_ids
from config import DEFAULT_CONFIG, load_config
from operator_tools.first_step_model import (
    COLD,
    FIGURES,
    GOAL_SECONDS,
    WARM,
    before_the_cuts,
    image_pull_seconds,
    timeline,
    total_seconds,
)
from operator_tools.timeline import main, run_starts
from tests.conftest import REPO_ROOT

START = run_starts(load_config(DEFAULT_CONFIG))[0]


@pytest.mark.parametrize("caches", [COLD, WARM])
def test_the_timeline_prints_every_shared_stage_once_in_the_shared_order(caches: object) -> None:
    assert tuple(stage.stage.id for stage in timeline(START, caches)) == stage_ids()  # type: ignore[arg-type]


def test_every_number_names_its_source() -> None:
    assert all(len(figure.source) >= 30 for figure in FIGURES.values())
    assert all(stage.source for stage in timeline(START, COLD) + timeline(START, WARM))
    # A figure without a measurement behind it says so.
    assert FIGURES["node_join"].source.startswith("estimate")


def test_the_default_run_with_warm_caches_meets_the_ten_minute_goal_and_did_not_before() -> None:
    warm, before = total_seconds(timeline(START, WARM)), total_seconds(timeline(before_the_cuts(START), WARM))
    assert warm <= GOAL_SECONDS < before


def test_the_cuts_are_the_image_pull_and_the_repeated_precompile() -> None:
    now = {stage.stage.id: stage.seconds for stage in timeline(START, WARM)}
    before = {stage.stage.id: stage.seconds for stage in timeline(before_the_cuts(START), WARM)}
    assert {stage for stage in now if now[stage] != before[stage]} == {"image_pull", "compile"}
    assert now["image_pull"] < before["image_pull"] and now["compile"] < before["compile"]


def test_a_parallel_pull_is_capped_by_the_root_volume() -> None:
    slow_volume = dataclasses.replace(START, root_volume_mib_per_second=125)
    assert image_pull_seconds(slow_volume) == pytest.approx(START.image_bytes.value / (125 * 1024 * 1024))
    assert image_pull_seconds(START) < image_pull_seconds(slow_volume)


def test_a_pull_at_node_start_hides_behind_the_node_check() -> None:
    prepulled = {s.stage.id: s.seconds for s in timeline(dataclasses.replace(START, prepull=True), WARM)}
    pull = image_pull_seconds(START)
    hidden = FIGURES["device_plugins"].value + FIGURES["node_check"].value + FIGURES["pods_bound"].value
    assert prepulled["image_pull"] == round(max(0.0, pull - hidden), 1)


def test_an_unstaged_data_set_costs_only_what_is_left_of_its_staging() -> None:
    cold = {s.stage.id: s.seconds for s in timeline(START, COLD)}
    before_pods = sum(cold[stage] for stage in stage_ids()[: stage_ids().index("data_ready")])
    assert cold["data_ready"] == round(FIGURES["dataset_staging"].value - before_pods, 1)
    without = {s.stage.id: s.seconds for s in timeline(dataclasses.replace(START, datasets=0), COLD)}
    assert without["data_ready"] == 0


def test_make_timeline_prints_both_columns_the_goal_and_the_sources() -> None:
    out = io.StringIO()
    assert main(["--config", str(REPO_ROOT / "config" / "default.yaml")], out) == 0
    text = out.getvalue()
    lines = text.splitlines()
    assert lines[0].startswith("run bert-large: 2 x trn1.32xlarge")
    printed = [line.split()[0] for line in lines[2 : 2 + len(stage_ids())]]
    assert printed == list(stage_ids())
    assert "goal: a warm run's first step within 10 minutes of kubectl apply on zero nodes: met" in text
    assert "aws-samples/karpenter-blueprints" in text


def test_an_unknown_run_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(REPO_ROOT / "config" / "default.yaml"), "--run", "nope"], io.StringIO()) == 1
    assert capsys.readouterr().err.strip().endswith("no run 'nope'")


def test_a_run_of_its_own_gets_its_own_workers_and_no_bert_archive() -> None:
    """make timeline described every run with the BERT archive's 48 GB and 32 workers per node
    (issue 33): a trn2 run has 64, and a run's own data sets have no known size."""
    from config import parse_config  # noqa: PLC0415
    from tests.config.test_config import default_data  # noqa: PLC0415

    data = default_data()
    data["trainium"]["node_groups"][0]["instance_type"] = "trn2.48xlarge"
    data["datasets"] = [
        {
            "name": "code",
            "files": [{"url": "https://example.com/train.py", "sha256": "a" * 64, "name": "train.py"}],
        }
    ]
    data["runs"] = [{"name": "mine", "script": "$(DATASET_CODE)/train.py", "datasets": ["code"], "nodes": 2}]
    [start] = run_starts(parse_config(data))
    stages = {stage.stage.id: stage for stage in timeline(start, COLD)}
    assert stages["rendezvous"].detail == "2 x 64 workers"
    assert stages["data_ready"].detail == (
        "staging not modelled: its data sets' sizes are not known offline (counted as staged)"
    )
    assert "48 GB" not in stages["data_ready"].source
    # The preset's run keeps the archive's figure.
    [bert] = run_starts(load_config(DEFAULT_CONFIG))
    assert bert.staging is FIGURES["dataset_staging"] and bert.workers_per_node == 32
