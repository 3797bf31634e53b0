"""FsxStorageChart: the whole file system for the platform; a team's own directory and the data
sets read-only for each team, all on static volumes of one generation."""

from __future__ import annotations

from typing import Any

import pytest

from k8s_charts.addons.fsx_storage import FsxStorageChart
from tests.k8s_charts.manifests import Manifest, synth
from tests.k8s_validation import assert_valid

FS_ID = "${Token[TOKEN.123]}"
DNS_NAME = "${Token[TOKEN.124]}"
MOUNT_NAME = "${Token[TOKEN.125]}"


def fsx(**props: Any) -> list[Manifest]:
    defaults = {
        "file_system_id": FS_ID,
        "dns_name": DNS_NAME,
        "mount_name": MOUNT_NAME,
        "storage_capacity_gib": 1200,
        "generation": "abc123",
        "platform_namespace": "trainium-system",
        "team_namespaces": ["training", "research"],
    }
    manifests = synth(lambda app: FsxStorageChart(app, "fsx-storage", **{**defaults, **props}))
    assert_valid(manifests)
    return manifests


@pytest.fixture(scope="module")
def manifests() -> list[Manifest]:
    return fsx()


def volumes(manifests: list[Manifest]) -> dict[str, Manifest]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == "PersistentVolume"}


def claims(manifests: list[Manifest]) -> dict[tuple[str, str], Manifest]:
    return {
        (m["metadata"]["namespace"], m["metadata"]["name"]): m
        for m in manifests
        if m["kind"] == "PersistentVolumeClaim"
    }


def test_the_platform_mounts_the_whole_file_system_and_each_team_its_directory_and_the_data_sets(
    manifests: list[Manifest],
) -> None:
    mounts = {
        name: volume["spec"]["csi"]["volumeAttributes"]["mountname"]
        for name, volume in volumes(manifests).items()
    }
    assert mounts == {
        "fsx-abc123": MOUNT_NAME,
        "fsx-abc123-training": f"{MOUNT_NAME}/teams/training",
        "fsx-abc123-training-datasets": f"{MOUNT_NAME}/datasets",
        "fsx-abc123-research": f"{MOUNT_NAME}/teams/research",
        "fsx-abc123-research-datasets": f"{MOUNT_NAME}/datasets",
    }
    assert set(claims(manifests)) == {
        ("trainium-system", "fsx-abc123"),
        ("training", "fsx-abc123"),
        ("training", "fsx-abc123-datasets"),
        ("research", "fsx-abc123"),
        ("research", "fsx-abc123-datasets"),
    }


def test_each_claim_is_bound_to_its_own_volume(manifests: list[Manifest]) -> None:
    for (namespace, name), claim in claims(manifests).items():
        volume = volumes(manifests)[claim["spec"]["volumeName"]]
        assert volume["spec"]["claimRef"] == {"name": name, "namespace": namespace}
        assert claim["spec"]["storageClassName"] == volume["spec"]["storageClassName"] == ""


def test_every_volume_is_the_file_system_through_the_csi_driver_with_its_own_handle(
    manifests: list[Manifest],
) -> None:
    handles = [volume["spec"]["csi"]["volumeHandle"] for volume in volumes(manifests).values()]
    # The kubelet keys volumes by driver and handle: two volumes of one node may not share one.
    assert len(set(handles)) == len(handles)
    for volume in volumes(manifests).values():
        spec = volume["spec"]
        assert spec["csi"]["driver"] == "fsx.csi.aws.com"
        assert spec["csi"]["volumeHandle"].startswith(FS_ID)
        assert spec["csi"]["volumeAttributes"]["dnsname"] == DNS_NAME
        assert spec["mountOptions"] == ["flock"]
        assert spec["persistentVolumeReclaimPolicy"] == "Retain"


def test_the_data_sets_are_read_only_for_every_team(manifests: list[Manifest]) -> None:
    for name, volume in volumes(manifests).items():
        read_only = name.endswith("-datasets")
        assert volume["spec"]["csi"].get("readOnly", False) is read_only
        assert volume["spec"]["accessModes"] == ["ReadOnlyMany" if read_only else "ReadWriteMany"]


def test_a_larger_file_system_changes_the_volumes_and_never_a_claim() -> None:
    # Kubernetes refuses to resize a claim without an expandable StorageClass; a volume's capacity
    # may change. A claim asks for the smallest Lustre size, which every file system holds.
    small, large = fsx(storage_capacity_gib=1200), fsx(storage_capacity_gib=4800)
    assert claims(small) == claims(large)
    assert {c["spec"]["resources"]["requests"]["storage"] for c in claims(small).values()} == {"1200Gi"}
    assert {v["spec"]["capacity"]["storage"] for v in volumes(large).values()} == {"4800Gi"}


def test_a_new_generation_names_every_volume_and_claim_anew() -> None:
    old, new = fsx(generation="abc123"), fsx(generation="def456")
    assert set(volumes(old)).isdisjoint(volumes(new))
    assert {name for _, name in claims(old)}.isdisjoint(name for _, name in claims(new))


def test_a_size_below_the_smallest_lustre_file_system_fails() -> None:
    with pytest.raises(ValueError, match="storage_capacity_gib"):
        fsx(storage_capacity_gib=1000)
