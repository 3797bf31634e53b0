"""End the Volcano Jobs whose pods hold Trainium nodes without progressing (issue 21, item 4).

A run's pods carry the autoscaler's safe-to-evict "false", so a node under a pod that never starts
(CreateContainerError from a mount, an image that does not pull, a crash loop) or a run that hangs
bills until someone notices: the pods never fail, so Volcano never restarts or ends the job, and the
autoscaler keeps the nodes. Only ending the Job frees them. Imported by the gang watchdog
(k8s_charts/scripts/gang_watchdog.py), which runs ``guard_pass`` after its own pass when it is given
``--stuck-minutes``; shipped beside it in its ConfigMap (k8s_charts/gang_watchdog.py).

A run (a Volcano Job in a team namespace, not already ending or ended) is judged only when its pods
are bound to Trainium nodes: a gang not yet placed is the autoscaler's and the gang watchdog's
business. It is **stuck** when one of its bound pods has waited longer than the threshold:

- a container or init container waiting (ContainerCreating, CreateContainerError,
  CreateContainerConfigError, ImagePullBackOff, ErrImagePull, CrashLoopBackOff, ...), or an init
  container still running, since the pod reached its node (``status.startTime``) or since the end of
  the container's last run that lasted at least the threshold;
- a bound pod with no container status at all, since it was bound.

It is **silent** when every pod of it runs and none has written a log line for longer than the
threshold (the newest line over all its pods and containers, or the container's start when it has
written none). The logs are read only for a run whose every pod has run longer than the threshold,
rank 0's first and the others only until one line is recent enough, and not again until a
threshold after the newest line read (kept in the watchdog process): a progressing run costs one log
request a threshold, not one per pod each pass. run_worker.sh prints while it legitimately waits (data staging every 15 s, the
compile-cache lock, a heartbeat during precompile), so its waits are never silent.

A log the API server cannot serve (it cannot reach the kubelet, a node gone bad, a role without
``pods/log``; every pod of kwok's simulated nodes) makes the run's silence unknowable: silence needs
every pod's newest line. The failure is logged with the API server's reason and remembered
(``UnreadableLogs``, kept in the watchdog process): that pod's log is not asked for again, nor the
rest of its run's, until a retry time that doubles from an eighth of the run's limit up to the
limit (spread per pod over its later half, so a thousand failures of one pass are not retried in
one pass), or at once when one of the pod's containers restarts or another pod takes its name. A
pass with a thousand such runs asks for none of their logs between retries (issue 36: at 2,048
simulated nodes every pass asked for all of them, 322 requests, 11.7 s); a silent run whose log
becomes readable is ended at most a limit and a pass later than it would have been. Stuck runs (waiting
containers) are judged from the pods alone and never wait for a log.

The threshold is the Job's annotation ``--annotation`` (minutes; ``runs[].stuck_minutes``), never
above ``--stuck-max-minutes`` (a team member may write the annotation: a larger value is clamped
and logged, and the team admission policy refuses it at the Job), or ``--stuck-minutes``. An ended run gets, in this order: a Volcano ``Command`` with action
``TerminateJob`` (what vcctl writes: bus.volcano.sh/v1alpha1, target the Job; the job controller
deletes the command and kills the job's pods, Succeeded and Failed ones kept, phase Terminating then
Terminated: volcano v1.15.1 pkg/controllers/job/job_controller_handler.go processNextCommand,
state/pending.go and state/running.go); its reason in the Job's ``status.state.reason`` and
``message`` (Volcano's controller copies the whole status on every update of its own and never sets
these two, so they stay); and a Warning Event on the Job. A Job whose state reason is already one of
ours is not ended twice.

A run the guard ended that still has pods on Trainium nodes one limit after the Command, its phase
not ending, is **not ended**: Volcano's job controller has not carried the Command out (it is down,
or it lost the Job). The guard cannot delete pods; it says so on the Job, once per watchdog process,
with a Warning Event ``NotEnded`` that names the nodes and the way out (deleting the Job: the
garbage collector then deletes its pods without Volcano). When it ended each run is kept in the
watchdog process (``Endings``); a restarted watchdog counts from when it first sees the run.

A Job that Volcano has **not picked up** is reported, not ended: phase none or ``Pending`` and no
pod, longer than the same limit after its creation. Which part of Volcano holds it, from its
PodGroup (v1.15.1): none, the job controller, whose first sync sets ``Pending`` and creates the
PodGroup (pkg/controllers/job/job_controller_actions.go ``initJobStatus``, ``syncJob``): it is down,
or it dropped a Job applied again under the name of one deleted moments before (volcano#3968;
docs/runs.md, Rerun); a PodGroup still ``Pending``, the scheduler, whose ``allocate`` moves it to
``Inqueue`` in its next session (no ``enqueue`` action: pkg/scheduler/actions/allocate/allocate.go
``buildAllocateContext``), after which the controller creates the pods; a PodGroup further on, the
controller again. Nothing holds a node, but nothing happens either, so the guard says so where the
team looks: ``NotPickedUp`` with what to do in the Job's ``status.state.reason`` and ``message``
and a Warning Event, once. When the Job's pods appear after all (the component came back), the
guard clears the reason it wrote. A Job the controller drops after its first sync keeps its
PodGroup and pods and is not seen here: its pods run, but a failed pod is not restarted and a
TerminateJob is not carried out (docs/runs.md, Rerun).
"""

from __future__ import annotations

import urllib.parse
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kube_api import Api, ApiError, Reads

__all__ = [
    "ENDED_PHASES",
    "GUARD_REASONS",
    "LOG_READS_PER_PASS",
    "NOT_ENDED_REASON",
    "NOT_PICKED_UP_REASON",
    "SILENT_REASON",
    "STUCK_REASON",
    "Endings",
    "GuardSettings",
    "UnreadableLogs",
    "Verdict",
    "guard_pass",
    "judge_run",
    "not_ended",
    "not_picked_up",
    "parse_log_time",
    "pod_stuck",
]

Obj = Mapping[str, Any]

STUCK_REASON = "StuckRun"
SILENT_REASON = "NoProgress"
GUARD_REASONS = frozenset({STUCK_REASON, SILENT_REASON})
"""The reasons of the runs the guard ended."""
NOT_ENDED_REASON = "NotEnded"
"""An Event on a run the guard ended that Volcano has not ended."""
NOT_PICKED_UP_REASON = "NotPickedUp"
"""A Job the guard reports (never ends): Volcano has made no pod of it."""
# Volcano Job phases in which the job is ending or over (batch/v1alpha1 job.go): nothing to end.
ENDED_PHASES = frozenset(
    {"Aborting", "Aborted", "Completing", "Completed", "Terminating", "Terminated", "Failed"}
)
_JOB_API_VERSION = "batch.volcano.sh/v1alpha1"
_COMMAND_API_VERSION = "bus.volcano.sh/v1alpha1"
_ACTION = "TerminateJob"
_LOG_BYTES = 4096


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text)


def parse_log_time(line: str) -> datetime | None:
    """The timestamp the kubelet puts before a log line (``timestamps=true``: RFC 3339, nanoseconds)."""
    stamp = line.split(" ", 1)[0]
    if not stamp.endswith("Z") or "T" not in stamp:
        return None
    body = stamp[:-1]
    if "." in body:
        whole, fraction = body.split(".", 1)
        body = f"{whole}.{fraction[:6]}"
    try:
        return datetime.fromisoformat(body + "+00:00")
    except ValueError:
        return None


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f}m"


@dataclass(frozen=True)
class Verdict:
    reason: str
    """STUCK_REASON or SILENT_REASON: the Job's status.state.reason and the Event's reason."""
    message: str


def _waiting_since(pod: Obj, status: Obj, threshold: float) -> datetime | None:
    """Since when this container has made no progress: the pod's arrival on its node, or the end of
    its last run that lasted at least the threshold (a container that ran that long was working)."""
    pod_status = pod.get("status") or {}
    since = _time(pod_status.get("startTime"))
    terminated = (status.get("lastState") or {}).get("terminated") or {}
    started, finished = _time(terminated.get("startedAt")), _time(terminated.get("finishedAt"))
    if started is not None and finished is not None and (finished - started).total_seconds() >= threshold:
        since = finished if since is None else max(since, finished)
    return since


def _describe(kind: str, status: Obj) -> tuple[str, str] | None:
    """(state, what a person reads) of a container that is not running its main work, or None."""
    state = status.get("state") or {}
    name = status.get("name", "?")
    if "waiting" in state:
        waiting = state["waiting"] or {}
        reason = waiting.get("reason") or "Waiting"
        message = (waiting.get("message") or "").strip().splitlines()
        detail = f": {message[0][:300]}" if message else ""
        restarts = status.get("restartCount") or 0
        again = f" after {restarts} restarts" if restarts else ""
        return reason, f"{kind} {name} {reason}{again}{detail}"
    if kind == "init container" and "running" in state:
        return "Running", f"init container {name} still running"
    return None


def pod_stuck(pod: Obj, *, now: datetime, threshold: float) -> str | None:
    """Why a bound pod has not progressed for longer than ``threshold`` seconds, or None."""
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if metadata.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    name = metadata.get("name", "?")
    init_done = all(
        "terminated" in (s.get("state") or {}) and (s["state"]["terminated"] or {}).get("exitCode") == 0
        for s in status.get("initContainerStatuses") or []
    )
    statuses: list[tuple[str, Obj]] = []
    if not init_done:
        statuses = [("init container", s) for s in status.get("initContainerStatuses") or []]
    else:
        statuses = [("container", s) for s in status.get("containerStatuses") or []]
    for kind, container in statuses:
        described = _describe(kind, container)
        if described is None:
            continue
        since = _waiting_since(pod, container, threshold)
        if since is None:
            continue
        waited = (now - since).total_seconds()
        if waited > threshold:
            return f"pod {name}: {described[1]} for {_minutes(waited)}"
    if not status.get("containerStatuses") and not status.get("initContainerStatuses"):
        scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
        since = _time(status.get("startTime")) or _time((scheduled or {}).get("lastTransitionTime"))
        if since is not None and (now - since).total_seconds() > threshold:
            return (
                f"pod {name}: on its node {_minutes((now - since).total_seconds())} with no container status"
            )
    return None


def _running_since(pod: Obj) -> datetime | None:
    """When the pod's last container to start started (None: not every container runs)."""
    starts = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        running = (status.get("state") or {}).get("running")
        if running is None:
            return None
        starts.append(_time(running.get("startedAt")))
    known = [moment for moment in starts if moment is not None]
    return max(known) if known and len(known) == len(starts) else None


def judge_run(
    job: Obj,
    pods: Sequence[Obj],
    *,
    trainium_nodes: Iterable[str],
    last_lines: Mapping[str, tuple[datetime, str]] | None,
    now: datetime,
    threshold: float,
) -> Verdict | None:
    """Whether a run must end, and why (pure: the objects as the API returned them).

    ``last_lines``: pod name -> (time, text) of its newest log line, for the pods that wrote one;
    None when the logs were not read (silence is then not judged).
    """
    state = (job.get("status") or {}).get("state") or {}
    if state.get("phase") in ENDED_PHASES or state.get("reason") in GUARD_REASONS:
        return None
    nodes = set(trainium_nodes)
    live = [
        pod
        for pod in pods
        if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]
    bound = [pod for pod in live if (pod.get("spec") or {}).get("nodeName") in nodes]
    if not bound:
        return None
    limit = _minutes(threshold)
    for pod in bound:
        problem = pod_stuck(pod, now=now, threshold=threshold)
        if problem is not None:
            return Verdict(STUCK_REASON, f"{problem} (limit {limit}); ended to free its Trainium nodes")
    if last_lines is None or len(bound) != len(live):
        return None
    return _silence(bound, last_lines, now=now, threshold=threshold)


def not_picked_up(
    job: Obj, pods: Sequence[Obj], *, podgroup_phase: str | None, now: datetime, threshold: float
) -> Verdict | None:
    """NotPickedUp when Volcano has made no pod of the Job (phase none or ``Pending``) for longer
    than ``threshold`` seconds since its creation, not reported yet. ``podgroup_phase``: the phase of
    the Job's PodGroup, None when it has none; it says which of Volcano's parts holds the Job up."""
    metadata = job.get("metadata") or {}
    state = (job.get("status") or {}).get("state") or {}
    phase = state.get("phase") or ""
    if phase not in ("", "Pending") or pods or state.get("reason") == NOT_PICKED_UP_REASON:
        return None
    created = _time(metadata.get("creationTimestamp"))
    if metadata.get("deletionTimestamp") or created is None:
        return None
    waited = (now - created).total_seconds()
    if waited <= threshold:
        return None
    seen = f"in {_minutes(waited)} (limit {_minutes(threshold)}): phase {phase or 'none'}"
    if podgroup_phase is None:
        said = (
            f"Volcano's job controller has not picked this Job up {seen}, no PodGroup, no pod. Either the "
            "controller is down (kubectl -n volcano-system get pods), or this Job was applied again under "
            "the name of a Job deleted moments before and the controller dropped it with the old one "
            "(volcano#3968): delete it, wait as long again as the old pods took to go, and apply it again "
            "(docs/runs.md, Rerun)"
        )
    elif podgroup_phase in ("", "Pending"):
        said = (
            f"Volcano's scheduler has not taken this Job's PodGroup up {seen}, PodGroup Pending, no pod "
            "(the job controller creates the pods once the scheduler moves the PodGroup on). Is the "
            "scheduler running? (kubectl -n volcano-system get pods)"
        )
    else:
        said = (
            f"Volcano's job controller has created no pod of this Job {seen}, PodGroup {podgroup_phase}. "
            "Is the controller running? (kubectl -n volcano-system get pods; the Job's events)"
        )
    return Verdict(NOT_PICKED_UP_REASON, said)


def not_ended(
    job: Obj,
    pods: Sequence[Obj],
    *,
    trainium_nodes: Iterable[str],
    ended_at: datetime,
    now: datetime,
    threshold: float,
) -> str | None:
    """The Event's message when a run this guard ended (its state reason one of ours) is not ending
    and still has pods on Trainium nodes longer than ``threshold`` seconds after ``ended_at``."""
    metadata = job.get("metadata") or {}
    state = (job.get("status") or {}).get("state") or {}
    phase = state.get("phase") or ""
    if state.get("reason") not in GUARD_REASONS or phase in ENDED_PHASES:
        return None
    nodes = set(trainium_nodes)
    held = sorted(
        str(pod["spec"]["nodeName"])
        for pod in pods
        if (pod.get("spec") or {}).get("nodeName") in nodes
        and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    )
    waited = (now - ended_at).total_seconds()
    if not held or waited <= threshold:
        return None
    return (
        f"Volcano has not carried out the TerminateJob sent {_minutes(waited)} ago (limit {_minutes(threshold)}): "
        f"phase {phase or 'none'}, and its pods still hold Trainium nodes {', '.join(held)}. Is Volcano's "
        "job controller running? (kubectl -n volcano-system get pods). Deleting the Job frees the nodes "
        f"(the garbage collector deletes its pods): kubectl -n {metadata.get('namespace')} delete "
        f"vcjob {metadata.get('name')}"
    )


def _silence(
    pods: Sequence[Obj], last_lines: Mapping[str, tuple[datetime, str]], *, now: datetime, threshold: float
) -> Verdict | None:
    """NoProgress when every pod runs and the newest line over all of them is older than the threshold."""
    latest: tuple[datetime, str, str] | None = None
    for pod in pods:
        started = _running_since(pod)
        if started is None:
            return None
        name = pod["metadata"]["name"]
        moment, text = last_lines.get(name, (started, ""))
        if latest is None or moment > latest[0]:
            latest = (moment, name, text)
    if latest is None or (now - latest[0]).total_seconds() <= threshold:
        return None
    moment, name, text = latest
    last = f"last line ({name}): {text.strip()[:200]}" if text else "no line written since the pods started"
    return Verdict(
        SILENT_REASON,
        f"no log output from any of its {len(pods)} pods for {_minutes((now - moment).total_seconds())} "
        f"(limit {_minutes(threshold)}); {last}; ended to free its Trainium nodes",
    )


REMEMBERED_LOG_FAILURES = 10_000
"""The most pods whose failed log read the guard remembers (a few hundred bytes each): more than the
pods of every run of the 2,048-node bench. Past it the oldest failure is forgotten, so that pod's log
is asked for again sooner than its retry time: more requests, never a run judged on less."""
LOG_READS_PER_PASS = 200
"""The most pods whose log one pass starts reading for runs' silence (a request per container, at
most one more run's pods past it): a pass after a restart, with every long run due at once, costs a
bounded time (a few seconds at the tens of milliseconds a log request took at 2,048 simulated nodes,
docs/performance.md). The runs past it wait for the next pass; the ones read in this pass are then
heard (not read again within their limit), ended, or remembered as unreadable, so every run is
reached within a pass per 200 due runs. Only when a silent run ends moves, by a pass period for
each 200 runs due before it, never whether it ends."""
PodKey = tuple[str, str, str]
ContainersState = tuple[tuple[str, int, str], ...]


def _pod_key(pod: Obj) -> PodKey:
    """Namespace, name and uid: Volcano gives a restarted run's new pods the old pods' names."""
    metadata = pod.get("metadata") or {}
    return (
        str(metadata.get("namespace") or ""),
        str(metadata.get("name") or ""),
        str(metadata.get("uid") or ""),
    )


def _containers_state(pod: Obj) -> ContainersState:
    """What changes when a container of the pod restarts: its restart count and when it started."""
    return tuple(
        (
            str(status.get("name")),
            int(status.get("restartCount") or 0),
            str(((status.get("state") or {}).get("running") or {}).get("startedAt") or ""),
        )
        for status in (pod.get("status") or {}).get("containerStatuses") or []
    )


@dataclass(frozen=True)
class LogFailure:
    """A pod's failed log read: its containers then, the failures in a row, when to ask again."""

    state: ContainersState
    failures: int
    retry_at: datetime


@dataclass
class UnreadableLogs:
    """The pods whose log the API server could not serve, kept between passes (a restart starts
    afresh), so that a pass does not ask again for every log that failed the pass before.

    A pod's log is asked for again at its retry time: an eighth of the run's limit after the first
    failure, doubling with each failure in a row up to the limit, each spread over its later half by
    the pod's key (failures of one pass come due over several passes, not all in one); at once when
    its containers restart or another pod takes its name (new uid); never for a pod that is no
    longer listed, which is forgotten. At most ``limit`` pods are remembered."""

    limit: int = REMEMBERED_LOG_FAILURES
    pods: dict[PodKey, LogFailure] = field(default_factory=dict)
    """In the order of their last failure, oldest first."""

    def waiting(self, pod: Obj, now: datetime) -> LogFailure | None:
        """The failure that keeps the pod's log unread at ``now``, or None (none remembered, the
        pod's containers restarted since, or its retry time has come)."""
        known = self.pods.get(_pod_key(pod))
        if known is None or known.state != _containers_state(pod) or now >= known.retry_at:
            return None
        return known

    def failed(self, pod: Obj, *, now: datetime, threshold: float) -> LogFailure:
        """Remember a failed read of the pod's log; the failure with its retry time."""
        key, state = _pod_key(pod), _containers_state(pod)
        known = self.pods.pop(key, None)
        failures = known.failures + 1 if known is not None and known.state == state else 1
        delay = min(threshold, threshold / 8 * 2 ** min(failures - 1, 3))
        spread = 0.5 + 0.5 * zlib.crc32(repr(key).encode()) / 2**32
        failure = LogFailure(state, failures, now + timedelta(seconds=delay * spread))
        self.pods[key] = failure
        while len(self.pods) > self.limit:
            del self.pods[next(iter(self.pods))]
        return failure

    def read(self, pod: Obj) -> None:
        """The pod's log was read: nothing to remember."""
        self.pods.pop(_pod_key(pod), None)

    def forget_all_but(self, pods: Iterable[Obj]) -> None:
        """Keep only the pods still listed (``pods``: every unfinished pod of the team namespaces)."""
        present = {_pod_key(pod) for pod in pods}
        self.pods = {key: failure for key, failure in self.pods.items() if key in present}


@dataclass
class Endings:
    """The runs this watchdog process ended, by Job uid: when (or when it first saw them ended), and
    which it has reported NotEnded. Kept between passes, forgotten with their Jobs; a restart
    starts afresh."""

    ended_at: dict[str, datetime] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)
    heard: dict[str, tuple[frozenset[str], datetime]] = field(default_factory=dict)
    """The newest log line read of each run, with the names of the pods it was read among: while
    the same pods run, the run cannot be silent until a threshold after that line, so their logs
    are not read again before then (a progressing run costs one log request a threshold, not one a
    pass). Other pods (Volcano restarted the run, a pod went): read again."""
    unreadable: UnreadableLogs = field(default_factory=UnreadableLogs)
    """The pods whose log read failed, until their retry time."""

    def forget_all_but(self, uids: set[str]) -> None:
        """Keep only the runs whose Jobs still exist (``uids``)."""
        self.ended_at = {uid: moment for uid, moment in self.ended_at.items() if uid in uids}
        self.reported &= uids
        self.heard = {uid: moment for uid, moment in self.heard.items() if uid in uids}


@dataclass(frozen=True, kw_only=True)
class GuardSettings:
    namespaces: tuple[str, ...]
    threshold_seconds: float
    annotation: str
    """The Job annotation that sets a run's own threshold, in minutes."""
    component: str
    max_threshold_seconds: float | None = None
    """The longest a run's own threshold may be (``--stuck-max-minutes``): a larger annotation is
    clamped to it, so no annotation takes a run out of the guard. None: no ceiling."""


def _threshold(job: Obj, settings: GuardSettings, log: Callable[[str], object]) -> float:
    value = ((job.get("metadata") or {}).get("annotations") or {}).get(settings.annotation)
    if value is None:
        return settings.threshold_seconds
    try:
        minutes = float(value)
    except ValueError:
        minutes = 0.0
    if minutes <= 0:
        log(
            f"run {job['metadata'].get('name')}: annotation {settings.annotation}={value!r} is not a positive number of minutes; using the default"
        )
        return settings.threshold_seconds
    ceiling = settings.max_threshold_seconds
    if ceiling is not None and minutes * 60 > ceiling:
        log(
            f"run {job['metadata'].get('name')}: annotation {settings.annotation}={value!r} is above the "
            f"ceiling of {_minutes(ceiling)}; using the ceiling"
        )
        return ceiling
    return minutes * 60


def _owner(pod: Obj) -> str | None:
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if (
            owner.get("controller")
            and owner.get("kind") == "Job"
            and owner.get("apiVersion") == _JOB_API_VERSION
        ):
            return str(owner.get("name"))
    return None


def _last_line(api: Api, pod: Obj) -> tuple[datetime, str] | None:
    """The newest log line of any container of the pod, with its time."""
    namespace = pod["metadata"]["namespace"]
    name = pod["metadata"]["name"]
    newest: tuple[datetime, str] | None = None
    for container in (pod.get("spec") or {}).get("containers") or []:
        query = urllib.parse.urlencode(
            {
                "container": container["name"],
                "tailLines": "1",
                "timestamps": "true",
                "limitBytes": str(_LOG_BYTES),
            }
        )
        path = (
            f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods/{urllib.parse.quote(name)}/log?{query}"
        )
        text = api.text(path).strip()
        if not text:
            continue
        line = text.splitlines()[-1]
        moment = parse_log_time(line)
        if moment is not None and (newest is None or moment > newest[0]):
            newest = (moment, line.split(" ", 1)[1] if " " in line else "")
    return newest


def _rank(pod: Obj) -> tuple[int, str]:
    """Rank 0 first: Volcano names a Job's pods ``<job>-<task>-<index>``, and rank 0 is the pod that
    prints the training steps (run_worker.sh, torchrun)."""
    name = str(pod["metadata"]["name"])
    index = name.rsplit("-", 1)[-1]
    return (int(index) if index.isdigit() else 1 << 30, name)


class _LogUnread(Exception):
    """A pod's log could not be read: the run's silence cannot be judged this pass."""

    def __init__(self, pod: str, error: ApiError, failure: LogFailure) -> None:
        super().__init__(f"pod {pod}: {error}")
        self.pod, self.error, self.failure = pod, error, failure


def _last_lines(
    read: Callable[[Obj], tuple[datetime, str] | None],
    pods: Sequence[Obj],
    *,
    now: datetime,
    threshold: float,
    unreadable: UnreadableLogs,
) -> dict[str, tuple[datetime, str]]:
    """The newest log line of the run's pods, read one pod after another from rank 0 and only until
    one line is newer than the threshold: that line alone proves the run is not silent, so a run
    that progresses costs one log request a pass (a container each), however many pods it has; only
    a run that is silent on every pod costs one request per pod, once, as it is then ended.
    A read that fails is remembered in ``unreadable`` and ends the reading (``_LogUnread``): silence
    needs every pod's line, so the other pods' would decide nothing."""
    lines: dict[str, tuple[datetime, str]] = {}
    for pod in sorted(pods, key=_rank):
        try:
            line = read(pod)
        except ApiError as error:
            failure = unreadable.failed(pod, now=now, threshold=threshold)
            raise _LogUnread(str(pod["metadata"]["name"]), error, failure) from None
        unreadable.read(pod)
        if line is None:
            continue
        lines[pod["metadata"]["name"]] = line
        if (now - line[0]).total_seconds() <= threshold:
            break
    return lines


def _reason(job: Obj) -> str | None:
    return ((job.get("status") or {}).get("state") or {}).get("reason")


def _status_path(job: Obj) -> str:
    metadata = job["metadata"]
    namespace, name = urllib.parse.quote(metadata["namespace"]), urllib.parse.quote(metadata["name"])
    return f"/apis/batch.volcano.sh/v1alpha1/namespaces/{namespace}/jobs/{name}/status"


def _warn(api: Api, job: Obj, verdict: Verdict, *, component: str) -> None:
    """A Warning Event on the Job with the verdict's reason and message."""
    api.event(
        namespace=job["metadata"]["namespace"],
        involved={**job, "apiVersion": _JOB_API_VERSION, "kind": "Job"},
        reason=verdict.reason,
        message=verdict.message,
        component=component,
    )


def record(api: Api, job: Obj, verdict: Verdict, *, component: str) -> None:
    """The verdict into the Job's ``status.state.reason`` and ``message``, and a Warning Event on it."""
    api.merge_patch(
        _status_path(job),
        {"status": {"state": {"reason": verdict.reason, "message": verdict.message[:1024]}}},
    )
    _warn(api, job, verdict, component=component)


def end_run(api: Api, job: Obj, verdict: Verdict, *, component: str) -> None:
    """TerminateJob through a Volcano Command, the reason into the Job's status, and an Event."""
    metadata = job["metadata"]
    namespace, name = metadata["namespace"], metadata["name"]
    target = {
        "apiVersion": _JOB_API_VERSION,
        "kind": "Job",
        "name": name,
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    command = {
        "apiVersion": _COMMAND_API_VERSION,
        "kind": "Command",
        "metadata": {
            "generateName": f"{name}-{_ACTION.lower()}-",
            "namespace": namespace,
            "ownerReferences": [target],
        },
        "target": target,
        "action": _ACTION,
        "reason": verdict.reason,
        "message": verdict.message[:1024],
    }
    api.call(
        "POST", f"/apis/bus.volcano.sh/v1alpha1/namespaces/{urllib.parse.quote(namespace)}/commands", command
    )
    record(api, job, verdict, component=component)


@dataclass(frozen=True, kw_only=True)
class _Pass:
    """What one pass of the guard knows, for judging one Job after another."""

    api: Api
    settings: GuardSettings
    nodes: set[str]
    podgroup_phases: Mapping[str, str]
    endings: Endings
    now: datetime
    log: Callable[[str], object]
    unread: list[str] = field(default_factory=list)
    """The runs whose logs this pass did not ask for, as an earlier read failed (not due again yet)."""
    pods_read: list[str] = field(default_factory=list)
    """The pods whose log this pass asked for (``LOG_READS_PER_PASS``)."""
    deferred: list[str] = field(default_factory=list)
    """The runs whose logs this pass left for the next, its log reads spent."""

    def _read(self, pod: Obj) -> tuple[datetime, str] | None:
        self.pods_read.append(str(pod["metadata"]["name"]))
        return _last_line(self.api, pod)

    def judge(self, job: Obj, run_pods: Sequence[Obj]) -> bool:
        """Report, end or leave one Job; False when a log read failed (logged, with its reason).
        ApiError: a write failed, the next pass tries again."""
        api, now, nodes = self.api, self.now, self.nodes
        metadata = job["metadata"]
        key, uid = f"{metadata['namespace']}/{metadata['name']}", str(metadata.get("uid"))
        threshold = _threshold(job, self.settings, self.log)
        unsynced = not_picked_up(
            job, run_pods, podgroup_phase=self.podgroup_phases.get(uid), now=now, threshold=threshold
        )
        if unsynced is not None:
            record(api, job, unsynced, component=self.settings.component)
            self.log(f"run {key}: reported ({unsynced.reason}): {unsynced.message}")
            return True
        if _reason(job) == NOT_PICKED_UP_REASON and run_pods:
            api.merge_patch(_status_path(job), {"status": {"state": {"reason": None, "message": None}}})
            self.log(f"run {key}: picked up by Volcano after all; report cleared")
        if _reason(job) in GUARD_REASONS:
            self._check_ended(job, run_pods, key, uid, threshold)
            return True
        verdict = judge_run(
            job, run_pods, trainium_nodes=nodes, last_lines=None, now=now, threshold=threshold
        )
        names = frozenset(str(pod["metadata"]["name"]) for pod in run_pods)
        heard = self.endings.heard.get(uid)
        recently = heard is not None and heard[0] == names and (now - heard[1]).total_seconds() <= threshold
        if verdict is None and not recently and _silence_possible(run_pods, nodes, now, threshold):
            ok, verdict = self._judge_silence(job, run_pods, key, uid, threshold)
            if verdict is None:
                return ok
        if verdict is None:
            return True
        end_run(api, job, verdict, component=self.settings.component)
        self.endings.ended_at[uid] = now
        self.log(f"run {key}: ended ({verdict.reason}): {verdict.message}")
        return True

    def _judge_silence(
        self, job: Obj, run_pods: Sequence[Obj], key: str, uid: str, threshold: float
    ) -> tuple[bool, Verdict | None]:
        """(False when a log read failed, the verdict) from the run's newest log lines; no verdict
        when they were not read this pass (one failed before and is not due, or the pass's log reads
        are spent) or show the run is not silent."""
        now, unreadable = self.now, self.endings.unreadable
        if any(unreadable.waiting(pod, now) is not None for pod in run_pods):
            # A pod whose log could not be read is not asked again before its retry time; without
            # its line the run cannot be silent, so no other pod's log is asked for either.
            self.unread.append(key)
            return True, None
        if len(self.pods_read) >= LOG_READS_PER_PASS:
            self.deferred.append(key)
            return True, None
        try:
            lines = _last_lines(self._read, run_pods, now=now, threshold=threshold, unreadable=unreadable)
        except _LogUnread as unread:
            wait = (unread.failure.retry_at - now).total_seconds()
            self.log(
                f"run {key}: silence not judged: the log of pod {unread.pod} could not be read "
                f"({unread.error}); asked again in {wait:.0f} s, or when its containers restart "
                f"(failure {unread.failure.failures} in a row)"
            )
            return False, None
        if lines:
            names = frozenset(str(pod["metadata"]["name"]) for pod in run_pods)
            self.endings.heard[uid] = (names, max(moment for moment, _ in lines.values()))
        verdict = judge_run(
            job, run_pods, trainium_nodes=self.nodes, last_lines=lines, now=now, threshold=threshold
        )
        return True, verdict

    def _check_ended(self, job: Obj, run_pods: Sequence[Obj], key: str, uid: str, threshold: float) -> None:
        """A run this guard ended: NotEnded, once, when Volcano has not ended it within the limit."""
        if uid in self.endings.reported:
            return
        said = not_ended(
            job,
            run_pods,
            trainium_nodes=self.nodes,
            ended_at=self.endings.ended_at.setdefault(uid, self.now),
            now=self.now,
            threshold=threshold,
        )
        if said is None:
            return
        _warn(self.api, job, Verdict(NOT_ENDED_REASON, said), component=self.settings.component)
        self.endings.reported.add(uid)
        self.log(f"run {key}: NOT ENDED by Volcano: {said}")


def guard_pass(
    api: Api,
    settings: GuardSettings,
    *,
    pods: Sequence[Obj],
    trainium_nodes: Iterable[str],
    podgroup_phases: Mapping[str, str],
    now: datetime,
    log: Callable[[str], object] = print,
    endings: Endings | None = None,
    reads: Reads | None = None,
) -> bool:
    """Judge every run of the team namespaces and end the stuck ones; False when an API call failed.
    ``reads``: where the Jobs are listed from (the API by default; kube_mirror.Mirrors in a loop).
    ``podgroup_phases``: the phase of each PodGroup, by the uid of the Volcano Job that owns it;
    ``endings``: what this process ended in earlier passes (None: nothing remembered)."""
    work = _Pass(
        api=api,
        settings=settings,
        nodes=set(trainium_nodes),
        podgroup_phases=podgroup_phases,
        endings=endings if endings is not None else Endings(),
        now=now,
        log=log,
    )
    by_job: dict[tuple[str, str], list[Obj]] = {}
    for pod in pods:
        owner = _owner(pod)
        if owner is not None:
            by_job.setdefault((pod["metadata"].get("namespace", ""), owner), []).append(pod)
    ok = listed_all = True
    listed: set[str] = set()
    for namespace in settings.namespaces:
        try:
            jobs = (reads or api).items(
                f"/apis/batch.volcano.sh/v1alpha1/namespaces/{urllib.parse.quote(namespace)}/jobs"
            )
        except ApiError as error:
            log(f"error: {error}; runs of {namespace} not judged this pass")
            ok = listed_all = False
            continue
        for job in jobs:
            listed.add(str(job["metadata"].get("uid")))
            try:
                ok = work.judge(job, by_job.get((namespace, job["metadata"]["name"]), [])) and ok
            except ApiError as error:
                log(f"run {namespace}/{job['metadata']['name']}: NOT judged or ended: {error}")
                ok = False
    if work.deferred:
        log(
            f"{len(work.deferred)} runs' silence left for the next pass: this one read "
            f"{len(work.pods_read)} pods' logs, its budget {LOG_READS_PER_PASS} (first: {work.deferred[0]})"
        )
    if work.unread:
        log(
            f"{len(work.unread)} runs' silence not judged this pass: a log of each could not be read "
            f"before (logged then) and is not asked for again until its retry time (first: {work.unread[0]})"
        )
    # A pod no longer listed (deleted, or finished: ``pods`` holds every unfinished pod of the
    # team namespaces) is forgotten; so is a deleted Job (only after a pass that listed every
    # namespace).
    work.endings.unreadable.forget_all_but(pods)
    if listed_all:
        work.endings.forget_all_but(listed)
    return ok


def _silence_possible(pods: Sequence[Obj], nodes: set[str], now: datetime, threshold: float) -> bool:
    """Every pod bound to a Trainium node and running for longer than the threshold: worth reading logs."""
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    if not live:
        return False
    for pod in live:
        if (pod.get("spec") or {}).get("nodeName") not in nodes:
            return False
        started = _running_since(pod)
        if started is None or (now - started).total_seconds() <= threshold:
            return False
    return True
