"""From the configuration (and the stack's file system) to the plain values the charts take."""

from __future__ import annotations

from config.model import StackConfig
from k8s_charts.bert_jobs import DEFAULT_TRAINING_IMAGE, BertTrainingParameters
from k8s_charts.cluster_layer import FileSystemValues, KubernetesLayerValues

__all__ = ["PLACEHOLDER_FILE_SYSTEM", "kubernetes_values"]

# What the YAML under cdk.out/k8s/ shows in place of the file system's deploy-time values; fill
# them from the stack outputs of the same names (see the README).
PLACEHOLDER_FILE_SYSTEM = {
    "file_system_id": "${FsxFileSystemId}",
    "dns_name": "${FsxDnsName}",
    "mount_name": "${FsxMountName}",
}


def kubernetes_values(
    config: StackConfig, *, file_system_id: str, dns_name: str, mount_name: str
) -> KubernetesLayerValues:
    training = config.training
    return KubernetesLayerValues(
        region=config.region,
        file_system=FileSystemValues(
            file_system_id=file_system_id,
            dns_name=dns_name,
            mount_name=mount_name,
            storage_capacity_gib=config.fsx.storage_capacity_gib,
        ),
        training=BertTrainingParameters(
            instance_type=config.training_node_group.instance_type,
            nodes=training.nodes,
            image=training.image or DEFAULT_TRAINING_IMAGE,
            queue=training.queue,
            batch_size=training.batch_size,
            grad_accum_usteps=training.effective_grad_accum_usteps,
            bf16=training.bf16,
            stochastic_rounding=training.stochastic_rounding,
            cacheset=training.cacheset,
        ),
    )
