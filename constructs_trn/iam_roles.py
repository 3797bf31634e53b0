"""IAM roles for nodes and for add-ons (EKS Pod Identity), none of which refers to the cluster.

Keeping the cluster out of these roles keeps them out of its dependency chain: CloudFormation
creates them while the control plane is still coming up.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from constructs_trn.nag import acknowledge, aws_managed_policy, nag_rendering

__all__ = ["IMAGE_PULL_ACTIONS", "PULL_THROUGH_ACTIONS", "node_role", "pod_identity_role"]


# The one policy EKS requires on every managed-node role: the kubelet's EC2 and EKS calls to join and
# describe the cluster, and eks-auth:AssumeRoleForPodIdentity for the Pod Identity agent. AWS revises
# it with each EKS release, which a copied inline policy would silently miss.
_WORKER_NODE_POLICY = "AmazonEKSWorkerNodePolicy"
# What the kubelet's ECR credential provider needs to pull an image, and no more: no push, no
# repository changes, no listing (AmazonEC2ContainerRegistryPullOnly grants the same on every
# repository of every account; here they name the repositories).
IMAGE_PULL_ACTIONS = ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")
# A first pull through a pull-through cache rule imports the upstream image, and creates the cached
# repository (from the rule's repository creation template) when it does not exist yet.
PULL_THROUGH_ACTIONS = ("ecr:BatchImportUpstreamImage", "ecr:CreateRepository")


def node_role(
    scope: Construct,
    construct_id: str,
    *,
    description: str,
    pull_repository_arns: Sequence[str],
    pull_through_repository_arns: Sequence[str] = (),
) -> iam.Role:
    """The EC2 role of one kind of managed node: join the cluster, pull images from named repositories.

    No VPC CNI permissions: the ``vpc-cni`` add-on has its own Pod Identity role, so a pod on the host
    network (or anything else that reaches the node's IMDS) cannot create, attach or delete network
    interfaces. ``pull_repository_arns`` may end in ``/*`` for a registry this role trusts as a whole
    (the EKS image registry of the region, an AWS account).
    """
    role = iam.Role(
        scope,
        construct_id,
        description=description,
        assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(_WORKER_NODE_POLICY)],
    )
    acknowledge(
        role,
        aws_managed_policy(_WORKER_NODE_POLICY),
        reason="EKS requires this AWS managed policy on managed-node roles for the kubelet's EC2 and EKS "
        "calls and the Pod Identity agent; AWS updates it with each EKS release",
    )
    # ecr:GetAuthorizationToken has no resource-level permissions: it yields a registry login token,
    # and what that token may pull is decided by the statements below, per repository.
    role.add_to_policy(iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]))
    role.add_to_policy(
        iam.PolicyStatement(actions=list(IMAGE_PULL_ACTIONS), resources=list(pull_repository_arns))
    )
    if pull_through_repository_arns:
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[*IMAGE_PULL_ACTIONS, *PULL_THROUGH_ACTIONS],
                resources=list(pull_through_repository_arns),
            )
        )
    acknowledge(
        role,
        "IAM5[Resource::*]",
        reason="ecr:GetAuthorizationToken is the only action on *; it has no resource-level permissions, "
        "and the pull actions are granted per repository",
    )
    for arn in (*pull_repository_arns, *pull_through_repository_arns):
        if arn.endswith("/*"):
            acknowledge(
                role,
                f"IAM5[Resource::{nag_rendering(Stack.of(role), arn)}]",
                reason="pull-only access to one registry's repositories under one prefix (the EKS image "
                "registry of the region, whose add-on repositories EKS names, or the account's pull-through "
                "cache); no push and no other repository",
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
