"""The pipeline file: what it accepts, and one line per problem, naming the key, for what it does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from config import ConfigError
from config.pipeline import (
    EnvironmentSettings,
    PipelineSettings,
    construct_id_of,
    load_pipeline,
    parse_pipeline,
    repository_path,
)
from tests.conftest import REPO_ROOT
from tests.yaml_edits import with_change as change_key

EXAMPLE = REPO_ROOT / "config" / "pipeline.example.yaml"
SOURCE = "pipeline.yaml"


@pytest.fixture(autouse=True)
def _from_repository_root(monkeypatch: pytest.MonkeyPatch) -> None:
    # Environment files are named relative to the pipeline file's folder; from the repository root
    # that folder is config/, and the error lines name config/environments/<file>.
    monkeypatch.chdir(REPO_ROOT)


def example_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return data


def problems_of(data: Any, folder: Path = Path("config")) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_pipeline(data, source=SOURCE, folder=folder)
    return raised.value.lines()


def with_change(path: str, value: Any) -> dict[str, Any]:
    return change_key(example_data(), path, value)


def test_example_pipeline_deploys_dev_then_staging_then_production() -> None:
    pipeline = load_pipeline(EXAMPLE)
    stages = [
        (wave.name, environment.name, config.account, config.region)
        for wave, environment, config in pipeline.stages()
    ]
    assert stages == [
        ("dev", "dev", "111111111111", "us-west-2"),
        ("staging", "staging", "222222222222", "us-east-1"),
        ("production", "prod-us-east-1", "333333333333", "us-east-1"),
        ("production", "prod-us-west-2", "333333333333", "us-west-2"),
    ]
    assert [(wave.production, wave.approval) for wave in pipeline.settings.waves] == [
        (False, "none"),
        (False, "none"),
        (True, "manual"),
    ]
    assert pipeline.settings.tooling.account not in {config.account for _, _, config in pipeline.stages()}


def test_construct_ids_come_from_the_names() -> None:
    assert [construct_id_of(name) for name in ("dev", "prod-us-east-1", "production", "a1-b2")] == [
        "Dev",
        "ProdUsEast1",
        "Production",
        "A1B2",
    ]


def test_an_approval_may_gate_a_wave_that_is_not_production() -> None:
    pipeline = parse_pipeline(with_change("waves.1.approval", "manual"), source=SOURCE, folder=Path("config"))
    assert pipeline.settings.waves[1].approval == "manual"
    assert not pipeline.settings.waves[1].production


WAVE_KEYS = "name, production, approval, environments"
BAD_PIPELINES = [
    pytest.param(
        "waves.0.environmnets",
        [],
        f"{SOURCE}: waves[0].environmnets: unknown key; did you mean 'environments'? allowed here: {WAVE_KEYS}",
        id="unknown-key",
    ),
    pytest.param(
        "tooling.account",
        "4444",
        f"{SOURCE}: tooling.account: '4444' is not a 12-digit AWS account id",
        id="bad-account",
    ),
    pytest.param(
        "waves.0.environments.0.account",
        111111111111,
        f"{SOURCE}: waves[0].environments[0].account: YAML read the number 111111111111; write it in quotes, "
        'for example "111122223333"',
        id="unquoted-account",
    ),
    pytest.param(
        "tooling.region",
        "uswest2",
        f"{SOURCE}: tooling.region: 'uswest2' is not an AWS region name such as us-west-2",
        id="bad-region",
    ),
    pytest.param(
        "source.connection_arn",
        "arn:aws:codestar:us-west-2:444444444444:connection/abc",
        f"{SOURCE}: source.connection_arn: 'arn:aws:codestar:us-west-2:444444444444:connection/abc' is not a "
        "CodeConnections connection ARN such as "
        "arn:aws:codeconnections:us-west-2:111122223333:connection/0123abcd-4567-89ab-cdef-0123456789ab",
        id="bad-connection-arn",
    ),
    pytest.param(
        "source.connection_arn",
        "arn:aws:codestar-connections:us-west-2:555555555555:connection/0123abcd-4567-89ab-cdef-0123456789ab",
        f"{SOURCE}: source.connection_arn: the connection is in account 555555555555; it must be in the tooling "
        "account 444444444444",
        id="connection-in-another-account",
    ),
    pytest.param(
        "source.connection_arn",
        "arn:aws:codeconnections:eu-west-1:444444444444:connection/0123abcd-4567-89ab-cdef-0123456789ab",
        f"{SOURCE}: source.connection_arn: the connection is in region eu-west-1; it must be in the tooling "
        "region us-west-2",
        id="connection-in-another-region",
    ),
    pytest.param(
        "source.repository",
        "trainium-cdk",
        f"{SOURCE}: source.repository: 'trainium-cdk' is not a repository as owner/name, such as my-org/trainium-cdk",
        id="bad-repository",
    ),
    pytest.param(
        "source.branch",
        "feature..x",
        f"{SOURCE}: source.branch: 'feature..x' is not a git branch name such as main or release/1.0",
        id="bad-branch",
    ),
    pytest.param("source", ..., f"{SOURCE}: source: required key is missing", id="missing-source"),
    pytest.param(
        "permissions_boundary",
        ...,
        f"{SOURCE}: permissions_boundary: required key is missing",
        id="missing-permissions-boundary",
    ),
    pytest.param(
        "permissions_boundary",
        "arn:aws:iam::111111111111:policy/boundary",
        f"{SOURCE}: permissions_boundary: 'arn:aws:iam::111111111111:policy/boundary' is not an IAM policy name "
        "(letters, digits and +=,.@_-)",
        id="boundary-arn-not-name",
    ),
    pytest.param("waves", [], f"{SOURCE}: waves: the pipeline needs at least one wave", id="no-waves"),
    pytest.param(
        "waves.1.environments",
        [],
        f"{SOURCE}: waves[1].environments: a wave needs at least one environment",
        id="empty-wave",
    ),
    pytest.param(
        "waves.2.approval",
        ...,
        f"{SOURCE}: waves[2].approval: a production wave needs approval: manual, got 'none'",
        id="production-without-approval",
    ),
    pytest.param(
        "waves.2.approval",
        "none",
        f"{SOURCE}: waves[2].approval: a production wave needs approval: manual, got 'none'",
        id="production-with-approval-none",
    ),
    pytest.param(
        "waves.2.approval",
        "auto",
        f"{SOURCE}: waves[2].approval: Input should be 'manual' or 'none'",
        id="unknown-approval",
    ),
    pytest.param(
        "waves.1.name",
        "dev",
        f"{SOURCE}: waves[1].name: 'dev' is already the name of waves[0]",
        id="duplicate-wave-name",
    ),
    pytest.param(
        "waves.1.name",
        "assets",
        f"{SOURCE}: waves[1].name: 'assets' would name the pipeline stage 'Assets', which is reserved: "
        "Source, Build, UpdatePipeline, Assets",
        id="reserved-wave-name",
    ),
    pytest.param(
        "waves.1.environments.0.name",
        "dev",
        f"{SOURCE}: waves[1].environments[0].name: 'dev' is already the name of waves[0].environments[0]",
        id="duplicate-environment-name-across-waves",
    ),
    pytest.param(
        "waves.0.environments.0.name",
        "trainium-pipeline",
        f"{SOURCE}: waves[0].environments[0].name: 'trainium-pipeline' would name the stage 'TrainiumPipeline', "
        "which is reserved: TrainiumPipeline",
        id="reserved-environment-name",
    ),
    pytest.param(
        "waves.0.environments.0.config",
        "/etc/dev.yaml",
        f"{SOURCE}: waves[0].environments[0].config: '/etc/dev.yaml' is not a relative path to a .yaml file "
        "(relative to this pipeline file's folder)",
        id="absolute-environment-path",
    ),
    pytest.param(
        "waves.0.environments.0.config",
        "environments/absent.yaml",
        f"{SOURCE}: waves[0].environments[0].config: config/environments/absent.yaml not found",
        id="missing-environment-file",
    ),
    pytest.param(
        "waves.0.environments.0.account",
        "999999999999",
        f"{SOURCE}: waves[0].environments[0].account: '999999999999', but config/environments/dev.yaml has "
        "account '111111111111'",
        id="account-disagrees-with-environment-file",
    ),
    pytest.param(
        "waves.1.environments.0.region",
        "us-east-2",
        f"{SOURCE}: waves[1].environments[0].region: 'us-east-2', but config/environments/staging.yaml has "
        "region 'us-east-1'",
        id="region-disagrees-with-environment-file",
    ),
    pytest.param(
        "waves.0.environments.0.canary",
        "sometimes",
        f"{SOURCE}: waves[0].environments[0].canary: Input should be a valid boolean, unable to interpret input",
        id="canary-not-a-boolean",
    ),
    pytest.param(
        "waves.2.environments.0.canary",
        True,
        f"{SOURCE}: waves[2].environments[0].canary: true, but config/environments/prod-us-east-1.yaml has "
        "cluster.endpoint_public_cidrs empty: the canary runs from the pipeline's check, which reaches the "
        "API server only through its public endpoint",
        id="canary-on-a-private-endpoint",
    ),
    pytest.param(
        "tooling.account",
        "333333333333",
        f"{SOURCE}: tooling.account: 333333333333 is also the account of production environment "
        "'prod-us-east-1' (waves[2].environments[0]); run the pipeline from its own tooling account",
        id="tooling-account-is-production",
    ),
]


@pytest.mark.parametrize(("path", "value", "expected"), BAD_PIPELINES)
def test_each_problem_is_one_line_naming_its_key(path: str, value: Any, expected: str) -> None:
    assert expected in problems_of(with_change(path, value))


def test_names_that_give_one_construct_id_are_refused() -> None:
    data = example_data()
    data["waves"][2]["environments"][0]["name"] = "prod1"
    data["waves"][2]["environments"][1]["name"] = "prod-1"
    assert problems_of(data) == [
        (
            f"{SOURCE}: waves[2].environments[1].name: 'prod-1' gives the same stage id (Prod1) as "
            "waves[2].environments[0].name 'prod1'"
        )
    ]


def test_two_environments_on_one_account_and_region_are_refused_across_waves() -> None:
    data = example_data()
    staging = data["waves"][1]["environments"][0]
    staging.update(config="environments/prod-us-west-2.yaml", account="333333333333", region="us-west-2")
    assert problems_of(data) == [
        (
            f"{SOURCE}: waves[2].environments[1]: account 333333333333 in us-west-2 is already the target of "
            "'staging' (waves[1].environments[0]); one TrainiumStack per account and region"
        )
    ]


def test_an_invalid_environment_file_reports_its_own_lines_under_its_own_name(tmp_path: Path) -> None:
    environments = tmp_path / "environments"
    environments.mkdir()
    broken = (REPO_ROOT / "config" / "environments" / "dev.yaml").read_text()
    broken = broken.replace("instance_type: trn1.32xlarge", "instance_type: trn1.64xlarge")
    broken = broken.replace("fsx:", "fsxx:")
    (environments / "dev.yaml").write_text(broken)
    for name in ("staging.yaml", "prod-us-east-1.yaml", "prod-us-west-2.yaml"):
        (environments / name).write_text((REPO_ROOT / "config" / "environments" / name).read_text())
    data = with_change("waves.1.name", "dev")
    lines = problems_of(data, folder=tmp_path)
    dev = environments / "dev.yaml"
    assert lines == [
        f"{SOURCE}: waves[1].name: 'dev' is already the name of waves[0]",
        (
            f"{dev}: trainium.node_groups[0].instance_type: 'trn1.64xlarge' is not in the Trainium instance "
            "catalog; allowed: trn1.32xlarge, trn1n.32xlarge, trn2.48xlarge, trn2u.48xlarge"
        ),
        (
            f"{dev}: fsxx: unknown key; did you mean 'fsx'? allowed here: name, account, region, vpc, cluster, "
            "system_nodes, trainium, fsx, ecr, autoscaler, observability, fabric_check, node_check, teams, datasets, runs"
        ),
    ]


def test_an_environment_file_named_twice_is_reported_once(tmp_path: Path) -> None:
    data = example_data()
    for wave in data["waves"]:
        for environment in wave["environments"]:
            environment["config"] = "broken.yaml"
    (tmp_path / "broken.yaml").write_text("name: [\n")
    lines = problems_of(data, folder=tmp_path)
    assert [line for line in lines if line.startswith(str(tmp_path))] == [
        f"{tmp_path / 'broken.yaml'}: not valid YAML: line 2: expected the node content, but found '<stream end>'"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- name: trainium\n", "the file must hold a mapping of keys (name, tooling, source, waves)"),
        ("name: trainium\nname: other\n", "not valid YAML: line 2: key 'name' appears twice"),
    ],
    ids=["not-a-mapping", "repeated-key"],
)
def test_a_file_that_is_not_a_pipeline_is_one_line(tmp_path: Path, text: str, expected: str) -> None:
    file = tmp_path / "pipeline.yaml"
    file.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_pipeline(file)
    assert raised.value.lines() == [f"{file}: {expected}"]


def test_a_missing_pipeline_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_pipeline(tmp_path / "absent.yaml")
    assert raised.value.lines() == [f"{tmp_path / 'absent.yaml'}: configuration file not found"]


def test_the_pipeline_file_must_be_in_the_repository(tmp_path: Path) -> None:
    assert repository_path("config/pipeline.example.yaml") == "config/pipeline.example.yaml"
    assert repository_path(EXAMPLE) == "config/pipeline.example.yaml"
    with pytest.raises(ConfigError) as raised:
        repository_path(tmp_path / "pipeline.yaml")
    (line,) = raised.value.lines()
    assert line.startswith(f"{tmp_path / 'pipeline.yaml'}: the pipeline file must be inside the repository")


def test_every_key_of_the_example_is_documented_in_the_model() -> None:
    """The example uses every key of the pipeline file, so a reader sees all of them."""
    data = example_data()
    assert set(data) == set(PipelineSettings.model_fields)
    assert set(data["waves"][2]) == {"name", "production", "approval", "environments"}
    assert set(data["waves"][0]["environments"][0]) == set(EnvironmentSettings.model_fields)


def test_the_canary_is_off_unless_an_environment_turns_it_on() -> None:
    pipeline = load_pipeline(EXAMPLE)
    assert [environment.canary for _, environment, _ in pipeline.stages()] == [False] * 4
    on = parse_pipeline(
        with_change("waves.1.environments.0.canary", True), source=SOURCE, folder=Path("config")
    )
    assert [environment.canary for _, environment, _ in on.stages()] == [False, True, False, False]
