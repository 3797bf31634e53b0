"""The EKS control plane tier in the template, and the size warning at synth (issue 36, item 4)."""

from __future__ import annotations

from typing import Any

import yaml
from aws_cdk.assertions import Annotations, Match

from config import parse_config
from tests.conftest import DEFAULT_CONFIG, Synthesized, synthesize
from tests.yaml_edits import with_change


def _tier(synthesized: Synthesized) -> Any:
    _, cluster = synthesized.only("AWS::EKS::Cluster")
    return cluster["Properties"].get("ControlPlaneScalingConfig")


def _warnings(synthesized: Synthesized) -> list[str]:
    return [
        str(entry.entry.data)
        for entry in Annotations.from_stack(synthesized.stack).find_warning("*", Match.any_value())
    ]


def test_the_default_cluster_leaves_the_tier_to_eks(default_stack: Synthesized) -> None:
    # Not written for `standard`: a deployed stack's template, and so its cluster, does not change.
    assert _tier(default_stack) is None
    assert not [w for w in _warnings(default_stack) if w.startswith("cluster.control_plane_tier")]


def test_a_provisioned_tier_is_rendered_and_a_large_standard_cluster_is_warned_at_synth() -> None:
    data: dict[str, Any] = yaml.safe_load(DEFAULT_CONFIG.read_text())
    large = with_change(data, "trainium.node_groups.0.max_size", 512)
    standard = synthesize(parse_config(large))
    assert _tier(standard) is None
    [warning] = [w for w in _warnings(standard) if w.startswith("cluster.control_plane_tier")]
    assert "add up to 512 nodes" in warning and "tier-xl: 1700 API seats" in warning

    provisioned = synthesize(parse_config(with_change(large, "cluster.control_plane_tier", "tier-xl")))
    assert _tier(provisioned) == {"Tier": "tier-xl"}
    assert not [w for w in _warnings(provisioned) if w.startswith("cluster.control_plane_tier")]
