"""A managed node group of Trainium instances with EFA, in one subnet, on the Neuron AMI."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cluster_facts.instance_catalog import TrainiumInstanceType
from cluster_facts.kubernetes_names import NEURON_TAINT_KEY, NEURON_TAINT_VALUE, trainium_node_labels
from constructs_trn.efa_launch_template import EfaLaunchTemplate

__all__ = ["TrainiumNodeGroup"]

_CAPACITY_TYPES = {
    "on_demand": eks.CapacityType.ON_DEMAND,
    "spot": eks.CapacityType.SPOT,
    "capacity_block": eks.CapacityType.CAPACITY_BLOCK,
}


class TrainiumNodeGroup(Construct):
    """An ``eks.Nodegroup`` whose launch template carries the instance type and its EFA interfaces.

    Built with ``eks.Nodegroup`` rather than ``cluster.add_nodegroup_capacity``, which would also
    install the library's bundled (and stale) Neuron device plugin.
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
        desired_size: int,
        max_size: int,
        capacity_type: str,
        capacity_reservation_id: str | None,
        placement_group: bool,
        root_volume_gib: int,
    ) -> None:
        super().__init__(scope, construct_id)
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
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=cluster,
            nodegroup_name=name,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NEURON,
            capacity_type=_CAPACITY_TYPES[capacity_type],
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.launch_template_id, version=self.launch_template.latest_version
            ),
            subnets=ec2.SubnetSelection(subnets=[subnet]),
            node_role=node_role,
            min_size=min_size,
            desired_size=desired_size,
            max_size=max_size,
            labels=trainium_node_labels(instance, node_group=name),
            taints=[
                eks.TaintSpec(
                    key=NEURON_TAINT_KEY, value=NEURON_TAINT_VALUE, effect=eks.TaintEffect.NO_SCHEDULE
                )
            ],
        )
