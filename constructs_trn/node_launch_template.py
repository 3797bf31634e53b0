"""Launch-template settings every node of the cluster shares: IMDSv2 and an encrypted gp3 root volume."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2

__all__ = ["ROOT_DEVICE_NAME", "metadata_options", "root_volume"]

# The root device of the EKS-optimized AL2023 AMIs (standard and Neuron).
ROOT_DEVICE_NAME = "/dev/xvda"


def metadata_options() -> ec2.CfnLaunchTemplate.MetadataOptionsProperty:
    # Hop limit 1 keeps pods (one network hop further) away from the node role's credentials;
    # the add-ons that need AWS access get their own roles through Pod Identity.
    return ec2.CfnLaunchTemplate.MetadataOptionsProperty(
        http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1
    )


def root_volume(
    size_gib: int, *, throughput_mib_per_second: int | None = None
) -> ec2.CfnLaunchTemplate.BlockDeviceMappingProperty:
    """``throughput_mib_per_second``: gp3's throughput above its 125 MiB/s baseline (None: the baseline)."""
    return ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
        device_name=ROOT_DEVICE_NAME,
        ebs=ec2.CfnLaunchTemplate.EbsProperty(
            volume_size=size_gib,
            volume_type="gp3",
            encrypted=True,
            delete_on_termination=True,
            throughput=throughput_mib_per_second,
        ),
    )
