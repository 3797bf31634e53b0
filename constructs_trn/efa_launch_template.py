"""The launch template of a Trainium node group: one EFA interface per network card, fast image pulls.

The rules (see the README): card 0 carries the node's IP (device index 0, type ``efa``); every other
card gets an ``efa-only`` interface at device index 0, which uses no VPC address. The EC2 user guide
("Maximize network bandwidth on Amazon EC2 instances with multiple network cards"): "For each
additional network interface, use the next unused network card index, device index 0, for EFA-only
network interface, and/or device index 1 for ENA network interface". Device index 1 is an ENA
interface's place on a further card (this project once put efa-only there). Security groups
sit on each interface, because a launch template with network interfaces may not name top-level
groups. No subnet and no instance profile: the EKS managed node group supplies both.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Fn
from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from cluster_facts.instance_catalog import TrainiumInstanceType
from cluster_facts.node_startup import (
    FAST_IMAGE_PULL,
    FAST_IMAGE_PULL_FEATURE,
    ROOT_VOLUME_THROUGHPUT_MIB_PER_SECOND,
)
from constructs_trn.node_launch_template import metadata_options, root_volume

__all__ = ["EfaLaunchTemplate", "efa_network_interfaces", "node_config_user_data"]


def node_config_user_data() -> str:
    """The launch template's user data: a MIME multi-part document with one NodeConfig part.

    For an EKS-optimized AMI (no ImageId here) EKS adds its own NodeConfig (cluster, labels, taints)
    and nodeadm merges both (EKS User Guide, "Customize managed nodes with launch templates": user
    data "must be in the MIME multi-part archive format"; "provide additional arguments to the
    NodeConfig specification of an Amazon EKS optimized AMI").
    """
    boundary = "==TRAINIUM=="
    return "\n".join(
        [
            "MIME-Version: 1.0",
            f'Content-Type: multipart/mixed; boundary="{boundary}"',
            "",
            f"--{boundary}",
            "Content-Type: application/node.eks.aws",
            "",
            "apiVersion: node.eks.aws/v1alpha1",
            "kind: NodeConfig",
            "spec:",
            "  featureGates:",
            f"    {FAST_IMAGE_PULL_FEATURE}: {'true' if FAST_IMAGE_PULL else 'false'}",
            "",
            f"--{boundary}--",
            "",
        ]
    )


def efa_network_interfaces(
    instance: TrainiumInstanceType, *, security_group_ids: Sequence[str]
) -> list[ec2.CfnLaunchTemplate.NetworkInterfaceProperty]:
    """One interface per network card of ``instance``, in card order."""
    return [
        ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
            network_card_index=card,
            # Device index 0 on every card: the primary (efa) on card 0, efa-only on the others.
            device_index=0,
            interface_type="efa" if card == 0 else "efa-only",
            groups=list(security_group_ids),
            delete_on_termination=True,
        )
        for card in range(instance.efa_network_cards)
    ]


class EfaLaunchTemplate(Construct):
    """A launch template for ``instance`` with EFA on every card, IMDSv2 and an encrypted root volume.

    Optional: a cluster placement group (best bandwidth, but it fights reservations), a capacity
    reservation to target, and the Capacity Block market.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        instance: TrainiumInstanceType,
        security_group_ids: Sequence[str],
        root_volume_gib: int,
        placement_group_name: str | None = None,
        capacity_reservation_id: str | None = None,
        capacity_block: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        if capacity_block and capacity_reservation_id is None:
            raise ValueError("capacity_block requires capacity_reservation_id (the Capacity Block's id)")

        self.launch_template = ec2.CfnLaunchTemplate(
            self,
            "LaunchTemplate",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                # The instance type lives here, not on the node group: aws-eks-v2 rejects trn types
                # with the Neuron AMI type because it does not know them as accelerated instances.
                instance_type=instance.name,
                network_interfaces=efa_network_interfaces(instance, security_group_ids=security_group_ids),
                metadata_options=metadata_options(),
                block_device_mappings=[
                    root_volume(
                        root_volume_gib, throughput_mib_per_second=ROOT_VOLUME_THROUGHPUT_MIB_PER_SECOND
                    )
                ],
                user_data=Fn.base64(node_config_user_data()),
                placement=(
                    ec2.CfnLaunchTemplate.PlacementProperty(group_name=placement_group_name)
                    if placement_group_name
                    else None
                ),
                capacity_reservation_specification=(
                    ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                        capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                            capacity_reservation_id=capacity_reservation_id
                        )
                    )
                    if capacity_reservation_id
                    else None
                ),
                instance_market_options=(
                    ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block")
                    if capacity_block
                    else None
                ),
            ),
        )

    @property
    def launch_template_id(self) -> str:
        return self.launch_template.ref

    @property
    def latest_version(self) -> str:
        return self.launch_template.attr_latest_version_number
