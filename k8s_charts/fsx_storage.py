"""Static provisioning of the stack's FSx for Lustre file system for the training pods.

The file system is created by CloudFormation; this chart only exposes it: a PersistentVolume for
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

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

__all__ = ["CLAIM_REQUEST", "CSI_DRIVER", "FsxStorageChart"]

CSI_DRIVER = "fsx.csi.aws.com"
# The smallest Lustre size: a claim asks for no more than any file system of this stack holds.
CLAIM_REQUEST = "1200Gi"


class FsxStorageChart(cdk8s.Chart):
    """PersistentVolume ``volume_name`` (cluster-scoped) and the claim ``claim_name`` bound to it."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        file_system_id: str,
        dns_name: str,
        mount_name: str,
        storage_capacity_gib: int,
        namespace: str,
        claim_name: str,
        volume_name: str,
    ) -> None:
        super().__init__(scope, id)
        if storage_capacity_gib < 1200:
            raise ValueError(
                f"storage_capacity_gib must be at least 1200 (Lustre), got {storage_capacity_gib}"
            )
        access_modes = ["ReadWriteMany"]  # every worker pod of the job mounts it

        # Raw L1 objects: the cdk8s-plus L2 volumes have no generic CSI source.
        k8s.KubePersistentVolume(
            self,
            "PersistentVolume",
            metadata=k8s.ObjectMeta(name=volume_name),
            spec=k8s.PersistentVolumeSpec(
                capacity={"storage": k8s.Quantity.from_string(f"{storage_capacity_gib}Gi")},
                access_modes=access_modes,
                persistent_volume_reclaim_policy="Retain",
                storage_class_name="",  # static: no provisioner may claim or create it
                mount_options=["flock"],  # Lustre file locking across clients
                # Reserved for our claim: no other claim can bind it first.
                claim_ref=k8s.ObjectReference(namespace=namespace, name=claim_name),
                csi=k8s.CsiPersistentVolumeSource(
                    driver=CSI_DRIVER,
                    volume_handle=file_system_id,
                    volume_attributes={"dnsname": dns_name, "mountname": mount_name},
                ),
            ),
        )
        k8s.KubePersistentVolumeClaim(
            self,
            "PersistentVolumeClaim",
            metadata=k8s.ObjectMeta(name=claim_name, namespace=namespace),
            spec=k8s.PersistentVolumeClaimSpec(
                access_modes=access_modes,
                storage_class_name="",  # "" = no default StorageClass, no dynamic provisioning
                volume_name=volume_name,
                resources=k8s.ResourceRequirements(
                    requests={"storage": k8s.Quantity.from_string(CLAIM_REQUEST)}
                ),
            ),
        )
