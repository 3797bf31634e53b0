"""A Trainium node group's DesiredSize as the count it runs: a deploy never moves it.

The cluster autoscaler sets a Trainium group's count between deploys; EKS resizes a group to its
``desiredSize`` "whenever this parameter changes" (EKS API, NodegroupScalingConfig). What
CloudFormation's AWS::EKS::Nodegroup handler sends when only ``MinSize`` or ``MaxSize`` changes,
the whole ScalingConfig or the changed keys, is not public (the resource's provider schema,
aws-cloudformation/cfn-lint's ``aws-eks-nodegroup.json``, names no handler source, and neither
CloudFormation's nor EKS's documentation says), so the stack does not depend on it: the template's
DesiredSize is the attribute of a custom resource that reads the group's running count whenever
anything of the group changes (its bounds, its AMI release, its launch template, its labels or
taints). Whatever CloudFormation sends, it sends the count the group runs (constructs_trn/
node_group_size_handler/index.py says what else it decides: the first count, new bounds, Capacity
Block upgrades).

The one function serves every group of the stack and answers CloudFormation itself; it may only
list and describe this cluster's node groups.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import Aws, CustomResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from cluster_facts.deploy_timeouts import ANSWER_SECONDS
from constructs_trn.nag import acknowledge, nag_rendering

__all__ = ["NODE_GROUP_SIZE_SECONDS", "NodeGroupSize", "NodeGroupSizeFunction"]

NODE_GROUP_SIZE_SECONDS = 60
"""The function's timeout: one DescribeNodegroup call and one answer."""
_HANDLER_DIRECTORY = Path(__file__).resolve().parent / "node_group_size_handler"


class NodeGroupSizeFunction(Construct):
    """The function behind every NodeGroupSize of a stack (one per stack: ``of``)."""

    def __init__(self, scope: Construct, construct_id: str, *, cluster_name: str) -> None:
        super().__init__(scope, construct_id)
        log_group = logs.LogGroup(
            self, "Logs", retention=logs.RetentionDays.ONE_YEAR, removal_policy=RemovalPolicy.DESTROY
        )
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Reads the desired size of this cluster's node groups for their templates",
        )
        nodegroups = f"arn:{Aws.PARTITION}:eks:{Aws.REGION}:{Aws.ACCOUNT_ID}:nodegroup/{cluster_name}/*"
        role.add_to_policy(iam.PolicyStatement(actions=["eks:DescribeNodegroup"], resources=[nodegroups]))
        cluster = f"arn:{Aws.PARTITION}:eks:{Aws.REGION}:{Aws.ACCOUNT_ID}:cluster/{cluster_name}"
        role.add_to_policy(iam.PolicyStatement(actions=["eks:ListNodegroups"], resources=[cluster]))
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[f"{log_group.log_group_arn}"],
            )
        )
        self.function = lambda_.Function(
            self,
            "Function",
            description="Trainium node groups: the DesiredSize of the template is the count the group runs",
            runtime=lambda_.Runtime.PYTHON_3_14,
            handler="index.handler",
            code=lambda_.Code.from_asset(str(_HANDLER_DIRECTORY), exclude=["__pycache__", "*.pyc"]),
            timeout=Duration.seconds(NODE_GROUP_SIZE_SECONDS),
            memory_size=128,
            role=role,
            log_group=log_group,
        )
        acknowledge(
            role,
            f"IAM5[Resource::{nag_rendering(Stack.of(self), nodegroups)}]",
            reason="EKS names a node group's ARN nodegroup/<cluster>/<name>/<uuid>, the uuid unknown at synth; "
            "the function may only describe node groups of this cluster",
        )

    @staticmethod
    def of(scope: Construct, *, cluster_name: str) -> NodeGroupSizeFunction:
        stack = Stack.of(scope)
        existing = stack.node.try_find_child("NodeGroupSizeFunction")
        if isinstance(existing, NodeGroupSizeFunction):
            return existing
        return NodeGroupSizeFunction(stack, "NodeGroupSizeFunction", cluster_name=cluster_name)


class NodeGroupSize(Construct):
    """The DesiredSize of one node group: ``desired_size``, a deploy-time token."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        nodegroup_name: str,
        node_selector: str,
        min_size: int,
        max_size: int,
        initial_size: int,
        capacity_block: bool,
        release_version: str,
        launch_template_version: str,
        group_spec: Mapping[str, Any],
    ) -> None:
        """``group_spec``: every other property of the group that an update can change (labels,
        taints, update strategy): a change of any of them makes CloudFormation update the group, so
        the count is read again first."""
        super().__init__(scope, construct_id)
        function = NodeGroupSizeFunction.of(self, cluster_name=cluster_name)
        stack = Stack.of(self)
        self.resource = CustomResource(
            self,
            "Resource",
            resource_type="Custom::TrainiumNodeGroupSize",
            service_token=function.function.function_arn,
            service_timeout=Duration.seconds(NODE_GROUP_SIZE_SECONDS + ANSWER_SECONDS),
            properties={
                "ClusterName": cluster_name,
                "NodegroupName": nodegroup_name,
                "NodeSelector": node_selector,
                "MinSize": min_size,
                "MaxSize": max_size,
                "InitialSize": initial_size,
                "CapacityBlock": "true" if capacity_block else "false",
                "ReleaseVersion": release_version,
                "LaunchTemplateVersion": launch_template_version,
                "GroupSpec": stack.to_json_string(dict(group_spec)),
            },
        )
        self.desired_size = self.resource.get_att("DesiredSize")
