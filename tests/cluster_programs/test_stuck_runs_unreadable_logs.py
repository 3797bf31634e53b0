"""A pod log the API server cannot serve costs the stuck-run guard one request until its retry time,
not one a pass (issue 36): the failure is logged with its reason and remembered, bounded, and
forgotten with the pod.

kwok's simulated pods have no log the API server can fetch ("no preferred addresses found",
tests/cluster/test_watchdog.py::test_a_log_the_api_server_cannot_serve_is_reported_with_its_reason),
so at 2,048 simulated nodes every pass of the watchdog's loop asked for the log of each of a
thousand runs again: 322 requests and 11.7 s a pass (docs/performance.md, "Scale"). Here
``guard_pass`` runs in this process, its ``Endings`` kept between passes as the watchdog's loop
keeps them, against a stand-in whose log reads fail as the real API server's do until the test
makes them readable. The program's own requests at a few hundred Jobs, through its loop, are
counted in test_watchdog_pass_cost.py.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from k8s_charts.checks.gang_watchdog import NAME
from tests.cluster_programs.test_stuck_runs import (
    JOB_UID,
    LIMIT_MINUTES,
    run_pod,
    running,
    volcano_job,
)
from tests.pod_programs import program

LIMIT = LIMIT_MINUTES * 60
NO_ADDRESS = "no preferred addresses found; known addresses: []"
"""The reason kube-apiserver 1.36.3 gives for a log of a kwok pod (its node has no address)."""


def _pod(index: int, *, uid: str = "", minutes: float = 60, restarts: int = 0) -> dict[str, Any]:
    pod = run_pod(index, node_name=f"trn-{'ab'[index % 2]}", container=running(minutes))
    pod["metadata"]["uid"] = uid or f"pod-{index}"
    pod["status"]["containerStatuses"][0]["restartCount"] = restarts
    return pod


@dataclass
class Cluster:
    """A run's Job and pods; each pod's log read fails unless ``readable`` holds a line for it."""

    pods: list[dict[str, Any]] = field(default_factory=lambda: [_pod(0), _pod(1)])
    readable: dict[str, str] = field(default_factory=dict)
    reads: list[tuple[float, str]] = field(default_factory=list)
    """(seconds into the test, pod name) of each log request."""
    logged: list[str] = field(default_factory=list)
    ended: list[float] = field(default_factory=list)
    job: dict[str, Any] = field(default_factory=volcano_job)
    start: datetime = field(default_factory=lambda: datetime.now(UTC))
    second: float = 0.0

    def __post_init__(self) -> None:
        self.core = program("stuck_runs")
        self.endings = self.core.Endings()

    # The API: the guard's reads and writes.
    def items(self, path: str, **_: str) -> list[dict[str, Any]]:
        return [self.job]

    def text(self, path: str) -> str:
        name = path.split("/")[6]
        self.reads.append((self.second, name))
        if name in self.readable:
            return self.readable[name]
        body = f'{{"kind":"Status","status":"Failure","message":"Get \\"https://{name}:10250/\\": {NO_ADDRESS}","code":500}}'
        raise program("kube_api").ApiError(f"GET {path}: HTTP 500 {body}", 500)

    def call(self, method: str, path: str, body: Any) -> Any:
        self.ended.append(self.second)
        return body

    def merge_patch(self, path: str, body: Any) -> Any:
        self.job["status"]["state"].update(body["status"]["state"])
        return self.job

    def event(self, **_: Any) -> Any:
        return None

    def guard(self, second: float) -> bool:
        """One pass ``second`` seconds into the test."""
        self.second = second
        return bool(
            self.core.guard_pass(
                self,
                self.core.GuardSettings(
                    namespaces=("training",), threshold_seconds=LIMIT, annotation="x", component=NAME
                ),
                pods=self.pods,
                trainium_nodes=["trn-a", "trn-b"],
                podgroup_phases={JOB_UID: "Running"},
                now=self.start + timedelta(seconds=second),
                log=self.logged.append,
                endings=self.endings,
            )
        )


def test_a_failed_log_read_is_reported_with_its_reason_and_asked_again_only_at_its_retry_time() -> None:
    """Passes 15 s apart for two hours on a run whose logs cannot be read: the first pass asks for
    rank 0's log (not the other pod's: without rank 0's line the run cannot be silent), fails and
    says why; the next passes ask nothing and say so in one line each; the retries come an eighth of
    the limit after the first failure, then at doubling gaps up to the limit, each in its later half."""
    cluster = Cluster()
    results = [cluster.guard(second) for second in range(0, 2 * 3600, 15)]
    assert results[0] is False and results[1] is True  # the failed request fails its pass alone
    first = [line for line in cluster.logged if "silence not judged: the log of pod" in line]
    assert first[0].startswith(
        "run training/bert-1a2b3c4d: silence not judged: the log of pod bert-1a2b3c4d-worker-0 could not be read"
    ), first
    assert NO_ADDRESS in first[0] and "HTTP 500" in first[0] and "(failure 1 in a row)" in first[0]
    assert len(first) == len(cluster.reads)  # every failure is logged, once
    assert cluster.logged[1] == (
        "1 runs' silence not judged this pass: a log of each could not be read before (logged then) "
        "and is not asked for again until its retry time (first: training/bert-1a2b3c4d)"
    )
    assert {name for _, name in cluster.reads} == {"bert-1a2b3c4d-worker-0"}
    moments = [second for second, _ in cluster.reads]
    assert moments[0] == 0
    gaps = [later - earlier for earlier, later in itertools.pairwise(moments)]
    for failures, gap in enumerate(gaps, start=1):
        delay = min(LIMIT, LIMIT / 8 * 2 ** (failures - 1))
        assert delay / 2 <= gap <= delay + 15, (failures, gaps)
    # 480 passes; without the memory, 480 requests.
    assert len(moments) <= 3 + 2 * 3600 / (LIMIT / 2)
    assert cluster.ended == []


def test_a_log_that_becomes_readable_is_read_at_its_retry_time_and_a_silent_run_ended() -> None:
    """The kubelet reachable again (say): the next retry reads every pod's log, the failure is
    forgotten, and a run silent all along is ended then, within one limit of its log becoming
    readable."""
    cluster = Cluster()
    second = 0
    while second < 3600 and not cluster.ended:
        if second == 1800:
            old = (cluster.start - timedelta(minutes=50)).strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"
            cluster.readable = {pod["metadata"]["name"]: f"{old} [0]: step 9\n" for pod in cluster.pods}
        cluster.guard(second)
        second += 15
    [ended] = cluster.ended
    assert 1800 <= ended <= 1800 + LIMIT + 15
    assert [name for moment, name in cluster.reads if moment == ended] == [
        "bert-1a2b3c4d-worker-0",
        "bert-1a2b3c4d-worker-1",
    ]
    assert cluster.endings.unreadable.pods == {}
    assert cluster.job["status"]["state"]["reason"] == "NoProgress"


def test_a_pod_no_longer_listed_is_forgotten_and_a_new_pod_of_its_name_is_read_at_once() -> None:
    """Volcano restarts a run with new pods of the same names: the old pods' failures are forgotten
    at the first pass that does not list them, and a new pod's log is asked for at its first pass
    (its uid differs), not at the old pod's retry time."""
    cluster = Cluster()
    assert cluster.guard(0) is False
    assert set(cluster.endings.unreadable.pods) == {("training", "bert-1a2b3c4d-worker-0", "pod-0")}
    cluster.pods = []
    cluster.guard(15)
    assert cluster.endings.unreadable.pods == {}
    # Running for longer than the limit already (as a test may say): only the uid is new.
    cluster.pods = [_pod(0, uid="new-0"), _pod(1, uid="new-1")]
    cluster.guard(30)
    assert cluster.reads == [(0, "bert-1a2b3c4d-worker-0"), (30, "bert-1a2b3c4d-worker-0")]


def test_a_container_restart_makes_the_pods_log_due_at_once_and_its_count_start_afresh() -> None:
    unreadable = program("stuck_runs").UnreadableLogs()
    now = datetime.now(UTC)
    pod = _pod(0)
    for failures in range(1, 5):
        failure = unreadable.failed(pod, now=now, threshold=LIMIT)
        assert failure.failures == failures
    assert unreadable.waiting(pod, now) is failure
    assert unreadable.waiting(pod, failure.retry_at) is None  # due
    restarted = _pod(0, restarts=1, minutes=1)
    assert unreadable.waiting(restarted, now) is None
    assert unreadable.failed(restarted, now=now, threshold=LIMIT).failures == 1


def test_the_remembered_failures_are_bounded_the_oldest_forgotten_first() -> None:
    """A bound on memory: past ``limit`` pods the oldest failure goes (that pod's log is then asked
    for at its next pass: more requests, never a run judged on less). A failure again moves the pod
    to the newest."""
    unreadable = program("stuck_runs").UnreadableLogs(limit=3)
    now = datetime.now(UTC)
    pods = [_pod(index) for index in range(5)]
    for pod in pods[:3]:
        unreadable.failed(pod, now=now, threshold=LIMIT)
    unreadable.failed(pods[0], now=now, threshold=LIMIT)
    for pod in pods[3:]:
        unreadable.failed(pod, now=now, threshold=LIMIT)
    assert [name for _, name, _ in unreadable.pods] == [
        "bert-1a2b3c4d-worker-0",
        "bert-1a2b3c4d-worker-3",
        "bert-1a2b3c4d-worker-4",
    ]
    assert unreadable.waiting(pods[1], now) is None
    assert program("stuck_runs").REMEMBERED_LOG_FAILURES == 10_000


def test_failures_of_one_pass_come_due_over_several_passes() -> None:
    """A thousand runs' logs failing in one pass (2,048 simulated nodes): their retries at the
    limit fall over its later half, not on one pass (at most a third of them in any minute)."""
    unreadable = program("stuck_runs").UnreadableLogs()
    now = datetime.now(UTC)
    pods = [_pod(index, uid=f"uid-{index}") for index in range(1000)]
    for _ in range(4):  # at the limit from the fourth failure in a row
        retries = [unreadable.failed(pod, now=now, threshold=LIMIT).retry_at for pod in pods]
    waits = [(moment - now).total_seconds() for moment in retries]
    assert min(waits) >= LIMIT / 2 and max(waits) < LIMIT
    per_minute = Counter(int(wait // 60) for wait in waits)
    assert max(per_minute.values()) <= 1000 / 3, per_minute


def test_a_stuck_run_is_ended_whatever_its_logs() -> None:
    """A pod waiting past the limit (CreateContainerError) is judged from the pods alone: the run is
    ended at the first pass, with no log asked for, even while its other pod's log failed before."""
    cluster = Cluster()
    assert cluster.guard(0) is False  # rank 0's log failed: remembered
    stuck = _pod(0)
    stuck["status"]["containerStatuses"] = [
        {
            "name": "trainer",
            "state": {"waiting": {"reason": "CreateContainerError", "message": "failed to mkdir"}},
            "restartCount": 0,
            "ready": False,
        }
    ]
    stuck["status"]["phase"] = "Pending"
    cluster.pods = [stuck, _pod(1)]
    assert cluster.guard(15) is True
    assert cluster.ended == [15]
    assert cluster.job["status"]["state"]["reason"] == "StuckRun"
    assert cluster.reads == [(0, "bert-1a2b3c4d-worker-0")]
