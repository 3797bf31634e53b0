"""Static provisioning of the stack's FSx for Lustre file system for the training pods.

The file system is created by CloudFormation; this chart only exposes it: a PersistentVolume
``fsx-pv`` (``PV_NAME``) for the FSx CSI driver (``fsx.csi.aws.com``: volumeHandle = file system id,
attributes ``dnsname`` and ``mountname``, mount option ``flock``) and a ReadWriteMany claim bound
to it by name. Both use ``storageClassName: ""`` and there is deliberately no StorageClass:
dynamic provisioning would create file systems outside CloudFormation that ``cdk destroy``
leaves behind. The PV is Retain: deleting the claim must never touch the data.

``file_system_id``, ``dns_name`` and ``mount_name`` are usually CDK tokens; they are copied
unchanged and resolved when the stack synthesizes.
"""

from __future__ import annotations

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.kubernetes_names import PV_NAME

__all__ = ["CSI_DRIVER", "FsxStorageChart"]

CSI_DRIVER = "fsx.csi.aws.com"


class FsxStorageChart(cdk8s.Chart):
    """PersistentVolume ``fsx-pv`` (cluster-scoped) and the claim bound to it."""

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
    ) -> None:
        super().__init__(scope, id)
        if storage_capacity_gib < 1:
            raise ValueError(f"storage_capacity_gib must be positive, got {storage_capacity_gib}")
        capacity = {"storage": k8s.Quantity.from_string(f"{storage_capacity_gib}Gi")}
        access_modes = ["ReadWriteMany"]  # every worker pod of the job mounts it

        # Raw L1 objects: the cdk8s-plus L2 volumes have no generic CSI source.
        k8s.KubePersistentVolume(
            self,
            "PersistentVolume",
            metadata=k8s.ObjectMeta(name=PV_NAME),
            spec=k8s.PersistentVolumeSpec(
                capacity=capacity,
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
                volume_name=PV_NAME,
                resources=k8s.ResourceRequirements(requests=capacity),
            ),
        )
