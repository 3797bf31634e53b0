"""IAM roles for nodes and for add-ons (EKS Pod Identity), none of which refers to the cluster.

Keeping the cluster out of these roles keeps them out of its dependency chain: CloudFormation
creates them while the control plane is still coming up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from constructs_trn.nag import acknowledge, aws_managed_policy, nag_rendering

__all__ = [
    "IMAGE_PULL_ACTIONS",
    "POD_IDENTITY_PRINCIPAL",
    "PULL_THROUGH_ACTIONS",
    "node_role",
    "pod_identity_role",
    "pod_identity_trust_conditions",
]


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
    import_repository_arns: Sequence[str] = (),
) -> iam.Role:
    """The EC2 role of one kind of managed node: join the cluster, pull images from named repositories.

    No VPC CNI permissions: the ``vpc-cni`` add-on has its own Pod Identity role, so a pod on the host
    network (or anything else that reaches the node's IMDS) cannot create, attach or delete network
    interfaces. ``pull_repository_arns`` may end in ``/*`` for a registry this role trusts as a whole
    (the EKS image registry of the region, an AWS account). ``import_repository_arns``: the cache
    repositories a first pull may import into and create (the images the stack names).
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
                actions=list(IMAGE_PULL_ACTIONS), resources=list(pull_through_repository_arns)
            )
        )
    if import_repository_arns:
        # A first pull imports from upstream into the cache: only into the repositories of the
        # images the stack names, so a node (or whatever holds its role) cannot fill the cache
        # with an upstream repository of its choosing.
        role.add_to_policy(
            iam.PolicyStatement(actions=list(PULL_THROUGH_ACTIONS), resources=sorted(import_repository_arns))
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


POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def pod_identity_trust_conditions(
    *, cluster_arn: str, namespace: str, service_account: str
) -> dict[str, Any]:
    """The trust policy's conditions: only the Pod Identity association of this cluster's
    ``namespace``/``service_account`` may assume the role.

    EKS Pod Identity sends these session tags with every AssumeRole and documents them as the trust
    policy's condition keys (EKS User Guide, "Create IAM role with trust policy required by EKS Pod
    Identity": eks-cluster-arn, eks-cluster-name, kubernetes-namespace, kubernetes-service-account,
    kubernetes-pod-name, kubernetes-pod-uid). ``aws:SourceAccount`` and ``aws:SourceArn`` are not among
    the keys it documents for ``pods.eks.amazonaws.com``; a condition on a key the request does not
    carry never matches, and would lock the add-on out, so they are not used. Without these
    conditions any Pod Identity association in the account (another cluster's, or one created for
    any service account of this cluster) could be given this role.
    """
    return {
        "StringEquals": {
            "aws:RequestTag/eks-cluster-arn": cluster_arn,
            "aws:RequestTag/kubernetes-namespace": namespace,
            "aws:RequestTag/kubernetes-service-account": service_account,
        }
    }


def pod_identity_role(
    scope: Construct,
    construct_id: str,
    *,
    description: str,
    cluster_name: str,
    namespace: str,
    service_account: str,
    managed_policy_names: Sequence[str] = (),
    statements: Sequence[iam.PolicyStatement] = (),
) -> iam.Role:
    """A role that EKS Pod Identity hands to one add-on's service account (``namespace``/
    ``service_account`` of the cluster ``cluster_name``), and to nothing else."""
    # Built from plain values, not the cluster's token: the role stays out of the cluster's
    # dependency chain (CloudFormation creates it while the control plane comes up).
    stack = Stack.of(scope)
    cluster_arn = f"arn:{stack.partition}:eks:{stack.region}:{stack.account}:cluster/{cluster_name}"
    conditions = pod_identity_trust_conditions(
        cluster_arn=cluster_arn, namespace=namespace, service_account=service_account
    )
    role = iam.Role(
        scope,
        construct_id,
        description=description,
        assumed_by=iam.PrincipalWithConditions(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL), conditions),
        managed_policies=[
            iam.ManagedPolicy.from_aws_managed_policy_name(name) for name in managed_policy_names
        ],
    )
    # Pod Identity passes session tags; the trust policy must allow them (on the same conditions).
    role.assume_role_policy.add_statements(  # type: ignore[union-attr]
        iam.PolicyStatement(
            actions=["sts:TagSession"],
            principals=[iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)],
            conditions=conditions,
        )
    )
    for statement in statements:
        role.add_to_policy(statement)
    return role
