"""The node check's AWS identity: it may mark an instance of this cluster's Trainium groups Unhealthy.

The node check (k8s_charts/node_check.py) replaces a Trainium node that failed it by marking the
node's instance ``Unhealthy`` in its Auto Scaling group (``autoscaling:SetInstanceHealth``); EC2 Auto
Scaling then terminates the instance and launches a replacement ("Health checks for instances in an
Auto Scaling group": an instance marked unhealthy is replaced). The Neuron node problem detector's
recovery does the same (aws-neuron/neuron-helm-charts, ``npd.nodeRecovery``).

One action, on Auto Scaling groups that carry this cluster's owned tag and the Trainium
node-template tag the stack writes (the cluster autoscaler's write permission is scoped the same
way), through Pod Identity to the ServiceAccount ``kube-system/node-check`` only.
"""

from __future__ import annotations

from aws_cdk import Aws
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cluster_facts.autoscaling import TRAINIUM_DISCOVERY_TAG, owner_tag
from cluster_facts.node_check import NODE_CHECK_NAME, NODE_CHECK_NAMESPACE
from constructs_trn.iam_roles import pod_identity_role
from constructs_trn.nag import acknowledge

__all__ = ["REPAIR_ACTION", "NodeCheckAccess"]

REPAIR_ACTION = "autoscaling:SetInstanceHealth"


class NodeCheckAccess(Construct):
    """The node check's role and the Pod Identity association of its ServiceAccount."""

    def __init__(
        self, scope: Construct, construct_id: str, *, cluster: eks.ICluster, cluster_name: str
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = pod_identity_role(
            self,
            "Role",
            description=f"Node check of {cluster_name}: replaces a Trainium node that failed it",
            cluster_name=cluster_name,
            namespace=NODE_CHECK_NAMESPACE,
            service_account=NODE_CHECK_NAME,
            statements=[
                iam.PolicyStatement(
                    actions=[REPAIR_ACTION],
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
                )
            ],
        )
        acknowledge(
            self.role,
            "IAM5[Resource::arn:<AWS::Partition>:autoscaling:<AWS::Region>:<AWS::AccountId>:autoScalingGroup:*:"
            "autoScalingGroupName/*]",
            reason="EKS names the Auto Scaling groups with uuids unknown at synth; the one action is conditioned "
            "on the cluster's owned tag and the Trainium node-template tag, so only this cluster's Trainium "
            "instances can be marked unhealthy",
        )
        self.association = eks_l1.CfnPodIdentityAssociation(
            self,
            "PodIdentity",
            cluster_name=cluster.cluster_name,
            namespace=NODE_CHECK_NAMESPACE,
            service_account=NODE_CHECK_NAME,
            role_arn=self.role.role_arn,
        )
