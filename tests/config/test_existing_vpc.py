"""An existing VPC (``vpc.vpc_id``): validated offline for shape, and a stack that creates no network.

The stack imports the VPC and its subnets from the configuration (``ec2.Vpc.from_vpc_attributes``,
no lookup) and creates, changes and tags nothing of them; ``make preflight`` checks them against
the account (tests/preflight/test_network.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from config import parse_config
from tests.config.test_config import default_data, problems_of
from tests.conftest import Synthesized, synthesize
from tests.yaml_edits import with_change

VPC_ID = "vpc-0123456789abcdef0"
SUBNETS = [
    {"id": "subnet-0aaaaaaaaaaaaaaa1", "cidr": "10.40.0.0/19"},
    {"id": "subnet-0aaaaaaaaaaaaaaa2", "cidr": "10.40.32.0/19"},
]
TRAINIUM_SUBNET = {"id": "subnet-0aaaaaaaaaaaaaaa3", "cidr": "10.40.64.0/18"}
# Resources of a network: with an existing VPC the template holds none of them.
NETWORK_TYPES = (
    "AWS::EC2::VPC",
    "AWS::EC2::Subnet",
    "AWS::EC2::NatGateway",
    "AWS::EC2::EIP",
    "AWS::EC2::InternetGateway",
    "AWS::EC2::VPCGatewayAttachment",
    "AWS::EC2::RouteTable",
    "AWS::EC2::Route",
    "AWS::EC2::SubnetRouteTableAssociation",
    "AWS::EC2::FlowLog",
    "Custom::VpcRestrictDefaultSG",
)


def existing_vpc_data(**vpc: Any) -> dict[str, Any]:
    """config/default.yaml on an existing VPC (zones us-west-2a, us-west-2d; Trainium in us-west-2d)."""
    settings = {
        "vpc_id": VPC_ID,
        "cidr": "10.40.0.0/16",
        "availability_zones": ["us-west-2a", "us-west-2d"],
        "private_subnets": SUBNETS,
        "trainium_subnet": TRAINIUM_SUBNET,
        **vpc,
    }
    return with_change(
        default_data(), "vpc", {key: value for key, value in settings.items() if value is not ...}
    )


def test_an_existing_vpc_is_read_with_its_subnets() -> None:
    config = parse_config(existing_vpc_data())
    assert config.vpc.existing and config.vpc.vpc_id == VPC_ID
    assert [subnet.id for subnet in config.vpc.private_subnets or []] == [s["id"] for s in SUBNETS]
    assert (config.vpc.nat_gateways, config.vpc.flow_log_retention_days) == (None, None)
    new = parse_config(default_data()).vpc
    assert (new.existing, new.nat_gateways, new.flow_log_retention_days) == (False, 1, 30)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            {"private_subnets": ...},
            "vpc.private_subnets: required with vpc_id: the existing VPC's private subnets, one per availability "
            "zone ({id: subnet-..., cidr: ...} each), where the nodes, the cluster and the file system go",
            id="no-subnets",
        ),
        pytest.param(
            {"nat_gateways": 1},
            "vpc.nat_gateways: the stack creates no NAT gateway in an existing VPC (vpc_id): its routes are its "
            "owner's; leave nat_gateways out",
            id="nat-gateways",
        ),
        pytest.param(
            {"flow_log_retention_days": 30},
            "vpc.flow_log_retention_days: the stack creates no flow log for an existing VPC (vpc_id): its flow "
            "logs are its owner's; leave flow_log_retention_days out",
            id="flow-logs",
        ),
        pytest.param(
            {"private_subnets": SUBNETS[:1]},
            "vpc.availability_zones: 2 zones for 1 vpc.private_subnets; give one private subnet per zone, in "
            "the same order",
            id="subnet-per-zone",
        ),
        pytest.param(
            {"cidr": "10.41.0.0/16"},
            "vpc.cidr: 10.41.0.0/16 does not hold subnet subnet-0aaaaaaaaaaaaaaa1, subnet-0aaaaaaaaaaaaaaa2, "
            "subnet-0aaaaaaaaaaaaaaa3: give the VPC's CIDR that holds its private subnets (the network policies "
            "admit the API server's addresses in it)",
            id="cidr-outside",
        ),
        pytest.param(
            {"trainium_subnet": {"id": "subnet-0aaaaaaaaaaaaaaa3", "cidr": "10.40.16.0/20"}},
            "vpc.cidr: subnets subnet-0aaaaaaaaaaaaaaa1 (10.40.0.0/19) and subnet-0aaaaaaaaaaaaaaa3 "
            "(10.40.16.0/20) overlap",
            id="overlap",
        ),
        pytest.param(
            {"trainium_subnet": SUBNETS[1]},
            "vpc.trainium_subnet: subnet-0aaaaaaaaaaaaaaa2 is already a private subnet: leave trainium_subnet "
            "out to use it",
            id="trainium-subnet-repeated",
        ),
        pytest.param(
            {"vpc_id": "vpc-xyz"},
            "vpc.vpc_id: 'vpc-xyz' is not a VPC id such as vpc-0123456789abcdef0",
            id="bad-vpc-id",
        ),
        pytest.param(
            {"private_subnets": [SUBNETS[0], {"id": "subnet-12", "cidr": "10.40.32.0/19"}]},
            "vpc.private_subnets[1].id: 'subnet-12' is not a subnet id such as subnet-0123456789abcdef0",
            id="bad-subnet-id",
        ),
    ],
)
def test_a_bad_existing_vpc_is_one_line_naming_the_key(change: dict[str, Any], expected: str) -> None:
    assert problems_of(existing_vpc_data(**change)) == [f"env.yaml: {expected}"]


def test_subnets_belong_to_an_existing_vpc() -> None:
    data = with_change(default_data(), "vpc.private_subnets", SUBNETS)
    assert problems_of(data) == [
        "env.yaml: vpc.private_subnets: belongs to an existing VPC: set vpc.vpc_id, or leave it out for a new VPC"
    ]


@pytest.fixture(scope="module")
def existing() -> Synthesized:
    return synthesize(parse_config(existing_vpc_data()))


def test_the_stack_creates_no_network_in_an_existing_vpc(existing: Synthesized) -> None:
    types = {resource["Type"] for resource in existing.json["Resources"].values()}
    assert types.isdisjoint(NETWORK_TYPES)
    # ... and its own security groups live in that VPC.
    groups = existing.resources("AWS::EC2::SecurityGroup").values()
    assert groups and {group["Properties"]["VpcId"] for group in groups} == {VPC_ID}


def test_everything_goes_into_the_configured_subnets(existing: Synthesized) -> None:
    private = [subnet["id"] for subnet in SUBNETS]
    _, cluster = existing.only("AWS::EKS::Cluster")
    assert cluster["Properties"]["ResourcesVpcConfig"]["SubnetIds"] == private
    nodegroups = {
        resource["Properties"]["NodegroupName"]: resource["Properties"]["Subnets"]
        for resource in existing.resources("AWS::EKS::Nodegroup").values()
    }
    assert nodegroups == {"trainium-system": private, "trn1-32xl": [TRAINIUM_SUBNET["id"]]}
    _, file_system = existing.only("AWS::FSx::FileSystem")
    assert file_system["Properties"]["SubnetIds"] == [TRAINIUM_SUBNET["id"]]
    functions = existing.resources("AWS::Lambda::Function").values()
    in_vpc = [
        function["Properties"]["VpcConfig"] for function in functions if "VpcConfig" in function["Properties"]
    ]
    assert in_vpc and all(config["SubnetIds"] == private for config in in_vpc)


def test_root_keeps_root_only_in_the_system_zones_subnet(existing: Synthesized) -> None:
    (squash,) = existing.resources("Custom::LustreRootSquash").values()
    # Lustre NID ranges: us-west-2a's private subnet (10.40.0.0/19) keeps root; the Trainium zone's
    # private subnet (10.40.32.0/19) and the Trainium subnet are squashed.
    text = str(squash["Properties"])
    assert "10.40.[0-31].[0-255]@tcp" in text and "10.40.[32-63]" not in text and "10.40.[64-127]" not in text
    output = existing.json["Outputs"]["TrainiumSubnetId"]["Value"]
    assert output == TRAINIUM_SUBNET["id"]
