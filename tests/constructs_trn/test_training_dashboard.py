"""TrainingDashboard: every metric exactly as published, per-node SEARCH queries, and the training log query.

The dashboard body is read back from the synthesized template (a small stack, and the real one),
and every metric it names is checked against cluster_facts.cloudwatch_metrics, the list kept with
its sources. The Logs Insights patterns are run against lines in the exact format of the BERT
script's Logger.log, wrapped as the add-on's Fluent Bit ships them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from cluster_facts.cloudwatch_metrics import (
    CONTAINER_INSIGHTS,
    DASHBOARD_METRICS,
    FSX,
    application_log_group,
    node_efa_rx_bytes,
)
from cluster_facts.log_lines import (
    ATTEMPT_FILTER,
    ATTEMPT_PATTERN,
    NODE_CHECK_FILTER,
    NODE_CHECK_PATTERN,
    NODE_CHECK_STATES,
)
from cluster_facts.node_check import NODE_CHECK_NAMESPACE
from cluster_facts.stack_outputs import StackOutput
from config import load_config, parse_config
from constructs_trn.training_dashboard import (
    THROUGHPUT_PATTERN,
    TRAINING_LINE_FILTER,
    TrainingDashboard,
    dashboard_url,
)
from tests.conftest import DEFAULT_CONFIG, Synthesized, synthesize
from tests.k8s_charts.runs.test_training_run import environment, job, pod_for, with_verified_script
from tests.pod_programs import program
from tests.yaml_edits import with_change

FILE_SYSTEM = "${Ref:FileSystem}"
SEARCH = re.compile(
    r"SEARCH\('\{(?P<schema>[^}]*)\} MetricName=\"(?P<name>[^\"]+)\" ClusterName=\"(?P<cluster>[^\"]+)\"', "
    r"'(?P<statistic>[A-Za-z]+)', (?P<period>[0-9]+)\)"
)


def body_of(template: dict[str, Any]) -> dict[str, Any]:
    """The dashboard body as JSON, each CloudFormation reference written as ``${Ref:<id>}``."""
    [dashboard] = [r for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Dashboard"]
    body = dashboard["Properties"]["DashboardBody"]
    if isinstance(body, dict):
        separator, parts = body["Fn::Join"]
        body = separator.join(part if isinstance(part, str) else f"${{Ref:{part['Ref']}}}" for part in parts)
    result: dict[str, Any] = json.loads(body)
    return result


def small_dashboard(period_seconds: int = 300) -> dict[str, Any]:
    app = cdk.App()
    stack = cdk.Stack(app, "Dashboard", env=cdk.Environment(account="111122223333", region="us-west-2"))
    file_system = cdk.CfnParameter(stack, "FileSystem").value_as_string
    TrainingDashboard(
        stack,
        "Board",
        cluster_name="trn-test",
        dashboard_name="trn-test-us-west-2",
        file_system_id=file_system,
        training_namespaces=["training", "research"],
        period_seconds=period_seconds,
    )
    return body_of(Template.from_stack(stack).to_json())


@pytest.fixture(scope="module")
def body() -> dict[str, Any]:
    return small_dashboard()


def widgets(body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [widget["properties"] for widget in body["widgets"] if widget["type"] == kind]


def metric_entries(body: dict[str, Any]) -> list[list[Any]]:
    return [entry for properties in widgets(body, "metric") for entry in properties["metrics"]]


def used_metrics(body: dict[str, Any]) -> list[tuple[str, str, frozenset[str], dict[str, Any]]]:
    """(namespace, name, dimension names, details) of every metric the body reads, SEARCHes included."""
    found = []
    for entry in metric_entries(body):
        options = entry[-1] if isinstance(entry[-1], dict) else {}
        if "expression" in options:
            for match in SEARCH.finditer(options["expression"]):
                namespace, *dimensions = match["schema"].split(",")
                found.append((namespace, match["name"], frozenset(dimensions), match.groupdict()))
        else:
            namespace, name, *pairs = entry[:-1] if options else entry
            assert "." not in (namespace, name), "no shorthand: every entry names its metric"
            dimensions = dict(zip(pairs[::2], pairs[1::2], strict=True))
            found.append((namespace, name, frozenset(dimensions), {"values": dimensions, **options}))
    return found


def test_every_metric_is_named_and_dimensioned_as_published(body: dict[str, Any]) -> None:
    used = used_metrics(body)
    assert {(namespace, name) for namespace, name, _, _ in used} == set(DASHBOARD_METRICS)
    for namespace, name, dimensions, _ in used:
        assert dimensions in DASHBOARD_METRICS[(namespace, name)].dimension_sets, (name, sorted(dimensions))


def test_per_node_graphs_search_the_node_dimension_set_of_this_cluster(body: dict[str, Any]) -> None:
    searches = [details for namespace, _, _, details in used_metrics(body) if namespace == CONTAINER_INSIGHTS]
    assert len(searches) == 5
    for details in searches:
        assert details["schema"].split(",")[1:] == ["ClusterName", "InstanceId", "NodeName"]
        assert (details["cluster"], details["period"]) == ("trn-test", "300")


def test_per_node_totals_divide_the_sum_by_the_collection_intervals_in_the_period(
    body: dict[str, Any],
) -> None:
    by_title = {p["title"]: p for p in widgets(body, "metric")}
    [[received]] = by_title["EFA received per node (bytes/s)"]["metrics"]
    assert received["expression"].endswith(" / 5")  # 300 s of 60 s datapoints, summed over the devices
    assert f'MetricName="{node_efa_rx_bytes.name}"' in received["expression"]
    assert "'Sum', 300" in received["expression"]
    [[utilization]] = by_title["NeuronCore utilization per node (%)"]["metrics"]
    assert "'Average', 300)" in utilization["expression"] and " / " not in utilization["expression"]
    # With another period, the divisor follows.
    other = {p["title"]: p for p in widgets(small_dashboard(900), "metric")}
    [[received_900]] = other["EFA received per node (bytes/s)"]["metrics"]
    assert "'Sum', 900) / 15" in received_900["expression"]


def test_widgets_keep_their_periods(body: dict[str, Any]) -> None:
    # The per-node divisors and the FSx bytes/s assume the period each widget sets.
    assert body["periodOverride"] == "inherit"


def test_fsx_graphs_read_the_stacks_file_system(body: dict[str, Any]) -> None:
    fsx = [(name, details) for namespace, name, _, details in used_metrics(body) if namespace == FSX]
    assert {name for name, _ in fsx} == {"DataReadBytes", "DataWriteBytes", "FreeDataStorageCapacity"}
    for _, details in fsx:
        assert details["values"] == {"FileSystemId": FILE_SYSTEM}
        assert details["stat"] == "Sum"
    by_title = {p["title"]: p for p in widgets(body, "metric")}
    expressions = [
        e[0]["expression"] for e in by_title["FSx for Lustre throughput (bytes/s)"]["metrics"] if len(e) == 1
    ]
    assert expressions == ["read / 300", "write / 300"]


def test_trainium_node_count_counts_the_nodes_reporting(body: dict[str, Any]) -> None:
    by_title = {p["title"]: p for p in widgets(body, "metric")}
    visible, hidden = by_title["Trainium nodes"]["metrics"]
    assert visible[0]["expression"] == "SUM(nodes * 0 + 1)"
    assert hidden[0]["id"] == "nodes" and hidden[0]["visible"] is False
    assert 'MetricName="node_neurondevice_hw_ecc_events_total"' in hidden[0]["expression"]


def test_log_widgets_query_the_clusters_application_log_group(body: dict[str, Any]) -> None:
    queries = [p["query"] for p in widgets(body, "log") if "step_loss" in p["query"]]
    assert len(queries) == 2
    for query in queries:
        assert query.startswith(f"SOURCE '{application_log_group('trn-test')}' |")
        # Every team's runs: one namespace per team (Logs Insights' set membership, `in [...]`).
        assert 'filter kubernetes.namespace_name in ["research", "training"]' in query
        assert f"parse log /{THROUGHPUT_PATTERN}/" in query


def test_the_application_log_group_is_the_add_ons() -> None:
    # aws-observability/helm-charts, amazon-cloudwatch-observability values.yaml, application-log.conf:
    # log_group_name /aws/containerinsights/${CLUSTER_NAME}/application
    assert application_log_group("trainium") == "/aws/containerinsights/trainium/application"


def test_a_period_that_is_not_whole_collection_intervals_is_refused() -> None:
    with pytest.raises(ValueError, match="multiple of 60"):
        small_dashboard(90)


@pytest.mark.parametrize(
    ("region", "host"),
    [
        ("us-west-2", "https://us-west-2.console.aws.amazon.com/"),
        ("cn-north-1", "https://console.amazonaws.cn/"),
        ("us-gov-west-1", "https://console.amazonaws-us-gov.com/"),
    ],
)
def test_dashboard_url(region: str, host: str) -> None:
    url = dashboard_url(region=region, dashboard_name="trn")
    assert url == f"{host}cloudwatch/home?region={region}#dashboards/dashboard/trn"


# --- The training log lines --------------------------------------------------------------------------


def bert_log_line(
    epoch: int,
    step: int,
    *,
    step_loss: float,
    learning_rate: float,
    throughput: float,
    grad_norm: float | None = None,
) -> str:
    """Logger.log of dp_bert_large_hf_pretrain_hdf5.py (aws-neuron-samples 4ed5764f), character for character."""
    time_now = time.asctime(time.gmtime(1_700_000_000))
    grad_norm_msg = f"grad-norm : {grad_norm}" if grad_norm else ""
    return (
        f"LOG {time_now} - ({epoch}, {step}) step_loss : {step_loss:.4f} "
        f"learning_rate : {learning_rate:.2e} throughput : {throughput:.2f} "
        f"{grad_norm_msg}"
    )


def fluent_bit_event(line: str, namespace: str = "training") -> str:
    """The CloudWatch event the add-on's Fluent Bit writes for one container line: the cri parser's
    fields and the kubernetes filter's metadata, as JSON (values.yaml application-log.conf)."""
    record = {
        "time": "2026-08-01T12:00:00.123456789Z",
        "stream": "stdout",
        "_p": "F",
        "log": line,
        "kubernetes": {
            "pod_name": "bert-large-0a1b2c3d-worker-0",
            "namespace_name": namespace,
            "container_name": "trainer",
            "host": "ip-10-0-3-17.us-west-2.compute.internal",
        },
    }
    return json.dumps(record)


def python_regex(pattern: str) -> re.Pattern[str]:
    """A Logs Insights regex as Python's: only the named-group spelling differs in the subset used."""
    portable = re.compile(r"\\[dDwWsSbB]|\(\?[=!]|\(\?<[=!]|[*+?}]\?")
    assert not portable.search(pattern), f"{pattern!r} uses a construct whose meaning may differ"
    return re.compile(pattern.replace("(?<", "(?P<"))


LINE_FILTER = python_regex(TRAINING_LINE_FILTER)
THROUGHPUT = python_regex(THROUGHPUT_PATTERN)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            bert_log_line(1, 10, step_loss=4.12345, learning_rate=1e-4, throughput=1234.567),
            ("1", "10", "4.1235", "1.00e-04", "1234.57"),
        ),
        # torchrun --tee prefixes every line with "[<role><local rank>]:" (the role is empty here).
        (
            "[0]:" + bert_log_line(2, 1500, step_loss=1.5, learning_rate=3.75e-5, throughput=98.0),
            ("2", "1500", "1.5000", "3.75e-05", "98.00"),
        ),
        (
            bert_log_line(1, 3, step_loss=9.9, learning_rate=2e-3, throughput=10.0, grad_norm=0.73),
            ("1", "3", "9.9000", "2.00e-03", "10.00"),
        ),
        (
            bert_log_line(1, 4, step_loss=float("nan"), learning_rate=2e-3, throughput=10.0),
            ("1", "4", "nan", "2.00e-03", "10.00"),
        ),
    ],
)
def test_the_query_reads_the_scripts_log_line(line: str, expected: tuple[str, ...]) -> None:
    log = json.loads(fluent_bit_event(line))["log"]
    assert LINE_FILTER.search(log)
    match = THROUGHPUT.search(log)
    assert match is not None
    assert (
        match["epoch"],
        match["step"],
        match["step_loss"],
        match["learning_rate"],
        match["throughput"],
    ) == (expected)


@pytest.mark.parametrize(
    "line",
    [
        # print(flags): names the throughput argument but is not a step.
        "[0]:Namespace(batch_size=16, expected_average_throughput=0.0, grad_accum_usteps=32, lr=0.0004)",
        # The per-shard summary and the final metrics lines.
        (
            "[0]:Epoch 1 step 120 file index 3 end Tue Nov 14 22:13:20 2023 loss 3.1 perf 1234.5 seq/sec "
            "(at train microstep 3840 time 111 from beginning time 0)"
        ),
        '[0]:{"MetricName": "Throughput", "MeasuredValue": 1234.5, "Units": "seq/s"}',
        "[0]:Checkpointing...",
    ],
)
def test_the_query_skips_other_lines(line: str) -> None:
    assert not LINE_FILTER.search(line)


# --- In the stack ----------------------------------------------------------------------------------


def test_the_stacks_dashboard_reads_only_published_metrics(default_stack: Synthesized) -> None:
    body = body_of(default_stack.json)
    for namespace, name, dimensions, details in used_metrics(body):
        assert dimensions in DASHBOARD_METRICS[(namespace, name)].dimension_sets
        if namespace == CONTAINER_INSIGHTS:
            assert details["cluster"] == default_stack.config.name
    file_system, _ = default_stack.only("AWS::FSx::FileSystem")
    fsx_values = [d["values"] for ns, _, _, d in used_metrics(body) if ns == FSX]
    assert fsx_values and all(v == {"FileSystemId": f"${{Ref:{file_system}}}"} for v in fsx_values)


def test_the_dashboard_url_is_a_stack_output(default_stack: Synthesized) -> None:
    [dashboard] = default_stack.resources("AWS::CloudWatch::Dashboard").values()
    name = dashboard["Properties"]["DashboardName"]
    assert name == "trainium-us-west-2"
    output = default_stack.json["Outputs"][StackOutput.DASHBOARD_URL.value]["Value"]
    assert output == dashboard_url(region="us-west-2", dashboard_name=name)


def test_dashboard_and_tensorboard_can_be_turned_off() -> None:
    data = load_config(DEFAULT_CONFIG).model_dump(mode="json")
    config = parse_config(with_change(data, "observability", {"dashboard": False, "tensorboard": False}))
    synthesized = synthesize(config)
    assert synthesized.resources("AWS::CloudWatch::Dashboard") == {}
    assert StackOutput.DASHBOARD_URL.value not in synthesized.json["Outputs"]
    # TensorBoard is rendered for review but not applied: no custom resource carries it.
    manifests = json.dumps(
        [
            r["Properties"]
            for r in synthesized.json["Resources"].values()
            if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
        ]
    )
    assert "tensorboard" not in manifests


# --- Runs and the node check: the lines the pods print, the patterns that read them -------------------

ATTEMPT = python_regex(ATTEMPT_PATTERN)
NODE_CHECK = python_regex(NODE_CHECK_PATTERN)


def log_queries(body: dict[str, Any]) -> dict[str, str]:
    return {p["title"]: p["query"] for p in widgets(body, "log")}


def test_the_run_and_node_check_widgets_parse_with_the_one_pattern_of_each_line(body: dict[str, Any]) -> None:
    queries = log_queries(body)
    runs = [q for q in queries.values() if f"parse log /{ATTEMPT_PATTERN}/" in q]
    checks = [q for q in queries.values() if f"parse log /{NODE_CHECK_PATTERN}/" in q]
    assert len(runs) == 2 and len(checks) == 3
    for query in runs:
        assert (
            f'filter kubernetes.namespace_name in ["research", "training"] and log like /{ATTEMPT_FILTER}/'
            in query
        )
    for query in checks:
        assert (
            f'filter kubernetes.namespace_name = "{NODE_CHECK_NAMESPACE}" and log like /{NODE_CHECK_FILTER}/'
            in query
        )
    # A restart counts once per attempt, however many replicas report it: grouped by attempt first.
    per_run = queries["Runs: restarts, time lost, nodes replaced"]
    assert per_run.index("by run, attempt") < per_run.index("max(attempt) as restarts")


def test_every_node_check_state_prints_a_line_the_widgets_read() -> None:
    checker = program("node_check")
    assert tuple(checker.STATES) == NODE_CHECK_STATES
    for state in NODE_CHECK_STATES:
        line = checker.status_line(
            "ip-10-0-3-17.us-west-2.compute.internal", state, "EfaErrors", "detail text"
        )
        log = json.loads(fluent_bit_event(line, namespace=NODE_CHECK_NAMESPACE))["log"]
        assert python_regex(NODE_CHECK_FILTER).search(log)
        match = NODE_CHECK.search(log)
        assert match is not None
        assert (match["node"], match["state"], match["reason"]) == (
            "ip-10-0-3-17.us-west-2.compute.internal",
            state,
            "EfaErrors",
        )


@pytest.mark.process
@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("flock") is None, reason="needs bash, flock")
def test_run_worker_prints_one_attempt_line_the_widgets_read(tmp_path: Path) -> None:
    """run_worker.sh itself, three attempts of replica 0: the first; a restart on another node that
    resumes from a checkpoint written 100 s before; a restart on the same node."""
    matching_run = with_verified_script()
    pod = pod_for(matching_run, tmp_path)

    def attempt(version: int, node: str) -> dict[str, str]:
        result, _ = pod.run(index="0", VC_JOB_VERSION=str(version), NODE_NAME=node)
        assert result.returncode == 0, result.stderr
        [line] = [line for line in result.stdout.splitlines() if python_regex(ATTEMPT_FILTER).search(line)]
        match = ATTEMPT.search(json.loads(fluent_bit_event(line))["log"])
        assert match is not None, line
        return match.groupdict()

    rendered = environment(job(matching_run))
    run_id = rendered["RUN_ID"]
    first = attempt(0, "node-a")
    assert first == {
        "run": run_id,
        "attempt": "0",
        "replica": "0",
        "node_changed": "0",
        "resume_step": "none",
        "lost_seconds": "0",
    }
    output = pod.path(rendered["OUTPUT_DIR"])
    checkpoint = output / "ckpt_120.pt"
    checkpoint.write_bytes(b"")
    written = time.time() - 100
    os.utime(checkpoint, (written, written))
    second = attempt(1, "node-b")
    assert (second["attempt"], second["node_changed"], second["resume_step"]) == ("1", "1", "120")
    assert 100 <= int(second["lost_seconds"]) <= 130
    third = attempt(2, "node-b")
    assert (third["attempt"], third["node_changed"], third["resume_step"]) == ("2", "0", "120")
