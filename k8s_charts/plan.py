"""The whole Kubernetes layer as one plan: every chart rendered, in deploy order, from plain values.

The stack builds the plan with CDK tokens for the file system's deploy-time values and applies each
step as one custom resource (constructs_trn.kubernetes_layer); ``make synth`` builds it again with
readable placeholders and writes it as YAML under ``cdk.out/k8s/`` (stacks.review_files).

Deploy-time order (``after``): Volcano's admission webhook rejects Queues and Jobs until it runs;
the data job needs its claim; training reuses what precompile compiled. Runtime order inside the
cluster (data staged before precompile starts, precompile finished before training starts) is kept
by the jobs themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import cdk8s

from cluster_facts.kubernetes_names import CLAIM_NAME, TRAINING_NAMESPACE
from cluster_facts.kubernetes_plan import HelmRelease, KubernetesLayerPlan, KubernetesStep, ManifestSet
from cluster_facts.versions import VOLCANO_CHART_REPOSITORY, VOLCANO_CHART_VERSION
from k8s_charts.bert_jobs import BertJobChart, BertTrainingParameters
from k8s_charts.data_staging import DataStagingChart
from k8s_charts.efa_device_plugin import EfaDevicePluginChart
from k8s_charts.etcd import EtcdChart
from k8s_charts.fsx_storage import FsxStorageChart
from k8s_charts.neuron_device_plugin import NeuronDevicePluginChart
from k8s_charts.training_namespace import TrainingNamespaceChart
from k8s_charts.volcano_queue import VolcanoQueueChart, queue_capability

__all__ = ["VOLCANO", "FileSystemValues", "KubernetesLayerValues", "plan_kubernetes_layer", "render"]

VOLCANO = "volcano"
"""The step that installs Volcano (the Helm release)."""


@dataclass(frozen=True, kw_only=True)
class FileSystemValues:
    """The FSx for Lustre file system the PersistentVolume names (tokens in the stack)."""

    file_system_id: str
    dns_name: str
    mount_name: str
    storage_capacity_gib: int


@dataclass(frozen=True, kw_only=True)
class KubernetesLayerValues:
    region: str
    file_system: FileSystemValues
    training: BertTrainingParameters
    apply_training: bool
    """Apply the BERT precompile and training jobs at deploy (they are rendered either way)."""


ChartBuilder = Callable[[cdk8s.App, str], cdk8s.Chart]


def render(build: ChartBuilder, name: str = "chart") -> tuple[Mapping[str, Any], ...]:
    """The objects of one chart, built under a cdk8s App of its own (one chart per app)."""
    return tuple(build(cdk8s.App(), name).to_json())


def _volcano() -> HelmRelease:
    return HelmRelease(
        name=VOLCANO,
        chart="volcano",
        repository=VOLCANO_CHART_REPOSITORY,
        version=VOLCANO_CHART_VERSION,
        release="volcano",
        namespace="volcano-system",
        # Wait until the admission webhook serves: it rejects Queues and Jobs until then.
        wait=True,
        timeout_minutes=15,
    )


def plan_kubernetes_layer(values: KubernetesLayerValues) -> KubernetesLayerPlan:
    """Every step, in deploy order; each chart rendered in its own cdk8s App."""
    training = values.training
    file_system = values.file_system

    def chart(
        name: str, build: ChartBuilder, *, after: tuple[str, ...] = (), applied: bool = True
    ) -> ManifestSet:
        return ManifestSet(name=name, manifests=render(build, name), after=after, applied=applied)

    steps: list[KubernetesStep] = [
        chart("neuron-device-plugin", NeuronDevicePluginChart),
        chart("efa-device-plugin", lambda app, name: EfaDevicePluginChart(app, name, region=values.region)),
        _volcano(),
        chart(
            "volcano-queue",
            lambda app, name: VolcanoQueueChart(
                app,
                name,
                name=training.queue,
                capability=queue_capability(training.instance, training.nodes),
            ),
            after=(VOLCANO,),
        ),
        chart(
            "training-namespace", lambda app, name: TrainingNamespaceChart(app, name, name=TRAINING_NAMESPACE)
        ),
        chart(
            "etcd",
            lambda app, name: EtcdChart(app, name, namespace=TRAINING_NAMESPACE),
            after=("training-namespace",),
        ),
        chart(
            "fsx-storage",
            lambda app, name: FsxStorageChart(
                app,
                name,
                file_system_id=file_system.file_system_id,
                dns_name=file_system.dns_name,
                mount_name=file_system.mount_name,
                storage_capacity_gib=file_system.storage_capacity_gib,
                namespace=TRAINING_NAMESPACE,
                claim_name=CLAIM_NAME,
            ),
            after=("training-namespace",),
        ),
        chart(
            "data-staging",
            lambda app, name: DataStagingChart(
                app, name, namespace=TRAINING_NAMESPACE, claim_name=CLAIM_NAME
            ),
            after=("fsx-storage",),
        ),
        chart(
            "bert-precompile",
            lambda app, name: BertJobChart(app, name, parameters=training, phase="precompile"),
            after=(VOLCANO, "volcano-queue", "etcd", "fsx-storage", "data-staging"),
            applied=values.apply_training,
        ),
        chart(
            "bert-train",
            lambda app, name: BertJobChart(app, name, parameters=training, phase="train"),
            after=("bert-precompile",),
            applied=values.apply_training,
        ),
    ]
    return KubernetesLayerPlan.of(steps)
