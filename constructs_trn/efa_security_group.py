"""The security group that lets EFA traffic flow between the Trainium nodes of one cluster."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from constructs_trn.security_groups import restricted_security_group

__all__ = ["EfaSecurityGroup"]


class EfaSecurityGroup(Construct):
    """All traffic to and from itself, in both directions.

    EFA's OS-bypass traffic is only admitted by rules that name the group itself: an allow-all
    egress to 0.0.0.0/0 does not cover it, so the egress self rule is explicit. Other egress
    (image pulls, the API server) comes from the cluster security group on the same interfaces.
    """

    def __init__(self, scope: Construct, construct_id: str, *, vpc: ec2.IVpc, name: str) -> None:
        super().__init__(scope, construct_id)
        self.security_group = restricted_security_group(
            self, "SecurityGroup", vpc=vpc, description=f"{name}: EFA traffic between Trainium nodes"
        )
        self.security_group.add_ingress_rule(
            self.security_group, ec2.Port.all_traffic(), "EFA from Trainium nodes"
        )
        self.security_group.add_egress_rule(
            self.security_group, ec2.Port.all_traffic(), "EFA to Trainium nodes"
        )
