"""Rules every platform chart keeps: valid objects, pinned images, requests, stable names, scope."""

from __future__ import annotations

import re
from functools import cache

import pytest
import yaml

from cluster_facts.images import is_pinned_image
from cluster_facts.kubernetes_plan import ManifestSet
from cluster_plan.kubernetes_values import review_plan
from config import StackConfig, load_config, parse_config
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG
from tests.k8s_charts.manifests import Manifest, containers
from tests.k8s_charts.resources import OWNS_ITS_NODE, holds_devices, missing_resources
from tests.k8s_validation import assert_valid
from tests.plans import shared_review_plan
from tests.yaml_edits import with_change

CONFIGS = {"default": DEFAULT_CONFIG, "example": EXAMPLE_CONFIG, "dra": DEFAULT_CONFIG}


def _dra_config() -> StackConfig:
    """The default with its group on ``devices: dra`` and a trn2.48xlarge DRA group beside it, a run
    on each: the DRA drivers, their fences, the claim templates and the runs' claims."""
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    [group] = data["trainium"]["node_groups"]
    trn2 = {**group, "name": "trn2-dra", "instance_type": "trn2.48xlarge", "devices": "dra"}
    dra = {"devices": "dra", "min_size": 1, "desired_size": 1}
    data = with_change(data, "trainium.node_groups", [{**group, **dra}, {**trn2, **dra}])
    run = {"name": "trn2-run", "preset": "bert-large", "node_group": "trn2-dra", "nodes": 1}
    return parse_config(with_change(data, "runs", [*data["runs"], run]))


@cache
def plan_steps(config: str) -> dict[str, ManifestSet]:
    """Every manifest set the stack would apply (or render) for one shipped configuration (and one on
    DRA, which none ships)."""
    loaded = _dra_config() if config == "dra" else load_config(CONFIGS[config])
    return {step.name: step for step in shared_review_plan(loaded).manifest_sets()}


CHARTS = [(config, name) for config in sorted(CONFIGS) for name in plan_steps(config)]
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "DeviceClass",
    "FlowSchema",
    "Namespace",
    "PersistentVolume",
    "PriorityClass",
    "PriorityLevelConfiguration",
    "Queue",
    "StorageClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}


@pytest.fixture(scope="module", params=CHARTS, ids=[f"{config}-{name}" for config, name in CHARTS])
def manifests(request: pytest.FixtureRequest) -> list[Manifest]:
    config, name = request.param
    return [dict(manifest) for manifest in plan_steps(config)[name].manifests]


def test_every_object_is_valid(manifests: list[Manifest]) -> None:
    assert_valid(manifests)


def test_no_image_is_unpinned(manifests: list[Manifest]) -> None:
    for container in (c for manifest in manifests for c in containers(manifest)):
        assert is_pinned_image(container["image"]), container["image"]


def test_every_container_has_requests_and_limits_for_cpu_and_memory(manifests: list[Manifest]) -> None:
    """Requests place a pod and protect it; limits keep one process from taking its node's CPU or
    memory from the rest. The one exception, a pod that owns its node: tests/k8s_charts/resources.py."""
    for manifest in manifests:
        for container in containers(manifest):
            assert missing_resources(container) == [], (
                manifest["kind"],
                manifest["metadata"]["name"],
                container["name"],
            )


def test_only_pods_that_own_their_node_leave_out_limits() -> None:
    """The exception is taken by the Volcano Jobs' containers that hold Neuron devices (the runs'
    trainers, the fabric check's workers) and no other; they still request cpu and memory."""
    exempt = {
        (manifest["kind"], container["name"])
        for config in sorted(CONFIGS)
        for step in plan_steps(config).values()
        for manifest in step.manifests
        for container in containers(dict(manifest))
        if holds_devices(container)
    }
    assert exempt == {("Job", "trainer"), ("Job", "worker")}, OWNS_ITS_NODE


def test_namespaced_objects_name_their_namespace_and_cluster_objects_do_not(
    manifests: list[Manifest],
) -> None:
    for manifest in manifests:
        assert ("namespace" in manifest["metadata"]) == (manifest["kind"] not in CLUSTER_SCOPED), manifest


def test_no_storage_class_is_ever_created(manifests: list[Manifest]) -> None:
    assert "StorageClass" not in {manifest["kind"] for manifest in manifests}


EXPECTED_NAMES = {
    "neuron-device-plugin-admission": [
        ("ValidatingAdmissionPolicy", None, "neuron-device-plugin-own-node"),
        ("ValidatingAdmissionPolicyBinding", None, "neuron-device-plugin-own-node"),
    ],
    "neuron-device-plugin": [
        ("ClusterRole", None, "neuron-device-plugin"),
        ("ClusterRoleBinding", None, "neuron-device-plugin"),
        ("DaemonSet", "kube-system", "neuron-device-plugin"),
        ("NetworkPolicy", "kube-system", "neuron-device-plugin"),
        ("ServiceAccount", "kube-system", "neuron-device-plugin"),
    ],
    "efa-device-plugin": [("DaemonSet", "kube-system", "aws-efa-k8s-device-plugin")],
    "node-check-admission": [
        ("ValidatingAdmissionPolicy", None, "node-check"),
        ("ValidatingAdmissionPolicyBinding", None, "node-check"),
    ],
    "node-check": [
        ("ClusterRole", None, "node-check"),
        ("ClusterRoleBinding", None, "node-check"),
        ("ConfigMap", "kube-system", "node-check"),
        ("ConfigMap", "kube-system", "node-check-replacements-trn1-32xl"),
        ("DaemonSet", "kube-system", "node-check"),
        ("Deployment", "kube-system", "node-check-fence"),
        ("NetworkPolicy", "kube-system", "node-check"),
        ("NetworkPolicy", "kube-system", "node-check-fence"),
        ("Role", "kube-system", "node-check"),
        ("RoleBinding", "kube-system", "node-check"),
        ("ServiceAccount", "kube-system", "node-check"),
    ],
    "volcano-namespace": [
        ("LimitRange", "volcano-system", "platform-defaults"),
        ("Namespace", None, "volcano-system"),
    ],
    "volcano-network": [
        ("NetworkPolicy", "volcano-system", "default-deny"),
        ("NetworkPolicy", "volcano-system", "volcano-admission"),
        ("NetworkPolicy", "volcano-system", "volcano-admission-init"),
        ("NetworkPolicy", "volcano-system", "volcano-controllers"),
        ("NetworkPolicy", "volcano-system", "volcano-scheduler"),
    ],
    "cluster-autoscaler-network": [("NetworkPolicy", "kube-system", "cluster-autoscaler")],
    "volcano-job-pod-admission": [
        ("ValidatingAdmissionPolicy", None, "trainium-volcano-job-pods"),
        ("ValidatingAdmissionPolicyBinding", None, "trainium-volcano-job-pods"),
    ],
    "volcano-controller-admission": [
        ("ValidatingAdmissionPolicy", None, "trainium-volcano-controller-writes"),
        ("ValidatingAdmissionPolicyBinding", None, "trainium-volcano-controller-writes"),
    ],
    "api-fairness": [
        ("FlowSchema", None, "trainium-teams"),
        ("FlowSchema", None, "trainium-volcano-controllers"),
        ("PriorityLevelConfiguration", None, "trainium-teams"),
        ("PriorityLevelConfiguration", None, "trainium-volcano"),
    ],
    "volcano-queue": [("Queue", None, "test")],
    "etcd": [
        ("NetworkPolicy", "training", "etcd-server"),
        ("PodDisruptionBudget", "training", "etcd-server"),
        ("Service", "training", "etcd-server"),
        ("Service", "training", "etcd-server-peers"),
        ("StatefulSet", "training", "etcd-server"),
    ],
    # Named after the file system's generation, the data set's and the run's identity: the names
    # change exactly when the objects cannot be updated in place.
    "fsx-storage": [
        ("PersistentVolume", None, r"fsx-[0-9a-f]{6}"),
        ("PersistentVolume", None, r"fsx-[0-9a-f]{6}-training"),
        ("PersistentVolume", None, r"fsx-[0-9a-f]{6}-training-datasets"),
        ("PersistentVolumeClaim", "training", r"fsx-[0-9a-f]{6}"),
        ("PersistentVolumeClaim", "training", r"fsx-[0-9a-f]{6}-datasets"),
        ("PersistentVolumeClaim", "trainium-system", r"fsx-[0-9a-f]{6}"),
    ],
    "platform-namespace": [
        ("LimitRange", "trainium-system", "platform-defaults"),
        ("Namespace", None, "trainium-system"),
        ("NetworkPolicy", "trainium-system", "default-deny"),
    ],
    "priority-classes": [
        ("PriorityClass", None, "trainium-platform"),
        ("PriorityClass", None, "trainium-training"),
    ],
    "team-admission": [
        ("ValidatingAdmissionPolicy", None, "trainium-team-pods"),
        ("ValidatingAdmissionPolicy", None, "trainium-team-volcano-jobs"),
        ("ValidatingAdmissionPolicyBinding", None, "trainium-team-pods"),
        ("ValidatingAdmissionPolicyBinding", None, "trainium-team-volcano-jobs"),
    ],
    "training-namespace": [
        # run_worker.sh, named by its content (k8s_charts/runs/worker_script.py).
        ("ConfigMap", "training", r"trainium-run-worker-[0-9a-f]{10}"),
        ("ConfigMap", "training", "trainium-team"),
        ("LimitRange", "training", "team-defaults"),
        ("Namespace", None, "training"),
        ("NetworkPolicy", "training", "default-deny"),
        ("NetworkPolicy", "training", "volcano-job-pods"),
        ("ResourceQuota", "training", "no-critical-priority"),
        ("ResourceQuota", "training", "no-cross-namespace-affinity"),
        ("ResourceQuota", "training", "team-objects"),
        ("ResourceQuota", "training", "team-quota"),
        ("Role", "training", "trainium-team-member"),
        ("RoleBinding", "training", "trainium-team-member"),
    ],
    "fsx-layout": [
        ("Job", "trainium-system", r"fsx-layout-[0-9a-f]{8}"),
        ("NetworkPolicy", "trainium-system", r"fsx-layout-[0-9a-f]{8}"),
    ],
    "data-bert-wikicorpus-128": [
        ("Job", "trainium-system", r"stage-bert-wikicorpus-128-[0-9a-f]{8}"),
        ("NetworkPolicy", "trainium-system", r"stage-bert-wikicorpus-128-[0-9a-f]{8}"),
        ("NetworkPolicy", "trainium-system", r"stage-bert-wikicorpus-128-[0-9a-f]{8}-egress"),
    ],
    "run-bert-large": [("Job", "training", r"bert-large-[0-9a-f]{8}")],
    "tensorboard": [
        ("Deployment", "trainium-system", "tensorboard"),
        ("NetworkPolicy", "trainium-system", "tensorboard"),
        ("Service", "trainium-system", "tensorboard"),
    ],
    # The gang watchdog's leash (applied first), then the watchdog: a Role in each team namespace.
    "gang-watchdog-admission": [
        ("ValidatingAdmissionPolicy", None, "gang-watchdog"),
        ("ValidatingAdmissionPolicy", None, "gang-watchdog-runs"),
        ("ValidatingAdmissionPolicyBinding", None, "gang-watchdog"),
        ("ValidatingAdmissionPolicyBinding", None, "gang-watchdog-runs"),
    ],
    "gang-watchdog": [
        ("ClusterRole", None, "gang-watchdog"),
        ("ClusterRoleBinding", None, "gang-watchdog"),
        ("ConfigMap", "trainium-system", "gang-watchdog"),
        ("Deployment", "trainium-system", "gang-watchdog"),
        ("NetworkPolicy", "trainium-system", "gang-watchdog"),
        ("Role", "training", "gang-watchdog"),
        ("RoleBinding", "training", "gang-watchdog"),
        ("ServiceAccount", "trainium-system", "gang-watchdog"),
    ],
    # The fabric check's access (applied) and its job (rendered for kubectl, a fixed name: a new run
    # deletes the last one first).
    "fabric-checks": [
        ("ClusterRole", None, "fabric-check-trn1-32xl"),
        ("ClusterRoleBinding", None, "fabric-check-trn1-32xl"),
        ("NetworkPolicy", "trainium-system", "fabric-check-trn1-32xl"),
        ("NetworkPolicy", "trainium-system", "fabric-check-trn1-32xl-launcher"),
        ("Role", "trainium-system", "fabric-check-trn1-32xl"),
        ("RoleBinding", "trainium-system", "fabric-check-trn1-32xl"),
        ("ServiceAccount", "trainium-system", "fabric-check-trn1-32xl"),
        ("ValidatingAdmissionPolicy", None, "fabric-check-trn1-32xl"),
        ("ValidatingAdmissionPolicyBinding", None, "fabric-check-trn1-32xl"),
    ],
    "fabric-check-trn1-32xl": [("Job", "trainium-system", "fabric-check-trn1-32xl")],
}


@cache
def second_rendering() -> dict[str, ManifestSet]:
    """The default plan rendered again, from scratch: what the next synth would produce."""
    return {step.name: step for step in review_plan(load_config(DEFAULT_CONFIG)).manifest_sets()}


@pytest.mark.parametrize("chart", sorted(EXPECTED_NAMES))
def test_object_names_are_explicit_and_deterministic(chart: str) -> None:
    def names(steps: dict[str, ManifestSet]) -> list[tuple[str, str | None, str]]:
        return sorted(
            (m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]) for m in steps[chart].manifests
        )

    # The names the chart chose (no cdk8s hash suffixes), the same on every synth.
    first, second = names(plan_steps("default")), names(second_rendering())
    first.sort(key=lambda item: (item[0], item[1] or "", item[2]))
    assert first == second
    assert len(first) == len(EXPECTED_NAMES[chart])
    for (kind, namespace, name), (want_kind, want_namespace, pattern) in zip(
        first, EXPECTED_NAMES[chart], strict=True
    ):
        assert (kind, namespace) == (want_kind, want_namespace)
        assert re.fullmatch(pattern, name), name


def test_every_manifest_set_of_the_default_plan_is_named_here() -> None:
    assert set(plan_steps("default")) == set(EXPECTED_NAMES)
