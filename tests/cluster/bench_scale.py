"""`make bench-scale`: the platform at thousands of simulated Trainium nodes, measured (a benchmark,
not a test; docs/performance.md holds the figures).

``python -m tests.cluster.bench_scale`` with NODES, TEAMS, GANG (comma-separated sizes), JOBS,
AUTOSCALED and OUT in the environment (tests/cluster/scale.py: the configuration and the table). It
runs the tier's own harness (tests/cluster/control_plane.py, autoscaler.py): the real API server,
controller manager, scheduler, Volcano 1.15.1 and gang watchdog, the cluster autoscaler with its kwok
provider, kwok as every node's kubelet; the plan of the generated configuration applied as the
kubectl handler applies it. Then, timed:

1. the Trainium nodes registered (Node and CSINode, as a scale-up's nodes register); the first node
   of the first group registers with the node check's startup taint and is passed by the node
   check's own program (``pass_node_check``, timed), the others are created already checked: a
   stand-in, as one pass per node would take the run's whole hour here;
2. each gang of GANG submitted (a copy of its run's Job, as ``kubectl apply`` of the review file),
   one after the other, each waited for until every pod is bound; then JOBS one-node runs at once;
3. one pass of the gang watchdog and of the watchdog with its stuck-run guard, in this process
   with the program's own code and its service account's token, every API request counted;
4. one node check fence read (every Trainium node listed, as each node's check does per pass);
5. the autoscaler started on a group of AUTOSCALED nodes at zero, a gang of that size submitted.

Heartbeats: kwok writes each node's status every 120 s and renews its Lease every 40 s (a 160 s
lease); the controller manager's node-monitor grace period is 200 s to match (EKS: 40 s leases, 50 s
grace). The tier's 20 s and 10 s for thousands of nodes are about 300 writes a second, more than
this 2-core machine serves beside the rest. Every process is stopped by PID at the end.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cluster_facts.kubernetes_names import NODE_GROUP_LABEL
from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from cluster_facts.node_check import NODE_CHECK_TAINT_KEY
from config import StackConfig, parse_config
from tests.cluster.audit import POLICY, client_load
from tests.cluster.autoscaler import kwok_templates, node_template, start_autoscaler
from tests.cluster.binaries import find_binaries
from tests.cluster.control_plane import KWOK_STAGES, ControlPlane
from tests.cluster.nodes import csi_node, group_nodes, system_nodes
from tests.cluster.plans import plan_of
from tests.cluster.runs import RunHandle, run_handle
from tests.cluster.scale import (
    AUTOSCALED_GROUP,
    DEFAULT_RESULTS,
    Measurement,
    ScaleSettings,
    format_growth,
    format_report,
    gang_run,
    percentile,
    process_usage,
    scale_config,
    settings_from,
    sizes_from,
    small_jobs_by_team,
    small_run,
)

HEARTBEAT_MILLISECONDS = 120_000
LEASE_SECONDS = 160
GRACE_SECONDS = 200
BATCH = 100
"""Nodes created per kubectl call (with their CSINodes), each call bounded by BATCH_TIMEOUT."""
BATCH_TIMEOUT = 600.0
GANG_TIMEOUT = 600.0
CLIENT_ROWS = 15
"""The busiest clients the table names."""


def _slow_stages(directory: Path) -> Path:
    text = KWOK_STAGES.read_text()
    heartbeat = text.index("name: node-heartbeat")
    before, after = text[:heartbeat], text[heartbeat:]
    after = after.replace("durationMilliseconds: 20000", f"durationMilliseconds: {HEARTBEAT_MILLISECONDS}", 1)
    path = directory / "kwok_stages.yaml"
    path.write_text(before + after)
    return path


class Sampler:
    """Every 5 s, each live process's CPU seconds and resident memory (/proc); peaks kept."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.usage: dict[str, dict[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="sampler")
        self._ticks = os.sysconf("SC_CLK_TCK")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, dict[str, float]]:
        self.sample()
        self._stop.set()
        self._thread.join(timeout=10)
        return self.usage

    def _run(self) -> None:
        while not self._stop.wait(5):
            self.sample()

    def sample(self) -> None:
        for process in list(self.plane.processes.started):
            try:
                stat = Path(f"/proc/{process.pid}/stat").read_text()
                status = Path(f"/proc/{process.pid}/status").read_text()
            except OSError:
                continue
            cpu, rss = process_usage(stat, status, self._ticks)
            seen = self.usage.setdefault(
                process.name, {"cpu_seconds": 0.0, "peak_rss_mib": 0.0, "_base": 0.0}
            )
            # A restarted process (the watchdog after an apply) starts its count again.
            if cpu + seen["_base"] < seen["cpu_seconds"]:
                seen["_base"] = seen["cpu_seconds"]
            seen["cpu_seconds"] = cpu + seen["_base"]
            seen["peak_rss_mib"] = max(seen["peak_rss_mib"], rss)

    def report(self) -> dict[str, dict[str, float]]:
        return {
            name: {k: v for k, v in usage.items() if not k.startswith("_")}
            for name, usage in self.usage.items()
        }


@contextmanager
def phase(result: Measurement, name: str) -> Iterator[None]:
    started = time.monotonic()
    print(f"[{datetime.now(UTC):%H:%M:%S}] {name} ...", flush=True)
    try:
        yield
    finally:
        result.phases[name] = time.monotonic() - started
        print(f"[{datetime.now(UTC):%H:%M:%S}] {name}: {result.phases[name]:.1f} s", flush=True)


def _count_lines(plane: ControlPlane, *args: str) -> int:
    output = plane.kubectl(*args, "--no-headers", check=False, timeout=300).stdout
    return sum(1 for line in output.splitlines() if line.strip())


def register_nodes(plane: ControlPlane, config: StackConfig, settings: ScaleSettings) -> tuple[str, int]:
    """Every pre-made group's nodes, in batches; the first one with the startup taint (module doc)."""
    made: list[dict[str, Any]] = []
    for group in config.trainium.node_groups:
        if group.name == AUTOSCALED_GROUP:
            continue
        made += group_nodes(config, group.name, (f"{group.name}-{i:04d}" for i in range(group.max_size)))
    sample = made[0]
    for node in made[1:]:
        node["spec"]["taints"] = [t for t in node["spec"]["taints"] if t["key"] != NODE_CHECK_TAINT_KEY]
    for start in range(0, len(made), BATCH):
        batch = made[start : start + BATCH]
        objects = [*batch, *(csi_node(n["metadata"]["name"]) for n in batch)]
        plane.kubectl(
            "create", "-f", "-", input="".join(json.dumps(o) for o in objects), timeout=BATCH_TIMEOUT
        )
    return str(sample["metadata"]["name"]), len(made)


def wait_nodes_ready(plane: ControlPlane, count: int, timeout: float) -> None:
    def ready() -> bool:
        output = plane.kubectl("get", "nodes", "--no-headers", timeout=300).stdout
        return sum(1 for line in output.splitlines() if " Ready" in line) >= count

    plane.wait_for(ready, timeout=timeout, what=f"{count} nodes Ready", interval=5)


LIFECYCLE_TAINT_PREFIX = "node.kubernetes.io/"
"""The node lifecycle controller's taints (``not-ready``, ``unreachable``): a new node carries
``not-ready:NoSchedule`` until the controller lifts it after the node turns Ready, at the
controller-manager's client rate (``--kube-api-qps``, 20 by default: a GET and a PATCH a node)."""


def wait_nodes_usable(plane: ControlPlane, count: int, result: Measurement) -> None:
    """Every node Ready, then free of lifecycle taints: two phases of the report."""
    with phase(result, "Trainium nodes Ready"):
        wait_nodes_ready(plane, count, 900)
    with phase(result, "not-ready taints lifted"):
        wait_nodes_schedulable(plane, 900)


def wait_nodes_schedulable(plane: ControlPlane, timeout: float) -> None:
    """Until no node carries a lifecycle taint. The 2,048-node run of 2026-11-29 bound its gangs of 128
    and 512 only as the controller lifted ``not-ready`` from their groups' fresh nodes, about 8 nodes
    a second, group after group: what the gangs measured then was that rate, not Volcano."""

    def schedulable() -> bool:
        output = plane.kubectl(
            "get", "nodes", "--no-headers", "-o", "custom-columns=TAINTS:.spec.taints[*].key", timeout=300
        ).stdout
        return LIFECYCLE_TAINT_PREFIX not in output

    plane.wait_for(schedulable, timeout=timeout, what="no node with a lifecycle taint", interval=5)


def _time(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def gang_figures(job: dict[str, Any], pods: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Seconds from the Job's creation to its pods made and to each pod's binding (the API server's
    timestamps, one-second resolution)."""
    created = _time(job["metadata"]["creationTimestamp"])
    bound = sorted(
        _time(c["lastTransitionTime"]) - created
        for pod in pods
        for c in pod["status"].get("conditions", [])
        if c["type"] == "PodScheduled" and c["status"] == "True"
    )
    made = max((_time(p["metadata"]["creationTimestamp"]) - created for p in pods), default=float("nan"))
    return {
        "pods_made": made,
        "first_bound": bound[0] if bound else float("nan"),
        "p50_bound": percentile(bound, 0.5),
        "p99_bound": percentile(bound, 0.99),
        "all_bound": bound[-1] if bound else float("nan"),
    }


VOLCANO_LATENCIES = (
    "volcano_e2e_scheduling_latency_milliseconds",
    "volcano_open_session_duration_milliseconds",
    "volcano_action_scheduling_latency_milliseconds",
    "volcano_plugin_scheduling_latency_milliseconds",
)
"""Volcano's scheduler histograms, read from its /metrics at v1.15.1 (all in milliseconds): a
session's whole cycle (opening, actions, closing with its status writes), its opening, each action
and each plugin's session open and close; their ``_sum`` and ``_count``."""


def labeled_sums(text: str, names: Sequence[str]) -> dict[str, float]:
    """Each ``<name>_sum`` and ``<name>_count`` line of ``names`` by its labels (Prometheus text)."""
    wanted = tuple(f"{name}_{part}" for name in names for part in ("sum", "count"))
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(wanted):
            key, value = line.rsplit(" ", 1)
            sums[key] = float(value)
    return sums


def volcano_metrics(plane: ControlPlane) -> str:
    """Volcano's scheduler's /metrics (Prometheus text), at its ``--listen-address``."""
    scheduler = next(p for p in plane.processes.started if p.args[0] == str(plane.binaries.volcano_scheduler))
    return _metrics(f"http://{_flag(scheduler.args, '--listen-address')}/metrics")


def volcano_latencies(plane: ControlPlane) -> dict[str, float]:
    return labeled_sums(volcano_metrics(plane), VOLCANO_LATENCIES)


def volcano_spent(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """Seconds Volcano spent between two readings: its sessions (how many, and their time), their
    opening, each action and each plugin's session open and close, the largest first; what is left
    of the sessions' time ("closing") is mostly their status writes (PodGroups, and PodScheduled on
    every pod still unplaced)."""
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    e2e, opening = VOLCANO_LATENCIES[:2]
    sessions = delta.get(f"{e2e}_sum", 0.0) / 1e3
    parts = {
        key.split("{", 1)[1].rstrip("}").replace('"', ""): value / 1e3
        for key, value in delta.items()
        if key.startswith(VOLCANO_LATENCIES[2:]) and "_sum{" in key and value >= 50  # 0.05 s and more
    }
    opened = delta.get(f"{opening}_sum", 0.0) / 1e3
    actions = sum(v for k, v in parts.items() if k.startswith("action="))
    spent = {
        "sessions": delta.get(f"{e2e}_count", 0.0),
        "sessions s": sessions,
        "opening": opened,
        "closing": max(0.0, sessions - opened - actions),
    }
    spent.update(dict(sorted(parts.items(), key=lambda item: -item[1])[:6]))
    return spent


def run_gang(plane: ControlPlane, run: RunHandle, name: str, result: Measurement) -> None:
    copy = run.copy_as(name)
    size = copy.replicas()
    started = time.monotonic()
    volcano_before = volcano_latencies(plane)
    copy.apply()

    def all_bound() -> list[dict[str, Any]] | None:
        pods = copy.pods()
        return pods if len(pods) == size and all(p["spec"].get("nodeName") for p in pods) else None

    try:
        pods = plane.wait_for(all_bound, timeout=GANG_TIMEOUT, what=f"gang {name} bound", interval=1)
    except AssertionError as error:
        result.failures.append(f"gang {name} ({size} nodes) not bound within {GANG_TIMEOUT:.0f} s")
        print(str(error)[:2000], flush=True)
        return
    job = plane.kubectl.json("get", "job.batch.volcano.sh", name, "-n", copy.namespace)
    figures = gang_figures(job, pods)
    spent = volcano_spent(volcano_before, volcano_latencies(plane))
    result.gangs.append({"size": size, **figures, "observed": time.monotonic() - started, "volcano": spent})
    print(f"  gang {name}: {size} pods, all bound {figures['all_bound']:.0f} s after the Job", flush=True)
    print("    Volcano meanwhile (s): " + ", ".join(f"{k} {v:.1f}" for k, v in spent.items()), flush=True)
    # Its nodes freed for the next gang and the one-node runs (gangs share groups at the larger sizes).
    copy.delete()


def run_small_jobs(
    plane: ControlPlane, plan: KubernetesLayerPlan, settings: ScaleSettings, result: Measurement
) -> None:
    """Each team's share of the one-node runs (copies of its own), applied at once; until every one
    is bound, asking the API server for its table of the ones not bound (the runs' pods in full are
    about 30 KiB each: listing a thousand every poll slowed what it measured)."""
    copies: list[RunHandle] = []
    for team, jobs in enumerate(small_jobs_by_team(settings)):
        if jobs:
            run = run_handle(plane, plan, small_run(team))
            copies += [run.copy_as(f"bench-one-{index:04d}") for index in range(jobs)]
    count = len(copies)
    started = time.monotonic()
    plane.kubectl(
        "apply",
        "-f",
        "-",
        input="".join(json.dumps(m) for c in copies for m in c.step.manifests),
        timeout=600,
    )
    selector = "volcano.sh/job-name"

    def bound() -> bool:
        pods = _count_lines(plane, "get", "pods", "-A", "-l", selector)
        waiting = _count_lines(plane, "get", "pods", "-A", "-l", selector, "--field-selector=spec.nodeName=")
        return pods >= count and waiting == 0

    try:
        plane.wait_for(bound, timeout=GANG_TIMEOUT, what=f"{count} one-node runs bound", interval=2)
        result.gangs.append(
            {"size": f"{count} x 1", "pods_made": float("nan"), "first_bound": float("nan"),
             "p50_bound": float("nan"), "p99_bound": float("nan"), "all_bound": time.monotonic() - started}
        )  # fmt: skip
    except AssertionError:
        result.failures.append(f"{count} one-node runs not all bound within {GANG_TIMEOUT:.0f} s")


def counted(api: Any) -> dict[str, float]:
    """Counts every request ``api`` (kube_api.Api) makes, the items of its lists and the bytes read."""
    counter = {"requests": 0.0, "objects": 0.0, "bytes": 0.0}
    original = api._request

    def request(method: str, path: str, body: Any, content_type: str, accept: str) -> bytes:
        counter["requests"] += 1
        answer: bytes = original(method, path, body, content_type, accept)
        counter["bytes"] += len(answer)
        # Lists, whole objects or metadata only (kube_api.METADATA_LIST).
        if accept.startswith("application/json") and b'"items"' in answer[:4096]:
            counter["objects"] += len(json.loads(answer).get("items") or [])
        return answer

    api._request = request
    return counter


def _program_modules(directory: Path) -> tuple[Any, Any]:
    """The programs of a ConfigMap's directory, imported as the pod runs them (its modules by name)."""
    sys.path.insert(0, str(directory))
    watchdog = importlib.import_module("gang_watchdog") if (directory / "gang_watchdog.py").exists() else None
    return watchdog, importlib.import_module("kube_api")


def watchdog_passes(plane: ControlPlane, result: Measurement) -> None:
    """One pass of the watchdog without and with its stuck-run guard: its program's ``main --once``
    with its Deployment's arguments, in this process, its API client counted."""
    process = plane.processes.get("gang-watchdog")
    script, args = Path(process.args[1]), process.args[2:]
    os.environ.update(plane.kube_api_environment(plane.work_dir / "gang-watchdog.token"))
    watchdog, kube_api = _program_modules(script.parent)
    without_guard = [a for a in args if not a.startswith(("--stuck-minutes", "--stuck-annotation"))]
    for name, arguments in (("gang watchdog", without_guard), ("watchdog + stuck-run guard", args)):
        api = kube_api.in_cluster()
        counter = counted(api)
        watchdog.in_cluster = lambda api=api: api
        started = time.monotonic()
        code = watchdog.main([*arguments, "--once"])
        seconds = time.monotonic() - started
        if code != 0:
            result.failures.append(f"{name}: its pass exited {code}")
        result.controllers.append({"name": name, "seconds": seconds, **counter})
    loop_passes(script.parent, args, kube_api, result)


def loop_passes(directory: Path, args: Sequence[str], kube_api: Any, result: Measurement) -> None:
    """The Deployment's loop as it runs: its first pass lists and starts the watches
    (cluster_programs/kube_mirror.py), a later pass reads from them; each timed, the requests the
    pass itself sends counted (the watches' own are one per collection every few minutes)."""
    watchdog = sys.modules["gang_watchdog"]
    mirrors_module = importlib.import_module("kube_mirror")
    read = watchdog.configured([*args])
    if isinstance(read, str):
        result.failures.append(f"watchdog loop: {read}")
        return
    _, settings, guard = read
    api = kube_api.in_cluster()
    counter = counted(api)
    mirrors = mirrors_module.Mirrors(api)
    endings = watchdog.Endings()
    try:
        for name in (
            "watchdog loop: first pass (lists, starts its watches)",
            "watchdog loop: a later pass (from its watches)",
        ):
            before = dict(counter)
            lists_before = sum(m.lists for m in mirrors.mirrors.values())
            started = time.monotonic()
            ok = watchdog.run_pass(
                api,
                settings,
                now=datetime.now(UTC),
                guard=guard,
                endings=endings,
                reads=mirrors,
                log=lambda _line: None,
            )
            seconds = time.monotonic() - started
            if not ok:
                result.failures.append(f"{name}: the pass met an error")
            spent = {key: counter[key] - before[key] for key in counter}
            # The mirrors list through clients of their own: their lists in this pass counted here.
            spent["requests"] += sum(m.lists for m in mirrors.mirrors.values()) - lists_before
            result.controllers.append(
                {"name": name, "seconds": seconds, **spent, "mirrors": len(mirrors.mirrors)}
            )
            time.sleep(2)
    finally:
        mirrors.stop()


def node_check_figures(plane: ControlPlane, sample: str, result: Measurement) -> None:
    """The node check's pass on ``sample`` (its program's writes, ``pass_node_check``), and one read of
    the fence (node_fence.py, one process for the cluster): every Trainium node listed, once every
    WATCH_SECONDS."""
    plane.wait_for(
        lambda: any(t["key"] == NODE_CHECK_TAINT_KEY for t in plane.kubectl.json("get", "node", sample)["spec"].get("taints", [])),
        timeout=60, what=f"{sample} with the startup taint",
    )  # fmt: skip
    started = time.monotonic()
    plane.pass_node_check([sample])
    result.controllers.append(
        {"name": "node check pass (one node, with its token)", "seconds": time.monotonic() - started,
         "requests": float("nan"), "objects": float("nan"), "bytes": float("nan")}
    )  # fmt: skip
    directory, environment = plane.node_check_program()
    _, kube_api = _program_modules(directory)
    os.environ.update(plane.kube_api_environment(plane.node_check_token(sample)))
    selector = environment["NEURON_DEVICES_LABEL"]
    for name, read in (
        ("node check fence: every Trainium node listed (one process)", lambda api: api.items("/api/v1/nodes", labelSelector=selector)),
    ):  # fmt: skip
        api = kube_api.in_cluster()
        counter = counted(api)
        started = time.monotonic()
        read(api)
        result.controllers.append({"name": name, "seconds": time.monotonic() - started, **counter})


def _metrics(url: str, context: Any = None) -> str:
    with urllib.request.urlopen(url, timeout=30, context=context) as response:
        return str(response.read().decode())


def metric_sums(text: str, names: Sequence[str]) -> dict[str, float]:
    """The sum over labels of each metric in ``names`` (Prometheus text)."""
    sums = dict.fromkeys(names, 0.0)
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = re.split(r"[{ ]", line, maxsplit=1)[0]
        if name in sums:
            sums[name] += float(line.rsplit(" ", 1)[1])
    return sums


def _flag(args: Sequence[str], flag: str) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"{flag}="))


def volcano_figures(plane: ControlPlane) -> dict[str, float]:
    name = VOLCANO_LATENCIES[0]
    sums = metric_sums(volcano_metrics(plane), [f"{name}_sum", f"{name}_count"])
    return {
        "cycles": sums[f"{name}_count"],
        "cycle ms, mean": sums[f"{name}_sum"] / max(1.0, sums[f"{name}_count"]),
    }


API_METRICS = (
    "apiserver_request_total",
    "apiserver_flowcontrol_rejected_requests_total",
    "apiserver_request_terminations_total",
)


def api_metrics(plane: ControlPlane) -> dict[str, float]:
    return metric_sums(plane.kubectl("get", "--raw", "/metrics", timeout=120).stdout, API_METRICS)


def autoscaler_phase(plane: ControlPlane, config: StackConfig, run: RunHandle, result: Measurement) -> None:
    """The autoscaler on the one group at zero; a gang of its size submitted: when the first and the
    last node were made, in how many scale-up decisions, when the gang was bound; its loop time."""
    (group,) = [g for g in config.trainium.node_groups if g.name == AUTOSCALED_GROUP]
    alone = config.model_copy(
        update={"trainium": config.trainium.model_copy(update={"node_groups": [group]})}
    )
    scaler = start_autoscaler(
        plane, alone, templates=lambda c: {**kwok_templates(c), "items": [node_template(c, group.name)]}
    )
    try:
        copy = run.copy_as("bench-autoscaled")
        started = time.monotonic()
        copy.apply()
        size = copy.replicas()
        counts: list[tuple[float, int]] = []

        def nodes_made() -> bool:
            made = _count_lines(plane, "get", "nodes", "-l", f"{NODE_GROUP_LABEL}={group.name}")
            counts.append((time.monotonic() - started, made))
            return made >= size

        plane.wait_for(nodes_made, timeout=GANG_TIMEOUT, what=f"{size} nodes of {group.name}", interval=1)
        first = next(t for t, made in counts if made)

        def bound() -> bool:
            pods = copy.pods()
            return len(pods) == size and all(p["spec"].get("nodeName") for p in pods)

        plane.wait_for(bound, timeout=GANG_TIMEOUT, what="the autoscaled gang bound", interval=2)
        decisions = [line for line in scaler.log().splitlines() if "Final scale-up plan" in line]
        text = _metrics(f"http://{_flag(scaler.args, '--address')}/metrics")
        main = 'cluster_autoscaler_function_duration_seconds_{}{{function="main"}}'
        loop_sum, loop_count = (
            sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith(main.format(part))
            )
            for part in ("sum", "count")
        )
        result.autoscaler = {
            "gang nodes": size,
            "s to first node made": first,
            "s to all nodes made": counts[-1][0],
            "s to gang bound": time.monotonic() - started,
            "scale-up decisions": len(decisions),
            "loops": loop_count,
            "loop s, mean": loop_sum / max(1.0, loop_count),
        }
        print("  scale-up decisions:\n    " + "\n    ".join(decisions), flush=True)
    except AssertionError as error:
        result.failures.append(f"autoscaler phase: {str(error).splitlines()[0]}")
    finally:
        scaler.stop()


def apply_plan(plane: ControlPlane, plan: KubernetesLayerPlan) -> None:
    """The plan's steps as CloudFormation starts them, each once those it follows are done (one at
    a time in order, 2 readiness gates per team, took 5 of a 64-node run's 6 minutes); the slowest
    steps are printed."""
    applied = plane.apply_plan(plan, concurrent=True)
    slowest = sorted(applied.steps, key=lambda step: -step.seconds)[:5]
    print("slowest steps: " + ", ".join(f"{step.name} {step.seconds:.1f} s" for step in slowest), flush=True)


def bench(settings: ScaleSettings, work_dir: Path, result: Measurement) -> None:
    data = scale_config(settings)
    config = parse_config(data)
    with phase(result, "plan rendered"):
        plan = plan_of(data)
    plane = ControlPlane(
        binaries=find_binaries(),
        work_dir=work_dir,
        node_monitor_grace_seconds=GRACE_SECONDS,
        node_lease_seconds=LEASE_SECONDS,
        kwok_stages=_slow_stages(work_dir),
        audit_policy=POLICY,
    )
    sampler = Sampler(plane)
    try:
        with phase(result, "control plane started"):
            plane.start()
            sampler.start()
            plane.add_nodes(system_nodes(config))
            wait_nodes_ready(plane, config.system_nodes.desired_size, 120)
        with phase(result, "plan applied (Volcano, watchdog, teams)"):
            apply_plan(plane, plan)
        with phase(result, "Trainium nodes registered"):
            sample, made = register_nodes(plane, config, settings)
        wait_nodes_usable(plane, made + config.system_nodes.desired_size, result)
        with phase(result, "every daemon pod bound"):
            plane.wait_for(
                lambda: _count_lines(plane, "get", "pods", "-A", "--field-selector=status.phase=Pending") == 0,
                timeout=900, what="no Pending pod", interval=5,
            )  # fmt: skip
        with phase(result, "node check"):
            node_check_figures(plane, sample, result)
        before = api_metrics(plane)
        api_started, wall_started = time.monotonic(), datetime.now(UTC)
        with phase(result, "gangs"):
            for size in settings.gangs:
                run_gang(plane, run_handle(plane, plan, gang_run(size)), f"bench-{size}", result)
        if settings.small_jobs:
            with phase(result, "one-node runs"):
                run_small_jobs(plane, plan, settings, result)
        after = api_metrics(plane)
        seconds, wall_ended = time.monotonic() - api_started, datetime.now(UTC)
        result.api = {
            "requests/s during the runs": (after[API_METRICS[0]] - before[API_METRICS[0]]) / seconds,
            "requests rejected (APF)": after[API_METRICS[1]],
            "requests terminated": after[API_METRICS[2]],
        }
        try:
            client_figures(plane, wall_started, wall_ended, result)
        except OSError as error:
            result.failures.append(f"no requests per client: the audit log: {error}")
        with phase(result, "controller passes"):
            watchdog_passes(plane, result)
        result.volcano = volcano_figures(plane)
        if settings.autoscaled:
            with phase(result, "autoscaler scale-up"):
                autoscaler_phase(plane, config, run_handle(plane, plan, "autoscaled"), result)
    except Exception as error:  # noqa: BLE001 - any failure is a figure of the run; the report is still written
        result.failures.append(f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")
        print(str(error)[:4000], flush=True)
    finally:
        result.processes = sampler.report() if sampler.stop() is not None else {}
        result.failures += _log_failures(plane)
        plane.stop()


_LOG_FAULTS = re.compile(
    r"failed calling webhook|context deadline exceeded|leader election lost|Throttling request"
)


def client_figures(plane: ControlPlane, since: datetime, until: datetime, result: Measurement) -> None:
    """Requests per client during the runs, from the API server's audit log (tests/cluster/audit.py);
    the batch backend writes within a second or so, hence the wait."""
    time.sleep(5)
    with plane.audit_log_path.open(encoding="utf-8", errors="replace") as log:
        load = client_load(log, since, until)
    seconds = (until - since).total_seconds()
    result.clients = [
        {
            "client": name,
            "requests": count,
            "per_s": count / seconds,
            "percent": 100 * count / max(1, load.total),
        }
        for name, count in load.requests.most_common(CLIENT_ROWS)
    ]
    result.api["platform controllers' requests/s"] = load.platform / seconds
    result.api["platform controllers' % of requests"] = 100 * load.platform_share
    result.api["requests/s during the runs (audit log)"] = load.total / seconds


def _log_failures(plane: ControlPlane) -> list[str]:
    found = []
    for log in sorted((plane.work_dir / "logs").glob("*.log")):
        hits = [line for line in log.read_text(errors="replace").splitlines() if _LOG_FAULTS.search(line)]
        if hits:
            found.append(f"{log.stem}: {len(hits)} log lines like {hits[-1][:200]!r}")
    return found


def machine() -> str:
    memory = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    load = os.getloadavg()
    return f"{os.cpu_count()} cores, {memory / 1024 / 1024:.0f} GiB, {platform.platform()}, load at the start {load[0]:.1f}"


def _measure(settings: ScaleSettings) -> Measurement:
    result = Measurement(settings=settings, machine=machine())
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as work:
        bench(settings, Path(work), result)
    return result


def main(environment: dict[str, str] | None = None) -> int:
    """One size (NODES given: every variable as given) or the series of SIZES, each on a control
    plane of its own, then the growth table; exit 1 when anything failed."""
    env = environment if environment is not None else dict(os.environ)
    # Stopped (make interrupted, a kill): the control plane's processes are stopped by the bench's
    # own clean-up, which a SIGTERM's default would skip.
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(143))
    series = sizes_from(env) or [settings_from(env)]
    problems = [problem for settings in series for problem in settings.problems()]
    if problems:
        print("\n".join(f"bench-scale: {p}" for p in problems), file=sys.stderr)
        return 2
    out = Path(env.get("BENCH_OUT") or DEFAULT_RESULTS)
    results = []
    for settings in series:
        results.append(_measure(settings))
        print(format_report(results[-1]), flush=True)
    report = f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n" + "\n".join(format_report(r) for r in results)
    if len(results) > 1:
        report += "\n" + format_growth(results)
        print(format_growth(results))
    out.write_text(report)
    (out.with_suffix(".json")).write_text(
        json.dumps([r.__dict__ for r in results], default=lambda o: o.__dict__, indent=1)
    )
    print(f"written to {out} and {out.with_suffix('.json')}")
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
