"""The node check's AWS identity: it may mark an instance of this cluster's Trainium groups Unhealthy,
and stop a group's launches.

The node check (k8s_charts/checks/node_check.py) replaces a Trainium node that failed it by marking the
node's instance ``Unhealthy`` in its Auto Scaling group (``autoscaling:SetInstanceHealth``); EC2 Auto
Scaling then terminates the instance and launches a replacement ("Health checks for instances in an
Auto Scaling group": an instance marked unhealthy is replaced). The Neuron node problem detector's
recovery does the same (aws-neuron/neuron-helm-charts, ``npd.nodeRecovery``). When a node launched
after a replacement fails the same way, the check suspends the group's ``Launch`` process
(``autoscaling:SuspendProcesses``), finding the group of the instance first
(``autoscaling:DescribeAutoScalingInstances``).

The two writes act on Auto Scaling groups that carry this cluster's owned tag and the Trainium
node-template tag the stack writes (the cluster autoscaler's write permission is scoped the same
way); the read supports no resource or tag condition (Service Authorization Reference, Amazon EC2
Auto Scaling: ``DescribeAutoScalingInstances`` has no resource type) and returns only instance ids,
group names and states. Through Pod Identity to the ServiceAccount ``kube-system/node-check`` only.
"""

from __future__ import annotations

from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cluster_facts.node_check import NODE_CHECK_NAME, NODE_CHECK_NAMESPACE
from constructs_trn.iam_roles import TRAINIUM_GROUPS_FINDING, pod_identity_role, trainium_groups_statement
from constructs_trn.nag import acknowledge

__all__ = ["FIND_GROUP_ACTION", "REPAIR_ACTION", "STOP_ACTION", "NodeCheckAccess"]

REPAIR_ACTION = "autoscaling:SetInstanceHealth"
STOP_ACTION = "autoscaling:SuspendProcesses"
FIND_GROUP_ACTION = "autoscaling:DescribeAutoScalingInstances"


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
                trainium_groups_statement([REPAIR_ACTION, STOP_ACTION], cluster_name=cluster_name),
                iam.PolicyStatement(actions=[FIND_GROUP_ACTION], resources=["*"]),
            ],
        )
        acknowledge(
            self.role,
            TRAINIUM_GROUPS_FINDING,
            reason="EKS names the Auto Scaling groups with uuids unknown at synth; the two actions are "
            "conditioned on the cluster's owned tag and the Trainium node-template tag, so only this cluster's "
            "Trainium instances can be marked unhealthy and only its Trainium groups' launches suspended",
        )
        acknowledge(
            self.role,
            "IAM5[Resource::*]",
            reason="autoscaling:DescribeAutoScalingInstances has no resource type (Service Authorization "
            "Reference); it reads which group an instance is in, nothing more",
        )
        self.association = eks_l1.CfnPodIdentityAssociation(
            self,
            "PodIdentity",
            cluster_name=cluster.cluster_name,
            namespace=NODE_CHECK_NAMESPACE,
            service_account=NODE_CHECK_NAME,
            role_arn=self.role.role_arn,
        )
