"""TrainiumStack as a specification of the cluster it builds."""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

import pytest

from cluster_facts.instance_catalog import CATALOG
from cluster_facts.node_check import NODE_CHECK_TAINT_KEY, STARTUP_TAINT_PREFIX
from cluster_facts.versions import ADDON_NAMES
from cluster_plan.kubernetes_values import review_plan, root_zones
from constructs_trn.lustre_storage import lustre_nid_range
from tests.conftest import Synthesized

ALL_TRAFFIC = "-1"


def ref(logical_id: str) -> dict[str, str]:
    return {"Ref": logical_id}


def group_id(logical_id: str) -> dict[str, list[str]]:
    return {"Fn::GetAtt": [logical_id, "GroupId"]}


def rules(synthesized: Synthesized, resource_type: str, group_logical_id: str) -> list[dict[str, Any]]:
    return [
        resource["Properties"]
        for resource in synthesized.resources(resource_type).values()
        if resource["Properties"]["GroupId"] == group_id(group_logical_id)
    ]


def depends_on_transitively(synthesized: Synthesized, logical_id: str) -> set[str]:
    """Every resource ``logical_id`` waits for, through Ref, Fn::GetAtt and DependsOn."""
    resources = synthesized.json["Resources"]

    def direct(resource: dict[str, Any]) -> set[str]:
        found: set[str] = set(resource.get("DependsOn", []))

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                if "Ref" in node and node["Ref"] in resources:
                    found.add(node["Ref"])
                if "Fn::GetAtt" in node:
                    found.add(node["Fn::GetAtt"][0])
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(resource.get("Properties", {}))
        return found

    seen: set[str] = set()
    pending = [logical_id]
    while pending:
        for dependency in direct(resources[pending.pop()]) - seen:
            seen.add(dependency)
            pending.append(dependency)
    return seen


# --- Network -----------------------------------------------------------------------------------


def test_vpc_spans_the_configured_zones_with_public_and_private_subnets(default_stack: Synthesized) -> None:
    subnets = default_stack.resources("AWS::EC2::Subnet").values()
    zones = sorted(
        (s["Properties"]["AvailabilityZone"], s["Properties"]["MapPublicIpOnLaunch"]) for s in subnets
    )
    assert zones == [("us-west-2a", False), ("us-west-2a", True), ("us-west-2d", False), ("us-west-2d", True)]
    assert len(default_stack.resources("AWS::EC2::NatGateway")) == 1


def test_subnets_carry_the_load_balancer_role_tags(default_stack: Synthesized) -> None:
    for subnet in default_stack.resources("AWS::EC2::Subnet").values():
        tags = {tag["Key"]: tag["Value"] for tag in subnet["Properties"]["Tags"]}
        expected = (
            "kubernetes.io/role/elb"
            if subnet["Properties"]["MapPublicIpOnLaunch"]
            else "kubernetes.io/role/internal-elb"
        )
        assert tags[expected] == "1"


def test_vpc_flow_logs_capture_all_traffic(default_stack: Synthesized) -> None:
    _, flow_log = default_stack.only("AWS::EC2::FlowLog")
    assert flow_log["Properties"]["TrafficType"] == "ALL"
    assert flow_log["Properties"]["LogDestinationType"] == "cloud-watch-logs"


# --- EKS ---------------------------------------------------------------------------------------


def test_cluster_version_logging_encryption_and_endpoint(default_stack: Synthesized) -> None:
    _, cluster = default_stack.only("AWS::EKS::Cluster")
    properties = cluster["Properties"]
    assert properties["Version"] == "1.36"
    assert properties["Name"] == "trainium"
    assert {entry["Type"] for entry in properties["Logging"]["ClusterLogging"]["EnabledTypes"]} == {
        "api",
        "audit",
        "authenticator",
        "controllerManager",
        "scheduler",
    }
    [encryption] = properties["EncryptionConfig"]
    assert encryption["Resources"] == ["secrets"]
    key_id = encryption["Provider"]["KeyArn"]["Fn::GetAtt"][0]
    assert default_stack.json["Resources"][key_id]["Properties"]["EnableKeyRotation"] is True
    vpc_config = properties["ResourcesVpcConfig"]
    assert (vpc_config["EndpointPublicAccess"], vpc_config["EndpointPrivateAccess"]) == (True, True)
    assert vpc_config["PublicAccessCidrs"] == ["203.0.113.0/24"]
    # Managed node groups, not Auto Mode.
    assert properties["ComputeConfig"] == {"Enabled": False}


def test_empty_public_cidrs_make_the_endpoint_private(example_stack: Synthesized) -> None:
    _, cluster = example_stack.only("AWS::EKS::Cluster")
    vpc_config = cluster["Properties"]["ResourcesVpcConfig"]
    assert (vpc_config["EndpointPublicAccess"], vpc_config["EndpointPrivateAccess"]) == (False, True)


def test_admin_roles_get_cluster_admin_access_entries(example_stack: Synthesized) -> None:
    principals = {
        json.dumps(entry["Properties"]["PrincipalArn"]): entry["Properties"]["AccessPolicies"]
        for entry in example_stack.resources("AWS::EKS::AccessEntry").values()
        # Team members' entries carry Kubernetes groups and no access policy (tests/constructs_trn/test_team_access.py).
        if "AccessPolicies" in entry["Properties"]
    }
    policies = principals['"arn:aws:iam::444455556666:role/PlatformAdmins"']
    assert policies[0]["AccessScope"] == {"Type": "cluster"}
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(policies[0]["PolicyArn"])


@pytest.mark.parametrize("fixture", ["default_stack", "example_stack"])
def test_kubectl_handler_runs_the_clusters_kubectl_in_the_private_subnets(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synthesized: Synthesized = request.getfixturevalue(fixture)
    version = synthesized.config.cluster.kubernetes_version
    [handler] = [
        resource["Properties"]
        for resource in synthesized.resources("AWS::Lambda::Function").values()
        if resource["Properties"].get("Description") == "onEvent handler for EKS kubectl resource provider"
    ]
    layer_descriptions = [
        synthesized.json["Resources"][layer["Ref"]]["Properties"]["Description"]
        for layer in handler["Layers"]
    ]
    assert any(
        description.startswith(f"/opt/kubectl/kubectl {version}.") for description in layer_descriptions
    )
    private_subnets = [
        ref(logical_id)
        for logical_id, subnet in synthesized.resources("AWS::EC2::Subnet").items()
        if not subnet["Properties"]["MapPublicIpOnLaunch"]
    ]
    assert sorted(map(json.dumps, handler["VpcConfig"]["SubnetIds"])) == sorted(
        map(json.dumps, private_subnets)
    )


def test_system_nodes_are_untainted_standard_nodes_in_the_private_subnets(default_stack: Synthesized) -> None:
    [system] = [
        resource["Properties"]
        for resource in default_stack.resources("AWS::EKS::Nodegroup").values()
        if resource["Properties"]["NodegroupName"] == "trainium-system"
    ]
    assert system["AmiType"] == "AL2023_x86_64_STANDARD"
    assert system["InstanceTypes"] == ["m6i.2xlarge"]
    assert "Taints" not in system
    assert system["ScalingConfig"] == {"MinSize": 2, "DesiredSize": 2, "MaxSize": 4}
    assert len(system["Subnets"]) == 2
    for subnet in system["Subnets"]:
        assert default_stack.json["Resources"][subnet["Ref"]]["Properties"]["MapPublicIpOnLaunch"] is False


# --- Trainium nodes ----------------------------------------------------------------------------


def trainium_node_groups(synthesized: Synthesized) -> dict[str, dict[str, Any]]:
    return {
        resource["Properties"]["NodegroupName"]: resource["Properties"]
        for resource in synthesized.resources("AWS::EKS::Nodegroup").values()
        if resource["Properties"]["AmiType"] == "AL2023_x86_64_NEURON"
    }


def test_trainium_node_group_runs_the_neuron_ami_with_the_neuron_taint(default_stack: Synthesized) -> None:
    group = trainium_node_groups(default_stack)["trn1-32xl"]
    assert group["CapacityType"] == "ON_DEMAND"
    assert group["Taints"] == [
        {"Key": "aws.amazon.com/neuron", "Value": "present", "Effect": "NO_SCHEDULE"},
        # Until the node check passes (k8s_charts/checks/node_check.py).
        {
            "Key": "startup-taint.cluster-autoscaler.kubernetes.io/node-check",
            "Value": "pending",
            "Effect": "NO_SCHEDULE",
        },
    ]
    # The instance type is in the launch template; on the node group aws-eks-v2 would reject it.
    assert "InstanceTypes" not in group
    # All three (the EKS API takes all or none at creation); DesiredSize is the count the group runs,
    # read at deploy time (tests/constructs_trn/test_node_group_size.py).
    assert group["ScalingConfig"] == {
        "MinSize": 0,
        "DesiredSize": {
            "Fn::GetAtt": [
                default_stack.logical_id(default_stack.stack.trainium_node_groups["trn1-32xl"].size.resource),
                "DesiredSize",
            ]
        },
        "MaxSize": 2,
    }


@pytest.mark.parametrize("fixture", ["default_stack", "example_stack"])
def test_every_node_group_carries_the_clusters_version_and_moves_with_it(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    """EKS updates a control plane only while every managed node group is at its version, and takes
    a new minor's ReleaseVersion only with that Version (docs/upgrades.md): each group, the system
    nodes included, writes the cluster's version; a Trainium group's release is of that version."""
    stack: Synthesized = request.getfixturevalue(fixture)
    _, cluster = stack.only("AWS::EKS::Cluster")
    version = cluster["Properties"]["Version"]
    groups = stack.resources("AWS::EKS::Nodegroup")
    assert len(groups) == 1 + len(stack.config.trainium.node_groups)
    for group in groups.values():
        properties = group["Properties"]
        assert properties["Version"] == version
        if "ReleaseVersion" in properties:
            assert properties["ReleaseVersion"].startswith(f"{version}.")


@pytest.mark.parametrize("fixture", ["default_stack", "example_stack"])
def test_every_trainium_node_starts_with_the_node_checks_startup_taint(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    """The cluster autoscaler ignores taints of this prefix when it simulates a new node (its source:
    cluster_facts/node_check.py), so scale-up from zero works; EKS takes keys of at most 63 characters."""
    for group in trainium_node_groups(request.getfixturevalue(fixture)).values():
        [startup] = [taint for taint in group["Taints"] if taint["Key"].startswith(STARTUP_TAINT_PREFIX)]
        assert startup == {"Key": NODE_CHECK_TAINT_KEY, "Value": "pending", "Effect": "NO_SCHEDULE"}
        assert len(startup["Key"]) <= 63 and len(startup["Value"]) <= 63


def test_trainium_labels_come_from_the_catalog(example_stack: Synthesized) -> None:
    labels = trainium_node_groups(example_stack)["trn1n-32xl"]["Labels"]
    trn1n = CATALOG["trn1n.32xlarge"]
    assert labels == {
        "trainium/node-group": "trn1n-32xl",
        "trainium/instance-family": "trn1n",
        "trainium/neuron-devices": str(trn1n.chips),
        "trainium/neuron-cores": str(trn1n.neuron_cores),
        "trainium/efa-interfaces": "16",
    }


def test_capacity_block_group_has_the_capacity_block_capacity_type(example_stack: Synthesized) -> None:
    assert trainium_node_groups(example_stack)["trn1-32xl-block"]["CapacityType"] == "CAPACITY_BLOCK"


@pytest.mark.parametrize("fixture", ["default_stack", "example_stack"])
def test_trainium_nodes_and_fsx_share_one_subnet_in_the_trainium_zone(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synthesized: Synthesized = request.getfixturevalue(fixture)
    _, file_system = synthesized.only("AWS::FSx::FileSystem")
    [subnet] = file_system["Properties"]["SubnetIds"]
    for group in trainium_node_groups(synthesized).values():
        assert group["Subnets"] == [subnet]
    zone = synthesized.json["Resources"][subnet["Ref"]]["Properties"]["AvailabilityZone"]
    assert zone == synthesized.config.trainium.availability_zone
    assert synthesized.json["Outputs"]["TrainiumSubnetId"]["Value"] == subnet


def test_efa_security_group_admits_itself_in_both_directions(default_stack: Synthesized) -> None:
    efa_group = default_stack.logical_id(default_stack.stack.efa_security_group.security_group)
    [ingress] = rules(default_stack, "AWS::EC2::SecurityGroupIngress", efa_group)
    [egress] = rules(default_stack, "AWS::EC2::SecurityGroupEgress", efa_group)
    assert (ingress["IpProtocol"], ingress["SourceSecurityGroupId"]) == (ALL_TRAFFIC, group_id(efa_group))
    assert (egress["IpProtocol"], egress["DestinationSecurityGroupId"]) == (ALL_TRAFFIC, group_id(efa_group))
    # Nothing else is opened on the EFA group itself (no 0.0.0.0/0 rule).
    inline = default_stack.json["Resources"][efa_group]["Properties"]
    assert all(
        rule.get("CidrIp") != "0.0.0.0/0"
        for rule in inline.get("SecurityGroupIngress", []) + inline.get("SecurityGroupEgress", [])
    )


# --- Storage -----------------------------------------------------------------------------------


def test_fsx_admits_lustre_ports_from_the_nodes_and_itself(default_stack: Synthesized) -> None:
    fsx_group = default_stack.logical_id(default_stack.stack.storage.security_group)
    efa_group = default_stack.logical_id(default_stack.stack.efa_security_group.security_group)
    # The cluster security group: the system nodes, where the data staging Job runs.
    cluster, _ = default_stack.only("AWS::EKS::Cluster")
    ingress = {
        (rule["IpProtocol"], rule["FromPort"], rule["ToPort"], rule["SourceSecurityGroupId"]["Fn::GetAtt"][0])
        for rule in rules(default_stack, "AWS::EC2::SecurityGroupIngress", fsx_group)
    }
    assert ingress == {
        ("tcp", 988, 988, efa_group),
        ("tcp", 1018, 1023, efa_group),
        ("tcp", 988, 988, cluster),
        ("tcp", 1018, 1023, cluster),
        # Added by fsx.LustreFileSystem: the file servers among themselves.
        ("tcp", 988, 1023, fsx_group),
    }
    egress = {
        (
            rule["IpProtocol"],
            rule["FromPort"],
            rule["ToPort"],
            rule["DestinationSecurityGroupId"]["Fn::GetAtt"][0],
        )
        for rule in rules(default_stack, "AWS::EC2::SecurityGroupEgress", fsx_group)
    }
    # FSx for Lustre user guide, "File system access control with Amazon VPC": outbound 988 and
    # 1018-1023 to the file system's own group (its servers) and to its clients' groups.
    assert egress == {
        ("tcp", 988, 988, efa_group),
        ("tcp", 1018, 1023, efa_group),
        ("tcp", 988, 988, cluster),
        ("tcp", 1018, 1023, cluster),
        ("tcp", 988, 988, fsx_group),
        ("tcp", 1018, 1023, fsx_group),
    }
    inline = default_stack.json["Resources"][fsx_group]["Properties"]
    assert "SecurityGroupIngress" not in inline


def test_fsx_is_encrypted_with_a_rotated_key_and_follows_the_removal_policy(
    default_stack: Synthesized, example_stack: Synthesized
) -> None:
    _, default_fs = default_stack.only("AWS::FSx::FileSystem")
    key_id = default_fs["Properties"]["KmsKeyId"]["Ref"]
    assert default_stack.json["Resources"][key_id]["Properties"]["EnableKeyRotation"] is True
    assert default_fs["Properties"]["LustreConfiguration"] == {
        "DataCompressionType": "LZ4",
        "DeploymentType": "PERSISTENT_2",
        "PerUnitStorageThroughput": 250,
        # fsx.backups: daily, 7 days (tests/constructs_trn/test_backups.py).
        "AutomaticBackupRetentionDays": 7,
        "CopyTagsToBackups": True,
    }
    assert (default_fs["Properties"]["StorageCapacity"], default_fs["DeletionPolicy"]) == (1200, "Delete")
    _, example_fs = example_stack.only("AWS::FSx::FileSystem")
    assert (example_fs["Properties"]["StorageCapacity"], example_fs["DeletionPolicy"]) == (4800, "Retain")


def test_s3_import_path_becomes_a_data_repository_association(
    default_stack: Synthesized, example_stack: Synthesized
) -> None:
    assert default_stack.resources("AWS::FSx::DataRepositoryAssociation") == {}
    [association] = [
        association
        for association in example_stack.resources("AWS::FSx::DataRepositoryAssociation").values()
        if "AutoImportPolicy" in association["Properties"]["S3"]
    ]
    assert association["Properties"]["DataRepositoryPath"] == "s3://my-training-data/bert"
    assert association["Properties"]["FileSystemPath"] == "/s3"


# --- Add-ons -----------------------------------------------------------------------------------


def addons(synthesized: Synthesized) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        resource["Properties"]["AddonName"]: (logical_id, resource)
        for logical_id, resource in synthesized.resources("AWS::EKS::Addon").items()
    }


def test_all_addons_are_installed(default_stack: Synthesized) -> None:
    assert sorted(addons(default_stack)) == sorted(ADDON_NAMES)


def test_vpc_cni_enforces_network_policies_and_takes_pinned_versions(
    default_stack: Synthesized, example_stack: Synthesized
) -> None:
    _, vpc_cni = addons(default_stack)["vpc-cni"]
    assert json.loads(vpc_cni["Properties"]["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}
    assert "AddonVersion" not in vpc_cni["Properties"]
    _, pinned = addons(example_stack)["vpc-cni"]
    assert pinned["Properties"]["AddonVersion"] == "v1.20.4-eksbuild.1"


def test_the_network_policy_agent_stays_in_standard_mode(
    default_stack: Synthesized, example_stack: Synthesized
) -> None:
    """No ``env.NETWORK_POLICY_ENFORCING_MODE`` in the add-on's configuration: the agent's default,
    ``standard`` (amazon-vpc-cni-k8s README, "NETWORK_POLICY_ENFORCING_MODE"; EKS User Guide,
    "Restrict Pod network traffic"). docs/security-policies.md says why not ``strict``."""
    for synthesized in (default_stack, example_stack):
        _, vpc_cni = addons(synthesized)["vpc-cni"]
        configuration = json.loads(vpc_cni["Properties"]["ConfigurationValues"])
        assert configuration == {"enableNetworkPolicy": "true"}
        assert "NETWORK_POLICY_ENFORCING_MODE" not in json.dumps(configuration)


@pytest.mark.parametrize(
    ("addon", "service_account", "expected_policy"),
    [
        ("aws-fsx-csi-driver", "fsx-csi-controller-sa", "fsx:DescribeFileSystems"),
        ("amazon-cloudwatch-observability", "cloudwatch-agent", "CloudWatchAgentServerPolicy"),
    ],
)
def test_addons_get_pod_identity_roles(
    default_stack: Synthesized, addon: str, service_account: str, expected_policy: str
) -> None:
    _, resource = addons(default_stack)[addon]
    [association] = resource["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == service_account
    role_id = association["RoleArn"]["Fn::GetAtt"][0]
    role = default_stack.json["Resources"][role_id]["Properties"]
    trust = role["AssumeRolePolicyDocument"]["Statement"]
    assert {
        action
        for statement in trust
        for action in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])
    } == {"sts:AssumeRole", "sts:TagSession"}
    assert all(statement["Principal"] == {"Service": "pods.eks.amazonaws.com"} for statement in trust)
    granted = json.dumps(role.get("ManagedPolicyArns", [])) + json.dumps(
        [
            p["Properties"]["PolicyDocument"]
            for p in default_stack.resources("AWS::IAM::Policy").values()
            if {"Ref": role_id} in p["Properties"]["Roles"]
        ]
    )
    assert expected_policy in granted


def test_node_monitoring_agent_runs_with_its_defaults_and_no_aws_permissions(
    default_stack: Synthesized,
) -> None:
    """No role: the add-on only reads node logs and writes Node conditions and Events (EKS User Guide:
    "This add-on doesn't require additional permissions"). No configuration: its DaemonSet tolerates
    every taint by default (chart value nodeAgent.tolerations [{operator: Exists}]), the Trainium
    taint included, so the conditions that node auto repair acts on exist on the Trainium nodes."""
    _, resource = addons(default_stack)["eks-node-monitoring-agent"]
    assert "PodIdentityAssociations" not in resource["Properties"]
    assert "ServiceAccountRoleArn" not in resource["Properties"]
    assert "ConfigurationValues" not in resource["Properties"]
    assert "AddonVersion" not in resource["Properties"]  # EKS's default for the cluster version


def test_fsx_csi_driver_cannot_create_or_delete_file_systems(default_stack: Synthesized) -> None:
    _, resource = addons(default_stack)["aws-fsx-csi-driver"]
    role_id = resource["Properties"]["PodIdentityAssociations"][0]["RoleArn"]["Fn::GetAtt"][0]
    [policy] = [
        p["Properties"]["PolicyDocument"]
        for p in default_stack.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    assert [statement["Action"] for statement in policy["Statement"]] == ["fsx:DescribeFileSystems"]
    assert "ManagedPolicyArns" not in default_stack.json["Resources"][role_id]["Properties"]


def test_addon_and_node_group_order(default_stack: Synthesized) -> None:
    by_name = {name: logical_id for name, (logical_id, _) in addons(default_stack).items()}
    resources = default_stack.json["Resources"]
    system_nodes = default_stack.logical_id(default_stack.stack.system_nodes)
    for name in ("coredns", "aws-fsx-csi-driver", "amazon-cloudwatch-observability"):
        assert system_nodes in resources[by_name[name]]["DependsOn"], name
    for name in ("aws-fsx-csi-driver", "amazon-cloudwatch-observability"):
        assert by_name["eks-pod-identity-agent"] in resources[by_name[name]]["DependsOn"], name
    for nodegroup_id in default_stack.resources("AWS::EKS::Nodegroup"):
        assert by_name["vpc-cni"] in resources[nodegroup_id]["DependsOn"]


# --- Images, outputs, deploy order -------------------------------------------------------------


def test_ecr_repository_scans_keeps_tags_immutable_and_expires_images(default_stack: Synthesized) -> None:
    # The training repository; the stack's copies of Volcano's images have theirs (test_image_mirror.py).
    repository = default_stack.resources("AWS::ECR::Repository")[
        default_stack.logical_id(default_stack.stack.images.repository)
    ]
    properties = repository["Properties"]
    assert properties["RepositoryName"] == "trainium/training"
    assert properties["ImageScanningConfiguration"] == {"ScanOnPush": True}
    assert properties["ImageTagMutability"] == "IMMUTABLE"
    lifecycle = json.loads(properties["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
    assert [(rule["selection"]["tagStatus"], rule["selection"]["countType"]) for rule in lifecycle] == [
        ("untagged", "sinceImagePushed"),
        ("any", "imageCountMoreThan"),
    ]


def test_outputs(default_stack: Synthesized) -> None:
    outputs = default_stack.json["Outputs"]
    assert set(outputs) == {
        "ClusterName",
        "UpdateKubeconfigCommand",
        "EcrRepositoryUri",
        "FsxFileSystemId",
        "FsxMountName",
        "FsxDnsName",
        "TrainiumSubnetId",
        "TrainiumAvailabilityZone",
        "DashboardUrl",
    }
    assert (
        outputs["UpdateKubeconfigCommand"]["Value"]
        == "aws eks update-kubeconfig --region us-west-2 --name trainium"
    )
    assert outputs["TrainiumAvailabilityZone"]["Value"] == "us-west-2d (usw2-az4)"
    file_system_id, _ = default_stack.only("AWS::FSx::FileSystem")
    assert outputs["FsxFileSystemId"]["Value"] == ref(file_system_id)
    assert outputs["FsxMountName"]["Value"] == {"Fn::GetAtt": [file_system_id, "LustreMountName"]}


@pytest.mark.parametrize(
    "resource_type", ["AWS::FSx::FileSystem", "AWS::ECR::Repository", "AWS::IAM::Role", "AWS::KMS::Key"]
)
def test_storage_images_and_iam_do_not_wait_for_the_cluster(
    default_stack: Synthesized, resource_type: str
) -> None:
    cluster_id, _ = default_stack.only("AWS::EKS::Cluster")
    for logical_id in default_stack.resources(resource_type):
        assert cluster_id not in depends_on_transitively(default_stack, logical_id), logical_id


def test_stack_is_far_below_the_template_size_limit(
    default_stack: Synthesized, example_stack: Synthesized
) -> None:
    for synthesized in (default_stack, example_stack):
        assert len(json.dumps(synthesized.json, separators=(",", ":"))) < 1_000_000


# --- Root squash (docs/code-integrity.md) ---------------------------------------------------------


def _nid_covers(nid: str, address: str) -> bool:
    """Whether a Lustre NID range such as ``10.0.[64-127].[0-255]@tcp`` names ``address``."""
    pattern, network = nid.split("@")
    assert network == "tcp"
    for part, octet in zip(pattern.split("."), address.split("."), strict=True):
        low, _, high = part.strip("[]").partition("-")
        if not int(low) <= int(octet) <= int(high or low):
            return False
    return True


@pytest.mark.parametrize(
    ("cidr", "nid"),
    [
        ("10.0.64.0/18", "10.0.[64-127].[0-255]@tcp"),
        ("10.0.5.0/24", "10.0.5.[0-255]@tcp"),
        ("172.16.0.0/12", "172.[16-31].[0-255].[0-255]@tcp"),
        ("10.0.1.6/32", "10.0.1.6@tcp"),
    ],
)
def test_a_cidr_block_is_one_lustre_nid_range(cidr: str, nid: str) -> None:
    assert lustre_nid_range(cidr) == nid
    # The FSx API's own limits on a NoSquashNids entry.
    assert re.fullmatch(r"([0-9\[\]\-]*\.){3}([0-9\[\]\-]*)@tcp", nid) and 11 <= len(nid) <= 43


@pytest.mark.parametrize("fixture", ["default_stack", "example_stack"])
def test_root_is_squashed_on_the_trainium_subnet_and_kept_only_where_the_platform_jobs_run(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synthesized: Synthesized = request.getfixturevalue(fixture)
    file_system_id, file_system = synthesized.only("AWS::FSx::FileSystem")
    [trainium_subnet] = file_system["Properties"]["SubnetIds"]
    _, squash = synthesized.only("Custom::LustreRootSquash")
    for call in ("Create", "Update"):  # set on create and on every change: an in-place update
        parts = squash["Properties"][call]["Fn::Join"][1]
        assert {"Ref": file_system_id} in parts
        text = "".join(part for part in parts if isinstance(part, str))
        assert '"action":"updateFileSystem","service":"FSx"' in text
        configuration = synthesized.stack.storage.root_squash.configuration
        assert json.dumps({"RootSquashConfiguration": configuration}, separators=(",", ":")) in text
    assert configuration["RootSquash"] == "65534:65534"
    subnets = synthesized.resources("AWS::EC2::Subnet")
    private = {
        logical_id: subnet["Properties"]
        for logical_id, subnet in subnets.items()
        if not subnet["Properties"].get("MapPublicIpOnLaunch")
    }
    exempt_zones = set(root_zones(synthesized.config))
    assert exempt_zones and synthesized.config.trainium.availability_zone not in exempt_zones
    for logical_id, subnet in private.items():
        first = str(ipaddress.IPv4Network(subnet["CidrBlock"])[1])
        last = str(ipaddress.IPv4Network(subnet["CidrBlock"])[-2])
        exempt = any(
            _nid_covers(nid, first) or _nid_covers(nid, last) for nid in configuration["NoSquashNids"]
        )
        # Every address of a root zone's private subnet keeps root; none of the Trainium subnet does.
        assert exempt == (subnet["AvailabilityZone"] in exempt_zones), logical_id
        if {"Ref": logical_id} == trainium_subnet:
            assert not exempt


def test_the_root_squash_call_may_update_only_this_file_system(default_stack: Synthesized) -> None:
    file_system_id, _ = default_stack.only("AWS::FSx::FileSystem")
    policies = [
        policy["Properties"]["PolicyDocument"]["Statement"]
        for logical_id, policy in default_stack.resources("AWS::IAM::Policy").items()
        if logical_id.startswith("StorageRootSquash")
    ]
    [[statement]] = policies
    assert statement["Action"] == "fsx:UpdateFileSystem"
    assert {"Ref": file_system_id} in statement["Resource"]["Fn::Join"][1]


def test_the_platform_jobs_run_only_in_the_zones_that_keep_root(example_stack: Synthesized) -> None:
    config = example_stack.config
    plan = review_plan(config)
    jobs = [
        manifest
        for step in plan.steps
        for manifest in getattr(step, "manifests", ())
        # batch/v1 Jobs: the Volcano fabric-check Jobs run on Trainium nodes and write nothing to FSx.
        if manifest["kind"] == "Job"
        and manifest["apiVersion"] == "batch/v1"
        and manifest["metadata"]["namespace"] == "trainium-system"
    ]
    assert {job["metadata"]["labels"]["app.kubernetes.io/name"] for job in jobs} == {
        "fsx-layout",
        "dataset-staging",
    }
    for job in jobs:
        [term] = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert term["matchExpressions"] == [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": list(root_zones(config))}
        ]
