"""Security groups whose egress is exactly the rules the code adds, nothing else.

``ec2.SecurityGroup(allow_all_outbound=False)`` keeps EC2's default allow-all egress whenever the
group's egress rules are separate resources (as rules naming another group, or the group itself,
must be to avoid a dependency cycle): CloudFormation replaces the default rule only when the group
itself lists egress rules. ``restricted_security_group`` lists one rule that matches nothing (the
same placeholder aws-cdk-lib uses), so the default is replaced and only the added rules remain.
"""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

__all__ = ["MATCH_NOTHING_EGRESS", "restricted_security_group"]

# aws-cdk-lib's own "disallow all traffic" placeholder: ICMP type 252, code 86, to 255.255.255.255/32.
MATCH_NOTHING_EGRESS = {
    "CidrIp": "255.255.255.255/32",
    "Description": "Disallow all traffic",
    "FromPort": 252,
    "IpProtocol": "icmp",
    "ToPort": 86,
}


def restricted_security_group(
    scope: Construct, construct_id: str, *, vpc: ec2.IVpc, description: str
) -> ec2.SecurityGroup:
    """A group with no egress but what is added to it with ``add_egress_rule``."""
    group = ec2.SecurityGroup(scope, construct_id, vpc=vpc, description=description, allow_all_outbound=False)
    resource = group.node.default_child
    assert isinstance(resource, ec2.CfnSecurityGroup)
    resource.add_property_override("SecurityGroupEgress", [MATCH_NOTHING_EGRESS])
    return group
