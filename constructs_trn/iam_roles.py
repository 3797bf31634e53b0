"""IAM roles for nodes and for add-ons (EKS Pod Identity), none of which refers to the cluster.

Keeping the cluster out of these roles keeps them out of its dependency chain: CloudFormation
creates them while the control plane is still coming up.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_iam as iam
from constructs import Construct

from constructs_trn.nag import acknowledge, aws_managed_policy

__all__ = ["node_role", "pod_identity_role"]


# The policies EKS documents for managed node groups. AWS revises them with each EKS release
# (new CNI and kubelet calls), which a copied inline policy would silently miss.
_NODE_POLICIES = {
    "AmazonEKSWorkerNodePolicy": "the kubelet's EC2 and EKS calls to join and describe the cluster",
    "AmazonEKS_CNI_Policy": "the VPC CNI's ENI and IP calls, including the EFA interfaces",
    # Pull-only: nodes never push images or change repositories.
    "AmazonEC2ContainerRegistryPullOnly": "image pulls from ECR, with no push or repository changes",
}


def node_role(scope: Construct, construct_id: str) -> iam.Role:
    """The EC2 role of every managed node: join the cluster, run the VPC CNI, pull images."""
    role = iam.Role(
        scope,
        construct_id,
        assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(name) for name in _NODE_POLICIES],
    )
    for name, purpose in _NODE_POLICIES.items():
        acknowledge(
            role,
            aws_managed_policy(name),
            reason=f"EKS requires this AWS managed policy on managed-node roles for {purpose}; "
            "AWS updates it with each EKS release",
        )
    return role


def pod_identity_role(
    scope: Construct,
    construct_id: str,
    *,
    description: str,
    managed_policy_names: Sequence[str] = (),
    statements: Sequence[iam.PolicyStatement] = (),
) -> iam.Role:
    """A role that EKS Pod Identity hands to one add-on's service account."""
    role = iam.Role(
        scope,
        construct_id,
        description=description,
        assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com"),
        managed_policies=[
            iam.ManagedPolicy.from_aws_managed_policy_name(name) for name in managed_policy_names
        ],
    )
    # Pod Identity passes session tags; the trust policy must allow them.
    role.assume_role_policy.add_statements(  # type: ignore[union-attr]
        iam.PolicyStatement(
            actions=["sts:TagSession"], principals=[iam.ServicePrincipal("pods.eks.amazonaws.com")]
        )
    )
    for statement in statements:
        role.add_to_policy(statement)
    return role
