"""The checks of an existing VPC (``vpc.vpc_id``): pure functions of the configuration and the facts.

One row for the VPC, one per named subnet (it exists in the VPC, in the zone and with the CIDR the
file says, and carries the load balancers' tag), one for the way out (a route to a NAT gateway, or
the VPC endpoints the nodes need), and one for the Trainium subnet's free addresses.
"""

from __future__ import annotations

import ipaddress

from config.model import StackConfig
from preflight.checks import CheckResult
from preflight.facts import AccountFacts, NetworkFacts, SubnetFacts, Unavailable

__all__ = ["ENDPOINT_SERVICES", "INTERNAL_ELB_TAG", "check_network", "trainium_addresses"]

INTERNAL_ELB_TAG = "kubernetes.io/role/internal-elb"
"""The tag by which the AWS Load Balancer Controller (and EKS's in-tree provider) picks private
subnets for internal load balancers (EKS User Guide, "View Amazon EKS networking requirements for
VPC and subnets": ``kubernetes.io/role/internal-elb`` = 1). The stack creates no load balancer and
tags nothing of an existing VPC: a subnet without it is a WARN."""

ENDPOINT_SERVICES = (
    "ecr.api",
    "ecr.dkr",
    "s3",
    "ec2",
    "sts",
    "eks",
    "eks-auth",
    "autoscaling",
    "logs",
    "monitoring",
    "fsx",
)
"""The VPC endpoints nodes without a NAT route need: images (ECR, S3 for their layers), joining
(EC2, EKS, STS), Pod Identity (eks-auth), the cluster autoscaler and the node check (Auto Scaling),
Container Insights (CloudWatch Logs and metrics) and the FSx CSI driver (EKS User Guide, "Deploy
private clusters with limited internet access", plus the services this cluster's add-ons call).
Data sets and scripts from outside AWS still need a NAT."""

_EGRESS_PREFIXES = ("nat-", "tgw-", "eni-", "i-")
"""Default-route targets that carry private traffic out (a NAT gateway, a transit gateway or an
appliance); ``igw-`` is a public subnet's route, which private nodes without addresses cannot use."""


def trainium_addresses(config: StackConfig) -> int:
    """Addresses the Trainium subnet must hold free for every Trainium group at max_size.

    Each node's first network interface (its card-0 EFA interface) takes the node's address, and
    the VPC CNI fills that interface with secondary addresses for pods (WARM_ENI_TARGET 1, its
    default): the instance type's IPv4 addresses per interface (cluster_facts/instance_catalog.py).
    The other EFA interfaces are efa-only and take none.
    """
    return sum(
        group.max_size * group.instance.ipv4_addresses_per_eni for group in config.trainium.node_groups
    )


def check_network(config: StackConfig, facts: AccountFacts) -> list[CheckResult]:
    """The existing VPC's rows; none when the configuration creates its own VPC."""
    if not config.vpc.existing:
        return []
    network = facts.network
    if network is None or isinstance(network, Unavailable):
        reason = network.reason if isinstance(network, Unavailable) else "not read"
        call = network.call if isinstance(network, Unavailable) else "ec2:DescribeVpcs"
        return [
            CheckResult(
                "vpc",
                "FAIL",
                f"could not read VPC {config.vpc.vpc_id}: {reason}",
                f"allow {call} (and ec2:DescribeSubnets, DescribeRouteTables, DescribeVpcEndpoints) for these credentials",
            )
        ]
    rows = [_check_vpc(config, network)]
    if network.vpc_cidrs is None:
        return rows
    rows += [_check_subnet(config, network, subnet_id, zone) for subnet_id, zone in _named(config)]
    rows.append(_check_egress(config, network))
    rows.append(_check_addresses(config, network))
    return rows


def _named(config: StackConfig) -> list[tuple[str, str]]:
    """(subnet id, the zone the file puts it in)."""
    vpc = config.vpc
    named = list(zip([s.id for s in vpc.private_subnets or []], vpc.availability_zones, strict=True))
    if vpc.trainium_subnet is not None:
        named.append((vpc.trainium_subnet.id, config.trainium.availability_zone))
    return named


def _configured_cidr(config: StackConfig, subnet_id: str) -> str:
    vpc = config.vpc
    subnets = [*(vpc.private_subnets or []), *([vpc.trainium_subnet] if vpc.trainium_subnet else [])]
    return next(subnet.cidr for subnet in subnets if subnet.id == subnet_id)


def _check_vpc(config: StackConfig, network: NetworkFacts) -> CheckResult:
    vpc_id = config.vpc.vpc_id
    if network.vpc_cidrs is None:
        return CheckResult(
            "vpc",
            "FAIL",
            f"VPC {vpc_id} does not exist in account {config.account}, {config.region}",
            "set vpc.vpc_id to a VPC of this account and region (aws ec2 describe-vpcs)",
        )
    if config.vpc.cidr not in network.vpc_cidrs:
        return CheckResult(
            "vpc",
            "FAIL",
            f"VPC {vpc_id} has CIDR {', '.join(network.vpc_cidrs)}, the file says {config.vpc.cidr}",
            f"set vpc.cidr to the VPC's CIDR that holds the private subnets ({', '.join(network.vpc_cidrs)})",
        )
    return CheckResult(
        "vpc", "PASS", f"existing VPC {vpc_id} ({config.vpc.cidr}); the stack creates no network"
    )


def _check_subnet(config: StackConfig, network: NetworkFacts, subnet_id: str, zone: str) -> CheckResult:
    check = f"subnet {subnet_id}"
    subnet = network.subnets.get(subnet_id)
    if subnet is None:
        return CheckResult(
            check, "FAIL", f"no subnet {subnet_id} in {config.region}", "name a subnet of the VPC"
        )
    problems = _subnet_problems(config, subnet, zone)
    if problems:
        return CheckResult(
            check, "FAIL", "; ".join(problems), "fix vpc.private_subnets / vpc.trainium_subnet"
        )
    if subnet.tags.get(INTERNAL_ELB_TAG) != "1":
        return CheckResult(
            check,
            "WARN",
            f"{zone}, {subnet.cidr}, {subnet.available_addresses} addresses free; no tag {INTERNAL_ELB_TAG}=1: "
            "internal load balancers will not find it (the stack creates none and tags nothing of the VPC)",
            f"ask the VPC's owner to tag it {INTERNAL_ELB_TAG}=1 if you will run load balancers",
        )
    return CheckResult(check, "PASS", f"{zone}, {subnet.cidr}, {subnet.available_addresses} addresses free")


def _subnet_problems(config: StackConfig, subnet: SubnetFacts, zone: str) -> list[str]:
    problems = []
    if subnet.vpc_id != config.vpc.vpc_id:
        problems.append(f"it is in {subnet.vpc_id}, not {config.vpc.vpc_id}")
    if subnet.zone_name != zone:
        problems.append(f"it is in {subnet.zone_name} ({subnet.zone_id}), the file puts it in {zone}")
    configured = _configured_cidr(config, subnet.subnet_id)
    if ipaddress.IPv4Network(subnet.cidr) != ipaddress.IPv4Network(configured):
        problems.append(f"its CIDR is {subnet.cidr}, the file says {configured}")
    if subnet.default_route is not None and subnet.default_route.startswith("igw-"):
        problems.append(
            f"it routes 0.0.0.0/0 to internet gateway {subnet.default_route}: a public subnet, where nodes "
            "without public addresses reach nothing; name a private subnet"
        )
    return problems


def _check_egress(config: StackConfig, network: NetworkFacts) -> CheckResult:
    """Every named subnet reaches out through a NAT (or a transit gateway or appliance), or the VPC
    has every endpoint the nodes need."""
    subnets = [network.subnets.get(subnet_id) for subnet_id, _ in _named(config)]
    without = [s.subnet_id for s in subnets if s is not None and not _routes_out(s)]
    if not without:
        targets = sorted({str(s.default_route) for s in subnets if s is not None})
        return CheckResult(
            "egress", "PASS", f"0.0.0.0/0 through {', '.join(targets)} from every named subnet"
        )
    prefix = f"com.amazonaws.{config.region}."
    services = {name.removeprefix(prefix) for name in network.endpoints}
    missing = [service for service in ENDPOINT_SERVICES if service not in services]
    if missing:
        return CheckResult(
            "egress",
            "FAIL",
            f"{', '.join(without)} route(s) 0.0.0.0/0 to no NAT gateway, and the VPC has no endpoint for "
            f"{', '.join(missing)}: nodes could not pull images, join or scale",
            f"route them through a NAT gateway, or add the VPC endpoints com.amazonaws.{config.region}.<service> "
            f"for {', '.join(missing)}",
        )
    return CheckResult(
        "egress",
        "WARN",
        f"{', '.join(without)} have no route out, but the VPC has every endpoint the nodes need: data sets, "
        "scripts and images from outside AWS cannot be fetched",
        "stage data from S3 (s3:// sources) or add a NAT route",
    )


def _routes_out(subnet: SubnetFacts) -> bool:
    return subnet.default_route is not None and subnet.default_route.startswith(_EGRESS_PREFIXES)


def _check_addresses(config: StackConfig, network: NetworkFacts) -> CheckResult:
    vpc = config.vpc
    zone = config.trainium.availability_zone
    subnet_id = (
        vpc.trainium_subnet.id
        if vpc.trainium_subnet is not None
        else next(subnet_id for subnet_id, named_zone in _named(config) if named_zone == zone)
    )
    subnet = network.subnets.get(subnet_id)
    if subnet is None:
        return CheckResult("addresses", "FAIL", f"no subnet {subnet_id}: its free addresses are unknown")
    need = trainium_addresses(config)
    groups = ", ".join(
        f"{g.max_size} x {g.instance_type} x {g.instance.ipv4_addresses_per_eni}"
        for g in config.trainium.node_groups
    )
    detail = f"{subnet_id} has {subnet.available_addresses} free; every Trainium group at max_size takes {need} ({groups})"
    if subnet.available_addresses < need:
        return CheckResult(
            "addresses",
            "FAIL",
            detail,
            "give vpc.trainium_subnet a larger subnet in the Trainium zone, or lower max_size",
        )
    return CheckResult("addresses", "PASS", detail)
