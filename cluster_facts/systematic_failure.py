"""What a failure that hits every new node of a group costs, at most: Trainium node-hours with their bound.

A bad AMI release, a security group rule, a driver mismatch: every node the group starts fails its
node check the same way. What bounds it (docs/capacity.md, "A failure that hits every new node"):

1. the gang's scale-up: ``nodes`` new nodes, each billed from its launch to its verdict
   (launch and join, the image pull, the check at its time limits);
2. the group's replacement budget (``node_check.replacements_per_window``): that many of them are
   replaced (their instances go at once: EC2 bills no ``shutting-down`` instance), the rest are
   withheld, keep the failed taint and are removed by the autoscaler once unneeded;
3. the replacements fail the same way: withheld and removed in turn, and that repeat suspends the
   group's ``Launch`` process, after which the group starts nothing;
4. before that suspension the autoscaler adds no node for the waiting gang when the group's Ready
   nodes all carry the failed taint (the group started from zero: its picture of a new node is such a
   node's); when the group also runs healthy nodes, it may start up to ``max_size`` more in that time,
   each billed as a replacement is (``extra``).

Numbers of components this project does not run here are estimates shared with
cluster_facts/failure_recovery.py (launch, pull); the rest are settings. tests/cluster_facts/test_systematic_failure.py
keeps docs/capacity.md equal to this.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster_facts.node_check import check_time_limit_seconds

__all__ = [
    "AUTOSCALER_REMOVAL_SECONDS",
    "IMAGE_PULL_SECONDS",
    "LAUNCH_SECONDS",
    "FailureCost",
    "systematic_failure_cost",
]

LAUNCH_SECONDS = 6 * 60
"""EC2 launch, boot of the Neuron AMI, kubelet registration (an estimate: cluster_facts/failure_recovery.py)."""
IMAGE_PULL_SECONDS = 3 * 60
"""The training image's pull by the node check's pod (an estimate: cluster_facts/failure_recovery.py)."""
AUTOSCALER_REMOVAL_SECONDS = 60
"""From ``--scale-down-unneeded-time`` passed to the instance shutting down: the autoscaler's next
loop (10 s), its drain of DaemonSet pods and TerminateInstanceInAutoScalingGroup."""


@dataclass(frozen=True)
class FailureCost:
    nodes: int
    """Nodes the gang's scale-up starts."""
    replaced: int
    """Of them, replaced within the budget; each replacement is a node more."""
    node_seconds: float
    """Trainium node-seconds in all."""
    per_extra_node_seconds: float
    """What each node the autoscaler may start meanwhile (a group with healthy nodes) adds."""

    @property
    def node_hours(self) -> float:
        return self.node_seconds / 3600


def systematic_failure_cost(
    *, nodes: int, efa_interfaces: int, replacements_per_window: int, scale_down_unneeded_minutes: int
) -> FailureCost:
    """The bound for a gang of ``nodes`` on a group whose every new node fails its check the same way."""
    to_verdict = LAUNCH_SECONDS + IMAGE_PULL_SECONDS + check_time_limit_seconds(efa_interfaces)
    removal = scale_down_unneeded_minutes * 60 + AUTOSCALER_REMOVAL_SECONDS
    replaced = min(replacements_per_window, nodes)
    first_round = nodes * to_verdict + (nodes - replaced) * removal
    replacements = replaced * (to_verdict + removal)
    return FailureCost(
        nodes=nodes,
        replaced=replaced,
        node_seconds=first_round + replacements,
        per_extra_node_seconds=to_verdict + removal,
    )
