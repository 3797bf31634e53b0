"""The EFA launch template: one interface per network card, as the instance catalog says."""

from __future__ import annotations

import email
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk.assertions import Template

from cluster_facts.instance_catalog import CATALOG
from cluster_facts.node_startup import ROOT_VOLUME_THROUGHPUT_MIB_PER_SECOND
from constructs_trn.efa_launch_template import EfaLaunchTemplate, node_config_user_data
from tests.conftest import Synthesized, project_context


@pytest.fixture(scope="module")
def one_template_per_instance_type() -> dict[str, dict[str, Any]]:
    """A launch template for every catalog entry, synthesized in one small stack."""
    stack = cdk.Stack(cdk.App(context=project_context()), "LaunchTemplates")
    for name, instance in CATALOG.items():
        EfaLaunchTemplate(
            stack,
            name.replace(".", "-"),
            instance=instance,
            security_group_ids=["sg-efa", "sg-cluster"],
            root_volume_gib=500,
        )
    resources = Template.from_stack(stack).to_json()["Resources"]
    by_type = {
        resource["Properties"]["LaunchTemplateData"]["InstanceType"]: resource
        for resource in resources.values()
    }
    return {name: by_type[name]["Properties"]["LaunchTemplateData"] for name in CATALOG}


@pytest.mark.parametrize(
    ("instance_type", "interfaces"), [("trn1.32xlarge", 8), ("trn1n.32xlarge", 16), ("trn2.48xlarge", 16)]
)
def test_one_efa_interface_per_network_card(
    one_template_per_instance_type: dict[str, dict[str, Any]], instance_type: str, interfaces: int
) -> None:
    network_interfaces = one_template_per_instance_type[instance_type]["NetworkInterfaces"]
    assert [interface["NetworkCardIndex"] for interface in network_interfaces] == list(range(interfaces))


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_card_zero_carries_the_ip_the_others_are_efa_only(
    one_template_per_instance_type: dict[str, dict[str, Any]], instance_type: str
) -> None:
    first, *others = one_template_per_instance_type[instance_type]["NetworkInterfaces"]
    assert (first["DeviceIndex"], first["InterfaceType"]) == (0, "efa")
    # EC2 user guide, multiple network cards: "the next unused network card index, device index 0,
    # for EFA-only network interface" (device index 1 is for an ENA interface there).
    assert {(interface["DeviceIndex"], interface["InterfaceType"]) for interface in others} == {
        (0, "efa-only")
    }


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_security_groups_on_every_interface_and_no_subnet_or_profile(
    one_template_per_instance_type: dict[str, dict[str, Any]], instance_type: str
) -> None:
    data = one_template_per_instance_type[instance_type]
    assert all(interface["Groups"] == ["sg-efa", "sg-cluster"] for interface in data["NetworkInterfaces"])
    assert all("SubnetId" not in interface for interface in data["NetworkInterfaces"])
    # An EKS managed node group rejects these in its launch template (and an ImageId would make the
    # AMI custom: EKS would then add no bootstrap of its own).
    assert not {"SecurityGroupIds", "SecurityGroups", "IamInstanceProfile", "ImageId"} & set(data)


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_nodes_pull_images_in_parallel_through_nodeadm(
    one_template_per_instance_type: dict[str, dict[str, Any]], instance_type: str
) -> None:
    # EKS accepts user data for its own AMIs only as a MIME multi-part document, and merges the
    # NodeConfig parts with its own: one part, turning on FastImagePull (SOCI parallel pull).
    encoded = one_template_per_instance_type[instance_type]["UserData"]
    assert encoded == {"Fn::Base64": node_config_user_data()}
    message = email.message_from_string(node_config_user_data())
    assert message.is_multipart()
    [part] = message.get_payload()
    assert part.get_content_type() == "application/node.eks.aws"
    node_config = yaml.safe_load(part.get_payload())
    assert node_config == {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {"featureGates": {"FastImagePull": True}},
    }


def test_imdsv2_and_encrypted_gp3_root(one_template_per_instance_type: dict[str, dict[str, Any]]) -> None:
    data = one_template_per_instance_type["trn1.32xlarge"]
    assert data["MetadataOptions"] == {
        "HttpEndpoint": "enabled",
        "HttpTokens": "required",
        "HttpPutResponseHopLimit": 1,
    }
    [root] = data["BlockDeviceMappings"]
    # Above gp3's 125 MiB/s baseline: a parallel pull unpacks onto this volume.
    assert root == {
        "DeviceName": "/dev/xvda",
        "Ebs": {
            "VolumeSize": 500,
            "VolumeType": "gp3",
            "Encrypted": True,
            "DeleteOnTermination": True,
            "Throughput": ROOT_VOLUME_THROUGHPUT_MIB_PER_SECOND,
        },
    }
    assert 125 < ROOT_VOLUME_THROUGHPUT_MIB_PER_SECOND <= 1000


def test_plain_template_has_no_placement_reservation_or_market(
    one_template_per_instance_type: dict[str, dict[str, Any]],
) -> None:
    data = one_template_per_instance_type["trn1.32xlarge"]
    assert not {"Placement", "CapacityReservationSpecification", "InstanceMarketOptions"} & set(data)


def test_capacity_block_needs_a_reservation() -> None:
    with pytest.raises(ValueError, match="capacity_block requires capacity_reservation_id"):
        EfaLaunchTemplate(
            cdk.Stack(cdk.App(), "Bad"),
            "Lt",
            instance=CATALOG["trn1.32xlarge"],
            security_group_ids=["sg-1"],
            root_volume_gib=500,
            capacity_block=True,
        )


def launch_template_of(synthesized: Synthesized, node_group_name: str) -> dict[str, Any]:
    [nodegroup] = [
        resource
        for resource in synthesized.resources("AWS::EKS::Nodegroup").values()
        if resource["Properties"]["NodegroupName"] == node_group_name
    ]
    logical_id = nodegroup["Properties"]["LaunchTemplate"]["Id"]["Ref"]
    return synthesized.json["Resources"][logical_id]["Properties"]["LaunchTemplateData"]


def test_default_stack_trn1_nodes_have_8_interfaces_in_a_cluster_placement_group(
    default_stack: Synthesized,
) -> None:
    data = launch_template_of(default_stack, "trn1-32xl")
    assert data["InstanceType"] == "trn1.32xlarge"
    assert len(data["NetworkInterfaces"]) == 8
    [(placement_id, placement_group)] = default_stack.resources("AWS::EC2::PlacementGroup").items()
    assert placement_group["Properties"]["Strategy"] == "cluster"
    assert data["Placement"] == {"GroupName": {"Fn::GetAtt": [placement_id, "GroupName"]}}


def test_trn1n_on_a_reservation_has_16_interfaces_and_no_placement_group(example_stack: Synthesized) -> None:
    data = launch_template_of(example_stack, "trn1n-32xl")
    assert len(data["NetworkInterfaces"]) == 16
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0123456789abcdef0"}
    }
    assert "Placement" not in data and "InstanceMarketOptions" not in data
    assert example_stack.resources("AWS::EC2::PlacementGroup") == {}


def test_capacity_block_group_uses_the_capacity_block_market(example_stack: Synthesized) -> None:
    data = launch_template_of(example_stack, "trn1-32xl-block")
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {
        "CapacityReservationTarget": {"CapacityReservationId": "cr-0fedcba9876543210"}
    }
    assert data["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == 1000
