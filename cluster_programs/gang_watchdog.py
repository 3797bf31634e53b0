"""End the partial-gang stall between Volcano and the Cluster Autoscaler by cordoning idle nodes.

Volcano 1.15.1 marks the pods of a gang that it could place, while the rest of the gang does not
fit, with ``PodScheduled`` reason ``Schedulable`` (volcano-sh/volcano#3976); the autoscaler acts only
on reason ``Unschedulable``. With some idle nodes of a group up, but fewer than the gang needs, the
autoscaler places the visible part of the gang on them in its simulation and neither adds the
missing nodes nor removes the idle ones (docs/capacity.md). Cordoning those idle nodes makes every
pod of the gang ``Unschedulable``: the autoscaler then adds nodes for the whole gang and removes the
cordoned nodes once unneeded.

Runs in the ``gang-watchdog`` Deployment (k8s_charts/gang_watchdog.py renders it with this file in a
ConfigMap), with the standard library only, on Python 3.11+. Each pass:

1. lists the Trainium nodes of ``--node-groups`` (their metadata), the unfinished pods and the
   Volcano PodGroups of ``--namespaces``; only when it holds a cordon or a gang has been stalled
   longer than the threshold does it read the nodes in full and every unfinished pod of the cluster
   (a page at a time, each pod reduced to its node's busy list and requests), as a node's room and
   idleness depend on every pod on it, DaemonSet pods included. Every other pass costs one request
   per team namespace and a few more, and reads the runs' pods and the nodes' metadata: at 1,024
   nodes the full read was 4,813 pods, 53 MiB (docs/performance.md, Scale);
2. a gang (PodGroup) *wants nodes* while its phase is Pending or Inqueue and none of its pods is
   bound (Volcano binds none until all fit); it is *stalled* when it wants nodes, a pod of it shows
   the #3976 signature (``PodScheduled`` False, reason ``Schedulable``), and it has been so for
   longer than ``--threshold-minutes`` (the later of the PodGroup's ``Unschedulable`` condition and
   the signature pods' condition, by lastTransitionTime);
3. for a stalled gang with fewer usable idle nodes than its ``minMember`` (one pod per node, as the
   project's training pods take a whole node), cordons every usable idle node older than the
   threshold: a node of a listed group, matching a signature pod's nodeSelector and required node
   affinity, tolerating nothing the pod does not, with room for the pod, Ready, schedulable, running
   no pod but DaemonSet and mirror pods, and of a group the gang's namespace may use (``--team
   <namespace>=<groups>``: a team's pods can select another team's group only if admission
   failed, and a gang that can never fit must not churn another team's warm nodes). The cordon (``spec.unschedulable``) comes with the
   annotation ``--annotation`` = ``<namespace>/<podgroup>``, so a node a person cordoned (no such
   annotation) is never touched;
4. lifts its own cordon (both fields) when no gang that wants nodes can use the node any more (the
   gang runs, finished or was deleted), so warm nodes come back; and as soon as the idle nodes a
   gang can use, its cordoned ones included, are at least its ``minMember`` (the autoscaler's new
   nodes have joined): the gang then fits as a whole. While a gang wants the node and does not fit,
   the cordon stays (lifting it would recreate the stall).

Every write is a merge patch carrying the node's resourceVersion (a concurrent change fails it and
the next pass reads again). One line per decision on stdout. An API error ends the pass, is logged,
and the next pass retries; ``--once`` runs one pass and exits 0, or 1 when the pass met an error.

What a pass reads every time (the team namespaces' unfinished pods, PodGroups and Volcano Jobs, the
Trainium nodes' metadata) the loop keeps current through watches (kube_mirror.py): each is listed
once and then followed, so a pass reads memory, not the API server (issue #36). ``--once`` lists.
The full read of a stalled pass (the nodes and every pod on them) always lists.

The API server is reached through ``kube_api`` (k8s_charts/scripts/kube_api.py, in the same
ConfigMap): the pod's service account, or the ``KUBE_API_*`` overrides tests point at loopback.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kube_api import Api, ApiError, Reads, in_cluster
from kube_mirror import Mirrors
from stuck_runs import Endings, GuardSettings, guard_pass

__all__ = ["main", "parse_quantity", "run_pass"]

# Volcano's job controller names a pod's PodGroup in this annotation (volcano v1.15.1
# staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1/labels.go, KubeGroupNameAnnotationKey).
_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
_MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# PodGroup phases in which the gang has not started (volcano scheduling/v1beta1 types.go).
_WAITING_PHASES = frozenset({"", "Pending", "Inqueue"})
_SIGNATURE_REASON = "Schedulable"
_CORDON_TAINT = "node.kubernetes.io/unschedulable"

Obj = Mapping[str, Any]


# --- Reading objects ------------------------------------------------------------------------------


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text)


def _minutes(delta_seconds: float) -> str:
    return f"{delta_seconds / 60:.0f}m"


_QUANTITY = re.compile(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)")
_SUFFIXES = {
    "": 1,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def parse_quantity(text: str | float) -> float:
    """A Kubernetes resource quantity (``100m``, ``448Gi``, ``16``) as a number."""
    match = _QUANTITY.fullmatch(str(text).strip())
    if match is None or match.group(2) not in _SUFFIXES:
        raise ValueError(f"{text!r} is not a resource quantity")
    return float(match.group(1)) * _SUFFIXES[match.group(2)]


def _pod_requests(pod: Obj) -> dict[str, float]:
    """What the scheduler reserves for a pod: its containers' requests (limits stand in for an
    extended resource that has none), or an init container's when larger."""
    spec = pod.get("spec") or {}

    def of(container: Obj) -> dict[str, float]:
        resources = container.get("resources") or {}
        amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {name: parse_quantity(value) for name, value in amounts.items()}

    total: dict[str, float] = {}
    for container in spec.get("containers") or []:
        for name, value in of(container).items():
            total[name] = total.get(name, 0.0) + value
    for container in spec.get("initContainers") or []:
        for name, value in of(container).items():
            total[name] = max(total.get(name, 0.0), value)
    return total


def _is_daemon_or_mirror(pod: Obj) -> bool:
    metadata = pod.get("metadata") or {}
    if _MIRROR_ANNOTATION in (metadata.get("annotations") or {}):
        return True
    return any(
        owner.get("kind") == "DaemonSet" and owner.get("controller")
        for owner in metadata.get("ownerReferences") or []
    )


def _condition(obj: Obj, kind: str) -> Obj | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _is_signature(pod: Obj) -> bool:
    """#3976: Volcano could place this pod, but not the rest of its gang."""
    scheduled = _condition(pod, "PodScheduled")
    return (
        scheduled is not None
        and scheduled.get("status") == "False"
        and scheduled.get("reason") == _SIGNATURE_REASON
    )


def _selector_matches(expression: Obj, labels: Mapping[str, str]) -> bool:
    key, operator, values = (
        expression.get("key", ""),
        expression.get("operator"),
        expression.get("values") or [],
    )
    if operator == "In":
        return labels.get(key) in values
    if operator == "NotIn":
        return labels.get(key) not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    # Gt, Lt and anything newer: not what training pods use; never match (never cordon for it).
    return False


def _pod_selects(pod: Obj, node: Obj) -> bool:
    """The pod's nodeSelector and required node affinity (labels only) admit the node."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    spec = pod.get("spec") or {}
    if any(labels.get(key) != value for key, value in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    return any(
        not term.get("matchFields")
        and all(_selector_matches(e, labels) for e in term.get("matchExpressions") or [])
        for term in terms
    )


def _tolerates(tolerations: Iterable[Obj], taint: Obj) -> bool:
    for toleration in tolerations:
        if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        if not key:
            if toleration.get("operator") == "Exists":
                return True
            continue
        if key != taint.get("key"):
            continue
        if toleration.get("operator") == "Exists" or (toleration.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def _pod_tolerates_node(pod: Obj, node: Obj) -> bool:
    """The pod tolerates the node's taints, the cordon's own aside (the node lifecycle controller
    adds it to every cordoned node; whether the node is cordoned is judged on its own)."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    return all(
        _tolerates(tolerations, taint)
        for taint in (node.get("spec") or {}).get("taints") or []
        if taint.get("effect") in ("NoSchedule", "NoExecute") and taint.get("key") != _CORDON_TAINT
    )


# --- One pass --------------------------------------------------------------------------------------


@dataclass
class Gang:
    namespace: str
    name: str
    min_member: int
    pods: list[Obj] = field(default_factory=list)
    wants_nodes: bool = False
    stalled_since: datetime | None = None
    """When the #3976 signature began to hold (None: no pod shows it)."""
    job_uid: str | None = None
    """The Volcano Job that owns the PodGroup (its controller owner reference)."""
    phase: str = ""
    """The PodGroup's phase (Pending, Inqueue, Running, ...)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def signature_pods(self) -> list[Obj]:
        return [pod for pod in self.pods if _is_signature(pod)]


@dataclass
class Node:
    obj: Obj
    busy_with: list[str] = field(default_factory=list)
    """The pods that make the node busy: any but DaemonSet and mirror pods."""
    used: dict[str, float] = field(default_factory=dict)
    """What the scheduler reserves on the node for its pods (DaemonSet and mirror pods included)."""

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def cordoned(self) -> bool:
        return bool((self.obj.get("spec") or {}).get("unschedulable"))

    def owner(self, annotation: str) -> str | None:
        """The gang this watchdog cordoned the node for, if it did."""
        value = ((self.obj.get("metadata") or {}).get("annotations") or {}).get(annotation)
        return str(value) if value is not None else None

    @property
    def ready(self) -> bool:
        ready = _condition(self.obj, "Ready")
        return ready is not None and ready.get("status") == "True"

    def add(self, pod: Obj) -> None:
        """Count a pod bound to the node (what the pass keeps of it: its name if it makes the node
        busy, and its requests)."""
        if not _is_daemon_or_mirror(pod):
            self.busy_with.append(f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}")
        for name, value in _pod_requests(pod).items():
            self.used[name] = self.used.get(name, 0.0) + value

    def created(self) -> datetime | None:
        return _time((self.obj.get("metadata") or {}).get("creationTimestamp"))

    def has_room_for(self, pod: Obj) -> bool:
        allocatable = (self.obj.get("status") or {}).get("allocatable") or {}
        for name, wanted in _pod_requests(pod).items():
            if wanted <= 0:
                continue
            if (
                name not in allocatable
                or parse_quantity(allocatable[name]) - self.used.get(name, 0.0) < wanted
            ):
                return False
        return True


@dataclass(frozen=True, kw_only=True)
class Settings:
    namespaces: tuple[str, ...]
    node_groups: tuple[str, ...]
    node_group_label: str
    annotation: str
    threshold_seconds: float
    team_node_groups: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Namespace -> the node groups its gangs may use; a namespace not listed may use none."""

    def may_use(self, gang: Gang, node: Node) -> bool:
        """The gang's namespace owns the node's group."""
        group = ((node.obj.get("metadata") or {}).get("labels") or {}).get(self.node_group_label)
        return group in self.team_node_groups.get(gang.namespace, frozenset())


def _usable(node: Node, pod: Obj) -> bool:
    """The pod could run on the node, were the node free of other gangs' claims."""
    return _pod_selects(pod, node.obj) and _pod_tolerates_node(pod, node.obj) and node.has_room_for(pod)


def _gangs(reads: Reads, settings: Settings, pods: Sequence[Obj]) -> list[Gang]:
    by_group: dict[tuple[str, str], list[Obj]] = {}
    for pod in pods:
        metadata = pod.get("metadata") or {}
        group = (metadata.get("annotations") or {}).get(_GROUP_ANNOTATION)
        if group:
            by_group.setdefault((metadata.get("namespace", ""), group), []).append(pod)
    gangs = []
    for namespace in settings.namespaces:
        path = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups"
        for podgroup in reads.items(path):
            name = podgroup["metadata"]["name"]
            status = podgroup.get("status") or {}
            gang = Gang(
                namespace=namespace,
                name=name,
                min_member=max(1, int((podgroup.get("spec") or {}).get("minMember") or 1)),
                pods=by_group.get((namespace, name), []),
                job_uid=next(
                    (
                        str(owner.get("uid"))
                        for owner in podgroup["metadata"].get("ownerReferences") or []
                        if owner.get("controller") and owner.get("kind") == "Job"
                    ),
                    None,
                ),
                phase=str(status.get("phase") or ""),
            )
            unbound = [pod for pod in gang.pods if not (pod.get("spec") or {}).get("nodeName")]
            # A bound pod means Volcano placed the gang (it binds none until all fit).
            gang.wants_nodes = (
                status.get("phase", "") in _WAITING_PHASES
                and bool(unbound)
                and len(unbound) == len(gang.pods)
            )
            signature = gang.signature_pods
            if gang.wants_nodes and signature:
                times = [
                    _time((_condition(pod, "PodScheduled") or {}).get("lastTransitionTime"))
                    for pod in signature
                ]
                unschedulable = _condition(podgroup, "Unschedulable")
                if unschedulable is not None and unschedulable.get("status") == "True":
                    times.append(_time(unschedulable.get("lastTransitionTime")))
                # The latest of them: the stall has held at least since then, by every account.
                known = [moment for moment in times if moment is not None]
                gang.stalled_since = max(known) if known else None
            gangs.append(gang)
    return gangs


def _patch_node(api: Api, node: Node, *, annotation: str, owner: str | None) -> None:
    """Cordon the node for ``owner`` (``namespace/podgroup``), or lift the cordon (``owner`` None)."""
    patch = {
        "metadata": {
            # Precondition: the node as it was read (409 Conflict otherwise).
            "resourceVersion": node.obj["metadata"]["resourceVersion"],
            "annotations": {annotation: owner},
        },
        "spec": {"unschedulable": True if owner is not None else None},
    }
    api.call(
        "PATCH",
        f"/api/v1/nodes/{urllib.parse.quote(node.name)}",
        patch,
        content_type="application/merge-patch+json",
    )


@dataclass
class _Pass:
    """One pass's view of the cluster and what it did."""

    api: Api
    settings: Settings
    nodes: list[Node]
    waiting: list[Gang]
    now: datetime
    log: Callable[[str], object]
    ok: bool = True
    released: set[str] = field(default_factory=set)

    @staticmethod
    def idle(node: Node) -> bool:
        return node.ready and not node.busy_with

    def serves(self, node: Node, gang: Gang, pods: Sequence[Obj] | None = None) -> bool:
        """A waiting pod of the gang (of ``pods``) could use the node, and its team may."""
        return self.settings.may_use(gang, node) and any(
            _usable(node, pod) for pod in (gang.pods if pods is None else pods)
        )

    def free_for(self, gang: Gang) -> list[Node]:
        """Idle, schedulable nodes that a waiting pod of the gang could use."""
        return [n for n in self.nodes if not n.cordoned and self.idle(n) and self.serves(n, gang)]

    def ours_for(self, gang: Gang) -> list[Node]:
        """Idle nodes this watchdog cordoned that a waiting pod of the gang could use."""
        return [
            n
            for n in self.nodes
            if n.cordoned
            and n.owner(self.settings.annotation) is not None
            and self.idle(n)
            and self.serves(n, gang)
        ]

    def patch(self, node: Node, owner: str | None, message: str) -> None:
        try:
            _patch_node(self.api, node, annotation=self.settings.annotation, owner=owner)
            self.log(message)
        except ApiError as error:
            self.log(f"node {node.name}: NOT changed ({message.split(': ', 1)[-1]}): {error}")
            self.ok = False
        if owner is None:
            self.released.add(node.name)

    def review_cordon(self, node: Node, owner: str) -> None:
        """Keep our cordon while a waiting gang that does not fit yet can use the node; lift it otherwise."""
        if not node.cordoned:
            self.patch(
                node,
                None,
                f"node {node.name}: uncordoned by someone else; removing the mark for gang {owner}",
            )
            return
        wanting = [gang for gang in self.waiting if self.serves(node, gang)]
        if not wanting:
            self.patch(
                node,
                None,
                f"node {node.name}: uncordoned: no waiting gang can use it (gang {owner} runs, ended or is gone)",
            )
            return
        for gang in wanting:
            ours = self.ours_for(gang)
            idle = len(self.free_for(gang)) + len(ours)
            if idle >= gang.min_member and any(n.name == node.name for n in ours):
                self.patch(
                    node,
                    None,
                    f"node {node.name}: uncordoned: gang {gang.key} ({gang.min_member} pods) now has {idle} idle nodes",
                )
                return
        if owner not in {gang.key for gang in wanting}:
            self.patch(
                node,
                wanting[0].key,
                f"node {node.name}: kept cordoned, now for gang {wanting[0].key} (gang {owner} no longer waits)",
            )

    def cordon_for(self, gang: Gang, stalled_since: datetime) -> None:
        """Cordon the idle nodes a stalled gang could use, when they are too few to hold it."""
        threshold = self.settings.threshold_seconds
        stalled_for = (self.now - stalled_since).total_seconds()
        signature = gang.signature_pods
        if stalled_for < threshold:
            self.log(
                f"gang {gang.key}: {len(signature)} of {len(gang.pods)} pods placeable but not the gang, for "
                f"{_minutes(stalled_for)}; waiting until {_minutes(threshold)}"
            )
            return
        free = [n for n in self.free_for(gang) if n.name not in self.released]
        idle = len(free) + len(self.ours_for(gang))
        if idle >= gang.min_member:
            self.log(
                f"gang {gang.key}: stalled {_minutes(stalled_for)} with {idle} idle nodes for "
                f"{gang.min_member} pods: not a missing-node stall, nothing cordoned"
            )
            return
        candidates = [n for n in free if self.serves(n, gang, signature)]
        if not candidates:
            self.log(
                f"gang {gang.key}: stalled {_minutes(stalled_for)}; no idle node of its groups to cordon"
            )
        for node in candidates:
            created = node.created()
            age = (self.now - created).total_seconds() if created is not None else 0.0
            if age < threshold:
                self.log(f"node {node.name}: left alone for gang {gang.key}: joined {_minutes(age)} ago")
                continue
            self.patch(
                node,
                gang.key,
                f"node {node.name}: cordoned for gang {gang.key}: stalled {_minutes(stalled_for)}, "
                f"{idle} idle nodes for {gang.min_member} pods",
            )


_UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"


def _team_pods(reads: Reads, settings: Settings) -> list[Obj]:
    """The unfinished pods of the team namespaces: every gang's and every run's (one list each)."""
    return [
        pod
        for namespace in settings.namespaces
        for pod in reads.items(
            f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods", fieldSelector=_UNFINISHED
        )
    ]


def _occupied_nodes(api: Api, settings: Settings, selector: str) -> list[Node]:
    """The Trainium nodes in full, with what runs on each: every unfinished pod of the cluster read
    a page at a time and reduced to its node's busy list and requests (DaemonSet pods are most of
    them: a node's room and idleness depend on every pod, of any namespace)."""
    groups = set(settings.node_groups)
    nodes = {
        obj["metadata"]["name"]: Node(obj=obj)
        for obj in api.items("/api/v1/nodes", labelSelector=selector)
        # The label selector asked for these already; checked again, as every write depends on it.
        if (obj["metadata"].get("labels") or {}).get(settings.node_group_label) in groups
    }
    for page in api.pages("/api/v1/pods", fieldSelector=_UNFINISHED):
        for pod in page:
            node = nodes.get((pod.get("spec") or {}).get("nodeName") or "")
            if node is not None:
                node.add(pod)
    return list(nodes.values())


def _needs_nodes(settings: Settings, marked: bool, gangs: Sequence[Gang], now: datetime) -> bool:
    """Whether the pass must read the nodes in full and every pod on them: only to review a cordon
    of its own or to cordon for a gang stalled past the threshold. Every other pass reads the team
    namespaces' pods and the nodes' metadata, so its cost grows with the runs, not with the nodes
    times their DaemonSets."""
    return marked or any(
        gang.wants_nodes
        and gang.stalled_since is not None
        and (now - gang.stalled_since).total_seconds() >= settings.threshold_seconds
        for gang in gangs
    )


def run_pass(
    api: Api,
    settings: Settings,
    *,
    now: datetime,
    log: Callable[[str], object] = print,
    guard: GuardSettings | None = None,
    endings: Endings | None = None,
    reads: Reads | None = None,
) -> bool:
    """One pass; False when an API call failed (logged; the next pass starts afresh). With ``guard``,
    the runs that hold Trainium nodes without progressing are judged next (stuck_runs.py).
    ``reads``: where the lists read every pass come from (kube_mirror.Mirrors in the Deployment's
    loop); the API itself by default (``--once``). The full read of a stalled pass always lists."""
    reads = api if reads is None else reads
    selector = f"{settings.node_group_label} in ({','.join(settings.node_groups)})"
    groups = set(settings.node_groups)
    try:
        # Names, labels and annotations: which nodes are Trainium nodes, and which carry a cordon of ours.
        names = [
            item["metadata"]
            for item in reads.items("/api/v1/nodes", metadata_only=True, labelSelector=selector)
            if (item["metadata"].get("labels") or {}).get(settings.node_group_label) in groups
        ]
        pods = _team_pods(reads, settings)
        gangs = _gangs(reads, settings, pods)
        marked = any(settings.annotation in (obj.get("annotations") or {}) for obj in names)
        needed = _needs_nodes(settings, marked, gangs, now)
        nodes = _occupied_nodes(api, settings, selector) if needed else []
    except ApiError as error:
        log(f"error: {error}; retrying next pass")
        return False
    work = _Pass(
        api=api, settings=settings, nodes=nodes, waiting=[g for g in gangs if g.wants_nodes], now=now, log=log
    )
    # 1. The cordons this watchdog holds; 2. the stalled gangs.
    for node in nodes:
        owner = node.owner(settings.annotation)
        if owner is not None:
            work.review_cordon(node, owner)
    for gang in work.waiting:
        if gang.stalled_since is not None:
            work.cordon_for(gang, gang.stalled_since)
    if guard is not None:
        guarded = guard_pass(
            api,
            guard,
            pods=pods,
            trainium_nodes=[str(obj["name"]) for obj in names],
            podgroup_phases={gang.job_uid: gang.phase for gang in gangs if gang.job_uid},
            now=now,
            log=log,
            endings=endings,
            reads=reads,
        )
        work.ok = work.ok and guarded
    return work.ok


# --- The program ------------------------------------------------------------------------------------


def _split(text: str) -> tuple[str, ...]:
    return tuple(part for part in (item.strip() for item in text.split(",")) if part)


def _team(text: str) -> tuple[str, frozenset[str]]:
    namespace, _, groups = text.partition("=")
    if not namespace.strip() or not _split(groups):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE=GROUP[,GROUP...]")
    return namespace.strip(), frozenset(_split(groups))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gang_watchdog", description="Cordon idle nodes that stall a partly placeable Volcano gang."
    )
    parser.add_argument("--namespaces", required=True, type=_split, help="comma-separated team namespaces")
    parser.add_argument(
        "--node-groups", required=True, type=_split, help="comma-separated Trainium node groups"
    )
    parser.add_argument(
        "--team",
        action="append",
        default=[],
        type=_team,
        metavar="NAMESPACE=GROUPS",
        help="a team namespace and the comma-separated node groups its gangs may use (repeated)",
    )
    parser.add_argument("--node-group-label", required=True, help="the node label naming a node's group")
    parser.add_argument(
        "--annotation", required=True, help="the node annotation that marks this watchdog's cordon"
    )
    parser.add_argument("--threshold-minutes", required=True, type=float)
    parser.add_argument("--interval-seconds", type=float, default=60.0)
    parser.add_argument(
        "--stuck-minutes",
        type=float,
        help="end the runs on Trainium nodes that have not progressed for this long (stuck_runs.py)",
    )
    parser.add_argument(
        "--stuck-annotation", default="", help="the Job annotation that sets a run's own limit, in minutes"
    )
    parser.add_argument(
        "--stuck-max-minutes",
        type=float,
        help="the longest a run's own limit may be; a larger annotation is clamped to it",
    )
    parser.add_argument("--once", action="store_true", help="one pass; exit 1 if it met an API error")
    return parser


def configured(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Settings, GuardSettings | None] | str:
    """The arguments read into the pass's settings, or what is wrong with them."""
    arguments = _parser().parse_args(argv)
    if not arguments.namespaces or not arguments.node_groups or arguments.threshold_minutes <= 0:
        return "error: --namespaces and --node-groups must name something, --threshold-minutes be positive"
    unowned = sorted(set(arguments.namespaces) - {namespace for namespace, _ in arguments.team})
    if unowned:
        return f"error: no --team names the node groups of {', '.join(unowned)}"
    settings = Settings(
        namespaces=arguments.namespaces,
        node_groups=arguments.node_groups,
        node_group_label=arguments.node_group_label,
        annotation=arguments.annotation,
        threshold_seconds=arguments.threshold_minutes * 60,
        team_node_groups=dict(arguments.team),
    )
    if arguments.stuck_minutes is None:
        return arguments, settings, None
    if arguments.stuck_minutes <= 0 or not arguments.stuck_annotation:
        return "error: --stuck-minutes must be positive and come with --stuck-annotation"
    if arguments.stuck_max_minutes is not None and arguments.stuck_max_minutes < arguments.stuck_minutes:
        return "error: --stuck-max-minutes must be at least --stuck-minutes"
    guard = GuardSettings(
        namespaces=settings.namespaces,
        threshold_seconds=arguments.stuck_minutes * 60,
        annotation=arguments.stuck_annotation,
        component="gang-watchdog",
        max_threshold_seconds=None
        if arguments.stuck_max_minutes is None
        else arguments.stuck_max_minutes * 60,
    )
    return arguments, settings, guard


def main(argv: Sequence[str] | None = None) -> int:
    read = configured(argv)
    if isinstance(read, str):
        print(read)
        return 2
    arguments, settings, guard = read
    api = in_cluster()
    if not arguments.once:
        print(
            f"gang watchdog: namespaces {','.join(settings.namespaces)}, node groups {','.join(settings.node_groups)}, "
            f"threshold {arguments.threshold_minutes:g}m, a pass every {arguments.interval_seconds:g}s, "
            + (
                f"runs that make no progress for {arguments.stuck_minutes:g}m are ended"
                if guard is not None
                else "stuck runs not judged"
            ),
            flush=True,
        )
    endings = Endings()
    # The Deployment's loop reads every pass's lists from watches (kube_mirror.py, issue #36); one
    # pass (--once) lists them.
    reads: Reads = api if arguments.once else Mirrors(api, stale_seconds=2 * arguments.interval_seconds + 60)
    while True:
        try:
            ok = run_pass(
                api,
                settings,
                now=datetime.now(UTC),
                log=lambda line: print(line, flush=True),
                guard=guard,
                endings=endings,
                reads=reads,
            )
        except (ValueError, KeyError, TypeError) as error:
            # An object this program cannot read: nothing is changed on its account.
            print(f"error: unreadable object in the API's answer ({error!r}); retrying next pass", flush=True)
            ok = False
        if arguments.once:
            return 0 if ok else 1
        time.sleep(arguments.interval_seconds)


if __name__ == "__main__":
    sys.exit(main())
