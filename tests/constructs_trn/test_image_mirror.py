"""Volcano's Docker Hub images are copied into the account at deploy, and the nodes pull the copies.

What the template says (the copy itself runs in AWS: cdk-ecr-deployment's Lambda, docs/supply-chain.md).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from cluster_facts.versions import VOLCANO_IMAGE_NAMES, VOLCANO_IMAGE_TAG
from cluster_plan.kubernetes_values import mirrored_images, review_plan
from config import parse_config
from constructs_trn.image_mirror import COPY_FUNCTION_ID_PREFIX
from tests.conftest import DEFAULT_CONFIG, Synthesized

SECRET = "arn:aws:secretsmanager:us-west-2:111122223333:secret:ecr-pullthroughcache/hub-AbCdEf"


def config_with(**ecr: Any) -> Any:
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data.setdefault("ecr", {}).update(ecr)
    return parse_config(data, source=str(DEFAULT_CONFIG))


def test_the_default_copies_each_volcano_image_into_a_repository_of_its_own(
    default_stack: Synthesized,
) -> None:
    repositories = {
        resource["Properties"]["RepositoryName"]: (logical_id, resource)
        for logical_id, resource in default_stack.resources("AWS::ECR::Repository").items()
        if "/mirror/" in resource["Properties"].get("RepositoryName", "")
    }
    assert sorted(repositories) == sorted(f"trainium/mirror/docker.io/{name}" for name in VOLCANO_IMAGE_NAMES)
    for _, resource in repositories.values():
        # Fixed names go with the stack (a retained one would collide with the next deploy's).
        assert resource["Properties"]["ImageTagMutability"] == "IMMUTABLE"
        assert resource["Properties"]["EmptyOnDelete"] is True
        assert resource["DeletionPolicy"] == "Delete"
        assert resource["Properties"]["ImageScanningConfiguration"] == {"ScanOnPush": True}
    copies = default_stack.resources("Custom::CDKECRDeployment")
    assert sorted(copy["Properties"]["SrcImage"] for copy in copies.values()) == sorted(
        f"docker://docker.io/{name}:{VOLCANO_IMAGE_TAG}" for name in VOLCANO_IMAGE_NAMES
    )
    for copy in copies.values():
        destination = json.dumps(copy["Properties"]["DestImage"])
        [repository] = [logical_id for logical_id, _ in repositories.values() if logical_id in destination]
        assert destination.endswith(f':{VOLCANO_IMAGE_TAG}"]]}}')
        assert repository


def test_the_copy_runs_in_the_private_subnets_with_a_role_that_pushes_to_the_copies_only(
    default_stack: Synthesized,
) -> None:
    [(function_id, function)] = [
        (logical_id, resource)
        for logical_id, resource in default_stack.resources("AWS::Lambda::Function").items()
        if logical_id.startswith(COPY_FUNCTION_ID_PREFIX.replace(":", ""))
    ]
    subnets = json.dumps(function["Properties"]["VpcConfig"]["SubnetIds"])
    assert "PrivateSubnet" in subnets and "Public" not in subnets
    role_id = function["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = [
        statement
        for policy in default_stack.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    on_everything = [s for s in statements if s["Resource"] == "*"]
    assert [s["Action"] for s in on_everything] == ["ecr:GetAuthorizationToken"]
    mirror = {
        logical_id
        for logical_id, resource in default_stack.resources("AWS::ECR::Repository").items()
        if "/mirror/" in resource["Properties"].get("RepositoryName", "")
    }
    for statement in statements:
        if statement["Resource"] == "*":
            continue
        assert {resource["Fn::GetAtt"][0] for resource in statement["Resource"]} == mirror
        assert not any(action.startswith("s3:") for action in statement["Action"])
    # The copy's first log line goes to the stack's encrypted group, which exists before any copy runs.
    [(group_id, group)] = [
        (logical_id, resource)
        for logical_id, resource in default_stack.resources("AWS::Logs::LogGroup").items()
        if function_id in json.dumps(resource["Properties"].get("LogGroupName", ""))
    ]
    assert "KmsKeyId" in group["Properties"]
    for copy in default_stack.resources("Custom::CDKECRDeployment").values():
        assert group_id in copy["DependsOn"]


def test_the_volcano_release_waits_for_the_copies(default_stack: Synthesized) -> None:
    [release] = [
        resource
        for resource in default_stack.resources("Custom::AWSCDK-EKS-HelmChart").values()
        if resource["Properties"]["Release"] == "volcano"
    ]
    assert set(default_stack.resources("Custom::CDKECRDeployment")) <= set(release["DependsOn"])


def test_nothing_is_copied_when_the_cache_serves_docker_hub_or_is_off() -> None:
    for config in (
        config_with(upstream_credentials={"docker.io": SECRET}),
        config_with(pull_through_cache=False),
    ):
        assert config.ecr.mirrored_registries == frozenset()
        assert mirrored_images(config, review_plan(config)) == []


def test_the_copies_are_exactly_the_images_the_plan_resolves_to_the_mirror() -> None:
    config = config_with()
    copies = mirrored_images(config, review_plan(config))
    assert sorted(copies) == sorted(
        (f"docker.io/{name}:{VOLCANO_IMAGE_TAG}", f"trainium/mirror/docker.io/{name}")
        for name in VOLCANO_IMAGE_NAMES
    )
