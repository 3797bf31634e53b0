"""cluster_plan/cost_floor.py: the monthly floor and ceiling a template implies, at the list prices of
cluster_facts/list_prices.py, and the summary page that shows them with access, teams and runs."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from cluster_facts.list_prices import (
    EKS_CLUSTER_HOUR,
    HOURS_PER_MONTH,
    INSTANCE_HOUR,
    LUSTRE_PERSISTENT_2_GB_MONTH,
    NAT_GATEWAY_HOUR,
)
from cluster_plan.cost_floor import monthly_cost
from cluster_plan.review_files import summary
from config import load_config
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG, REPO_ROOT


@pytest.fixture(scope="module")
def snapshot() -> dict[str, Any]:
    """The reviewed template of config/default.yaml."""
    return dict(json.loads((REPO_ROOT / "tests" / "snapshots" / "TrainiumStack.default.json").read_text()))


def _month(hourly: float) -> float:
    return hourly * HOURS_PER_MONTH


def test_the_default_configuration_idles_at_its_fixed_items_and_system_nodes(
    snapshot: dict[str, Any],
) -> None:
    # config/default.yaml: 1 cluster, 1 NAT gateway, 1200 GB PERSISTENT_2 at 250, 2-4 m6i.2xlarge,
    # 0-2 trn1.32xlarge.
    fixed = _month(EKS_CLUSTER_HOUR + NAT_GATEWAY_HOUR) + 1200 * LUSTRE_PERSISTENT_2_GB_MONTH[250]
    system = INSTANCE_HOUR["m6i.2xlarge"]
    cost = monthly_cost(snapshot)
    assert cost.floor == pytest.approx(fixed + _month(2 * system))
    assert cost.ceiling == pytest.approx(fixed + _month(4 * system + 2 * INSTANCE_HOUR["trn1.32xlarge"]))
    assert cost.unknown == () and cost.notes == ()


def _trainium_group(template: dict[str, Any]) -> dict[str, Any]:
    (group,) = (
        resource
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::EKS::Nodegroup" and resource["Properties"].get("CapacityType")
    )
    properties: dict[str, Any] = group["Properties"]
    return properties


def test_warm_nodes_raise_the_floor_and_max_size_the_ceiling(snapshot: dict[str, Any]) -> None:
    changed = copy.deepcopy(snapshot)
    _trainium_group(changed)["ScalingConfig"] = {"MinSize": 1, "DesiredSize": 1, "MaxSize": 6}
    before, after = monthly_cost(snapshot), monthly_cost(changed)
    trn1 = _month(INSTANCE_HOUR["trn1.32xlarge"])
    assert after.floor - before.floor == pytest.approx(trn1)
    assert after.ceiling - before.ceiling == pytest.approx(4 * trn1)


def test_an_unpriced_type_and_capacity_blocks_are_named_never_guessed(snapshot: dict[str, Any]) -> None:
    changed = copy.deepcopy(snapshot)
    for resource in changed["Resources"].values():
        if resource["Type"] == "AWS::EC2::LaunchTemplate" and "InstanceType" in resource["Properties"].get(
            "LaunchTemplateData", {}
        ):
            resource["Properties"]["LaunchTemplateData"]["InstanceType"] = "trn2.48xlarge"
    cost = monthly_cost(changed)
    assert cost.unknown == ("trn1-32xl (trn2.48xlarge)",)
    assert cost.describe().startswith("at least ")
    blocked = copy.deepcopy(snapshot)
    _trainium_group(blocked)["CapacityType"] = "CAPACITY_BLOCK"
    cost = monthly_cost(blocked)
    assert cost.ceiling == pytest.approx(
        monthly_cost(snapshot).ceiling - 2 * _month(INSTANCE_HOUR["trn1.32xlarge"])
    )
    assert cost.notes == ("trn1-32xl: Capacity Block, paid up front for its window (not counted)",)


def test_the_summary_shows_access_teams_runs_and_the_cost(snapshot: dict[str, Any]) -> None:
    example = load_config(EXAMPLE_CONFIG)
    page = summary(example, stack_name="TrainiumStack", template=snapshot)
    assert (
        "| arn:aws:iam::444455556666:role/PlatformAdmins | cluster-admin (AmazonEKSClusterAdminPolicy, whole cluster) |"
        in page
    )
    assert (
        "| arn:aws:iam::444455556666:role/MlTeam | group trainium-team-training: its team's namespace only |"
        in page
    )
    assert "| research | research | trn1-32xl-block | 2 | " in page
    assert "| bert-large | training | trn1n-32xl (trn1n.32xlarge) | 4 | yes |" in page
    assert "| llm | research | trn1-32xl-block (trn1.32xlarge) | 8 | no (rendered only) |" in page
    assert "## Monthly cost" in page and "/month idle" in page
    default = summary(load_config(DEFAULT_CONFIG), stack_name="TrainiumStack", template=snapshot)
    # The default names a placeholder admin role: a configuration without one is refused (docs/access.md).
    assert "| arn:aws:iam::111122223333:role/TrainiumAdmins | cluster-admin" in default


def test_the_summary_says_the_zones_offering_is_checked_by_preflight(snapshot: dict[str, Any]) -> None:
    """A zone id without the instance type passes offline (issue 33): the page says who checks it."""
    page = summary(load_config(EXAMPLE_CONFIG), stack_name="TrainiumStack", template=snapshot)
    assert (
        "Not checked offline: whether use1-az6 offers trn1.32xlarge, trn1n.32xlarge (EC2 publishes no list to "
        "read here; `make preflight` asks DescribeInstanceTypeOfferings before a deploy, docs/preflight.md)."
    ) in page
