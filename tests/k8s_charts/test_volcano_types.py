"""The typed Volcano classes (k8s_charts/imports, ``make crds``): generated from the schemas of the
installed chart, and rendering the very objects the raw dicts render.

k8s_charts/runs/training_run.py is the worked example of a Volcano Job built with the typed classes.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

import cdk8s
import pytest

from cluster_facts.versions import VOLCANO_CHART_VERSION, VOLCANO_CRD_SCHEMAS
from config import load_config
from k8s_charts.imports.volcano_batch import Job
from k8s_charts.imports.volcano_scheduling import PodGroup, Queue
from k8s_charts.runs import training_run
from k8s_charts.teams.volcano_queue import VolcanoQueueChart
from tests import k8s_validation
from tests.conftest import EXAMPLE_CONFIG, REPO_ROOT
from tests.k8s_charts.manifests import Manifest, only, synth
from tests.k8s_validation import VOLCANO_CRDS, VOLCANO_KINDS, assert_valid
from tests.plans import shared_review_plan
from tools import import_crds
from tools.import_crds import PROVENANCE, schema_digests


@cache
def example_plan() -> dict[str, list[Manifest]]:
    """Every object the stack renders for config/example.yaml, by step."""
    plan = shared_review_plan(load_config(EXAMPLE_CONFIG))
    return {step.name: [dict(manifest) for manifest in step.manifests] for step in plan.manifest_sets()}


# --- One owner for the version -------------------------------------------------------------------


def test_the_schema_folder_follows_the_chart_version() -> None:
    assert REPO_ROOT / "tests" / "schemas" / f"volcano-{VOLCANO_CHART_VERSION}" == VOLCANO_CRDS
    assert VOLCANO_CRDS.is_dir(), f"add the CRDs of Volcano {VOLCANO_CHART_VERSION} to {VOLCANO_CRD_SCHEMAS}/"
    assert_valid([only(example_plan()["volcano-queue"], "Queue")])  # every kind found its schema


def test_a_chart_version_without_schemas_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(k8s_validation, "VOLCANO_CRDS", REPO_ROOT / "tests" / "schemas" / "volcano-0.0.0")
    k8s_validation._crd_schemas.cache_clear()
    try:
        with pytest.raises(FileNotFoundError, match=r"no CRD schemas for Volcano .*make crds"):
            k8s_validation.schema_problems(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}
            )
    finally:
        k8s_validation._crd_schemas.cache_clear()


def test_make_crds_without_schemas_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(import_crds, "VOLCANO_CRD_SCHEMAS", "tests/schemas/volcano-0.0.0")
    monkeypatch.setattr(sys, "argv", ["import_crds", "--cdk8s", "node_modules/.bin/cdk8s"])
    with pytest.raises(SystemExit, match=r"no CRD schemas for Volcano .*tests/schemas/volcano-0\.0\.0/"):
        import_crds.main()


def test_the_generated_classes_come_from_the_kept_schemas_and_the_pinned_cli() -> None:
    """Changing the schemas (or the cdk8s-cli pin) without `make crds` fails here."""
    provenance = json.loads(PROVENANCE.read_text())
    package = json.loads((REPO_ROOT / "package.json").read_text())
    assert provenance == {
        "cdk8s-cli": package["devDependencies"]["cdk8s-cli"],
        "schemas": VOLCANO_CRD_SCHEMAS,
        "sha256": schema_digests(REPO_ROOT / VOLCANO_CRD_SCHEMAS),
    }, "run `make crds` and commit k8s_charts/imports/"


def test_the_generated_classes_are_the_kinds_of_the_schemas() -> None:
    generated = {(cls.GVK.api_version, cls.GVK.kind) for cls in (Job, Queue, PodGroup)}
    assert generated == VOLCANO_KINDS


# --- Typed classes render what the raw dicts rendered -----------------------------------------


def raw_queue(spec: dict[str, Any]) -> Manifest:
    """The Queue as the chart built it before the typed class: an ApiObject and a JSON patch."""

    def build(app: cdk8s.App) -> cdk8s.Chart:
        chart = cdk8s.Chart(app, "raw")
        queue = cdk8s.ApiObject(
            chart,
            "Queue",
            api_version="scheduling.volcano.sh/v1beta1",
            kind="Queue",
            metadata=cdk8s.ApiObjectMetadata(name="test"),
        )
        queue.add_json_patch(cdk8s.JsonPatch.add("/spec", spec))
        return chart

    return only(synth(build), "Queue")


@pytest.mark.parametrize(
    "props",
    [
        {},
        {"weight": 5, "reclaimable": True, "capability": {"cpu": "768", "aws.amazon.com/neuron": "64"}},
        {"capability": {"cpu": "768"}, "deserved": {"cpu": "256", "aws.amazon.com/neuron": "10"}},
    ],
)
def test_the_typed_queue_renders_the_raw_queue(props: dict[str, Any]) -> None:
    typed = only(synth(lambda app: VolcanoQueueChart(app, "q", name="test", **props)), "Queue")
    raw = raw_queue({"weight": 1, "reclaimable": False, **props})
    assert typed == raw
    # The same object, not the same text: cdk8s sorts the keys of typed props; the raw patch
    # kept insertion order (weight, reclaimable, capability).
    assert list(typed["spec"]) == sorted(typed["spec"])


def test_the_stack_queue_is_the_raw_queue() -> None:
    [queue] = example_plan()["volcano-queue"]
    assert queue == raw_queue(
        {
            "weight": 1,
            "reclaimable": False,
            # The team's one group at max_size: 4 x trn1n.32xlarge (the research team's
            # Capacity Block group counts toward its own queue, not this one).
            "capability": {
                "cpu": "512",
                "memory": "2048Gi",
                "aws.amazon.com/neuron": "64",
                "vpc.amazonaws.com/efa": "64",
            },
            # No other team uses the group: the team deserves all of it.
            "deserved": {
                "cpu": "512",
                "memory": "2048Gi",
                "aws.amazon.com/neuron": "64",
                "vpc.amazonaws.com/efa": "64",
            },
        }
    )


def test_the_training_run_is_a_typed_volcano_job() -> None:
    # The run chart builds the generated Job class (no raw dicts or JSON patches), and what it
    # renders passes the CRD's schema in strict mode.
    assert "cdk8s.ApiObject(" not in Path(training_run.__file__).read_text()
    [raw] = example_plan()["run-bert-large"]
    assert (raw["apiVersion"], raw["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    assert_valid([raw])


def test_generated_packages_are_where_make_crds_puts_them() -> None:
    imports = REPO_ROOT / "k8s_charts" / "imports"
    assert sorted(path.name for path in imports.iterdir() if (path / "__init__.py").is_file()) == [
        "volcano_batch",
        "volcano_scheduling",
    ]
    assert all(Path(imports, name, "py.typed").is_file() for name in ("volcano_batch", "volcano_scheduling"))
