"""What one pass of the gang watchdog with its stuck-run guard asks of the API server, at a few hundred
Jobs: requests and objects read grow with the runs, not with the nodes times their DaemonSets
(issue 36; docs/performance.md, "Scale").

A count, not a timing: the pass's time is measured by `make bench-scale` (7.6 s at 1,024 nodes
before this bound, reading 4,813 pods). cluster_programs/gang_watchdog.py runs as a process, with
the rendered Deployment's arguments (more teams than the other tests) and ``--once``, against a
stand-in API (tests/stand_in_api.py) holding a recorded cluster: Trainium nodes with DaemonSet pods,
teams with running gangs that print, and gangs that wait for nodes. The stand-in pages every list as
the API server does (``limit``, ``continue``) and counts every request and every object it serves.
The Deployment's loop (no ``--once``) runs too: its later passes read watches, and ask again for no
log whose read failed (the stand-in fails every log read as the real API server does for kwok's
pods), until the pod's retry time (stuck_runs.UnreadableLogs; the schedule, the memory's bound and
its forgetting: test_stuck_runs_unreadable_logs.py).

Why a stand-in and not the tier's API server: hundreds of nodes and thousands of pods in the real one
take kwok and minutes of both cores (the bench does it: its table gives the same counts, measured on
the real API server), and the question here is which requests the program sends, which the stand-in
records exactly. That the real API server answers them (metadata-only node lists, per-namespace pod
lists) is what tests/cluster/test_watchdog.py and the bench run.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import IO, Any

import pytest

from k8s_charts.checks.gang_watchdog import GangWatchdogChart
from tests.cluster_programs.test_gang_watchdog import (
    METADATA_LIST,
    PLATFORM,
    PROGRAM,
    TOKEN,
    VALUES,
    api_environment,
    daemon_pod,
    node,
    podgroup,
    training_pod,
)
from tests.cluster_programs.test_stuck_runs import log_time, run_pod, running, volcano_job
from tests.k8s_charts.manifests import only, pod_spec, synth
from tests.pod_programs import program
from tests.stand_in_api import json_api

PAGE = 500
"""The program's ``limit`` (kube_api.PAGE)."""
NO_ADDRESS = 'Get "https://trn-0000:10250/containerLogs/x": no preferred addresses found; known addresses: []'
"""What kube-apiserver 1.36.3 answers for the log of a kwok pod (tests/cluster/test_watchdog.py)."""


# --- The recorded cluster --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    teams: int
    runs_per_team: int
    """Running gangs per team, each printing from rank 0."""
    gang: int
    """Pods per run."""
    waiting_per_team: int
    """Gangs per team that wait for nodes (no #3976 signature: not stalled)."""
    nodes: int
    daemonsets: int

    @property
    def namespaces(self) -> list[str]:
        return [f"team-{t}" for t in range(self.teams)]

    @property
    def jobs(self) -> int:
        return self.teams * (self.runs_per_team + self.waiting_per_team)

    @property
    def team_pods(self) -> int:
        return self.teams * (self.runs_per_team + self.waiting_per_team) * self.gang


def _in(namespace: str, obj: dict[str, Any], uid: str | None = None) -> dict[str, Any]:
    obj["metadata"]["namespace"] = namespace
    for owner in obj["metadata"].get("ownerReferences") or []:
        owner.update(uid=uid, apiVersion="batch.volcano.sh/v1alpha1")
    if uid is not None and obj.get("kind") == "Job":
        obj["metadata"]["uid"] = uid
    return obj


def cluster(shape: Shape, *, stalled: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Nodes, pods, PodGroups, Volcano Jobs and rank 0's log lines of ``shape``; ``stalled``: one
    more gang shows the #3976 signature for longer than the threshold."""
    nodes = [node(f"trn-{i:04d}", group=("trn1", "trn2")[i % 2]) for i in range(shape.nodes)]
    pods = [daemon_pod(f"ds{d}", n["metadata"]["name"]) for n in nodes for d in range(shape.daemonsets)]
    podgroups: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    logs: dict[str, str] = {}
    bound = 0
    for namespace in shape.namespaces:
        for r in range(shape.runs_per_team):
            name, uid = f"run-{r}", f"{namespace}-run-{r}"
            jobs.append(_in(namespace, volcano_job(name), uid))
            podgroups.append(_in(namespace, podgroup(name, phase="Running", min_member=shape.gang)))
            for index in range(shape.gang):
                on = nodes[bound % shape.nodes]["metadata"]["name"]
                bound += 1
                pods.append(
                    _in(namespace, run_pod(index, job=name, node_name=on, container=running(60)), uid)
                )
            logs[f"{name}-worker-0"] = f"{log_time(0.5)} [0]: step 1300 loss 2.29\n"
        for w in range(shape.waiting_per_team):
            name, uid = f"wait-{w}", f"{namespace}-wait-{w}"
            jobs.append(_in(namespace, volcano_job(name, phase="Pending"), uid))
            podgroups.append(
                _in(namespace, podgroup(name, unschedulable_minutes=None, min_member=shape.gang))
            )
            pods += [
                _in(namespace, training_pod(f"{name}-worker-{i}", gang=name, minutes=1), uid)
                for i in range(shape.gang)
            ]
    if stalled:
        namespace = shape.namespaces[0]
        podgroups.append(_in(namespace, podgroup("stalled", min_member=2, unschedulable_minutes=30)))
        pods += [
            training_pod("stalled-0", gang="stalled", namespace=namespace, reason="Schedulable"),
            training_pod("stalled-1", gang="stalled", namespace=namespace, reason="Unschedulable"),
        ]
    return {"nodes": nodes, "pods": pods, "podgroups": podgroups, "jobs": jobs, "logs": [logs]}


# --- The stand-in API: pages and counts --------------------------------------------------------------------


@dataclass
class CountingApi:
    objects: dict[str, list[dict[str, Any]]]
    logs: Mapping[str, str]
    lists: list[str] = field(default_factory=list)
    """Each list request, ``path`` (a page each)."""
    log_reads: list[str] = field(default_factory=list)
    watches: list[str] = field(default_factory=list)
    """Each watch request, ``path``: answered at once with no event (a watch the server ended)."""
    served: int = 0
    """Objects in the lists' answers."""
    bytes: int = 0
    logs_unreadable: bool = False
    """Every log read fails as the real API server's does for a kwok pod (its node has no address)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def page(self, items: list[dict[str, Any]], query: Mapping[str, str], accept: str) -> dict[str, Any]:
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or len(items) or 1)
        chunk = items[start : start + limit]
        if accept == METADATA_LIST:
            chunk = [{"kind": "PartialObjectMetadata", "metadata": i["metadata"]} for i in chunk]
        more = start + limit < len(items)
        # A list's resourceVersion, as the API server gives every list (a watch starts there).
        metadata = {"continue": str(start + limit) if more else "", "resourceVersion": "1"}
        return {"metadata": metadata, "items": copy.deepcopy(chunk)}

    def items(self, path: str, query: Mapping[str, str]) -> list[dict[str, Any]] | None:
        parts = path.strip("/").split("/")
        if parts == ["api", "v1", "nodes"]:
            return self.objects["nodes"]
        if parts[-1] not in ("pods", "podgroups", "jobs"):
            return None
        kind = parts[-1]
        namespace = parts[-2] if "namespaces" in parts else None
        found = [o for o in self.objects[kind] if namespace in (None, o["metadata"]["namespace"])]
        if kind == "pods":
            assert query["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"
        return found

    def handle(self, method: str, url: str, accept: str) -> tuple[int, Any]:
        parsed = urllib.parse.urlsplit(url)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        with self.lock:
            if method == "GET" and parsed.path.endswith("/log"):
                name = parsed.path.split("/")[-2]
                self.log_reads.append(name)
                if self.logs_unreadable:
                    return 500, {"kind": "Status", "status": "Failure", "message": NO_ADDRESS, "code": 500}
                return 200, self.logs.get(name, "")
            items = self.items(parsed.path, query) if method == "GET" else None
            if items is None:
                return 404, {"kind": "Status", "code": 404}
            if query.get("watch"):
                self.watches.append(parsed.path)
                return 200, ""
            self.lists.append(parsed.path)
            answer = self.page(items, query, accept)
            self.served += len(answer["items"])
            self.bytes += len(json.dumps(answer))
            return 200, answer


@pytest.fixture
def counting() -> Iterator[tuple[list[CountingApi], str]]:
    """A stand-in whose recorded cluster the test sets (``holder[0]``)."""
    holder: list[CountingApi] = []

    def answer(method: str, path: str, headers: Mapping[str, str], body: Any) -> tuple[int, Any]:
        assert headers["Authorization"] == f"Bearer {TOKEN}"
        return holder[0].handle(method, path, headers.get("Accept", ""))

    with json_api(answer) as url:
        yield holder, url


@cache
def arguments(namespaces: tuple[str, ...]) -> list[str]:
    """The rendered Deployment's arguments for these teams, the stuck-run guard on."""
    values = replace(VALUES, namespaces=namespaces, stuck_run_minutes=10, stuck_run_max_minutes=60)
    manifests = synth(
        lambda app: GangWatchdogChart(
            app, "watchdog", values=values, namespace=PLATFORM, vpc_cidr="10.0.0.0/16"
        )
    )
    [container] = pod_spec(only(manifests, "Deployment"))["containers"]
    return list(container["args"])


def _environment(counting: tuple[list[CountingApi], str], tmp_path: Path) -> dict[str, str]:
    return api_environment(counting[1], tmp_path)


def start_loop(
    counting: tuple[list[CountingApi], str], tmp_path: Path, shape: Shape, *, logs_unreadable: bool = False
) -> tuple[CountingApi, subprocess.Popen[str]]:
    """The Deployment's loop (a pass every half second) against the recorded cluster of ``shape``."""
    recorded = cluster(shape)
    [logs] = recorded.pop("logs")
    api = CountingApi(objects=recorded, logs=logs, logs_unreadable=logs_unreadable)
    counting[0][:] = [api]
    loop = subprocess.Popen(
        [sys.executable, str(PROGRAM), *arguments(tuple(shape.namespaces)), "--interval-seconds", "0.5"],
        env=_environment(counting, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return api, loop


def one_pass(
    counting: tuple[list[CountingApi], str],
    tmp_path: Path,
    shape: Shape,
    *,
    stalled: bool = False,
    logs_unreadable: bool = False,
) -> tuple[CountingApi, str]:
    recorded = cluster(shape, stalled=stalled)
    [logs] = recorded.pop("logs")
    api = CountingApi(objects=recorded, logs=logs, logs_unreadable=logs_unreadable)
    counting[0][:] = [api]
    done = subprocess.run(
        [sys.executable, str(PROGRAM), *arguments(tuple(shape.namespaces)), "--once"],
        env=_environment(counting, tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # A failed log read fails the pass (exit 1), as any failed request does.
    assert done.returncode == int(logs_unreadable) and done.stderr == "", done.stdout + done.stderr
    return api, done.stdout


def pages(count: int) -> int:
    return max(1, math.ceil(count / PAGE))


LOG_READS_PER_PASS: int = program("stuck_runs").LOG_READS_PER_PASS

# --- The bounds ----------------------------------------------------------------------------------------------

# 8 teams, 320 Jobs: 240 running gangs of 4 that print (960 pods) and 80 gangs of 4 waiting for
# nodes; 256 Trainium nodes with 3 DaemonSets (768 pods): as many DaemonSet pods as the bench's
# 1,024 nodes have per 256 nodes.
FEW_HUNDRED = Shape(teams=8, runs_per_team=30, gang=4, waiting_per_team=10, nodes=256, daemonsets=3)


@pytest.mark.process
def test_a_pass_reads_the_runs_not_the_nodes_daemonset_pods(
    counting: tuple[list[CountingApi], str], tmp_path: Path
) -> None:
    """No cordon held, no gang stalled past the threshold: one list of pods, PodGroups and Jobs per
    team (a page each here), the nodes' metadata, and one log request per running run (rank 0's line
    is recent: the other pods' logs are not read) up to the pass's budget of log reads; the runs
    past it are left for the next pass, and the pass says so."""
    shape = FEW_HUNDRED
    api, out = one_pass(counting, tmp_path, shape)
    assert "ended" not in out and "cordoned" not in out, out
    assert "/api/v1/pods" not in api.lists  # no list of the cluster's pods
    assert len(api.lists) == 3 * shape.teams + pages(shape.nodes), api.lists
    podgroups = shape.jobs
    assert api.served == shape.team_pods + podgroups + shape.jobs + shape.nodes
    runs = shape.teams * shape.runs_per_team
    assert runs > LOG_READS_PER_PASS
    assert len(api.log_reads) == LOG_READS_PER_PASS
    assert all(name.endswith("-worker-0") for name in api.log_reads)
    assert f"{runs - LOG_READS_PER_PASS} runs' silence left for the next pass" in out, out


@pytest.mark.process
def test_a_passs_reads_grow_with_the_runs_and_not_with_the_daemonsets(
    counting: tuple[list[CountingApi], str], tmp_path: Path
) -> None:
    """Twice the DaemonSets and nodes: the same requests, and only the nodes' own metadata more to
    read; twice the runs: at most twice the requests and objects."""
    base, _ = one_pass(counting, tmp_path, FEW_HUNDRED)
    figures = {"requests": len(base.lists) + len(base.log_reads), "objects": base.served, "bytes": base.bytes}
    more_nodes, _ = one_pass(counting, tmp_path, replace(FEW_HUNDRED, nodes=512, daemonsets=6))
    # The same lists but the nodes' second page of metadata.
    assert len(more_nodes.lists) - pages(512) == len(base.lists) - pages(256)
    assert more_nodes.log_reads == base.log_reads
    assert more_nodes.served == base.served + 256  # the 256 more nodes' metadata, no pod
    more_runs, _ = one_pass(counting, tmp_path, replace(FEW_HUNDRED, runs_per_team=60, waiting_per_team=20))
    assert len(more_runs.lists) + len(more_runs.log_reads) <= 2 * figures["requests"]
    assert more_runs.served <= 2 * figures["objects"]
    assert more_runs.bytes <= 2 * figures["bytes"]


@pytest.mark.process
def test_only_a_stalled_gang_makes_a_pass_read_the_nodes_and_their_pods(
    counting: tuple[list[CountingApi], str], tmp_path: Path
) -> None:
    """A gang stalled past the threshold needs each node's room and idleness, hence every pod: the
    nodes in full and the cluster's pods, a page at a time, once in the pass."""
    shape = FEW_HUNDRED
    api, out = one_pass(counting, tmp_path, shape, stalled=True)
    assert "gang team-0/stalled: stalled" in out, out
    everything = shape.team_pods + 2 + shape.nodes * shape.daemonsets
    assert api.lists.count("/api/v1/pods") == pages(everything)
    assert api.lists.count("/api/v1/nodes") == 2 * pages(shape.nodes)  # metadata, then in full
    assert len(api.lists) == 3 * shape.teams + 2 * pages(shape.nodes) + pages(everything)


@pytest.mark.process
def test_the_deployments_loop_lists_once_and_then_reads_its_watches(
    counting: tuple[list[CountingApi], str], tmp_path: Path
) -> None:
    """The loop (no ``--once``) keeps each pass's lists current through watches
    (cluster_programs/kube_mirror.py): its first pass lists as one ``--once`` pass does, the next
    passes list nothing (issue #36: the pass at a thousand Jobs). The stand-in ends every watch at
    once, so the mirrors watch again, a second apart at most."""
    shape = FEW_HUNDRED
    seconds = 4.0
    api, loop = start_loop(counting, tmp_path, shape)
    try:
        out, err = loop.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        loop.terminate()
        out, err = loop.communicate(timeout=30)
    assert "error" not in out and err == "", out + err
    with api.lock:
        lists, watches = list(api.lists), list(api.watches)
    assert len(lists) == 3 * shape.teams + pages(shape.nodes), lists  # the first pass's, no more
    collections = 3 * shape.teams + 1
    assert collections <= len(watches) <= collections * (seconds + 1), len(watches)


# --- Logs the API server cannot serve (kwok's pods; a kubelet it cannot reach) -------------------------------------


def _running_runs(shape: Shape) -> Counter[str]:
    """Rank 0 of each running run, by pod name (each team has the same names)."""
    return Counter(f"run-{r}-worker-0" for _ in shape.namespaces for r in range(shape.runs_per_team))


@pytest.mark.process
def test_a_pass_asks_once_for_each_runs_unreadable_log_and_says_why(
    counting: tuple[list[CountingApi], str], tmp_path: Path
) -> None:
    """Every log read fails: one request per running run (rank 0's; without its line the run cannot
    be silent, so no other pod's log is asked for) up to the pass's budget, each failure logged with
    the API server's reason, and the pass reports the error (exit 1). The lists are those of a pass
    that reads logs."""
    shape = FEW_HUNDRED
    api, out = one_pass(counting, tmp_path, shape, logs_unreadable=True)
    assert len(api.log_reads) == LOG_READS_PER_PASS
    assert not Counter(api.log_reads) - _running_runs(shape)  # rank 0 of running runs only
    failures = [line for line in out.splitlines() if "silence not judged: the log of pod" in line]
    assert len(failures) == LOG_READS_PER_PASS, out
    assert f"{shape.teams * shape.runs_per_team - LOG_READS_PER_PASS} runs' silence left" in out, out
    assert all("HTTP 500" in line and "no preferred addresses found" in line for line in failures)
    assert len(api.lists) == 3 * shape.teams + pages(shape.nodes), api.lists
    assert "ended" not in out, out


@pytest.mark.process
def test_the_loops_later_passes_do_not_ask_again_for_the_logs_that_failed(
    counting: tuple[list[CountingApi], str], tmp_path: Path
) -> None:
    """Issue 36 at 2,048 simulated nodes: every pass of the loop asked again for the log of each of a
    thousand runs, every read failing, 322 requests and 11.7 s a pass. Here, 240 runs whose logs
    fail: the loop's first pass asks once per run up to its budget (stuck_runs.LOG_READS_PER_PASS,
    200), the second asks for the other 40; its next passes (one line each saying how many
    runs' silence they did not judge) ask for none until the first retry, an eighth of the 10-minute
    limit later at the soonest (stuck_runs.UnreadableLogs), long after this test."""
    shape = FEW_HUNDRED
    api, loop = start_loop(counting, tmp_path, shape, logs_unreadable=True)
    runs = shape.teams * shape.runs_per_team
    later = f"{runs} runs' silence not judged this pass"
    lines: list[str] = []

    def read(stream: IO[str]) -> None:
        # One at a time, as the program writes them: the test reads ``lines`` meanwhile.
        for line in stream:
            lines.append(line)  # noqa: PERF402

    assert loop.stdout is not None
    reader = threading.Thread(target=read, args=(loop.stdout,), daemon=True)
    reader.start()

    def asked_again() -> bool:
        with api.lock:
            return len(api.log_reads) > runs

    # Until three later passes have said so, or a pass has asked for a log again.
    deadline = time.monotonic() + 60
    while (
        sum(later in line for line in list(lines)) < 3 and not asked_again() and time.monotonic() < deadline
    ):
        time.sleep(0.1)
    loop.terminate()
    _, err = loop.communicate(timeout=30)
    reader.join(timeout=10)
    with api.lock:
        reads = Counter(api.log_reads)
    assert reads == _running_runs(shape), f"{sum(reads.values())} log reads for {runs} runs"
    assert sum(later in line for line in lines) >= 3 and err == "", "".join(lines[-20:]) + err
