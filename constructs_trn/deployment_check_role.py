"""Read-only access for the pipeline's post-deployment check, which runs in the tooling account.

The check (``stacks/pipeline_stack.py``) is a CodeBuild project of the pipeline; it reaches a
stage's cluster by assuming the role made here, in the stage's account. The role trusts exactly one
principal, the pipeline's check role in the tooling account, and may only:

- describe this cluster and its Trainium node groups (EKS API, by ARN),
- describe EC2 instances (to count each Trainium node's EFA interfaces) and Auto Scaling groups (the
  autoscaler's node-template tags of each Trainium group); neither action has resource-level
  permissions,
- get and list Kubernetes nodes and read the cluster autoscaler's Deployment and status, through an
  access entry in the Kubernetes group
  ``DEPLOYMENT_CHECK_GROUP``, which ``rbac_manifests`` (k8s_charts/checks/deployment_check_rbac.py, rendered
  by the stack) bind to a ClusterRole with just that; with the pipeline's fabric check, also
  create the rendered fabric-check Volcano Jobs (an admission policy in the same manifests refuses
  any other Job from that group) and read and delete them.

Opt-in: TrainiumStack builds it only when given ``deployment_check`` (the pipeline's stages do).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aws_cdk import Aws, CfnResource
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cluster_facts.deploy_timeouts import KUBECTL_HANDLER_SERVICE_TIMEOUT
from cluster_facts.kubernetes_names import DEPLOYMENT_CHECK_GROUP
from constructs_trn.nag import acknowledge

__all__ = ["DeploymentCheckAccess", "DeploymentCheckTrust", "deployment_check_role_name"]

_IAM_ROLE_NAME_LIMIT = 64


@dataclass(frozen=True)
class DeploymentCheckTrust:
    """The one principal that may assume the check role: a role of the pipeline's tooling account."""

    account: str
    role_name: str

    def role_arn(self, partition: str = Aws.PARTITION) -> str:
        return f"arn:{partition}:iam::{self.account}:role/{self.role_name}"


def deployment_check_role_name(cluster_name: str, region: str) -> str:
    """The check role's name in a stage's account: IAM names are per account, so the region is part of it."""
    name = f"{cluster_name}-{region}-deploy-check"
    if len(name) > _IAM_ROLE_NAME_LIMIT:
        raise ValueError(
            f"deployment check role name {name!r} is longer than {_IAM_ROLE_NAME_LIMIT} characters"
        )
    return name


class DeploymentCheckAccess(Construct):
    """An IAM role in the stage's account, its EKS access entry and the Kubernetes RBAC it is bound to."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        role_name: str,
        trust: DeploymentCheckTrust,
        node_groups: Sequence[eks.Nodegroup],
        rbac_manifests: Sequence[Mapping[str, Any]],
    ) -> None:
        super().__init__(scope, construct_id)
        # Trusting the account under a condition on the caller's ARN (not the role ARN as principal)
        # keeps working if the pipeline's role is deleted and created again.
        self.role = iam.Role(
            self,
            "Role",
            role_name=role_name,
            description="Read-only post-deployment check of the TrainiumPipeline (assumed from the tooling account)",
            assumed_by=iam.AccountPrincipal(trust.account).with_conditions(
                {"ArnEquals": {"aws:PrincipalArn": trust.role_arn()}}
            ),
        )
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[cluster.cluster_arn])
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["eks:DescribeNodegroup"], resources=[group.nodegroup_arn for group in node_groups]
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["ec2:DescribeInstances", "autoscaling:DescribeAutoScalingGroups"], resources=["*"]
            )
        )
        acknowledge(
            self.role,
            "IAM5[Resource::*]",
            reason=(
                "ec2:DescribeInstances and autoscaling:DescribeAutoScalingGroups support no resource-level "
                "permissions; the check reads the EFA interfaces of the Trainium instances and the "
                "autoscaler's tags of their Auto Scaling groups with them, and nothing else"
            ),
        )

        self.access_entry = eks_l1.CfnAccessEntry(
            self,
            "AccessEntry",
            cluster_name=cluster.cluster_name,
            principal_arn=self.role.role_arn,
            type="STANDARD",
            kubernetes_groups=[DEPLOYMENT_CHECK_GROUP],
        )
        # The id is part of the deployed stack's logical id: keep it, or a deployment would create
        # the new resource and then delete the old one, and with it the ClusterRole and binding.
        self.rbac = cluster.add_manifest(
            "DeploymentCheckNodeReader", *(dict(manifest) for manifest in rbac_manifests)
        )
        # One kubectl apply: CloudFormation waits no longer than the kubectl handler can run.
        rbac_resource = self.rbac.node.default_child
        assert isinstance(rbac_resource, CfnResource)
        rbac_resource.add_property_override("ServiceTimeout", KUBECTL_HANDLER_SERVICE_TIMEOUT)
