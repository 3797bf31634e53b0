"""The whole Kubernetes layer as named charts, in deploy order, from plain values.

The stack builds these charts with CDK tokens (the file system's id, DNS and mount names) and
applies each as one manifest; ``make synth`` builds them again with readable placeholders and
writes them as YAML under ``cdk.out/k8s/`` for review and for ``kubectl apply``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cdk8s
import yaml

from k8s_charts.bert_jobs import BertJobChart, BertTrainingParameters
from k8s_charts.data_staging import DataStagingChart
from k8s_charts.efa_device_plugin import EfaDevicePluginChart
from k8s_charts.etcd import EtcdChart
from k8s_charts.fsx_storage import FsxStorageChart
from k8s_charts.neuron_device_plugin import NeuronDevicePluginChart
from k8s_charts.training_namespace import TrainingNamespaceChart
from k8s_charts.volcano_queue import VolcanoQueueChart, queue_capability

__all__ = [
    "CHART_PREREQUISITES",
    "TRAINING_CHARTS",
    "FileSystemValues",
    "KubernetesLayerValues",
    "build_charts",
    "write_yaml",
]

# Charts (and "volcano", the Helm release the stack installs) each chart must follow at deploy time.
# Volcano's admission webhook rejects Queues and Jobs until it runs; the data job needs its claim;
# training reuses what precompile compiled. Runtime order inside the cluster (data staged before
# precompile starts, precompile finished before training starts) is kept by the jobs themselves.
CHART_PREREQUISITES: dict[str, tuple[str, ...]] = {
    "neuron-device-plugin": (),
    "efa-device-plugin": (),
    "volcano-queue": ("volcano",),
    "training-namespace": (),
    "etcd": ("training-namespace",),
    "fsx-storage": ("training-namespace",),
    "data-staging": ("fsx-storage",),
    "bert-precompile": ("volcano", "volcano-queue", "etcd", "fsx-storage", "data-staging"),
    "bert-train": ("bert-precompile",),
}
TRAINING_CHARTS = ("bert-precompile", "bert-train")


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


def build_charts(values: KubernetesLayerValues) -> dict[str, cdk8s.Chart]:
    """Every chart by name, in CHART_PREREQUISITES order, each in its own cdk8s App."""
    training = values.training
    builders: dict[str, Callable[[cdk8s.App, str], cdk8s.Chart]] = {
        "neuron-device-plugin": NeuronDevicePluginChart,
        "efa-device-plugin": lambda app, name: EfaDevicePluginChart(app, name, region=values.region),
        "volcano-queue": lambda app, name: VolcanoQueueChart(
            app,
            name,
            name=training.queue,
            capability=queue_capability(training.instance_type, training.nodes),
        ),
        "training-namespace": lambda app, name: TrainingNamespaceChart(app, name, name=training.namespace),
        "etcd": lambda app, name: EtcdChart(app, name, namespace=training.namespace),
        "fsx-storage": lambda app, name: FsxStorageChart(
            app,
            name,
            file_system_id=values.file_system.file_system_id,
            dns_name=values.file_system.dns_name,
            mount_name=values.file_system.mount_name,
            storage_capacity_gib=values.file_system.storage_capacity_gib,
            namespace=training.namespace,
            claim_name=training.claim_name,
        ),
        "data-staging": lambda app, name: DataStagingChart(
            app, name, namespace=training.namespace, claim_name=training.claim_name
        ),
        "bert-precompile": lambda app, name: BertJobChart(app, name, parameters=training, phase="precompile"),
        "bert-train": lambda app, name: BertJobChart(app, name, parameters=training, phase="train"),
    }
    assert list(builders) == list(CHART_PREREQUISITES), "every chart needs its place in the deploy order"
    return {name: build(cdk8s.App(), name) for name, build in builders.items()}


def manifests(chart: cdk8s.Chart) -> list[dict[str, Any]]:
    return list(chart.to_json())


class _ReadableDumper(yaml.SafeDumper):
    """Multi-line strings (the jobs' scripts) as literal blocks, readable in a review."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ReadableDumper.add_representer(str, _represent_str)


def write_yaml(charts: dict[str, cdk8s.Chart], directory: Path) -> list[Path]:
    """Write each chart as ``<name>.yaml`` (one document per object); return the files."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, chart in charts.items():
        path = directory / f"{name}.yaml"
        path.write_text(
            yaml.dump_all(manifests(chart), Dumper=_ReadableDumper, sort_keys=False, default_flow_style=False)
        )
        written.append(path)
    return written
