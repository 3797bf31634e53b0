"""No hidden admins (issue 15): every principal with Kubernetes access is an access entry in the template."""

from __future__ import annotations

import json
from fnmatch import fnmatch
from typing import Any

import pytest
import yaml

from config import ConfigError, parse_config
from tests.conftest import DEFAULT_CONFIG, REPO_ROOT, Synthesized, synthesize
from tests.yaml_edits import with_change


def cluster_properties(synthesized: Synthesized) -> dict[str, Any]:
    _, cluster = synthesized.only("AWS::EKS::Cluster")
    properties: dict[str, Any] = cluster["Properties"]
    return properties


def kubectl_handler_role(synthesized: Synthesized) -> str:
    [handler] = [
        resource["Properties"]
        for resource in synthesized.resources("AWS::Lambda::Function").values()
        if resource["Properties"].get("Description") == "onEvent handler for EKS kubectl resource provider"
    ]
    role: str = handler["Role"]["Fn::GetAtt"][0]
    return role


def test_the_cluster_creator_gets_no_hidden_admin_entry(default_stack: Synthesized) -> None:
    access = cluster_properties(default_stack)["AccessConfig"]
    assert access == {"AuthenticationMode": "API", "BootstrapClusterCreatorAdminPermissions": False}


def test_the_kubectl_handler_keeps_its_own_visible_admin_entry(default_stack: Synthesized) -> None:
    """Without the creator's entry the handler still applies manifests: aws-eks-v2 gives its role an entry."""
    role = kubectl_handler_role(default_stack)
    [entry] = [
        entry["Properties"]
        for entry in default_stack.resources("AWS::EKS::AccessEntry").values()
        if entry["Properties"]["PrincipalArn"] == {"Fn::GetAtt": [role, "Arn"]}
    ]
    [policy] = entry["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(policy["PolicyArn"])


def test_cluster_admins_are_the_handler_and_the_configured_roles(example_stack: Synthesized) -> None:
    admins = sorted(
        json.dumps(entry["Properties"]["PrincipalArn"])
        for entry in example_stack.resources("AWS::EKS::AccessEntry").values()
        if "AmazonEKSClusterAdminPolicy" in json.dumps(entry["Properties"].get("AccessPolicies", []))
    )
    expected = sorted(
        [
            json.dumps({"Fn::GetAtt": [kubectl_handler_role(example_stack), "Arn"]}),
            *(json.dumps(arn) for arn in example_stack.config.cluster.admin_role_arns),
        ]
    )
    assert admins == expected


def test_a_cluster_created_before_keeps_its_template_and_so_its_cluster() -> None:
    """The property forces a new cluster when it changes, so keep_creator_admin leaves it out, as before."""
    default = yaml.safe_load(DEFAULT_CONFIG.read_text())
    config = parse_config(with_change(default, "cluster.keep_creator_admin", True))
    kept = synthesize(config)
    assert cluster_properties(kept)["AccessConfig"] == {"AuthenticationMode": "API"}


NOBODY = (
    "env.yaml: cluster.admin_role_arns: empty, so nobody could use kubectl after the deploy; allowed: one or "
    "more IAM roles of the stack's account, e.g. the one you deploy with (aws sts get-caller-identity names "
    "it, assumed-role/<Role>/...; aws iam get-role --role-name <Role> --query Role.Arn prints its ARN), "
    "docs/access.md"
)


def _problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_config(data, source="env.yaml")
    return raised.value.lines()


@pytest.mark.parametrize("admins", [[], None, "omitted"], ids=["empty", "all-commented-out", "omitted"])
def test_a_configuration_that_names_no_admin_is_refused_in_one_line(admins: Any) -> None:
    """The first deploy must leave someone who can use kubectl: the creator gets no hidden entry."""
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    if admins == "omitted":
        del data["cluster"]["admin_role_arns"]
    else:
        data["cluster"]["admin_role_arns"] = admins
    assert [line for line in _problems(data) if "admin_role_arns" in line] == [NOBODY]


def test_one_admin_role_is_enough_and_gets_cluster_admin() -> None:
    default = yaml.safe_load(DEFAULT_CONFIG.read_text())
    role = "arn:aws:iam::111122223333:role/aws-reserved/sso.amazonaws.com/us-west-2/AWSReservedSSO_Admin_0123"
    config = parse_config(with_change(default, "cluster.admin_role_arns", [role]))
    assert config.cluster.admin_role_arns == [role]


def test_a_cluster_created_before_may_rely_on_its_creators_entry() -> None:
    """keep_creator_admin: the cluster's creator keeps the entry EKS gave it, so no role is required."""
    default = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data = with_change(
        with_change(default, "cluster.admin_role_arns", []), "cluster.keep_creator_admin", True
    )
    assert parse_config(data).cluster.admin_role_arns == []


def test_every_shipped_configuration_names_an_admin() -> None:
    """What a new user copies (default, example, the pipeline's environments) deploys with an admin."""
    files = [
        DEFAULT_CONFIG,
        REPO_ROOT / "config" / "example.yaml",
        *sorted((REPO_ROOT / "config" / "environments").glob("*.yaml")),
    ]
    for path in files:
        assert yaml.safe_load(path.read_text())["cluster"]["admin_role_arns"], path


def test_the_default_configurations_admin_gets_its_entry(default_stack: Synthesized) -> None:
    [role] = default_stack.config.cluster.admin_role_arns
    entries = [entry["Properties"] for entry in default_stack.resources("AWS::EKS::AccessEntry").values()]
    [entry] = [entry for entry in entries if entry["PrincipalArn"] == role]
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(entry["AccessPolicies"])


def test_the_cluster_is_named_so_a_replacement_is_refused_not_performed(default_stack: Synthesized) -> None:
    """CloudFormation cannot replace a resource with a custom name: switching the creator's entry on a
    deployed cluster fails the update before anything changes, instead of a new, empty cluster."""
    assert cluster_properties(default_stack)["Name"] == default_stack.config.name


def test_the_documented_guard_matches_the_handler_its_framework_and_their_roles(
    default_stack: Synthesized,
) -> None:
    """docs/access.md's SCP names the functions and roles by pattern; CloudFormation names them
    <stack>-<logical id, truncated>-<suffix>. The patterns must match what this template produces."""
    text = (REPO_ROOT / "docs" / "access.md").read_text()
    policy = json.loads(text.split("```json\n", 1)[1].split("```", 1)[0])
    functions, roles = policy["Statement"]
    stack = default_stack.stack.stack_name
    handler_id = next(
        logical_id
        for logical_id, resource in default_stack.resources("AWS::Lambda::Function").items()
        if resource["Properties"].get("Description") == "onEvent handler for EKS kubectl resource provider"
    )
    framework_id = next(
        logical_id
        for logical_id in default_stack.resources("AWS::Lambda::Function")
        if "frameworkonEvent" in logical_id
    )
    for logical_id in (handler_id, framework_id):
        name = f"{stack}-{logical_id[:30]}-ABCDEF123456"
        assert fnmatch(f"arn:aws:lambda:us-west-2:111122223333:function:{name}", functions["Resource"]), (
            logical_id
        )
    handler_role = kubectl_handler_role(default_stack)
    framework_role = default_stack.json["Resources"][framework_id]["Properties"]["Role"]["Fn::GetAtt"][0]
    for role_id in (handler_role, framework_role):
        arn = f"arn:aws:iam::111122223333:role/{stack}-{role_id[:30]}-ABCDEF123456"
        assert fnmatch(arn, roles["Resource"]), role_id
        assert any(
            fnmatch(arn, pattern) for pattern in functions["Condition"]["ArnNotLike"]["aws:PrincipalArn"]
        )
    assert (
        "lambda:InvokeFunction" in functions["Action"] and "lambda:UpdateFunctionCode" in functions["Action"]
    )
    assert "iam:PassRole" in roles["Action"]
