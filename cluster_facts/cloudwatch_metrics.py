"""The CloudWatch metrics and log group the cluster's dashboard reads, exactly as AWS publishes them.

One entry per metric: namespace, name, the dimension sets it is published with (a dashboard query
must name one of them exactly, or CloudWatch returns nothing) and where that was read. The dashboard
(constructs_trn/training_dashboard.py) builds its queries from these entries, and
tests/constructs_trn/test_training_dashboard.py checks every metric in the rendered dashboard body against them.

Sources:

- Container Insights (namespace ``ContainerInsights``), published by the CloudWatch agent that the
  ``amazon-cloudwatch-observability`` add-on installs with enhanced observability (the add-on's
  default): CloudWatch User Guide, "Amazon EKS and Kubernetes Container Insights with enhanced
  observability metrics",
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Container-Insights-metrics-enhanced-EKS.html
  (sections "AWS Neuron metrics for AWS Trainium and AWS Inferentia" and "AWS Elastic Fabric
  Adapter (EFA) metrics"); the same names and dimension sets are declared in the agent,
  aws/amazon-cloudwatch-agent translator/translate/otel/exporter/awsemf/kubernetes.go
  (getAwsNeuronMetricDeclarations, getEFAMetricDeclarations; commit ab55b8d, 2026-08-07).
- FSx for Lustre (namespace ``AWS/FSx``, dimension ``FileSystemId``): FSx for Lustre User Guide,
  "Amazon FSx for Lustre metrics and dimensions",
  https://docs.aws.amazon.com/fsx/latest/LustreGuide/fs-metrics.html
- The application log group: the add-on's Fluent Bit configuration, aws-observability/helm-charts
  charts/amazon-cloudwatch-observability/values.yaml (application-log.conf, ``log_group_name``;
  chart 6.4.0, commit 71a298f).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CONTAINER_INSIGHTS",
    "CONTAINER_INSIGHTS_INTERVAL_SECONDS",
    "DASHBOARD_METRICS",
    "EFA_METRICS_MINIMUM_ADDON",
    "FSX",
    "NEURON_METRICS_MINIMUM_ADDON",
    "CloudWatchMetric",
    "application_log_group",
    "fsx_data_read_bytes",
    "fsx_data_write_bytes",
    "fsx_free_data_storage_capacity",
    "node_efa_rx_bytes",
    "node_efa_tx_bytes",
    "node_neuroncore_utilization",
    "node_neurondevice_hw_ecc_events_total",
    "node_neurondevice_runtime_memory_used_bytes",
]

CONTAINER_INSIGHTS = "ContainerInsights"
FSX = "AWS/FSx"

# The agent collects Container Insights metrics every 60 s unless configured otherwise ("If this
# parameter is not specified, the default 60-second interval is used", same User Guide page).
CONTAINER_INSIGHTS_INTERVAL_SECONDS = 60

# The first add-on versions that publish these metrics (same User Guide page): Neuron metrics
# "v1.5.0-eksbuild.1 or later", EFA metrics "v1.5.2-eksbuild.1 or later".
NEURON_METRICS_MINIMUM_ADDON = "1.5.0"
EFA_METRICS_MINIMUM_ADDON = "1.5.2"

_CI_DOCS = "CloudWatch User Guide, Container-Insights-metrics-enhanced-EKS"
_FSX_DOCS = "FSx for Lustre User Guide, fs-metrics"


@dataclass(frozen=True, kw_only=True)
class CloudWatchMetric:
    namespace: str
    name: str
    dimension_sets: tuple[frozenset[str], ...]
    """Every dimension set the metric is published with."""
    unit: str
    source: str

    def dimensions(self, *names: str) -> frozenset[str]:
        """One of the published dimension sets; a set the metric is not published with fails here."""
        wanted = frozenset(names)
        if wanted not in self.dimension_sets:
            raise ValueError(f"{self.name} is not published with dimensions {sorted(wanted)}")
        return wanted


def _sets(*sets: tuple[str, ...]) -> tuple[frozenset[str], ...]:
    return tuple(frozenset(dimensions) for dimensions in sets)


# Node-level Neuron metrics. The per-core dimension set also carries InstanceType.
_NEURON_CORE_SETS = _sets(
    ("ClusterName",),
    ("ClusterName", "UltraServer"),
    ("ClusterName", "InstanceId", "NodeName"),
    ("ClusterName", "InstanceType", "InstanceId", "NodeName", "NeuronDevice", "NeuronCore"),
)
node_neuroncore_utilization = CloudWatchMetric(
    namespace=CONTAINER_INSIGHTS,
    name="node_neuroncore_utilization",
    dimension_sets=_NEURON_CORE_SETS,
    unit="Percent",
    source=_CI_DOCS + ", AWS Neuron metrics",
)
node_neurondevice_runtime_memory_used_bytes = CloudWatchMetric(
    namespace=CONTAINER_INSIGHTS,
    name="node_neurondevice_runtime_memory_used_bytes",
    dimension_sets=_sets(
        ("ClusterName",), ("ClusterName", "UltraServer"), ("ClusterName", "InstanceId", "NodeName")
    ),
    unit="Bytes",
    source=_CI_DOCS + ", AWS Neuron metrics",
)
node_neurondevice_hw_ecc_events_total = CloudWatchMetric(
    namespace=CONTAINER_INSIGHTS,
    name="node_neurondevice_hw_ecc_events_total",
    dimension_sets=_sets(
        ("ClusterName",),
        ("ClusterName", "UltraServer"),
        ("ClusterName", "InstanceId", "NodeName"),
        ("ClusterName", "InstanceId", "NodeName", "NeuronDevice"),
    ),
    unit="Count",
    source=_CI_DOCS + ", AWS Neuron metrics",
)

# Node-level EFA metrics (bytes per second per EFA device; the node-level sets aggregate the devices).
_EFA_NODE_SETS = _sets(
    ("ClusterName",),
    ("ClusterName", "InstanceId", "NodeName"),
    ("ClusterName", "InstanceId", "InstanceType", "NodeName", "NetworkInterfaceId"),
)
node_efa_rx_bytes = CloudWatchMetric(
    namespace=CONTAINER_INSIGHTS,
    name="node_efa_rx_bytes",
    dimension_sets=_EFA_NODE_SETS,
    unit="Bytes/Second",
    source=_CI_DOCS + ", EFA metrics",
)
node_efa_tx_bytes = CloudWatchMetric(
    namespace=CONTAINER_INSIGHTS,
    name="node_efa_tx_bytes",
    dimension_sets=_EFA_NODE_SETS,
    unit="Bytes/Second",
    source=_CI_DOCS + ", EFA metrics",
)

# FSx for Lustre network I/O and storage capacity: one dimension, FileSystemId. The Sum of the
# byte counters over a period divided by the period's seconds is the throughput in bytes/s.
_FSX_SETS = _sets(("FileSystemId",))
fsx_data_read_bytes = CloudWatchMetric(
    namespace=FSX, name="DataReadBytes", dimension_sets=_FSX_SETS, unit="Bytes", source=_FSX_DOCS
)
fsx_data_write_bytes = CloudWatchMetric(
    namespace=FSX, name="DataWriteBytes", dimension_sets=_FSX_SETS, unit="Bytes", source=_FSX_DOCS
)
fsx_free_data_storage_capacity = CloudWatchMetric(
    namespace=FSX,
    name="FreeDataStorageCapacity",
    dimension_sets=_FSX_SETS,
    unit="Bytes",
    source=_FSX_DOCS + " (storage capacity metrics; Sum is the file system's free bytes)",
)

DASHBOARD_METRICS: dict[tuple[str, str], CloudWatchMetric] = {
    (metric.namespace, metric.name): metric
    for metric in (
        node_neuroncore_utilization,
        node_neurondevice_runtime_memory_used_bytes,
        node_neurondevice_hw_ecc_events_total,
        node_efa_rx_bytes,
        node_efa_tx_bytes,
        fsx_data_read_bytes,
        fsx_data_write_bytes,
        fsx_free_data_storage_capacity,
    )
}
"""Every metric the dashboard may read, by (namespace, name)."""


def application_log_group(cluster_name: str) -> str:
    """Where the add-on's Fluent Bit ships every container's stdout and stderr, one JSON event per
    line (the line in ``log``, the pod in ``kubernetes.pod_name`` and ``kubernetes.namespace_name``)."""
    return f"/aws/containerinsights/{cluster_name}/application"
