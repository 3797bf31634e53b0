"""EKS access entries for team members: each IAM role maps to its teams' Kubernetes groups, nothing more.

An access entry with Kubernetes groups and no access policy grants exactly what RBAC in the cluster
grants those groups: the Role each team namespace binds to its group (k8s_charts/teams/namespaces.py).
No EKS access policy is attached, so a member holds no cluster-wide right and nothing outside the
team's namespace. The entries are STANDARD entries of roles in the stack's account (the
configuration checks both that and that no member is also an administrator: EKS keeps one entry
per principal and cluster).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

__all__ = ["TeamAccess"]


class TeamAccess(Construct):
    """One ``AWS::EKS::AccessEntry`` per member role, carrying the groups of every team it belongs to."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        groups_by_role_arn: Mapping[str, Sequence[str]],
    ) -> None:
        super().__init__(scope, construct_id)
        self.entries: dict[str, eks_l1.CfnAccessEntry] = {}
        for role_arn, groups in sorted(groups_by_role_arn.items()):
            # The construct id comes from the ARN, not from a position in a list: adding or removing
            # a member never renames (so never replaces, briefly locking out) another member's entry.
            self.entries[role_arn] = eks_l1.CfnAccessEntry(
                self,
                role_arn.split(":", 5)[5].replace("/", "-"),
                cluster_name=cluster.cluster_name,
                principal_arn=role_arn,
                kubernetes_groups=sorted(set(groups)),
                type="STANDARD",
            )
