"""A Trainium node group's DesiredSize is the count it runs (constructs_trn/node_group_size.py): the
function that reads it, against a real boto3 EKS client answered by botocore's Stubber, and the
templates that carry it.

EKS's side is read from its API reference (NodegroupScalingConfig: a changed desiredSize resizes
the group, terminating nodes when it is lower; DescribeNodegroup's scalingConfig, releaseVersion and
launchTemplate) and its user guide (Capacity Block groups upgrade at desired size 0); neither EKS
nor CloudFormation runs here.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any, Self

import boto3
import pytest
from botocore.stub import Stubber

from constructs_trn.node_group_size_handler import index
from tests.conftest import Synthesized

CLUSTER, GROUP = "trainium", "trn1-32xl"
RELEASE, TEMPLATE_VERSION = "1.34.7-20260505", "3"


def _properties(**changes: Any) -> dict[str, Any]:
    # CloudFormation hands a custom resource every property as a string.
    return {
        "ServiceToken": "arn:aws:lambda:us-west-2:111122223333:function:size",
        "ClusterName": CLUSTER,
        "NodegroupName": GROUP,
        "NodeSelector": f"trainium/node-group={GROUP}",
        "MinSize": "0",
        "MaxSize": "4",
        "InitialSize": "0",
        "CapacityBlock": "false",
        "ReleaseVersion": RELEASE,
        "LaunchTemplateVersion": TEMPLATE_VERSION,
        "GroupSpec": "{}",
        **{key: str(value) for key, value in changes.items()},
    }


def _event(request_type: str = "Update", **changes: Any) -> dict[str, Any]:
    event = {
        "RequestType": request_type,
        "ResponseURL": "https://cloudformation-custom-resource-response-uswest2.s3.amazonaws.com/x?signed",
        "StackId": "arn:aws:cloudformation:us-west-2:111122223333:stack/TrainiumStack/1",
        "RequestId": "request-1",
        "LogicalResourceId": "Trainiumtrn132xlSize",
        "ResourceType": "Custom::TrainiumNodeGroupSize",
        "ResourceProperties": _properties(**changes),
    }
    if request_type == "Update":
        event["OldResourceProperties"] = _properties()
    return event


@pytest.fixture
def eks() -> Iterator[tuple[Any, Stubber]]:
    session = boto3.session.Session(aws_access_key_id="AKIAIOSFODNN7EXAMPLE", aws_secret_access_key="fake")
    client = session.client("eks", region_name="us-west-2")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def _listed(stubber: Stubber, *names: str) -> None:
    stubber.add_response("list_nodegroups", {"nodegroups": list(names)}, {"clusterName": CLUSTER})


def _runs(stubber: Stubber, desired: int, *, release: str = RELEASE, version: str = TEMPLATE_VERSION) -> None:
    _listed(stubber, "system", GROUP)
    _described(stubber, desired, release=release, version=version)


def _described(
    stubber: Stubber, desired: int, *, release: str = RELEASE, version: str = TEMPLATE_VERSION
) -> None:
    stubber.add_response(
        "describe_nodegroup",
        {
            "nodegroup": {
                "nodegroupName": GROUP,
                "clusterName": CLUSTER,
                "releaseVersion": release,
                "scalingConfig": {"minSize": 0, "maxSize": 4, "desiredSize": desired},
                "launchTemplate": {"id": "lt-0123456789abcdef0", "version": version},
            }
        },
        {"clusterName": CLUSTER, "nodegroupName": GROUP},
    )


@pytest.fixture
def answers(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What the function PUTs to CloudFormation's pre-signed URL."""
    sent: list[dict[str, Any]] = []

    class Answered:
        def __enter__(self) -> Self:
            return self

        def __exit__(self, *_: object) -> None:
            return None

        def read(self) -> bytes:
            return b""

    def urlopen(request: urllib.request.Request, timeout: float) -> Answered:
        assert (request.get_method(), request.get_header("Content-type"), timeout) == ("PUT", "", 30)
        assert request.full_url.startswith("https://cloudformation-custom-resource-response")
        assert isinstance(request.data, bytes)
        sent.append(json.loads(request.data))
        return Answered()

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    return sent


def _answer(event: dict[str, Any], client: Any, answers: list[dict[str, Any]]) -> dict[str, Any]:
    index.handler(event, None, eks=client)
    [answer] = answers
    assert (answer["RequestId"], answer["LogicalResourceId"]) == ("request-1", "Trainiumtrn132xlSize")
    assert answer["PhysicalResourceId"] == f"{CLUSTER}/{GROUP}/size"
    return answer


def test_a_new_group_starts_with_its_initial_size_at_least_min_size(eks: Any, answers: list[Any]) -> None:
    client, stubber = eks
    _listed(stubber, "system")  # the first deploy: not there yet, and not described (no ARN to authorize)
    answer = _answer(_event("Create", InitialSize=0, MinSize=1), client, answers)
    assert (answer["Status"], answer["Data"]) == ("SUCCESS", {"DesiredSize": 1})


@pytest.mark.parametrize(
    ("running", "changes", "expected"),
    [
        pytest.param(3, {"MinSize": 1}, 3, id="higher-min-below-the-count-keeps-it"),
        pytest.param(3, {"MaxSize": 6}, 3, id="higher-max-keeps-it"),
        pytest.param(1, {"MinSize": 2}, 2, id="higher-min-above-the-count-starts-warm-nodes"),
        pytest.param(3, {"InitialSize": 4}, 3, id="desired-size-only-counts-at-creation"),
        pytest.param(3, {"GroupSpec": '{"labels":{"a":"b"}}'}, 3, id="another-label-keeps-it"),
        pytest.param(3, {"ReleaseVersion": "1.34.8-20260610"}, 3, id="an-ami-bump-keeps-it"),
        pytest.param(3, {"MaxSize": 2}, 2, id="a-max-below-the-count-ends-nodes-above-it"),
    ],
)
def test_an_update_carries_the_count_the_group_runs(
    eks: Any, answers: list[Any], running: int, changes: dict[str, Any], expected: int
) -> None:
    """What the fixed DesiredSize got wrong: raising min_size moved it (and with it the nodes)."""
    client, stubber = eks
    _runs(stubber, running)
    answer = _answer(_event(**changes), client, answers)
    assert (answer["Status"], answer["Data"]) == ("SUCCESS", {"DesiredSize": expected})


def test_a_group_on_a_later_page_of_the_list_is_found(eks: Any, answers: list[Any]) -> None:
    client, stubber = eks
    stubber.add_response("list_nodegroups", {"nodegroups": ["a"], "nextToken": "t"}, {"clusterName": CLUSTER})
    stubber.add_response(
        "list_nodegroups", {"nodegroups": [GROUP]}, {"clusterName": CLUSTER, "nextToken": "t"}
    )
    _described(stubber, 3)
    answer = _answer(_event(), client, answers)
    assert answer["Data"] == {"DesiredSize": 3}


def test_a_capacity_block_group_upgrades_at_zero_nodes(eks: Any, answers: list[Any]) -> None:
    client, stubber = eks
    _runs(stubber, 0)
    answer = _answer(_event(CapacityBlock="true", ReleaseVersion="1.34.8-20260610"), client, answers)
    assert (answer["Status"], answer["Data"]) == ("SUCCESS", {"DesiredSize": 0})


@pytest.mark.parametrize(
    "changes",
    [{"ReleaseVersion": "1.34.8-20260610"}, {"LaunchTemplateVersion": "4"}],
    ids=["ami", "template"],
)
def test_a_capacity_block_upgrade_under_running_nodes_is_refused_before_anything_moves(
    eks: Any, answers: list[Any], changes: dict[str, Any]
) -> None:
    client, stubber = eks
    _runs(stubber, 2)
    answer = _answer(_event(CapacityBlock="true", **changes), client, answers)
    assert answer["Status"] == "FAILED" and answer["Data"] == {}
    assert answer["Reason"] == (
        f"node group {GROUP} runs 2 node(s) of its Capacity Block, and this deploy replaces them (another AMI "
        "release or launch template); EKS upgrades a Capacity Block group only at desired size 0, and a job on "
        "them would end: deploy again once no job runs and the autoscaler has removed the nodes (kubectl get "
        f"nodes -l trainium/node-group={GROUP} shows none)"
    )


def test_a_rollback_to_what_the_capacity_block_group_runs_is_never_refused(
    eks: Any, answers: list[Any]
) -> None:
    """The request names the versions the group runs (a rollback of a refused upgrade): no replacement."""
    client, stubber = eks
    _runs(stubber, 2)
    event = _event(CapacityBlock="true")
    event["OldResourceProperties"] = _properties(CapacityBlock="true", ReleaseVersion="1.34.8-20260610")
    answer = _answer(event, client, answers)
    assert (answer["Status"], answer["Data"]) == ("SUCCESS", {"DesiredSize": 2})


def test_a_failed_call_fails_the_resource_with_its_reason(eks: Any, answers: list[Any]) -> None:
    client, stubber = eks
    _listed(stubber, GROUP)
    stubber.add_client_error(
        "describe_nodegroup", service_error_code="AccessDeniedException", http_status_code=403
    )
    answer = _answer(_event(), client, answers)
    assert answer["Status"] == "FAILED"
    assert answer["Reason"].startswith("AccessDeniedException: An error occurred (AccessDeniedException)")


def test_delete_touches_nothing(eks: Any, answers: list[Any]) -> None:
    client, _ = eks  # no response stubbed: a call would fail the test
    assert _answer(_event("Delete"), client, answers)["Status"] == "SUCCESS"


# --- the templates ---------------------------------------------------------------------------------


def _trainium_groups(synthesized: Synthesized) -> dict[str, dict[str, Any]]:
    return {
        logical_id: resource["Properties"]
        for logical_id, resource in synthesized.resources("AWS::EKS::Nodegroup").items()
        if resource["Properties"]["AmiType"].endswith("NEURON")
    }


@pytest.fixture(params=["default_stack", "example_stack"])
def synthesized(request: pytest.FixtureRequest) -> Synthesized:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def test_every_trainium_groups_desired_size_is_what_it_runs(synthesized: Synthesized) -> None:
    sizes = synthesized.resources("Custom::TrainiumNodeGroupSize")
    groups = _trainium_groups(synthesized)
    assert len(sizes) == len(groups) == len(synthesized.config.trainium.node_groups)
    for properties in groups.values():
        scaling = properties["ScalingConfig"]
        [size_id] = [
            size_id for size_id in sizes if scaling["DesiredSize"] == {"Fn::GetAtt": [size_id, "DesiredSize"]}
        ]
        size = sizes[size_id]["Properties"]
        configured = next(
            g for g in synthesized.config.trainium.node_groups if g.name == properties["NodegroupName"]
        )
        assert (scaling["MinSize"], scaling["MaxSize"]) == (configured.min_size, configured.max_size)
        assert (size["NodegroupName"], size["MinSize"], size["MaxSize"]) == (
            configured.name,
            configured.min_size,
            configured.max_size,
        )
        assert size["InitialSize"] == max(configured.desired_size, configured.min_size)
        assert size["CapacityBlock"] == ("true" if configured.capacity_type == "capacity_block" else "false")
        # What the group runs is compared with what the template asks for.
        assert size["ReleaseVersion"] == properties["ReleaseVersion"]
        assert size["LaunchTemplateVersion"] == properties["LaunchTemplate"]["Version"]
        assert int(sizes[size_id]["Properties"]["ServiceTimeout"]) <= 120


def test_the_system_group_keeps_its_configured_size(default_stack: Synthesized) -> None:
    """The autoscaler does not size the system nodes: their count is the configuration's."""
    [system] = [
        resource["Properties"]
        for resource in default_stack.resources("AWS::EKS::Nodegroup").values()
        if not resource["Properties"]["AmiType"].endswith("NEURON")
    ]
    assert system["ScalingConfig"]["DesiredSize"] == default_stack.config.system_nodes.desired_size


def test_the_function_may_only_describe_this_clusters_node_groups(default_stack: Synthesized) -> None:
    [(function_id, function)] = [
        (logical_id, resource)
        for logical_id, resource in default_stack.resources("AWS::Lambda::Function").items()
        if logical_id.startswith("NodeGroupSizeFunction")
    ]
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = [
        statement
        for policy in default_stack.resources("AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    # List and describe this cluster's node groups; write its own log group; nothing else.
    assert sorted(json.dumps(statement["Action"]) for statement in statements) == [
        '"eks:DescribeNodegroup"',
        '"eks:ListNodegroups"',
        '["logs:CreateLogStream", "logs:PutLogEvents"]',
    ]
    [describe] = [statement for statement in statements if statement["Action"] == "eks:DescribeNodegroup"]
    assert describe["Resource"]["Fn::Join"][1][-2:] == [
        {"Ref": default_stack.logical_id(default_stack.stack.cluster.cluster)},
        "/*",
    ]
    assert not default_stack.resources("AWS::IAM::Role")[role]["Properties"].get("ManagedPolicyArns")
    assert function["Properties"]["Timeout"] == 60 and function_id
