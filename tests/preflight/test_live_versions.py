"""Preflight's live version checks (preflight/live_versions.py): EKS's calendar and the AMI releases
SSM knows, against the offline tables, with the account answered by botocore's Stubber."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from cluster_facts.ami_releases import neuron_ami_parameter
from preflight.aws import gather_facts
from preflight.checks import CheckResult
from preflight.live_versions import version_checks
from tests.preflight.conftest import (
    DEFAULT_CONFIG,
    FakeAccount,
    config_from,
    default_config,
    example_config,
    stub_clients,
)

DEFAULT = "1.36.2-20260714"


def _results(account: FakeAccount, config: Any) -> dict[str, CheckResult]:
    stubbed = stub_clients(account, config)
    facts = gather_facts(config, stubbed.clients)
    stubbed.assert_all_asked()
    return {result.check: result for result in version_checks(config, facts)}


def test_a_current_account_passes_and_asks_ssm_for_each_release_once(account: FakeAccount) -> None:
    results = _results(account, example_config())
    # Both groups boot the default release: one parameter asked for them (the stubber checks the names).
    assert list(results) == [
        "cluster version",
        "eks dates 1.36",
        "eks versions",
        "ami recommended 1.36",
        "ami trn1n-32xl",
        "ami trn1-32xl-block",
    ]
    assert {result.status for result in results.values()} == {"PASS"}
    assert results["eks dates 1.36"].detail == (
        "EKS's dates are the table's: standard support until 2027-08-02, extended until 2028-08-02"
    )
    assert results["ami recommended 1.36"].detail == (
        f"AWS recommends {DEFAULT} for Neuron nodes of 1.36: in the table (Neuron driver 2.29.0.0, "
        "containerd 2.2.4-1.amzn2023.0.3)"
    )
    assert (
        results["ami trn1n-32xl"].detail
        == f"EKS publishes Neuron AMI release {DEFAULT} (from the table) in us-east-1"
    )


def test_the_parameter_paths_are_the_ssm_public_ones() -> None:
    assert neuron_ami_parameter("1.36") == (
        "/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/neuron/recommended/release_version"
    )
    assert neuron_ami_parameter("1.36", release=DEFAULT) == (
        "/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/neuron/"
        "amazon-eks-node-al2023-x86_64-neuron-1.36-v20260714/image_id"
    )


def test_a_version_eks_offers_that_the_tables_do_not_know_is_reported(account: FakeAccount) -> None:
    account.versions = [{"clusterVersion": "1.37", "versionStatus": "STANDARD_SUPPORT"}, *account.versions]
    row = _results(account, default_config())["eks versions"]
    assert (row.status, row.detail) == (
        "WARN",
        "EKS offers 1.37, which the tables do not know (newest known: 1.36)",
    )
    assert row.action == "add its dates, kubectl layer, autoscaler image and AMI releases (docs/upgrades.md)"


def test_support_dates_that_differ_from_the_table_are_reported(account: FakeAccount) -> None:
    account.versions[0] = {
        **account.versions[0],
        "endOfStandardSupportDate": datetime(2027, 7, 26, tzinfo=UTC),
        "endOfExtendedSupportDate": datetime(2028, 7, 26, tzinfo=UTC),
    }
    row = _results(account, default_config())["eks dates 1.36"]
    assert row.status == "WARN"
    assert row.detail == (
        "EKS says 1.36 has standard support until 2027-07-26 and extended until 2028-07-26; the table says "
        "2027-08-02 and 2028-08-02"
    )


def test_a_recommended_release_the_table_does_not_know_is_reported(account: FakeAccount) -> None:
    account.ami_recommended = "1.36.5-20261020"
    row = _results(account, default_config())["ami recommended 1.36"]
    assert row.status == "WARN"
    assert row.detail == (
        "AWS recommends 1.36.5-20261020 for Neuron nodes of 1.36, which the table does not know (newest known: "
        f"{DEFAULT})"
    )
    assert "cluster_facts/ami_releases.py" in row.action


def _declared(data: dict[str, Any]) -> None:
    group = data["trainium"]["node_groups"][0]
    group["ami_release"] = "1.36.5-20261020"
    group["ami_facts"] = {"neuron_driver": "2.31.7.0", "containerd": "2.2.5-1.amzn2023.0.1"}


def test_a_declared_release_is_checked_to_exist(account: FakeAccount) -> None:
    account.account_id = "111122223333"
    config = config_from(DEFAULT_CONFIG, _declared)
    assert _results(account, config)["ami trn1-32xl"].detail == (
        "EKS publishes Neuron AMI release 1.36.5-20261020 (declared under ami_facts) in us-west-2"
    )
    account.ami_unpublished = {"1.36.5-20261020"}
    row = _results(account, config)["ami trn1-32xl"]
    assert row.status == "FAIL"
    assert row.detail == (
        "EKS publishes no Neuron AMI of release 1.36.5-20261020 (declared under ami_facts) in us-west-2: the "
        "group's nodes could not be created"
    )
    assert (
        row.action
        == f"set trainium.node_groups[0].ami_release to a published release (SSM recommends {DEFAULT})"
    )


def test_a_denied_ssm_fails_only_the_release_rows(account: FakeAccount) -> None:
    account.errors["get_parameter"] = ("AccessDeniedException", "not authorized to perform ssm:GetParameter")
    results = _results(account, default_config())
    assert results["ami recommended 1.36"].status == "WARN"
    assert results["ami trn1-32xl"].status == "FAIL"
    assert results["ami trn1-32xl"].action == "allow ssm:GetParameter (read-only)"
    assert results["eks dates 1.36"].status == "PASS"


def test_a_deployed_cluster_moves_one_minor_at_a_time(account: FakeAccount) -> None:
    assert _results(account, default_config())["cluster version"].detail == (
        "no cluster named trainium yet: it is created at 1.36"
    )
    account.cluster_version = "1.35"
    row = _results(account, default_config())["cluster version"]
    assert (row.status, row.detail) == (
        "PASS",
        "trainium runs 1.35: the deploy upgrades it to 1.36, then its node groups (docs/upgrades.md)",
    )
    account.cluster_version = "1.34"
    row = _results(account, default_config())["cluster version"]
    assert (row.status, row.detail, row.action) == (
        "FAIL",
        "trainium runs 1.34; EKS upgrades one minor version at a time, so 1.36 would fail mid-deploy",
        "set cluster.kubernetes_version to 1.35, deploy, then move on (docs/upgrades.md)",
    )
    account.cluster_version = "1.37"
    assert _results(account, default_config())["cluster version"].status == "FAIL"
