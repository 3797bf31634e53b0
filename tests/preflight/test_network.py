"""An existing VPC against a Stubber-backed account: the VPC, each named subnet (zone, CIDR, VPC,
tags, a public route), the way out (a NAT route or the endpoints) and the Trainium subnet's free
addresses. The facts go through the real EC2 client and response parsing (``gather_facts``)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from botocore.stub import Stubber

from config import StackConfig, parse_config
from preflight.aws import gather_facts
from preflight.checks import CheckResult, run_checks
from preflight.network_checks import ENDPOINT_SERVICES, trainium_addresses
from tests.config.test_existing_vpc import SUBNETS, TRAINIUM_SUBNET, VPC_ID, existing_vpc_data
from tests.preflight.conftest import FakeAccount, default_demand, stub_clients

REGION = "us-west-2"
VPC_FILTER = {"Filters": [{"Name": "vpc-id", "Values": [VPC_ID]}]}


def _subnet(subnet_id: str, zone: str, cidr: str, *, free: int = 4000, tagged: bool = True) -> dict[str, Any]:
    zone_ids = {"us-west-2a": "usw2-az2", "us-west-2d": "usw2-az4", "us-west-2b": "usw2-az1"}
    return {
        "SubnetId": subnet_id,
        "VpcId": VPC_ID,
        "AvailabilityZone": zone,
        "AvailabilityZoneId": zone_ids[zone],
        "CidrBlock": cidr,
        "AvailableIpAddressCount": free,
        "State": "available",
        "Tags": [{"Key": "kubernetes.io/role/internal-elb", "Value": "1"}] if tagged else [],
    }


def passing_network() -> dict[str, Any]:
    """The answers of a VPC in which tests/config/test_existing_vpc.py's configuration passes."""
    return {
        "vpc": {
            "VpcId": VPC_ID,
            "CidrBlockAssociationSet": [{"CidrBlock": "10.40.0.0/16"}],
            "State": "available",
        },
        "subnets": {
            SUBNETS[0]["id"]: _subnet(SUBNETS[0]["id"], "us-west-2a", SUBNETS[0]["cidr"]),
            SUBNETS[1]["id"]: _subnet(SUBNETS[1]["id"], "us-west-2d", SUBNETS[1]["cidr"]),
            TRAINIUM_SUBNET["id"]: _subnet(TRAINIUM_SUBNET["id"], "us-west-2d", TRAINIUM_SUBNET["cidr"]),
        },
        # One private route table (the VPC's main one) with its default route through a NAT gateway.
        "route_tables": [
            {
                "RouteTableId": "rtb-0123456789abcdef0",
                "VpcId": VPC_ID,
                "Associations": [{"Main": True, "RouteTableId": "rtb-0123456789abcdef0"}],
                "Routes": [
                    {"DestinationCidrBlock": "10.40.0.0/16", "GatewayId": "local", "State": "active"},
                    {
                        "DestinationCidrBlock": "0.0.0.0/0",
                        "NatGatewayId": "nat-0123456789abcdef0",
                        "State": "active",
                    },
                ],
            }
        ],
        "endpoints": [],
    }


def _queue_network(stubber: Stubber, network: dict[str, Any]) -> None:
    """The calls gather_facts makes last, for an existing VPC, in its order."""
    if network["vpc"] is None:
        stubber.add_client_error(
            "describe_vpcs",
            service_error_code="InvalidVpcID.NotFound",
            service_message=f"The vpc ID '{VPC_ID}' does not exist",
            http_status_code=400,
            expected_params={"VpcIds": [VPC_ID]},
        )
        stubber.add_response("describe_route_tables", {"RouteTables": []}, VPC_FILTER)
        stubber.add_response("describe_vpc_endpoints", {"VpcEndpoints": []}, VPC_FILTER)
    else:
        stubber.add_response("describe_vpcs", {"Vpcs": [network["vpc"]]}, {"VpcIds": [VPC_ID]})
        stubber.add_response("describe_route_tables", {"RouteTables": network["route_tables"]}, VPC_FILTER)
        endpoints = [
            {
                "VpcEndpointId": f"vpce-0{index:016x}",
                "ServiceName": f"com.amazonaws.{REGION}.{service}",
                "VpcId": VPC_ID,
            }
            for index, service in enumerate(network["endpoints"])
        ]
        stubber.add_response("describe_vpc_endpoints", {"VpcEndpoints": endpoints}, VPC_FILTER)
    for subnet_id in [SUBNETS[0]["id"], SUBNETS[1]["id"], TRAINIUM_SUBNET["id"]]:
        item = network["subnets"].get(subnet_id)
        if item is None:
            stubber.add_client_error(
                "describe_subnets",
                service_error_code="InvalidSubnetID.NotFound",
                service_message=f"The subnet ID '{subnet_id}' does not exist",
                http_status_code=400,
                expected_params={"SubnetIds": [subnet_id]},
            )
        else:
            stubber.add_response("describe_subnets", {"Subnets": [item]}, {"SubnetIds": [subnet_id]})


def evaluate(network: dict[str, Any], config: StackConfig | None = None) -> dict[str, CheckResult]:
    config = config or parse_config(existing_vpc_data())
    account = FakeAccount(account_id=config.account)
    stubbed = stub_clients(account, config)
    (ec2,) = [stubber for stubber in stubbed.stubbers if stubber.client is stubbed.clients.ec2]
    _queue_network(ec2, network)
    facts = gather_facts(config, stubbed.clients)
    stubbed.assert_all_asked()
    return {result.check: result for result in run_checks(config, facts, default_demand())}


def test_a_passing_network_passes_every_row() -> None:
    results = evaluate(passing_network())
    rows = {
        check: result
        for check, result in results.items()
        if check in {"vpc", "egress", "addresses"} or check.startswith("subnet ")
    }
    assert {check: result.status for check, result in rows.items()} == {
        "vpc": "PASS",
        f"subnet {SUBNETS[0]['id']}": "PASS",
        f"subnet {SUBNETS[1]['id']}": "PASS",
        f"subnet {TRAINIUM_SUBNET['id']}": "PASS",
        "egress": "PASS",
        "addresses": "PASS",
    }
    assert rows["egress"].detail == "0.0.0.0/0 through nat-0123456789abcdef0 from every named subnet"
    # config/default.yaml's group: 2 trn1.32xlarge x 50 addresses each.
    assert rows["addresses"].detail == (
        f"{TRAINIUM_SUBNET['id']} has 4000 free; every Trainium group at max_size takes 100 (2 x trn1.32xlarge x 50)"
    )


def test_a_configuration_with_its_own_vpc_asks_nothing_of_the_network() -> None:
    config = parse_config(existing_vpc_data())
    assert trainium_addresses(config) == 100
    from tests.config.test_config import default_data  # noqa: PLC0415

    own = parse_config(default_data())
    stubbed = stub_clients(FakeAccount(account_id=own.account), own)
    facts = gather_facts(own, stubbed.clients)
    stubbed.assert_all_asked()
    assert facts.network is None
    assert not any(
        result.check in {"vpc", "egress", "addresses"} for result in run_checks(own, facts, default_demand())
    )


def test_a_vpc_that_does_not_exist_fails_and_says_where() -> None:
    network = passing_network()
    network["vpc"] = None
    results = evaluate(network)
    assert results["vpc"].status == "FAIL"
    assert results["vpc"].detail == f"VPC {VPC_ID} does not exist in account 111122223333, us-west-2"
    assert "egress" not in results


def test_the_vpcs_cidr_must_be_the_files() -> None:
    network = passing_network()
    network["vpc"]["CidrBlockAssociationSet"] = [{"CidrBlock": "10.41.0.0/16"}]
    row = evaluate(network)["vpc"]
    assert (row.status, row.action) == (
        "FAIL",
        "set vpc.cidr to the VPC's CIDR that holds the private subnets (10.41.0.0/16)",
    )


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        pytest.param(
            {"AvailabilityZone": "us-west-2b", "AvailabilityZoneId": "usw2-az1"},
            "it is in us-west-2b (usw2-az1), the file puts it in us-west-2d",
            id="zone",
        ),
        pytest.param(
            {"CidrBlock": "10.40.48.0/20"},
            "its CIDR is 10.40.48.0/20, the file says 10.40.32.0/19",
            id="cidr",
        ),
        pytest.param(
            {"VpcId": "vpc-0fedcba9876543210"}, f"it is in vpc-0fedcba9876543210, not {VPC_ID}", id="vpc"
        ),
    ],
)
def test_a_subnet_that_is_not_what_the_file_says_fails(edit: dict[str, Any], expected: str) -> None:
    network = passing_network()
    network["subnets"][SUBNETS[1]["id"]].update(edit)
    row = evaluate(network)[f"subnet {SUBNETS[1]['id']}"]
    assert (row.status, row.detail) == ("FAIL", expected)


def test_a_missing_subnet_fails() -> None:
    network = passing_network()
    del network["subnets"][SUBNETS[0]["id"]]
    row = evaluate(network)[f"subnet {SUBNETS[0]['id']}"]
    assert (row.status, row.detail) == ("FAIL", f"no subnet {SUBNETS[0]['id']} in us-west-2")


def test_a_public_subnet_fails() -> None:
    network = passing_network()
    public = copy.deepcopy(network["route_tables"][0])
    public["RouteTableId"] = "rtb-0fedcba9876543210"
    public["Associations"] = [{"SubnetId": SUBNETS[0]["id"], "RouteTableId": "rtb-0fedcba9876543210"}]
    public["Routes"][1] = {
        "DestinationCidrBlock": "0.0.0.0/0",
        "GatewayId": "igw-0123456789abcdef0",
        "State": "active",
    }
    network["route_tables"].append(public)
    results = evaluate(network)
    row = results[f"subnet {SUBNETS[0]['id']}"]
    assert row.status == "FAIL" and "routes 0.0.0.0/0 to internet gateway igw-0123456789abcdef0" in row.detail
    assert results["egress"].status == "FAIL"


def test_a_subnet_without_the_load_balancer_tag_warns() -> None:
    network = passing_network()
    network["subnets"][SUBNETS[0]["id"]]["Tags"] = []
    row = evaluate(network)[f"subnet {SUBNETS[0]['id']}"]
    assert row.status == "WARN"
    assert (
        row.action
        == "ask the VPC's owner to tag it kubernetes.io/role/internal-elb=1 if you will run load balancers"
    )


def _without_nat(network: dict[str, Any]) -> dict[str, Any]:
    del network["route_tables"][0]["Routes"][1]
    return network


def test_no_route_out_and_missing_endpoints_fail_naming_them() -> None:
    network = _without_nat(passing_network())
    network["endpoints"] = ["s3", "ecr.api"]
    row = evaluate(network)["egress"]
    assert row.status == "FAIL"
    missing = [service for service in ENDPOINT_SERVICES if service not in ("s3", "ecr.api")]
    assert row.detail.endswith(
        f"the VPC has no endpoint for {', '.join(missing)}: nodes could not pull images, join or scale"
    )


def test_no_route_out_with_every_endpoint_warns() -> None:
    network = _without_nat(passing_network())
    network["endpoints"] = list(ENDPOINT_SERVICES)
    row = evaluate(network)["egress"]
    assert (
        row.status == "WARN"
        and "data sets, scripts and images from outside AWS cannot be fetched" in row.detail
    )


def test_too_few_free_addresses_for_max_size_nodes_fail() -> None:
    network = passing_network()
    network["subnets"][TRAINIUM_SUBNET["id"]]["AvailableIpAddressCount"] = 99
    row = evaluate(network)["addresses"]
    assert row.status == "FAIL"
    assert row.action == "give vpc.trainium_subnet a larger subnet in the Trainium zone, or lower max_size"


def test_a_denied_call_fails_the_vpc_row_naming_it() -> None:
    config = parse_config(existing_vpc_data())
    stubbed = stub_clients(FakeAccount(account_id=config.account), config)
    (ec2,) = [stubber for stubber in stubbed.stubbers if stubber.client is stubbed.clients.ec2]
    ec2.add_client_error(
        "describe_vpcs",
        service_error_code="UnauthorizedOperation",
        service_message="You are not authorized to perform this operation.",
        http_status_code=403,
        expected_params={"VpcIds": [VPC_ID]},
    )
    facts = gather_facts(config, stubbed.clients)
    row = {result.check: result for result in run_checks(config, facts, default_demand())}["vpc"]
    assert row.status == "FAIL" and row.action.startswith("allow ec2:DescribeVpcs")
