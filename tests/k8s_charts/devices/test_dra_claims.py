"""A run's ResourceClaimTemplate on a ``devices: dra`` group asks the Neuron DRA driver for the run's
Logical NeuronCore size: the run's ``logical_core_size``, else the instance catalog's default for the
type (cluster_facts/instance_catalog.py, the one home of LNC sizes); none on Trainium1, which takes
one size only and whose driver refuses the setting."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml

from cluster_facts.dra import (
    CLAIM_DEVICE_LIMIT,
    POD_DEVICE_CLAIM,
    POD_EFA_CLAIM,
    node_devices,
    whole_node_claim_devices,
)
from cluster_facts.instance_catalog import CATALOG
from cluster_plan.kubernetes_values import review_plan
from config import ConfigError, parse_config
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


def _trn2u_dra_config() -> dict[str, Any]:
    """The default configuration with its node group a ``devices: dra`` trn2u.48xlarge group."""
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    [group] = data["trainium"]["node_groups"]
    dra = {
        **group,
        "instance_type": "trn2u.48xlarge",
        "devices": "dra",
        "min_size": 1,
        "desired_size": 1,
        "ami_release": "1.36.5-20261103",
        "ami_facts": {"neuron_driver": "2.31.7.0", "containerd": "2.2.5"},
    }
    return with_change(data, "trainium.node_groups", [dra])


# A two-node run on that group.
_TRN2U_RUN = {
    "name": "us",
    "preset": "native-fsdp2",
    "nodes": 2,
    "image": "111122223333.dkr.ecr.us-west-2.amazonaws.com/trainium/training:torchneuron-sdk2.33.0-1",
}


def _trn2u_plan_claims() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A run on a ``devices: dra`` trn2u group: its pod spec and its templates, by claim name."""
    data = _trn2u_dra_config()
    plan = review_plan(parse_config(with_change(data, "runs", [_TRN2U_RUN])))
    [step] = [step for step in plan.manifest_sets() if step.name == "run-us"]
    [job] = [m for m in step.manifests if m["kind"] == "Job"]
    pod = job["spec"]["tasks"][0]["template"]["spec"]
    by_template = {m["metadata"]["name"]: m for m in step.manifests if m["kind"] == "ResourceClaimTemplate"}
    templates = {c["name"]: by_template.pop(c["resourceClaimTemplateName"]) for c in pod["resourceClaims"]}
    assert by_template == {}, "a template no pod claim names"
    return pod, templates


def test_a_trn2u_pod_takes_its_node_in_two_claims_each_within_the_limit() -> None:
    """trn2u: 16 Neuron devices, 16 EFA interfaces and its UltraServer's node device are 33, over the
    32 devices Kubernetes allows one ResourceClaim (the tier shows the real scheduler refusing it):
    synth takes ``devices: dra`` there, and the run's pods claim the node in two claims, the Neuron
    devices with their LNC and the ``neuron_node`` with its mode in one, the EFA interfaces in the
    other; the container names both."""
    pod, templates = _trn2u_plan_claims()
    assert list(templates) == [POD_DEVICE_CLAIM, POD_EFA_CLAIM]
    assert [c["resources"]["claims"] for c in pod["containers"]] == [
        [{"name": POD_DEVICE_CLAIM}, {"name": POD_EFA_CLAIM}]
    ]
    counts = {
        name: {r["name"]: r["exactly"]["count"] for r in t["spec"]["spec"]["devices"]["requests"]}
        for name, t in templates.items()
    }
    assert counts == {POD_DEVICE_CLAIM: {"neurons": 16, "ultraserver": 1}, POD_EFA_CLAIM: {"efa": 16}}
    kinds = {
        c["opaque"]["parameters"]["kind"]: c["requests"]
        for c in templates[POD_DEVICE_CLAIM]["spec"]["spec"]["devices"]["config"]
    }
    assert kinds == {"NeuronConfig": ["neurons"], "UltraServerConfig": ["ultraserver"]}
    assert "config" not in templates[POD_EFA_CLAIM]["spec"]["spec"]["devices"]


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_every_claim_of_every_catalog_type_is_within_the_limit_and_holds_the_whole_node(name: str) -> None:
    """Each claim of a pod's node within ``CLAIM_DEVICE_LIMIT``; together, every device of the node,
    each once; one claim where the node fits one (trn1, trn1n, trn2: unchanged, so a deployed run's
    template keeps its name)."""
    instance = CATALOG[name]
    devices = node_devices(instance)
    per_claim = devices.claim_devices()
    assert all(count <= CLAIM_DEVICE_LIMIT for count in per_claim.values()), per_claim
    assert sum(per_claim.values()) == whole_node_claim_devices(instance)
    fits = whole_node_claim_devices(instance) <= CLAIM_DEVICE_LIMIT
    assert list(per_claim) == ([POD_DEVICE_CLAIM] if fits else [POD_DEVICE_CLAIM, POD_EFA_CLAIM])
    if fits:
        assert devices.claims() == {POD_DEVICE_CLAIM: devices.one_claim_spec()}


def test_the_per_claim_device_counts() -> None:
    assert {name: node_devices(CATALOG[name]).claim_devices() for name in sorted(CATALOG)} == {
        "trn1.32xlarge": {POD_DEVICE_CLAIM: 24},
        "trn1n.32xlarge": {POD_DEVICE_CLAIM: 32},
        "trn2.48xlarge": {POD_DEVICE_CLAIM: 32},
        "trn2u.48xlarge": {POD_DEVICE_CLAIM: 17, POD_EFA_CLAIM: 16},
    }


def test_a_claim_over_the_limit_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Were a node type's claim still over the limit (none in the catalog is), synth refuses the group
    in one line: a stand-in type with 40 EFA interfaces."""
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    [group] = data["trainium"]["node_groups"]
    wide = dataclasses.replace(CATALOG["trn1.32xlarge"], efa_network_cards=40)
    monkeypatch.setitem(CATALOG, "trn1.32xlarge", wide)
    dra = {**group, "instance_type": "trn1.32xlarge", "devices": "dra", "min_size": 1, "desired_size": 1}
    with pytest.raises(
        ConfigError,
        match=r"trainium\.node_groups\[0\]\.devices: dra claims a whole trn1\.32xlarge with claim 'efa' of 40 devices, over the 32",
    ):
        parse_config(with_change(data, "trainium.node_groups", [dra]))


def test_a_trn2u_dra_node_counts_17_devices_against_the_teams_quota() -> None:
    """The ResourceQuota counts the Neuron DeviceClass's devices, and a trn2u pod's claims take 17 of
    them (its 16 Neuron devices and the ``neuron_node``): a quota of 32 holds one node, not a
    2-node run, and synth says so before anything is built."""
    data = _trn2u_dra_config()
    data = with_change(data, "teams", [{"name": "training", "quota": {"neuron_devices": 32}}])
    with pytest.raises(
        ConfigError, match=r"quota\.neuron_devices: 32 chips do not hold .*allowed: 34 or more"
    ):
        parse_config(with_change(data, "runs", [_TRN2U_RUN]))
    parse_config(with_change(data, "runs", [{**_TRN2U_RUN, "nodes": 1}]))
