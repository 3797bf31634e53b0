"""Rules every platform chart keeps: valid objects, pinned images, requests, stable names, scope."""

from __future__ import annotations

from collections.abc import Callable

import cdk8s
import pytest

from k8s_charts.efa_device_plugin import EfaDevicePluginChart
from k8s_charts.etcd import EtcdChart
from k8s_charts.fsx_storage import FsxStorageChart
from k8s_charts.neuron_device_plugin import NeuronDevicePluginChart
from k8s_charts.training_namespace import TrainingNamespaceChart
from k8s_charts.volcano_queue import VolcanoQueueChart, queue_capability
from tests.k8s.manifests import Manifest, containers, synth
from tests.k8s_validation import assert_valid

CHARTS: dict[str, Callable[[cdk8s.App], cdk8s.Chart]] = {
    "neuron-device-plugin": lambda app: NeuronDevicePluginChart(app, "neuron-device-plugin"),
    "efa-device-plugin": lambda app: EfaDevicePluginChart(app, "efa-device-plugin", region="us-west-2"),
    "volcano-queue": lambda app: VolcanoQueueChart(
        app, "volcano-queue", capability=queue_capability("trn1.32xlarge", 2)
    ),
    "training-namespace": lambda app: TrainingNamespaceChart(app, "training-namespace"),
    "etcd": lambda app: EtcdChart(app, "etcd"),
    "fsx-storage": lambda app: FsxStorageChart(
        app,
        "fsx-storage",
        file_system_id="${Token[TOKEN.123]}",
        dns_name="${Token[TOKEN.124]}",
        mount_name="${Token[TOKEN.125]}",
        storage_capacity_gib=1200,
    ),
}
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "Namespace",
    "PersistentVolume",
    "Queue",
    "StorageClass",
}


@pytest.fixture(scope="module", params=sorted(CHARTS))
def manifests(request: pytest.FixtureRequest) -> list[Manifest]:
    return synth(CHARTS[request.param])


def image_tag(image: str) -> str | None:
    """The tag of an image reference (None without one); a registry port is not a tag."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def test_image_tag_parsing() -> None:
    assert image_tag("quay.io/coreos/etcd:v3.5.33") == "v3.5.33"
    assert image_tag("registry.local:5000/etcd") is None
    assert image_tag("etcd") is None


def test_every_object_is_valid(manifests: list[Manifest]) -> None:
    assert_valid(manifests)


def test_no_image_is_unpinned(manifests: list[Manifest]) -> None:
    for container in (c for manifest in manifests for c in containers(manifest)):
        assert image_tag(container["image"]) not in (None, "", "latest"), container["image"]


def test_every_container_requests_cpu_and_memory(manifests: list[Manifest]) -> None:
    for container in (c for manifest in manifests for c in containers(manifest)):
        assert {"cpu", "memory"} <= set(container.get("resources", {}).get("requests", {})), container["name"]


def test_namespaced_objects_name_their_namespace_and_cluster_objects_do_not(
    manifests: list[Manifest],
) -> None:
    for manifest in manifests:
        assert ("namespace" in manifest["metadata"]) == (manifest["kind"] not in CLUSTER_SCOPED), manifest


def test_no_storage_class_is_ever_created(manifests: list[Manifest]) -> None:
    assert "StorageClass" not in {manifest["kind"] for manifest in manifests}


EXPECTED_NAMES = {
    "neuron-device-plugin": [
        ("ClusterRole", None, "neuron-device-plugin"),
        ("ClusterRoleBinding", None, "neuron-device-plugin"),
        ("DaemonSet", "kube-system", "neuron-device-plugin"),
        ("NetworkPolicy", "kube-system", "neuron-device-plugin"),
        ("ServiceAccount", "kube-system", "neuron-device-plugin"),
    ],
    "efa-device-plugin": [("DaemonSet", "kube-system", "aws-efa-k8s-device-plugin")],
    "volcano-queue": [("Queue", None, "test")],
    "etcd": [
        ("Deployment", "training", "etcd-server"),
        ("NetworkPolicy", "training", "etcd-server"),
        ("Service", "training", "etcd-server"),
    ],
    "fsx-storage": [("PersistentVolume", None, "fsx-pv"), ("PersistentVolumeClaim", "training", "fsx-claim")],
    "training-namespace": [("Namespace", None, "training")],
}


@pytest.mark.parametrize("chart", sorted(CHARTS))
def test_object_names_are_explicit_and_deterministic(chart: str) -> None:
    def names() -> list[tuple[str, str | None, str]]:
        return sorted(
            (m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]) for m in synth(CHARTS[chart])
        )

    # The names the chart chose (no cdk8s hash suffixes), the same on every synth.
    assert names() == names() == EXPECTED_NAMES[chart]
