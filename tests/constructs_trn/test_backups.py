"""Backups or a written choice (fsx.backups): FSx automatic daily backups, each team's directory
exported to S3, or none, said in the file; every combination FSx refuses is one line here first.

What FSx allows is read from the FSx for Lustre user guide ("Protecting your data with backups":
backups only of persistent file systems linked to no S3 bucket; "Linking your file system to an S3
bucket": at most 8 data repository associations, paths that do not overlap, none on a file system
with backups on) and tested here as the configuration's reading of it; FSx itself cannot run here.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_ec2 as ec2
from aws_cdk.assertions import Template

from config import ConfigError, parse_config
from constructs_trn.lustre_storage import LustreStorage
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG, Synthesized
from tests.yaml_edits import with_change


def default_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(DEFAULT_CONFIG.read_text())
    return data


def fsx(**keys: Any) -> dict[str, Any]:
    """The default configuration with its fsx section replaced by ``keys`` (PERSISTENT_2 unless said)."""
    data = default_data()
    data["fsx"] = {"deployment_type": "PERSISTENT_2", "storage_capacity_gib": 1200, **keys}
    return data


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_config(data, source="env.yaml")
    return raised.value.lines()


# --- accepted ------------------------------------------------------------------------------------


def test_a_persistent_file_system_gets_daily_backups_for_a_week_by_default() -> None:
    settings = parse_config(fsx()).fsx
    assert (settings.backups, settings.backup_retention_days, settings.backup_s3_path) == ("daily", 7, None)


def test_each_choice_is_accepted_where_fsx_offers_it() -> None:
    daily = parse_config(fsx(backups="daily", backup_retention_days=30, backup_start_time_utc="03:30")).fsx
    assert (daily.backup_retention_days, daily.backup_start_time_utc) == (30, "03:30")
    exported = parse_config(fsx(backups="s3", backup_s3_path="s3://checkpoints/trn")).fsx
    assert (exported.exported, exported.backup_retention_days) == (True, None)
    assert parse_config(fsx(backups="none")).fsx.backups == "none"
    scratch = parse_config(fsx(deployment_type="SCRATCH_2", backups="none")).fsx
    assert (scratch.backups, scratch.backup_retention_days) == ("none", None)
    linked = parse_config(
        fsx(s3_import_path="s3://data/bert", backups="s3", backup_s3_path="s3://data/checkpoints")
    ).fsx
    assert linked.exported


# --- refused, one line each -------------------------------------------------------------------------

SCRATCH = (
    "is not offered by SCRATCH_2: FSx backs up persistent file systems only, and this stack links S3 to "
    "SCRATCH_2 by its import path alone; allowed: none (docs/costs.md says what is then lost with a file "
    "server), or deployment_type PERSISTENT_2"
)
LINKED = (
    "env.yaml: fsx.backups: daily backups are not offered for a file system linked to S3 (s3_import_path): FSx "
    "backs up no such file system; allowed: s3 (each team's directory exported to backup_s3_path) or none "
    "(docs/costs.md)"
)

REFUSED = [
    pytest.param(
        fsx(deployment_type="SCRATCH_2"),
        f"env.yaml: fsx.backups: the default (daily) {SCRATCH}",
        id="scratch-by-default",
    ),
    pytest.param(
        fsx(deployment_type="SCRATCH_2", backups="daily"),
        f"env.yaml: fsx.backups: 'daily' {SCRATCH}",
        id="scratch-daily",
    ),
    pytest.param(
        fsx(deployment_type="SCRATCH_2", backups="s3", backup_s3_path="s3://ckpt/p"),
        f"env.yaml: fsx.backups: 's3' {SCRATCH}",
        id="scratch-exported",
    ),
    pytest.param(fsx(s3_import_path="s3://data/bert"), LINKED, id="linked-by-default"),
    pytest.param(fsx(s3_import_path="s3://data/bert", backups="daily"), LINKED, id="linked-daily"),
    pytest.param(
        fsx(backup_retention_days=91),
        "env.yaml: fsx.backup_retention_days: 91 days is out of range; allowed: 1 to 90 (FSx keeps automatic "
        "backups 90 days at most)",
        id="retention-too-long",
    ),
    pytest.param(
        fsx(backup_retention_days=0),
        "env.yaml: fsx.backup_retention_days: 0 days is out of range; allowed: 1 to 90 (FSx keeps automatic "
        "backups 90 days at most)",
        id="retention-zero-is-not-none",
    ),
    pytest.param(
        fsx(backups="none", backup_retention_days=7),
        "env.yaml: fsx.backup_retention_days: 7 days keep nothing with backups: none; allowed: only with backups: daily",
        id="retention-without-backups",
    ),
    pytest.param(
        fsx(backups="s3", backup_s3_path="s3://ckpt/p", backup_start_time_utc="03:00"),
        "env.yaml: fsx.backup_start_time_utc: 03:00 starts nothing with backups: s3; allowed: only with backups: daily",
        id="start-time-with-s3",
    ),
    pytest.param(
        fsx(backup_start_time_utc="3am"),
        "env.yaml: fsx.backup_start_time_utc: '3am' is not a time of day HH:MM such as 03:00",
        id="start-time-format",
    ),
    pytest.param(
        fsx(backups="s3"),
        "env.yaml: fsx.backup_s3_path: required with backups: s3: the S3 prefix each team's directory is "
        "exported to, such as s3://my-checkpoints/trainium (a bucket of this account)",
        id="s3-without-a-path",
    ),
    pytest.param(
        fsx(backups="daily", backup_s3_path="s3://ckpt/p"),
        "env.yaml: fsx.backup_s3_path: s3://ckpt/p receives nothing with backups: daily; allowed: only with backups: s3",
        id="path-without-s3",
    ),
    pytest.param(
        fsx(s3_import_path="s3://data/bert", backups="s3", backup_s3_path="s3://data"),
        "env.yaml: fsx.backup_s3_path: s3://data overlaps s3_import_path (s3://data/bert): FSx links each S3 "
        "prefix to one directory only; allowed: a prefix outside the imported one",
        id="export-over-the-import",
    ),
    pytest.param(
        with_change(
            fsx(s3_import_path="s3://data/bert", backups="s3", backup_s3_path="s3://data/checkpoints"),
            "teams",
            [{"name": f"team-{index}"} for index in range(8)],
        ),
        "env.yaml: fsx.backups: s3 exports each team's directory through a data repository association, and this "
        "file needs 9 (8 teams and the s3_import_path); FSx allows 8 per file system; allowed: fewer teams, or "
        "backups: none",
        id="more-associations-than-fsx-takes",
    ),
]


@pytest.mark.parametrize(("data", "expected"), REFUSED)
def test_a_combination_fsx_refuses_is_one_line(data: dict[str, Any], expected: str) -> None:
    assert problems(data) == [expected]


def test_eight_associations_are_still_accepted() -> None:
    teams = [{"name": f"team-{index}"} for index in range(7)]
    data = with_change(
        fsx(s3_import_path="s3://data/bert", backups="s3", backup_s3_path="s3://data/checkpoints"),
        "teams",
        teams,
    )
    assert len(parse_config(data).teams) == 7


# --- the template ------------------------------------------------------------------------------------


def test_the_default_file_system_keeps_daily_backups_a_week(default_stack: Synthesized) -> None:
    _, file_system = default_stack.only("AWS::FSx::FileSystem")
    lustre = file_system["Properties"]["LustreConfiguration"]
    assert (lustre["AutomaticBackupRetentionDays"], lustre["CopyTagsToBackups"]) == (7, True)
    assert default_stack.resources("AWS::FSx::DataRepositoryAssociation") == {}


def test_the_example_exports_each_teams_directory_and_takes_no_backups(example_stack: Synthesized) -> None:
    _, file_system = example_stack.only("AWS::FSx::FileSystem")
    assert file_system["Properties"]["LustreConfiguration"]["AutomaticBackupRetentionDays"] == 0
    exports = {
        association["Properties"]["FileSystemPath"]: association
        for association in example_stack.resources("AWS::FSx::DataRepositoryAssociation").values()
        if "AutoExportPolicy" in association["Properties"]["S3"]
    }
    prefix = example_stack.config.fsx.backup_s3_path
    assert set(exports) == {f"/teams/{team.name}" for team in example_stack.config.teams}
    for path, association in exports.items():
        properties = association["Properties"]
        team = path.rsplit("/", 1)[1]
        assert properties["DataRepositoryPath"] == f"{prefix}/{team}/"
        # A file deleted on the file system stays in S3; nothing in S3 is imported after creation.
        assert properties["S3"] == {"AutoExportPolicy": {"Events": ["NEW", "CHANGED"]}}
        # A new (replacing) file system finds the team's earlier files.
        assert properties["BatchImportMetaDataOnCreate"] is True


def test_the_export_bucket_is_checked_to_be_the_accounts_first(example_stack: Synthesized) -> None:
    checks = {
        logical_id: resource
        for logical_id, resource in example_stack.resources("Custom::S3BucketOwner").items()
        if '"my-training-checkpoints"' in resource["Properties"]["Create"]
    }
    [(check_id, check)] = checks.items()
    assert f'"ExpectedBucketOwner":"{example_stack.config.account}"' in check["Properties"]["Create"]
    for association in example_stack.resources("AWS::FSx::DataRepositoryAssociation").values():
        if "AutoExportPolicy" in association["Properties"]["S3"]:
            assert check_id in association["DependsOn"]


def test_root_squash_waits_for_every_association(example_stack: Synthesized) -> None:
    """FSx runs one administrative action on a file system at a time."""
    [(_, squash)] = example_stack.resources("Custom::LustreRootSquash").items()
    associations = set(example_stack.resources("AWS::FSx::DataRepositoryAssociation"))
    assert len(associations) == 1 + len(example_stack.config.teams)
    assert associations <= set(squash["DependsOn"])


def _storage_template(**choices: Any) -> dict[str, Any]:
    """The storage construct alone, as the stack builds it."""
    stack = cdk.Stack(cdk.App(), "Storage", env=cdk.Environment(account="111122223333", region="us-west-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["us-west-2a", "us-west-2d"], nat_gateways=0)
    LustreStorage(
        stack,
        "Storage",
        name="trn",
        vpc=vpc,
        subnet=vpc.private_subnets[0] if vpc.private_subnets else vpc.isolated_subnets[0],
        client_security_groups=[],
        storage_capacity_gib=1200,
        s3_import_path=None,
        s3_bucket_owner="111122223333",
        removal_policy=cdk.RemovalPolicy.DESTROY,
        root_squash_to="65534:65534",
        root_squash_exempt_cidrs=[],
        **choices,
    )
    resources: dict[str, Any] = Template.from_stack(stack).find_resources("AWS::FSx::FileSystem")
    [file_system] = resources.values()
    lustre: dict[str, Any] = file_system["Properties"]["LustreConfiguration"]
    return lustre


def test_none_writes_zero_days_and_a_start_time_its_window() -> None:
    none = _storage_template(deployment_type="PERSISTENT_2", throughput_mib_per_tib=250)
    assert none["AutomaticBackupRetentionDays"] == 0 and "CopyTagsToBackups" not in none
    daily = _storage_template(
        deployment_type="PERSISTENT_2",
        throughput_mib_per_tib=250,
        backup_retention_days=14,
        backup_start_time_utc="03:30",
    )
    assert (daily["AutomaticBackupRetentionDays"], daily["DailyAutomaticBackupStartTime"]) == (14, "03:30")
    # SCRATCH_2 takes no backup setting at all.
    assert "AutomaticBackupRetentionDays" not in _storage_template(
        deployment_type="SCRATCH_2", throughput_mib_per_tib=None
    )


def test_exports_and_backups_together_are_refused_by_the_construct_too() -> None:
    with pytest.raises(ValueError, match="without automatic backups"):
        _storage_template(
            deployment_type="PERSISTENT_2",
            throughput_mib_per_tib=250,
            backup_retention_days=7,
            exports={"/teams/a": "s3://ckpt/p/a/"},
            exports_owner="111122223333",
        )


def test_the_shipped_files_each_say_what_keeps_their_checkpoints() -> None:
    example = yaml.safe_load(EXAMPLE_CONFIG.read_text())["fsx"]
    assert (example["backups"], example["backup_s3_path"]) == (
        "s3",
        "s3://my-training-checkpoints/trainium-prod",
    )
    assert default_data()["fsx"]["backups"] == "daily"
