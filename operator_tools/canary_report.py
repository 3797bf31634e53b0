"""The canary's functional core: its stages, their bookkeeping, and the one line that explains a
failure, as pure functions over Kubernetes objects (plain dicts, as the API returns them).

operator_tools/canary.py is the thin shell that reads the cluster and feeds these; tests/operator_tools/test_canary.py
drives them with recorded objects. Nothing here calls the API.

The stages are every run stage of the time-to-first-step model (cluster_facts/run_stages.py), in its
order, with the canary's own proofs placed where they happen in a run: the mounts and devices when
the container is created (after ``image_pull``), the cross-node collective once the process group
has formed (after ``rendezvous``), the output, TensorBoard and the nodes' removal after the run. The
canary prints them in exactly that order (``Report.stage_lines``): a stage is printed once it and
every stage before it have an outcome, and when the canary stops at a failure, each stage it did not
reach is printed as SKIP with that reason. Its times are when the canary saw each stage pass, so a
stage seen in the same poll as an earlier one shows the same time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cluster_facts.run_stages import RUN_STAGES, RunStage

__all__ = [
    "CANARY_STAGES",
    "CONTAINER_STAGES",
    "NOT_MEASURABLE",
    "POD_PREFIX",
    "POD_STAGES",
    "TOGETHER",
    "Report",
    "StageLine",
    "explain_log",
    "explain_pod",
    "explain_unplaced",
    "parse_stage_lines",
    "run_events",
    "stage_ids",
]

Obj = Mapping[str, Any]

# What the canary proves beyond the shared run stages, each after the run stage it follows: where it
# happens in a run (the container runtime mounts the volumes and the device plugins hand over the
# devices when it creates the container; the collective needs the process group).
_EXTRA: dict[str, tuple[RunStage, ...]] = {
    "image_pull": (
        RunStage("mounts", "the team's directory is writable as its uid, the data sets read-only"),
        RunStage("neuron_devices", "every Neuron device of the instance type is in the pod"),
        RunStage("efa_devices", "every EFA interface of the instance type is in the pod, FI_PROVIDER=efa"),
    ),
    "rendezvous": (RunStage("collective", "an all-reduce across the nodes reaches the EFA threshold"),),
    "first_step": (
        RunStage("output_write", "the run's output directory holds its TensorBoard event file"),
        RunStage("run_end", "the run's Job has ended Completed"),
        RunStage("tensorboard", "TensorBoard lists the run"),
        RunStage("scale_down", "the run's nodes are removed after it ends"),
    ),
}
CANARY_STAGES: tuple[RunStage, ...] = tuple(
    stage for shared in RUN_STAGES for stage in (shared, *_EXTRA.get(shared.id, ()))
)
# What the pod reports (cluster_programs/canary_worker.py); the rest the shell observes.
POD_STAGES = (
    "mounts",
    "data_ready",
    "neuron_devices",
    "efa_devices",
    "rendezvous",
    "compile",
    "collective",
    "output_write",
)
POD_PREFIX = "CANARY "
# The canary trains no model: nothing to measure for a first step.
NOT_MEASURED = {"first_step": "the canary trains no model (its collective is the step)"}
# What only the canary's program in its container on a Trainium node shows (its log lines: the
# mounts, the Neuron devices and EFA interfaces in the pod, the rendezvous, the collective, the
# output) and TensorBoard, which lists the event file that program writes. ``--control-plane-only``
# prints these as not measured: on a cluster whose nodes run no containers (the test tier's kwok
# nodes) nothing could report them, and a missing line there is not a failure of the cluster.
CONTAINER_STAGES: dict[str, str] = {
    **{
        stage: "the canary's program reports it from its container on a Trainium node" for stage in POD_STAGES
    },
    "tensorboard": "TensorBoard lists the event file the canary's program writes",
}

# ``--not-measurable STAGE``: what each of these stages needs that a cluster may not have, said in its
# SKIP line. For a cluster that runs the canary's containers but lacks the hardware or a component:
# the test tier's real Trainium node, whose Neuron and EFA "devices" are a stand-in device plugin's
# device nodes with no driver behind them, whose nodes belong to no Auto Scaling group, and where
# TensorBoard may not run. Nothing else may be named: every other stage is measured wherever the
# canary's containers run. The canary's program runs no check of a stage named (the run's
# CANARY_NOT_MEASURABLE); compile and collective are one Neuron all-reduce and are named together,
# and then its process group is gloo's on the CPU, so the rendezvous is still measured.
NOT_MEASURABLE: dict[str, str] = {
    "neuron_devices": "needs Neuron devices with their driver behind the device nodes",
    "efa_devices": "needs EFA interfaces with their driver behind the device nodes",
    "compile": "needs a Neuron device to compile the all-reduce for",
    "collective": "needs Neuron devices and EFA between the nodes",
    "tensorboard": "needs TensorBoard serving the team's file system",
    "scale_down": "needs the cluster autoscaler and an Auto Scaling group behind the nodes",
}
TOGETHER = ("compile", "collective")
"""Named together or not at all: the program measures both with one Neuron all-reduce."""


def stage_ids() -> tuple[str, ...]:
    return tuple(stage.id for stage in CANARY_STAGES)


@dataclass(frozen=True)
class StageLine:
    stage: str
    ok: bool
    seconds: float
    detail: str


def parse_stage_lines(log: str) -> list[StageLine]:
    """The pod's stage lines, wherever torchrun's ``--tee`` prefix puts them."""
    found = []
    for line in log.splitlines():
        at = line.find(POD_PREFIX + "{")
        if at < 0:
            continue
        try:
            data = json.loads(line[at + len(POD_PREFIX) :])
            found.append(
                StageLine(str(data["stage"]), bool(data["ok"]), float(data["seconds"]), str(data["detail"]))
            )
        except (ValueError, KeyError, TypeError):
            continue
    return found


@dataclass
class Result:
    stage: RunStage
    status: str = "pending"
    """pending, pass, fail or skip."""
    seconds: float | None = None
    detail: str = ""


@dataclass
class Report:
    """Each stage's status and time (seconds since the canary began, or the pod's own measure)."""

    results: dict[str, Result] = field(default_factory=lambda: {s.id: Result(s) for s in CANARY_STAGES})
    unmeasured: list[str] = field(default_factory=list)
    """The stages ``not_measured`` set aside, named by the verdict."""

    def passed(self, stage: str, seconds: float, detail: str = "") -> None:
        result = self.results[stage]
        if result.status == "pending":
            result.status, result.seconds, result.detail = "pass", seconds, detail

    def failed(self, stage: str, seconds: float, detail: str) -> None:
        result = self.results[stage]
        if result.status in ("pending", "pass"):
            result.status, result.seconds, result.detail = "fail", seconds, detail

    def skipped(self, stage: str, detail: str) -> None:
        result = self.results[stage]
        if result.status == "pending":
            result.status, result.detail = "skip", detail

    def not_measured(self, stage: str, why: str) -> None:
        """A stage this canary was told it cannot see (``--control-plane-only``, ``--not-measurable``): a SKIP that says so,
        and the verdict names it, so a pass never reads as a pass of what was not measured."""
        result = self.results[stage]
        if result.status == "pending":
            result.status, result.detail = "skip", f"not measured here: {why}"
            self.unmeasured.append(stage)

    def status(self, stage: str) -> str:
        return self.results[stage].status

    @property
    def failure(self) -> Result | None:
        return next((r for r in self.results.values() if r.status == "fail"), None)

    @property
    def next_pending(self) -> str | None:
        return next((r.stage.id for r in self.results.values() if r.status == "pending"), None)

    def take_pod_lines(self, lines: Iterable[StageLine], *, at: float) -> None:
        """The pod's lines, read ``at`` seconds into the canary; the pod's own measure goes in the detail."""
        for line in lines:
            if line.stage not in self.results:
                continue
            if line.ok:
                self.passed(line.stage, at, f"{line.detail}; {line.seconds:.1f}s in the pod")
            else:
                self.failed(line.stage, at, line.detail)

    def close(self) -> None:
        """The canary has stopped: after a failure, every stage it did not reach is a SKIP saying so."""
        failure = self.failure
        if failure is None:
            return
        for result in self.results.values():
            if result.status == "pending":
                result.status, result.detail = "skip", f"not reached: the canary failed at {failure.stage.id}"

    def stage_lines(self) -> list[tuple[str, str]]:
        """(stage id, line) for each stage, in CANARY_STAGES order, up to the first without an outcome:
        what may be printed so far, so that the printed order is always the stages' order."""
        out = []
        for result in self.results.values():
            if result.status == "pending":
                break
            when = f"{result.seconds:7.1f}s" if result.seconds is not None else "      - "
            text = f"{result.status.upper():7} {when}  {result.stage.id:15} {result.stage.title}"
            if result.detail and result.status != "fail":
                text += f" ({result.detail})"
            out.append((result.stage.id, text))
        return out

    def verdict(self) -> str:
        """The last line: the failure and the line that explains it, or that every stage passed."""
        failure = self.failure
        if failure is not None:
            return f"CANARY FAIL at {failure.stage.id}: {failure.detail}"
        pending = self.next_pending
        if pending is not None:
            return f"CANARY INCOMPLETE: no outcome for {pending}"
        if self.unmeasured:
            return f"CANARY PASS: every stage it measured passed; not measured here: {', '.join(self.unmeasured)}"
        return "CANARY PASS: every stage passed"

    def lines(self) -> list[str]:
        """What the canary prints at the end: one line per stage, in order, and the verdict last."""
        return [text for _, text in self.stage_lines()] + [self.verdict()]


# --- Explaining a failure -------------------------------------------------------------------------------------


def _message(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return " ".join(lines[0].split())[:300] if lines else ""


def explain_pod(pod: Obj) -> tuple[str, str] | None:
    """(stage, line) for a pod that cannot go on: a container waiting in an error, a failed
    container; None while it is fine or merely on its way."""
    name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    for kind, statuses in (("init container", "initContainerStatuses"), ("container", "containerStatuses")):
        for container in status.get(statuses) or []:
            state = container.get("state") or {}
            waiting = state.get("waiting") or {}
            reason = waiting.get("reason") or ""
            detail = f"pod {name}: {kind} {container.get('name')} {reason}"
            if waiting.get("message"):
                detail += f": {_message(waiting.get('message'))}"
            if reason in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName"):
                return "image_pull", detail
            if reason in ("CreateContainerError", "CreateContainerConfigError", "RunContainerError"):
                return (
                    "mounts" if "mount" in detail.lower() or "mkdir" in detail.lower() else "image_pull",
                    detail,
                )
            if reason == "CrashLoopBackOff":
                return "rendezvous", detail
            terminated = state.get("terminated") or {}
            if terminated and terminated.get("exitCode", 0) != 0:
                message = _message(terminated.get("message")) or terminated.get("reason", "")
                return (
                    "",
                    f"pod {name}: {kind} {container.get('name')} exited {terminated.get('exitCode')}: {message}",
                )
    return None


_GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
"""Volcano's: the PodGroup a pod of a Volcano Job belongs to."""


def run_events(events: Sequence[Obj], *, job: Obj, pods: Sequence[Obj]) -> list[Obj]:
    """The events of this run's objects: its Job, its pods and their PodGroup, by uid (by name for the
    PodGroup, which the canary does not read). Not by name alone: the canary's run id is the same on
    every run of one configuration, and the events of an earlier run (an hour's worth, the API
    server's event TTL) name the same pods."""
    uids = {(o.get("metadata") or {}).get("uid") for o in (job, *pods)} - {None, ""}
    groups = {((p.get("metadata") or {}).get("annotations") or {}).get(_GROUP_NAME_ANNOTATION) for p in pods}
    groups -= {None, ""}
    found = []
    for event in events:
        involved = event.get("involvedObject") or {}
        if involved.get("uid") in uids or (
            involved.get("kind") == "PodGroup" and involved.get("name") in groups
        ):
            found.append(event)
    return found


def explain_unplaced(pods: Sequence[Obj], events: Sequence[Obj]) -> str:
    """Why the gang has no nodes: the autoscaler's newest word on it (why it added none), else the
    scheduler's (which only says the gang does not fit the nodes there are)."""
    autoscaler = [e for e in events if e.get("reason") in ("NotTriggerScaleUp", "FailedScaleUp")]
    scheduler = [e for e in events if e.get("reason") in ("FailedScheduling", "Unschedulable")]
    words = autoscaler or scheduler
    if words:
        newest = max(words, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return f"{newest.get('reason')}: {_message(newest.get('message'))}"
    for pod in pods:
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return f"pod {pod['metadata']['name']}: {condition.get('reason')}: {_message(condition.get('message'))}"
    return "no pod was created for the Job (is Volcano's admission and controller running?)"


_LOG_SIGNS = (
    (
        re.compile(r"RendezvousTimeoutError|RendezvousClosedError|rendezvous.*timed? ?out", re.IGNORECASE),
        "rendezvous",
    ),
    (re.compile(r"cannot proceed: (.*)"), ""),
    (
        re.compile(r"EtcdConnectionFailed|Failed to connect to etcd|etcd.*connection refused", re.IGNORECASE),
        "rendezvous",
    ),
)


def explain_log(log: str) -> tuple[str, str] | None:
    """(stage, line) from a pod's log: a stage line that failed, a known sign, or the last error line."""
    lines = parse_stage_lines(log)
    failed = next((line for line in lines if not line.ok), None)
    if failed is not None:
        return failed.stage, failed.detail
    for line in reversed(log.splitlines()):
        for pattern, stage in _LOG_SIGNS:
            if pattern.search(line):
                return stage, " ".join(line.split())[:300]
    for line in reversed(log.splitlines()):
        if re.search(r"(Error|Exception)\b", line):
            return "", " ".join(line.split())[:300]
    return None


def trainium_nodes(nodes: Sequence[Obj], *, label: str, group: str) -> list[Obj]:
    return [n for n in nodes if ((n.get("metadata") or {}).get("labels") or {}).get(label) == group]


def ready(node: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


def device_problem(node: Obj, *, neuron: str, efa: str, want_neuron: int, want_efa: int) -> str | None:
    """None when the node advertises the catalog's devices; else the line that says what it has."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    have_neuron, have_efa = int(allocatable.get(neuron, "0")), int(allocatable.get(efa, "0"))
    if (have_neuron, have_efa) == (want_neuron, want_efa):
        return None
    return (
        f"node {node['metadata']['name']} advertises {have_neuron} {neuron} and {have_efa} {efa}, "
        f"the instance type has {want_neuron} and {want_efa}"
    )
