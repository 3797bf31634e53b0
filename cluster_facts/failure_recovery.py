"""What a node lost mid-run costs: each step from the failure to training again, with its bound.

Numbers of components this project does not run here come with their source; the settings of
this project are named where they are set. docs/health.md ("A node lost mid-run") writes the path
out; tests/cluster_facts/test_failure_recovery.py checks the sum against the goal.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster_facts.node_check import WATCH_SECONDS

__all__ = [
    "GOAL_SECONDS",
    "LUSTRE_DEAD_CLIENT_EVICTION_SECONDS",
    "LUSTRE_OBD_TIMEOUT_SECONDS",
    "NODE_LOST_TAINT_KEYS",
    "NODE_LOST_TOLERATION_SECONDS",
    "REPLACE_UNRESPONSIVE_SECONDS",
    "Step",
    "recovery_path",
    "total_seconds",
]

GOAL_SECONDS = 15 * 60
"""From a node's failure to training again, checkpoint interval aside (issue 24)."""

NODE_MONITOR_GRACE_SECONDS = 50
"""kube-controller-manager ``--node-monitor-grace-period``: a node whose kubelet has not renewed its
Lease for this long is marked NotReady/Unknown and tainted ``node.kubernetes.io/unreachable``.
Kubernetes' default since 1.32 (40 s before; kubernetes/kubernetes#125924); EKS publishes no value
of its own, so the default is assumed."""

NODE_LOST_TOLERATION_SECONDS = 60
"""The training pods' ``tolerationSeconds`` for ``node.kubernetes.io/not-ready`` and ``unreachable``
(NoExecute), instead of the 300 s DefaultTolerationSeconds adds. A kubelet that misses its Lease for
a minute is rare enough; a pod on a lost node is evicted a minute after the node is marked."""

NODE_LOST_TAINT_KEYS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
"""The NoExecute taints the node lifecycle controller puts on a lost node, tolerated for
``NODE_LOST_TOLERATION_SECONDS``."""

POD_GC_SECONDS = 40 + 20
"""kube-controller-manager's pod garbage collector force-deletes pods bound to a Node that no longer
exists (``gcOrphaned``) after a 40 s quarantine, checking every 20 s (pkg/controller/podgc:
``quarantineTime``, ``gcCheckPeriod``). Until then a lost node's pod stays ``Terminating``, and
Volcano creates none of the gang's new pods: they have its name, and its restarting state waits
for ``replicas - terminating >= minAvailable`` (v1.15.1 state/restarting.go)."""

CLOUD_NODE_DELETION_SECONDS = 60
"""The cloud node lifecycle controller (EKS's cloud-controller-manager) deletes a NotReady Node whose
EC2 instance is terminated, on its next pass (every ``--node-monitor-period``, 5 s, plus the EC2 call);
a minute is allowed."""


@dataclass(frozen=True, kw_only=True)
class Step:
    name: str
    seconds: int
    basis: str
    """``setting`` (this project sets it), ``source`` (read in a component's source or docs) or
    ``estimate`` (nobody publishes it; to be measured on hardware: the canary, issue 21)."""
    why: str
    parallel: bool = False
    """Runs alongside the step before it and ends no later: adds nothing to the total."""


EKS_READY_REPAIR_SECONDS = 30 * 60
"""EKS node auto repair replaces a node whose ``Ready`` condition has been bad for 30 minutes (EKS
User Guide, "Automatically repair nodes in EKS clusters"); until its instance is terminated, the
Node, and so the lost pod, stay."""


REPLACE_UNRESPONSIVE_SECONDS = 5 * 60
"""``node_check.replace_unresponsive_after_minutes`` (default 5): how long a Trainium node's kubelet
stays silent before the node check's fence (one Deployment for the cluster) marks its instance
Unhealthy in its Auto Scaling group (cluster_programs/node_fence.py), counted from the ``Ready``
condition's change to Unknown (the detection step's end); the check looks once a minute."""

UNHEALTHY_INSTANCE_TERMINATION_SECONDS = 4 * 60
"""From the Unhealthy mark to the instance terminated: EC2 Auto Scaling replaces an instance marked
Unhealthy (terminate, then launch; "Health checks for instances in an Auto Scaling group"), and EC2's
default termination first attempts a graceful OS shutdown (EC2 User Guide, "Methods for terminating
an instance"), which a hung kernel never answers. EC2 publishes no time for its hard stop (its
"force terminate" exists for an instance stuck in shutting-down): an estimate, and the weakest
number of the hung path."""


def recovery_path(*, warm_spare: bool, instance_gone: bool = True, fenced: bool = True) -> tuple[Step, ...]:
    """The steps from a Trainium node's failure to the gang training again, each with its bound.

    ``instance_gone``: the instance is terminated or stopped (hardware retirement, a spot
    interruption, a replacement); False: it hangs while EC2 still reports it running. Then
    ``fenced``: another Trainium node's check has it terminated (the default); False (the setting
    null, or no other Ready Trainium node to act) only EKS's repair of the ``Ready`` condition
    removes it. ``warm_spare``: the group keeps a checked node above the gang's size (``min_size`` =
    nodes + 1), so no node is launched, pulled and checked."""
    steps = list(_loss_steps())
    if not instance_gone:
        steps[1:1] = _fencing_steps() if fenced else [_auto_repair_step()]
    if not warm_spare:
        steps += _replacement_steps()
    steps += _restart_steps()
    return tuple(steps)


def _loss_steps() -> tuple[Step, Step, Step]:
    """Detection, the lost pod's removal and, alongside, the gang's eviction."""
    detect = Step(
        name="detection: the node is marked NotReady",
        seconds=NODE_MONITOR_GRACE_SECONDS,
        basis="source",
        why="node-monitor-grace-period (Kubernetes default, 50 s since 1.32)",
    )
    evict = Step(
        name="eviction of the gang's pod on the lost node",
        seconds=NODE_LOST_TOLERATION_SECONDS,
        basis="setting",
        why="the training pods' tolerationSeconds for not-ready and unreachable; the other pods fail "
        "sooner (their collective breaks), and Volcano's PodFailed/PodEvicted policy is RestartJob",
        parallel=True,
    )
    gone = Step(
        name="the lost pod is removed (its Node deleted, then the pod garbage-collected)",
        seconds=CLOUD_NODE_DELETION_SECONDS + POD_GC_SECONDS,
        basis="source",
        why="cloud node lifecycle controller, then podgc's 40 s quarantine and 20 s period; Volcano's "
        "RestartJob recreates the gang only after it",
    )
    return detect, gone, evict


def _fencing_steps() -> list[Step]:
    """A silent instance, fenced by another node's check."""
    return [
        Step(
            name="another node's check marks the silent instance Unhealthy",
            seconds=REPLACE_UNRESPONSIVE_SECONDS + WATCH_SECONDS,
            basis="setting",
            why="node_check.replace_unresponsive_after_minutes after the node went Unknown, plus up to "
            "one of the check's one-minute passes; the instance is terminated before its pod is freed, so "
            "no second copy of a worker can run",
        ),
        Step(
            name="its Auto Scaling group terminates the instance",
            seconds=UNHEALTHY_INSTANCE_TERMINATION_SECONDS,
            basis="estimate",
            why="EC2 Auto Scaling replaces an Unhealthy instance; EC2's termination first attempts a graceful "
            "shutdown that a hung kernel never answers, and publishes no time for its hard stop",
        ),
    ]


def _auto_repair_step() -> Step:
    """A silent instance nothing fences: only EKS's repair of the Ready condition removes it."""
    return Step(
        name="EKS node auto repair replaces the unresponsive node",
        seconds=EKS_READY_REPAIR_SECONDS,
        basis="source",
        why="Ready bad for 30 minutes, then Replace; nothing removes a hung instance's Node sooner",
    )


def _replacement_steps() -> list[Step]:
    """Without a warm spare: a node launched, its image pulled, its check passed."""
    return [
        Step(
            name="a replacement node launches and joins",
            seconds=6 * 60,
            basis="estimate",
            why="the Auto Scaling group replaces the lost instance, or the autoscaler adds one for the "
            "pending gang (10 s scan); EC2 launch, boot of the Neuron AMI, kubelet registration",
        ),
        Step(
            name="the training image is pulled on it",
            seconds=3 * 60,
            basis="estimate",
            why="the Neuron training image through the account's pull-through cache; the node check's "
            "pod pulls it, the training pod then finds it on the node",
        ),
        Step(
            name="its node check",
            seconds=3 * 60,
            basis="setting",
            why="neuron-ls, a local all-reduce, EFA loopback, the file system: about two minutes "
            "healthy, each tool time-limited (k8s_charts/checks/node_check.py)",
        ),
    ]


def _restart_steps() -> list[Step]:
    """The gang training again: its pods, the rendezvous, the checkpoint."""
    return [
        Step(
            name="the gang's pods start (checks, packages, the compile cache's lock)",
            seconds=2 * 60,
            basis="estimate",
            why="run_worker.sh: data set markers, checksums, pip --require-hashes; the lost pod's cache "
            f"lock is gone by then (Lustre evicts a dead client within {LUSTRE_DEAD_CLIENT_EVICTION_SECONDS} s)",
        ),
        Step(
            name="rendezvous",
            seconds=60,
            basis="estimate",
            why="every agent joins the attempt's own etcd rendezvous id once all pods run",
        ),
        Step(
            name="resume from the newest checkpoint and the first step",
            seconds=3 * 60,
            basis="estimate",
            why="--resume_ckpt loads ckpt_<step>.pt from FSx; the compiled graphs come from the compile cache",
        ),
    ]


def total_seconds(steps: tuple[Step, ...]) -> int:
    """The path's bound: the sum of the steps that do not run alongside an earlier one."""
    return sum(step.seconds for step in steps if not step.parallel)


LUSTRE_OBD_TIMEOUT_SECONDS = 100
"""Lustre's ``obd_timeout`` default (lustre/obdclass/class_obd.c ``OBD_TIMEOUT_DEFAULT``). FSx for
Lustre manages its servers' settings and publishes no value of its own: the default is assumed."""

LUSTRE_DEAD_CLIENT_EVICTION_SECONDS = 250
"""How long a Lustre server keeps the locks (flocks included) of a client that died: its ping
evictor evicts a client not heard from in ``PING_EVICT_TIMEOUT`` = 6 x ``PING_INTERVAL``
(``obd_timeout / 4``; lustre/include/lustre_net.h), then waits another 3 x ``PING_INTERVAL`` before
it acts ("evictor takes PING_EVICT_TIMEOUT + 3 * PING_INTERVAL to evict", lustre/tests/recovery-small.sh),
and runs once per ``PING_INTERVAL``: 2.5 x ``obd_timeout`` in all. An evicted client's locks are
all invalidated (Lustre wiki, "Understanding Lustre Evictions"; the Lustre Operations Manual,
"Lustre Timeouts")."""
assert LUSTRE_DEAD_CLIENT_EVICTION_SECONDS == LUSTRE_OBD_TIMEOUT_SECONDS * 5 // 2
