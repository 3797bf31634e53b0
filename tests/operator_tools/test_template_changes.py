"""operator_tools/template_changes.py: what CloudFormation would do between two templates, read from its
update behaviours (cfn-lint's provider schemas) on small templates whose answer the reference gives."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from operator_tools.template_changes import (
    Change,
    changed_paths,
    render,
    replacement_properties,
    template_changes,
)
from tests.conftest import REPO_ROOT


def _nodegroup(**properties: Any) -> dict[str, Any]:
    return {
        "Type": "AWS::EKS::Nodegroup",
        "Properties": {
            "ClusterName": {"Ref": "Cluster"},
            "NodegroupName": "trn1-32xl",
            "NodeRole": {"Fn::GetAtt": ["NodeRole", "Arn"]},
            "LaunchTemplate": {
                "Id": {"Ref": "Template"},
                "Version": {"Fn::GetAtt": ["Template", "LatestVersionNumber"]},
            },
            "ScalingConfig": {"MinSize": 0, "DesiredSize": 0, "MaxSize": 4},
            **properties,
        },
        "Metadata": {"aws:cdk:path": "TrainiumStack/Trainium-trn1-32xl/Nodegroup/Resource"},
    }


def _template(**resources: dict[str, Any]) -> dict[str, Any]:
    base: dict[str, Any] = {
        "Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {"Name": "trainium"}},
        "NodeRole": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {}}},
        "Template": {
            "Type": "AWS::EC2::LaunchTemplate",
            "Properties": {"LaunchTemplateData": {"InstanceType": "trn1.32xlarge"}},
        },
        "Group": _nodegroup(),
    }
    base.update(resources)
    return {"Resources": base}


def _by_id(changes: list[Change]) -> dict[str, Change]:
    return {change.logical_id: change for change in changes}


def test_the_update_behaviours_come_from_the_provider_schemas() -> None:
    # CloudFormation's reference of AWS::EKS::Nodegroup: "Update requires: Replacement" for these.
    replacing = replacement_properties("AWS::EKS::Nodegroup")
    assert replacing is not None
    assert {"InstanceTypes", "NodeRole", "Subnets", "CapacityType", "NodegroupName"} <= set(replacing)
    assert "ScalingConfig" not in replacing and "LaunchTemplate" not in replacing
    # The Lustre file system's deployment type, which the schema leaves out (CONDITIONAL_REPLACEMENTS).
    assert "LustreConfiguration/DeploymentType" in (replacement_properties("AWS::FSx::FileSystem") or ())
    # A custom resource has no schema: its handler decides.
    assert replacement_properties("Custom::AWSCDK-EKS-KubernetesResource") is None


def test_new_bounds_update_the_group_in_place() -> None:
    before = _template()
    after = _template(Group=_nodegroup(ScalingConfig={"MinSize": 0, "DesiredSize": 0, "MaxSize": 6}))
    (change,) = template_changes(before, after)
    assert (change.action, change.paths, change.replacing) == ("update", ("ScalingConfig/MaxSize",), ())
    assert change.path == "TrainiumStack/Trainium-trn1-32xl/Nodegroup"


def test_a_create_only_property_replaces_and_a_kept_name_makes_it_fail() -> None:
    before = _template(Group=_nodegroup(InstanceTypes=["m6i.2xlarge"]))
    after = _template(Group=_nodegroup(InstanceTypes=["m6i.4xlarge"]))
    (change,) = template_changes(before, after)
    assert (change.action, change.replacing, change.name) == ("replace", ("InstanceTypes",), "trn1-32xl")
    assert change.fails
    renamed = _template(Group=_nodegroup(InstanceTypes=["m6i.4xlarge"], NodegroupName="trn1-32xl-b"))
    (change,) = template_changes(before, renamed)
    assert change.action == "replace" and not change.fails


def test_a_replaced_resource_carries_the_resources_that_refer_to_it() -> None:
    before = _template()
    after = copy.deepcopy(before)
    after["Resources"]["NodeRole"]["Properties"]["Path"] = "/nodes/"  # Path: Replacement
    changes = _by_id(template_changes(before, after))
    assert changes["NodeRole"].action == "replace"
    group = changes["Group"]
    # NodeRole is create-only on a node group: a new role ARN replaces the group (cdk diff: "may be replaced").
    assert (group.action, group.replacing, group.because_of) == ("may replace", ("NodeRole",), ("NodeRole",))


def test_a_new_launch_template_version_reaches_the_group() -> None:
    before = _template()
    after = copy.deepcopy(before)
    after["Resources"]["Template"]["Properties"]["LaunchTemplateData"]["InstanceType"] = "trn2.48xlarge"
    changes = _by_id(template_changes(before, after))
    assert changes["Template"].action == "update"
    assert (changes["Group"].action, changes["Group"].paths) == ("update", ("LaunchTemplate",))


def test_added_removed_and_retyped_resources() -> None:
    before = _template(Old={"Type": "AWS::SSM::Parameter", "Properties": {}})
    after = _template(New={"Type": "AWS::SSM::Parameter", "Properties": {}})
    after["Resources"]["Template"] = {"Type": "AWS::SSM::Parameter", "Properties": {}}
    actions = sorted((change.action, change.logical_id) for change in template_changes(before, after))
    assert ("add", "New") in actions and ("remove", "Old") in actions
    assert ("remove", "Template") in actions and ("add", "Template") in actions


def test_property_paths_and_rendered_values() -> None:
    assert changed_paths({"A": {"B": 1, "C": [1]}}, {"A": {"B": 2, "C": [1, 2]}}) == ["A/B", "A/C"]
    # An intrinsic is one value: a Ref that becomes a GetAtt is one changed path.
    assert changed_paths({"A": {"Ref": "X"}}, {"A": {"Fn::GetAtt": ["X", "Arn"]}}) == ["A"]
    assert (
        render({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":ecr"]]}) == "arn:<AWS::Partition>:ecr"
    )
    assert render({"Fn::GetAtt": ["Role", "Arn"]}) == "<Role.Arn>"


@pytest.mark.parametrize("snapshot", ["TrainiumStack.default.json"])
def test_a_template_against_itself_changes_nothing(snapshot: str) -> None:
    template = json.loads((REPO_ROOT / "tests" / "snapshots" / snapshot).read_text())
    assert template_changes(template, template) == []
