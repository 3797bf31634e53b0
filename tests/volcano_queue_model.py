"""A MODEL, written here, of how Volcano v1.15.1's queue plugins share a cluster's resources.

Not Volcano: a transcription of the arithmetic of two of its scheduler plugins, line by line, so
that tests can ask what the rendered queues mean. Where the real scheduler can run, it decides
instead: tests/cluster/test_queues.py asks Volcano 1.15.1's own scheduler, on one group shared by
two teams, whether a team borrows an idle team's share up to its capability, whether the capability
keeps a gang off free nodes, whether a returning team goes first for the freed nodes with
nothing evicted, and, with the example's weights 1 and 2 on that group, whether the queue furthest
below its deserved share (allocated / deserved) is offered a freed node first;
tests/cluster/test_scale_from_zero.py whether a gang on zero nodes stays Unschedulable until the
autoscaler adds its nodes; and, over a trn1 and a trn1n group both teams use, whether a borrowing
queue is counted at its capability in chips and EFA interfaces of both shapes and refused beyond it
(test_queues.py). This model still stands alone for what the stack does not run or the tier does
not set up: ``proportion`` (why the stack runs ``capacity``), and the order by share over several
groups of different instance types (the example configuration's trn1n and trn1 groups).
Every function names the source lines it follows (volcano-sh/volcano at tag v1.15.1):

- pkg/scheduler/api/resource_info.go: ``Resource`` arithmetic. CPU in millicores, memory in bytes,
  scalar resources (Neuron chips, EFA interfaces) in thousandths (``NewResource``, lines 87-124);
  a dimension within ``minResource`` (0.1) counts as equal (``LessEqual``, 439-476).
- pkg/scheduler/plugins/proportion/proportion.go: a queue's ``deserved`` from weights, water-filled
  up to each queue's request (lines 92-264), ``Overused`` (319-331), ``Allocatable`` (333-359).
- pkg/scheduler/plugins/capacity/capacity.go: ``deserved`` as the Queue says, ``realCapability``
  (``buildQueueAttrs``, 1042-1150), ``Allocatable`` (1629-1652), the queue order (1183-1193,
  1541-1561, 1800-1829).
- pkg/scheduler/actions/allocate/allocate.go: an overused queue is skipped (line 294); a task whose
  queue is not allocatable is skipped (744-747) and stays Pending, reported ``Unschedulable``
  (pkg/scheduler/api/job_info.go, ``TaskSchedulingReason``, 876-882), which the autoscaler acts on.

Left out: hierarchical queues, DRA, scheduling gates, the ``pods`` scalar (ignored by the checks,
resource_info.go 234-237), ``enqueue`` (not configured here), ``elastic`` and ``inqueue`` (only
``enqueue`` reads them), preemption and reclaim (not configured here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

__all__ = [
    "MIN_RESOURCE",
    "QueueState",
    "Resource",
    "capacity_allocatable",
    "capacity_queue_order",
    "capacity_queues",
    "proportion_allocatable",
    "proportion_overused",
    "proportion_queues",
    "resource",
]

MIN_RESOURCE = 0.1
"""resource_info.go line 46: differences below it are equal."""

Resource = dict[str, float]
"""Resource name to amount in Volcano's units: ``cpu`` millicores, ``memory`` bytes, others thousandths."""

_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "m": Fraction(1, 1000)}


def _quantity(text: str) -> Fraction:
    for suffix, factor in _SUFFIX.items():
        if text.endswith(suffix):
            return Fraction(text.removesuffix(suffix)) * factor
    return Fraction(text)


def resource(amounts: Mapping[str, str]) -> Resource:
    """``NewResource`` (resource_info.go 87-124) of a resource list: cpu as ``MilliValue``, memory as
    ``Value``, scalars as ``MilliValue``."""
    converted: Resource = {}
    for name, text in amounts.items():
        value = _quantity(text)
        converted[name] = float(value if name == "memory" else value * 1000)
    return converted


def _add(left: Resource, right: Resource) -> Resource:
    total = dict(left)
    for name, amount in right.items():
        total[name] = total.get(name, 0.0) + amount
    return total


def _exceeded_part(left: Resource, right: Resource) -> Resource:
    """``ExceededPart`` (1085-1096) = the increased side of ``Diff`` with Zero defaults (889-929)."""
    names = set(left) | set(right)
    return {n: left.get(n, 0.0) - right.get(n, 0.0) for n in names if left.get(n, 0.0) > right.get(n, 0.0)}


def _min_dimension(r: Resource, rr: Resource, *, infinity: bool) -> Resource:
    """``MinDimensionResource`` (949-987): each of r's dimensions capped by rr's; a dimension rr lacks
    is left (Infinity) or zeroed (Zero). cpu and memory always compare (fields, not map entries)."""
    capped = dict(r)
    for name in ("cpu", "memory"):
        capped[name] = min(r.get(name, 0.0), rr.get(name, 0.0))
    for name, amount in r.items():
        if name in ("cpu", "memory"):
            continue
        if name in rr:
            capped[name] = min(amount, rr[name])
        elif not infinity:
            capped[name] = 0.0
    return capped


def _max(left: Resource, right: Resource) -> Resource:
    """``helpers.Max`` (helpers.go 51-77)."""
    names = set(left) | set(right)
    return {n: max(left.get(n, 0.0), right.get(n, 0.0)) for n in names}


def _less_equal_zero(left: Resource, right: Resource) -> bool:
    """``LessEqual(rr, Zero)`` (439-476): every dimension of left within right's (missing = 0)."""
    return all(
        amount < right.get(name, 0.0) or abs(amount - right.get(name, 0.0)) < MIN_RESOURCE
        for name, amount in left.items()
        if name in ("cpu", "memory") or amount != 0.0 or name in right
    )


def _less_equal_in(left: Resource, right: Resource, request: Resource) -> bool:
    """``LessEqualWithDimensionAndResourcesName`` (479-523): only the dimensions the request asks
    for (``pods`` ignored); right's missing dimensions count as 0."""
    return not [
        name
        for name, asked in request.items()
        if name != "pods" and asked > 0 and left.get(name, 0.0) > right.get(name, 0.0)
    ]


def _share(attr_allocated: Resource, deserved: Resource) -> float:
    """``updateQueueAttrShare``: the largest allocated/deserved over deserved's dimensions
    (helpers.Share: x/0 is 1, 0/0 is 0)."""
    share = 0.0
    for name, amount in deserved.items():
        if amount < MIN_RESOURCE:  # ResourceNames skips dimensions below minResource (195-214)
            continue
        share = max(share, attr_allocated.get(name, 0.0) / amount)
    return share


@dataclass
class QueueState:
    """A queue as one scheduling session sees it: the Queue's spec and its jobs' tasks.

    ``allocated``: tasks bound or running; ``pending``: tasks waiting (both add to ``request``,
    proportion.go 145-156, capacity.go 1094-1108). A queue with no job is not in the session's
    queue attributes at all (both plugins build them from ``ssn.Jobs``)."""

    name: str
    weight: int = 1
    capability: Resource | None = None
    deserved_spec: Resource | None = None
    guarantee: Resource = field(default_factory=dict)
    allocated: Resource = field(default_factory=dict)
    pending: Resource = field(default_factory=dict)
    # Computed by the plugin:
    deserved: Resource = field(default_factory=dict)
    real_capability: Resource = field(default_factory=dict)

    @property
    def request(self) -> Resource:
        return _add(self.allocated, self.pending)

    @property
    def has_jobs(self) -> bool:
        return any(self.allocated.values()) or any(self.pending.values())


def _real_capability(queue: QueueState, total: Resource, total_guarantee: Resource) -> Resource:
    """proportion.go 129-139 and capacity.go 1078-1088 (the same arithmetic): the cluster's total
    less every queue's guarantee, plus this queue's own, capped by its capability (a capability
    without cpu or memory leaves that dimension unbounded, 120-128)."""
    real = _add(_exceeded_part(total, total_guarantee), queue.guarantee)
    if queue.capability is None:
        return real
    capability = dict(queue.capability)
    capability.setdefault("cpu", float("inf"))
    capability.setdefault("memory", float("inf"))
    return _min_dimension(real, capability, infinity=True)


def _session(queues: Iterable[QueueState], total: Resource) -> tuple[list[QueueState], Resource]:
    in_session = [queue for queue in queues if queue.has_jobs]
    total_guarantee: Resource = {}
    for queue in queues:
        total_guarantee = _add(total_guarantee, queue.guarantee)
    for queue in in_session:
        queue.real_capability = _real_capability(queue, total, total_guarantee)
    return in_session, total_guarantee


def proportion_queues(queues: list[QueueState], total: Resource) -> list[QueueState]:
    """proportion.go ``OnSessionOpen`` (92-264): each queue in the session gets a weighted part of
    what remains, capped by its realCapability and its request, at least its guarantee; a queue whose
    request is met, or whose deserved stopped growing, leaves the round; rounds repeat until nothing
    remains or nothing changes."""
    in_session, _ = _session(queues, total)
    for queue in in_session:
        queue.deserved = {}
    remaining = dict(total)
    met: set[str] = set()
    while True:
        total_weight = sum(q.weight for q in in_session if q.name not in met)
        if total_weight == 0:
            break
        old_remaining = dict(remaining)
        increased: Resource = {}
        decreased: Resource = {}
        for queue in in_session:
            if queue.name in met:
                continue
            old = dict(queue.deserved)
            part = {n: a * queue.weight / total_weight for n, a in remaining.items()}
            deserved = _add(queue.deserved, part)
            deserved = _min_dimension(deserved, queue.real_capability, infinity=True)
            deserved = _min_dimension(deserved, queue.request, infinity=False)
            deserved = _max(deserved, queue.guarantee)
            queue.deserved = deserved
            if _less_equal_zero(queue.request, deserved) or deserved == old:
                met.add(queue.name)
            for name in set(deserved) | set(old):
                change = deserved.get(name, 0.0) - old.get(name, 0.0)
                if change > 0:
                    increased[name] = increased.get(name, 0.0) + change
                elif change < 0:
                    decreased[name] = decreased.get(name, 0.0) - change
        remaining = _exceeded_part(_add(remaining, decreased), increased)
        if not any(amount >= MIN_RESOURCE for amount in remaining.values()) or remaining == old_remaining:
            break
    return in_session


def proportion_overused(queue: QueueState) -> bool:
    """proportion.go 319-331: deserved <= allocated in every dimension. allocate.go 294 skips the queue."""
    return _less_equal_zero(queue.deserved, queue.allocated)


def proportion_allocatable(queue: QueueState, task: Resource) -> bool:
    """proportion.go 333-355: allocated plus the task within deserved, in the task's dimensions."""
    return _less_equal_in(_add(queue.allocated, task), queue.deserved, task)


def capacity_queues(queues: list[QueueState], total: Resource) -> list[QueueState]:
    """capacity.go ``buildQueueAttrs`` (1042-1150): deserved as the Queue says, capped by the
    realCapability where that has the dimension (Infinity), at least the guarantee."""
    in_session, _ = _session(queues, total)
    for queue in in_session:
        deserved = _min_dimension(dict(queue.deserved_spec or {}), queue.real_capability, infinity=True)
        queue.deserved = _max(deserved, queue.guarantee)
    return in_session


def capacity_allocatable(queue: QueueState, task: Resource) -> bool:
    """capacity.go 1629-1652 (no reserved tasks): allocated plus the task within realCapability,
    in the task's dimensions. Deserved is not consulted."""
    return _less_equal_in(_add(queue.allocated, task), queue.real_capability, task)


def capacity_queue_order(queues: list[QueueState]) -> list[str]:
    """capacity.go 1183-1193 with ``compareShareWithDeserved`` (1541-1561): equal priority, so the
    lower share goes first; a queue without deserved has share 1 (1800-1829)."""

    def share(queue: QueueState) -> float:
        if not any(amount >= MIN_RESOURCE for amount in queue.deserved.values()):
            return 1.0
        return _share(queue.allocated, queue.deserved)

    return [queue.name for queue in sorted(queues, key=share)]
