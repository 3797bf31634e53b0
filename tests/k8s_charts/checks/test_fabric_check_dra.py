"""On a ``devices: dra`` group the fabric check's workers take their node by claim, as a training pod
does: no device plugin advertises ``aws.amazon.com/neuron`` or ``vpc.amazonaws.com/efa`` there, so a
worker limited by them would never schedule. The claims name the group's templates, which the access
step puts in the check's own namespace (a pod names a template of its namespace only)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from cluster_facts.dra import POD_DEVICE_CLAIM, POD_EFA_CLAIM, node_claim_template, node_devices
from cluster_facts.instance_catalog import CATALOG
from cluster_facts.kubernetes_names import EFA_RESOURCE, NEURON_RESOURCE, PLATFORM_NAMESPACE
from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from cluster_plan.kubernetes_values import review_plan
from config import parse_config
from k8s_charts.checks.fabric_check import ACCESS_STEP, job_name
from tests.conftest import DEFAULT_CONFIG
from tests.yaml_edits import with_change

_UPGRADE = {
    "ami_release": "1.36.5-20261103",
    "ami_facts": {"neuron_driver": "2.31.7.0", "containerd": "2.2.5"},
}


def _plan(instance_type: str, devices: str) -> KubernetesLayerPlan:
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    [group] = data["trainium"]["node_groups"]
    changed = {**group, "instance_type": instance_type, "devices": devices, "max_size": 2}
    if devices == "dra":
        changed |= {"min_size": 1, "desired_size": 1}
    if instance_type == "trn2u.48xlarge":
        changed |= _UPGRADE
    data = with_change(data, "runs", [])
    return review_plan(parse_config(with_change(data, "trainium.node_groups", [changed])))


def _worker(plan: KubernetesLayerPlan, group: str) -> dict[str, Any]:
    [step] = [step for step in plan.manifest_sets() if step.name == job_name(group)]
    [job] = step.manifests
    [task] = [task for task in job["spec"]["tasks"] if task["name"] == "worker"]
    pod: dict[str, Any] = task["template"]["spec"]
    return pod


def _templates(plan: KubernetesLayerPlan) -> dict[str, dict[str, Any]]:
    [step] = [step for step in plan.manifest_sets() if step.name == ACCESS_STEP]
    return {
        m["metadata"]["name"]: m
        for m in step.manifests
        if m["kind"] == "ResourceClaimTemplate" and m["metadata"]["namespace"] == PLATFORM_NAMESPACE
    }


@pytest.mark.parametrize("instance_type", ["trn1.32xlarge", "trn2.48xlarge", "trn2u.48xlarge"])
def test_a_dra_groups_workers_claim_their_node_from_templates_in_their_namespace(instance_type: str) -> None:
    plan = _plan(instance_type, "dra")
    group = yaml.safe_load(DEFAULT_CONFIG.read_text())["trainium"]["node_groups"][0]["name"]
    pod = _worker(plan, group)
    [container] = pod["containers"]
    resources = container["resources"]
    assert resources["limits"] == resources["requests"], "cpu and memory only, limited as requested"
    expected = node_devices(CATALOG[instance_type]).claims()
    # trn2u: its 33 devices in two claims, as a training pod's.
    assert list(expected) == (
        [POD_DEVICE_CLAIM, POD_EFA_CLAIM] if instance_type == "trn2u.48xlarge" else [POD_DEVICE_CLAIM]
    )
    assert resources["claims"] == [{"name": claim} for claim in expected]
    assert pod["resourceClaims"] == [
        {"name": claim, "resourceClaimTemplateName": node_claim_template(group, claim)} for claim in expected
    ]
    templates = _templates(plan)
    # Each claim names a template that exists where the pod runs, asking what a training pod asks.
    assert {ref["resourceClaimTemplateName"] for ref in pod["resourceClaims"]} == set(templates)
    for claim in expected:
        assert templates[node_claim_template(group, claim)]["spec"]["spec"] == expected[claim]


def test_a_device_plugin_groups_check_keeps_its_limits_and_needs_no_template() -> None:
    plan = _plan("trn2.48xlarge", "device-plugin")
    group = yaml.safe_load(DEFAULT_CONFIG.read_text())["trainium"]["node_groups"][0]["name"]
    pod = _worker(plan, group)
    [container] = pod["containers"]
    limits = container["resources"]["limits"]
    assert {name: limits[name] for name in (NEURON_RESOURCE, EFA_RESOURCE)} == {
        NEURON_RESOURCE: "16",
        EFA_RESOURCE: "16",
    }
    assert "claims" not in container["resources"] and "resourceClaims" not in pod
    assert _templates(plan) == {}
