"""A run's ResourceClaimTemplate on a ``devices: dra`` group asks the Neuron DRA driver for the run's
Logical NeuronCore size: the run's ``logical_core_size``, else the instance catalog's default for the
type (cluster_facts/instance_catalog.py, the one home of LNC sizes); none on Trainium1, which takes
one size only and whose driver refuses the setting."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from config import ConfigError, parse_config
from stacks.kubernetes_values import review_plan
from tests.conftest import DEFAULT_CONFIG
from tests.yaml_edits import with_change


def _claim_configs(instance_type: str, logical_core_size: int | None) -> list[dict[str, Any]]:
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    [group] = data["trainium"]["node_groups"]
    dra = {**group, "instance_type": instance_type, "devices": "dra", "min_size": 1, "desired_size": 1}
    data = with_change(data, "trainium.node_groups", [dra])
    run: dict[str, Any] = {"name": "lnc", "preset": "bert-large", "nodes": 1}
    if logical_core_size is not None:
        run["logical_core_size"] = logical_core_size
    plan = review_plan(parse_config(with_change(data, "runs", [run])))
    [step] = [step for step in plan.manifest_sets() if step.name == "run-lnc"]
    [template] = [m for m in step.manifests if m["kind"] == "ResourceClaimTemplate"]
    configs: list[dict[str, Any]] = template["spec"]["spec"]["devices"].get("config", [])
    return configs


def _lnc(configs: list[dict[str, Any]]) -> int | None:
    found = [
        c["opaque"]["parameters"] for c in configs if c["opaque"]["parameters"]["kind"] == "NeuronConfig"
    ]
    return int(found[0]["logicalNeuronCore"]) if found else None


@pytest.mark.parametrize(
    ("instance_type", "logical_core_size", "expected"),
    [("trn2.48xlarge", None, 2), ("trn2.48xlarge", 1, 1), ("trn1.32xlarge", None, None)],
)
def test_a_runs_claim_carries_its_logical_core_size(
    instance_type: str, logical_core_size: int | None, expected: int | None
) -> None:
    assert _lnc(_claim_configs(instance_type, logical_core_size)) == expected


def test_dra_on_a_group_whose_node_is_more_than_one_claim_is_refused_in_one_line() -> None:
    """trn2u: 16 Neuron devices, 16 EFA interfaces and its UltraServer's node device are 33, over the
    32 devices Kubernetes allows one ResourceClaim (the tier shows the real scheduler refusing it)."""
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    [group] = data["trainium"]["node_groups"]
    dra = {**group, "instance_type": "trn2u.48xlarge", "devices": "dra", "min_size": 1, "desired_size": 1}
    with pytest.raises(
        ConfigError,
        match=r"trainium\.node_groups\[0\]\.devices: dra claims a whole trn2u\.48xlarge in one ResourceClaim, 33 devices, over the 32",
    ):
        parse_config(with_change(data, "trainium.node_groups", [dra]))
