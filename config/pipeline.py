"""The pipeline file: where TrainiumPipeline runs, what it builds, and the waves it deploys in order.

One YAML file (``config/pipeline.example.yaml``) names the tooling account, the source repository
and an ordered list of waves; each wave holds one or more environments, and each environment points
to its own environment file (the format of ``config/default.yaml``). Everything is validated before
any construct is built, with the same one-line errors as the environment files:
``file: key.path: message``, the environment files' own problems under their own file names.

No aws-cdk-lib import, like ``config.model``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationError, ValidationInfo, field_validator

from config.fields import AccountId, Name, Region, _matching, _problem, _Section
from config.loader import ConfigError, load_config, read_yaml, validation_problems
from config.model import StackConfig

__all__ = [
    "PIPELINE_STACK_ID",
    "REPO_ROOT",
    "RESERVED_PIPELINE_STAGES",
    "EnvironmentSettings",
    "Pipeline",
    "PipelineConfigError",
    "PipelineSettings",
    "SourceSettings",
    "ToolingSettings",
    "WaveSettings",
    "construct_id_of",
    "load_pipeline",
    "parse_pipeline",
]

REPO_ROOT = Path(__file__).resolve().parent.parent

# CodePipeline stages that CDK Pipelines adds itself, before the waves; a wave may not take their names.
RESERVED_PIPELINE_STAGES = ("Source", "Build", "UpdatePipeline", "Assets")
# The pipeline stack's construct id: the stages are its siblings in the app, so no stage may take it.
PIPELINE_STACK_ID = "TrainiumPipeline"

ConnectionArn = Annotated[
    str,
    _matching(
        r"arn:aws[a-z-]*:(codestar-connections|codeconnections):[a-z0-9-]+:\d{12}:connection/[0-9a-f-]{36}",
        "a CodeConnections connection ARN such as "
        "arn:aws:codeconnections:us-west-2:111122223333:connection/0123abcd-4567-89ab-cdef-0123456789ab",
    ),
]
Repository = Annotated[
    str,
    _matching(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", "a repository as owner/name, such as my-org/trainium-cdk"),
]


def _branch_name(value: str) -> str:
    # git check-ref-format's rules, the ones a typo can break.
    if (
        not re.fullmatch(r"[A-Za-z0-9._/-]+", value)
        or value.startswith(("/", "-", "."))
        or value.endswith(("/", ".", ".lock"))
        or ".." in value
        or "//" in value
    ):
        raise _problem(f"{value!r} is not a git branch name such as main or release/1.0")
    return value


def _relative_path(value: str) -> str:
    path = PurePosixPath(value)
    if path.is_absolute() or "\\" in value or not value.endswith((".yaml", ".yml")):
        raise _problem(
            f"{value!r} is not a relative path to a .yaml file (relative to this pipeline file's folder)"
        )
    return value


class ToolingSettings(_Section):
    """The account and region of the pipeline itself (CodePipeline, CodeBuild, the artifact bucket)."""

    account: AccountId
    region: Region


class SourceSettings(_Section):
    connection_arn: ConnectionArn
    """A CodeConnections (CodeStar) connection in the tooling account and region, already authorized."""
    repository: Repository
    branch: Annotated[str, AfterValidator(_branch_name)]


class EnvironmentSettings(_Section):
    name: Name
    """Names the stage (dev -> Dev, prod-us-east-1 -> ProdUsEast1) and its stack (Dev-TrainiumStack)."""
    config: Annotated[str, AfterValidator(_relative_path)]
    """The environment file, relative to the pipeline file's folder."""
    account: AccountId
    """Must equal the environment file's account: the pipeline file says where every stage deploys."""
    region: Region
    canary: bool = False
    """After the deploy, the stage's deployment check runs the canary (``make canary``, docs/health.md)
    and fails the stage with its failure line. Off by default: each canary brings up to two Trainium
    nodes of the first team's first node group for its run and their scale-down (about 30 to 60
    minutes, docs/pipeline.md). Needs the environment's API server reachable from the pipeline
    (``cluster.endpoint_public_cidrs``)."""


class WaveSettings(_Section):
    name: Name
    """Names the pipeline stage (staging -> Staging)."""
    production: bool = False
    """Production waves get ConfirmPermissionsBroadening and need approval: manual."""
    approval: Literal["manual", "none"] = Field(default="none", validate_default=True)
    """manual: a ManualApprovalStep per stage, after its change set is created and before it executes."""
    environments: list[EnvironmentSettings]

    @field_validator("approval")
    @classmethod
    def _production_is_approved(cls, approval: str, info: ValidationInfo) -> str:
        if info.data.get("production") and approval != "manual":
            raise _problem(f"a production wave needs approval: manual, got {approval!r}")
        return approval

    @field_validator("environments")
    @classmethod
    def _not_empty(cls, environments: list[EnvironmentSettings]) -> list[EnvironmentSettings]:
        if not environments:
            raise _problem("a wave needs at least one environment")
        return environments


# IAM CreatePolicy PolicyName: 1-128 of letters, digits and +=,.@_-.
PolicyName = Annotated[
    str, _matching(r"[A-Za-z0-9+=,.@_-]{1,128}", "an IAM policy name (letters, digits and +=,.@_-)")
]


class PipelineSettings(_Section):
    name: Name
    """The CodePipeline's name, and the prefix of the deployment-check role in the tooling account."""
    tooling: ToolingSettings
    source: SourceSettings
    permissions_boundary: PolicyName
    """The customer managed policy that bounds every role the pipeline and its stacks create, and the
    bootstrap's CloudFormation execution role (cdk bootstrap --custom-permissions-boundary): it must
    exist under this name in the tooling account and every target account (docs/supply-chain.md)."""
    waves: list[WaveSettings]

    @field_validator("waves")
    @classmethod
    def _not_empty(cls, waves: list[WaveSettings]) -> list[WaveSettings]:
        if not waves:
            raise _problem("the pipeline needs at least one wave")
        return waves


def construct_id_of(name: str) -> str:
    """The construct id of a wave or an environment's stage: staging -> Staging, prod-us-east-1 -> ProdUsEast1."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("-"))


class PipelineConfigError(ConfigError):
    """Problems of the pipeline file and of the environment files it names, each line under its own file."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        super().__init__(errors[0].source, [problem for error in errors for problem in error.problems])

    def lines(self) -> list[str]:
        return [line for error in self.errors for line in error.lines()]


@dataclass(frozen=True)
class Pipeline:
    """A validated pipeline file and the environment files it names, loaded."""

    settings: PipelineSettings
    environments: Mapping[str, StackConfig]
    """Each environment's configuration, by environment name."""

    def stages(self) -> Iterator[tuple[WaveSettings, EnvironmentSettings, StackConfig]]:
        """Every environment in deployment order: waves in file order, environments in wave order."""
        for wave in self.settings.waves:
            for environment in wave.environments:
                yield wave, environment, self.environments[environment.name]


def load_pipeline(path: str | Path) -> Pipeline:
    """Load and validate the pipeline file and its environment files (relative to its folder)."""
    return parse_pipeline(read_yaml(path), source=str(path), folder=Path(path).parent)


def parse_pipeline(data: object, *, source: str = "<pipeline>", folder: Path = Path()) -> Pipeline:
    """Validate parsed data: the file's own keys, then across waves, then each environment file."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            source, [("", "the file must hold a mapping of keys (name, tooling, source, waves)")]
        )
    try:
        settings = PipelineSettings.model_validate(data)
    except ValidationError as error:
        raise ConfigError(source, validation_problems(error, PipelineSettings)) from None
    problems = _pipeline_problems(settings)
    environment_errors: dict[str, ConfigError] = {}
    environments: dict[str, StackConfig] = {}
    for key, environment in _environments(settings):
        file = folder / environment.config
        if not file.is_file():
            problems.append((f"{key}.config", f"{file} not found"))
            continue
        try:
            config = load_config(file)
        except ConfigError as error:
            environment_errors.setdefault(error.source, error)
            continue
        for field, stated, actual in (
            ("account", environment.account, config.account),
            ("region", environment.region, config.region),
        ):
            if stated != actual:
                problems.append((f"{key}.{field}", f"{stated!r}, but {file} has {field} {actual!r}"))
        if environment.canary and not config.cluster.endpoint_public_cidrs:
            message = (
                f"true, but {file} has cluster.endpoint_public_cidrs empty: the canary runs from the "
                "pipeline's check, which reaches the API server only through its public endpoint"
            )
            problems.append((f"{key}.canary", message))
        environments[environment.name] = config
    errors = ([ConfigError(source, problems)] if problems else []) + list(environment_errors.values())
    if errors:
        raise PipelineConfigError(errors)
    return Pipeline(settings=settings, environments=environments)


def repository_path(path: str | Path) -> str:
    """``path`` relative to the repository root, as the pipeline's synth step names it in its checkout."""
    try:
        return Path(path).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        raise ConfigError(
            str(path),
            [
                (
                    "",
                    f"the pipeline file must be inside the repository ({REPO_ROOT}): the pipeline synthesizes it from its checkout",
                )
            ],
        ) from None


def _environments(
    settings: PipelineSettings, *, production_only: bool = False
) -> Iterator[tuple[str, EnvironmentSettings]]:
    """Every environment with its key path, in file order."""
    for wave_index, wave in enumerate(settings.waves):
        if production_only and not wave.production:
            continue
        for index, environment in enumerate(wave.environments):
            yield f"waves[{wave_index}].environments[{index}]", environment


def _pipeline_problems(settings: PipelineSettings) -> list[tuple[str, str]]:
    """Problems between keys, as (key path, message): names, targets and where the pipeline may run."""
    problems: list[tuple[str, str]] = []
    tooling = settings.tooling
    _, _, _, connection_region, connection_account, _ = settings.source.connection_arn.split(":", 5)
    if connection_account != tooling.account:
        problems.append(
            (
                "source.connection_arn",
                f"the connection is in account {connection_account}; it must be in the tooling account {tooling.account}",
            )
        )
    if connection_region != tooling.region:
        problems.append(
            (
                "source.connection_arn",
                f"the connection is in region {connection_region}; it must be in the tooling region {tooling.region}",
            )
        )

    waves: dict[str, tuple[str, str]] = {}
    for index, wave in enumerate(settings.waves):
        key = f"waves[{index}].name"
        problem = _naming_problem(
            wave.name, waves, key, reserved=RESERVED_PIPELINE_STAGES, what="pipeline stage"
        )
        if problem:
            problems.append((key, problem))

    stages: dict[str, tuple[str, str]] = {}
    targets: dict[tuple[str, str], tuple[str, str]] = {}
    for key, environment in _environments(settings):
        problem = _naming_problem(
            environment.name, stages, f"{key}.name", reserved=(PIPELINE_STACK_ID,), what="stage"
        )
        if problem:
            problems.append((f"{key}.name", problem))
        target = (environment.account, environment.region)
        if target in targets:
            other_key, other_name = targets[target]
            message = (
                f"account {environment.account} in {environment.region} is already the target of "
                f"{other_name!r} ({other_key}); one TrainiumStack per account and region"
            )
            problems.append((key, message))
        else:
            targets[target] = (key, environment.name)

    # The pipeline can deploy to every stage's account; inside a production account, whoever can change
    # the pipeline or its builds could act in production without passing the approval.
    for key, environment in _environments(settings, production_only=True):
        if environment.account == tooling.account:
            message = (
                f"{tooling.account} is also the account of production environment {environment.name!r} "
                f"({key}); run the pipeline from its own tooling account"
            )
            problems.append(("tooling.account", message))
    return problems


def _naming_problem(
    name: str, seen: dict[str, tuple[str, str]], key: str, *, reserved: tuple[str, ...], what: str
) -> str | None:
    """Why ``name`` cannot name a construct (its id taken or reserved), remembering it in ``seen`` if it can."""
    identifier = construct_id_of(name)
    if identifier in reserved:
        return f"{name!r} would name the {what} {identifier!r}, which is reserved: {', '.join(reserved)}"
    if identifier in seen:
        other_key, other_name = seen[identifier]
        if other_name == name:
            return f"{name!r} is already the name of {other_key.removesuffix('.name')}"
        return f"{name!r} gives the same {what} id ({identifier}) as {other_key} {other_name!r}"
    seen[identifier] = (key, name)
    return None
