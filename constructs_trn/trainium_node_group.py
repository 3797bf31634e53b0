"""A managed node group of Trainium instances with EFA, in one subnet, on the Neuron AMI, sized by the
cluster autoscaler."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from aws_cdk import Aws, Duration, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import custom_resources as cr
from constructs import Construct

from cluster_facts.ami_releases import release_minor
from cluster_facts.autoscaling import TEMPLATE_TAG_PREFIX, node_template_tags
from cluster_facts.deploy_timeouts import AWS_CUSTOM_RESOURCE_SERVICE_TIMEOUT
from cluster_facts.instance_catalog import TrainiumInstanceType
from cluster_facts.kubernetes_names import (
    NEURON_TAINT_KEY,
    NEURON_TAINT_VALUE,
    NODE_GROUP_LABEL,
    trainium_node_labels,
)
from cluster_facts.node_check import NODE_CHECK_TAINT
from constructs_trn.efa_launch_template import EfaLaunchTemplate
from constructs_trn.nag import (
    AWS_CUSTOM_RESOURCE_FUNCTION_ID,
    acknowledge,
    acknowledge_custom_resource_function,
)
from constructs_trn.node_group_size import NodeGroupSize
from constructs_trn.node_group_version import follow_cluster_version

__all__ = ["AWS_CUSTOM_RESOURCE_FUNCTION_ID", "TrainiumNodeGroup", "acknowledge_custom_resource_function"]


_CAPACITY_TYPES = {
    "on_demand": eks.CapacityType.ON_DEMAND,
    "spot": eks.CapacityType.SPOT,
    "capacity_block": eks.CapacityType.CAPACITY_BLOCK,
}


class TrainiumNodeGroup(Construct):
    """An ``eks.Nodegroup`` whose launch template carries the instance type and its EFA interfaces.

    Built with ``eks.Nodegroup`` rather than ``cluster.add_nodegroup_capacity``, which would also
    install the library's bundled (and stale) Neuron device plugin.

    Capacity: the cluster autoscaler sets the group's desired size between ``min_size`` and
    ``max_size``; the template's DesiredSize is the count the group runs, read at deploy time
    (constructs_trn/node_group_size.py), so a redeploy never moves it: not for new bounds, not for
    anything else of the group. A new group starts with ``initial_size`` nodes (at least
    ``min_size``). The group's Auto Scaling
    group gets the autoscaler's node-template tags (labels, taint, Neuron and EFA devices from the
    catalog), which EKS does not copy from the node group, so the autoscaler can scale it from zero.
    Nothing waits for the group's nodes: with ``min_size`` 0 EKS creates the group without launching any.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        name: str,
        instance: TrainiumInstanceType,
        subnet: ec2.ISubnet,
        security_group_ids: Sequence[str],
        node_role: iam.IRole,
        min_size: int,
        initial_size: int,
        max_size: int,
        capacity_type: str,
        capacity_reservation_id: str | None,
        placement_group: bool,
        root_volume_gib: int,
        update_strategy: Literal["DEFAULT", "MINIMAL"],
        ami_release: str,
        dra: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        if not (0 <= min_size <= max_size and 0 <= initial_size <= max_size):
            raise ValueError(
                f"node group {name}: need 0 <= min_size ({min_size}) <= max_size ({max_size}) and an "
                f"initial_size ({initial_size}) of at most max_size"
            )
        initial_size = max(initial_size, min_size)
        self.placement_group = (
            ec2.PlacementGroup(self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER)
            if placement_group
            else None
        )
        self.launch_template = EfaLaunchTemplate(
            self,
            "EfaLaunchTemplate",
            instance=instance,
            security_group_ids=security_group_ids,
            root_volume_gib=root_volume_gib,
            placement_group_name=self.placement_group.placement_group_name if self.placement_group else None,
            capacity_reservation_id=capacity_reservation_id,
            capacity_block=capacity_type == "capacity_block",
        )
        self.nodegroup = self._managed_nodegroup(
            cluster=cluster,
            name=name,
            instance=instance,
            subnet=subnet,
            node_role=node_role,
            sizes=(min_size, initial_size, max_size),
            capacity_type=capacity_type,
            ami_release=ami_release,
            dra=dra,
        )
        nodegroup = self.nodegroup.node.default_child
        assert isinstance(nodegroup, eks.CfnNodegroup)
        # aws-cdk-lib 2.273's Nodegroup has no prop for the update strategy (CfnNodegroup's
        # UpdateConfig.UpdateStrategy has). MINIMAL stops an old node before it starts a new one:
        # no surge above max_size, which a reservation sized to the group does not hold.
        nodegroup.add_property_override("UpdateConfig.UpdateStrategy", update_strategy)
        self.update_strategy = update_strategy
        # Version and ReleaseVersion move together: a new minor's release alone is refused.
        follow_cluster_version(self.nodegroup, release_minor(ami_release))
        self.size = self._size(
            cluster_name=cluster.cluster_name,
            name=name,
            instance=instance,
            sizes=(min_size, initial_size, max_size),
            capacity_type=capacity_type,
            update_strategy=update_strategy,
            ami_release=ami_release,
        )
        nodegroup.add_property_override("ScalingConfig.DesiredSize", self.size.desired_size)

        self.template_tags = node_template_tags(instance, node_group=name, dra=dra)
        self._tag_auto_scaling_group(cluster_name=cluster.cluster_name, name=name, tags=self.template_tags)

    def _size(
        self,
        *,
        cluster_name: str,
        name: str,
        instance: TrainiumInstanceType,
        sizes: tuple[int, int, int],
        capacity_type: str,
        update_strategy: str,
        ami_release: str,
    ) -> NodeGroupSize:
        """The count the group runs, read before each update of the group (constructs_trn/node_group_size.py)."""
        min_size, initial_size, max_size = sizes
        labels = trainium_node_labels(instance, node_group=name)
        return NodeGroupSize(
            self,
            "Size",
            cluster_name=cluster_name,
            nodegroup_name=name,
            node_selector=f"{NODE_GROUP_LABEL}={name}",
            min_size=min_size,
            max_size=max_size,
            initial_size=initial_size,
            capacity_block=capacity_type == "capacity_block",
            release_version=ami_release,
            launch_template_version=self.launch_template.latest_version,
            # Everything else an update of the group can change: a change re-reads the count first.
            group_spec={
                "labels": labels,
                "taints": [
                    f"{NEURON_TAINT_KEY}={NEURON_TAINT_VALUE}:NoSchedule",
                    f"{NODE_CHECK_TAINT['key']}={NODE_CHECK_TAINT['value']}:NoSchedule",
                ],
                "updateStrategy": update_strategy,
                "launchTemplate": self.launch_template.launch_template_id,
                "version": release_minor(ami_release),
            },
        )

    def _managed_nodegroup(
        self,
        *,
        cluster: eks.ICluster,
        name: str,
        instance: TrainiumInstanceType,
        subnet: ec2.ISubnet,
        node_role: iam.IRole,
        sizes: tuple[int, int, int],
        capacity_type: str,
        ami_release: str,
        dra: bool,
    ) -> eks.Nodegroup:
        """The EKS managed node group: its AMI release, launch template, sizes (min, initial, max),
        labels and taints."""
        min_size, initial_size, max_size = sizes
        return eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=cluster,
            nodegroup_name=name,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NEURON,
            # The AMI release (and so its Neuron driver) the group boots, pinned: without it EKS takes
            # the newest at creation and a scale-up months later still boots that one, while a new
            # group boots another (AWS::EKS::Nodegroup ReleaseVersion; cluster_facts/ami_releases.py).
            # A launch template without an AMI id may name it. A change rolls the nodes.
            release_version=ami_release,
            capacity_type=_CAPACITY_TYPES[capacity_type],
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.launch_template_id, version=self.launch_template.latest_version
            ),
            subnets=ec2.SubnetSelection(subnets=[subnet]),
            node_role=node_role,
            # All three, as the EKS API requires when it creates a group (NodegroupScalingConfig: "When
            # creating a node group, you must specify all or none of the properties"); DesiredSize is
            # then replaced by the count the group runs (below).
            min_size=min_size,
            desired_size=initial_size,
            max_size=max_size,
            labels=trainium_node_labels(instance, node_group=name, dra=dra),
            taints=[
                eks.TaintSpec(
                    key=NEURON_TAINT_KEY, value=NEURON_TAINT_VALUE, effect=eks.TaintEffect.NO_SCHEDULE
                ),
                # Every node starts unproven: only a passing node check lifts this (k8s_charts/checks/node_check.py).
                # A startup taint to the cluster autoscaler, which scales up as if it were not there.
                eks.TaintSpec(
                    key=NODE_CHECK_TAINT["key"],
                    value=NODE_CHECK_TAINT["value"],
                    effect=eks.TaintEffect.NO_SCHEDULE,
                ),
            ],
            # EKS node auto repair: nodes that report unhealthy (NotReady, or the node monitoring
            # agent's Neuron and EFA conditions) are replaced by the managed node group.
            enable_node_auto_repair=True,
            # An update replaces one node at a time.
            max_unavailable=1,
        )

    def _describe_auto_scaling_group(self, *, cluster_name: str, name: str) -> cr.AwsCustomResource:
        """The node group's Auto Scaling group's name, read from EKS once the group exists."""
        # The token makes the lookup wait for the node group; ``name`` is the same string.
        nodegroup_name = self.nodegroup.nodegroup_name
        describe = cr.AwsCustomResource(
            self,
            "AutoScalingGroup",
            resource_type="Custom::TrainiumAutoScalingGroup",
            install_latest_aws_sdk=False,
            service_timeout=Duration.seconds(AWS_CUSTOM_RESOURCE_SERVICE_TIMEOUT),
            on_create=cr.AwsSdkCall(
                service="EKS",
                action="describeNodegroup",
                parameters={"clusterName": cluster_name, "nodegroupName": nodegroup_name},
                physical_resource_id=cr.PhysicalResourceId.of(f"{name}-auto-scaling-group"),
                output_paths=["nodegroup.resources.autoScalingGroups.0.name"],
            ),
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [
                    iam.PolicyStatement(
                        actions=["eks:DescribeNodegroup"], resources=[self.nodegroup.nodegroup_arn]
                    )
                ]
            ),
        )
        return describe

    def _tag_auto_scaling_group(self, *, cluster_name: str, name: str, tags: Mapping[str, str]) -> None:
        """Write ``tags`` on the node group's Auto Scaling group (EKS names it; DescribeNodegroup tells)."""
        describe = self._describe_auto_scaling_group(cluster_name=cluster_name, name=name)
        self.auto_scaling_group_name = describe.get_response_field(
            "nodegroup.resources.autoScalingGroups.0.name"
        )
        tag_call = cr.AwsSdkCall(
            service="AutoScaling",
            action="createOrUpdateTags",
            parameters={
                "Tags": [
                    {
                        "ResourceId": self.auto_scaling_group_name,
                        "ResourceType": "auto-scaling-group",
                        "Key": key,
                        "Value": value,
                        # For the autoscaler only: instances get their labels and taint from EKS.
                        "PropagateAtLaunch": False,
                    }
                    for key, value in tags.items()
                ]
            },
            physical_resource_id=cr.PhysicalResourceId.of(f"{name}-node-template-tags"),
        )
        self.tagging = cr.AwsCustomResource(
            self,
            "NodeTemplateTags",
            resource_type="Custom::TrainiumNodeTemplateTags",
            install_latest_aws_sdk=False,
            service_timeout=Duration.seconds(AWS_CUSTOM_RESOURCE_SERVICE_TIMEOUT),
            on_create=tag_call,
            on_update=tag_call,
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [
                    iam.PolicyStatement(
                        actions=["autoscaling:CreateOrUpdateTags"],
                        # EKS names a node group's Auto Scaling group eks-<node group>-<uuid>.
                        resources=[
                            (
                                f"arn:{Aws.PARTITION}:autoscaling:{Aws.REGION}:{Aws.ACCOUNT_ID}:autoScalingGroup:*:"
                                f"autoScalingGroupName/eks-{name}-*"
                            )
                        ],
                        conditions={
                            # Only this cluster's groups (EKS tags them), and only node-template tags.
                            "StringEquals": {"aws:ResourceTag/eks:cluster-name": cluster_name},
                            "ForAllValues:StringLike": {"aws:TagKeys": [f"{TEMPLATE_TAG_PREFIX}*"]},
                        },
                    )
                ]
            ),
        )
        self.tagging.node.add_dependency(describe)
        acknowledge(
            self.tagging,
            "IAM5[Resource::arn:<AWS::Partition>:autoscaling:<AWS::Region>:<AWS::AccountId>:autoScalingGroup:*:"
            f"autoScalingGroupName/eks-{name}-*]",
            reason="EKS names the node group's Auto Scaling group eks-<node group>-<uuid>, the uuid unknown "
            "at synth; the role may write only node-template tags, only on groups of this cluster",
        )
        acknowledge_custom_resource_function(Stack.of(self))
