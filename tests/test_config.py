"""The configuration file: what is accepted, and one clear line per problem for what is not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from config import ConfigError, load_config, parse_config
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG
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
    group = config.training_node_group
    assert (group.instance_type, group.desired_size, config.training.nodes) == ("trn1.32xlarge", 2, 2)
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
        "allowed: trn1.32xlarge, trn1n.32xlarge, trn2.48xlarge",
        id="unknown-instance-type",
    ),
    pytest.param(
        "trainium.node_groups.0.min_size",
        3,
        "env.yaml: trainium.node_groups[0].desired_size: desired_size (2) must be at least min_size (3)",
        id="min-above-desired",
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
        "env.yaml: cluster.kubernetes_version: '1.29' has no kubectl layer in this project; supported: 1.33, 1.34, 1.35",
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
        "training.nodes",
        4,
        "env.yaml: training.nodes: 4 nodes do not fit node group 'trn1-32xl' (max_size 2)",
        id="training-larger-than-node-group",
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
        'env.yaml: cluster.kubernetes_version: YAML read the number 1.3; write it in quotes, for example "1.34"',
        id="unquoted-kubernetes-version",
    ),
    pytest.param(
        "name",
        ...,
        "env.yaml: name: required key is missing",
        id="missing-key",
    ),
]


@pytest.mark.parametrize(("path", "value", "expected"), BAD_CONFIGURATIONS)
def test_bad_configuration_is_one_line_naming_the_key(path: str, value: Any, expected: str) -> None:
    assert problems_of(with_change(path, value)) == [expected]


def test_fsx_scratch_takes_no_throughput() -> None:
    data = with_change("fsx.deployment_type", "SCRATCH_2")
    assert problems_of(data) == [
        "env.yaml: fsx.throughput_mib_per_tib: 250 is not offered by SCRATCH_2; leave it null (fixed at 200 MB/s/TiB)"
    ]


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


def test_training_node_group_must_exist() -> None:
    assert problems_of(with_change("training.node_group", "trn2-48xl")) == [
        "env.yaml: training.node_group: 'trn2-48xl' is not a trainium.node_groups name; defined: trn1-32xl"
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


def test_training_defaults_follow_the_tutorial() -> None:
    training = load_config(DEFAULT_CONFIG).training
    assert (training.enabled, training.queue, training.batch_size, training.effective_grad_accum_usteps) == (
        False,
        "test",
        16,
        32,
    )
    assert (training.bf16, training.stochastic_rounding) == (True, True)


@pytest.mark.parametrize(("nodes", "steps"), [(1, 64), (2, 32), (4, 16), (8, 8)])
def test_more_nodes_fewer_accumulation_steps_same_global_batch(nodes: int, steps: int) -> None:
    data = with_change("training.nodes", nodes)
    data["trainium"]["node_groups"][0]["max_size"] = 8
    training = parse_config(data).training
    assert training.effective_grad_accum_usteps == steps
    assert nodes * training.effective_grad_accum_usteps == 64


def test_node_count_that_cannot_keep_the_global_batch_needs_explicit_steps() -> None:
    data = with_change("training.nodes", 3)
    data["trainium"]["node_groups"][0]["max_size"] = 3
    assert problems_of(data) == [
        (
            "env.yaml: training.grad_accum_usteps: 3 nodes cannot keep the tutorial's global batch "
            "(2 nodes x 32 steps); set grad_accum_usteps explicitly"
        )
    ]
    data["training"]["grad_accum_usteps"] = 21
    assert parse_config(data).training.effective_grad_accum_usteps == 21


@pytest.mark.parametrize(
    "image",
    [
        "public.ecr.aws/neuron/pytorch-training-neuronx:latest",
        "public.ecr.aws/neuron/pytorch-training-neuronx",
        "bert:1.0",
    ],
)
def test_training_image_must_be_pinned(image: str) -> None:
    [line] = problems_of(with_change("training.image", image))
    assert line.startswith(f"env.yaml: training.image: {image!r} is not a pinned image")
