"""The configuration file: what is accepted, and one clear line per problem for what is not."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from cluster_plan.kubernetes_values import datasets
from config import ConfigError, StackConfig, load_config, parse_config
from config.consistency import CROSS_CHECKS, zone_id_prefix
from k8s_charts.checks.fabric_check import DEFAULT_MESSAGE_BYTES as FABRIC_DEFAULT_MESSAGE_BYTES
from k8s_charts.checks.fabric_check import DEFAULT_THRESHOLD as FABRIC_DEFAULT_THRESHOLD
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG, REPO_ROOT
from tests.yaml_edits import with_change as change_key


def default_data() -> dict[str, Any]:
    return yaml.safe_load(DEFAULT_CONFIG.read_text())


def problems_of(data: Any) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_config(data, source="env.yaml")
    return raised.value.lines()


def with_change(path: str, value: Any) -> dict[str, Any]:
    return change_key(default_data(), path, value)


def test_default_config_is_the_tutorial_cluster() -> None:
    config = load_config(DEFAULT_CONFIG)
    [run] = config.runs
    group = config.run_node_group(run)
    assert (group.instance_type, group.min_size, group.max_size, run.nodes, run.preset) == (
        "trn1.32xlarge",
        0,
        2,
        2,
        "bert-large",
    )
    assert config.trainium.availability_zone in config.vpc.availability_zones
    assert config.account == "111122223333"


def test_example_config_is_valid_and_shows_trn1n_and_capacity_block() -> None:
    config = load_config(EXAMPLE_CONFIG)
    kinds = {(group.instance_type, group.capacity_type) for group in config.trainium.node_groups}
    assert ("trn1n.32xlarge", "on_demand") in kinds
    assert ("trn1.32xlarge", "capacity_block") in kinds


def test_placement_group_defaults_off_with_a_reservation_and_on_without() -> None:
    config = load_config(EXAMPLE_CONFIG)
    assert all(not group.uses_placement_group for group in config.trainium.node_groups)
    group = with_change("trainium.node_groups.0.placement_group", ...)
    assert parse_config(group).trainium.node_groups[0].uses_placement_group


BAD_CONFIGURATIONS = [
    pytest.param(
        "trainium.node_groups.0.instance_type",
        "trn9.64xlarge",
        "env.yaml: trainium.node_groups[0].instance_type: 'trn9.64xlarge' is not in the Trainium instance catalog; "
        "allowed: trn1.32xlarge, trn1n.32xlarge, trn2.48xlarge, trn2u.48xlarge",
        id="unknown-instance-type",
    ),
    pytest.param(
        "trainium.node_groups.0.min_size",
        3,
        "env.yaml: trainium.node_groups[0].max_size: max_size (2) must be at least min_size (3)",
        id="min-above-max",
    ),
    pytest.param(
        "runs.0.image",
        "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.30.0-ubuntu24.04",
        "env.yaml: runs[0].image: 'public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.30.0-"
        "ubuntu24.04' is Neuron SDK 2.30.0, which supports neither training path (PyTorch/XLA training ended "
        "in Neuron 2.30; TorchNeuron begins in 2.33); allowed: 2.27.1, 2.29.1 (xla); 2.33.0 (native)",
        id="image-of-a-neuron-release-without-xla-training",
    ),
    pytest.param(
        "runs.0.image",
        "111122223333.dkr.ecr.us-west-2.amazonaws.com/trainium/training:bert-sdk2.34.0-1",
        "env.yaml: runs[0].image: '111122223333.dkr.ecr.us-west-2.amazonaws.com/trainium/training:bert-sdk2.34.0-1' "
        "is Neuron SDK 2.34.0, which this cluster's Neuron table does not know; allowed: 2.27.1, 2.29.1 (xla); "
        "2.33.0 (native)",
        id="image-of-an-unknown-neuron-release",
    ),
    pytest.param(
        "trainium.node_groups.0.ami_release",
        "1.33.13-20260714",
        "env.yaml: trainium.node_groups[0].ami_release: '1.33.13-20260714' is an AMI release for Kubernetes "
        "1.33; the cluster runs 1.36: newest of the table without a known fault: 1.36.2-20260714",
        id="ami-release-of-another-kubernetes-version",
    ),
    pytest.param(
        "trainium.node_groups.0.ami_release",
        "latest",
        "env.yaml: trainium.node_groups[0].ami_release: 'latest' is not an EKS AMI release version such as "
        "1.36.2-20260714",
        id="ami-release-not-a-version",
    ),
    pytest.param(
        "trainium.node_groups.0.desired_size",
        3,
        "env.yaml: trainium.node_groups[0].desired_size: 3 is above max_size (2); allowed: 0 to max_size",
        id="desired-size-above-max",
    ),
    pytest.param(
        "autoscaler.scale_down_unneeded_minutes",
        0,
        "env.yaml: autoscaler.scale_down_unneeded_minutes: 0 minutes is out of range; allowed: 1 to 60",
        id="unneeded-time-out-of-range",
    ),
    pytest.param(
        "autoscaler.scale_down_delay_after_add_minutes",
        90,
        "env.yaml: autoscaler.scale_down_delay_after_add_minutes: 90 minutes is out of range; allowed: 0 to 60",
        id="scale-down-delay-out-of-range",
    ),
    pytest.param(
        "autoscaler.max_node_provision_minutes",
        2,
        "env.yaml: autoscaler.max_node_provision_minutes: 2 minutes is out of range; allowed: 5 to 60",
        id="provision-timeout-out-of-range",
    ),
    pytest.param(
        "autoscaler.stuck_run_minutes",
        5,
        "env.yaml: autoscaler.stuck_run_minutes: 5 minutes is out of range; allowed: 10 (longer than an "
        "image pull and the run's own quiet waits) to 1440",
        id="stuck-run-limit-too-short",
    ),
    pytest.param(
        "runs.0.stuck_minutes",
        2000,
        "env.yaml: runs[0].stuck_minutes: 2000 minutes is out of range; allowed: 10 (longer than an "
        "image pull and the run's own quiet waits) to 1440",
        id="a-runs-stuck-limit-too-long",
    ),
    pytest.param(
        "system_nodes.max_size",
        1,
        "env.yaml: system_nodes.max_size: max_size (1) must be at least desired_size (2)",
        id="desired-above-max",
    ),
    pytest.param(
        "trainium.availability_zone",
        "us-west-2b",
        "env.yaml: trainium.availability_zone: 'us-west-2b' must be one of vpc.availability_zones (us-west-2a, us-west-2d)",
        id="trainium-az-outside-vpc",
    ),
    pytest.param(
        "vpc.availability_zones",
        ["us-west-2d"],
        "env.yaml: vpc.availability_zones: EKS needs at least two availability zones, got 1",
        id="one-az",
    ),
    pytest.param(
        "fsx.storage_capacity_gib",
        3600,
        "env.yaml: fsx.storage_capacity_gib: 3600 GiB is not a Lustre size; nearest: 2400 or 4800 "
        "(allowed: 1200 or a multiple of 2400)",
        id="fsx-capacity",
    ),
    pytest.param(
        "fsx.throughput_mib_per_tib",
        200,
        "env.yaml: fsx.throughput_mib_per_tib: 200 is not offered by PERSISTENT_2; allowed: 125, 250, 500, 1000",
        id="fsx-throughput-persistent",
    ),
    pytest.param(
        "vpc.cidr",
        "10.0.0.0/33",
        "env.yaml: vpc.cidr: '10.0.0.0/33' is not an IPv4 CIDR block such as 10.0.0.0/16",
        id="malformed-cidr",
    ),
    pytest.param(
        "cluster.endpoint_public_cidrs",
        ["203.0.113.7/24"],
        "env.yaml: cluster.endpoint_public_cidrs[0]: '203.0.113.7/24' is not an IPv4 CIDR block such as 10.0.0.0/16",
        id="cidr-with-host-bits",
    ),
    pytest.param(
        "cluster.endpoint_public_cidrs",
        ["203.0.113.0/24", "0.0.0.0/0"],
        "env.yaml: cluster.endpoint_public_cidrs[1]: 0.0.0.0/0 admits the whole internet to the API server; "
        "allowed: your own egress ranges of /16 or narrower, or [] for a private endpoint only",
        id="public-endpoint-open-to-all",
    ),
    pytest.param(
        "cluster.endpoint_public_cidrs",
        ["52.0.0.0/10"],
        "env.yaml: cluster.endpoint_public_cidrs[0]: 52.0.0.0/10 is too broad for the public API endpoint (/10); "
        "allowed: /16 or narrower, or [] for a private endpoint only",
        id="public-endpoint-too-broad",
    ),
    pytest.param(
        "account",
        "12345",
        "env.yaml: account: '12345' is not a 12-digit AWS account id",
        id="short-account",
    ),
    pytest.param(
        "account",
        111122223333,
        'env.yaml: account: YAML read the number 111122223333; write it in quotes, for example "111122223333"',
        id="unquoted-account",
    ),
    pytest.param(
        "cluster.kubernetes_version",
        "1.29",
        "env.yaml: cluster.kubernetes_version: '1.29' has no kubectl layer in this project; supported: 1.33, 1.34, "
        "1.35, 1.36",
        id="kubernetes-version-without-layer",
    ),
    pytest.param(
        "trainium.node_groups.0.capacity_type",
        "capacity_block",
        "env.yaml: trainium.node_groups[0].capacity_reservation_id: required for capacity_type capacity_block: "
        "the Capacity Block's cr-... id",
        id="capacity-block-without-reservation",
    ),
    pytest.param(
        "runs.0.nodes",
        4,
        "env.yaml: runs[0].nodes: 4 nodes do not fit node group 'trn1-32xl' (max_size 2)",
        id="run-larger-than-node-group",
    ),
    pytest.param(
        "vpc.availability_zones",
        ["us-east-1a", "us-west-2d"],
        "env.yaml: vpc.availability_zones[0]: 'us-east-1a' is not in region us-west-2",
        id="az-in-other-region",
    ),
    pytest.param(
        "cluster.addon_versions",
        {"vpc-cni": "v1.18.4-eksbuild.1"},
        "env.yaml: cluster.addon_versions: vpc-cni v1.18.4-eksbuild.1 cannot attach efa-only interfaces; use v1.18.5 or later",
        id="vpc-cni-without-efa-only",
    ),
    pytest.param(
        "cluster.kubernetes_version",
        1.3,
        'env.yaml: cluster.kubernetes_version: YAML read the number 1.3; write it in quotes, for example "1.36"',
        id="unquoted-kubernetes-version",
    ),
    pytest.param(
        "name",
        ...,
        "env.yaml: name: required key is missing",
        id="missing-key",
    ),
    pytest.param(
        "fsx.storage_capacity_gib",
        1000,
        "env.yaml: fsx.storage_capacity_gib: 1000 GiB is not a Lustre size; nearest: 1200 "
        "(allowed: 1200 or a multiple of 2400)",
        id="fsx-capacity-below-the-smallest",
    ),
    pytest.param(
        "fsx.storage_capacity_gib",
        1800,
        "env.yaml: fsx.storage_capacity_gib: 1800 GiB is not a Lustre size; nearest: 1200 or 2400 "
        "(allowed: 1200 or a multiple of 2400)",
        id="fsx-capacity-between-the-two-smallest",
    ),
    pytest.param(
        "trainium.availability_zone_id",
        "use1-az6",
        "env.yaml: trainium.availability_zone_id: 'use1-az6' is not a zone id of region us-west-2; "
        "allowed: usw2-az1, usw2-az2, ... (aws ec2 describe-availability-zones --region us-west-2 lists them)",
        id="zone-id-of-another-region",
    ),
    pytest.param(
        "cluster.admin_role_arns",
        ["arn:aws:iam::111122223333:role/Admins", "arn:aws:iam::444455556666:role/Admins"],
        "env.yaml: cluster.admin_role_arns[1]: 'arn:aws:iam::444455556666:role/Admins' is a role of account "
        "444455556666; allowed: roles of account 111122223333",
        id="admin-role-of-another-account",
    ),
    pytest.param(
        "fsx",
        5,
        "env.yaml: fsx: must be a mapping of keys, got the number 5; allowed keys: deployment_type, "
        "storage_capacity_gib, throughput_mib_per_tib, s3_import_path, s3_bucket_owner, removal_policy, backups, "
        "backup_retention_days, backup_start_time_utc, backup_s3_path",
        id="section-that-is-not-a-mapping",
    ),
    pytest.param(
        "observability.dashboard_name",
        "trainium dashboard",
        "env.yaml: observability.dashboard_name: 'trainium dashboard' is not a dashboard name of at most 255 "
        "letters, digits, '-' and '_'",
        id="dashboard-name",
    ),
    pytest.param(
        "observability.dashboard_period_seconds",
        120,
        "env.yaml: observability.dashboard_period_seconds: Input should be 60, 300, 900 or 3600",
        id="dashboard-period",
    ),
    pytest.param(
        "observability.tensorboard_memory_gib",
        128,
        "env.yaml: observability.tensorboard_memory_gib: Input should be less than or equal to 64",
        id="tensorboard-memory",
    ),
    pytest.param(
        "autoscaler.gang_watchdog",
        "maybe",
        "env.yaml: autoscaler.gang_watchdog: Input should be a valid boolean, unable to interpret input",
        id="gang-watchdog-switch",
    ),
    pytest.param(
        "node_check.replace_failed_nodes",
        "sometimes",
        "env.yaml: node_check.replace_failed_nodes: Input should be a valid boolean, unable to interpret input",
        id="node-check-replace-switch",
    ),
    pytest.param(
        "node_check.replace_unresponsive_after_minutes",
        1,
        "env.yaml: node_check.replace_unresponsive_after_minutes: 1 minutes is out of range; allowed: 3 to 29",
        id="node-check-unresponsive-too-soon",
    ),
    pytest.param(
        "node_check.replace_unresponsive_after_minutes",
        30,
        "env.yaml: node_check.replace_unresponsive_after_minutes: 30 minutes is out of range; allowed: 3 to 29",
        id="node-check-unresponsive-not-before-eks-repair",
    ),
    pytest.param(
        "node_check.replacements_per_window",
        0,
        "env.yaml: node_check.replacements_per_window: 0 replacements is out of range; allowed: 1 to 10 per window",
        id="node-check-no-replacement-budget",
    ),
    pytest.param(
        "node_check.replacements_per_window",
        11,
        "env.yaml: node_check.replacements_per_window: 11 replacements is out of range; allowed: 1 to 10 per window",
        id="node-check-replacement-budget-too-large",
    ),
    pytest.param(
        "node_check.replacement_window_minutes",
        10,
        "env.yaml: node_check.replacement_window_minutes: 10 minutes is out of range; allowed: 15 to 1440",
        id="node-check-replacement-window-shorter-than-a-replacement",
    ),
    pytest.param(
        "node_check.replacement_window_minutes",
        2000,
        "env.yaml: node_check.replacement_window_minutes: 2000 minutes is out of range; allowed: 15 to 1440",
        id="node-check-replacement-window-over-a-day",
    ),
    pytest.param(
        "fabric_check.threshold",
        0,
        "env.yaml: fabric_check.threshold: 0.0 is not a fraction in (0, 1]; the default is 0.25",
        id="fabric-check-threshold-zero",
    ),
    pytest.param(
        "fabric_check.threshold",
        1.5,
        "env.yaml: fabric_check.threshold: 1.5 is not a fraction in (0, 1]; the default is 0.25",
        id="fabric-check-threshold-above-one",
    ),
    pytest.param(
        "fabric_check.threshold",
        float("nan"),
        "env.yaml: fabric_check.threshold: nan is not a fraction in (0, 1]; the default is 0.25",
        id="fabric-check-threshold-nan",
    ),
    pytest.param(
        "fabric_check.message_bytes",
        4096,
        "env.yaml: fabric_check.message_bytes: 4096 bytes is out of range; allowed: 1048576 (1 MiB) to "
        "8589934592 (8 GiB), default 1073741824 (1 GiB)",
        id="fabric-check-message-too-small",
    ),
    pytest.param(
        "cluster.addon_versions",
        {"amazon-cloudwatch-observability": "v1.5.1-eksbuild.1"},
        "env.yaml: cluster.addon_versions: amazon-cloudwatch-observability v1.5.1-eksbuild.1 publishes no EFA "
        "metrics for the dashboard (observability.dashboard); use v1.5.2 or later, or set observability.dashboard: "
        "false",
        id="cloudwatch-addon-too-old-for-the-dashboard",
    ),
    pytest.param(
        "cluster.addon_versions",
        {"eks-node-monitoring-agent": "1.7.0"},
        "env.yaml: cluster.addon_versions.eks-node-monitoring-agent: '1.7.0' is not an add-on version such as "
        "v1.20.4-eksbuild.1",
        id="node-monitoring-agent-version",
    ),
    pytest.param(
        "vpc",
        None,
        "env.yaml: vpc: must be a mapping of keys, got nothing (null); allowed keys: vpc_id, private_subnets, "
        "trainium_subnet, cidr, availability_zones, nat_gateways, flow_log_retention_days",
        id="required-section-left-empty",
    ),
]


@pytest.mark.parametrize(("path", "value", "expected"), BAD_CONFIGURATIONS)
def test_bad_configuration_is_one_line_naming_the_key(path: str, value: Any, expected: str) -> None:
    assert problems_of(with_change(path, value)) == [expected]


def test_fsx_scratch_takes_no_throughput() -> None:
    data = change_key(
        change_key(with_change("fsx.deployment_type", "SCRATCH_2"), "fsx.backups", "none"),
        "fsx.backup_retention_days",
        None,
    )
    assert problems_of(data) == [
        "env.yaml: fsx.throughput_mib_per_tib: 250 is not offered by SCRATCH_2; leave it null (fixed at 200 MB/s/TiB)"
    ]


def test_placement_group_cannot_go_with_a_reservation() -> None:
    # default.yaml asks for the placement group explicitly (placement_group: true).
    data = with_change("trainium.node_groups.0.capacity_reservation_id", "cr-0123456789abcdef0")
    assert problems_of(data) == [
        (
            "env.yaml: trainium.node_groups[0].placement_group: true cannot go with capacity_reservation_id: the "
            "reserved instances are not in the stack's new placement group, so launches would fail; "
            "allowed: false, or leave it out"
        )
    ]
    data["trainium"]["node_groups"][0]["placement_group"] = False
    assert not parse_config(data).trainium.node_groups[0].uses_placement_group


def test_misspelt_key_is_named_with_a_suggestion() -> None:
    data = default_data()
    data["trainium"]["node_groups"][0]["instance_typ"] = data["trainium"]["node_groups"][0].pop(
        "instance_type"
    )
    lines = problems_of(data)
    assert lines[0] == "env.yaml: trainium.node_groups[0].instance_type: required key is missing"
    assert lines[1].startswith(
        "env.yaml: trainium.node_groups[0].instance_typ: unknown key; did you mean 'instance_type'? allowed here: "
    )


def test_unknown_top_level_section() -> None:
    [line] = problems_of({**default_data(), "fsxx": {}})
    assert line.startswith(
        "env.yaml: fsxx: unknown key; did you mean 'fsx'? allowed here: name, account, region,"
    )


def test_every_problem_is_reported_at_once() -> None:
    data = with_change("account", "12")
    data["vpc"]["cidr"] = "not-a-cidr"
    data["fsx"]["storage_capacity_gib"] = 1000
    assert [line.split(":")[1].strip() for line in problems_of(data)] == [
        "account",
        "vpc.cidr",
        "fsx.storage_capacity_gib",
    ]


def test_repeated_node_group_names() -> None:
    data = default_data()
    data["trainium"]["node_groups"].append(dict(data["trainium"]["node_groups"][0]))
    assert problems_of(data) == [
        "env.yaml: trainium.node_groups: node group names must be unique; repeated: trn1-32xl"
    ]


def test_a_runs_node_group_must_exist() -> None:
    assert problems_of(with_change("runs.0.node_group", "trn2-48xl")) == [
        "env.yaml: runs[0].node_group: 'trn2-48xl' is not a trainium.node_groups name; defined: trn1-32xl"
    ]


def test_spot_cannot_target_a_reservation() -> None:
    data = with_change("trainium.node_groups.0.capacity_type", "spot")
    data["trainium"]["node_groups"][0]["capacity_reservation_id"] = "cr-0123456789abcdef0"
    assert problems_of(data) == [
        (
            "env.yaml: trainium.node_groups[0].capacity_reservation_id: spot capacity cannot target a reservation; "
            "use capacity_type on_demand or capacity_block"
        )
    ]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path / "nope.yaml")
    assert raised.value.lines() == [f"{tmp_path / 'nope.yaml'}: configuration file not found"]


def test_unreadable_file(tmp_path: Path) -> None:
    # A directory stands in for an unreadable file: permission bits do not stop root, who runs CI.
    with pytest.raises(ConfigError) as raised:
        load_config(tmp_path)
    assert raised.value.lines() == [f"{tmp_path}: configuration file cannot be read: Is a directory"]


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"\xff\xfe\x00name")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    [line] = raised.value.lines()
    assert line.startswith(f"{path}: configuration file cannot be read: ")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: [unclosed", "not valid YAML: line 1: expected ',' or ']', but got '<stream end>'"),
        ("name: a\nname: b\n", "not valid YAML: line 2: key 'name' appears twice"),
        ("- just\n- a list\n", "the file must hold a mapping of keys (name, account, region, ...)"),
        ("", "the file must hold a mapping of keys (name, account, region, ...)"),
    ],
)
def test_file_that_is_not_a_configuration(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "env.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert raised.value.lines() == [f"{path}: {expected}"]


def test_the_bert_preset_defaults_follow_the_tutorial() -> None:
    config = load_config(DEFAULT_CONFIG)
    [run] = config.runs
    assert run.parameters is not None and run.precompile is not None
    assert (
        run.apply,
        config.team(run.team).queue_name,
        run.parameters.batch_size,
        run.grad_accum_usteps,
    ) == (
        False,
        "test",
        16,
        32,
    )
    assert (run.parameters.bf16, run.parameters.stochastic_rounding, run.precompile.steps) == (True, True, 10)
    assert (run.cacheset_name, run.retries) == ("bert-large", 3)


@pytest.mark.parametrize(("nodes", "steps"), [(1, 64), (2, 32), (4, 16), (8, 8)])
def test_more_nodes_fewer_accumulation_steps_same_global_batch(nodes: int, steps: int) -> None:
    data = with_change("runs.0.nodes", nodes)
    data["trainium"]["node_groups"][0]["max_size"] = 8
    [run] = parse_config(data).runs
    assert run.grad_accum_usteps == steps
    assert nodes * run.grad_accum_usteps == 64


def test_node_count_that_cannot_keep_the_global_batch_needs_explicit_steps() -> None:
    data = with_change("runs.0.nodes", 3)
    data["trainium"]["node_groups"][0]["max_size"] = 3
    assert problems_of(data) == [
        (
            "env.yaml: runs[0].parameters: 3 nodes cannot keep the tutorial's global batch "
            "(2 nodes x 32 steps); set parameters.grad_accum_usteps explicitly"
        )
    ]
    data["runs"][0]["parameters"] = {"grad_accum_usteps": 21}
    assert parse_config(data).runs[0].grad_accum_usteps == 21


@pytest.mark.parametrize(
    "image",
    [
        "public.ecr.aws/neuron/pytorch-training-neuronx:latest",
        "public.ecr.aws/neuron/pytorch-training-neuronx",
        "bert:1.0",
    ],
)
def test_training_image_must_be_pinned(image: str) -> None:
    [line] = problems_of(with_change("runs.0.image", image))
    assert line.startswith(f"env.yaml: runs[0].image: {image!r} is not a pinned image")


# Defaults: an omitted section, a null one, {} and a section with some keys omitted mean the same.

SECTIONS = {
    name: field
    for name, field in StackConfig.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
}
OPTIONAL_SECTIONS = [name for name, field in SECTIONS.items() if not field.is_required()]
REQUIRED_SECTIONS = [name for name, field in SECTIONS.items() if field.is_required()]


def section_model(name: str) -> type[BaseModel]:
    model = SECTIONS[name].annotation
    assert isinstance(model, type) and issubclass(model, BaseModel)
    return model


def test_the_sections_are_found() -> None:
    # The tests below are generic over StackConfig's fields; this keeps them from testing nothing.
    assert {"system_nodes", "fsx", "ecr", "observability"} <= set(OPTIONAL_SECTIONS)
    assert {"vpc", "cluster", "trainium"} <= set(REQUIRED_SECTIONS)


@pytest.mark.parametrize("section", OPTIONAL_SECTIONS)
def test_an_optional_section_defaults_to_its_models_defaults(section: str) -> None:
    expected = section_model(section).model_validate({})
    assert SECTIONS[section].get_default(call_default_factory=True) == expected
    for value in (..., None, {}):
        assert getattr(parse_config(with_change(section, value)), section) == expected, value


@pytest.mark.parametrize("section", OPTIONAL_SECTIONS)
def test_a_section_with_one_key_set_keeps_the_others_defaults(section: str) -> None:
    expected = section_model(section).model_validate({})
    for key, value in expected.model_dump().items():
        assert getattr(parse_config(with_change(section, {key: value})), section) == expected, key


@pytest.mark.parametrize("section", REQUIRED_SECTIONS)
def test_a_required_section_has_keys_without_a_default(section: str) -> None:
    # Otherwise it could be optional like the others.
    with pytest.raises(ValidationError):
        section_model(section).model_validate({})


def test_an_old_cloudwatch_addon_is_fine_without_the_dashboard() -> None:
    data = with_change("cluster.addon_versions", {"amazon-cloudwatch-observability": "v1.5.1-eksbuild.1"})
    config = parse_config(change_key(data, "observability", {"dashboard": False}))
    assert config.cluster.addon_versions == {"amazon-cloudwatch-observability": "v1.5.1-eksbuild.1"}
    recent = with_change("cluster.addon_versions", {"amazon-cloudwatch-observability": "v4.1.0-eksbuild.1"})
    assert parse_config(recent).observability.dashboard


def test_the_node_monitoring_agent_can_be_pinned() -> None:
    data = with_change("cluster.addon_versions", {"eks-node-monitoring-agent": "v1.7.0-eksbuild.1"})
    assert parse_config(data).cluster.addon_versions == {"eks-node-monitoring-agent": "v1.7.0-eksbuild.1"}


def test_the_fabric_check_defaults_are_documented_and_off_in_the_pipeline() -> None:
    settings = load_config(DEFAULT_CONFIG).fabric_check
    assert (settings.threshold, settings.message_bytes) == (0.25, 1024**3)
    assert settings.pipeline is False and settings.taint_failed_nodes is True
    # The chart's own default is the configuration's (the chart is also used without a configuration).
    assert settings.threshold == FABRIC_DEFAULT_THRESHOLD
    assert settings.message_bytes == FABRIC_DEFAULT_MESSAGE_BYTES
    # 1 is a fraction too (a healthy two-node run can reach it), as is any integer YAML writes.
    assert parse_config(with_change("fabric_check.threshold", 1)).fabric_check.threshold == 1.0


def test_the_dashboard_is_named_after_the_cluster_and_region_unless_configured() -> None:
    assert load_config(DEFAULT_CONFIG).dashboard_name == "trainium-us-west-2"
    assert parse_config(with_change("observability.dashboard_name", "mine")).dashboard_name == "mine"


def test_fsx_throughput_follows_the_deployment_type() -> None:
    assert parse_config(with_change("fsx", {"removal_policy": "destroy"})).fsx.throughput_mib_per_tib == 250
    assert (
        parse_config(with_change("fsx", {"throughput_mib_per_tib": None})).fsx.throughput_mib_per_tib == 250
    )
    scratch = parse_config(with_change("fsx", {"deployment_type": "SCRATCH_2", "backups": "none"})).fsx
    assert (scratch.deployment_type, scratch.throughput_mib_per_tib) == ("SCRATCH_2", None)


def test_system_nodes_with_only_an_instance_type_get_the_default_sizes() -> None:
    nodes = parse_config(with_change("system_nodes", {"instance_type": "m6i.xlarge"})).system_nodes
    assert (nodes.instance_type, nodes.min_size, nodes.desired_size, nodes.max_size) == (
        "m6i.xlarge",
        2,
        2,
        4,
    )


def test_a_default_size_is_checked_against_a_configured_one() -> None:
    assert problems_of(with_change("system_nodes", {"min_size": 3})) == [
        "env.yaml: system_nodes.desired_size: desired_size (2) must be at least min_size (3)"
    ]


def test_precompile_steps_are_at_least_one() -> None:
    assert problems_of(with_change("runs.0.precompile.steps", 0)) == [
        "env.yaml: runs[0].precompile.steps: Input should be greater than or equal to 1"
    ]


# One pass: the keys' own problems and every cross-section check whose keys are valid.


def test_a_node_count_too_large_for_the_group_is_named_with_the_batch_problem() -> None:
    data = with_change("runs.0.nodes", 5)
    data["trainium"]["node_groups"][0]["max_size"] = 4
    data["runs"].append({"name": "other", "script": "train.py", "nodes": 5})
    assert problems_of(data) == [
        (
            "env.yaml: runs[0].parameters: 5 nodes cannot keep the tutorial's global batch "
            "(2 nodes x 32 steps); set parameters.grad_accum_usteps explicitly"
        ),
        # The first run has a problem of its own; the other is still checked against its group.
        "env.yaml: runs[1].nodes: 5 nodes do not fit node group 'trn1-32xl' (max_size 4)",
    ]


def test_a_file_with_problems_in_every_part_reports_them_all() -> None:
    data = with_change("vpc.cidr", "10.0.0.0/8")
    data["fsx"]["storage_capacity_gib"] = 3000
    data["ecr"]["keep_image"] = 10
    data["trainium"]["availability_zone"] = "us-west-2b"
    data["trainium"]["availability_zone_id"] = "apne1-az4"
    data["cluster"]["admin_role_arns"] = ["arn:aws:iam::444455556666:role/Admins"]
    data["runs"][0]["node_group"] = "trn2-48xl"
    assert problems_of(data) == [
        "env.yaml: vpc.cidr: 10.0.0.0/8 is too large; allowed prefixes: /16 to /22",
        (
            "env.yaml: fsx.storage_capacity_gib: 3000 GiB is not a Lustre size; nearest: 2400 or 4800 "
            "(allowed: 1200 or a multiple of 2400)"
        ),
        (
            "env.yaml: ecr.keep_image: unknown key; did you mean 'keep_images'? allowed here: repository_name, "
            "removal_policy, keep_images, pull_through_cache, pull_through_cache_rules, upstream_credentials, "
            "cross_account_repositories"
        ),
        (
            "env.yaml: trainium.availability_zone: 'us-west-2b' must be one of vpc.availability_zones "
            "(us-west-2a, us-west-2d)"
        ),
        (
            "env.yaml: trainium.availability_zone_id: 'apne1-az4' is not a zone id of region us-west-2; "
            "allowed: usw2-az1, usw2-az2, ... (aws ec2 describe-availability-zones --region us-west-2 lists them)"
        ),
        (
            "env.yaml: cluster.admin_role_arns[0]: 'arn:aws:iam::444455556666:role/Admins' is a role of account "
            "444455556666; allowed: roles of account 111122223333"
        ),
        "env.yaml: runs[0].node_group: 'trn2-48xl' is not a trainium.node_groups name; defined: trn1-32xl",
    ]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param(
            {"vpc.availability_zones": ["us-west-2a"], "trainium.availability_zone": "us-west-2b"},
            ["vpc.availability_zones: EKS needs at least two availability zones, got 1"],
            id="zones-compared-only-with-a-valid-zone-list",
        ),
        pytest.param(
            {"region": "us-west", "trainium.availability_zone_id": "use1-az6"},
            ["region: 'us-west' is not an AWS region name such as us-west-2"],
            id="zone-id-compared-only-with-a-valid-region",
        ),
        pytest.param(
            {"account": 12, "cluster.admin_role_arns": ["arn:aws:iam::444455556666:role/Admins"]},
            ['account: YAML read the number 12; write it in quotes, for example "111122223333"'],
            id="roles-compared-only-with-a-valid-account",
        ),
        pytest.param(
            {"runs.0.nodes": 0, "trainium.node_groups.0.max_size": 0},
            [
                "trainium.node_groups[0].max_size: Input should be greater than or equal to 1",
                "runs[0].nodes: Input should be greater than or equal to 1",
            ],
            id="nodes-compared-only-with-valid-groups",
        ),
    ],
)
def test_a_check_skips_keys_that_have_problems_of_their_own(
    changes: dict[str, Any], expected: list[str]
) -> None:
    data = default_data()
    for path, value in changes.items():
        data = change_key(data, path, value)
    assert problems_of(data) == [f"env.yaml: {line}" for line in expected]


def test_every_cross_check_reads_keys_that_exist() -> None:
    for cross_check in CROSS_CHECKS:
        for path in cross_check.reads:
            model: Any = StackConfig
            for key in path.split("."):
                assert key in model.model_fields, f"{cross_check.check.__name__} reads {path}"
                model = model.model_fields[key].annotation


@pytest.mark.parametrize(
    ("region", "prefix"),
    [
        # The pairs the task named, each seen as a real zone id (AWS's AZ documentation, EC2 responses).
        ("us-west-2", "usw2"),
        ("us-east-1", "use1"),
        ("eu-central-1", "euc1"),
        ("ap-northeast-1", "apne1"),
        ("ap-southeast-2", "apse2"),
        ("ca-central-1", "cac1"),
        ("sa-east-1", "sae1"),
        ("me-south-1", "mes1"),
        ("us-gov-west-1", "usgw1"),
        ("cn-northwest-1", "cnnw1"),
        ("us-east-2", "use2"),
        ("eu-west-1", "euw1"),
        ("eu-north-1", "eun1"),
        ("ap-south-1", "aps1"),
        ("ap-east-1", "ape1"),
        ("cn-north-1", "cnn1"),
        ("us-gov-east-1", "usge1"),
        ("il-central-1", "ilc1"),
        ("us-iso-east-1", None),  # not documented publicly: not checked
    ],
)
def test_zone_id_prefix_of_a_region(region: str, prefix: str | None) -> None:
    assert zone_id_prefix(region) == prefix


def test_a_zone_id_of_the_region_is_accepted_in_every_environment_file() -> None:
    for path in sorted((REPO_ROOT / "config").rglob("*.yaml")):
        if "pipeline" in path.name:
            continue
        config = load_config(path)
        assert config.trainium.availability_zone_id.startswith(f"{zone_id_prefix(config.region)}-az"), path


# No Python in the messages: every odd value in every key gives `file: key.path: message` lines.

ODD_VALUES = [None, "text", 1.5, -1, True, [], ["item"], {}, {"key": "value"}, {1: "value"}]
PYTHON_NOISE = re.compile(
    r"None|instance of|<class|Settings\b|\bdict\b|\bNoneType\b|\bint\b|\bstr\b|Value error"
)
LINE = re.compile(r"env\.yaml: [a-z_]+(\.[a-z_]+|\[\d+\]|\.[\w.-]+)*: \S")


def key_paths(data: Any, prefix: str = "") -> Iterator[str]:
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        path = f"{prefix}.{key}" if prefix else str(key)
        yield path
        yield from key_paths(value, path)


def example_data() -> dict[str, Any]:
    return yaml.safe_load(EXAMPLE_CONFIG.read_text())


@pytest.mark.parametrize("path", sorted(set(key_paths(default_data())) | set(key_paths(example_data()))))
def test_odd_values_give_plain_messages(path: str) -> None:
    for base in (default_data(), example_data()):
        if path not in set(key_paths(base)):
            continue
        for value in ODD_VALUES:
            try:
                parse_config(change_key(base, path, value), source="env.yaml")
            except ConfigError as error:
                for line in error.lines():
                    assert LINE.match(line), (path, value, line)
                    assert not PYTHON_NOISE.search(line), (path, value, line)


# Runs, teams and data sets: one line per problem, naming the key.

GENERIC_RUN = {"name": "llm", "script": "train.py", "nodes": 1}


def with_runs(*runs: dict[str, Any], **sections: Any) -> dict[str, Any]:
    data = default_data()
    data["runs"] = [dict(run) for run in runs]
    data.update(sections)
    return data


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(
            with_runs({**GENERIC_RUN, "node_group": "trn9"}),
            "runs[0].node_group: 'trn9' is not a trainium.node_groups name; defined: trn1-32xl",
            id="unknown-node-group",
        ),
        pytest.param(
            with_runs({**GENERIC_RUN, "nodes": 3}),
            "runs[0].nodes: 3 nodes do not fit node group 'trn1-32xl' (max_size 2)",
            id="more-nodes-than-max-size",
        ),
        pytest.param(
            with_runs({**GENERIC_RUN, "image": "my-image:latest"}),
            "runs[0].image: 'my-image:latest' is not a pinned image: name it registry/repository:tag "
            "(not latest) or registry/repository@sha256:digest",
            id="unpinned-image",
        ),
        pytest.param(
            with_runs(
                {**GENERIC_RUN, "apply": True},
                {**GENERIC_RUN, "name": "llm-2", "apply": True, "cacheset": "llm"},
            ),
            "runs[1].cacheset: 'llm' is also the cache set of applied run 'llm' of team training; two runs at "
            "the same time would corrupt it: give each its own cacheset",
            id="cacheset-shared-at-the-same-time",
        ),
        pytest.param(
            with_runs({**GENERIC_RUN, "team": "vision"}),
            "runs[0].team: 'vision' is not a team; defined: training",
            id="team-and-queue-that-do-not-exist",
        ),
        pytest.param(
            with_runs({**GENERIC_RUN, "datasets": ["imagenet"]}),
            "runs[0].datasets[0]: 'imagenet' is not a datasets name; defined: none",
            id="unknown-data-set",
        ),
        pytest.param(
            with_runs({"name": "llm"}),
            "runs[0]: a run needs a script (or a preset: bert-large, native-fsdp2)",
            id="nothing-to-run",
        ),
        pytest.param(
            with_runs({"name": "bert", "preset": "bert-large", "script": "mine.py"}),
            "runs[0]: script comes from preset bert-large; leave them out or drop the preset",
            id="preset-owns-the-script",
        ),
        pytest.param(
            with_runs({**GENERIC_RUN, "parameters": {"batch_size": 8}}),
            "runs[0].parameters: parameters belong to a preset; set preset: bert-large or native-fsdp2, or "
            "describe the run with script and args",
            id="parameters-without-preset",
        ),
        pytest.param(
            with_runs({**GENERIC_RUN, "python_packages": ["transformers==4.44.0"]}),
            "runs[0].python_packages[0]: 'transformers==4.44.0' is not a pinned requirement with its hash: "
            "write it as name==version --hash=sha256:<64 hex digits> (pip's --require-hashes form)",
            id="package-without-hash",
        ),
        pytest.param(
            with_runs({**GENERIC_RUN, "name": "a" * 40}),
            f"runs[0].name: '{'a' * 40}' is not a run name of 1-39 lowercase letters, digits and '-'",
            id="run-name-too-long-for-its-pods",
        ),
        pytest.param(
            with_runs(GENERIC_RUN, {**GENERIC_RUN, "script": "other.py"}),
            "runs: run names must be unique; repeated: llm",
            id="repeated-run",
        ),
        pytest.param(
            with_runs(teams=[{"name": "kube-system"}]),
            "teams[0].name: 'kube-system' is a namespace the cluster uses itself; pick another team name",
            id="reserved-namespace",
        ),
        pytest.param(
            with_runs(teams=[{"name": "a", "queue": "q"}, {"name": "b", "queue": "q"}]),
            "teams: team queues must be unique; repeated: q",
            id="shared-queue",
        ),
        pytest.param(
            with_runs(teams=[{"name": "a", "node_groups": ["trn9"]}]),
            "teams[0].node_groups[0]: 'trn9' is not a trainium.node_groups name; defined: trn1-32xl",
            id="team-group-undefined",
        ),
        pytest.param(
            with_runs(teams=[{"name": "a", "node_groups": ["trn1-32xl", "trn1-32xl"]}]),
            "teams[0].node_groups[1]: 'trn1-32xl' is listed twice; list each node group once (the team's "
            "queue counts what each holds at max_size once)",
            id="team-group-twice",
        ),
        pytest.param(
            with_runs(datasets=[{"name": "d", "archive_sha256": "a" * 64}]),
            "datasets[0]: archive_sha256 without archive_url checks nothing",
            id="checksum-of-nothing",
        ),
        pytest.param(
            with_runs(datasets=[{"name": "d", "archive_url": "http://example.com/d.tar"}]),
            "datasets[0].archive_url: 'http://example.com/d.tar' is not an https:// URL or an S3 object such as s3://bucket/key",
            id="plain-http-data-set",
        ),
        pytest.param(
            with_runs(teams=[{"name": "a", "member_role_arns": ["arn:aws:iam::999988887777:role/Ml"]}]),
            "teams[0].member_role_arns[0]: 'arn:aws:iam::999988887777:role/Ml' is a role of account "
            "999988887777; allowed: roles of account 111122223333",
            id="member-of-another-account",
        ),
        pytest.param(
            {
                **with_runs(
                    teams=[{"name": "a", "member_role_arns": ["arn:aws:iam::111122223333:role/Ops"]}]
                ),
                "cluster": {
                    **default_data()["cluster"],
                    "admin_role_arns": ["arn:aws:iam::111122223333:role/Ops"],
                },
            },
            "teams[0].member_role_arns[0]: 'arn:aws:iam::111122223333:role/Ops' is already in "
            "cluster.admin_role_arns (cluster-admin everywhere); allowed: a role that is not an administrator",
            id="member-who-is-an-admin",
        ),
        pytest.param(
            with_runs(teams=[{"name": "a", "uid": 200000}, {"name": "b", "uid": 200000}]),
            "teams[1].uid: 200000 is also the uid of team 'a'; give this team a uid of its own",
            id="two-teams-one-owner",
        ),
        pytest.param(
            with_runs(teams=[{"name": "a", "quota": {"neuron_devices": 8}}]),
            "teams[0].quota.neuron_devices: 8 chips hold no training pod: one takes every chip of its node "
            "(16 on node group 'trn1-32xl'); allowed: 16 or more",
            id="quota-below-one-pod",
        ),
        pytest.param(
            with_runs(
                {**GENERIC_RUN, "nodes": 2, "apply": True},
                {**GENERIC_RUN, "name": "llm2", "nodes": 2, "apply": True},
                {**GENERIC_RUN, "name": "later", "nodes": 2},
                teams=[{"name": "a", "quota": {"pods": 6}}],
            ),
            "teams[0].quota.pods: 6 pods do not hold the team's applied runs (llm 2, llm2 2) and its etcd; "
            "Volcano ends a run whose pods the quota refuses; allowed: 7 or more",
            id="quota-pods-below-the-applied-runs",
        ),
        pytest.param(
            with_runs(
                {**GENERIC_RUN, "nodes": 2, "apply": True},
                {**GENERIC_RUN, "name": "llm2", "nodes": 1, "apply": True},
                teams=[{"name": "a", "quota": {"neuron_devices": 32}}],
            ),
            "teams[0].quota.neuron_devices: 32 chips do not hold the team's applied runs (48 chips: llm 2, "
            "llm2 1 nodes); Volcano ends a run whose pods the quota refuses; allowed: 48 or more",
            id="quota-chips-below-the-applied-runs",
        ),
        pytest.param(
            with_runs(teams=[{"name": "a", "quota": {"pods": 1}}]),
            "teams[0].quota.pods: Input should be greater than or equal to 2",
            id="quota-without-room-for-etcd-and-a-pod",
        ),
        pytest.param(
            with_runs(teams=[{"name": "a", "quota": {"gpus": 1}}]),
            "teams[0].quota.gpus: unknown key; allowed here: pods, jobs, neuron_devices, cpu, memory_gib",
            id="quota-unknown-key",
        ),
        pytest.param(
            with_runs(teams=[{"name": "a", "queue": "default"}]),
            "teams[0].queue: 'default' is Volcano's own queue, where a Job without a queue lands (uncapped, "
            "shared by everyone); pick another queue name",
            id="volcanos-default-queue",
        ),
        pytest.param(
            with_runs(teams=[{"name": "a", "uid": 65534}]),
            "teams[0].uid: 65534 is the id root is squashed to on the file system; pick another",
            id="team-as-nobody",
        ),
        pytest.param(
            with_runs(datasets=[{"name": "d", "archive_url": "https://example.com/d.tar"}]),
            "datasets[0]: archive_url needs archive_sha256: what is unpacked where runs read it must be "
            "the archive you checked (sha256sum of the tar file)",
            id="archive-without-checksum",
        ),
        pytest.param(
            with_runs({**GENERIC_RUN, "script": "/data/train.py"}),
            "runs[0].script: '/data/train.py' is on a writable volume, where no checksum covers it: make it "
            "a file of a data set (checked by SHA-256 on every attempt) or a path in the pinned image",
            id="script-on-the-teams-volume",
        ),
        pytest.param(
            with_runs({**GENERIC_RUN, "script": "/datasets/d/1234abcd/t.py"}),
            "runs[0].script: '/datasets/d/1234abcd/t.py' is a data set's file by path, which no checksum "
            "covers: name it $(DATASET_<NAME>)/<file> and list the file under the data set's files with its sha256",
            id="script-of-a-data-set-by-path",
        ),
        pytest.param(
            with_runs(
                {**GENERIC_RUN, "script": "$(DATASET_D)/other.py", "datasets": ["d"]},
                datasets=[
                    {
                        "name": "d",
                        "files": [{"url": "https://e.com/t.py", "sha256": "a" * 64, "name": "t.py"}],
                    }
                ],
            ),
            "runs[0].script: 'other.py' is not one of the files of data set 'd', which are checked by SHA-256 "
            "before they run: list it under its files with its sha256",
            id="script-not-a-checked-file",
        ),
        pytest.param(
            with_runs(
                {**GENERIC_RUN, "script": "$(DATASET_D)/t.py"},
                datasets=[
                    {
                        "name": "d",
                        "files": [{"url": "https://e.com/t.py", "sha256": "a" * 64, "name": "t.py"}],
                    }
                ],
            ),
            "runs[0].script: '$(DATASET_D)/t.py' names no data set of this run's datasets",
            id="script-of-a-data-set-the-run-does-not-use",
        ),
        pytest.param(
            with_runs(
                {"name": "a", "preset": "bert-large", "parameters": {"dataset_archive_sha256": "a" * 64}},
                {"name": "b", "preset": "bert-large", "parameters": {"dataset_archive_sha256": "b" * 64}},
            ),
            "runs[1].parameters.dataset_archive_sha256: differs from runs[0]'s; the runs of preset bert-large "
            "share one data set: give one checksum",
            id="two-pins-of-the-preset-archive",
        ),
        pytest.param(
            with_runs(training={"nodes": 2}),
            "training: the training section was replaced by runs (docs/runs.md); the tutorial's run is "
            "runs: [{name: bert-large, preset: bert-large, apply: true, nodes: 2}]",
            id="training-section-moved",
        ),
    ],
)
def test_a_bad_run_team_or_data_set_is_one_line(data: dict[str, Any], expected: str) -> None:
    assert problems_of(data) == [f"env.yaml: {expected}"]


def test_a_run_uses_its_teams_first_node_group_and_queue() -> None:
    data = default_data()
    data["trainium"]["node_groups"].append({**data["trainium"]["node_groups"][0], "name": "trn1-b"})
    data["teams"] = [{"name": "training", "queue": "test"}, {"name": "research", "node_groups": ["trn1-b"]}]
    data["runs"] = [{**GENERIC_RUN, "team": "research"}]
    config = parse_config(data)
    [run] = config.runs
    assert config.run_node_group(run).name == "trn1-b"
    assert config.team(run.team).queue_name == "research"


def test_a_team_may_not_run_on_another_teams_group() -> None:
    data = default_data()
    data["trainium"]["node_groups"].append({**data["trainium"]["node_groups"][0], "name": "trn1-b"})
    data["teams"] = [{"name": "training", "node_groups": ["trn1-32xl"]}]
    data["runs"] = [{**GENERIC_RUN, "node_group": "trn1-b"}]
    assert problems_of(data) == [
        "env.yaml: runs[0].node_group: team 'training' may not use node group 'trn1-b'; its groups: trn1-32xl"
    ]


# --- Capacity: nothing idle by default, the autoscaler owns the node count ---------------------


SHIPPED_CONFIGS = sorted(
    [DEFAULT_CONFIG, EXAMPLE_CONFIG, *(REPO_ROOT / "config" / "environments").glob("*.yaml")]
)


@pytest.mark.parametrize("path", SHIPPED_CONFIGS, ids=lambda path: path.name)
def test_shipped_configurations_run_no_trainium_node_with_no_job_queued(path: Path) -> None:
    config = load_config(path)
    assert [group.min_size for group in config.trainium.node_groups] == [0] * len(config.trainium.node_groups)
    assert "desired_size" not in path.read_text().split("trainium:", 1)[1]


def test_min_size_defaults_to_zero() -> None:
    config = parse_config(with_change("trainium.node_groups.0.min_size", ...))
    assert config.trainium.node_groups[0].min_size == 0


def test_warm_nodes_cannot_go_on_a_capacity_block() -> None:
    data = with_change("trainium.node_groups.0.capacity_type", "capacity_block")
    data["trainium"]["node_groups"][0].update(
        capacity_reservation_id="cr-0123456789abcdef0", placement_group=None, min_size=1
    )
    assert problems_of(data) == [
        (
            "env.yaml: trainium.node_groups[0].min_size: 1 warm nodes cannot go with capacity_type capacity_block: "
            "nodes run only inside the block's window and the autoscaler brings them up for queued jobs; allowed: 0"
        )
    ]
    data["trainium"]["node_groups"][0]["min_size"] = 0
    assert parse_config(data).trainium.node_groups[0].update_strategy == "MINIMAL"


def test_reserved_groups_update_without_surge_and_others_with_it() -> None:
    config = load_config(EXAMPLE_CONFIG)
    assert {group.name: group.update_strategy for group in config.trainium.node_groups} == {
        "trn1n-32xl": "MINIMAL",  # an ODCR
        "trn1-32xl-block": "MINIMAL",  # a Capacity Block
    }
    assert load_config(DEFAULT_CONFIG).trainium.node_groups[0].update_strategy == "DEFAULT"


def test_a_pinned_preset_archive_is_a_new_verified_version_of_its_data_set() -> None:
    unpinned = datasets(parse_config(with_runs({"name": "bert", "preset": "bert-large"})))
    pinned = datasets(
        parse_config(
            with_runs(
                {"name": "bert", "preset": "bert-large", "parameters": {"dataset_archive_sha256": "a" * 64}}
            )
        )
    )
    [before], [after] = unpinned.values(), pinned.values()
    assert before.archive_sha256 is None and before.staged_version.endswith("archive-sha256=unverified")
    assert after.archive_sha256 == "a" * 64 and after.identity != before.identity


def test_a_teams_uid_is_derived_from_its_name_alone() -> None:
    """Adding, removing or reordering teams never changes who owns a team's files."""
    one = parse_config(with_runs(teams=[{"name": "a"}, {"name": "b"}]))
    other = parse_config(with_runs(teams=[{"name": "c"}, {"name": "b"}, {"name": "a"}]))
    owners = {team.name: team.owner_id for team in one.teams}
    assert owners == {team.name: team.owner_id for team in other.teams if team.name in owners}
    assert all(100_000 <= uid < 1_000_000 for uid in owners.values()) and len(set(owners.values())) == 2
    assert parse_config(with_runs(teams=[{"name": "a", "uid": 54321}])).teams[0].owner_id == 54321


def test_a_slash_16_is_the_broadest_public_endpoint_range() -> None:
    """Over-broad means wider than /16 (docs/access.md): an organisation's egress fits, a provider's does not."""
    config = parse_config(with_change("cluster.endpoint_public_cidrs", ["198.51.0.0/16", "192.0.2.7/32"]))
    assert config.cluster.endpoint_public_cidrs == ["198.51.0.0/16", "192.0.2.7/32"]
    assert len(problems_of(with_change("cluster.endpoint_public_cidrs", ["198.50.0.0/15"]))) == 1


@pytest.mark.parametrize(
    ("quota", "expected"),
    [
        (
            {"neuron_devices": 16},
            (
                "env.yaml: teams[0].quota.neuron_devices: 16 chips do not hold run 'bert-large' (runs[0], 32 chips, not "
                "applied at deploy): Volcano ends it about 3 minutes after it is applied; allowed: 32 or more"
            ),
        ),
        (
            {"pods": 2},
            (
                "env.yaml: teams[0].quota.pods: 2 pods do not hold run 'bert-large' (runs[0], 2 nodes, not applied at "
                "deploy) and the team's etcd: Volcano ends it about 3 minutes after it is applied; allowed: 5 or more"
            ),
        ),
    ],
)
def test_a_quota_below_a_run_applied_later_is_refused(quota: dict[str, int], expected: str) -> None:
    """The default's BERT run is rendered only (kubectl apply later): a quota it cannot fit would let
    Volcano end it about 3 minutes after it is applied (issue 33)."""
    data = with_change("teams", [{"name": "training", "queue": "test", "quota": quota}])
    assert problems_of(data) == [expected]
    # One that fits is accepted.
    parse_config(
        with_change("teams", [{"name": "training", "queue": "test", "quota": {"neuron_devices": 32}}])
    )


def test_a_data_set_with_a_problem_of_its_own_gets_one_line_not_two() -> None:
    """A run's script in a data set whose file URL is refused: the URL's line, and no second line
    saying the script names no data set of the run (issue 33)."""
    data = default_data()
    data["datasets"] = [
        {
            "name": "code",
            "files": [{"url": "ftp://example.com/train.py", "sha256": "a" * 64, "name": "train.py"}],
        }
    ]
    data["runs"].append(
        {"name": "mine", "script": "$(DATASET_CODE)/train.py", "datasets": ["code"], "nodes": 1}
    )
    assert problems_of(data) == [
        (
            "env.yaml: datasets[0].files[0].url: 'ftp://example.com/train.py' is not an https:// URL or an S3 "
            "object such as s3://bucket/key"
        )
    ]
