"""Which controllers Volcano's controller manager runs: its defaults without the colocation
controller (k8s_charts/addons/volcano_scheduler.py ``VOLCANO_CONTROLLERS`` says why). The chart's
template is read to show the value reaches the container's ``--controllers``; the test tier runs the
controller manager with the arguments of the Deployment the chart rendered (tests/cluster/README.md)."""

from __future__ import annotations

from typing import Any

from cluster_facts.vendored_charts import VOLCANO_CHART
from config import load_config
from k8s_charts.addons.volcano_scheduler import VOLCANO_CONTROLLERS
from tests.conftest import DEFAULT_CONFIG, REPO_ROOT
from tests.k8s_charts.addons.test_volcano_images import volcano_release


def test_the_release_runs_volcanos_default_controllers_but_the_colocation_one() -> None:
    values: dict[str, Any] = dict(volcano_release(load_config(DEFAULT_CONFIG)).values)
    controllers = values["custom"]["controller_enabled_controllers"].split(",")
    assert controllers == ["*", "-sharding-controller", "-colocation-config-controller"]
    assert values["custom"]["controller_enabled_controllers"] == VOLCANO_CONTROLLERS


def test_the_chart_passes_the_value_to_the_controller_managers_flag() -> None:
    template = (REPO_ROOT / VOLCANO_CHART.directory / "templates" / "controllers.yaml").read_text()
    assert "- --controllers={{.Values.custom.controller_enabled_controllers}}" in template
    # Colocation's own agent stays off too (the chart's default).
    values = (REPO_ROOT / VOLCANO_CHART.directory / "values.yaml").read_text()
    assert "colocation_enable: false" in values
