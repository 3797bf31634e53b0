"""From the configuration (and the stack's file system) to the plan of the Kubernetes layer."""

from __future__ import annotations

import hashlib
import json

from cluster_facts.kubernetes_names import (
    ETCD_CLIENT_PORT,
    ETCD_SERVICE_NAME,
    TRAINING_NAMESPACE,
    TRAINING_POD_LABELS,
    file_system_claim,
)
from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from cluster_facts.stack_outputs import StackOutput
from cluster_facts.versions import CLUSTER_AUTOSCALER_IMAGE_TAGS
from config.model import StackConfig
from config.presets import BERT_LARGE, DatasetPreset, bert_large_arguments
from k8s_charts.cluster_autoscaler import AutoscalerValues
from k8s_charts.dataset_staging import Dataset, RemoteFile
from k8s_charts.plan import (
    FileSystemValues,
    KubernetesLayerValues,
    PlannedRun,
    QueueValues,
    plan_kubernetes_layer,
)
from k8s_charts.training_run import TrainingRun
from k8s_charts.volcano_queue import trainium_capability

__all__ = [
    "autoscaler_values",
    "file_system_generation",
    "file_system_values",
    "kubernetes_plan",
    "kubernetes_values",
    "placeholder_file_system",
    "review_plan",
]


def file_system_generation(config: StackConfig) -> str:
    """Six hex digits that change exactly when CloudFormation replaces the file system.

    FSx for Lustre replaces a file system for a new deployment type, subnet (the Trainium zone) or,
    on SCRATCH_2, import path; a size or throughput change is made in place.
    """
    fsx = config.fsx
    replaced_by = [
        fsx.deployment_type,
        config.trainium.availability_zone,
        fsx.s3_import_path if fsx.deployment_type == "SCRATCH_2" else None,
    ]
    return hashlib.sha256(json.dumps(replaced_by).encode()).hexdigest()[:6]


def file_system_values(
    config: StackConfig, *, file_system_id: str, dns_name: str, mount_name: str
) -> FileSystemValues:
    name = file_system_claim(file_system_generation(config))
    return FileSystemValues(
        file_system_id=file_system_id,
        dns_name=dns_name,
        mount_name=mount_name,
        storage_capacity_gib=config.fsx.storage_capacity_gib,
        claim_name=name,
        volume_name=name,
    )


def placeholder_file_system(config: StackConfig) -> FileSystemValues:
    """The file system as the review YAML shows it: its deploy-time values as ``${StackOutput}``."""
    return file_system_values(
        config,
        file_system_id=StackOutput.FSX_FILE_SYSTEM_ID.placeholder,
        dns_name=StackOutput.FSX_DNS_NAME.placeholder,
        mount_name=StackOutput.FSX_MOUNT_NAME.placeholder,
    )


def _dataset(preset: DatasetPreset) -> Dataset:
    return Dataset(
        name=preset.name,
        archive_url=preset.archive_url,
        archive_sha256=preset.archive_sha256,
        files=tuple(RemoteFile(url=file.url, sha256=file.sha256, name=file.name) for file in preset.files),
    )


def kubernetes_values(config: StackConfig, *, file_system: FileSystemValues) -> KubernetesLayerValues:
    training = config.training
    group = config.training_node_group
    dataset = _dataset(BERT_LARGE.dataset)
    run = TrainingRun(
        name=BERT_LARGE.name,
        instance=group.instance,
        node_group=group.name,
        nodes=training.nodes,
        image=training.image,
        namespace=TRAINING_NAMESPACE,
        queue=training.queue,
        claim_name=file_system.claim_name,
        script=BERT_LARGE.script,
        script_args=bert_large_arguments(
            batch_size=training.batch_size,
            grad_accum_usteps=training.effective_grad_accum_usteps,
            bf16=training.bf16,
        ),
        # Set either way: the script turns stochastic rounding on for BF16 whenever it is absent.
        environment={"NEURON_RT_STOCHASTIC_ROUNDING_EN": "1" if training.stochastic_rounding else "0"},
        datasets=(dataset,),
        python_requirements=BERT_LARGE.python_requirements,
        precompile_args=(BERT_LARGE.precompile_steps_arg, str(training.precompile_steps)),
        resume_glob=BERT_LARGE.resume_glob,
        resume_args=BERT_LARGE.resume_args,
        cacheset=training.cacheset,
        retries=3,
        rendezvous_endpoint=f"{ETCD_SERVICE_NAME}:{ETCD_CLIENT_PORT}",
        pod_labels=TRAINING_POD_LABELS,
    )
    return KubernetesLayerValues(
        region=config.region,
        file_system=file_system,
        queues=(
            # Never below what the autoscaler can bring: a capped task would idle the nodes added for it.
            QueueValues(
                name=training.queue,
                capability=trainium_capability(
                    [(group.instance, group.max_size) for group in config.trainium.node_groups]
                ),
            ),
        ),
        datasets=(dataset,),
        runs=(PlannedRun(run=run, applied=training.enabled),),
        autoscaler=autoscaler_values(config),
    )


def autoscaler_values(config: StackConfig) -> AutoscalerValues:
    settings = config.autoscaler
    return AutoscalerValues(
        cluster_name=config.name,
        region=config.region,
        image_tag=CLUSTER_AUTOSCALER_IMAGE_TAGS[config.cluster.kubernetes_version],
        scale_down_unneeded_minutes=settings.scale_down_unneeded_minutes,
        scale_down_delay_after_add_minutes=settings.scale_down_delay_after_add_minutes,
        max_node_provision_minutes=settings.max_node_provision_minutes,
        expander=settings.expander,
    )


def kubernetes_plan(config: StackConfig, *, file_system: FileSystemValues) -> KubernetesLayerPlan:
    return plan_kubernetes_layer(kubernetes_values(config, file_system=file_system))


def review_plan(config: StackConfig) -> KubernetesLayerPlan:
    """The plan as ``make synth`` writes it for review, with placeholders for deploy-time values."""
    return kubernetes_plan(config, file_system=placeholder_file_system(config))
