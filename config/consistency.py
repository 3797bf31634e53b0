"""Checks between keys of different sections of one configuration.

Each check declares the keys it reads (``@_reads``) and gets their validated values, in that order.
The loader runs every check whose keys are valid, also when other keys of the file are not: a file
with a bad ``vpc.cidr`` still hears that ``training.nodes`` exceeds its node group. A check never
runs on a key that has a problem of its own, so no line repeats or follows from another one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

from cluster_facts.cloudwatch_metrics import EFA_METRICS_MINIMUM_ADDON, NEURON_METRICS_MINIMUM_ADDON
from cluster_facts.versions import AMAZON_CLOUDWATCH_OBSERVABILITY, version_key

if TYPE_CHECKING:
    from config.model import StackConfig, TrainiumNodeGroupSettings

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


@_reads("trainium.node_groups", "training.node_group")
def _training_group_defined(groups: list[TrainiumNodeGroupSettings], wanted: str | None) -> Iterator[Problem]:
    names = [group.name for group in groups]
    if wanted is not None and wanted not in names:
        yield (
            "training.node_group",
            f"{wanted!r} is not a trainium.node_groups name; defined: {', '.join(names)}",
        )


@_reads("trainium.node_groups", "training.node_group", "training.nodes")
def _training_fits_group(
    groups: list[TrainiumNodeGroupSettings], wanted: str | None, nodes: int
) -> Iterator[Problem]:
    group = next((group for group in groups if group.name == (wanted or groups[0].name)), None)
    if group is not None and nodes > group.max_size:
        yield (
            "training.nodes",
            f"{nodes} nodes do not fit node group {group.name!r} (max_size {group.max_size})",
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
