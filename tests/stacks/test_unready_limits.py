"""The cluster autoscaler's unready limits (issue 30, item 2): a stuck Trainium group shrinks, and
never halts the autoscaler.

The arithmetic of ``cluster_facts.autoscaling`` against what the release renders, and a restatement of
``clusterstate.IsClusterHealthy`` at cluster-autoscaler-1.34.5 (``_halts`` below: a model, read in
the source, because a node counts as Unready there only 15 minutes after its creation, which the
test tier cannot wait for). The tier shows the node check's part with the real autoscaler: a node
whose replacement is withheld counts as ready (tests/cluster/test_failing_group.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from cluster_facts.autoscaling import (
    MAX_NODE_STARTUP_MINUTES,
    MAX_TOTAL_UNREADY_PERCENTAGE,
    SCALE_DOWN_UNREADY_MINUTES,
)
from cluster_facts.failure_recovery import EKS_READY_REPAIR_SECONDS
from cluster_facts.kubernetes_names import FABRIC_CHECK_TAINT_KEY, NEURON_TAINT_KEY
from cluster_facts.node_check import EFA_SUSPECT_TAINT_KEY, NODE_CHECK_FAILED_TAINT_KEY
from cluster_plan.kubernetes_values import review_plan
from config import StackConfig, load_config, parse_config
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG

UPSTREAM_DEFAULTS = {"ok-total-unready-count": 3, "max-total-unready-percentage": 45.0}
"""``config/flags/flags.go`` at cluster-autoscaler-1.34.5."""


def flags(config: StackConfig) -> dict[str, Any]:
    arguments: dict[str, Any] = review_plan(config).step("cluster-autoscaler").values["extraArgs"]  # type: ignore[union-attr]
    return arguments


def _halts(unready: int, nodes: int, limits: dict[str, Any]) -> bool:
    """``IsClusterHealthy`` is false (every loop stops before scale-up and scale-down) while the
    Unready nodes pass both limits: ``totalUnready > OkTotalUnreadyCount && totalUnready >
    MaxTotalUnreadyPercentage/100 * len(nodes)``."""
    return (
        unready > int(limits["ok-total-unready-count"])
        and unready > float(limits["max-total-unready-percentage"]) / 100 * nodes
    )


def test_a_node_that_never_becomes_ready_goes_before_eks_repairs_it_in_place() -> None:
    arguments = flags(load_config(DEFAULT_CONFIG))
    assert arguments["scale-down-unready-time"] == f"{SCALE_DOWN_UNREADY_MINUTES}m" == "10m"
    # NotStarted for MaxNodeStartupTime, then Unready for scale-down-unready-time, then removed (the
    # group's size lowered): before EKS node auto repair replaces it at the same size.
    removed_after = MAX_NODE_STARTUP_MINUTES + SCALE_DOWN_UNREADY_MINUTES
    assert removed_after == 25 < EKS_READY_REPAIR_SECONDS // 60 == 30
    # The autoscaler's default, 20, came after the repair: the cycle went on at the same size.
    assert MAX_NODE_STARTUP_MINUTES + 20 > EKS_READY_REPAIR_SECONDS // 60


@pytest.mark.parametrize("path", [DEFAULT_CONFIG, EXAMPLE_CONFIG], ids=["default", "example"])
def test_every_trainium_node_unready_at_once_does_not_halt_the_autoscaler(path: Any) -> None:
    config = load_config(path)
    arguments = flags(config)
    trainium = sum(group.max_size for group in config.trainium.node_groups)
    assert arguments["ok-total-unready-count"] == trainium
    assert arguments["max-total-unready-percentage"] == MAX_TOTAL_UNREADY_PERCENTAGE == 45
    system = config.system_nodes.desired_size
    assert not _halts(trainium, trainium + system, arguments)
    # The halt still guards a sick cluster: the system nodes unready as well.
    assert _halts(trainium + system, trainium + system, arguments)


def test_the_upstream_defaults_halt_for_one_stuck_four_node_group_beside_two_system_nodes() -> None:
    """The issue's case: what the flags are set against."""
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data["trainium"]["node_groups"] = [
        {"name": "trn1n-32xl", "instance_type": "trn1n.32xlarge", "max_size": 4}
    ]
    data["runs"] = []
    config = parse_config(data)
    assert config.system_nodes.desired_size == 2
    assert _halts(4, 6, UPSTREAM_DEFAULTS)
    assert not _halts(4, 6, flags(config))


def test_a_nodes_own_verdicts_stay_out_of_the_autoscalers_picture_of_a_new_node() -> None:
    """Status taints (``taints.SanitizeTaints``): the EFA suspicion and the fabric check's verdict are
    one node's, and would otherwise stay in the group's cached picture and keep every gang from
    scaling the group up. The node check's failed taint must stay in it (cluster_facts/node_check.py),
    and so must the Neuron taint every node of the group carries."""
    arguments = flags(load_config(DEFAULT_CONFIG))
    status = {value for key, value in arguments.items() if key.split("_", 1)[0] == "status-taint"}
    assert status == {EFA_SUSPECT_TAINT_KEY, FABRIC_CHECK_TAINT_KEY}
    assert NODE_CHECK_FAILED_TAINT_KEY not in status and NEURON_TAINT_KEY not in status
