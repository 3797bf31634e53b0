"""The cluster autoscaler's AWS identity: a least-privilege role, handed to its pod by EKS Pod Identity.

The actions are those the autoscaler's AWS provider documents for auto-discovery with the dynamic
instance list (cluster-autoscaler/cloudprovider/aws/README.md, "Full Cluster Autoscaler Features
Policy"), narrowed where the API allows:

- reads (Describe*, GetInstanceTypesFromInstanceRequirements) have no resource-level permissions: ``*``;
- ``eks:DescribeNodegroup`` (labels and taints of a group at zero): this cluster's node groups only;
- the two writes, ``SetDesiredCapacity`` and ``TerminateInstanceInAutoScalingGroup``, only on Auto
  Scaling groups tagged as this cluster's (EKS tags them ``k8s.io/cluster-autoscaler/<cluster>: owned``)
  and as Trainium groups (the stack's node-template tag): the system node group is out of reach.

The role refers to the cluster by name (configuration), not to the cluster resource, so CloudFormation
creates it while the control plane comes up; only the Pod Identity association waits for the cluster.
"""

from __future__ import annotations

from aws_cdk import Aws
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cluster_facts.autoscaling import AUTOSCALER_NAME, AUTOSCALER_NAMESPACE, TRAINIUM_DISCOVERY_TAG, owner_tag
from constructs_trn.iam_roles import pod_identity_role
from constructs_trn.nag import acknowledge

__all__ = ["READ_ACTIONS", "WRITE_ACTIONS", "ClusterAutoscalerAccess"]

READ_ACTIONS = (
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeAutoScalingInstances",
    "autoscaling:DescribeLaunchConfigurations",
    "autoscaling:DescribeScalingActivities",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:GetInstanceTypesFromInstanceRequirements",
)
WRITE_ACTIONS = ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup")


class ClusterAutoscalerAccess(Construct):
    """The autoscaler's role and the Pod Identity association of its ServiceAccount."""

    def __init__(
        self, scope: Construct, construct_id: str, *, cluster: eks.ICluster, cluster_name: str
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = pod_identity_role(
            self,
            "Role",
            description=f"Cluster autoscaler of {cluster_name}: scales its Trainium node groups",
            cluster_name=cluster_name,
            namespace=AUTOSCALER_NAMESPACE,
            service_account=AUTOSCALER_NAME,
            statements=[
                iam.PolicyStatement(actions=list(READ_ACTIONS), resources=["*"]),
                iam.PolicyStatement(
                    actions=["eks:DescribeNodegroup"],
                    resources=[
                        f"arn:{Aws.PARTITION}:eks:{Aws.REGION}:{Aws.ACCOUNT_ID}:nodegroup/{cluster_name}/*/*"
                    ],
                ),
                iam.PolicyStatement(
                    actions=list(WRITE_ACTIONS),
                    resources=[
                        (
                            f"arn:{Aws.PARTITION}:autoscaling:{Aws.REGION}:{Aws.ACCOUNT_ID}:autoScalingGroup:*:"
                            "autoScalingGroupName/*"
                        )
                    ],
                    conditions={
                        "StringEquals": {f"aws:ResourceTag/{owner_tag(cluster_name)}": "owned"},
                        "Null": {f"aws:ResourceTag/{TRAINIUM_DISCOVERY_TAG}": "false"},
                    },
                ),
            ],
        )
        acknowledge(
            self.role,
            "IAM5[Resource::*]",
            reason="the autoscaler's Describe calls and GetInstanceTypesFromInstanceRequirements support no "
            "resource-level permissions; they read, and its writes are limited to this cluster's Trainium groups",
        )
        acknowledge(
            self.role,
            f"IAM5[Resource::arn:<AWS::Partition>:eks:<AWS::Region>:<AWS::AccountId>:nodegroup/{cluster_name}/*/*]",
            reason="eks:DescribeNodegroup on the node groups of this one cluster (read-only); their ARNs end "
            "in ids EKS assigns",
        )
        acknowledge(
            self.role,
            "IAM5[Resource::arn:<AWS::Partition>:autoscaling:<AWS::Region>:<AWS::AccountId>:autoScalingGroup:*:"
            "autoScalingGroupName/*]",
            reason="EKS names the Auto Scaling groups with uuids unknown at synth; the writes are conditioned "
            "on the cluster's owned tag and the Trainium node-template tag, so only this cluster's "
            "Trainium groups can be resized",
        )
        self.association = eks_l1.CfnPodIdentityAssociation(
            self,
            "PodIdentity",
            cluster_name=cluster.cluster_name,
            namespace=AUTOSCALER_NAMESPACE,
            service_account=AUTOSCALER_NAME,
            role_arn=self.role.role_arn,
        )
