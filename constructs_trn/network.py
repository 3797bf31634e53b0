"""The VPC: public subnets for load balancers and NAT, private subnets for every node; or an existing
VPC's private subnets, imported offline (``ExistingNetwork``), of which the stack changes nothing."""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Annotations, CfnResource, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from cluster_facts.deploy_timeouts import CUSTOM_RESOURCE_PROVIDER_SERVICE_TIMEOUT

__all__ = ["ExistingNetwork", "SubnetAttributes", "TrainingNetwork"]


class TrainingNetwork(Construct):
    """A VPC over the configured zones, with flow logs and the subnet tags EKS load balancers look for.

    Zones are given by name, never looked up, so the VPC synthesizes offline; the stack seeds
    its availability-zones context with the same names.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cidr: str,
        availability_zones: Sequence[str],
        trainium_availability_zone: str,
        nat_gateways: int,
        flow_log_retention: logs.RetentionDays,
    ) -> None:
        super().__init__(scope, construct_id)
        private_mask, public_mask = _subnet_masks(cidr, len(availability_zones))

        flow_log_group = logs.LogGroup(self, "FlowLogs", retention=flow_log_retention)
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(cidr),
            availability_zones=list(availability_zones),
            nat_gateways=nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=public_mask
                ),
                ec2.SubnetConfiguration(
                    name="Private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=private_mask
                ),
            ],
            flow_logs={
                "All": ec2.FlowLogOptions(
                    destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
                    traffic_type=ec2.FlowLogTrafficType.ALL,
                )
            },
        )
        # ec2.Vpc's custom resource that strips the default security group's rules: its function has
        # 15 minutes (a core CustomResourceProvider's default), CloudFormation waits no longer than that.
        restrict = self.vpc.node.find_child("RestrictDefaultSecurityGroupCustomResource").node.default_child
        assert isinstance(restrict, CfnResource)
        restrict.add_property_override("ServiceTimeout", CUSTOM_RESOURCE_PROVIDER_SERVICE_TIMEOUT)
        # The AWS Load Balancer Controller picks subnets by these tags.
        for subnet in self.vpc.public_subnets:
            Tags.of(subnet).add("kubernetes.io/role/elb", "1")
        for subnet in self.vpc.private_subnets:
            Tags.of(subnet).add("kubernetes.io/role/internal-elb", "1")

        self.private_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        # Every Trainium node of a job and the file system share this one subnet: EFA does not
        # cross zones, and Lustre traffic across zones is slower and billed.
        self.trainium_subnet: ec2.ISubnet = self.vpc.select_subnets(
            subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=[trainium_availability_zone]
        ).subnets[0]

    def private_subnet_cidrs(self, zones: Sequence[str]) -> list[str]:
        """The CIDRs of the private subnets in ``zones``."""
        selected = self.vpc.select_subnets(
            subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, availability_zones=list(zones)
        )
        return [subnet.ipv4_cidr_block for subnet in selected.subnets]


@dataclass(frozen=True)
class SubnetAttributes:
    subnet_id: str
    availability_zone: str
    cidr: str


class ExistingNetwork(Construct):
    """An existing VPC's private subnets, imported from the configuration: no lookup, no resource.

    ``ec2.Vpc.from_vpc_attributes`` and ``ec2.Subnet.from_subnet_attributes`` build references from
    the given ids, zones and CIDRs offline (``make preflight`` checks them against the account: the
    zones, a route to a NAT gateway or the endpoints the nodes need, free addresses and the load
    balancer tags; docs/existing-vpc.md). Nothing of the VPC is created, changed or tagged here.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc_id: str,
        cidr: str,
        private_subnets: Sequence[SubnetAttributes],
        trainium_subnet: SubnetAttributes | None,
        trainium_availability_zone: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=vpc_id,
            vpc_cidr_block=cidr,
            availability_zones=[subnet.availability_zone for subnet in private_subnets],
            private_subnet_ids=[subnet.subnet_id for subnet in private_subnets],
            private_subnet_ipv4_cidr_blocks=[subnet.cidr for subnet in private_subnets],
        )
        self._subnets = {subnet.subnet_id: subnet for subnet in private_subnets}
        self.private_subnets = ec2.SubnetSelection(subnets=list(self.vpc.private_subnets))
        if trainium_subnet is None:
            self.trainium_subnet: ec2.ISubnet = next(
                subnet
                for subnet in self.vpc.private_subnets
                if subnet.availability_zone == trainium_availability_zone
            )
        else:
            self.trainium_subnet = ec2.Subnet.from_subnet_attributes(
                self,
                "TrainiumSubnet",
                subnet_id=trainium_subnet.subnet_id,
                availability_zone=trainium_subnet.availability_zone,
                ipv4_cidr_block=trainium_subnet.cidr,
            )

        # The stack routes nothing: the existing route tables are the VPC owner's (preflight checks a
        # route to a NAT gateway or the endpoints), so no route table id is needed here.
        Annotations.of(self).acknowledge_warning(
            "@aws-cdk/aws-ec2:noSubnetRouteTableId",
            "the stack adds no route to an existing VPC; its route tables are its owner's",
        )

    def private_subnet_cidrs(self, zones: Sequence[str]) -> list[str]:
        """The CIDRs of the private subnets in ``zones``, as configured."""
        return [subnet.cidr for subnet in self._subnets.values() if subnet.availability_zone in zones]


def _subnet_masks(cidr: str, zones: int) -> tuple[int, int]:
    """Private subnets take half the VPC (nodes and pods need the addresses), public ones a sliver."""
    prefix = ipaddress.IPv4Network(cidr).prefixlen
    private_mask = prefix + 1 + math.ceil(math.log2(zones))
    public_mask = min(private_mask + 4, 28)
    return private_mask, public_mask
