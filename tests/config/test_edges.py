"""The stack's edges (issue 15): the S3 data repository, log encryption, the deployment check's path."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from config import ConfigError, parse_config
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG, Synthesized, synthesize
from tests.yaml_edits import with_change


def example_with(path: str, value: Any) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    return with_change(data, path, value)


def bucket_owner_checks(
    synthesized: Synthesized, bucket: str = "my-training-data"
) -> dict[str, dict[str, Any]]:
    """The owner checks of ``bucket`` (the example's import bucket; its export bucket has its own)."""
    return {
        logical_id: check
        for logical_id, check in synthesized.resources("Custom::S3BucketOwner").items()
        if check_call(check, "Create")["parameters"]["Bucket"] == bucket
    }


def check_call(check: dict[str, Any], event: str) -> dict[str, Any]:
    create = check["Properties"][event]
    rendered = (
        create if isinstance(create, str) else "".join(p for p in create["Fn::Join"][1] if isinstance(p, str))
    )
    call: dict[str, Any] = json.loads(rendered)
    return call


# --- S3 data repository ------------------------------------------------------------------------


def test_the_data_repository_links_a_bucket_only_after_its_owner_is_checked(
    example_stack: Synthesized,
) -> None:
    [(check_id, check)] = bucket_owner_checks(example_stack).items()
    for event in ("Create", "Update"):
        call = check_call(check, event)
        assert (call["service"], call["action"]) == ("S3", "headBucket")
        assert call["parameters"] == {
            "Bucket": "my-training-data",
            "ExpectedBucketOwner": example_stack.config.account,
        }
    [(association_id, association)] = [
        (logical_id, association)
        for logical_id, association in example_stack.resources("AWS::FSx::DataRepositoryAssociation").items()
        if association["Properties"]["FileSystemPath"] == "/s3"
    ]
    assert check_id in association["DependsOn"], association_id


def test_the_owner_check_may_only_head_that_bucket(example_stack: Synthesized) -> None:
    [check_id] = bucket_owner_checks(example_stack)
    policies = [
        policy["Properties"]["PolicyDocument"]["Statement"]
        for policy in example_stack.resources("AWS::IAM::Policy").values()
        if check_id in str(policy.get("DependsOn", []))
        or "S3BucketOwner" in str(policy["Properties"]["PolicyName"])
    ]
    assert policies == [
        [
            {
                "Action": "s3:ListBucket",
                "Effect": "Allow",
                "Resource": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::my-training-data"]]},
            }
        ]
    ]


def test_no_bucket_no_check(default_stack: Synthesized) -> None:
    assert bucket_owner_checks(default_stack) == {}


def test_a_bucket_of_another_account_must_be_named_and_is_checked_against_that_account() -> None:
    config = parse_config(example_with("fsx.s3_bucket_owner", "777788889999"))
    [check] = bucket_owner_checks(synthesize(config)).values()
    assert check_call(check, "Create")["parameters"]["ExpectedBucketOwner"] == "777788889999"


def test_a_scratch_file_system_imports_only_after_the_owner_check() -> None:
    data = example_with("fsx.deployment_type", "SCRATCH_2")
    data = with_change(with_change(data, "fsx.throughput_mib_per_tib", ...), "fsx.storage_capacity_gib", 1200)
    # SCRATCH_2 keeps no backups and exports nothing (tests/constructs_trn/test_backups.py).
    data = with_change(with_change(data, "fsx.backups", "none"), "fsx.backup_s3_path", ...)
    synthesized = synthesize(parse_config(data))
    [check_id] = bucket_owner_checks(synthesized)
    file_system_id, file_system = synthesized.only("AWS::FSx::FileSystem")
    assert file_system["Properties"]["LustreConfiguration"]["ImportPath"] == "s3://my-training-data/bert"
    assert check_id in file_system["DependsOn"], file_system_id


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"fsx.s3_bucket_owner": "777788889999", "fsx.s3_import_path": None},
            (
                "env.yaml: fsx.s3_bucket_owner: 777788889999 owns no bucket here: s3_import_path is null; set it, "
                "or remove s3_bucket_owner"
            ),
        ),
        (
            {"fsx.s3_bucket_owner": "7777"},
            "env.yaml: fsx.s3_bucket_owner: '7777' is not a 12-digit AWS account id",
        ),
    ],
)
def test_bucket_owner_problems_are_one_line(changes: dict[str, Any], expected: str) -> None:
    data: dict[str, Any] = yaml.safe_load(DEFAULT_CONFIG.read_text())
    for path, value in changes.items():
        data = with_change(data, path, value)
    with pytest.raises(ConfigError) as raised:
        parse_config(data, source="env.yaml")
    assert raised.value.lines() == [expected]


# --- Log encryption ----------------------------------------------------------------------------


def logs_key(synthesized: Synthesized) -> str:
    [key_id] = [
        logical_id
        for logical_id, key in synthesized.resources("AWS::KMS::Key").items()
        if "CloudWatch Logs" in key["Properties"]["Description"]
    ]
    return key_id


def test_every_log_group_in_the_template_uses_the_logs_key(default_stack: Synthesized) -> None:
    key = logs_key(default_stack)
    groups = default_stack.resources("AWS::Logs::LogGroup")
    assert len(groups) >= 4  # flow logs, the kubectl handler and its provider, the custom-resource function
    for logical_id, group in groups.items():
        assert group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key, "Arn"]}, logical_id


def test_every_lambda_function_writes_to_an_encrypted_group(default_stack: Synthesized) -> None:
    """A function without a log group in the template would write to one Lambda creates, unencrypted."""
    names = json.dumps(
        [
            group["Properties"].get("LogGroupName")
            for group in default_stack.resources("AWS::Logs::LogGroup").values()
        ]
    )
    for logical_id, function in default_stack.resources("AWS::Lambda::Function").items():
        configured = function["Properties"].get("LoggingConfig", {}).get("LogGroup")
        assert configured is not None or json.dumps({"Ref": logical_id}) in names, logical_id


def test_service_log_groups_get_the_key_whether_they_exist_or_not(default_stack: Synthesized) -> None:
    key = {"Fn::GetAtt": [logs_key(default_stack), "Arn"]}
    name = default_stack.config.name
    created = {
        check_call(resource, "Create")["parameters"]["logGroupName"]: (logical_id, resource)
        for logical_id, resource in default_stack.resources("Custom::ServiceLogGroup").items()
    }
    expected = {
        f"/aws/eks/{name}/cluster",
        *(
            f"/aws/containerinsights/{name}/{kind}"
            for kind in ("application", "dataplane", "host", "performance")
        ),
    }
    assert set(created) == expected
    for logical_id, resource in default_stack.resources("Custom::ServiceLogGroupKey").items():
        for event in ("Create", "Update"):
            call = check_call(resource, event)
            assert call["action"] == "associateKmsKey"
            assert call["parameters"]["logGroupName"] in expected
        create_id, create = created[check_call(resource, "Create")["parameters"]["logGroupName"]]
        assert create_id in resource["DependsOn"], logical_id
        # An existing group (a stack deployed before) is no error; the association then encrypts it.
        assert check_call(create, "Create")["ignoreErrorCodesMatching"] == "ResourceAlreadyExistsException"
        assert key_reference_in(resource, key)


def key_reference_in(resource: dict[str, Any], key: dict[str, Any]) -> bool:
    return json.dumps(key) in json.dumps(resource["Properties"]["Create"])


def test_the_logs_key_admits_only_cloudwatch_logs_of_this_account_and_region(
    default_stack: Synthesized,
) -> None:
    key = default_stack.json["Resources"][logs_key(default_stack)]
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "Retain"
    [logs] = [
        s
        for s in key["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Sid") == "CloudWatchLogsOfThisAccountAndRegion"
    ]
    assert logs["Principal"] == {"Service": "logs.us-west-2.amazonaws.com"} or "logs." in json.dumps(
        logs["Principal"]
    )
    assert "kms:Decrypt*" in logs["Action"] and "kms:GenerateDataKey*" in logs["Action"]
    condition = json.dumps(logs["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"])
    assert ":logs:" in condition and "log-group:*" in condition and "AWS::AccountId" in condition
