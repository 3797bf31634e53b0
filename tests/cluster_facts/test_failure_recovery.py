"""What a node lost mid-run costs: the model of cluster_facts/failure_recovery.py and docs/health.md.

A model written here, for the fast tier and for the steps nothing here can run (EC2 and EKS: the
instance's replacement, its boot and join). Each step's bound is a setting of this project, a
number read in a component's source or documentation, or an estimate to be measured on hardware;
the test keeps the sum, the settings and the page in step. The steps up to the replacement are
measured against the real controller manager and Volcano in tests/cluster/test_recovery.py (a
kwok node's kubelet stopped mid-run), which checks them against this model's bounds.
"""

from __future__ import annotations

import itertools
import re

import pytest

from cluster_facts.failure_recovery import (
    GOAL_SECONDS,
    NODE_LOST_TOLERATION_SECONDS,
    REPLACE_UNRESPONSIVE_SECONDS,
    recovery_path,
    total_seconds,
)
from cluster_facts.node_check import WATCH_SECONDS
from config.model import NodeCheckSettings
from k8s_charts.checks.node_check import STEP_TIMEOUT_SECONDS, NodeCheckValues
from k8s_charts.runs.training_run import CACHE_LOCK_TIMEOUT_SECONDS
from tests.conftest import REPO_ROOT

HEALTH = (REPO_ROOT / "docs" / "health.md").read_text()


def minutes(seconds: int) -> str:
    return f"{seconds / 60:.1f} min"


def test_with_a_warm_spare_a_lost_node_costs_at_most_the_goal() -> None:
    assert total_seconds(recovery_path(warm_spare=True)) <= GOAL_SECONDS


def test_without_a_spare_the_path_exceeds_the_goal_and_the_page_says_so() -> None:
    """Launching, pulling and checking a new node is most of the path: the page must not claim 15 minutes."""
    total = total_seconds(recovery_path(warm_spare=False))
    assert total > GOAL_SECONDS
    assert f"**{minutes(total)}**" in HEALTH


@pytest.mark.parametrize("warm_spare", [False, True])
@pytest.mark.parametrize(("instance_gone", "fenced"), [(True, True), (False, True), (False, False)])
def test_every_step_and_total_is_on_the_page(warm_spare: bool, instance_gone: bool, fenced: bool) -> None:
    steps = recovery_path(warm_spare=warm_spare, instance_gone=instance_gone, fenced=fenced)
    for step in steps:
        assert f"| {step.name} | {minutes(step.seconds)}" in HEALTH, step.name
    assert f"**{minutes(total_seconds(steps))}**" in HEALTH


def test_steps_in_parallel_end_no_later_than_the_one_they_run_beside() -> None:
    steps = recovery_path(warm_spare=False)
    for before, step in itertools.pairwise(steps):
        if step.parallel:
            assert step.seconds <= before.seconds, step.name


def test_the_bounds_follow_the_settings() -> None:
    steps = {step.name: step for step in recovery_path(warm_spare=False)}
    assert steps["eviction of the gang's pod on the lost node"].seconds == NODE_LOST_TOLERATION_SECONDS
    # The check's tools, each within its limit (nccom-test gets four), plus the pod's own start.
    assert steps["its node check"].seconds >= STEP_TIMEOUT_SECONDS * 4
    # A lost node's cache lock is long gone when the replacement's pods start.
    assert steps["a replacement node launches and joins"].seconds > CACHE_LOCK_TIMEOUT_SECONDS


def test_a_hung_instance_not_fenced_waits_for_eks_repair() -> None:
    hung = recovery_path(warm_spare=True, instance_gone=False, fenced=False)
    assert any(re.search("auto repair", step.name) for step in hung)
    assert total_seconds(hung) > 30 * 60


def test_a_hung_instance_is_fenced_by_the_node_check_well_before_eks_repair() -> None:
    fenced = recovery_path(warm_spare=True, instance_gone=False)
    assert not any(re.search("auto repair", step.name) for step in fenced)
    steps = {step.name: step for step in fenced}
    fence = steps["another node's check marks the silent instance Unhealthy"]
    # The configuration's default, plus one of the check's passes.
    assert fence.seconds == NodeCheckSettings().replace_unresponsive_after_minutes * 60 + WATCH_SECONDS
    assert fence.seconds == REPLACE_UNRESPONSIVE_SECONDS + WATCH_SECONDS
    assert NodeCheckValues.__dataclass_fields__["replace_unresponsive_after_seconds"].default == (
        REPLACE_UNRESPONSIVE_SECONDS
    )
    # The instance dies before its pod is freed: the termination comes before the pod's removal.
    names = [step.name for step in fenced]
    assert names.index("its Auto Scaling group terminates the instance") < names.index(
        "the lost pod is removed (its Node deleted, then the pod garbage-collected)"
    )
    unfenced = recovery_path(warm_spare=True, instance_gone=False, fenced=False)
    assert total_seconds(fenced) < total_seconds(unfenced) - 15 * 60
