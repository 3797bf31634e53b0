"""A CloudWatch dashboard for the cluster: Trainium nodes, Neuron, EFA, FSx and the training's own numbers.

Every metric comes from cluster_facts.cloudwatch_metrics (names and dimension sets as the
amazon-cloudwatch-observability add-on and FSx publish them, with their sources). Node names are not
known at synth, so per-node graphs are SEARCH expressions over the node-level dimension set
(``ClusterName, InstanceId, NodeName``): one line per Trainium node that reports.

Per-node arithmetic (the dashboard's period override is "inherit", so each widget keeps the period
set here):

- Container Insights publishes one datapoint per NeuronCore, per Neuron runtime or per EFA device
  every collection interval (60 s), and the node-level dimension set aggregates them. Utilization is
  their ``Average`` (the node's mean NeuronCore utilization); device memory and EFA bytes/s are
  totals: their ``Sum`` over the period divided by the number of intervals in it.
- FSx: ``Sum`` of DataReadBytes or DataWriteBytes divided by the period's seconds is bytes/s (FSx for
  Lustre User Guide); ``Sum`` of FreeDataStorageCapacity is the file system's free bytes, read per
  minute.

The training throughput is the value the BERT script prints (``... throughput : 1234.56``) and
Container Insights ships to the cluster's application log group. Fluent Bit wraps each line in a JSON
event (the line is its ``log`` field), so a metric filter cannot extract a number from inside it
without a log transformer on every container's logs; a Logs Insights widget parses the line
instead (docs/health.md, "The dashboard").

Restarts, the time they cost, replaced nodes and the nodes the node check holds come the same way,
from the one-line records run_worker.sh and the node check print (cluster_facts/log_lines.py). The
per-run tables group twice (a first ``stats`` per attempt, a second per run: "Use multiple stats
commands in a single query", CloudWatch Logs User Guide, CWL_QuerySyntax-Stats), so a restart
counts once however many replicas report it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from cluster_facts import cloudwatch_metrics as metrics
from cluster_facts.cloudwatch_metrics import CloudWatchMetric
from cluster_facts.log_lines import ATTEMPT_FILTER, ATTEMPT_PATTERN, NODE_CHECK_FILTER, NODE_CHECK_PATTERN
from cluster_facts.node_check import NODE_CHECK_NAMESPACE

__all__ = [
    "THROUGHPUT_PATTERN",
    "TRAINING_LINE_FILTER",
    "TrainingDashboard",
    "dashboard_url",
]

# The BERT script's log line (aws-neuron-samples dp_bert_large_hf_pretrain_hdf5.py, Logger.log):
#   LOG <asctime> - (<epoch>, <step>) step_loss : <.4f> learning_rate : <.2e> throughput : <.2f> [grad-norm : <x>]
# printed by the root rank only; torchrun's --tee prefixes it with "[<local rank>]:". Plain regex
# syntax only (character classes, literals, named groups), which Logs Insights and Python agree on.
TRAINING_LINE_FILTER = "step_loss : [-+.0-9a-z]+ learning_rate : [-+.0-9eE]+ throughput : [0-9]"
THROUGHPUT_PATTERN = (
    r"\((?<epoch>[0-9]+), (?<step>[0-9]+)\) step_loss : (?<step_loss>[-+.0-9a-z]+) "
    r"learning_rate : (?<learning_rate>[-+.0-9eE]+) throughput : (?<throughput>[0-9.]+)"
)

_NODE = ("ClusterName", "InstanceId", "NodeName")


def dashboard_url(*, region: str, dashboard_name: str) -> str:
    """The console address of a dashboard (commercial, China and GovCloud partitions)."""
    if region.startswith("cn-"):
        host = "console.amazonaws.cn"
    elif region.startswith("us-gov-"):
        host = "console.amazonaws-us-gov.com"
    else:
        host = f"{region}.console.aws.amazon.com"
    return f"https://{host}/cloudwatch/home?region={region}#dashboards/dashboard/{dashboard_name}"


def _search(metric: CloudWatchMetric, *, cluster_name: str, statistic: str, period: int) -> str:
    """SEARCH over the node-level dimension set of ``metric`` in this cluster (one series per node)."""
    schema = ",".join([metric.namespace, *sorted(metric.dimensions(*_NODE))])
    return (
        f'SEARCH(\'{{{schema}}} MetricName="{metric.name}" ClusterName="{cluster_name}"\', '
        f"'{statistic}', {period})"
    )


@dataclass(frozen=True)
class _Widgets:
    """The dashboard's rows, top to bottom, for one cluster (each method builds one row)."""

    cluster_name: str
    file_system_id: str
    teams: str
    """The training namespaces, as a Logs Insights list."""
    period_seconds: int

    @property
    def period(self) -> Duration:
        return Duration.seconds(self.period_seconds)

    @property
    def log_group(self) -> str:
        return metrics.application_log_group(self.cluster_name)

    def per_node(self, metric: CloudWatchMetric, statistic: str, *, total: bool) -> cloudwatch.MathExpression:
        search = _search(
            metric, cluster_name=self.cluster_name, statistic=statistic, period=self.period_seconds
        )
        intervals = self.period_seconds // metrics.CONTAINER_INSIGHTS_INTERVAL_SECONDS
        return cloudwatch.MathExpression(
            # A Sum over the period holds one datapoint per device per interval.
            expression=f"{search} / {intervals}" if total else search,
            label="",
            period=self.period,
        )

    def fsx(self, metric: CloudWatchMetric, label: str, *, statistic: str, seconds: int) -> cloudwatch.Metric:
        metric.dimensions("FileSystemId")
        return cloudwatch.Metric(
            namespace=metric.namespace,
            metric_name=metric.name,
            dimensions_map={"FileSystemId": self.file_system_id},
            statistic=statistic,
            label=label,
            period=Duration.seconds(seconds),
        )

    def header(self) -> list[cloudwatch.IWidget]:
        return [
            cloudwatch.TextWidget(
                markdown=(
                    f"# Trainium cluster {self.cluster_name}\n"
                    "Per-node graphs show one line per Trainium node (Container Insights, "
                    f"{self.period_seconds} s periods). Training throughput and loss come from the "
                    f"BERT script's log lines in `{self.log_group}`. TensorBoard and what each "
                    "graph means: docs/health.md."
                ),
                width=24,
                height=2,
            )
        ]

    def neuron(self) -> list[cloudwatch.IWidget]:
        return [
            cloudwatch.GraphWidget(
                title="NeuronCore utilization per node (%)",
                left=[self.per_node(metrics.node_neuroncore_utilization, "Average", total=False)],
                left_y_axis=cloudwatch.YAxisProps(min=0, max=100, show_units=False),
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Neuron device memory used per node (bytes)",
                left=[self.per_node(metrics.node_neurondevice_runtime_memory_used_bytes, "Sum", total=True)],
                left_y_axis=cloudwatch.YAxisProps(min=0, show_units=False),
                width=12,
            ),
        ]

    def efa(self) -> list[cloudwatch.IWidget]:
        return [
            cloudwatch.GraphWidget(
                title="EFA received per node (bytes/s)",
                left=[self.per_node(metrics.node_efa_rx_bytes, "Sum", total=True)],
                left_y_axis=cloudwatch.YAxisProps(min=0, show_units=False),
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="EFA transmitted per node (bytes/s)",
                left=[self.per_node(metrics.node_efa_tx_bytes, "Sum", total=True)],
                left_y_axis=cloudwatch.YAxisProps(min=0, show_units=False),
                width=12,
            ),
        ]

    def nodes_reporting(self) -> cloudwatch.MathExpression:
        return cloudwatch.MathExpression(
            # One series per node reporting Neuron hardware counters: each becomes 1, then summed.
            expression="SUM(nodes * 0 + 1)",
            using_metrics={
                "nodes": cloudwatch.MathExpression(
                    expression=_search(
                        metrics.node_neurondevice_hw_ecc_events_total,
                        cluster_name=self.cluster_name,
                        statistic="Maximum",
                        period=self.period_seconds,
                    ),
                    label="",
                    period=self.period,
                )
            },
            label="Trainium nodes",
            period=self.period,
        )

    def fsx_rate(self, metric: CloudWatchMetric, label: str) -> cloudwatch.MathExpression:
        """Bytes/s: the period's Sum over its seconds."""
        return cloudwatch.MathExpression(
            expression=f"{label} / {self.period_seconds}",
            using_metrics={label: self.fsx(metric, label, statistic="Sum", seconds=self.period_seconds)},
            label=label,
            period=self.period,
        )

    def capacity(self) -> list[cloudwatch.IWidget]:
        return [
            cloudwatch.GraphWidget(
                title="Trainium nodes",
                left=[self.nodes_reporting()],
                left_y_axis=cloudwatch.YAxisProps(min=0, show_units=False),
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="FSx for Lustre throughput (bytes/s)",
                left=[
                    self.fsx_rate(metrics.fsx_data_read_bytes, "read"),
                    self.fsx_rate(metrics.fsx_data_write_bytes, "write"),
                ],
                left_y_axis=cloudwatch.YAxisProps(min=0, show_units=False),
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="FSx for Lustre free capacity (bytes)",
                left=[self.fsx(metrics.fsx_free_data_storage_capacity, "free", statistic="Sum", seconds=60)],
                left_y_axis=cloudwatch.YAxisProps(min=0, show_units=False),
                width=8,
            ),
        ]

    def query(
        self, title: str, lines: Sequence[str], *, table: bool, width: int
    ) -> cloudwatch.LogQueryWidget:
        return cloudwatch.LogQueryWidget(
            title=title,
            log_group_names=[self.log_group],
            query_lines=list(lines),
            view=cloudwatch.LogQueryVisualizationType.TABLE
            if table
            else cloudwatch.LogQueryVisualizationType.LINE,
            width=width,
        )

    def training(self) -> list[cloudwatch.IWidget]:
        lines = [
            "fields @timestamp",
            f"filter kubernetes.namespace_name in {self.teams} and log like /{TRAINING_LINE_FILTER}/",
            f"parse log /{THROUGHPUT_PATTERN}/",
        ]
        return [
            self.query(
                "Training throughput (sequences/s, from the script's log)",
                [*lines, f"stats avg(throughput) as sequences_per_second by bin({self.period_seconds}s)"],
                table=False,
                width=12,
            ),
            self.query(
                "Latest step per training pod",
                [
                    *lines,
                    (
                        "stats latest(step) as step, latest(step_loss) as loss, "
                        "latest(throughput) as sequences_per_second, max(@timestamp) as at "
                        "by kubernetes.pod_name"
                    ),
                ],
                table=True,
                width=12,
            ),
        ]

    def runs(self) -> list[cloudwatch.IWidget]:
        attempts = [
            "fields @timestamp",
            f"filter kubernetes.namespace_name in {self.teams} and log like /{ATTEMPT_FILTER}/",
            f"parse log /{ATTEMPT_PATTERN}/",
        ]
        return [
            self.query(
                "Runs: restarts, time lost, nodes replaced",
                [
                    *attempts,
                    (
                        "stats max(lost_seconds) as lost, sum(node_changed) as replaced, "
                        "min(@timestamp) as started by run, attempt"
                    ),
                    (
                        "stats max(attempt) as restarts, sum(lost) as seconds_lost, "
                        "sum(replaced) as nodes_replaced, max(started) as latest_attempt by run"
                    ),
                    "sort latest_attempt desc",
                ],
                table=True,
                width=12,
            ),
            self.query(
                "Restarts: when, what each cost, replaced nodes",
                [
                    *attempts,
                    "filter attempt > 0",
                    (
                        "stats min(@timestamp) as started, max(lost_seconds) as seconds_lost, "
                        "sum(node_changed) as nodes_replaced, latest(resume_step) as resumed_from_step "
                        "by run, attempt"
                    ),
                    "sort started desc",
                ],
                table=True,
                width=12,
            ),
        ]

    def node_checks(self) -> list[cloudwatch.IWidget]:
        checks = [
            "fields @timestamp",
            f'filter kubernetes.namespace_name = "{NODE_CHECK_NAMESPACE}" and log like /{NODE_CHECK_FILTER}/',
            f"parse log /{NODE_CHECK_PATTERN}/",
        ]
        return [
            self.query(
                "Trainium nodes held by the node check",
                [
                    *checks,
                    'filter state = "held"',
                    f"stats count_distinct(node) as nodes_held by bin({self.period_seconds}s)",
                ],
                table=False,
                width=8,
            ),
            self.query(
                "Held nodes: why, since when",
                [
                    *checks,
                    'filter state = "held"',
                    "stats latest(reason) as why, min(@timestamp) as since, max(@timestamp) as last_seen by node",
                    "sort last_seen desc",
                ],
                table=True,
                width=8,
            ),
            self.query(
                "Node check: verdicts and replacements",
                [
                    *checks,
                    'filter state != "held"',
                    "stats count(*) as nodes by state, reason",
                    "sort nodes desc",
                ],
                table=True,
                width=8,
            ),
        ]


class TrainingDashboard(Construct):
    """The dashboard ``dashboard_name`` of the cluster ``cluster_name``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        dashboard_name: str,
        file_system_id: str,
        training_namespaces: Sequence[str],
        period_seconds: int,
    ) -> None:
        super().__init__(scope, construct_id)
        if period_seconds % metrics.CONTAINER_INSIGHTS_INTERVAL_SECONDS:
            raise ValueError(
                f"period_seconds must be a multiple of {metrics.CONTAINER_INSIGHTS_INTERVAL_SECONDS}, "
                f"got {period_seconds}"
            )
        self.dashboard_name = dashboard_name
        rows = _Widgets(
            cluster_name=cluster_name,
            file_system_id=file_system_id,
            teams=json.dumps(sorted(training_namespaces)),
            period_seconds=period_seconds,
        )
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=dashboard_name,
            # Each widget keeps its own period: the per-node totals divide by it.
            period_override=cloudwatch.PeriodOverride.INHERIT,
            default_interval=Duration.hours(6),
            widgets=[
                rows.header(),
                rows.neuron(),
                rows.efa(),
                rows.capacity(),
                rows.training(),
                rows.runs(),
                rows.node_checks(),
            ],
        )
