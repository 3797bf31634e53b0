"""What runs on the cluster: teams (a namespace and a Volcano queue each), data sets, training runs.

A run says what it is (image, script, arguments, nodes, node group, team, data sets, precompile,
resume, retries); how Trainium is wired (devices, EFA interfaces, ``--nproc_per_node``, the
rendezvous, the claims, the labels) is derived from the catalog and the cluster. A preset
(config/presets.py) fills a run from a few recipe parameters: the shipped BERT-large run is one.

Checks that relate runs to teams, node groups and data sets live in config/consistency.py.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from cluster_facts.kubernetes_names import ROOT_SQUASH_ID, VOLCANO_DEFAULT_QUEUE, team_uid
from cluster_facts.neuron_stack import TRAINING_IMAGE
from cluster_facts.volcano_retries import MAX_RESTARTS
from config.fields import Name, PinnedImage, RoleArn, _matching, _problem, _Section
from config.presets import BERT_LARGE, NATIVE_FSDP2

__all__ = [
    "DEFAULT_TEAMS",
    "DEFAULT_TRAINING_IMAGE",
    "BertParameters",
    "DatasetFileSettings",
    "DatasetSettings",
    "MovedSection",
    "NativeParameters",
    "PrecompileSettings",
    "ResumeSettings",
    "RunSettings",
    "TeamQuotaSettings",
    "TeamSettings",
    "moved_training_section",
]

# AWS's Neuron PyTorch training container of the newest Neuron release that supports PyTorch/XLA
# training, pinned by tag: its one home is the Neuron table (cluster_facts/neuron_stack.py), which
# the TorchX component and docker/Dockerfile follow too.
DEFAULT_TRAINING_IMAGE = TRAINING_IMAGE

# Namespaces the cluster's own components use: a team may not take one.
_RESERVED_NAMESPACES = ("default", "volcano-system", "amazon-cloudwatch", "trainium-system")
# The Job name is <run>-<hash>, its headless Service's name too (a DNS label of at most 63), and
# the pods' hostnames <job>-worker-<index> must stay within 63 characters.
RunName = Annotated[
    str,
    _matching(r"[a-z]([a-z0-9-]{0,37}[a-z0-9])?", "a run name of 1-39 lowercase letters, digits and '-'"),
]
Sha256 = Annotated[str, _matching(r"[0-9a-f]{64}", "a SHA-256 of 64 lowercase hex digits")]
HttpsUrl = Annotated[str, _matching(r"https://[^\s]+", "an https:// URL")]
SourceUrl = Annotated[
    str,
    _matching(
        r"https://[^\s]+|s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^\s]*[^\s/]",
        "an https:// URL or an S3 object such as s3://bucket/key",
    ),
]
"""Where a data set's file or archive comes from: https://, or an S3 object, which the staging Job
reads read-only through a role that may get exactly the objects named (constructs_trn/dataset_access.py)."""
FileName = Annotated[str, _matching(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", "a plain file name (no '/')")]
EnvName = Annotated[str, _matching(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name")]


def _hashed_requirement(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[\w.+!-]+( --hash=sha256:[0-9a-f]{64})+", value):
        raise _problem(
            f"{value!r} is not a pinned requirement with its hash: write it as "
            "name==version --hash=sha256:<64 hex digits> (pip's --require-hashes form)"
        )
    return value


HashedRequirement = Annotated[str, AfterValidator(_hashed_requirement)]


def _not_squashed(value: int | None) -> int | None:
    if value == ROOT_SQUASH_ID:
        raise _problem(f"{value} is the id root is squashed to on the file system; pick another")
    return value


def _not_volcanos_default(value: str | None) -> str | None:
    if value == VOLCANO_DEFAULT_QUEUE:
        raise _problem(
            f"{value!r} is Volcano's own queue, where a Job without a queue lands (uncapped, shared by "
            "everyone); pick another queue name"
        )
    return value


def _not_reserved(value: str) -> str:
    if value in _RESERVED_NAMESPACES or value.startswith("kube-"):
        raise _problem(f"{value!r} is a namespace the cluster uses itself; pick another team name")
    return value


class TeamQuotaSettings(_Section):
    """The most the team's namespace holds at once (a ResourceQuota on requests, k8s_charts/teams/team_quota.py).

    An amount left out is not limited by the quota: the team's Volcano queue holds its share of
    Trainium (its capability: what its node groups hold at max_size) and keeps a queued run's pods
    Pending until the share frees. A quota refuses the pods themselves, and Volcano ends a run whose
    pods it refuses for about 3 minutes: set an amount only as a hard ceiling on running and queued
    runs together."""

    pods: int = Field(default=64, ge=2, le=10000)
    """Pods at once, running and queued, the team's etcd included."""
    jobs: int = Field(default=64, ge=1, le=10000)
    """Volcano Jobs at once (running, queued, and ended but not deleted; the stack's applied runs
    included), and as many PodGroups, Services, ConfigMaps and NetworkPolicies for them (what
    Volcano makes for each Job): the team's share of the cluster's API objects (k8s_charts/teams/team_quota.py)."""
    neuron_devices: int | None = Field(default=None, ge=1)
    """Trainium chips (aws.amazon.com/neuron) its pods request in total."""
    cpu: int | None = Field(default=None, ge=1)
    """Cores its pods request in total."""
    memory_gib: int | None = Field(default=None, ge=1)
    """Memory its pods request in total, in GiB."""


class TeamSettings(_Section):
    name: Annotated[Name, AfterValidator(_not_reserved)]
    """The team's namespace."""
    queue: Annotated[Name | None, AfterValidator(_not_volcanos_default)] = None
    """Its Volcano queue (TorchX: -cfg queue=<name>); defaults to the team's name."""
    node_groups: list[Name] = Field(default_factory=list)
    """The Trainium node groups its runs may use; empty: all of them. The queue's capability is
    what those groups hold at max_size."""
    weight: int = Field(default=1, ge=1, le=65535)
    """Its share when queues compete for the same nodes."""
    member_role_arns: list[RoleArn] = Field(default_factory=list)
    """IAM roles whose users may submit and watch jobs in the team's namespace (and nothing else)."""
    uid: Annotated[int | None, AfterValidator(_not_squashed)] = Field(
        default=None, ge=10000, le=2_147_483_647
    )
    """The uid and gid that own the team's directory /teams/<team> and that its training pods run
    as; defaults to one derived from the name (cluster_facts.kubernetes_names.team_uid). Set it to
    match an identity your other clients of the file system use, or when two derived ids collide."""
    quota: TeamQuotaSettings = Field(default_factory=TeamQuotaSettings)
    """The most its namespace holds at once: 64 pods, and only the amounts set here."""

    @property
    def queue_name(self) -> str:
        return self.queue or self.name

    @property
    def owner_id(self) -> int:
        return self.uid if self.uid is not None else team_uid(self.name)


DEFAULT_TEAMS = (TeamSettings(name="training", queue="test"),)
"""One team, in the namespace ``training``, on the queue TorchX's examples submit to: ``test``."""


class DatasetFileSettings(_Section):
    url: SourceUrl
    sha256: Sha256
    name: FileName


class DatasetSettings(_Section):
    name: Name
    archive_url: SourceUrl | None = None
    """A tar archive streamed and unpacked into the data set's directory (https:// or s3://)."""
    archive_sha256: Sha256 | None = None
    """Checked while the archive streams; required with archive_url (the staging job refuses any
    other bytes, and the marker that training pods require records it)."""
    files: list[DatasetFileSettings] = Field(default_factory=list)
    """Single files (a script, a tokenizer), each checked by SHA-256; runs check them again before use."""

    @model_validator(mode="after")
    def _something_to_stage(self) -> DatasetSettings:
        if self.archive_sha256 is not None and self.archive_url is None:
            raise _problem("archive_sha256 without archive_url checks nothing")
        if self.archive_url is not None and self.archive_sha256 is None:
            raise _problem(
                "archive_url needs archive_sha256: what is unpacked where runs read it must be the "
                "archive you checked (sha256sum of the tar file)"
            )
        if self.archive_url is None and not self.files:
            raise _problem("a data set needs an archive_url, files, or both")
        return self


class PrecompileSettings(_Section):
    steps: int = Field(default=10, ge=1, le=10000)
    """Steps of the trial run neuron_parallel_compile traces (enough to meet every graph)."""
    steps_arg: str = "--steps_this_run"
    """The script's option for a step limit (the Neuron samples' --steps_this_run)."""


class ResumeSettings(_Section):
    when: str
    """A glob in the run's output directory; a file matching it means a checkpoint to resume from."""
    args: list[str] = Field(min_length=1)
    """Appended to the script's arguments when one exists."""


# The tutorial's run: 2 nodes x 32 gradient-accumulation micro-steps. With other node counts the
# accumulation steps shrink or grow in proportion, so the global batch (and the loss curve) stay.
TUTORIAL_NODES = 2
TUTORIAL_GRAD_ACCUM_USTEPS = 32


class BertParameters(_Section):
    """The recipe of preset bert-large (the tutorial's values)."""

    batch_size: int = Field(default=16, ge=1)
    """Per worker (NeuronCore)."""
    grad_accum_usteps: int | None = Field(default=None, ge=1)
    """Defaults to the tutorial's 32 x 2 / nodes: a fixed global batch (strong scaling)."""
    bf16: bool = True
    shards_per_ckpt: int = Field(default=1, ge=1, le=100)
    """The script's --shards_per_ckpt: a checkpoint every this many data shards. A failure mid-run
    loses at most the steps since the last one (docs/health.md, "A node lost mid-run")."""
    stochastic_rounding: bool = True
    """NEURON_RT_STOCHASTIC_ROUNDING_EN, set either way (the script turns it on when it is absent)."""
    dataset_archive_sha256: Sha256 | None = None
    """The SHA-256 of the tutorial's data set archive. AWS publishes none, so the preset cannot
    carry one: unset, the archive is staged unverified and its streamed checksum is written to the
    marker (`kubectl logs` of the staging Job shows it too); set it to pin that archive from then on
    (a new data set version: staged again, and verified)."""


class NativeParameters(_Section):
    """The recipe of preset native-fsdp2: a Llama-style decoder (RMSNorm, rotary attention, SwiGLU)
    trained byte-level with FSDP2, every block and the whole model sharded across all workers."""

    steps: int = Field(default=2000, ge=1, le=10_000_000)
    """Optimizer steps in all (a resumed run continues to this count)."""
    batch_size: int = Field(default=4, ge=1, le=4096)
    """Sequences per worker (logical NeuronCore) and step."""
    sequence_length: int = Field(default=512, ge=8, le=32768)
    layers: int = Field(default=8, ge=1, le=256)
    model_dim: int = Field(default=1024, ge=32, le=32768)
    heads: int = Field(default=16, ge=1, le=256)
    learning_rate: float = Field(default=3e-4, gt=0, le=1)
    checkpoint_every: int = Field(default=200, ge=1, le=1_000_000)
    """Steps between checkpoints: what a failure mid-run can cost (docs/health.md, "A node lost mid-run")."""
    seed: int = Field(default=0, ge=0, le=2**31 - 1)
    compile: bool = False
    """torch.compile with the neuron backend; off: eager mode, the simplest path Neuron documents first."""

    @field_validator("heads")
    @classmethod
    def _heads_divide_the_width(cls, heads: int, info: ValidationInfo) -> int:
        width = info.data.get("model_dim")
        if width is not None and (width % heads or (width // heads) % 2):
            raise _problem(
                f"{heads} heads do not split model_dim {width} into even head widths; allowed: a divisor "
                "of model_dim whose quotient is even (rotary attention turns pairs of dimensions)"
            )
        return heads


_PARAMETERS: dict[str, type[BaseModel]] = {
    BERT_LARGE.name: BertParameters,
    NATIVE_FSDP2.name: NativeParameters,
}
_PRESET_OWNS = ("script", "args", "datasets", "python_packages", "resume")


def _preset_parameters(model: type[BaseModel], value: Any) -> BaseModel:
    """``value`` validated as ``model``'s; its errors keep their key paths, and an unknown key lists
    the keys of this preset's recipe (the loader would name another's)."""
    if not isinstance(value, dict):
        raise _problem(f"must be a mapping of keys; allowed keys: {', '.join(model.model_fields)}")
    try:
        return model.model_validate(value)
    except ValidationError as error:
        details: list[Any] = []
        for detail in error.errors(include_url=False):
            message = detail["msg"]
            if detail["type"] == "extra_forbidden":
                message = f"unknown key; allowed here: {', '.join(model.model_fields)}"
            details.append(
                {
                    "type": PydanticCustomError("config", message),
                    "loc": detail["loc"],
                    "input": detail["input"],
                }
            )
        raise ValidationError.from_exception_data(error.title, details) from None


# How long a run may hold Trainium nodes without progressing (cluster_programs/stuck_runs.py). At
# least 10 minutes: longer than an image pull of the Neuron training image and than the run's own
# quietest wait (the compile-cache lock, 5 minutes; tests/cluster_programs/test_stuck_runs.py holds the two
# together); at most a day.
STUCK_MINUTES_RANGE = (10, 1440)
DEFAULT_STUCK_RUN_MINUTES = 10


def stuck_minutes_in_range(value: int) -> int:
    low, high = STUCK_MINUTES_RANGE
    if not low <= value <= high:
        raise _problem(
            f"{value} minutes is out of range; allowed: {low} (longer than an image pull and the run's "
            f"own quiet waits) to {high}"
        )
    return value


class RunSettings(_Section):
    name: RunName
    apply: bool = False
    """Apply the run at deploy time; otherwise it is rendered (cdk.out/k8s/run-<name>.yaml) only."""
    team: Name | None = None
    """Defaults to the first team."""
    node_group: Name | None = None
    """Defaults to the team's first node group (the cluster's first when the team lists none)."""
    nodes: int = Field(default=TUTORIAL_NODES, ge=1)
    image: PinnedImage = DEFAULT_TRAINING_IMAGE
    preset: Literal["bert-large", "native-fsdp2"] | None = None
    # After nodes and preset: its validator reads both.
    parameters: BertParameters | NativeParameters | None = None
    """The preset's recipe; only with a preset."""
    logical_core_size: Literal[1, 2] | None = None
    """Physical NeuronCores per logical one (LNC, ``NEURON_LOGICAL_NC_CONFIG``): one worker per logical
    core. Default: the instance type's (2 on trn2, 1 on trn1; cluster_facts/instance_catalog.py)."""
    script: str | None = None
    """What torchrun runs: a path in the image, or $(DATASET_<NAME>)/file of a staged data set."""
    args: list[str] = Field(default_factory=list)
    """The script's arguments; $(OUTPUT_DIR), $(RUN_ID) and $(DATASET_<NAME>) are filled in."""
    env: dict[EnvName, str] = Field(default_factory=dict)
    datasets: list[Name] = Field(default_factory=list)
    python_packages: list[HashedRequirement] = Field(default_factory=list)
    """Installed into each pod with pip --require-hashes before the run starts."""
    precompile: PrecompileSettings | None = None
    resume: ResumeSettings | None = None
    cacheset: Name | None = None
    """Names the run's Neuron compile caches; defaults to the run's name. Two applied runs of one
    team never share one."""
    retries: int = Field(default=3, ge=0, le=MAX_RESTARTS)
    """Whole-gang restarts after a failed or evicted pod (each resumes from the newest checkpoint)."""
    stuck_minutes: Annotated[int, AfterValidator(stuck_minutes_in_range)] | None = None
    """How long this run's pods may hold Trainium nodes without progressing (a waiting container, no
    log output) before the gang watchdog ends it; None: ``autoscaler.stuck_run_minutes``. Not part of
    the run's identity: changing it does not restart the run."""

    @model_validator(mode="before")
    @classmethod
    def _preset_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") == BERT_LARGE.name:
            data = {"parameters": {}, "precompile": {}, **data}
        if isinstance(data, dict) and data.get("preset") == NATIVE_FSDP2.name:
            data = {"parameters": {}, **data}
        return data

    @field_validator("parameters", mode="wrap")
    @classmethod
    def _parameters_of_the_preset(
        cls, value: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> Any:
        model = _PARAMETERS.get(info.data.get("preset") or "")
        if value is None or model is None:
            return handler(value)
        return _preset_parameters(model, value)

    @field_validator("parameters")
    @classmethod
    def _parameters_fit(
        cls, value: BertParameters | NativeParameters | None, info: ValidationInfo
    ) -> BertParameters | NativeParameters | None:
        if value is None:
            return None
        if info.data.get("preset") is None:
            raise _problem(
                "parameters belong to a preset; set preset: bert-large or native-fsdp2, or describe the "
                "run with script and args"
            )
        if not isinstance(value, BertParameters):
            return value
        nodes = info.data.get("nodes")
        if (
            value.grad_accum_usteps is None
            and nodes is not None
            and (TUTORIAL_NODES * TUTORIAL_GRAD_ACCUM_USTEPS) % nodes
        ):
            raise _problem(
                f"{nodes} nodes cannot keep the tutorial's global batch ({TUTORIAL_NODES} nodes x "
                f"{TUTORIAL_GRAD_ACCUM_USTEPS} steps); set parameters.grad_accum_usteps explicitly"
            )
        return value

    @model_validator(mode="after")
    def _what_runs(self) -> RunSettings:
        if self.preset is None and self.script is None:
            raise _problem("a run needs a script (or a preset: bert-large, native-fsdp2)")
        if self.preset is not None:
            # Only what says something: an empty list or a null is the same as leaving the key out.
            given = [key for key in _PRESET_OWNS if getattr(self, key)]
            if given:
                raise _problem(
                    f"{', '.join(given)} come{'s' if len(given) == 1 else ''} from preset {self.preset}; "
                    "leave them out or drop the preset"
                )
        return self

    @property
    def cacheset_name(self) -> str:
        return self.cacheset or self.name

    @property
    def grad_accum_usteps(self) -> int:
        """The BERT recipe's accumulation steps: as given, or the tutorial's global batch kept."""
        assert isinstance(self.parameters, BertParameters)
        if self.parameters.grad_accum_usteps is not None:
            return self.parameters.grad_accum_usteps
        return TUTORIAL_NODES * TUTORIAL_GRAD_ACCUM_USTEPS // self.nodes


def moved_training_section(value: Any) -> Any:
    """``training:`` described the one BERT run; ``runs:`` replaced it."""
    if value is None:
        return None
    raise _problem(
        "the training section was replaced by runs (docs/runs.md); the tutorial's run is "
        "runs: [{name: bert-large, preset: bert-large, apply: true, nodes: 2}]"
    )


MovedSection = BeforeValidator(moved_training_section)
