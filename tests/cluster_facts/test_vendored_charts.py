"""The charts kept in charts/: the files their provenance records, the releases the plan installs,
and values that the charts read.

tools/vendor_chart.py copies each chart from its upstream tag and writes the provenance record;
here every file is hashed again, so an edited, added or removed file fails. The values the project
sets must be keys of the vendored chart's values.yaml (or read by its templates): a misspelled or
renamed key would otherwise be ignored by Helm without a word.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_facts.kubernetes_plan import HelmRelease
from cluster_facts.vendored_charts import (
    CHARTS_DIRECTORY,
    CLUSTER_AUTOSCALER_CHART,
    VENDORED_CHARTS,
    VOLCANO_CHART,
    VendoredChart,
    repository_path,
)
from cluster_facts.versions import (
    CLUSTER_AUTOSCALER_CHART_VERSION,
    VOLCANO_CHART_VERSION,
    VOLCANO_CRD_SCHEMAS,
)
from k8s_charts.addons.volcano_scheduler import VOLCANO_SCHEDULER_CONFIG, volcano_values
from tests.conftest import REPO_ROOT
from tests.stacks.test_capacity import CHART_SCHEMA
from tests.stacks.test_update_safety import DEFAULT_ON, EXAMPLE, deployed_plan
from tools.vendor_chart import file_digests, provenance_problems, vendor

CHARTS = {chart.name: chart for chart in VENDORED_CHARTS}


def chart_dir(chart: VendoredChart) -> Path:
    return repository_path(chart.directory)


def record(chart: VendoredChart) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(repository_path(chart.provenance).read_text())
    return loaded


def chart_values(chart: VendoredChart) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((chart_dir(chart) / "values.yaml").read_text())
    return loaded


def templates(chart: VendoredChart) -> str:
    return "\n".join(path.read_text() for path in sorted((chart_dir(chart) / "templates").glob("*")))


def releases() -> dict[str, HelmRelease]:
    """Every Helm release of the plans the tests deploy, by chart (the example sets more values)."""
    found: dict[str, HelmRelease] = {}
    for config_data in (DEFAULT_ON, EXAMPLE):
        for step in deployed_plan(config_data):
            if isinstance(step, HelmRelease):
                found.setdefault(step.chart, step)
    return found


# --- Provenance ------------------------------------------------------------------------------------


@pytest.mark.parametrize("chart", VENDORED_CHARTS, ids=lambda chart: chart.name)
def test_every_vendored_file_is_the_one_its_provenance_records(chart: VendoredChart) -> None:
    assert provenance_problems(chart) == []
    assert len(record(chart)["files"]) == {"volcano": 63, "cluster-autoscaler": 23}[chart.name]


@pytest.mark.parametrize("chart", VENDORED_CHARTS, ids=lambda chart: chart.name)
def test_the_provenance_names_the_release_tag_and_what_was_left_out(chart: VendoredChart) -> None:
    source = record(chart)["source"]
    assert (source["repository"], source["tag"], source["path"]) == (chart.repository, chart.tag, chart.path)
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert record(chart)["dropped"] == dict(chart.dropped)
    for dropped in chart.dropped:
        assert not (chart_dir(chart) / dropped).exists()


def test_the_tags_are_the_pinned_releases() -> None:
    assert record(VOLCANO_CHART)["source"] == {
        "repository": "https://github.com/volcano-sh/volcano",
        "tag": f"v{VOLCANO_CHART_VERSION}",
        "commit": "0a56ed331897f5455916a44d3075671376d731d6",
        "path": "installer/helm/chart/volcano",
    }
    assert record(CLUSTER_AUTOSCALER_CHART)["source"] == {
        "repository": "https://github.com/kubernetes/autoscaler",
        "tag": f"cluster-autoscaler-chart-{CLUSTER_AUTOSCALER_CHART_VERSION}",
        "commit": "5a0b98e45f896e98132737240ac131a519d3b33d",
        "path": "cluster-autoscaler/charts/cluster-autoscaler",
    }


def test_an_edited_added_or_removed_file_fails_the_check(tmp_path: Path) -> None:
    shutil.copytree(REPO_ROOT / CHARTS_DIRECTORY, tmp_path / CHARTS_DIRECTORY)
    copy = tmp_path / VOLCANO_CHART.directory
    values = copy / "values.yaml"
    values.write_text(values.read_text().replace('image_registry: "docker.io"', 'image_registry: "evil.io"'))
    (copy / "templates" / "extra.yaml").write_text("kind: ConfigMap\n")
    (copy / "templates" / "NOTES.txt").unlink()
    problems = provenance_problems(VOLCANO_CHART, root=tmp_path)
    assert problems[0] == f"{VOLCANO_CHART.directory}/templates/extra.yaml: not in the provenance record"
    assert problems[1] == f"{VOLCANO_CHART.directory}/templates/NOTES.txt: missing"
    assert problems[2].startswith(f"{VOLCANO_CHART.directory}/values.yaml: sha256 ")
    assert len(problems) == 3


def test_charts_holds_only_the_vendored_charts_and_their_records() -> None:
    expected = {name for chart in VENDORED_CHARTS for name in (chart.directory, chart.provenance)}
    assert {
        f"{CHARTS_DIRECTORY}/{path.name}" for path in (REPO_ROOT / CHARTS_DIRECTORY).iterdir()
    } == expected


def test_the_plan_installs_each_vendored_chart_from_its_directory() -> None:
    found = releases()
    assert set(found) == set(CHARTS)
    for name, release in found.items():
        chart = CHARTS[name]
        metadata = yaml.safe_load((chart_dir(chart) / "Chart.yaml").read_text())
        assert (release.chart_directory, release.repository) == (chart.directory, None)
        assert (metadata["name"], str(metadata["version"])) == (release.chart, release.version)
    volcano = yaml.safe_load((chart_dir(VOLCANO_CHART) / "Chart.yaml").read_text())
    assert volcano["appVersion"] == VOLCANO_CHART_VERSION
    # The subchart Chart.yaml depends on is in charts/, so Helm installs from the directory offline.
    [jobflow] = volcano["dependencies"]
    assert jobflow["repository"] == "file://./charts/jobflow"
    subchart = yaml.safe_load((chart_dir(VOLCANO_CHART) / "charts" / "jobflow" / "Chart.yaml").read_text())
    assert (subchart["name"], str(subchart["version"])) == (jobflow["name"], jobflow["version"])


def test_the_volcano_crds_are_the_ones_the_queues_and_jobs_are_validated_against() -> None:
    kept = sorted((REPO_ROOT / VOLCANO_CRD_SCHEMAS).glob("*.yaml"))
    assert [path.name for path in kept] == [
        "batch.volcano.sh_jobs.yaml",
        "scheduling.volcano.sh_podgroups.yaml",
        "scheduling.volcano.sh_queues.yaml",
    ]
    for path in kept:
        vendored = chart_dir(VOLCANO_CHART) / "crd" / "bases" / path.name
        # The kept copies start with a document separator; otherwise byte for byte the same.
        assert path.read_text() == "---\n" + vendored.read_text(), path.name


# --- The tool itself, on a real git repository -------------------------------------------------------


def git(directory: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=directory,
        check=True,
        capture_output=True,
    )


def upstream(tmp_path: Path, *, link: bool) -> Path:
    work = tmp_path / "upstream"
    chart = work / "deploy" / "demo"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: demo\nversion: 1.2.3\n")
    (chart / "values.yaml").write_text("replicas: 1\n")
    (chart / "templates" / "cm.yaml").write_bytes(b"kind: ConfigMap\r\n")
    if link:
        (chart / "latest").symlink_to("templates")
    git(tmp_path, "init", "-q", str(work))
    git(work, "add", ".")
    git(work, "commit", "-q", "-m", "chart")
    git(work, "tag", "demo-1.2.3")
    return work / ".git"


DEMO = VendoredChart(name="demo", version="1.2.3", repository="unused", tag="demo-1.2.3", path="deploy/demo")


@pytest.mark.process
def test_the_tool_copies_the_tag_byte_for_byte_and_replaces_an_older_version(tmp_path: Path) -> None:
    git_dir = upstream(tmp_path, link=False)
    root = tmp_path / "project"
    older = root / CHARTS_DIRECTORY / "demo-1.2.2"
    older.mkdir(parents=True)
    (root / CHARTS_DIRECTORY / "demo-1.2.2.provenance.json").write_text('{"chart": "demo"}')
    written = vendor(DEMO, git_dir, root=root)
    assert sorted(written["files"]) == ["Chart.yaml", "templates/cm.yaml", "values.yaml"]
    assert (root / DEMO.directory / "templates" / "cm.yaml").read_bytes() == b"kind: ConfigMap\r\n"
    assert provenance_problems(DEMO, root=root) == []
    assert file_digests(root / DEMO.directory) == {
        path: entry["sha256"] for path, entry in written["files"].items()
    }
    assert sorted(path.name for path in (root / CHARTS_DIRECTORY).iterdir()) == [
        "demo-1.2.3",
        "demo-1.2.3.provenance.json",
    ]


@pytest.mark.process
def test_the_tool_refuses_a_link_unless_it_is_dropped_with_a_reason(tmp_path: Path) -> None:
    git_dir = upstream(tmp_path, link=True)
    root = tmp_path / "project"
    with pytest.raises(RuntimeError, match=r"\['latest'\] are links or submodules"):
        vendor(DEMO, git_dir, root=root)
    assert not (root / DEMO.directory).exists()
    dropping = VendoredChart(**{**DEMO.__dict__, "dropped": {"latest": "a link no template reads"}})
    assert "latest" in vendor(dropping, git_dir, root=root)["dropped"]
    with pytest.raises(RuntimeError, match=r"dropped paths not in deploy/demo at demo-1.2.3: \['gone'\]"):
        vendor(VendoredChart(**{**DEMO.__dict__, "dropped": {"gone": "x"}}), git_dir, root=root)
    with pytest.raises(RuntimeError, match=re.escape("Chart.yaml is demo 1.2.3, not demo 9.9.9")):
        vendor(VendoredChart(**{**dropping.__dict__, "version": "9.9.9"}), git_dir, root=root)


# --- Values the charts read -----------------------------------------------------------------------


def unknown_keys(
    values: Mapping[str, Any], defaults: Mapping[str, Any], templates: str, path: str = ""
) -> list[str]:
    """Keys of ``values`` that the chart neither declares in values.yaml nor reads in a template.

    Below a key whose default is an empty map (``resources: {}``) or that a template ranges over
    (``range $key, $value := .Values.extraArgs``) any key goes: the chart passes the map on whole.
    """
    unknown: list[str] = []
    for key, value in values.items():
        dotted = f"{path}{key}"
        if key not in defaults:
            if not re.search(rf"\.Values\.{re.escape(dotted)}\b", templates):
                unknown.append(dotted)
            continue
        default = defaults[key]
        passed_whole = default == {} or re.search(rf"range [^}}]*\.Values\.{re.escape(dotted)}\s", templates)
        if isinstance(value, Mapping) and isinstance(default, Mapping) and not passed_whole:
            unknown += unknown_keys(value, default, templates, f"{dotted}.")
    return unknown


@pytest.mark.parametrize("chart", VENDORED_CHARTS, ids=lambda chart: chart.name)
def test_every_value_the_project_sets_is_one_the_vendored_chart_reads(chart: VendoredChart) -> None:
    release = releases()[chart.name]
    assert release.values
    assert unknown_keys(release.values, chart_values(chart), templates(chart)) == []


def test_a_misspelled_value_is_caught() -> None:
    chart = CLUSTER_AUTOSCALER_CHART
    values = {
        "image": {"repo": "x"},
        "autoDiscovery": {"clusterName": "c", "tag": []},
        "extraArgs": {"any": 1},
    }
    assert unknown_keys(values, chart_values(chart), templates(chart)) == ["image.repo", "autoDiscovery.tag"]


def test_the_hand_written_autoscaler_schema_declares_the_vendored_charts_top_level_keys() -> None:
    # The schema stays: it also checks types and the autoscaler's flag names (extraArgs), which
    # values.yaml cannot; this keeps its list of keys the chart's own.
    schema = json.loads((CHART_SCHEMA / "values.schema.json").read_text())
    assert set(schema["properties"]) == set(chart_values(CLUSTER_AUTOSCALER_CHART))


def test_the_scheduler_configuration_replaces_the_file_the_volcano_scheduler_reads() -> None:
    scheduler = (chart_dir(VOLCANO_CHART) / "templates" / "scheduler.yaml").read_text()
    # The ConfigMap holds the override, under the file name the scheduler is started with.
    assert (
        "  {{- if .Values.custom.scheduler_config_override }}\n"
        "  volcano-scheduler.conf: |\n"
        "    {{- .Values.custom.scheduler_config_override | nindent 4 }}\n"
    ) in scheduler
    assert "--scheduler-conf=/volcano.scheduler/{{base .Values.basic.scheduler_config_file}}" in scheduler
    defaults = chart_values(VOLCANO_CHART)
    assert Path(defaults["basic"]["scheduler_config_file"]).name == "volcano-scheduler.conf"
    assert "custom" in defaults and "scheduler_config_override" in defaults["custom"]
    values = volcano_values()
    assert values["custom"]["scheduler_config_override"] == VOLCANO_SCHEDULER_CONFIG
    assert "scheduler_config_file" not in values["basic"]
    assert releases()["volcano"].values["custom"] == values["custom"]
