"""The cost rows: prices from a Stubber-backed Price List (found, missing, ambiguous, denied,
throttled), and what the configuration costs idle and at max_size.

Every Price List answer goes through the real pricing client and response parsing; the Stubber
checks the exact ServiceCode and filters sent.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from config import StackConfig
from preflight.aws import PRICING_REGION, gather_facts, pick_price
from preflight.checks import CheckResult
from preflight.cli import EXIT_AWS_UNAVAILABLE, EXIT_OK, main
from preflight.costs import HOURS_PER_MONTH, cost_rows, ec2_query, fsx_query, price_queries
from preflight.facts import AccountFacts, NoPrice, Price, Unavailable
from tests.preflight import price_list
from tests.preflight.conftest import (
    BLOCK_ID,
    DEFAULT_CONFIG,
    EXAMPLE_CONFIG,
    EXAMPLE_TEMPLATE,
    ODCR_ID,
    FakeAccount,
    config_from,
    default_config,
    example_config,
    http_response,
    resize,
    stub_clients,
)

DENIED = (
    "AccessDeniedException",
    "User: arn:aws:iam::444455556666:user/ci is not authorized to perform: pricing:GetProducts",
)


def facts_of(account: FakeAccount, config: StackConfig) -> AccountFacts:
    stubbed = stub_clients(account, config)
    facts = gather_facts(config, stubbed.clients)
    stubbed.assert_all_asked()
    return facts


def costs(account: FakeAccount, config: StackConfig) -> dict[str, CheckResult]:
    return {row.check: row for row in cost_rows(config, facts_of(account, config))}


def default_account() -> FakeAccount:
    account = FakeAccount()
    account.account_id = "111122223333"
    return account


# --- the lookup ----------------------------------------------------------------------------------


def test_prices_are_asked_in_us_east_1_with_the_on_demand_linux_filters() -> None:
    config = default_config()  # us-west-2
    stubbed = stub_clients(default_account(), config)
    assert stubbed.clients.pricing.meta.region_name == PRICING_REGION == "us-east-1"

    facts = gather_facts(config, stubbed.clients)

    stubbed.assert_all_asked()  # the Stubber compared every request with these filters
    assert [query.key for query in price_queries(config)] == [
        "ec2 m6i.2xlarge",
        "ec2 trn1.32xlarge",
        "eks cluster",
        "nat gateway",
        "fsx lustre ssd 250",
    ]
    assert ec2_query("trn1.32xlarge", "us-west-2").filters == (
        ("TERM_MATCH", "instanceType", "trn1.32xlarge"),
        ("TERM_MATCH", "regionCode", "us-west-2"),
        ("TERM_MATCH", "operatingSystem", "Linux"),
        ("TERM_MATCH", "tenancy", "Shared"),
        ("TERM_MATCH", "preInstalledSw", "NA"),
        ("TERM_MATCH", "capacitystatus", "Used"),
        ("TERM_MATCH", "licenseModel", "No License required"),
    )
    trn = facts.prices["ec2 trn1.32xlarge"]
    assert trn == Price(
        usd=21.5, unit="Hrs", sku="US-WEST-2-TRN132XLARGE-ONDEMAND", published=price_list.PUBLISHED
    )
    assert {key: price.usd for key, price in facts.prices.items() if isinstance(price, Price)} == {
        "ec2 m6i.2xlarge": 0.384,
        "ec2 trn1.32xlarge": 21.5,
        "eks cluster": 0.10,
        "nat gateway": 0.045,  # the hourly product, not NatGateway-Bytes
        "fsx lustre ssd 250": 0.21,  # Storage.SSD.250 among seven SSD tiers
    }


def test_capacity_block_rows_of_an_instance_type_are_not_its_on_demand_price() -> None:
    query = ec2_query("trn1.32xlarge", "us-east-1")
    on_demand = price_list.ec2_instance("us-east-1", "trn1.32xlarge", 21.50)
    block = price_list.ec2_instance("us-east-1", "trn1.32xlarge", 11.0, market="CapacityBlock")

    assert pick_price(price_list.encoded([block, on_demand]), query) == Price(
        usd=21.5, unit="Hrs", sku="US-EAST-1-TRN132XLARGE-ONDEMAND", published=price_list.PUBLISHED
    )


def test_two_different_prices_for_one_query_are_unknown_not_guessed() -> None:
    query = ec2_query("trn1.32xlarge", "us-east-1")
    one = price_list.ec2_instance("us-east-1", "trn1.32xlarge", 21.50)
    other = json.loads(json.dumps(one))
    other["product"]["sku"] = "OTHER"
    dimension = next(iter(next(iter(other["terms"]["OnDemand"].values()))["priceDimensions"].values()))
    dimension["pricePerUnit"]["USD"] = "19.0000000000"

    assert pick_price(price_list.encoded([one, other]), query) == NoPrice(
        "2 trn1.32xlarge On-Demand prices, not one: $19, $21.5"
    )
    assert pick_price(["{not json"], query) == NoPrice(
        "an unreadable Price List item for trn1.32xlarge On-Demand"
    )


def test_missing_price_warns_on_its_row_and_the_total_becomes_a_lower_bound() -> None:
    account = FakeAccount()
    account.price_lists["us-east-1"]["ec2 trn1n.32xlarge"] = []
    rows = costs(account, example_config())

    row = rows["cost trn1n-32xl"]
    assert (row.status, row.detail) == (
        "WARN",
        (
            "trn1n.32xlarge On-Demand: price unknown (no trn1n.32xlarge On-Demand price in the Price List for "
            "these filters)"
        ),
    )
    assert row.action.startswith("look the price up on the AWS pricing pages")
    total = rows["cost total"]
    assert total.status == "WARN"
    # Known: system nodes 2 (4) x $0.384, EKS $0.10, 2 NAT x $0.045, FSx 4800 GB x $0.34 / 730 h.
    assert total.detail.startswith("idle at least $3.19/h (about $77/day); at max_size at least $3.96/h")
    assert total.detail.endswith("; unknown: trn1n.32xlarge On-Demand")
    assert {check: row.status for check, row in rows.items() if check != "cost total"} == {
        "cost trn1n-32xl": "WARN",
        "cost trn1-32xl-block": "PASS",
        "cost system nodes": "PASS",
        "cost fixed": "PASS",
    }


def test_denied_price_list_is_one_warn_row_naming_the_permission_and_asks_once() -> None:
    account = FakeAccount()
    account.errors["get_products"] = DENIED
    config = example_config()
    facts = facts_of(account, config)  # one get_products queued: a second call would fail the Stubber

    assert set(facts.prices.values()) == {Unavailable("pricing:GetProducts", f"{DENIED[0]}: {DENIED[1]}")}
    [row] = cost_rows(config, facts)
    assert (row.check, row.status) == ("cost", "WARN")
    assert row.detail == (
        "prices unknown: could not ask the AWS Price List (AccessDeniedException: User: "
        "arn:aws:iam::444455556666:user/ci is not authorized to perform: pricing:GetProducts). Idle runs "
        "2 x m6i.2xlarge; at max_size 4 x m6i.2xlarge, 4 x trn1n.32xlarge; always: the EKS control plane, "
        "2 NAT gateway(s), FSx for Lustre 4800 GiB"
    )
    assert (
        row.action
        == "allow pricing:GetProducts (read-only, Resource *) for these credentials to see the hourly cost"
    )


def test_denied_price_list_does_not_fail_the_run(account: FakeAccount, stubbed_factory: Any) -> None:
    account.errors["get_products"] = DENIED
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["--config", str(EXAMPLE_CONFIG), "--width", "300", *EXAMPLE_TEMPLATE],
        clients_factory=stubbed_factory(account, example_config()),
        stdout=out,
        stderr=err,
    )

    assert (code, err.getvalue()) == (EXIT_OK, "")
    assert out.getvalue().splitlines()[-1] == (
        "27 checks: 26 passed, 1 warned, 0 failed; deployable, but read the WARN rows first"
    )


def test_an_error_other_than_a_refusal_leaves_the_other_prices_asked() -> None:
    account = FakeAccount()
    account.errors["get_products"] = ("InvalidParameterException", "Input validation failed")
    config = example_config()
    facts = facts_of(account, config)  # an error queued for every query: all were asked

    assert len(facts.prices) == len(price_queries(config))
    rows = cost_rows(config, facts)
    assert [row.check for row in rows] == ["cost"]  # every price unavailable: still one row
    assert "InvalidParameterException: Input validation failed" in rows[0].detail


# --- throttling, through botocore's real retry handler (see test_retries.py for why) -----------


def throttling_pricing(account: FakeAccount, config: StackConfig, *, throttles: int) -> Any:
    """A ``before-send`` handler for the Price List: each query throttled ``throttles`` times, then answered."""
    attempts: dict[str, int] = {}
    keys = {query.filters: query.key for query in price_queries(config)}

    def handler(request: Any, **_: Any) -> AWSResponse:
        handler.calls += 1  # type: ignore[attr-defined]
        body = json.loads(request.body)
        key = keys[tuple((item["Type"], item["Field"], item["Value"]) for item in body["Filters"])]
        attempts[key] = attempts.get(key, 0) + 1
        if attempts[key] <= throttles:
            error = {"__type": "ThrottlingException", "message": "Rate exceeded"}
            return http_response(request, 400, json.dumps(error).encode(), "application/x-amz-json-1.1")
        items = price_list.encoded(account.price_lists[config.region][key])
        answer = {"FormatVersion": "aws_v1", "PriceList": items}
        return http_response(request, 200, json.dumps(answer).encode(), "application/x-amz-json-1.1")

    handler.calls = 0  # type: ignore[attr-defined]
    return handler


def run_with_throttled_pricing(*, throttles: int, max_attempts: int) -> tuple[int, str, str, Any]:
    account = FakeAccount()
    config = example_config()
    handler = throttling_pricing(account, config, throttles=throttles)

    def factory(region: str, attempts: int) -> Any:
        stubbed = stub_clients(account, config, max_attempts=attempts, unstubbed=frozenset({"pricing"}))
        stubbed.clients.pricing.meta.events.register("before-send.pricing.GetProducts", handler)
        return stubbed.clients

    out, err = io.StringIO(), io.StringIO()
    argv = [
        "--config",
        str(EXAMPLE_CONFIG),
        "--width",
        "300",
        "--max-attempts",
        str(max_attempts),
        *EXAMPLE_TEMPLATE,
    ]
    code = main(argv, clients_factory=factory, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue(), handler


def test_throttled_price_list_is_retried_and_then_priced(sleeps: list[float]) -> None:
    code, out, err, handler = run_with_throttled_pricing(throttles=1, max_attempts=4)

    queries = len(price_queries(example_config()))
    assert (code, err) == (EXIT_OK, "")
    assert handler.calls == 2 * queries and len(sleeps) == queries  # throttled once each, then answered
    [total] = [line.split() for line in out.splitlines() if line.startswith("cost total")]
    assert total[2:6] == ["PASS", "idle", "$151.87/h", "(about"]


def test_price_list_throttled_on_every_attempt_warns_and_stops_asking(sleeps: list[float]) -> None:
    code, out, err, handler = run_with_throttled_pricing(throttles=100, max_attempts=3)

    # The run goes on (exit 0, not 2): only the first query was tried, max_attempts times.
    assert (code, err) == (EXIT_OK, "")
    assert handler.calls == 3 and len(sleeps) == 2
    assert "could not ask the AWS Price List (ThrottlingException: throttled on every attempt)" in out
    assert code != EXIT_AWS_UNAVAILABLE


# --- what is counted -----------------------------------------------------------------------------


def test_example_costs_idle_and_at_max_size() -> None:
    rows = costs(FakeAccount(), example_config())

    assert {check: row.status for check, row in rows.items()} == dict.fromkeys(
        ["cost trn1n-32xl", "cost trn1-32xl-block", "cost system nodes", "cost fixed", "cost total"], "PASS"
    )
    # The ODCR (6 in the fake account) bills while active, whatever min_size says.
    assert rows["cost trn1n-32xl"].detail == (
        "trn1n.32xlarge On-Demand $24.78/h; ODCR cr-0123456789abcdef0 bills its 6 instances while active, "
        "used or not: idle (min_size 0) $148.68/h, at max_size 4 $148.68/h"
    )
    assert rows["cost trn1-32xl-block"].detail == (
        "Capacity Block cr-0fedcba9876543210, 8 x trn1.32xlarge at most: paid up front for its window "
        "2026-06-01 11:30 UTC to 2026-06-15 11:30 UTC, so $0/h here"
    )
    assert rows["cost system nodes"].detail == (
        "m6i.2xlarge On-Demand $0.384/h: idle (min_size 2) $0.768/h, at max_size 4 $1.54/h"
    )
    fsx_hourly = 4800 * 0.34 / HOURS_PER_MONTH
    assert f"= ${fsx_hourly:.2f}/h" in rows["cost fixed"].detail
    assert rows["cost fixed"].detail == (
        "bills while the stack exists, nodes or not: EKS control plane $0.10/h; 2 NAT gateways x $0.045 = "
        "$0.09/h (plus per GB processed); FSx for Lustre PERSISTENT_2 4800 GiB at 500 MB/s/TiB: 4800 GB x "
        "$0.34/GB-month / 730 h = $2.24/h"
    )
    idle = 148.68 + 2 * 0.384 + 0.10 + 2 * 0.045 + fsx_hourly
    assert rows["cost total"].detail == (
        f"idle ${idle:.2f}/h (about ${idle * 24:,.0f}/day); at max_size ${idle + 2 * 0.384:.2f}/h (about "
        f"${(idle + 2 * 0.384) * 24:,.0f}/day); Capacity Blocks are paid up front, not counted; not counted: "
        "EBS volumes, traffic, logs; On-Demand list prices of the AWS Price List, published 2026-11-23"
    )


def test_warm_nodes_cost_at_min_size_and_the_autoscaler_ceiling_at_max_size() -> None:
    def warm(data: dict[str, Any]) -> None:
        group = data["trainium"]["node_groups"][0]
        resize(group, min_size=1, max_size=4)

    rows = costs(default_account(), config_from(DEFAULT_CONFIG, warm))
    assert rows["cost trn1-32xl"].detail == (
        "trn1.32xlarge On-Demand $21.50/h: idle (min_size 1) $21.50/h, at max_size 4 $86.00/h"
    )


def test_scale_from_zero_costs_only_the_fixed_items_and_system_nodes_idle() -> None:
    def from_zero(data: dict[str, Any]) -> None:
        resize(data["trainium"]["node_groups"][0], min_size=0)

    rows = costs(default_account(), config_from(DEFAULT_CONFIG, from_zero))
    fixed = 0.10 + 0.045 + 1200 * 0.21 / HOURS_PER_MONTH
    assert rows["cost trn1-32xl"].detail.endswith("idle (min_size 0) $0.00/h, at max_size 2 $43.00/h")
    assert rows["cost total"].detail.startswith(
        f"idle ${2 * 0.384 + fixed:.2f}/h (about ${(2 * 0.384 + fixed) * 24:,.0f}/day); at max_size "
        f"${4 * 0.384 + 43 + fixed:.2f}/h"
    )


def test_spot_is_priced_at_on_demand_as_an_upper_bound() -> None:
    def spot(data: dict[str, Any]) -> None:
        data["trainium"]["node_groups"][0].update(capacity_type="spot", capacity_reservation_id=None)

    rows = costs(default_account(), config_from(DEFAULT_CONFIG, spot))
    assert rows["cost trn1-32xl"].detail == (
        "trn1.32xlarge Spot, priced at On-Demand $21.50/h as an upper bound (Spot prices are lower and "
        "change): idle (min_size 0) at most $0.00/h, at max_size 2 at most $43.00/h"
    )
    assert "Spot at On-Demand prices (an upper bound)" in rows["cost total"].detail


def test_scheduled_odcr_is_not_counted_yet_and_says_when_it_will_bill(account: FakeAccount) -> None:
    reservation = account.reservations[ODCR_ID]
    assert reservation is not None
    reservation.update(State="scheduled", StartDate=datetime(2026, 7, 1, tzinfo=UTC))
    rows = costs(account, example_config())

    assert rows["cost trn1n-32xl"].detail == (
        "trn1n.32xlarge On-Demand $24.78/h; ODCR cr-0123456789abcdef0 (scheduled) will bill 6 instances "
        "from 2026-07-01 00:00 UTC: idle (min_size 0) $0.00/h, at max_size 4 $99.12/h"
    )


def test_unreadable_odcr_is_said_not_counted(account: FakeAccount) -> None:
    account.errors["describe_capacity_reservations"] = ("UnauthorizedOperation", "not authorized")
    rows = costs(account, example_config())

    assert (
        "ODCR cr-0123456789abcdef0 not read: what it bills is not counted" in rows["cost trn1n-32xl"].detail
    )


def test_scratch_storage_is_unknown_and_not_asked() -> None:
    def scratch(data: dict[str, Any]) -> None:
        data["fsx"].update(deployment_type="SCRATCH_2", throughput_mib_per_tib=None, backups="none")
        data["fsx"].pop("backup_retention_days", None)

    config = config_from(DEFAULT_CONFIG, scratch)
    assert "fsx" not in " ".join(query.key for query in price_queries(config))
    rows = costs(default_account(), config)

    fixed = rows["cost fixed"]
    assert fixed.status == "WARN"
    assert fixed.detail.endswith(
        "FSx for Lustre SCRATCH_2 1200 GiB: price unknown (preflight knows no Price List product that is "
        "SCRATCH_2 storage alone)"
    )
    assert rows["cost total"].detail.endswith("; unknown: FSx for Lustre SCRATCH_2 1200 GiB")


def test_extended_support_is_said_next_to_the_standard_rate(account: FakeAccount) -> None:
    account.versions = [{"clusterVersion": "1.36", "versionStatus": "EXTENDED_SUPPORT"}]
    rows = costs(account, example_config())

    assert (
        "EKS control plane $0.10/h (standard support; 1.36 is in extended support, which costs more per hour)"
        in rows["cost fixed"].detail
    )


@pytest.mark.parametrize("tier", [125, 250, 500, 1000])
def test_each_persistent_2_tier_has_its_own_price(tier: int) -> None:
    items = price_list.encoded(price_list.lustre_storage("us-east-1"))
    price = pick_price(items, fsx_query("us-east-1", tier))
    assert isinstance(price, Price)
    assert (price.usd, price.unit) == (price_list.LUSTRE_SSD_GB_MONTH[tier], "GB-Mo")


# --- the printed rows ----------------------------------------------------------------------------

EXAMPLE_COST_ROWS = """\
cost trn1n-32xl           PASS    trn1n.32xlarge On-Demand $24.78/h;   -
                                  ODCR cr-0123456789abcdef0 bills its
                                  4 instances while active, used or
                                  not: idle (min_size 0) $99.12/h, at
                                  max_size 4 $99.12/h

cost trn1-32xl-block      PASS    Capacity Block                       -
                                  cr-0fedcba9876543210, 8 x
                                  trn1.32xlarge at most: paid up
                                  front for its window 2026-06-01
                                  11:30 UTC to 2026-06-15 11:30 UTC,
                                  so $0/h here

cost system nodes         PASS    m6i.2xlarge On-Demand $0.384/h:      -
                                  idle (min_size 2) $0.768/h, at
                                  max_size 4 $1.54/h

cost fixed                PASS    bills while the stack exists, nodes  -
                                  or not: EKS control plane $0.10/h;
                                  2 NAT gateways x $0.045 = $0.09/h
                                  (plus per GB processed); FSx for
                                  Lustre PERSISTENT_2 4800 GiB at 500
                                  MB/s/TiB: 4800 GB x $0.34/GB-month
                                  / 730 h = $2.24/h

cost total                PASS    idle $102.31/h (about $2,456/day);   -
                                  at max_size $103.08/h (about
                                  $2,474/day); Capacity Blocks are
                                  paid up front, not counted; not
                                  counted: EBS volumes, traffic,
                                  logs; On-Demand list prices of the
                                  AWS Price List, published
                                  2026-11-23

31 checks: 31 passed, 0 warned, 0 failed; ready for make deploy
"""


def test_cli_prints_the_cost_rows_after_the_checks(stubbed_factory: Any) -> None:
    """config/example.yaml in an account whose reservations are sized exactly to the groups (the
    ODCR holds 4, the Capacity Block 8; reserved groups update without surge, so both pass): the
    checks, then the cost rows, at the default width."""
    account = FakeAccount()
    for reservation_id, count in ((ODCR_ID, 4), (BLOCK_ID, 8)):
        reservation = account.reservations[reservation_id]
        assert reservation is not None
        reservation.update(TotalInstanceCount=count, AvailableInstanceCount=count)
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["--config", str(EXAMPLE_CONFIG), *EXAMPLE_TEMPLATE],
        clients_factory=stubbed_factory(account, example_config()),
        stdout=out,
        stderr=err,
    )

    assert (code, err.getvalue()) == (EXIT_OK, "")
    text = out.getvalue()
    assert text.endswith(EXAMPLE_COST_ROWS)
    # The cost rows come after every check row.
    assert text.index("kubernetes 1.36") < text.index("cost trn1n-32xl")
