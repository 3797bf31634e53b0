"""FsxStorageChart: the FSx for Lustre file system as a statically bound ReadWriteMany volume."""

from __future__ import annotations

import pytest

from k8s_charts.fsx_storage import FsxStorageChart
from tests.k8s.manifests import only, synth
from tests.k8s_validation import assert_valid

FS_ID = "${Token[TOKEN.123]}"
DNS_NAME = "${Token[TOKEN.124]}"
MOUNT_NAME = "${Token[TOKEN.125]}"


def fsx(**props):
    defaults = {
        "file_system_id": FS_ID,
        "dns_name": DNS_NAME,
        "mount_name": MOUNT_NAME,
        "storage_capacity_gib": 1200,
        "namespace": "training",
        "claim_name": "fsx-abc123",
        "volume_name": "fsx-abc123",
    }
    manifests = synth(lambda app: FsxStorageChart(app, "fsx-storage", **{**defaults, **props}))
    assert_valid(manifests)
    return manifests


@pytest.fixture(scope="module")
def manifests():
    return fsx()


def test_chart_is_a_volume_and_its_claim_without_storage_class(manifests) -> None:
    assert sorted(manifest["kind"] for manifest in manifests) == ["PersistentVolume", "PersistentVolumeClaim"]


def test_volume_is_the_fsx_file_system_through_the_csi_driver(manifests) -> None:
    volume = only(manifests, "PersistentVolume")
    assert volume["metadata"] == {"name": "fsx-abc123"}  # cluster-scoped
    assert volume["spec"]["csi"] == {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": FS_ID,
        "volumeAttributes": {"dnsname": DNS_NAME, "mountname": MOUNT_NAME},
    }
    assert volume["spec"]["mountOptions"] == ["flock"]


def test_volume_is_static_shared_and_retained(manifests) -> None:
    spec = only(manifests, "PersistentVolume")["spec"]
    assert spec["storageClassName"] == ""
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert spec["capacity"] == {"storage": "1200Gi"}


def test_claim_and_volume_are_bound_to_each_other(manifests) -> None:
    volume = only(manifests, "PersistentVolume")
    claim = only(manifests, "PersistentVolumeClaim")
    assert claim["metadata"] == {"name": "fsx-abc123", "namespace": "training"}
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"]
    assert volume["spec"]["claimRef"] == {"name": "fsx-abc123", "namespace": "training"}
    assert claim["spec"]["storageClassName"] == ""
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_a_larger_file_system_changes_the_volume_and_never_the_claim() -> None:
    # Kubernetes refuses to resize a claim without an expandable StorageClass; a volume's capacity
    # may change. The claim asks for the smallest Lustre size, which every file system holds.
    small, large = fsx(storage_capacity_gib=1200), fsx(storage_capacity_gib=4800)
    assert only(small, "PersistentVolumeClaim") == only(large, "PersistentVolumeClaim")
    assert only(small, "PersistentVolumeClaim")["spec"]["resources"]["requests"] == {"storage": "1200Gi"}
    assert only(large, "PersistentVolume")["spec"]["capacity"] == {"storage": "4800Gi"}


def test_a_size_below_the_smallest_lustre_file_system_fails() -> None:
    with pytest.raises(ValueError, match="storage_capacity_gib"):
        fsx(storage_capacity_gib=1000)
