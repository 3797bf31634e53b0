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


def _dra_data(instance_type: str, run: dict[str, Any]) -> dict[str, Any]:
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    [group] = data["trainium"]["node_groups"]
    dra = {**group, "instance_type": instance_type, "devices": "dra", "min_size": 1, "desired_size": 1}
    dra["max_size"] = max(dra["max_size"], run["nodes"])
    return with_change(with_change(data, "trainium.node_groups", [dra]), "runs", [run])


def _claim_configs(
    instance_type: str, logical_core_size: int | None, *, nodes: int = 1
) -> list[dict[str, Any]]:
    run: dict[str, Any] = {"name": "lnc", "preset": "bert-large", "nodes": nodes}
    if logical_core_size is not None:
        run["logical_core_size"] = logical_core_size
    plan = review_plan(parse_config(_dra_data(instance_type, run)))
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


NATIVE_EXAMPLE = DEFAULT_CONFIG.parent / "native.example.yaml"


def _ultraserver_data(instance_type: str, nodes: int) -> dict[str, Any]:
    """The native example with its native group on ``instance_type`` and ``devices: dra`` (trn2u runs
    only the native stack), and its native run on ``nodes`` nodes."""
    data = yaml.safe_load(NATIVE_EXAMPLE.read_text())
    xla, native = data["trainium"]["node_groups"]
    native = {**native, "instance_type": instance_type, "devices": "dra", "min_size": 1, "max_size": 8}
    [run] = [run for run in data["runs"] if run["node_group"] == native["name"]]
    data = with_change(data, "trainium.node_groups", [xla, native])
    return with_change(data, "runs", [{**run, "nodes": nodes}])


def _ultraserver_mode(instance_type: str, nodes: int) -> int | None:
    plan = review_plan(parse_config(_ultraserver_data(instance_type, nodes)))
    templates = [
        m
        for step in plan.manifest_sets()
        for m in step.manifests
        if m["kind"] == "ResourceClaimTemplate" and step.name.startswith("run-")
    ]
    [template] = templates
    found = [
        c["opaque"]["parameters"]
        for c in template["spec"]["spec"]["devices"].get("config", [])
        if c["opaque"]["parameters"]["kind"] == "UltraServerConfig"
    ]
    return int(found[0]["ultraserverMode"]) if found else None


@pytest.mark.parametrize(("nodes", "mode"), [(1, 1), (2, 2), (4, 4), (8, 4)])
def test_a_run_on_an_ultraserver_group_claims_its_ultraserver_mode(nodes: int, mode: int) -> None:
    """dra.rst "Example 3": the claim's ``UltraServerConfig`` says how many nodes of an UltraServer the
    job spans; a run over several UltraServers spans each whole."""
    assert _ultraserver_mode("trn2u.48xlarge", nodes) == mode
    assert _ultraserver_mode("trn2.48xlarge", nodes) is None


def test_a_run_size_no_ultraserver_takes_is_refused_in_one_line() -> None:
    with pytest.raises(
        ConfigError, match=r"runs\[0\]\.nodes: 3 nodes of trn2u\.48xlarge fit no UltraServer placement"
    ):
        parse_config(_ultraserver_data("trn2u.48xlarge", 3))


def test_a_queue_on_an_ultraserver_group_holds_the_node_device_each_claim_takes() -> None:
    """Each claim of an UltraServer job takes its node's ``neuron_node`` device beside the 16 Neuron
    devices: a queue counting 16 a node would hold back a gang as large as the group."""
    plan = review_plan(parse_config(_ultraserver_data("trn2u.48xlarge", 4)))
    [queue] = [m for step in plan.manifest_sets() for m in step.manifests if m["kind"] == "Queue"]
    capability = queue["spec"]["capability"]
    assert capability["deviceclass/neuron.aws.com"] == str(17 * 8)  # max_size 8, trn2u
