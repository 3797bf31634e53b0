"""The outputs of TrainiumStack, by name: the stack writes them, the pipeline's check and the review
YAML read them. An output renamed here is renamed everywhere."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["StackOutput"]


class StackOutput(StrEnum):
    CLUSTER_NAME = "ClusterName"
    UPDATE_KUBECONFIG_COMMAND = "UpdateKubeconfigCommand"
    ECR_REPOSITORY_URI = "EcrRepositoryUri"
    FSX_FILE_SYSTEM_ID = "FsxFileSystemId"
    FSX_MOUNT_NAME = "FsxMountName"
    FSX_DNS_NAME = "FsxDnsName"
    TRAINIUM_SUBNET_ID = "TrainiumSubnetId"
    TRAINIUM_AVAILABILITY_ZONE = "TrainiumAvailabilityZone"
    DASHBOARD_URL = "DashboardUrl"
    """Only when observability.dashboard is on."""

    @property
    def placeholder(self) -> str:
        """How the review YAML under cdk.out/k8s/ shows a value known only after deployment."""
        return f"${{{self.value}}}"
