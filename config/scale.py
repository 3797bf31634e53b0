"""The cluster's size as the configuration sets it, and what that size asks for at synth.

The size is what the autoscaler may reach, not what runs now: the Trainium groups' ``max_size``
summed, with the system nodes' ``max_size``, and the largest gang a run asks for. Each notice is a
synth warning (config/notices.py) naming the key an operator changes; the thresholds and their
sources are in cluster_facts/cluster_scale.py. Nothing here refuses: a configuration over a threshold
can work, and one that cannot (a run larger than its group's ``max_size``) is refused in
config/consistency.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster_facts.cluster_scale import (
    AUTOSCALER_TESTED_NODES,
    EKS_PLAN_SCALE_NODES,
    KUBERNETES_MAX_NODES,
    STANDARD_TIER,
    TIER_CAPACITY,
    VOLCANO_LOG_LEVEL,
    VOLCANO_QUIET_LOG_LEVEL,
    VOLCANO_QUIET_LOG_NODES,
)
from config.model import StackConfig

__all__ = [
    "ClusterSize",
    "cluster_size",
    "scale_notices",
    "trainium_max_capacity",
    "trainium_max_nodes",
    "volcano_log_level",
]


@dataclass(frozen=True)
class ClusterSize:
    trainium_nodes: int
    """The Trainium groups' ``max_size`` summed: every Trainium node the autoscaler may run at once."""
    nodes: int
    """With the system nodes' ``max_size``: the most nodes the cluster may hold."""
    largest_gang: int
    """The most nodes one run asks for (``runs[].nodes``); 0 without runs."""


def trainium_max_nodes(config: StackConfig) -> int:
    return sum(group.max_size for group in config.trainium.node_groups)


def trainium_max_capacity(config: StackConfig) -> tuple[int, int]:
    """(vCPUs, memory GiB) of every Trainium node the groups may hold at their ``max_size``: what the
    autoscaler's cluster-wide limits must leave room for (cluster_facts.autoscaling.cores_total)."""
    groups = config.trainium.node_groups
    return (
        sum(group.max_size * group.instance.vcpus for group in groups),
        sum(group.max_size * group.instance.memory_gib for group in groups),
    )


def volcano_log_level(config: StackConfig) -> int:
    """Volcano's scheduler's klog verbosity for the cluster's size: the chart's below
    ``VOLCANO_QUIET_LOG_NODES`` Trainium nodes, quieter from there (cluster_facts/cluster_scale.py)."""
    if trainium_max_nodes(config) >= VOLCANO_QUIET_LOG_NODES:
        return VOLCANO_QUIET_LOG_LEVEL
    return VOLCANO_LOG_LEVEL


def cluster_size(config: StackConfig) -> ClusterSize:
    trainium = trainium_max_nodes(config)
    return ClusterSize(
        trainium_nodes=trainium,
        nodes=trainium + config.system_nodes.max_size,
        largest_gang=max((run.nodes for run in config.runs), default=0),
    )


def _groups_of(size: ClusterSize) -> str:
    gang = f", the largest run {size.largest_gang} nodes" if size.largest_gang else ""
    return f"the Trainium groups' max_size add up to {size.trainium_nodes} nodes{gang}"


def scale_notices(config: StackConfig) -> list[tuple[str, str]]:
    """(key path, message) for each setting the configuration's size asks for and does not have."""
    size = cluster_size(config)
    notices: list[tuple[str, str]] = []
    if config.cluster.control_plane_tier == STANDARD_TIER and size.trainium_nodes > EKS_PLAN_SCALE_NODES:
        seats, pods = TIER_CAPACITY["tier-xl"]
        notices.append(
            (
                "cluster.control_plane_tier",
                (
                    f"standard, and {_groups_of(size)}: EKS asks for a plan past {EKS_PLAN_SCALE_NODES} nodes, "
                    "and a standard control plane scales itself only as load comes, not before a gang's "
                    f"burst; a provisioned tier guarantees its capacity (tier-xl: {seats} API seats, "
                    f'{pods} pods/s, billed by the hour; docs/performance.md, "What the figures mean for '
                    'a real cluster")'
                ),
            )
        )
    if size.trainium_nodes > AUTOSCALER_TESTED_NODES:
        notices.append(
            (
                "trainium.node_groups",
                (
                    f"{_groups_of(size)}: the cluster autoscaler is not performance-tested above "
                    f"{AUTOSCALER_TESTED_NODES} nodes (its FAQ); watch its loop time and scale-up "
                    'latency (docs/performance.md, "What the figures mean for a real cluster")'
                ),
            )
        )
    if size.nodes > KUBERNETES_MAX_NODES:
        notices.append(
            (
                "trainium.node_groups",
                (
                    f"with the system nodes the cluster may hold {size.nodes} nodes: Kubernetes is designed "
                    f'for at most {KUBERNETES_MAX_NODES} (kubernetes.io, "Considerations for large '
                    'clusters"); split the groups across clusters'
                ),
            )
        )
    return notices
