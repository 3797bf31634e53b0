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

from cluster_facts.cloudwatch_metrics import EFA_METRICS_MINIMUM_ADDON, NEURON_METRICS_MINIMUM_ADDON
from cluster_facts.image_sources import UPSTREAM_REGISTRIES, is_ecr_private_registry
from cluster_facts.images import split_image
from cluster_facts.kubernetes_names import DATA_MOUNT, DATASETS_ROOT, ETCD_REPLICAS, dataset_variable
from cluster_facts.neuron_stack import AMI_RELEASES, DEFAULT_AMI_RELEASES, stack_problem
from cluster_facts.versions import AMAZON_CLOUDWATCH_OBSERVABILITY, version_key
from config.presets import BERT_LARGE

if TYPE_CHECKING:
    from config.model import AutoscalerSettings, EcrSettings, StackConfig, TrainiumNodeGroupSettings
    from config.workloads import DatasetSettings, RunSettings, TeamSettings

__all__ = [
    "CROSS_CHECKS",
    "CrossCheck",
    "Problem",
    "Unavailable",
    "consistency_problems",
    "cross_section_problems",
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
    training pod takes every chip of its node (k8s_charts/training_run.py)."""
    for index, team in enumerate(all_teams):
        if team is None or team.quota.neuron_devices is None:
            continue
        by_name = {group.name: group for group in groups}
        mine = [by_name[name] for name in _team_group_names(team, list(by_name))]
        if not mine:
            continue  # its groups are undefined: the check above says so
        smallest = min(mine, key=lambda group: group.instance.chips)
        if team.quota.neuron_devices < smallest.instance.chips:
            yield (
                f"teams[{index}].quota.neuron_devices",
                (
                    f"{team.quota.neuron_devices} chips hold no training pod: one takes every chip of its "
                    f"node ({smallest.instance.chips} on node group {smallest.name!r}); allowed: "
                    f"{smallest.instance.chips} or more"
                ),
            )


@_reads("runs", "teams", "trainium.node_groups")
def _applied_runs_fit_their_teams_quota(
    runs: list[RunSettings | None],
    all_teams: list[TeamSettings | None],
    groups: list[TrainiumNodeGroupSettings],
) -> Iterator[Problem]:
    """The runs a deployment applies create their pods at once (no ``enqueue``: a queued gang's pods
    exist and wait). A quota the team's applied runs overfill refuses some of their pods, and
    Volcano's job controller ends such a run after about 3 minutes of refused syncs
    (k8s_charts/team_quota.py): refused here, before anything is built."""
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
        chips = sum(run.nodes * group.instance.chips for run, group in placed if group is not None)
        if chips > team.quota.neuron_devices:
            yield (
                f"teams[{index}].quota.neuron_devices",
                (
                    f"{team.quota.neuron_devices} chips do not hold the team's applied runs "
                    f"({chips} chips: {listing} nodes); Volcano ends a run whose pods the quota "
                    f"refuses; allowed: {chips} or more"
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
    for index, dataset in enumerate(all_datasets):
        if (
            dataset is not None
            and any(run.preset == BERT_LARGE.name for run in runs)
            and dataset.name == BERT_LARGE.dataset.name
        ):
            yield (
                f"datasets[{index}].name",
                f"{dataset.name!r} is the data set of preset {BERT_LARGE.name}, which brings it itself; pick another name",
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
    for index, run in enumerate(runs):
        if run is None or run.script is None:
            continue  # a preset's script is a file of its data set
        where, script = f"runs[{index}].script", run.script
        if script.startswith("$(DATASET_") and ")/" in script:
            variable, name = script[2:].split(")/", 1)
            dataset = datasets.get(variable)
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
        if run is not None and run.parameters is not None and run.parameters.dataset_archive_sha256:
            pins.setdefault(run.parameters.dataset_archive_sha256, index)
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
def _run_images_come_through_the_cache(
    account: str, ecr: EcrSettings, runs: list[RunSettings | None]
) -> Iterator[Problem]:
    """With the cache on, a run's image must come from a registry it serves or from this account's ECR."""
    cached = ecr.cached_registries
    if not ecr.pull_through_cache:
        return
    for index, run in enumerate(runs):
        if run is None:
            continue
        host = split_image(run.image)[0]
        if host in cached or (is_ecr_private_registry(host) and host.startswith(f"{account}.")):
            continue
        registry = UPSTREAM_REGISTRIES.get(host)
        if registry is not None:
            message = (
                f"{run.image!r} is on {host}, which ECR's pull-through cache serves only with a credential: "
                f"set ecr.upstream_credentials.{host} to a Secrets Manager secret (ecr-pullthroughcache/...), "
                "push the image to the stack's repository, or set ecr.pull_through_cache: false"
            )
        else:
            message = (
                f"{run.image!r} is on {host}, which ECR's pull-through cache does not serve; allowed: "
                f"{', '.join(sorted(cached))} or this account's ECR ({account}.dkr.ecr.<region>...): push "
                "the image to the stack's repository, or set ecr.pull_through_cache: false"
            )
        yield f"runs[{index}].image", message


def _ami_release(group: TrainiumNodeGroupSettings, kubernetes_version: str) -> str | None:
    """The AMI release the group boots: its own, or the Neuron table's default for the version."""
    return group.ami_release or DEFAULT_AMI_RELEASES.get(kubernetes_version)


@_reads("cluster.kubernetes_version", "trainium.node_groups")
def _ami_releases_are_in_the_neuron_table(
    kubernetes_version: str, groups: list[TrainiumNodeGroupSettings]
) -> Iterator[Problem]:
    """A node group boots an AMI release whose Neuron driver the table knows, of the cluster's version."""
    known = sorted(
        (r.release_version for r in AMI_RELEASES.values() if r.kubernetes_version == kubernetes_version),
        key=lambda version: (version_key(version), version),
    )
    for index, group in enumerate(groups):
        release = _ami_release(group, kubernetes_version)
        if release is None:
            yield (
                f"trainium.node_groups[{index}].ami_release",
                (
                    f"no Neuron AMI release is known for Kubernetes {kubernetes_version}; add one to "
                    "cluster_facts/neuron_stack.py (docs/neuron.md)"
                ),
            )
        elif release not in AMI_RELEASES or AMI_RELEASES[release].kubernetes_version != kubernetes_version:
            yield (
                f"trainium.node_groups[{index}].ami_release",
                (
                    f"{release!r} is not a Neuron AMI release of the table for Kubernetes {kubernetes_version}; "
                    f"allowed: {', '.join(known) or 'none'}"
                ),
            )


@_reads("cluster.kubernetes_version", "runs", "teams", "trainium.node_groups")
def _run_images_are_a_supported_neuron_stack(
    kubernetes_version: str,
    runs: list[RunSettings | None],
    all_teams: list[TeamSettings | None],
    groups: list[TrainiumNodeGroupSettings],
) -> Iterator[Problem]:
    """Each run's image is an SDK release that supports its training and whose driver its nodes boot."""
    teams = [team for team in all_teams if team is not None]
    if len(teams) != len(all_teams) or not teams:
        return
    by_name = {group.name: group for group in groups}
    for index, run in enumerate(runs):
        if run is None:
            continue
        group = by_name.get(_run_group_name(run, _run_team(run, teams), list(by_name)) or "")
        release = _ami_release(group, kubernetes_version) if group is not None else None
        if release is None or release not in AMI_RELEASES:
            continue  # the group or its AMI release has its own line
        problem = stack_problem(image=run.image, ami_release=release)
        if problem is not None:
            yield f"runs[{index}].image", problem
