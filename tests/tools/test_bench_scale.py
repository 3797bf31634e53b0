"""`make bench-scale`'s configuration builder and report (tests/cluster/scale.py, bench_scale.py),
without a cluster: the bench itself is measured, not a timed test (docs/performance.md)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from config import parse_config
from tests.cluster.audit import client_load
from tests.cluster.bench_scale import (
    VOLCANO_LATENCIES,
    gang_figures,
    labeled_sums,
    metric_sums,
    volcano_spent,
)
from tests.cluster.scale import (
    AUTOSCALED_GROUP,
    BENCH_SIZES,
    MAX_GROUP_NODES,
    Measurement,
    ScaleSettings,
    format_growth,
    format_report,
    gang_run,
    group_sizes,
    percentile,
    process_usage,
    scale_config,
    settings_for_size,
    settings_from,
    sizes_from,
    small_jobs_by_team,
    small_run,
)


@pytest.mark.parametrize(
    "settings", [ScaleSettings(), ScaleSettings(nodes=2048), ScaleSettings(nodes=4096, teams=8)]
)
def test_the_configuration_passes_validation_with_its_nodes_teams_and_gangs(settings: ScaleSettings) -> None:
    config = parse_config(scale_config(settings))
    made = [g for g in config.trainium.node_groups if g.name != AUTOSCALED_GROUP]
    assert sum(g.max_size for g in made) == settings.nodes
    assert all(g.max_size <= MAX_GROUP_NODES for g in made)
    assert {g.instance_type for g in made} == {"trn1.32xlarge", "trn2.48xlarge"}
    assert len(config.teams) == settings.teams
    groups = {g.name: g for g in config.trainium.node_groups}
    runs = {run.name: run for run in config.runs}
    for size in settings.gangs:
        run = runs[gang_run(size)]
        team = next(t for t in config.teams if t.name == run.team)
        assert run.nodes == size and not run.apply
        assert groups[team.node_groups[0]].max_size >= size
    # Each gang is measured then deleted; the one-node runs, spread over the teams, fit at once.
    held: dict[str, int] = {}
    for index, jobs in enumerate(small_jobs_by_team(settings)):
        run = runs[small_run(index)]
        team = next(t for t in config.teams if t.name == run.team)
        assert run.nodes == 1 and not run.apply and team.quota.jobs >= jobs
        held[team.node_groups[0]] = held.get(team.node_groups[0], 0) + jobs
    assert sum(held.values()) == settings.small_jobs
    assert all(nodes <= groups[group].max_size for group, nodes in held.items())
    scaled = runs["autoscaled"]
    assert scaled.node_group == AUTOSCALED_GROUP and scaled.nodes == groups[AUTOSCALED_GROUP].max_size
    assert groups[AUTOSCALED_GROUP].min_size == 0


def test_a_small_configuration_and_one_without_the_autoscaler() -> None:
    config = parse_config(
        scale_config(ScaleSettings(nodes=64, teams=2, gangs=(16, 32), small_jobs=8, autoscaled=0))
    )
    assert [(g.name, g.max_size) for g in config.trainium.node_groups] == [("g00-trn1", 64)]
    assert {run.name for run in config.runs} == {"gang-16", "gang-32", "one-team000", "one-team001"}


def test_groups_split_evenly_and_never_above_the_largest() -> None:
    assert group_sizes(2048) == [512] * 4
    assert group_sizes(1000) == [500, 500]
    assert group_sizes(513) == [257, 256]
    assert group_sizes(7) == [7]


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (ScaleSettings(nodes=256, gangs=(512,), small_jobs=0), "GANG=512"),
        (ScaleSettings(nodes=2048, teams=2), "TEAMS=2"),
        (ScaleSettings(nodes=64, teams=2, gangs=(8,), small_jobs=100), "JOBS=100"),
    ],
)
def test_bad_settings_are_one_line_naming_the_variable(settings: ScaleSettings, named: str) -> None:
    (problem,) = settings.problems()
    assert problem.startswith(named)
    with pytest.raises(ValueError, match=named):
        scale_config(settings)


def test_settings_from_the_environment() -> None:
    assert settings_from({}) == ScaleSettings()
    read = settings_from({"NODES": "256", "TEAMS": "4", "GANG": "8, 32", "JOBS": "0", "AUTOSCALED": "0"})
    assert read == ScaleSettings(nodes=256, teams=4, gangs=(8, 32), small_jobs=0, autoscaled=0)


def test_percentiles_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50 and percentile(values, 0.99) == 99 and percentile(values, 1) == 100
    assert math.isnan(percentile([], 0.5))


def test_process_usage_reads_proc() -> None:
    stat = "123 (kube apiserver) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1 0 100 2000000 500"
    status = "Name:\tkube-apiserver\nVmRSS:\t  204800 kB\n"
    assert process_usage(stat, status, 100) == (3.0, 200.0)


def test_gang_figures_from_the_servers_timestamps() -> None:
    job = {"metadata": {"creationTimestamp": "2026-11-28T10:00:00Z"}}

    def pod(created: str, bound: str) -> dict[str, object]:
        return {
            "metadata": {"creationTimestamp": created},
            "status": {
                "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": bound}]
            },
        }

    pods = [pod("2026-11-28T10:00:01Z", f"2026-11-28T10:00:{second:02d}Z") for second in (3, 4, 4, 9)]
    figures = gang_figures(job, pods)
    assert figures == {
        "pods_made": 1.0,
        "first_bound": 3.0,
        "p50_bound": 4.0,
        "p99_bound": 9.0,
        "all_bound": 9.0,
    }


def test_metric_sums_over_labels() -> None:
    text = (
        "# HELP apiserver_request_total x\n"
        'apiserver_request_total{verb="GET",code="200"} 10\n'
        'apiserver_request_total{verb="LIST",code="200"} 2.5e+01\n'
        'apiserver_request_total_other{verb="GET"} 99\n'
    )
    assert metric_sums(text, ["apiserver_request_total", "absent"]) == {
        "apiserver_request_total": 35.0,
        "absent": 0.0,
    }


def test_volcanos_time_while_a_gang_waited_is_split_by_action_and_plugin() -> None:
    """Recorded lines of Volcano 1.15.1's scheduler /metrics (names and labels as it serves them)."""

    def reading(
        e2e_ms: float, sessions: int, open_ms: float, allocate_ms: float, nodeorder_ms: float
    ) -> dict[str, float]:
        text = (
            "# TYPE volcano_e2e_scheduling_latency_milliseconds histogram\n"
            'volcano_e2e_scheduling_latency_milliseconds_bucket{le="5"} 1\n'
            f"volcano_e2e_scheduling_latency_milliseconds_sum {e2e_ms}\n"
            f"volcano_e2e_scheduling_latency_milliseconds_count {sessions}\n"
            f"volcano_open_session_duration_milliseconds_sum {open_ms}\n"
            f'volcano_action_scheduling_latency_milliseconds_sum{{action="allocate"}} {allocate_ms}\n'
            'volcano_action_scheduling_latency_milliseconds_count{action="allocate"} 3\n'
            'volcano_action_scheduling_latency_milliseconds_sum{action="backfill"} 10\n'
            f'volcano_plugin_scheduling_latency_milliseconds_sum{{OnSession="OnSessionOpen",plugin="nodeorder"}} {nodeorder_ms}\n'
            'volcano_task_scheduling_latency_milliseconds_sum{stage="Bound"} 5\n'
        )
        return labeled_sums(text, VOLCANO_LATENCIES)

    before = reading(1000, 10, 500, 2000, 100)
    assert 'volcano_task_scheduling_latency_milliseconds_sum{stage="Bound"}' not in before
    spent = volcano_spent(before, reading(81000, 50, 10500, 22000, 3100))
    assert spent["sessions"] == 40 and spent["sessions s"] == 80.0
    assert spent["opening"] == 10.0 and spent["closing"] == 50.0
    assert list(spent)[4:] == ["action=allocate", "OnSession=OnSessionOpen,plugin=nodeorder"]
    assert spent["action=allocate"] == 20.0 and spent["OnSession=OnSessionOpen,plugin=nodeorder"] == 3.0


def test_the_report_has_every_section() -> None:
    result = Measurement(
        settings=ScaleSettings(nodes=64, teams=2, gangs=(16,), small_jobs=0), machine="2 cores"
    )
    result.phases["gangs"] = 12.345
    result.gangs.append(
        {
            "size": 16,
            "pods_made": 1.0,
            "first_bound": 2.0,
            "p50_bound": 2.0,
            "p99_bound": 3.0,
            "all_bound": 3.0,
            "volcano": {"sessions": 3.0, "sessions s": 1.5, "action=allocate": 1.25},
        }
    )
    result.controllers.append({"name": "gang watchdog", "seconds": 0.5, "requests": 4.0, "objects": 100.0})
    result.volcano = {"cycle ms, mean": 12.0}
    result.api = {"requests/s during the runs": float("nan")}
    result.processes = {"kube-apiserver": {"cpu_seconds": 10.0, "peak_rss_mib": 300.0}}
    result.clients = [{"client": "system:node:x (kwok)", "requests": 10, "per_s": 1.25, "percent": 62.5}]
    report = format_report(result)
    for expected in (
        "gangs 16",
        "12.35",
        "gang watchdog",
        "kube-apiserver",
        "300.00",
        "failures: none",
        "16 nodes: sessions 3.0, sessions s 1.5, action=allocate 1.2",
    ):
        assert expected in report
    (client_line,) = [line for line in report.splitlines() if line.startswith("system:node:x (kwok)")]
    assert client_line.split()[-3:] == ["10", "1.25", "62.50"]
    (api_line,) = [line for line in report.splitlines() if line.startswith("requests/s during the runs")]
    assert api_line.endswith(" -")
    result.failures.append("gang bench-16 not bound")
    assert "failures: gang bench-16 not bound" in format_report(result)


@pytest.mark.parametrize("nodes", BENCH_SIZES)
def test_each_size_of_the_series_is_a_valid_configuration(nodes: int) -> None:
    settings = settings_for_size(nodes)
    assert settings.problems() == []
    config = parse_config(scale_config(settings))
    assert len(config.teams) == 8
    assert 8 in settings.gangs  # the gang every size has: its bind time compares across sizes
    assert settings.small_jobs == min(1000, nodes // 2)


def test_the_series_reaches_a_512_node_gang_and_a_thousand_jobs_at_2048_nodes() -> None:
    largest = settings_for_size(max(BENCH_SIZES))
    assert (largest.nodes, max(largest.gangs), largest.small_jobs) == (2048, 512, 1000)


def test_the_series_runs_unless_nodes_names_one_size() -> None:
    assert [s.nodes for s in sizes_from({}) or []] == list(BENCH_SIZES)
    assert [s.nodes for s in sizes_from({"SIZES": "64, 256", "TEAMS": "4"}) or []] == [64, 256]
    assert {s.teams for s in sizes_from({"SIZES": "64,256", "TEAMS": "4"}) or []} == {4}
    assert sizes_from({"NODES": "1024"}) is None


def _measured(nodes: int, bound: float, watchdog: float) -> Measurement:
    result = Measurement(settings=settings_for_size(nodes))
    result.gangs.append(
        {
            "size": 8,
            "pods_made": 1.0,
            "first_bound": 1.0,
            "p50_bound": 1.0,
            "p99_bound": bound,
            "all_bound": bound,
        }
    )
    result.controllers.append(
        {"name": "gang watchdog", "seconds": watchdog, "requests": 10.0, "objects": 1.0}
    )
    return result


def test_the_growth_table_compares_each_size_with_the_one_before() -> None:
    table = format_growth([_measured(64, 2.0, 0.5), _measured(256, 3.0, 2.0), _measured(1024, 3.0, 9.0)])
    header, *rows = table.splitlines()[1:]
    assert header.split() == ["figure", "64", "nodes", "256", "nodes", "growth", "1024", "nodes", "growth"]
    (bound,) = [r for r in rows if r.startswith("gang of 8: p99 bound s")]
    assert bound.split()[-5:] == ["2.00", "3.00", "x1.5/x4", "3.00", "x1.0/x4"]
    (watchdog,) = [r for r in rows if r.startswith("gang watchdog: pass s")]
    assert watchdog.split()[-2:] == ["9.00", "x4.5/x4"]  # more than linear: the table shows it
    (missing,) = [r for r in rows if r.startswith("etcd: CPU s")]
    assert missing.split()[-1] == "-"


AUDIT_SAMPLE = Path(__file__).parent.parent / "cluster" / "audit_sample.jsonl"
"""Lines of the API server's audit log of a `make bench-scale` run (2026-11-28, kube-apiserver
1.36.3, tests/cluster/audit.py's policy): one or a few requests of each kind of client."""


def test_requests_are_counted_per_client_from_the_audit_log() -> None:
    lines = AUDIT_SAMPLE.read_text().splitlines()
    received = json.loads(lines[-1])
    # Left out: a stage the policy omits, and the last line of a log still being written.
    lines += [json.dumps({**received, "stage": "RequestReceived"}), lines[-1][:300]]
    day = datetime(2026, 11, 28, tzinfo=UTC)
    load = client_load(lines, day, day + timedelta(days=1))
    assert load.requests == {
        "cluster-test-admin (kubectl)": 2,
        "cluster-test-admin (kwok)": 2,
        "system:apiserver (kube-apiserver)": 1,
        "kube-controller-manager (its controllers' service accounts)": 2,
        "system:kube-scheduler (kube-scheduler)": 1,
        "system:serviceaccount:volcano-system:volcano-scheduler (scheduler)": 2,
        "system:serviceaccount:trainium-system:gang-watchdog (Python-urllib)": 3,
    }
    assert (load.total, load.platform) == (13, 3)
    assert load.platform_share == pytest.approx(3 / 13)
    # The window: from the watchdog's first request on, only its own.
    since = datetime(2026, 11, 28, 12, 28, 57, 143434, tzinfo=UTC)
    assert client_load(lines, since, day + timedelta(days=1)).platform_share == 1.0
    assert client_load(lines, day, since).platform == 0
