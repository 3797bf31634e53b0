"""From the configuration (and the stack's file system) to the plan of the Kubernetes layer."""

from __future__ import annotations

from cluster_facts.kubernetes_names import (
    CLAIM_NAME,
    ETCD_CLIENT_PORT,
    ETCD_SERVICE_NAME,
    TRAINING_NAMESPACE,
    TRAINING_POD_LABELS,
)
from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from cluster_facts.stack_outputs import StackOutput
from config.model import StackConfig
from k8s_charts.bert_jobs import BertTrainingParameters
from k8s_charts.plan import FileSystemValues, KubernetesLayerValues, plan_kubernetes_layer

__all__ = ["kubernetes_plan", "kubernetes_values", "placeholder_file_system", "review_plan"]


def placeholder_file_system(config: StackConfig) -> FileSystemValues:
    """The file system as the review YAML shows it: its deploy-time values as ``${StackOutput}``."""
    return FileSystemValues(
        file_system_id=StackOutput.FSX_FILE_SYSTEM_ID.placeholder,
        dns_name=StackOutput.FSX_DNS_NAME.placeholder,
        mount_name=StackOutput.FSX_MOUNT_NAME.placeholder,
        storage_capacity_gib=config.fsx.storage_capacity_gib,
    )


def kubernetes_values(config: StackConfig, *, file_system: FileSystemValues) -> KubernetesLayerValues:
    training = config.training
    return KubernetesLayerValues(
        region=config.region,
        file_system=file_system,
        training=BertTrainingParameters(
            instance=config.training_node_group.instance,
            nodes=training.nodes,
            image=training.image,
            queue=training.queue,
            batch_size=training.batch_size,
            grad_accum_usteps=training.effective_grad_accum_usteps,
            bf16=training.bf16,
            stochastic_rounding=training.stochastic_rounding,
            cacheset=training.cacheset,
            precompile_steps=training.precompile_steps,
            namespace=TRAINING_NAMESPACE,
            claim_name=CLAIM_NAME,
            rendezvous_endpoint=f"{ETCD_SERVICE_NAME}:{ETCD_CLIENT_PORT}",
            pod_labels=TRAINING_POD_LABELS,
        ),
        apply_training=training.enabled,
    )


def kubernetes_plan(config: StackConfig, *, file_system: FileSystemValues) -> KubernetesLayerPlan:
    return plan_kubernetes_layer(kubernetes_values(config, file_system=file_system))


def review_plan(config: StackConfig) -> KubernetesLayerPlan:
    """The plan as ``make synth`` writes it for review, with placeholders for deploy-time values."""
    return kubernetes_plan(config, file_system=placeholder_file_system(config))
