"""The cluster's size from the configuration, and the synth warnings where that size needs a setting
(issue 36, item 4): the control plane tier, the autoscaler's tested size, Kubernetes' node limit;
the tier key refused in one line; the autoscaler's CPU request a core from 100 Trainium nodes;
Volcano's scheduler quieter from 256."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
import yaml

from cluster_facts.cluster_scale import (
    AUTOSCALER_FULL_CORE_NODES,
    AUTOSCALER_TESTED_NODES,
    CONTROL_PLANE_TIERS,
    EKS_PLAN_SCALE_NODES,
    KUBERNETES_MAX_NODES,
    TIER_CAPACITY,
    VOLCANO_LOG_LEVEL,
    VOLCANO_QUIET_LOG_LEVEL,
    VOLCANO_QUIET_LOG_NODES,
)
from cluster_facts.vendored_charts import VOLCANO_CHART
from cluster_plan.kubernetes_values import review_plan
from config import ConfigError, StackConfig, load_config, parse_config
from config.notices import configuration_notices
from config.scale import cluster_size, scale_notices
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG, REPO_ROOT
from tests.yaml_edits import with_change

TODAY = date(2026, 11, 28)


def _sized(trainium_nodes: int, tier: str | None = None) -> StackConfig:
    """The default configuration with its one Trainium group at ``trainium_nodes`` (system nodes: 4)."""
    data: dict[str, Any] = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data = with_change(data, "trainium.node_groups.0.max_size", trainium_nodes)
    if tier is not None:
        data = with_change(data, "cluster.control_plane_tier", tier)
    return parse_config(data)


def test_the_size_is_every_group_at_max_size_and_the_largest_run() -> None:
    config = load_config(EXAMPLE_CONFIG)
    size = cluster_size(config)
    assert size.trainium_nodes == sum(group.max_size for group in config.trainium.node_groups) == 12
    assert size.nodes == 12 + config.system_nodes.max_size
    assert size.largest_gang == max(run.nodes for run in config.runs) == 8


def test_the_tier_defaults_to_standard_and_the_shipped_files_hear_nothing_of_their_size() -> None:
    for path in (DEFAULT_CONFIG, EXAMPLE_CONFIG):
        config = load_config(path)
        assert config.cluster.control_plane_tier == "standard"
        assert scale_notices(config) == []


def test_a_tier_eks_does_not_have_is_refused_in_one_line_naming_the_key() -> None:
    data = with_change(yaml.safe_load(DEFAULT_CONFIG.read_text()), "cluster.control_plane_tier", "xl")
    with pytest.raises(ConfigError) as raised:
        parse_config(data, source="env.yaml")
    assert raised.value.lines() == [
        (
            "env.yaml: cluster.control_plane_tier: Input should be 'standard', 'tier-xl', 'tier-2xl', "
            "'tier-4xl' or 'tier-8xl'"
        )
    ]
    assert CONTROL_PLANE_TIERS == ("standard", "tier-xl", "tier-2xl", "tier-4xl", "tier-8xl")


def test_a_standard_control_plane_past_eks_planning_size_is_warned_naming_the_key() -> None:
    assert scale_notices(_sized(EKS_PLAN_SCALE_NODES)) == []
    [(key, message)] = configuration_notices(_sized(EKS_PLAN_SCALE_NODES + 1), TODAY)
    assert key == "cluster.control_plane_tier"
    assert message.startswith(
        "standard, and the Trainium groups' max_size add up to 301 nodes, the largest run 2 nodes: "
        "EKS asks for a plan past 300 nodes"
    )
    assert f"tier-xl: {TIER_CAPACITY['tier-xl'][0]} API seats" in message


@pytest.mark.parametrize("tier", ["tier-xl", "tier-2xl", "tier-4xl", "tier-8xl"])
def test_a_provisioned_tier_silences_the_control_plane_warning(tier: str) -> None:
    assert scale_notices(_sized(EKS_PLAN_SCALE_NODES + 1, tier)) == []


def test_past_the_autoscalers_tested_size_the_synth_says_so() -> None:
    assert scale_notices(_sized(AUTOSCALER_TESTED_NODES, "tier-4xl")) == []
    [(key, message)] = scale_notices(_sized(AUTOSCALER_TESTED_NODES + 1, "tier-4xl"))
    assert key == "trainium.node_groups"
    assert "not performance-tested above 1000 nodes" in message


def test_past_kubernetes_node_limit_with_the_system_nodes_the_synth_says_so() -> None:
    # 4,996 Trainium nodes and 4 system nodes are 5,000: at the limit, not past it.
    at_limit = _sized(KUBERNETES_MAX_NODES - 4, "tier-4xl")
    assert [key for key, _ in scale_notices(at_limit)] == ["trainium.node_groups"]
    notices = scale_notices(_sized(KUBERNETES_MAX_NODES - 3, "tier-4xl"))
    assert [key for key, _ in notices] == ["trainium.node_groups", "trainium.node_groups"]
    assert "may hold 5001 nodes: Kubernetes is designed for at most 5000" in notices[1][1]


def _autoscaler(config: StackConfig) -> dict[str, Any]:
    values: dict[str, Any] = review_plan(config).step("cluster-autoscaler").values  # type: ignore[assignment]
    return values


def test_the_autoscaler_requests_a_full_core_from_a_hundred_trainium_nodes() -> None:
    small = _autoscaler(_sized(AUTOSCALER_FULL_CORE_NODES - 1))["resources"]
    assert small["requests"]["cpu"] == "100m"
    big = _autoscaler(_sized(AUTOSCALER_FULL_CORE_NODES))["resources"]
    assert big["requests"] == {"cpu": "1", "memory": "600Mi"}
    assert big["limits"] == small["limits"] == {"cpu": "1", "memory": "600Mi"}


def test_the_autoscaler_has_no_node_total_below_the_groups() -> None:
    """The groups' max_size is the autoscaler's only limit: no --max-nodes-total caps it below them,
    and the unready count that would halt it is their total (tests/stacks/test_unready_limits.py)."""
    arguments = _autoscaler(_sized(2048, "tier-4xl"))["extraArgs"]
    assert "max-nodes-total" not in arguments
    assert arguments["ok-total-unready-count"] == 2048


def _volcano_log_level(config: StackConfig) -> int:
    values: dict[str, Any] = review_plan(config).step("volcano").values  # type: ignore[assignment]
    return int(values["custom"]["scheduler_log_level"])


def test_volcanos_scheduler_logs_at_the_charts_level_below_256_trainium_nodes_and_quieter_from_there() -> (
    None
):
    """At the chart's 3 it writes a line per task and node that fails a predicate: 151 MB in 12
    minutes at 2,048 simulated nodes (cluster_facts/cluster_scale.py). The chart passes the value to
    the scheduler's ``-v`` (its template, read here), so the shipped files keep the chart's level."""
    assert (VOLCANO_LOG_LEVEL, VOLCANO_QUIET_LOG_LEVEL) == (3, 2)
    assert _volcano_log_level(load_config(DEFAULT_CONFIG)) == VOLCANO_LOG_LEVEL
    assert _volcano_log_level(_sized(VOLCANO_QUIET_LOG_NODES - 1)) == VOLCANO_LOG_LEVEL
    assert _volcano_log_level(_sized(VOLCANO_QUIET_LOG_NODES)) == VOLCANO_QUIET_LOG_LEVEL
    assert _volcano_log_level(_sized(2048, "tier-4xl")) == VOLCANO_QUIET_LOG_LEVEL
    template = (REPO_ROOT / VOLCANO_CHART.directory / "templates" / "scheduler.yaml").read_text()
    assert "- -v={{.Values.custom.scheduler_log_level}}" in template
