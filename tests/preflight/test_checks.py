"""Each check against a Stubber-backed account: a passing account, then one failure at a time.

The facts go through the real clients and response parsing (``gather_facts``), then the pure
checks; every test changes one thing in an otherwise passing account and asserts the row that
must change, with what it tells the user to do.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from config import StackConfig
from preflight.aws import gather_facts
from preflight.checks import CheckResult, run_checks
from preflight.quotas import ON_DEMAND, SPOT, quota_demands
from tests.preflight.conftest import (
    BLOCK_COUNT,
    BLOCK_ID,
    DEFAULT_CONFIG,
    EXAMPLE_CONFIG,
    ODCR_ID,
    FakeAccount,
    config_from,
    default_config,
    default_demand,
    example_config,
    stub_clients,
    trn_instance,
)


def evaluate(account: FakeAccount, config: StackConfig) -> dict[str, CheckResult]:
    """The checks, with the Lambda demand of config/default.yaml's template (the Lambda check does
    not read the configuration; test_lambda_concurrency.py reads each template's own)."""
    stubbed = stub_clients(account, config)
    facts = gather_facts(config, stubbed.clients)
    stubbed.assert_all_asked()
    return {result.check: result for result in run_checks(config, facts, default_demand())}


def failed(results: dict[str, CheckResult]) -> dict[str, CheckResult]:
    return {check: result for check, result in results.items() if result.status == "FAIL"}


def spot_default(data: dict[str, Any]) -> None:
    group = data["trainium"]["node_groups"][0]
    group["capacity_type"] = "spot"
    group["capacity_reservation_id"] = None


def test_passing_account_passes_every_check_of_the_example_in_order(account: FakeAccount) -> None:
    results = evaluate(account, example_config())

    assert list(results) == [
        "account",
        "vpc zones",
        "trainium zone",
        "offering trn1n-32xl",
        "offering trn1-32xl-block",
        "quota on-demand",
        "lambda concurrency",
        "reservation trn1n-32xl",
        "reservation trn1-32xl-block",
        "kubernetes 1.36",
    ]
    assert {result.status for result in results.values()} == {"PASS"}
    assert results["trainium zone"].detail == "use1-az6 is us-east-1c in this account"
    assert results["vpc zones"].detail == "us-east-1a = use1-az1, us-east-1c = use1-az6"
    # The Capacity Block group is not counted against the On-Demand quota: 4 x 128, not 12 x 128.
    assert results["quota on-demand"].detail == (
        "needs 512 vCPUs (trn1n-32xl 4 x 128); L-2C3B7624 Running On-Demand Trn instances = 768"
    )
    block = results["reservation trn1-32xl-block"].detail
    assert f"Capacity Block cr-0fedcba9876543210 active: {BLOCK_COUNT} x trn1.32xlarge" in block
    assert "2026-06-01 11:30 UTC to 2026-06-15 11:30 UTC" in block
    assert (
        results["kubernetes 1.36"].detail == "offered by EKS in us-east-1, standard support until 2027-08-02"
    )


def test_passing_account_passes_the_default_configuration(account: FakeAccount) -> None:
    account.account_id = "111122223333"
    results = evaluate(account, default_config())

    assert list(results) == [
        "account",
        "vpc zones",
        "trainium zone",
        "offering trn1-32xl",
        "quota on-demand",
        "lambda concurrency",
        "kubernetes 1.36",
    ]
    assert not failed(results)
    assert results["quota on-demand"].detail.startswith("needs 256 vCPUs (trn1-32xl 2 x 128)")


def test_credentials_for_another_account_fail(account: FakeAccount) -> None:
    account.account_id = "999988887777"
    results = evaluate(account, example_config())

    assert list(failed(results)) == ["account"]
    assert (
        "credentials are for account 999988887777, the file names 444455556666" in results["account"].detail
    )


def test_zone_id_with_another_name_in_this_account_fails(account: FakeAccount) -> None:
    account.zones["us-east-1"].update({"us-east-1b": "use1-az6", "us-east-1c": "use1-az2"})
    results = evaluate(account, example_config())

    assert list(failed(results)) == ["trainium zone"]
    zone = results["trainium zone"]
    assert zone.detail == (
        "trainium.availability_zone_id use1-az6 is us-east-1b in this account, "
        "not us-east-1c (trainium.availability_zone)"
    )
    assert "--write" in zone.action and "trainium.availability_zone: us-east-1b" in zone.action


def test_zone_id_not_in_the_region_fails(account: FakeAccount) -> None:
    def other_id(data: dict[str, Any]) -> None:
        data["trainium"]["availability_zone_id"] = "use1-az9"

    results = evaluate(account, config_from(EXAMPLE_CONFIG, other_id))

    zone = results["trainium zone"]
    assert zone.status == "FAIL"
    assert zone.detail.startswith(
        "trainium.availability_zone_id use1-az9 is not a zone of us-east-1; zones: "
    )
    assert "us-east-1c = use1-az6" in zone.detail
    # Nothing is offered in a zone that does not exist.
    assert results["offering trn1n-32xl"].status == "FAIL"


def test_instance_type_not_offered_in_the_zone_lists_where_it_is(account: FakeAccount) -> None:
    account.offerings["trn1n.32xlarge"] = ["use1-az5", "use1-az4"]
    results = evaluate(account, example_config())

    offering = results["offering trn1n-32xl"]
    assert offering.status == "FAIL"
    assert offering.detail == (
        "trn1n.32xlarge is not offered in use1-az6 (trainium.availability_zone_id); "
        "offered in: use1-az4 (us-east-1d), use1-az5 (us-east-1f)"
    )
    assert (
        offering.action
        == "set trainium.availability_zone_id to one of use1-az4, use1-az5, then run with --write"
    )
    assert results["offering trn1-32xl-block"].status == "PASS"


def test_instance_type_offered_nowhere_in_the_region_fails(account: FakeAccount) -> None:
    account.offerings["trn1n.32xlarge"] = []
    results = evaluate(account, example_config())

    offering = results["offering trn1n-32xl"]
    assert (offering.status, offering.detail) == (
        "FAIL",
        "trn1n.32xlarge is not offered in any zone of us-east-1",
    )
    assert "trainium.node_groups[0].instance_type" in offering.action


def test_vpc_zone_name_not_in_the_region_fails(account: FakeAccount) -> None:
    del account.zones["us-east-1"]["us-east-1a"]
    results = evaluate(account, example_config())

    assert list(failed(results)) == ["vpc zones"]
    vpc = results["vpc zones"]
    assert vpc.detail.startswith(
        "vpc.availability_zones[0] us-east-1a: not a zone of us-east-1 in this account"
    )
    assert "us-east-1b = use1-az2" in vpc.detail


def test_impaired_vpc_zone_warns(account: FakeAccount) -> None:
    account.zone_states["us-east-1a"] = "impaired"
    results = evaluate(account, example_config())

    assert results["vpc zones"].status == "WARN"
    assert "us-east-1a is impaired" in results["vpc zones"].detail


def test_on_demand_quota_too_low_fails(account: FakeAccount) -> None:
    account.quotas[ON_DEMAND.code] = 256.0
    results = evaluate(account, example_config())

    assert list(failed(results)) == ["quota on-demand"]
    quota = results["quota on-demand"]
    assert (
        quota.detail
        == "needs 512 vCPUs (trn1n-32xl 4 x 128); L-2C3B7624 Running On-Demand Trn instances = 256"
    )
    assert quota.action == (
        "request L-2C3B7624 >= 512 in Service Quotas (ec2, us-east-1), or lower trainium.node_groups[0].max_size"
    )


def test_spot_quota_too_low_fails_and_spot_uses_no_on_demand_quota(account: FakeAccount) -> None:
    account.account_id = "111122223333"
    account.quotas[SPOT.code] = 128.0
    results = evaluate(account, config_from(DEFAULT_CONFIG, spot_default))

    assert "quota on-demand" not in results
    assert list(failed(results)) == ["quota spot"]
    quota = results["quota spot"]
    assert (
        quota.detail == "needs 256 vCPUs (trn1-32xl 2 x 128); L-6B0D517C All Trn Spot Instance Requests = 128"
    )
    assert quota.action.startswith("request L-6B0D517C >= 256")


def test_spot_quota_enough_passes(account: FakeAccount) -> None:
    account.account_id = "111122223333"
    results = evaluate(account, config_from(DEFAULT_CONFIG, spot_default))

    assert results["quota spot"].status == "PASS"


def test_quota_without_value_in_the_region_warns(account: FakeAccount) -> None:
    account.quotas[ON_DEMAND.code] = None
    results = evaluate(account, example_config())

    quota = results["quota on-demand"]
    assert quota.status == "WARN"
    assert "L-2C3B7624 Running On-Demand Trn instances not found in us-east-1" in quota.detail


def test_quota_without_applied_value_uses_the_aws_default(account: FakeAccount) -> None:
    account.quotas[ON_DEMAND.code] = None
    account.default_quotas[ON_DEMAND.code] = 384.0
    results = evaluate(account, example_config())

    quota = results["quota on-demand"]
    assert quota.status == "FAIL"
    assert quota.detail.endswith("L-2C3B7624 Running On-Demand Trn instances = 384")


def test_trn_instances_outside_the_cluster_count_against_the_quota(account: FakeAccount) -> None:
    # example.yaml needs 512 of 768 On-Demand vCPUs; another team's three trn1n nodes use 384 more.
    account.instances = [trn_instance("trn1n.32xlarge", cluster="research")] * 2 + [
        trn_instance("trn1n.32xlarge", state="pending")
    ]
    results = evaluate(account, example_config())

    assert list(failed(results)) == ["quota on-demand"]
    quota = results["quota on-demand"]
    assert quota.detail == (
        "needs 512 vCPUs (trn1n-32xl 4 x 128) + 384 in use by 3 Trn instances outside cluster trainium-prod; "
        "L-2C3B7624 Running On-Demand Trn instances = 768"
    )
    assert quota.action == (
        "request L-2C3B7624 >= 896 in Service Quotas (ec2, us-east-1), or lower "
        "trainium.node_groups[0].max_size or stop those instances"
    )


def test_the_clusters_own_nodes_and_capacity_block_instances_are_not_counted_again(
    account: FakeAccount,
) -> None:
    # On a redeploy the cluster's nodes run already: its groups are counted at max_size instead.
    account.instances = [trn_instance("trn1n.32xlarge", cluster="trainium-prod")] * 4 + [
        trn_instance("trn1.32xlarge", lifecycle="capacity-block")
    ] * 8
    results = evaluate(account, example_config())

    quota = results["quota on-demand"]
    assert quota.status == "PASS"
    assert quota.detail == (
        "needs 512 vCPUs (trn1n-32xl 4 x 128); L-2C3B7624 Running On-Demand Trn instances = 768"
    )


def test_spot_instances_count_against_the_spot_quota_only(account: FakeAccount) -> None:
    account.account_id = "111122223333"
    # 256 of 512 Spot vCPUs needed; a spot trn1.32xlarge (128) and a spot trn1.2xlarge (8, from its
    # CPU options: not in the catalog) leave room. An On-Demand instance does not touch Spot.
    account.instances = [
        trn_instance("trn1.32xlarge", lifecycle="spot"),
        trn_instance("trn1.2xlarge", lifecycle="spot", cores=4),
        trn_instance("trn1.32xlarge"),
    ]
    results = evaluate(account, config_from(DEFAULT_CONFIG, spot_default))

    quota = results["quota spot"]
    assert quota.status == "PASS"
    assert quota.detail == (
        "needs 256 vCPUs (trn1-32xl 2 x 128) + 136 in use by 2 Trn instances outside cluster trainium; "
        "L-6B0D517C All Trn Spot Instance Requests = 512"
    )


def test_unreadable_instances_warn_when_the_quota_covers_the_stack_alone(account: FakeAccount) -> None:
    account.errors["describe_instances"] = ("UnauthorizedOperation", "not authorized")
    results = evaluate(account, example_config())

    quota = results["quota on-demand"]
    assert quota.status == "WARN"
    assert quota.detail.endswith(
        "= 768; Trn instances already running not counted: UnauthorizedOperation: not authorized"
    )
    assert quota.action.startswith("allow ec2:DescribeInstances (read-only) for these credentials")


def test_unreadable_instances_still_fail_a_quota_too_low_for_the_stack(account: FakeAccount) -> None:
    account.errors["describe_instances"] = ("UnauthorizedOperation", "not authorized")
    account.quotas[ON_DEMAND.code] = 256.0
    results = evaluate(account, example_config())

    assert list(failed(results)) == ["quota on-demand"]
    assert results["quota on-demand"].action.startswith("request L-2C3B7624 >= 512")


def test_capacity_blocks_only_need_no_quota() -> None:
    def blocks_only(data: dict[str, Any]) -> None:
        data["trainium"]["node_groups"] = data["trainium"]["node_groups"][1:]
        kept = data["trainium"]["node_groups"][0]["name"]
        for team in data["teams"]:
            team["node_groups"] = [kept]
        for run in data["runs"]:
            run["node_group"] = None
            run["nodes"] = 2

    config = config_from(EXAMPLE_CONFIG, blocks_only)
    assert quota_demands(config) == []
    results = evaluate(FakeAccount(), config)

    assert results["quota"].status == "PASS"
    assert "Capacity Blocks" in results["quota"].detail


def test_missing_reservation_fails_without_a_crash(account: FakeAccount) -> None:
    account.reservations[ODCR_ID] = None
    results = evaluate(account, example_config())

    assert list(failed(results)) == ["reservation trn1n-32xl"]
    reservation = results["reservation trn1n-32xl"]
    assert reservation.detail == "cr-0123456789abcdef0 not found in account 444455556666, us-east-1"
    assert "trainium.node_groups[0].capacity_reservation_id" in reservation.action


def test_reservation_in_another_zone_fails(account: FakeAccount) -> None:
    reservation = account.reservations[BLOCK_ID]
    assert reservation is not None
    reservation.update(AvailabilityZone="us-east-1f", AvailabilityZoneId="use1-az5")
    results = evaluate(account, example_config())

    assert list(failed(results)) == ["reservation trn1-32xl-block"]
    row = results["reservation trn1-32xl-block"]
    assert "in use1-az5, not trainium.availability_zone_id use1-az6" in row.detail
    assert "set trainium.availability_zone_id: use1-az5" in row.action


def test_reservation_for_another_instance_type_fails(account: FakeAccount) -> None:
    reservation = account.reservations[ODCR_ID]
    assert reservation is not None
    reservation["InstanceType"] = "trn1.32xlarge"
    results = evaluate(account, example_config())

    row = results["reservation trn1n-32xl"]
    assert row.status == "FAIL"
    assert "reserves trn1.32xlarge, the group runs trn1n.32xlarge" in row.detail
    assert "set trainium.node_groups[0].instance_type: trn1.32xlarge" in row.action


def test_reservation_with_too_few_instances_fails(account: FakeAccount) -> None:
    reservation = account.reservations[BLOCK_ID]
    assert reservation is not None
    reservation.update(TotalInstanceCount=4, AvailableInstanceCount=4)
    results = evaluate(account, example_config())

    row = results["reservation trn1-32xl-block"]
    assert row.status == "FAIL"
    assert "reserves 4 instances, trainium.node_groups[1].max_size is 8" in row.detail
    assert "lower trainium.node_groups[1].max_size (and desired_size) to 4" in row.action


def test_expired_capacity_block_fails_and_reports_its_start_and_end(account: FakeAccount) -> None:
    reservation = account.reservations[BLOCK_ID]
    assert reservation is not None
    reservation.update(
        State="expired",
        StartDate=datetime(2025, 3, 1, 11, 30, tzinfo=UTC),
        EndDate=datetime(2025, 3, 8, 11, 30, tzinfo=UTC),
    )
    results = evaluate(account, example_config())

    row = results["reservation trn1-32xl-block"]
    assert row.status == "FAIL"
    assert "2025-03-01 11:30 UTC to 2025-03-08 11:30 UTC" in row.detail
    assert "expired: no instance can launch in it" in row.detail
    assert "trainium.node_groups[1].capacity_reservation_id" in row.action


def test_scheduled_capacity_block_warns_with_its_start(account: FakeAccount) -> None:
    reservation = account.reservations[BLOCK_ID]
    assert reservation is not None
    reservation["State"] = "scheduled"
    results = evaluate(account, example_config())

    row = results["reservation trn1-32xl-block"]
    assert row.status == "WARN"
    assert "not active yet (scheduled)" in row.detail
    assert row.action == "nodes can start only when it becomes active at 2026-06-01 11:30 UTC"


def test_odcr_given_as_capacity_block_fails(account: FakeAccount) -> None:
    reservation = account.reservations[BLOCK_ID]
    assert reservation is not None
    reservation["ReservationType"] = "default"
    results = evaluate(account, example_config())

    row = results["reservation trn1-32xl-block"]
    assert row.status == "FAIL"
    assert "an On-Demand Capacity Reservation, not a Capacity Block" in row.detail
    assert "set trainium.node_groups[1].capacity_type: on_demand" in row.action


def test_kubernetes_version_not_offered_fails(account: FakeAccount) -> None:
    account.versions = [
        {"clusterVersion": version, "versionStatus": "STANDARD_SUPPORT"}
        for version in ("1.31", "1.32", "1.33")
    ]
    results = evaluate(account, example_config())

    assert list(failed(results)) == ["kubernetes 1.36"]
    row = results["kubernetes 1.36"]
    assert row.detail == "EKS in us-east-1 does not offer 1.36; offers: 1.31, 1.32, 1.33"
    # Only versions this project has a kubectl layer for are suggested.
    assert row.action == "set cluster.kubernetes_version to 1.33"


def test_kubernetes_version_in_extended_support_warns(account: FakeAccount) -> None:
    account.versions = [
        {
            "clusterVersion": "1.36",
            "versionStatus": "EXTENDED_SUPPORT",
            "endOfExtendedSupportDate": datetime(2028, 8, 2, tzinfo=UTC),
        }
    ]
    results = evaluate(account, example_config())

    row = results["kubernetes 1.36"]
    assert row.status == "WARN"
    assert row.detail == "1.36 is in extended support until 2028-08-02: EKS charges more per cluster hour"


def test_denied_call_fails_only_the_checks_that_need_it(account: FakeAccount) -> None:
    account.errors["describe_capacity_reservations"] = (
        "UnauthorizedOperation",
        "You are not authorized to perform this operation.",
    )
    results = evaluate(account, example_config())

    assert list(failed(results)) == ["reservation trn1n-32xl", "reservation trn1-32xl-block"]
    row = results["reservation trn1n-32xl"]
    assert (
        row.detail
        == "could not ask AWS: UnauthorizedOperation: You are not authorized to perform this operation."
    )
    assert row.action == "allow ec2:DescribeCapacityReservations (read-only) for these credentials"


@pytest.mark.parametrize(
    ("operation", "check", "action"),
    [
        ("describe_availability_zones", "trainium zone", "ec2:DescribeAvailabilityZones"),
        ("describe_instance_type_offerings", "offering trn1n-32xl", "ec2:DescribeInstanceTypeOfferings"),
        ("get_service_quota", "quota on-demand", "servicequotas:GetServiceQuota"),
        ("describe_cluster_versions", "kubernetes 1.36", "eks:DescribeClusterVersions"),
    ],
)
def test_each_denied_call_names_the_permission(
    account: FakeAccount, operation: str, check: str, action: str
) -> None:
    account.errors[operation] = ("AccessDeniedException", "not authorized")
    results = evaluate(account, example_config())

    assert results[check].status == "FAIL"
    assert results[check].action == f"allow {action} (read-only) for these credentials"
