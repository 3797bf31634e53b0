"""Pod Security: every namespace the stack creates is labelled, and every rendered pod passes its level."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

import pytest

from cluster_facts.kubernetes_names import PLATFORM_NAMESPACE
from cluster_facts.kubernetes_plan import HelmRelease, KubernetesLayerPlan
from config import load_config
from k8s_charts.addons.pod_security import POD_SECURITY_VERSION
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG
from tests.plans import shared_review_plan
from tests.pod_security import violations
from tests.torchx_dryrun import CASES, dryrun_job, torchx_available

CONFIGS = {"default": DEFAULT_CONFIG, "example": EXAMPLE_CONFIG}
# Namespaces the stack deploys into but does not create: EKS owns kube-system (the device plugins
# there are privileged by necessity, and EKS's own add-ons run there). `default` holds nothing of
# the stack; labelling it would need the stack to own it, and deleting a manifest set that holds it
# would fail (the API server refuses to delete `default`).
NOT_OWNED = {"kube-system"}
_PREFIX = "pod-security.kubernetes.io"


@cache
def plan(config: str) -> KubernetesLayerPlan:
    return shared_review_plan(load_config(CONFIGS[config]))


def objects(config: str) -> list[Mapping[str, Any]]:
    return [manifest for step in plan(config).manifest_sets() for manifest in step.manifests]


def namespaces(config: str) -> dict[str, dict[str, str]]:
    return {
        m["metadata"]["name"]: dict(m["metadata"].get("labels") or {})
        for m in objects(config)
        if m["kind"] == "Namespace"
    }


def pod_templates(manifest: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    spec = manifest.get("spec", {})
    if "template" in spec and "spec" in spec["template"]:
        yield spec["template"]["spec"]
    for task in spec.get("tasks", []):  # a Volcano Job
        yield task["template"]["spec"]


# --- The checker on hand-written pods ---

RESTRICTED_POD = {
    "securityContext": {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    },
    "containers": [
        {
            "name": "c",
            "image": "i",
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }
    ],
    "volumes": [{"name": "d", "emptyDir": {}}, {"name": "p", "persistentVolumeClaim": {"claimName": "x"}}],
}


def edited(path: list[str | int], value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(RESTRICTED_POD)
    target: Any = spec
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return spec


def test_the_checker_passes_a_restricted_pod() -> None:
    assert violations(RESTRICTED_POD, "restricted") == []


@pytest.mark.parametrize(
    "spec, baseline, restricted",
    [
        (edited(["hostNetwork"], True), ["host namespaces"], ["host namespaces"]),
        (edited(["containers", 0, "securityContext", "privileged"], True), ["privileged"], ["privileged"]),
        (edited(["volumes", 0], {"name": "h", "hostPath": {"path": "/run"}}), ["hostPath volumes"], None),
        (edited(["containers", 0, "securityContext", "capabilities", "add"], ["SYS_ADMIN"]), ["capabilities"], None),
        (edited(["containers", 0, "securityContext", "capabilities", "add"], ["DAC_OVERRIDE"]), [], ["unrestricted capabilities"]),
        (edited(["containers", 0, "securityContext", "capabilities"], {"drop": ["NET_RAW"]}), [], ["unrestricted capabilities"]),
        (edited(["securityContext", "runAsNonRoot"], False), [], ["runAsNonRoot != true"]),
        (edited(["securityContext", "runAsUser"], 0), [], ["runAsUser=0"]),
        (edited(["securityContext", "seccompProfile"], {"type": "Unconfined"}), ["seccompProfile"], None),
        (edited(["containers", 0, "securityContext", "allowPrivilegeEscalation"], True), [], ["allowPrivilegeEscalation != false"]),
        (edited(["containers", 0, "ports"], [{"containerPort": 80, "hostPort": 80}]), ["hostPorts"], None),
    ],
)  # fmt: skip
def test_the_checker_refuses_what_each_level_refuses(
    spec: dict[str, Any], baseline: list[str], restricted: list[str] | None
) -> None:
    assert violations(spec, "baseline") == baseline
    # restricted includes baseline; None: nothing beyond baseline's own refusal to check here.
    got = violations(spec, "restricted")
    assert set(baseline) <= set(got)
    if restricted is not None:
        assert set(restricted) <= set(got)


# --- The stack's namespaces and pods ---


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_every_namespace_the_stack_creates_carries_pinned_pod_security_labels(config: str) -> None:
    found = namespaces(config)
    assert {"trainium-system", "volcano-system", "training"} <= set(found)
    for name, labels in found.items():
        for mode in ("enforce", "audit", "warn"):
            assert labels.get(f"{_PREFIX}/{mode}") in ("baseline", "restricted"), (name, mode)
            assert labels.get(f"{_PREFIX}/{mode}-version") == POD_SECURITY_VERSION, (name, mode)
        assert labels[f"{_PREFIX}/audit"] == labels[f"{_PREFIX}/warn"] == "restricted", name


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_every_namespace_the_stack_deploys_into_is_its_own_or_named_as_not_owned(config: str) -> None:
    used = {m["metadata"]["namespace"] for m in objects(config) if "namespace" in m["metadata"]}
    used |= {step.namespace for step in plan(config) if isinstance(step, HelmRelease)}
    assert used - set(namespaces(config)) <= NOT_OWNED


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_every_rendered_pod_passes_its_namespaces_enforced_level(config: str) -> None:
    levels = {name: labels[f"{_PREFIX}/enforce"] for name, labels in namespaces(config).items()}
    checked = 0
    for manifest in objects(config):
        namespace = manifest["metadata"].get("namespace")
        if namespace not in levels:
            continue
        for spec in pod_templates(manifest):
            assert violations(spec, levels[namespace]) == [], manifest["metadata"]["name"]
            checked += 1
    assert checked >= 4  # etcd, a run, a staging Job, the layout Job, TensorBoard


@pytest.mark.process
def test_the_stacks_runs_and_torchx_pods_pass_restricted() -> None:
    """Every pod a team namespace runs for a team passes restricted: the stack's runs, and what each
    documented TorchX command submits (the component completes TorchX's Job: torchx_trn/trainium.py)."""
    runs = [
        m
        for m in objects("example")
        if m["kind"] == "Job"
        and m["apiVersion"].startswith("batch.volcano.sh")
        and m["metadata"]["namespace"] != PLATFORM_NAMESPACE  # the fabric checks, root by design
    ]
    assert runs
    for run in runs:
        for spec in pod_templates(run):
            assert violations(spec, "restricted") == []
    assert torchx_available() is None, torchx_available()
    for case in CASES:
        for task in dryrun_job(case)["spec"]["tasks"]:
            assert violations(task["template"]["spec"], "restricted") == [], case.name


@pytest.mark.parametrize(
    ("kind", "name"),
    [("StatefulSet", "etcd-server"), ("Deployment", "tensorboard"), ("Deployment", "gang-watchdog")],
)
def test_the_services_pods_pass_restricted(kind: str, name: str) -> None:
    [deployment] = [m for m in objects("default") if m["kind"] == kind and m["metadata"]["name"] == name]
    for spec in pod_templates(deployment):
        assert violations(spec, "restricted") == []
