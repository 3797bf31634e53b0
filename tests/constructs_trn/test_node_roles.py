"""Roles per purpose (issue 15): what a node's credentials are worth to a pod that reaches them.

A host-network pod (or anything that reaches a node's IMDS) holds the node role. It must be able to
join the cluster and pull the cluster's images, and nothing more: no network-interface control of
the account (the VPC CNI has its own Pod Identity role), no pull from arbitrary repositories.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from constructs_trn.iam_roles import IMAGE_PULL_ACTIONS
from k8s_charts.devices.efa_device_plugin import efa_plugin_image
from tests.conftest import Synthesized

PULL_ACTIONS = {*IMAGE_PULL_ACTIONS, "ecr:BatchCheckLayerAvailability", "ecr:BatchImportUpstreamImage"}


def actions_of(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def resources_of(statement: dict[str, Any]) -> list[Any]:
    resource = statement["Resource"]
    return resource if isinstance(resource, list) else [resource]


def inline_statements(synthesized: Synthesized, role_id: str) -> list[dict[str, Any]]:
    return [
        statement
        for policy in synthesized.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def managed_policies(synthesized: Synthesized, role_id: str) -> list[str]:
    arns = synthesized.json["Resources"][role_id]["Properties"].get("ManagedPolicyArns", [])
    return [json.dumps(arn).rsplit("policy/", 1)[1].split('"')[0] for arn in arns]


def node_role_ids(synthesized: Synthesized) -> dict[str, str]:
    """Node group name -> logical id of its node role."""
    return {
        group["Properties"]["NodegroupName"]: group["Properties"]["NodeRole"]["Fn::GetAtt"][0]
        for group in synthesized.resources("AWS::EKS::Nodegroup").values()
    }


@pytest.fixture(params=["default_stack", "example_stack"])
def stack(request: pytest.FixtureRequest) -> Synthesized:
    synthesized: Synthesized = request.getfixturevalue(request.param)
    return synthesized


def test_trainium_nodes_have_a_role_of_their_own(stack: Synthesized) -> None:
    roles = node_role_ids(stack)
    system = roles.pop(f"{stack.config.name}-system")
    assert roles, "no Trainium node group"
    for group, role in roles.items():
        assert role != system, group
    # One role for all Trainium groups: they run the same kind of pods.
    assert len(set(roles.values())) == 1


def test_every_ec2_role_is_a_node_role(stack: Synthesized) -> None:
    """No other role for EC2 that a node could carry with broader permissions."""
    ec2_roles = {
        logical_id
        for logical_id, role in stack.resources("AWS::IAM::Role").items()
        if "ec2.amazonaws.com" in json.dumps(role["Properties"]["AssumeRolePolicyDocument"])
    }
    assert ec2_roles == set(node_role_ids(stack).values())


def test_node_roles_only_join_the_cluster_and_pull_images(stack: Synthesized) -> None:
    for group, role in node_role_ids(stack).items():
        assert managed_policies(stack, role) == ["AmazonEKSWorkerNodePolicy"], group
        actions = {action for statement in inline_statements(stack, role) for action in actions_of(statement)}
        assert actions <= {"ecr:GetAuthorizationToken", *PULL_ACTIONS, "ecr:CreateRepository"}, group
        assert all(statement["Effect"] == "Allow" for statement in inline_statements(stack, role))


def test_no_node_role_can_touch_network_interfaces(stack: Synthesized) -> None:
    for group, role in node_role_ids(stack).items():
        assert "AmazonEKS_CNI_Policy" not in managed_policies(stack, role), group
        granted = json.dumps(inline_statements(stack, role))
        assert "ec2:" not in granted, group


def test_image_pulls_name_their_repositories(stack: Synthesized) -> None:
    """Pull actions never on ``*``: only the stack's repository, the region's EKS image registry and,
    for the system nodes (where Volcano runs), the stack's copies of Volcano's images."""
    region = stack.config.region
    repository_id = stack.logical_id(stack.stack.images.repository)
    assert stack.stack.image_mirror is not None
    mirror = {stack.logical_id(repository) for repository in stack.stack.image_mirror.repositories.values()}
    assert len(mirror) == 3
    for group, role in node_role_ids(stack).items():
        pulls = [s for s in inline_statements(stack, role) if set(actions_of(s)) & PULL_ACTIONS]
        assert pulls, group
        resources = [resource for statement in pulls for resource in resources_of(statement)]
        assert "*" not in resources, group
        assert {"Fn::GetAtt": [repository_id, "Arn"]} in resources
        copies = {r["Fn::GetAtt"][0] for r in resources if isinstance(r, dict) and "Fn::GetAtt" in r} & mirror
        assert copies == (mirror if group.endswith("-system") else set()), group
        rendered = sorted(json.dumps(resource) for resource in resources)
        eks_registry = [r for r in rendered if "repository/*" in r]
        assert len(eks_registry) == 1, rendered
        assert f":ecr:{region}:602401143452:repository/*" in eks_registry[0]
        # GetAuthorizationToken has no resource-level permissions; it is the one action on *.
        on_everything = [s for s in inline_statements(stack, role) if "*" in resources_of(s)]
        assert [actions_of(s) for s in on_everything] == [["ecr:GetAuthorizationToken"]]


def test_the_efa_plugin_image_comes_from_a_registry_the_nodes_may_pull_from(
    default_stack: Synthesized,
) -> None:
    image = efa_plugin_image(default_stack.config.region)
    account, _, rest = image.partition(".dkr.ecr.")
    region = rest.split(".")[0]
    role = node_role_ids(default_stack)["trn1-32xl"]
    granted = json.dumps(inline_statements(default_stack, role))
    assert f":ecr:{region}:{account}:repository/*" in granted


def test_the_vpc_cni_gets_its_permissions_through_pod_identity(stack: Synthesized) -> None:
    [(addon_id, addon)] = [
        (logical_id, resource)
        for logical_id, resource in stack.resources("AWS::EKS::Addon").items()
        if resource["Properties"]["AddonName"] == "vpc-cni"
    ]
    [association] = addon["Properties"]["PodIdentityAssociations"]
    assert association["ServiceAccount"] == "aws-node"
    role_id = association["RoleArn"]["Fn::GetAtt"][0]
    role = stack.json["Resources"][role_id]["Properties"]
    assert managed_policies(stack, role_id) == ["AmazonEKS_CNI_Policy"]
    trust = json.dumps(role["AssumeRolePolicyDocument"])
    assert "pods.eks.amazonaws.com" in trust
    assert "ec2.amazonaws.com" not in trust
    # aws-node gets its credentials from the Pod Identity agent: the agent's add-on comes first.
    [agent_id] = [
        logical_id
        for logical_id, resource in stack.resources("AWS::EKS::Addon").items()
        if resource["Properties"]["AddonName"] == "eks-pod-identity-agent"
    ]
    assert agent_id in addon["DependsOn"]
    # And every node group waits for both, so no node starts its CNI without credentials.
    for group in stack.resources("AWS::EKS::Nodegroup").values():
        assert {addon_id, agent_id} <= set(group["DependsOn"])


def test_imds_hop_limit_is_one_on_every_launch_template(stack: Synthesized) -> None:
    """Pods are one hop further than the node: with hop limit 1, IMDSv2 answers never reach them."""
    templates = stack.resources("AWS::EC2::LaunchTemplate")
    assert len(templates) == len(stack.resources("AWS::EKS::Nodegroup"))
    for logical_id, template in templates.items():
        options = template["Properties"]["LaunchTemplateData"]["MetadataOptions"]
        assert options == {
            "HttpEndpoint": "enabled",
            "HttpTokens": "required",
            "HttpPutResponseHopLimit": 1,
        }, logical_id
    for group in stack.resources("AWS::EKS::Nodegroup").values():
        assert "LaunchTemplate" in group["Properties"], (
            "a node group without launch template gets EKS's IMDS defaults"
        )


def test_every_pod_identity_role_trusts_only_its_clusters_service_account(stack: Synthesized) -> None:
    """Both trust statements (AssumeRole, TagSession) carry the session-tag conditions EKS documents
    for pods.eks.amazonaws.com: this cluster's ARN, and the namespace and service account of the one
    association that uses the role; no other association in the account can be given the role."""
    associations = [
        (
            "kube-system"
            if a["Properties"]["AddonName"] != "amazon-cloudwatch-observability"
            else "amazon-cloudwatch",
            pia,
        )
        for a in stack.resources("AWS::EKS::Addon").values()
        for pia in a["Properties"].get("PodIdentityAssociations", [])
    ]
    associations += [
        (p["Properties"]["Namespace"], p["Properties"])
        for p in stack.resources("AWS::EKS::PodIdentityAssociation").values()
    ]
    assert len(associations) == 5  # VPC CNI, FSx CSI, CloudWatch agent, cluster autoscaler, node check
    roles = [
        r for r in stack.resources("AWS::IAM::Role").values() if "pods.eks.amazonaws.com" in json.dumps(r)
    ]
    assert len(roles) == len(associations)
    for namespace, association in associations:
        role = stack.json["Resources"][association["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
        statements = role["AssumeRolePolicyDocument"]["Statement"]
        actions = {
            a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
        }
        assert actions == {"sts:AssumeRole", "sts:TagSession"}
        for statement in statements:
            equals = statement["Condition"]["StringEquals"]
            assert equals["aws:RequestTag/kubernetes-namespace"] == namespace
            assert equals["aws:RequestTag/kubernetes-service-account"] == association["ServiceAccount"]
            cluster_arn = json.dumps(equals["aws:RequestTag/eks-cluster-arn"])
            assert f":cluster/{stack.config.name}" in cluster_arn and stack.config.account in cluster_arn
            # Documented keys only: a condition on a key Pod Identity does not send would lock it out.
            assert set(equals) == {
                "aws:RequestTag/eks-cluster-arn",
                "aws:RequestTag/kubernetes-namespace",
                "aws:RequestTag/kubernetes-service-account",
            }


def test_the_runs_private_images_are_pullable_by_the_trainium_role_only() -> None:
    """An image synth accepts is one the nodes may pull: a run's image in another repository of this
    account, or in a declared repository of another account, gets the Trainium node role's pull on
    exactly that repository (issue 33); the system nodes run no training image and get none."""
    from config import parse_config  # noqa: PLC0415
    from tests.config.test_config import default_data  # noqa: PLC0415
    from tests.conftest import synthesize  # noqa: PLC0415

    own = "111122223333.dkr.ecr.us-west-2.amazonaws.com/research/llm:1"
    other = "777788889999.dkr.ecr.us-east-1.amazonaws.com/shared/neuron:2"
    other_arn = "arn:aws:ecr:us-east-1:777788889999:repository/shared/neuron"
    data = default_data()
    data["ecr"]["cross_account_repositories"] = [other_arn]
    data["runs"] += [
        {"name": "own", "script": "train.py", "nodes": 1, "image": own},
        {"name": "other", "script": "train.py", "nodes": 1, "image": other},
    ]
    synthesized = synthesize(parse_config(data))
    roles = node_role_ids(synthesized)
    system = roles.pop("trainium-system")
    (trainium,) = set(roles.values())
    granted = {
        json.dumps(resource)
        for statement in inline_statements(synthesized, trainium)
        if set(actions_of(statement)) == set(IMAGE_PULL_ACTIONS)
        for resource in resources_of(statement)
    }
    wanted = {json.dumps("arn:aws:ecr:us-west-2:111122223333:repository/research/llm"), json.dumps(other_arn)}
    assert wanted <= granted
    system_resources = {
        json.dumps(resource)
        for statement in inline_statements(synthesized, system)
        for resource in resources_of(statement)
    }
    assert not wanted & system_resources
