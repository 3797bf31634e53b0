"""Static provisioning of the stack's FSx for Lustre file system: the whole of it for the platform,
its own directory and a read-only view of the staged data sets for each team.

The file system is created by CloudFormation; this chart only exposes it: PersistentVolumes for
the FSx CSI driver (``fsx.csi.aws.com``: volumeHandle = file system id, attributes ``dnsname`` and
``mountname``, mount option ``flock``) and a ReadWriteMany claim bound to it by name. Both use
``storageClassName: ""`` and there is deliberately no StorageClass: dynamic provisioning would
create file systems outside CloudFormation that ``cdk destroy`` leaves behind. The volume is
Retain: deleting the claim must never touch the data.

Day 2 (Kubernetes refuses to resize a claim without an expandable StorageClass, and a volume's
source is immutable):

- The claim requests a fixed nominal size (the CSI driver ignores it for static volumes); only the
  volume's capacity follows the file system, and a volume's capacity may change. Growing the file
  system updates the volume and leaves the claim alone.
- A replaced file system (CloudFormation replaces it when, for example, its deployment type
  changes) gets a volume and a claim of new names: the stack names both after the file system's
  generation, so they are new objects, and the deployment prunes the old ones.

``file_system_id``, ``dns_name`` and ``mount_name`` are usually CDK tokens; they are copied
unchanged and resolved when the stack synthesizes.
"""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.kubernetes_names import DATASETS_DIR, TEAMS_DIR, datasets_claim, file_system_claim

__all__ = ["CLAIM_REQUEST", "CSI_DRIVER", "FsxStorageChart"]

CSI_DRIVER = "fsx.csi.aws.com"
# The smallest Lustre size: a claim asks for no more than any file system of this stack holds.
CLAIM_REQUEST = "1200Gi"


class FsxStorageChart(cdk8s.Chart):
    """The platform's volume and claim, and each team's two (its directory, the data sets read-only)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        file_system_id: str,
        dns_name: str,
        mount_name: str,
        storage_capacity_gib: int,
        generation: str,
        platform_namespace: str,
        team_namespaces: Sequence[str],
    ) -> None:
        super().__init__(scope, id)
        if storage_capacity_gib < 1200:
            raise ValueError(
                f"storage_capacity_gib must be at least 1200 (Lustre), got {storage_capacity_gib}"
            )
        capacity = f"{storage_capacity_gib}Gi"
        claim = file_system_claim(generation)

        def volume(suffix: str, *, namespace: str, claim_name: str, path: str, read_only: bool) -> None:
            name = f"{claim}{suffix}"
            _static_volume(
                self,
                name,
                volume_name=name,
                claim_name=claim_name,
                namespace=namespace,
                # Distinct per volume: the kubelet keys volumes by driver and handle.
                volume_handle=f"{file_system_id}{suffix}",
                dns_name=dns_name,
                mount_name=f"{mount_name}{path}",
                capacity=capacity,
                read_only=read_only,
            )

        volume("", namespace=platform_namespace, claim_name=claim, path="", read_only=False)
        for team in team_namespaces:
            volume(f"-{team}", namespace=team, claim_name=claim, path=f"/{TEAMS_DIR}/{team}", read_only=False)
            volume(
                f"-{team}-{DATASETS_DIR}",
                namespace=team,
                claim_name=datasets_claim(generation),
                path=f"/{DATASETS_DIR}",
                read_only=True,
            )


def _static_volume(
    scope: Construct,
    id: str,
    *,
    volume_name: str,
    claim_name: str,
    namespace: str,
    volume_handle: str,
    dns_name: str,
    mount_name: str,
    capacity: str,
    read_only: bool,
) -> None:
    access_modes = ["ReadOnlyMany" if read_only else "ReadWriteMany"]  # every worker pod mounts it
    # Raw L1 objects: the cdk8s-plus L2 volumes have no generic CSI source.
    k8s.KubePersistentVolume(
        scope,
        f"{id}-volume",
        metadata=k8s.ObjectMeta(name=volume_name),
        spec=k8s.PersistentVolumeSpec(
            capacity={"storage": k8s.Quantity.from_string(capacity)},
            access_modes=access_modes,
            persistent_volume_reclaim_policy="Retain",
            storage_class_name="",  # static: no provisioner may claim or create it
            mount_options=["flock"],  # Lustre file locking across clients
            # Reserved for our claim: no other claim can bind it first.
            claim_ref=k8s.ObjectReference(namespace=namespace, name=claim_name),
            csi=k8s.CsiPersistentVolumeSource(
                driver=CSI_DRIVER,
                volume_handle=volume_handle,
                # The driver adds the ro mount option: Lustre itself refuses writes, whatever the pod.
                read_only=read_only or None,
                volume_attributes={"dnsname": dns_name, "mountname": mount_name},
            ),
        ),
    )
    k8s.KubePersistentVolumeClaim(
        scope,
        f"{id}-claim",
        metadata=k8s.ObjectMeta(name=claim_name, namespace=namespace),
        spec=k8s.PersistentVolumeClaimSpec(
            access_modes=access_modes,
            storage_class_name="",  # "" = no default StorageClass, no dynamic provisioning
            volume_name=volume_name,
            resources=k8s.ResourceRequirements(requests={"storage": k8s.Quantity.from_string(CLAIM_REQUEST)}),
        ),
    )
