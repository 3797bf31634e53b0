"""Checks between keys of different sections of one configuration.

Each check declares the keys it reads (``@_reads``) and gets their validated values, in that order.
The loader runs every check whose keys are valid, also when other keys of the file are not: a file
with a bad ``vpc.cidr`` still hears that ``runs[0].nodes`` exceeds its node group. A check never
runs on a key that has a problem of its own, so no line repeats or follows from another one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

from cluster_facts.ami_releases import (
    AMI_RELEASES,
    DEFAULT_AMI_RELEASES,
    AmiRelease,
    declared_release,
    fault_problem,
    newest_release,
    release_minor,
)
from cluster_facts.cloudwatch_metrics import EFA_METRICS_MINIMUM_ADDON, NEURON_METRICS_MINIMUM_ADDON
from cluster_facts.dra import CLAIM_DEVICE_LIMIT, DRA_MINIMUM_KUBERNETES, NEURON_DEVICE_CLASS, node_devices
from cluster_facts.image_sources import UPSTREAM_REGISTRIES, ecr_repository_arn
from cluster_facts.images import split_image
from cluster_facts.instance_catalog import CATALOG
from cluster_facts.kubernetes_names import DATA_MOUNT, DATASETS_ROOT, ETCD_REPLICAS, dataset_variable
from cluster_facts.neuron_stack import (
    DEFAULT_STACK,
    NEURON_RELEASES,
    STACKS,
    StackName,
    driver_problem,
    image_neuron_release,
    image_stack,
    release_problem,
    stack_driver,
    stack_releases,
    stacks_of_family,
)
from cluster_facts.node_startup import FEATURES_TURNED_ON
from cluster_facts.versions import AMAZON_CLOUDWATCH_OBSERVABILITY, version_key
from config.presets import BERT_LARGE, PRESETS

if TYPE_CHECKING:
    from config.model import (
        AutoscalerSettings,
        EcrSettings,
        FsxSettings,
        StackConfig,
        TrainiumNodeGroupSettings,
    )
    from config.workloads import DatasetSettings, RunSettings, TeamSettings

__all__ = [
    "CROSS_CHECKS",
    "CrossCheck",
    "Problem",
    "Unavailable",
    "consistency_problems",
    "cross_section_problems",
    "node_group_stacks",
    "zone_id_prefix",
]

Problem = tuple[str, str]
"""(key path, message): the key to change and what is allowed there."""


@dataclass(frozen=True)
class CrossCheck:
    reads: tuple[str, ...]
    """Dotted key paths (a StackConfig field, then fields of its section), passed to ``check`` in order."""
    check: Callable[..., Iterable[Problem]]


CROSS_CHECKS: list[CrossCheck] = []

_Check = TypeVar("_Check", bound=Callable[..., Iterable[Problem]])


def _reads(*paths: str) -> Callable[[_Check], _Check]:
    def register(check: _Check) -> _Check:
        CROSS_CHECKS.append(CrossCheck(reads=paths, check=check))
        return check

    return register


class Unavailable(LookupError):
    """A key a check reads is missing or has its own problem: the check is skipped."""


def cross_section_problems(value_of: Callable[[str], Any]) -> list[Problem]:
    """The problems of every check whose keys ``value_of`` can give (it raises ``Unavailable`` if not)."""
    problems: list[Problem] = []
    for cross_check in CROSS_CHECKS:
        try:
            values = [value_of(path) for path in cross_check.reads]
        except Unavailable:
            continue
        problems.extend(cross_check.check(*values))
    return problems


def consistency_problems(config: StackConfig) -> list[Problem]:
    """Every check of a configuration whose sections are all valid."""
    return cross_section_problems(lambda path: attrgetter(path)(config))


# AZ ids abbreviate the region name: the country code, the initial of each word (northeast: ne, gov: g)
# and the number. us-west-2 -> usw2, ap-northeast-1 -> apne1, us-gov-west-1 -> usgw1, cn-northwest-1 -> cnnw1.
_ZONE_ID_WORDS = {
    "north": "n",
    "south": "s",
    "east": "e",
    "west": "w",
    "central": "c",
    "northeast": "ne",
    "northwest": "nw",
    "southeast": "se",
    "southwest": "sw",
    "gov": "g",
}


def zone_id_prefix(region: str) -> str | None:
    """What the AZ ids of ``region`` start with (``usw2`` for us-west-2); None if not known (ISO regions)."""
    country, *words, number = region.split("-")
    if not words or any(word not in _ZONE_ID_WORDS for word in words):
        return None
    return country + "".join(_ZONE_ID_WORDS[word] for word in words) + number


@_reads("region", "vpc.availability_zones")
def _vpc_zones_in_region(region: str, zones: list[str]) -> Iterator[Problem]:
    for index, zone in enumerate(zones):
        if zone[:-1] != region:
            yield f"vpc.availability_zones[{index}]", f"{zone!r} is not in region {region}"


@_reads("vpc.availability_zones", "trainium.availability_zone")
def _trainium_zone_in_vpc(zones: list[str], zone: str) -> Iterator[Problem]:
    if zone not in zones:
        yield (
            "trainium.availability_zone",
            f"{zone!r} must be one of vpc.availability_zones ({', '.join(zones)})",
        )


@_reads("region", "trainium.availability_zone_id")
def _zone_id_in_region(region: str, zone_id: str) -> Iterator[Problem]:
    prefix = zone_id_prefix(region)
    if prefix is not None and zone_id.rpartition("-az")[0] != prefix:
        yield (
            "trainium.availability_zone_id",
            (
                f"{zone_id!r} is not a zone id of region {region}; allowed: {prefix}-az1, {prefix}-az2, ... "
                f"(aws ec2 describe-availability-zones --region {region} lists them)"
            ),
        )


@_reads("account", "cluster.admin_role_arns")
def _admin_roles_in_account(account: str, role_arns: list[str]) -> Iterator[Problem]:
    # EKS would accept a role of another account (a STANDARD access entry), but cluster-admin for a
    # principal outside the stack's account is far more often a file copied from another environment.
    for index, role_arn in enumerate(role_arns):
        role_account = role_arn.split(":")[4]
        if role_account != account:
            yield (
                f"cluster.admin_role_arns[{index}]",
                f"{role_arn!r} is a role of account {role_account}; allowed: roles of account {account}",
            )


@_reads("account", "cluster.admin_role_arns", "teams")
def _team_members_are_roles_of_the_account_and_not_admins(
    account: str, admin_role_arns: list[str], all_teams: list[TeamSettings | None]
) -> Iterator[Problem]:
    # EKS keeps one access entry per principal and cluster: a role that is both an administrator and
    # a team member would make the stack create a second entry for it, which EKS refuses mid-deploy.
    # A member in several teams is fine (one entry carries each team's Kubernetes group).
    for team_index, team in enumerate(all_teams):
        if team is None:
            continue
        for index, role_arn in enumerate(team.member_role_arns):
            key = f"teams[{team_index}].member_role_arns[{index}]"
            role_account = role_arn.split(":")[4]
            if role_account != account:
                yield (
                    key,
                    f"{role_arn!r} is a role of account {role_account}; allowed: roles of account {account}",
                )
            elif role_arn in admin_role_arns:
                message = (
                    f"{role_arn!r} is already in cluster.admin_role_arns (cluster-admin everywhere); "
                    "allowed: a role that is not an administrator"
                )
                yield key, message


MAX_DATA_REPOSITORY_ASSOCIATIONS = 8
"""FSx for Lustre: "You can configure a maximum of 8 data repository associations" per file system."""


@_reads("fsx", "teams")
def _one_export_per_team_fits_the_file_system(
    fsx: FsxSettings, all_teams: list[TeamSettings | None]
) -> Iterator[Problem]:
    # backups: s3 links each team's directory through a data repository association of its own,
    # beside the /s3 import's; FSx takes 8 per file system ("You can configure a maximum of 8 data
    # repository associations", FSx for Lustre user guide, "Linking your file system to an S3 bucket").
    if not fsx.exported:
        return
    needed = len(all_teams) + (1 if fsx.s3_import_path is not None else 0)
    if needed > MAX_DATA_REPOSITORY_ASSOCIATIONS:
        links = f"{len(all_teams)} teams{' and the s3_import_path' if fsx.s3_import_path else ''}"
        message = (
            f"s3 exports each team's directory through a data repository association, and this file needs "
            f"{needed} ({links}); FSx allows {MAX_DATA_REPOSITORY_ASSOCIATIONS} per file system; "
            "allowed: fewer teams, or backups: none"
        )
        yield "fsx.backups", message


def _repeated(names: list[str]) -> list[str]:
    return sorted({name for name in names if names.count(name) > 1})


@_reads("teams", "trainium.node_groups")
def _teams_are_distinct_and_use_groups_that_exist(
    all_teams: list[TeamSettings | None], groups: list[TrainiumNodeGroupSettings]
) -> Iterator[Problem]:
    teams = [team for team in all_teams if team is not None]
    for key, names in (
        ("name", [team.name for team in teams]),
        ("queue", [team.queue_name for team in teams]),
    ):
        repeated = _repeated(names)
        if repeated:
            yield "teams", f"team {key}s must be unique; repeated: {', '.join(repeated)}"
    defined = [group.name for group in groups]
    for index, team in enumerate(all_teams):
        for position, group in enumerate(team.node_groups if team else ()):
            if group not in defined:
                yield (
                    f"teams[{index}].node_groups[{position}]",
                    f"{group!r} is not a trainium.node_groups name; defined: {', '.join(defined)}",
                )
            elif team is not None and group in team.node_groups[:position]:
                # Counted twice, the group would double the queue's capability and deserved share.
                yield (
                    f"teams[{index}].node_groups[{position}]",
                    (
                        f"{group!r} is listed twice; list each node group once (the team's queue counts "
                        "what each holds at max_size once)"
                    ),
                )


@_reads("teams", "trainium.node_groups")
def _team_quotas_hold_a_training_pod(
    all_teams: list[TeamSettings | None], groups: list[TrainiumNodeGroupSettings]
) -> Iterator[Problem]:
    """A quota of fewer Trainium chips than one node takes would refuse every run of the team: a
    training pod takes every chip of its node (k8s_charts/runs/training_run.py)."""
    for index, team in enumerate(all_teams):
        if team is None or team.quota.neuron_devices is None:
            continue
        by_name = {group.name: group for group in groups}
        mine = [by_name[name] for name in _team_group_names(team, list(by_name))]
        if not mine:
            continue  # its groups are undefined: the check above says so
        smallest = min(mine, key=_pod_neuron_devices)
        needed = _pod_neuron_devices(smallest)
        if team.quota.neuron_devices < needed:
            yield (
                f"teams[{index}].quota.neuron_devices",
                (
                    f"{team.quota.neuron_devices} chips hold no training pod: one takes every chip of its "
                    f"node ({needed} on node group {smallest.name!r}); allowed: {needed} or more"
                ),
            )


def _pod_neuron_devices(group: TrainiumNodeGroupSettings) -> int:
    """What a training pod on ``group`` counts against its team's ``quota.neuron_devices``: every chip
    of its node; on a ``dra`` group every device of the Neuron DeviceClass its claims take, which on
    an UltraServer (trn2u) is the 16 chips and the node's ``neuron_node`` device, 17
    (k8s_charts/teams/team_quota.py: the quota counts the class's devices)."""
    if group.uses_dra:
        return node_devices(group.instance).counts[NEURON_DEVICE_CLASS]
    return group.instance.chips


@_reads("runs", "teams", "trainium.node_groups")
def _applied_runs_fit_their_teams_quota(
    runs: list[RunSettings | None],
    all_teams: list[TeamSettings | None],
    groups: list[TrainiumNodeGroupSettings],
) -> Iterator[Problem]:
    """The runs a deployment applies create their pods at once (no ``enqueue``: a queued gang's pods
    exist and wait). A quota the team's applied runs overfill refuses some of their pods, and
    Volcano's job controller ends such a run after about 3 minutes of refused syncs
    (k8s_charts/teams/team_quota.py): refused here, before anything is built."""
    teams = [team for team in all_teams if team is not None]
    if not teams or len(teams) != len(all_teams):
        return
    by_name = {group.name: group for group in groups}
    for index, team in enumerate(teams):
        applied = [
            run for run in runs if run is not None and run.apply and _run_team_name(run, teams) == team.name
        ]
        if not applied:
            continue
        pods = ETCD_REPLICAS + sum(run.nodes for run in applied)
        listing = ", ".join(f"{run.name} {run.nodes}" for run in applied)
        if pods > team.quota.pods:
            yield (
                f"teams[{index}].quota.pods",
                (
                    f"{team.quota.pods} pods do not hold the team's applied runs ({listing}) and its etcd; "
                    f"Volcano ends a run whose pods the quota refuses; allowed: {pods} or more"
                ),
            )
        if len(applied) > team.quota.jobs:
            yield (
                f"teams[{index}].quota.jobs",
                (
                    f"{team.quota.jobs} Volcano Jobs do not hold the team's {len(applied)} applied runs "
                    f"({listing}); allowed: {len(applied)} or more"
                ),
            )
        if team.quota.neuron_devices is None:
            continue
        placed = [(run, by_name.get(_run_group_name(run, team, list(by_name)) or "")) for run in applied]
        if any(group is None for _, group in placed):
            continue  # the run's own check names its group
        chips = sum(run.nodes * _pod_neuron_devices(group) for run, group in placed if group is not None)
        if chips > team.quota.neuron_devices:
            yield (
                f"teams[{index}].quota.neuron_devices",
                (
                    f"{team.quota.neuron_devices} chips do not hold the team's applied runs "
                    f"({chips} chips: {listing} nodes); Volcano ends a run whose pods the quota "
                    f"refuses; allowed: {chips} or more"
                ),
            )


@_reads("runs", "teams", "trainium.node_groups")
def _each_run_fits_its_teams_quota(
    runs: list[RunSettings | None],
    all_teams: list[TeamSettings | None],
    groups: list[TrainiumNodeGroupSettings],
) -> Iterator[Problem]:
    """A run not applied at deploy (``kubectl apply`` or TorchX later) must fit its team's quota on its
    own, beside the team's etcd: a quota below it refuses some of its pods whenever it is applied,
    and Volcano ends it about 3 minutes in. (Applied runs are checked together above.)"""
    teams = [team for team in all_teams if team is not None]
    if not teams or len(teams) != len(all_teams):
        return
    by_name = {group.name: group for group in groups}
    for index, run in enumerate(runs):
        if run is None or run.apply:
            continue
        team = _run_team(run, teams)
        if team is None:
            continue  # the run's own check names its team
        where = f"teams[{teams.index(team)}].quota"
        pods = ETCD_REPLICAS + run.nodes
        if pods > team.quota.pods:
            yield (
                f"{where}.pods",
                (
                    f"{team.quota.pods} pods do not hold run {run.name!r} (runs[{index}], {run.nodes} nodes, not "
                    f"applied at deploy) and the team's etcd: Volcano ends it about 3 minutes after it is "
                    f"applied; allowed: {pods} or more"
                ),
            )
        group = by_name.get(_run_group_name(run, team, list(by_name)) or "")
        if group is None or team.quota.neuron_devices is None:
            continue
        chips = run.nodes * _pod_neuron_devices(group)
        if chips > team.quota.neuron_devices:
            yield (
                f"{where}.neuron_devices",
                (
                    f"{team.quota.neuron_devices} chips do not hold run {run.name!r} (runs[{index}], {chips} chips, "
                    f"not applied at deploy): Volcano ends it about 3 minutes after it is applied; "
                    f"allowed: {chips} or more"
                ),
            )


def _team_group_names(team: TeamSettings, group_names: list[str]) -> list[str]:
    """The defined groups a team's runs may use, in the team's order (every group when it lists
    none); a run without ``node_group`` takes the first."""
    return [name for name in (team.node_groups or group_names) if name in group_names]


def _run_team_name(run: RunSettings, teams: list[TeamSettings]) -> str:
    """The name of the team a run belongs to: its own, or the first team's."""
    return run.team or teams[0].name


def _run_team(run: RunSettings, teams: list[TeamSettings]) -> TeamSettings | None:
    """The team a run belongs to; None when it names no team defined (the run's own check says so)."""
    return next((team for team in teams if team.name == _run_team_name(run, teams)), None)


def _run_group_name(run: RunSettings, team: TeamSettings | None, group_names: list[str]) -> str | None:
    """The group a run is placed on (``StackConfig.run_node_group`` before the configuration is
    whole): its own, or the first its team may use; None when there is none to name."""
    if run.node_group is not None:
        return run.node_group
    allowed = _team_group_names(team, group_names) if team is not None else group_names
    return allowed[0] if allowed else None


@_reads("autoscaler", "runs")
def _stuck_limits_within_their_ceiling(
    autoscaler: AutoscalerSettings, runs: list[RunSettings | None]
) -> Iterator[Problem]:
    """``autoscaler.stuck_run_max_minutes`` caps every run's own limit, the cluster's included: a
    run of this file above it would be refused by the team admission policy at deploy."""
    ceiling = autoscaler.stuck_run_max_minutes
    if ceiling is None:
        return
    if autoscaler.stuck_run_minutes is not None and autoscaler.stuck_run_minutes > ceiling:
        yield (
            "autoscaler.stuck_run_minutes",
            f"{autoscaler.stuck_run_minutes} minutes is above autoscaler.stuck_run_max_minutes; allowed: up to {ceiling}",
        )
    for index, run in enumerate(runs):
        if run is not None and run.stuck_minutes is not None and run.stuck_minutes > ceiling:
            yield (
                f"runs[{index}].stuck_minutes",
                f"{run.stuck_minutes} minutes is above autoscaler.stuck_run_max_minutes; allowed: up to {ceiling}",
            )


@_reads("teams")
def _team_owners_are_distinct(all_teams: list[TeamSettings | None]) -> Iterator[Problem]:
    """Each team's directory has an owner of its own: one id for two teams would share their files."""
    owners: dict[int, str] = {}
    for index, team in enumerate(all_teams):
        if team is None:
            continue
        if team.owner_id in owners:
            yield (
                f"teams[{index}].uid",
                f"{team.owner_id} is also the uid of team {owners[team.owner_id]!r}; give this team a uid of its own",
            )
        else:
            owners[team.owner_id] = team.name


@_reads("datasets", "runs")
def _datasets_are_distinct(
    all_datasets: list[DatasetSettings | None], all_runs: list[RunSettings | None]
) -> Iterator[Problem]:
    runs = [run for run in all_runs if run is not None]
    datasets = [dataset for dataset in all_datasets if dataset is not None]
    names = [dataset.name for dataset in datasets]
    repeated = _repeated(names)
    if repeated:
        yield "datasets", f"data set names must be unique; repeated: {', '.join(repeated)}"
    brought = {PRESETS[run.preset].dataset.name: run.preset for run in runs if run.preset is not None}
    for index, dataset in enumerate(all_datasets):
        if dataset is not None and dataset.name in brought:
            yield (
                f"datasets[{index}].name",
                f"{dataset.name!r} is the data set of preset {brought[dataset.name]}, which brings it itself; pick another name",
            )


@_reads("runs", "teams", "trainium.node_groups", "datasets")
def _runs_fit_their_team_and_group(
    runs: list[RunSettings | None],
    all_teams: list[TeamSettings | None],
    groups: list[TrainiumNodeGroupSettings],
    all_datasets: list[DatasetSettings | None],
) -> Iterator[Problem]:
    teams = [team for team in all_teams if team is not None]
    dataset_names = [dataset.name for dataset in all_datasets if dataset is not None]
    if len(teams) != len(all_teams) or len(dataset_names) != len(all_datasets):
        return  # what a run names could be the item with the problem: that is reported, there
    repeated = _repeated([run.name for run in runs if run is not None])
    if repeated:
        yield "runs", f"run names must be unique; repeated: {', '.join(repeated)}"
    for index, run in enumerate(runs):
        if run is not None:
            yield from _run_problems(f"runs[{index}]", run, teams, groups, dataset_names)
    yield from _shared_cachesets(runs, teams[0].name)


def _run_problems(
    where: str,
    run: RunSettings,
    teams: list[TeamSettings],
    groups: list[TrainiumNodeGroupSettings],
    dataset_names: list[str],
) -> Iterator[Problem]:
    team = _run_team(run, teams)
    if team is None:
        yield f"{where}.team", f"{run.team!r} is not a team; defined: {', '.join(t.name for t in teams)}"
        return
    group_names = [group.name for group in groups]
    allowed = _team_group_names(team, group_names)
    wanted = _run_group_name(run, team, group_names)
    if wanted is None:
        return  # the team's groups are all undefined: the teams check says so
    group = next((group for group in groups if group.name == wanted), None)
    if group is None:
        yield (
            f"{where}.node_group",
            f"{wanted!r} is not a trainium.node_groups name; defined: {', '.join(group_names)}",
        )
    elif group.name not in allowed:
        yield (
            f"{where}.node_group",
            f"team {team.name!r} may not use node group {group.name!r}; its groups: {', '.join(allowed)}",
        )
    elif run.nodes > group.max_size:
        yield (
            f"{where}.nodes",
            f"{run.nodes} nodes do not fit node group {group.name!r} (max_size {group.max_size})",
        )
    for position, dataset in enumerate(run.datasets):
        if dataset not in dataset_names:
            yield (
                f"{where}.datasets[{position}]",
                f"{dataset!r} is not a datasets name; defined: {', '.join(dataset_names) or 'none'}",
            )


def _shared_cachesets(runs: list[RunSettings | None], first_team: str) -> Iterator[Problem]:
    """Concurrent writers corrupt a Neuron compile cache: two applied runs of one team never share one."""
    cachesets: dict[tuple[str, str], str] = {}
    for index, run in enumerate(runs):
        if run is None or not run.apply:
            continue
        key = (run.team or first_team, run.cacheset_name)
        if key in cachesets:
            yield (
                f"runs[{index}].cacheset",
                (
                    f"{run.cacheset_name!r} is also the cache set of applied run {cachesets[key]!r} of team "
                    f"{key[0]}; two runs at the same time would corrupt it: give each its own cacheset"
                ),
            )
        else:
            cachesets[key] = run.name


@_reads("runs", "datasets")
def _scripts_are_checked(
    runs: list[RunSettings | None], all_datasets: list[DatasetSettings | None]
) -> Iterator[Problem]:
    """What a run executes is checked by SHA-256 on every attempt (docs/code-integrity.md): a file of
    one of its data sets, or a path in its pinned image; never a file on the team's writable volume."""
    datasets = {dataset_variable(dataset.name): dataset for dataset in all_datasets if dataset is not None}
    # A data set with a problem of its own (its line is printed) is not in `datasets`: a script that
    # names it gets no second, wrong line saying it names no data set.
    whole = len(datasets) == len(all_datasets)
    for index, run in enumerate(runs):
        if run is None or run.script is None:
            continue  # a preset's script is a file of its data set
        where, script = f"runs[{index}].script", run.script
        if script.startswith("$(DATASET_") and ")/" in script:
            variable, name = script[2:].split(")/", 1)
            dataset = datasets.get(variable)
            if dataset is None and not whole:
                continue
            if dataset is None or dataset.name not in run.datasets:
                yield where, f"{script!r} names no data set of this run's datasets"
            elif name not in [file.name for file in dataset.files]:
                yield (
                    where,
                    (
                        f"{name!r} is not one of the files of data set {dataset.name!r}, which are checked by "
                        f"SHA-256 before they run: list it under its files with its sha256"
                    ),
                )
        elif script.startswith(DATASETS_ROOT + "/"):
            yield (
                where,
                (
                    f"{script!r} is a data set's file by path, which no checksum covers: name it "
                    "$(DATASET_<NAME>)/<file> and list the file under the data set's files with its sha256"
                ),
            )
        elif script.startswith(("$(", DATA_MOUNT + "/")) or script == DATA_MOUNT:
            yield (
                where,
                (
                    f"{script!r} is on a writable volume, where no checksum covers it: make it a file of a "
                    "data set (checked by SHA-256 on every attempt) or a path in the pinned image"
                ),
            )


@_reads("runs")
def _one_pin_of_the_preset_archive(runs: list[RunSettings | None]) -> Iterator[Problem]:
    """The preset's data set is staged once for every run that uses it: one archive checksum."""
    pins: dict[str, int] = {}
    for index, run in enumerate(runs):
        # Only bert-large's recipe pins an archive (native-fsdp2's data set is one checked file).
        pin = getattr(run.parameters, "dataset_archive_sha256", None) if run is not None else None
        if pin:
            pins.setdefault(pin, index)
    if len(pins) > 1:
        first, *others = pins.values()
        yield (
            f"runs[{others[0]}].parameters.dataset_archive_sha256",
            f"differs from runs[{first}]'s; the runs of preset {BERT_LARGE.name} share one data set: give one checksum",
        )


@_reads("cluster.addon_versions", "observability.dashboard")
def _dashboard_has_metrics(versions: dict[str, str], dashboard: bool) -> Iterator[Problem]:
    # Container Insights publishes Neuron metrics from add-on v1.5.0 and EFA metrics from v1.5.2
    # (cluster_facts/cloudwatch_metrics.py): an older pin leaves half the dashboard empty.
    pinned = versions.get(AMAZON_CLOUDWATCH_OBSERVABILITY)
    minimum = max(NEURON_METRICS_MINIMUM_ADDON, EFA_METRICS_MINIMUM_ADDON, key=version_key)
    if dashboard and pinned is not None and version_key(pinned) < version_key(minimum):
        yield (
            "cluster.addon_versions",
            (
                f"{AMAZON_CLOUDWATCH_OBSERVABILITY} {pinned} publishes no EFA metrics for the dashboard "
                f"(observability.dashboard); use v{minimum} or later, or set observability.dashboard: false"
            ),
        )


@_reads("account", "region", "ecr.upstream_credentials")
def _credentials_in_the_registry_account(
    account: str, region: str, credentials: dict[str, str]
) -> Iterator[Problem]:
    # ECR reads a pull-through credential from Secrets Manager in the registry's own account and region.
    for host, arn in credentials.items():
        secret_region, secret_account = arn.split(":")[3:5]
        if (secret_account, secret_region) != (account, region):
            yield (
                f"ecr.upstream_credentials.{host}",
                (
                    f"the secret is in account {secret_account}, {secret_region}; ECR reads it only in the "
                    f"registry's account and region ({account}, {region})"
                ),
            )


@_reads("account", "ecr", "runs")
def _run_images_can_be_pulled(
    account: str, ecr: EcrSettings, runs: list[RunSettings | None]
) -> Iterator[Problem]:
    """Every run's image is one the Trainium nodes can pull: from a registry the cache serves (or any
    public registry with the cache off), from this account's ECR (the node role gets pull on exactly
    that repository), or from another account's repository named in ``ecr.cross_account_repositories``
    (its policy lets this account pull; the node role gets pull on it)."""
    for index, run in enumerate(runs):
        if run is not None:
            problem = _image_pull_problem(account, ecr, run.image)
            if problem is not None:
                yield f"runs[{index}].image", problem


def _image_pull_problem(account: str, ecr: EcrSettings, image: str) -> str | None:
    host = split_image(image)[0]
    arn = ecr_repository_arn(image)
    if arn is not None:
        owner = arn.split(":")[4]
        if owner == account or arn in ecr.cross_account_repositories:
            return None
        # ECR User Guide, "Private repository policy examples" (allow another account to pull): a
        # cross-account pull needs both the repository's policy in the owner's account and the
        # puller's IAM permission; the stack can grant only the second, once the first is declared.
        return (
            f"{image!r} is in account {owner}'s ECR: nodes of account {account} pull it only when that "
            f"repository's policy allows account {account} ecr:BatchGetImage and ecr:GetDownloadUrlForLayer; "
            f"once it does, add {arn} to ecr.cross_account_repositories (the Trainium node role then gets "
            "pull on it), or push the image to this stack's repository"
        )
    if not ecr.pull_through_cache:
        return None  # pulled from its public registry directly
    cached = ecr.cached_registries
    if host in cached:
        return None
    if UPSTREAM_REGISTRIES.get(host) is not None:
        return (
            f"{image!r} is on {host}, which ECR's pull-through cache serves only with a credential: "
            f"set ecr.upstream_credentials.{host} to a Secrets Manager secret (ecr-pullthroughcache/...), "
            "push the image to the stack's repository, or set ecr.pull_through_cache: false (nodes then pull "
            f"from {host} directly, within its anonymous limits)"
        )
    return (
        f"{image!r} is on {host}, which ECR's pull-through cache does not serve; allowed: "
        f"{', '.join(sorted(cached))} or an ECR repository of this account ({account}.dkr.ecr.<region>...): "
        "push the image there, or set ecr.pull_through_cache: false if it is public (nodes then pull "
        f"from {host} directly)"
    )


@_reads("account", "ecr.cross_account_repositories")
def _cross_account_repositories_are_of_other_accounts(account: str, arns: list[str]) -> Iterator[Problem]:
    for index, arn in enumerate(arns):
        if arn.split(":")[4] == account:
            yield (
                f"ecr.cross_account_repositories[{index}]",
                f"{arn} is a repository of this account ({account}): a run's image there needs no entry; remove it",
            )


# --- The Neuron stacks (cluster_facts/neuron_stack.py) -------------------------------------------
# AMI facts (cluster_facts/ami_releases.py, or a release's facts declared under ami_facts) are read
# here only through _release_facts, _ami_driver and _releases_with_driver.


def _ami_release(group: TrainiumNodeGroupSettings, kubernetes_version: str) -> str | None:
    """The AMI release the group boots: its own, or the table's default for the version."""
    return group.ami_release or DEFAULT_AMI_RELEASES.get(kubernetes_version)


def _ami_driver(group: TrainiumNodeGroupSettings, kubernetes_version: str) -> str | None:
    """The Neuron driver the group's nodes boot: its release's in the table, or as declared
    (``ami_facts``); None when neither says or the release is of another version (the release's own
    check reports it)."""
    release = _ami_release(group, kubernetes_version)
    if release is None or release_minor(release) != kubernetes_version:
        return None
    facts = _release_facts(group, kubernetes_version)
    return facts.driver if facts is not None else None


def _releases_with_driver(kubernetes_version: str, minimum: str) -> list[str]:
    """The table's AMI releases of the version whose driver is at least ``minimum``, oldest first."""
    return sorted(
        (
            r.release_version
            for r in AMI_RELEASES.values()
            if r.kubernetes_version == kubernetes_version
            and version_key(r.driver) >= version_key(minimum)
            and not r.faults  # never suggest a release synth refuses (cluster_facts/ami_releases.py)
        ),
        key=lambda version: (version_key(version), version),
    )


def _release_facts(group: TrainiumNodeGroupSettings, kubernetes_version: str) -> AmiRelease | None:
    """The facts of the group's AMI release: the table's, or those its configuration declares."""
    release = _ami_release(group, kubernetes_version)
    if release is None:
        return None
    if release in AMI_RELEASES:
        return AMI_RELEASES[release]
    if group.ami_facts is None:
        return None
    return declared_release(
        release, neuron_driver=group.ami_facts.neuron_driver, containerd=group.ami_facts.containerd
    )


@_reads("cluster.kubernetes_version", "trainium.node_groups")
def _ami_releases_are_known_and_without_faults(
    kubernetes_version: str, groups: list[TrainiumNodeGroupSettings]
) -> Iterator[Problem]:
    """A node group boots an AMI release of the cluster's version whose facts are known (the table's, or
    declared under ami_facts) and that has no known fault for a feature the nodes turn on."""
    newest = newest_release(kubernetes_version, features=FEATURES_TURNED_ON)
    suggestion = f"newest of the table without a known fault: {newest.release_version}" if newest else "none"
    for index, group in enumerate(groups):
        key = f"trainium.node_groups[{index}]"
        release = _ami_release(group, kubernetes_version)
        if release is None:
            yield (
                f"{key}.ami_release",
                (
                    f"no Neuron AMI release is known for Kubernetes {kubernetes_version}; name one and declare "
                    "its facts under ami_facts, or add its releases to cluster_facts/ami_releases.py (docs/upgrades.md)"
                ),
            )
        elif release_minor(release) != kubernetes_version:
            yield (
                f"{key}.ami_release",
                (
                    f"{release!r} is an AMI release for Kubernetes {release_minor(release)}; the cluster runs "
                    f"{kubernetes_version}: {suggestion}"
                ),
            )
        elif release in AMI_RELEASES and group.ami_facts is not None:
            known = AMI_RELEASES[release]
            yield (
                f"{key}.ami_facts",
                (
                    f"the AMI release table knows {release} (Neuron driver {known.driver}, containerd "
                    f"{known.containerd}): remove ami_facts"
                ),
            )
        elif release not in AMI_RELEASES and group.ami_facts is None:
            yield (
                f"{key}.ami_release",
                (
                    f"{release!r} is not in the AMI release table (cluster_facts/ami_releases.py); {suggestion}, "
                    "or declare this release's facts under ami_facts: {neuron_driver, containerd} (docs/upgrades.md)"
                ),
            )
        else:
            facts = _release_facts(group, kubernetes_version)
            problem = fault_problem(facts, FEATURES_TURNED_ON) if facts is not None else None
            if problem is not None:
                yield f"{key}.ami_release", problem


def _run_stack(run: RunSettings) -> StackName | None:
    """The stack a run trains on: its preset's, else its image's (when the tag names a release)."""
    preset = PRESETS.get(run.preset or "")
    return preset.stack if preset is not None else image_stack(run.image)


def _placed_runs(
    runs: list[RunSettings | None], teams: list[TeamSettings], group_names: list[str]
) -> Iterator[tuple[int, RunSettings, str]]:
    """(index, run, the name of its node group) of every run whose team and group are defined."""
    for index, run in enumerate(runs):
        team = _run_team(run, teams) if run is not None else None
        if run is None or team is None:
            continue
        name = _run_group_name(run, team, group_names)
        if name in group_names:
            yield index, run, name


def node_group_stacks(
    groups: list[TrainiumNodeGroupSettings], runs: list[RunSettings | None], teams: list[TeamSettings]
) -> dict[str, tuple[StackName, str]]:
    """Each group's stack, with why: as configured (``neuron_stack``), the only one its instance type
    runs, the one of the first run placed on it that has one, or the default (``xla``)."""
    names = [group.name for group in groups]
    first_run: dict[str, tuple[int, StackName]] = {}
    for index, run, name in _placed_runs(runs, teams, names):
        stack = _run_stack(run)
        if stack is not None:
            first_run.setdefault(name, (index, stack))
    found: dict[str, tuple[StackName, str]] = {}
    for group in groups:
        families = stacks_of_family(group.instance.family)
        if group.neuron_stack is not None:
            found[group.name] = (group.neuron_stack, "its neuron_stack")
        elif len(families) == 1:
            found[group.name] = (families[0], f"the only stack {group.instance_type} runs")  # type: ignore[assignment]
        elif group.name in first_run:
            index, stack = first_run[group.name]
            found[group.name] = (stack, f"from runs[{index}]")
        else:
            found[group.name] = (DEFAULT_STACK, "the default")
    return found


def _instance_types_of(stack: str) -> str:
    families = STACKS[stack].instance_families
    return ", ".join(name for name, entry in CATALOG.items() if entry.family in families)


@_reads("trainium.node_groups")
def _stacks_run_on_their_instance_types(groups: list[TrainiumNodeGroupSettings]) -> Iterator[Problem]:
    """A group's configured stack runs on its instance type (trn1 has no TorchNeuron; trn2u no
    PyTorch/XLA release's device plugin places UltraServers)."""
    for index, group in enumerate(groups):
        stack = group.neuron_stack
        if stack is None or group.instance.family in STACKS[stack].instance_families:
            continue
        others = [name for name in stacks_of_family(group.instance.family) if name != stack]
        switch = f", or set neuron_stack: {others[0]}" if others else ""
        yield (
            f"trainium.node_groups[{index}].instance_type",
            (
                f"{group.instance_type!r} does not run the {stack} stack ({STACKS[stack].title}); allowed: "
                f"{_instance_types_of(stack)}{switch}"
            ),
        )


@_reads("cluster.kubernetes_version", "trainium.node_groups", "runs", "teams")
def _ami_drivers_serve_their_stacks(
    kubernetes_version: str,
    groups: list[TrainiumNodeGroupSettings],
    runs: list[RunSettings | None],
    all_teams: list[TeamSettings | None],
) -> Iterator[Problem]:
    """A group's AMI brings a driver on which its stack's oldest release runs."""
    teams = [team for team in all_teams if team is not None]
    if not teams:
        return
    stacks = node_group_stacks(groups, runs, teams)
    for index, group in enumerate(groups):
        stack, why = stacks[group.name]
        if group.instance.family not in STACKS[stack].instance_families:
            continue  # the group's stack has its own line: the driver follows from the stack
        driver = _ami_driver(group, kubernetes_version)
        needed = stack_driver(stack)
        if driver is None or version_key(driver) >= version_key(needed):
            continue
        release = _ami_release(group, kubernetes_version)
        newer = _releases_with_driver(kubernetes_version, needed)
        fix = (
            f"use AMI release {', '.join(newer)}"
            if newer
            else "no AMI release the table knows brings it: set ami_release to one that does, with its "
            "ami_facts (docs/neuron.md)"
        )
        yield (
            f"trainium.node_groups[{index}].ami_release",
            (
                f"{release!r} brings Neuron driver {driver}; the {stack} stack ({why}; SDK "
                f"{', '.join(stack_releases(stack))}) needs {needed} or later: {fix}"
            ),
        )


@_reads("cluster.kubernetes_version", "runs", "teams", "trainium.node_groups")
def _run_images_are_a_supported_neuron_stack(
    kubernetes_version: str,
    runs: list[RunSettings | None],
    all_teams: list[TeamSettings | None],
    groups: list[TrainiumNodeGroupSettings],
) -> Iterator[Problem]:
    """Each run's image is an SDK release of its node group's stack (and its preset's), whose driver
    its nodes boot; its Logical NeuronCore size is one its instance type takes."""
    teams = [team for team in all_teams if team is not None]
    if len(teams) != len(all_teams) or not teams:
        return
    by_name = {group.name: group for group in groups}
    stacks = node_group_stacks(groups, runs, teams)
    for index, run, name in _placed_runs(runs, teams, list(by_name)):
        group = by_name[name]
        problem = _run_stack_problem(run, group, stacks[name], kubernetes_version)
        if problem is not None:
            yield f"runs[{index}].image", problem
        if run.logical_core_size not in (None, *group.instance.logical_core_sizes):
            allowed = ", ".join(map(str, group.instance.logical_core_sizes))
            yield (
                f"runs[{index}].logical_core_size",
                (
                    f"{run.logical_core_size} is not a Logical NeuronCore size of {group.instance_type} "
                    f"(node group {group.name!r}); allowed: {allowed}, or leave it out"
                ),
            )


def _run_stack_problem(
    run: RunSettings,
    group: TrainiumNodeGroupSettings,
    group_stack: tuple[StackName, str],
    kubernetes_version: str,
) -> str | None:
    """The first of: an SDK that trains on no stack, an image of another stack than the run's preset
    or its node group, a driver its nodes do not boot. One line, with the fix."""
    problem = release_problem(run.image)
    if problem is not None:
        return problem
    image = image_stack(run.image)
    sdk = image_neuron_release(run.image)
    preset = PRESETS.get(run.preset or "")
    if preset is not None and image is not None and image != preset.stack:
        return (
            f"{run.image!r} is Neuron SDK {sdk} ({image} stack); preset {preset.name} trains on the {preset.stack} "
            f"stack: set image to an image of SDK {', '.join(stack_releases(preset.stack))} (docs/neuron.md)"
        )
    stack, why = group_stack
    run_stack = _run_stack(run)
    if run_stack is not None and run_stack != stack:
        what = f"preset {run.preset}" if preset is not None and image is None else f"Neuron SDK {sdk}"
        return (
            f"{run.image!r} is {what} ({run_stack} stack); node group {group.name!r} serves the {stack} stack "
            f"({why}): put the run on a node group of the {run_stack} stack (runs[].node_group), or use an "
            f"image of SDK {', '.join(stack_releases(stack))}"
        )
    driver = _ami_driver(group, kubernetes_version)
    if driver is None or version_key(driver) < version_key(stack_driver(stack)):
        return None  # the group's AMI release has its own line
    problem = driver_problem(run.image, driver=driver)
    if problem is None:
        return None
    release = _ami_release(group, kubernetes_version)
    newer = _releases_with_driver(kubernetes_version, NEURON_RELEASES[sdk or ""].driver)
    return (
        f"{problem}; AMI release {release} brings {driver}: use AMI release "
        f"{', '.join(newer) or '(none known: declare a newer release with ami_facts, docs/neuron.md)'}"
    )


@_reads("trainium.node_groups")
def _dra_claims_fit_kubernetes(groups: list[TrainiumNodeGroupSettings]) -> Iterator[Problem]:
    """A pod of a ``devices: dra`` group claims its whole node, in one ResourceClaim where the node's
    devices fit one, else the EFA interfaces in a second (cluster_facts/dra.py ``NodeDevices.claims``:
    a trn2u's 33 devices are 17 and 16). Kubernetes caps each claim at ``CLAIM_DEVICE_LIMIT`` devices
    (tests/cluster/test_dra_device_taints.py shows the real allocator refusing 33): a node type
    whose claim would still exceed it is refused here. None in the catalog does today."""
    for index, group in enumerate(groups):
        instance = CATALOG.get(group.instance_type)
        if not group.uses_dra or instance is None:
            continue
        for claim, wanted in node_devices(instance).claim_devices().items():
            if wanted > CLAIM_DEVICE_LIMIT:
                yield (
                    f"trainium.node_groups[{index}].devices",
                    (
                        f"dra claims a whole {instance.name} with claim {claim!r} of {wanted} devices, over the "
                        f"{CLAIM_DEVICE_LIMIT} Kubernetes allows one claim; allowed: device-plugin"
                    ),
                )


@_reads("cluster.kubernetes_version", "trainium.node_groups")
def _dra_groups_have_dra(
    kubernetes_version: str, groups: list[TrainiumNodeGroupSettings]
) -> Iterator[Problem]:
    """A ``devices: dra`` group needs a cluster version where DRA is GA (resource.k8s.io/v1)."""
    if version_key(kubernetes_version) >= version_key(DRA_MINIMUM_KUBERNETES):
        return
    for index, group in enumerate(groups):
        if group.uses_dra:
            yield (
                f"trainium.node_groups[{index}].devices",
                (
                    f"dra needs Kubernetes {DRA_MINIMUM_KUBERNETES} or later (DRA is GA there; the Neuron and "
                    f"EFA DRA drivers require it), the cluster is {kubernetes_version}; allowed: device-plugin"
                ),
            )
