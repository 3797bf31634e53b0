"""What `make bench-scale` (tests/cluster/bench_scale.py) deploys and how it reports: the configuration
of a cluster of many teams and thousands of Trainium nodes, and the table of what was measured.
Pure functions, no cluster: tests/tools/test_bench_scale.py checks them.

The configuration starts from config/default.yaml and changes only what scale needs: ``groups``
Trainium node groups (trn1.32xlarge and trn2.48xlarge alternating, all in the default's zone)
whose ``max_size`` add up to ``nodes``; ``teams`` teams, team ``i`` on group ``i mod groups``; one
run per gang size (``apply: false``: the bench submits copies of its Job), each on the first team
of a group large enough; and an autoscaled group of ``autoscaled`` nodes at most, no node at the
start, for the autoscaler's scale-up of one gang. It goes through the real validation and plan
(``parse_config``, tests/cluster/plans.py), so every quota, queue and policy is the product's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.cluster.plans import config_data
from tests.conftest import DEFAULT_CONFIG

__all__ = [
    "AUTOSCALED_GROUP",
    "INSTANCE_TYPES",
    "Measurement",
    "ScaleSettings",
    "format_report",
    "gang_run",
    "group_sizes",
    "percentile",
    "process_usage",
    "scale_config",
    "small_jobs_by_team",
    "small_run",
]

INSTANCE_TYPES = ("trn1.32xlarge", "trn2.48xlarge")
"""The shapes of the pre-made groups, alternating (the catalog's names)."""
AUTOSCALED_GROUP = "scale-up"
"""The group the autoscaler raises from zero; its team is the last one."""
MAX_GROUP_NODES = 512
"""The largest pre-made group: a group is one Auto Scaling group in one placement group."""


@dataclass(frozen=True)
class ScaleSettings:
    nodes: int = 1024
    """Sized for one run of about 15 minutes on a 2-core machine (docs/performance.md, "Scale")."""
    teams: int = 20
    gangs: tuple[int, ...] = (64, 128, 256)
    autoscaled: int = 64
    """Nodes of the gang the autoscaler scales up for (0: no autoscaler phase)."""
    small_jobs: int = 100
    """One-node runs queued after the gangs, spread over the teams (the watchdog's and guard's load)."""

    def problems(self) -> list[str]:
        """What is wrong with these settings, one line each, naming the variable."""
        found = []
        if self.nodes < 1:
            found.append(f"NODES={self.nodes}: at least 1")
        if not 1 <= self.teams <= 200:
            found.append(f"TEAMS={self.teams}: 1 to 200")
        groups = len(group_sizes(self.nodes)) if self.nodes >= 1 else 0
        largest = max(group_sizes(self.nodes), default=0)
        for gang in self.gangs:
            if not 1 <= gang <= largest:
                found.append(f"GANG={gang}: 1 to the largest group, {largest} nodes ({groups} groups)")
        if self.teams < groups:
            found.append(f"TEAMS={self.teams}: at least one per node group ({groups} for {self.nodes} nodes)")
        if not found and groups:
            held = _small_jobs_per_group(self)
            over = {g: n for g, n in held.items() if n > group_sizes(self.nodes)[g]}
            if over:
                found.append(
                    f"JOBS={self.small_jobs}: {max(over.values())} one-node runs on a group of "
                    f"{group_sizes(self.nodes)[min(over)]} nodes (they are spread over the TEAMS={self.teams} teams)"
                )
        if self.autoscaled < 0:
            found.append(f"AUTOSCALED={self.autoscaled}: 0 or more")
        return found


def group_sizes(nodes: int) -> list[int]:
    """``nodes`` split into the fewest groups of at most MAX_GROUP_NODES, as even as can be."""
    count = max(1, math.ceil(nodes / MAX_GROUP_NODES))
    base, extra = divmod(nodes, count)
    return [base + (1 if index < extra else 0) for index in range(count)]


def _group_name(index: int) -> str:
    return f"g{index:02d}-{INSTANCE_TYPES[index % len(INSTANCE_TYPES)].split('.')[0]}"


def _team_name(index: int) -> str:
    return f"team{index:03d}"


def gang_run(size: int) -> str:
    return f"gang-{size}"


def small_run(team: int) -> str:
    """The one-node run of team ``team`` that the bench copies into its one-node Jobs."""
    return f"one-{_team_name(team)}"


def small_jobs_by_team(settings: ScaleSettings) -> list[int]:
    """How many of the one-node runs each team submits: spread evenly, the first teams one more."""
    base, extra = divmod(settings.small_jobs, settings.teams)
    return [base + (1 if index < extra else 0) for index in range(settings.teams)]


def _small_jobs_per_group(settings: ScaleSettings) -> dict[int, int]:
    """The one-node runs on each group (team i is on group i mod their number)."""
    count = len(group_sizes(settings.nodes))
    held: dict[int, int] = {}
    for index, jobs in enumerate(small_jobs_by_team(settings)):
        held[index % count] = held.get(index % count, 0) + jobs
    return held


def scale_config(settings: ScaleSettings) -> dict[str, Any]:
    """The configuration's data (module docstring); raises ValueError with ``problems()``."""
    problems = settings.problems()
    if problems:
        raise ValueError("; ".join(problems))
    data = config_data(DEFAULT_CONFIG)
    sizes = group_sizes(settings.nodes)
    groups = [
        {
            "name": _group_name(index),
            "instance_type": INSTANCE_TYPES[index % len(INSTANCE_TYPES)],
            "min_size": 0,
            "max_size": size,
            "capacity_type": "on_demand",
            "capacity_reservation_id": None,
            "placement_group": True,
        }
        for index, size in enumerate(sizes)
    ]
    if settings.autoscaled:
        groups.append({**groups[0], "name": AUTOSCALED_GROUP, "max_size": settings.autoscaled})
    data["trainium"]["node_groups"] = groups
    # A team's quota holds its share of the gangs and small runs at once, and its etcd.
    share = max(small_jobs_by_team(settings))
    pods = max(64, max(settings.gangs, default=1) * 2 + share + 8, settings.autoscaled + 8)
    teams = [
        {
            "name": _team_name(index),
            "node_groups": [groups[index % len(sizes)]["name"]],
            "quota": {"pods": pods, "jobs": max(64, share + len(settings.gangs) + 8)},
        }
        for index in range(settings.teams)
    ]
    if settings.autoscaled:
        teams[-1]["node_groups"] = [*teams[-1]["node_groups"], AUTOSCALED_GROUP]
    data["teams"] = teams
    sizes_run = sorted(set(settings.gangs))
    data["runs"] = [
        _run(size, teams[_team_for(size, sizes, order)]["name"]) for order, size in enumerate(sizes_run)
    ] + [
        {**_run(1, team["name"]), "name": small_run(index)}
        for index, (team, jobs) in enumerate(zip(teams, small_jobs_by_team(settings), strict=True))
        if jobs
    ]
    if settings.autoscaled:
        scaled = _run(settings.autoscaled, teams[-1]["name"])
        data["runs"].append({**scaled, "name": "autoscaled", "node_group": AUTOSCALED_GROUP})
    return data


def _team_for(size: int, sizes: Sequence[int], order: int) -> int:
    """The team of group ``order`` (mod their number; team i is on group i), so the gangs spread
    over the groups; the first group that holds ``size`` nodes when that one does not."""
    wanted = order % len(sizes)
    return wanted if sizes[wanted] >= size else next(i for i, group in enumerate(sizes) if group >= size)


def _run(size: int, team: str) -> dict[str, Any]:
    # The preset's model and image; one accumulation step (the tutorial's global batch is for 2 nodes).
    return {
        "name": gang_run(size),
        "preset": "bert-large",
        "nodes": size,
        "team": team,
        "parameters": {"grad_accum_usteps": 1},
    }


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` 0.5: the median); NaN of nothing."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def process_usage(stat: str, status: str, ticks_per_second: int) -> tuple[float, float]:
    """(CPU seconds, user + system, and resident MiB) from a process's /proc/<pid>/stat and status."""
    # The command name in parentheses may hold spaces: fields count from after its closing one.
    fields = stat.rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / ticks_per_second
    # A process that has exited but not been reaped (a zombie) has no VmRSS line: nothing resident.
    rss_kib = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return cpu, rss_kib / 1024


@dataclass
class Measurement:
    """One bench run's figures (tests/cluster/bench_scale.py fills them in)."""

    settings: ScaleSettings
    machine: str = ""
    phases: dict[str, float] = field(default_factory=dict)
    """Wall seconds of each phase, in order."""
    gangs: list[dict[str, Any]] = field(default_factory=list)
    """Per gang: size, seconds from submit to its pods made, to all bound (p50 and last pod)."""
    controllers: list[dict[str, Any]] = field(default_factory=list)
    """Per platform controller pass: name, seconds, API requests, objects read."""
    autoscaler: dict[str, Any] = field(default_factory=dict)
    processes: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per process: cpu seconds over the run, peak resident MiB seen."""
    api: dict[str, float] = field(default_factory=dict)
    volcano: dict[str, float] = field(default_factory=dict)
    clients: list[dict[str, Any]] = field(default_factory=list)
    """The busiest API clients during the runs: client, requests, per_s, percent (the audit log)."""
    failures: list[str] = field(default_factory=list)


def _rows(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    # The first column (a name) to the left, the figures to the right.
    return [
        line,
        *(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
            for row in cells
        ),
    ]


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.2f}"
    return str(value)


def format_report(result: Measurement) -> str:
    """The table `make bench-scale` prints and writes."""
    s = result.settings
    out = [
        (
            f"bench-scale: {s.nodes} Trainium nodes, {s.teams} teams, gangs {','.join(map(str, s.gangs))}, "
            f"{s.small_jobs} one-node runs, autoscaled gang {s.autoscaled}"
        ),
        f"machine: {result.machine}",
        "",
        "phases (wall seconds)",
        *_rows(["phase", "seconds"], list(result.phases.items())),
        "",
        "gangs (seconds from the Job's creation; every node Ready and its not-ready taint lifted before)",
        *_rows(
            ["nodes", "pods made", "first bound", "p50 bound", "p99 bound", "all bound"],
            [
                [g["size"], g["pods_made"], g["first_bound"], g["p50_bound"], g["p99_bound"], g["all_bound"]]
                for g in result.gangs
            ],
        ),
        "",
        "Volcano's scheduler while each gang waited (seconds: its sessions, the actions' and plugins' parts)",
        *[
            f"  {g['size']} nodes: " + ", ".join(f"{k} {v:.1f}" for k, v in g.get("volcano", {}).items())
            for g in result.gangs
        ],
        "",
        "platform controllers (one pass each, at the end)",
        *_rows(
            ["controller", "seconds", "API requests", "objects read", "MiB read"],
            [
                [c["name"], c["seconds"], c["requests"], c["objects"], c.get("bytes", math.nan) / 2**20]
                for c in result.controllers
            ],
        ),
    ]
    if result.autoscaler:
        out += ["", "cluster autoscaler", *_rows(["figure", "value"], list(result.autoscaler.items()))]
    out += ["", "Volcano scheduler", *_rows(["figure", "value"], list(result.volcano.items()))]
    out += ["", "API server", *_rows(["figure", "value"], list(result.api.items()))]
    if result.clients:
        out += [
            "",
            "API requests per client during the runs (the API server's audit log)",
            *_rows(
                ["client", "requests", "per s", "% of all"],
                [[c["client"], c["requests"], c["per_s"], c["percent"]] for c in result.clients],
            ),
        ]
    out += [
        "",
        "processes (CPU seconds over the run, peak resident MiB sampled)",
        *_rows(
            ["process", "CPU s", "peak RSS MiB"],
            [[name, usage["cpu_seconds"], usage["peak_rss_mib"]] for name, usage in result.processes.items()],
        ),
        "",
        "failures: " + ("; ".join(result.failures) if result.failures else "none"),
    ]
    return "\n".join(out) + "\n"


def settings_from(environment: Mapping[str, str]) -> ScaleSettings:
    """NODES, TEAMS, GANG (comma-separated sizes), AUTOSCALED, JOBS; defaults of ScaleSettings."""
    default = ScaleSettings()
    gangs = environment.get("GANG", "")
    return ScaleSettings(
        nodes=int(environment.get("NODES") or default.nodes),
        teams=int(environment.get("TEAMS") or default.teams),
        gangs=tuple(int(g) for g in gangs.split(",") if g.strip()) if gangs.strip() else default.gangs,
        autoscaled=int(environment.get("AUTOSCALED") or default.autoscaled),
        small_jobs=int(environment.get("JOBS") or default.small_jobs),
    )


__all__ += [
    "BENCH_SIZES",
    "DEFAULT_RESULTS",
    "MAX_GROUP_NODES",
    "format_growth",
    "settings_for_size",
    "settings_from",
    "sizes_from",
]

DEFAULT_RESULTS = Path("bench-scale.txt")
BENCH_SIZES = (64, 256, 1024, 2048)
"""What `make bench-scale` runs without NODES: each size on a control plane of its own, then the
growth from one size to the next (issue #36)."""
_GANGS = (8, 32, 128, 512)


def settings_for_size(nodes: int, teams: int = 8) -> ScaleSettings:
    """One size of the series: gangs of 8 to 512 nodes, each at most a quarter of the nodes (so the
    gang of 8 is in every size: its bind time compares across them), one-node runs for half the
    nodes up to a thousand, and an autoscaled gang of a quarter of them up to 64."""
    return ScaleSettings(
        nodes=nodes,
        teams=teams,
        gangs=tuple(g for g in _GANGS if g <= nodes // 4) or (1,),
        autoscaled=min(64, nodes // 4),
        small_jobs=min(1000, nodes // 2),
    )


def sizes_from(environment: Mapping[str, str]) -> list[ScaleSettings] | None:
    """The series of SIZES (comma-separated node counts, BENCH_SIZES by default) with TEAMS; None
    when NODES names one size (settings_from: every variable as given)."""
    if (environment.get("NODES") or "").strip():
        return None
    sizes = environment.get("SIZES") or ",".join(map(str, BENCH_SIZES))
    teams = int(environment.get("TEAMS") or 8)
    return [settings_for_size(int(size), teams) for size in sizes.split(",") if size.strip()]


def _controller(result: Measurement, name: str, key: str) -> float:
    found = [c.get(key, math.nan) for c in result.controllers if c["name"] == name]
    return float(found[0]) if found else math.nan


def _gang(result: Measurement, pick: Any, key: str) -> float:
    sized = [g for g in result.gangs if isinstance(g["size"], int)]
    chosen = pick(sized) if sized else None
    return float(chosen[key]) if chosen else math.nan


def _process(result: Measurement, name: str, key: str) -> float:
    return float(result.processes.get(name, {}).get(key, math.nan))


_FIGURES: tuple[tuple[str, Any], ...] = (
    ("gang of 8: p99 bound s", lambda r: _gang(r, lambda g: next((x for x in g if x["size"] == 8), None), "p99_bound")),
    ("largest gang: nodes", lambda r: _gang(r, lambda g: max(g, key=lambda x: x["size"]), "size")),
    ("largest gang: p99 bound s", lambda r: _gang(r, lambda g: max(g, key=lambda x: x["size"]), "p99_bound")),
    ("largest gang: all bound s", lambda r: _gang(r, lambda g: max(g, key=lambda x: x["size"]), "all_bound")),
    ("one-node runs: all bound s", lambda r: next((float(g["all_bound"]) for g in r.gangs if not isinstance(g["size"], int)), math.nan)),
    ("autoscaler: s to all nodes made", lambda r: float(r.autoscaler.get("s to all nodes made", math.nan))),
    ("autoscaler: scale-up decisions", lambda r: float(r.autoscaler.get("scale-up decisions", math.nan))),
    ("gang watchdog: pass s", lambda r: _controller(r, "gang watchdog", "seconds")),
    ("gang watchdog: API requests", lambda r: _controller(r, "gang watchdog", "requests")),
    ("gang watchdog: MiB read", lambda r: _controller(r, "gang watchdog", "bytes") / 2**20),
    ("watchdog + guard: pass s", lambda r: _controller(r, "watchdog + stuck-run guard", "seconds")),
    ("watchdog loop: later pass s", lambda r: _controller(r, "watchdog loop: a later pass (from its watches)", "seconds")),
    ("watchdog loop: later pass requests", lambda r: _controller(r, "watchdog loop: a later pass (from its watches)", "requests")),
    ("API server: requests/s", lambda r: float(r.api.get("requests/s during the runs (audit log)", math.nan))),
    ("platform controllers: % of requests", lambda r: float(r.api.get("platform controllers' % of requests", math.nan))),
    ("kube-apiserver: CPU s", lambda r: _process(r, "kube-apiserver", "cpu_seconds")),
    ("kube-apiserver: peak RSS MiB", lambda r: _process(r, "kube-apiserver", "peak_rss_mib")),
    ("etcd: CPU s", lambda r: _process(r, "etcd", "cpu_seconds")),
    ("etcd: peak RSS MiB", lambda r: _process(r, "etcd", "peak_rss_mib")),
    ("failures", lambda r: float(len(r.failures))),
)  # fmt: skip


def _growth(before: float, after: float, nodes: float) -> str:
    if math.isnan(before) or math.isnan(after) or before <= 0:
        return "-"
    return f"x{after / before:.1f}/x{nodes:.0f}"


def format_growth(results: Sequence[Measurement]) -> str:
    """One row per figure: its value at each size and, from the second size on, its growth against
    the nodes' (``x1.9/x4``: the figure grew 1.9-fold while the nodes grew fourfold; at most linear
    while the first number is at most the second)."""
    sizes = [r.settings.nodes for r in results]
    headers = ["figure"]
    for index, nodes in enumerate(sizes):
        headers += [f"{nodes} nodes"] if index == 0 else [f"{nodes} nodes", "growth"]
    rows = []
    for name, figure in _FIGURES:
        values = [figure(r) for r in results]
        row: list[Any] = [name]
        for index, value in enumerate(values):
            row.append(value)
            if index:
                row.append(_growth(values[index - 1], value, sizes[index] / sizes[index - 1]))
        rows.append(row)
    return (
        "\n".join(
            ["growth from one size to the next (each size its own control plane)", *_rows(headers, rows)]
        )
        + "\n"
    )
