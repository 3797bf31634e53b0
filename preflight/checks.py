"""The checks: pure functions from the configuration and the account's facts to results.

No AWS here: ``aws.gather_facts`` reads the account once, and every check only compares. Each
result says what was found (DETAIL) and, when it is not a PASS, what to change (WHAT TO DO),
naming the configuration key. The order of the results is fixed: account, zones, offerings,
quotas, Lambda concurrency, reservations, Kubernetes version.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from cluster_facts.versions import KUBECTL_LAYERS, version_key
from config.model import StackConfig, TrainiumNodeGroupSettings
from preflight.facts import (
    AccountFacts,
    InstancesInUse,
    KubernetesVersion,
    LambdaLimits,
    Reservation,
    Unavailable,
    Zone,
)
from preflight.lambda_concurrency import MINIMUM_UNRESERVED, LambdaDemand, minimum_unreserved
from preflight.quotas import QuotaDemand, quota_demands

__all__ = ["LAMBDA_CONCURRENCY_QUOTA", "UPDATE_SURGE", "CheckResult", "Status", "run_checks", "worst"]

Status = Literal["PASS", "WARN", "FAIL"]
_RANK: dict[Status, int] = {"PASS": 0, "WARN": 1, "FAIL": 2}

# Reservation states that become usable by themselves; every other state but active never will.
_NOT_YET_ACTIVE = frozenset({"pending", "scheduled", "payment-pending", "assessing", "delayed"})


@dataclass(frozen=True)
class CheckResult:
    check: str
    status: Status
    detail: str
    action: str = ""
    """What to do; empty for a PASS."""


def worst(statuses: Iterable[Status]) -> Status:
    return max(statuses, key=_RANK.__getitem__, default="PASS")


def run_checks(
    config: StackConfig, facts: AccountFacts, lambda_demand: LambdaDemand | None = None
) -> list[CheckResult]:
    """``lambda_demand``: what a deploy of the configuration's synthesized template holds at once
    (``lambda_concurrency.lambda_demand``); None when no template was given."""
    # Imported here: network_checks builds on this module's CheckResult.
    from preflight.network_checks import check_network  # noqa: PLC0415

    results = [
        check_account(config, facts),
        check_vpc_zones(config, facts),
        check_trainium_zone(config, facts),
        *check_network(config, facts),
    ]
    results += [check_offering(config, facts, index) for index in range(len(config.trainium.node_groups))]
    results += check_quotas(config, facts)
    results.append(check_lambda_concurrency(facts, lambda_demand))
    results += [
        check_reservation(config, facts, index)
        for index, group in enumerate(config.trainium.node_groups)
        if group.capacity_reservation_id is not None
    ]
    results.append(check_kubernetes_version(config, facts))
    return results


def check_account(config: StackConfig, facts: AccountFacts) -> CheckResult:
    if facts.account_id == config.account:
        return CheckResult("account", "PASS", f"credentials are for account {facts.account_id}")
    return CheckResult(
        "account",
        "FAIL",
        f"credentials are for account {facts.account_id}, the file names {config.account}; zone names "
        f"and quotas below are {facts.account_id}'s",
        f"use credentials for {config.account} (AWS_PROFILE), or correct account",
    )


def check_vpc_zones(config: StackConfig, facts: AccountFacts) -> CheckResult:
    check = "vpc zones"
    if isinstance(facts.zones, Unavailable):
        return _unavailable(check, facts.zones)
    by_name = {zone.name: zone for zone in facts.zones}
    found: list[str] = []
    missing: list[str] = []
    impaired: list[str] = []
    for index, name in enumerate(config.vpc.availability_zones):
        zone = by_name.get(name)
        if zone is None:
            missing.append(f"vpc.availability_zones[{index}] {name}")
            continue
        found.append(f"{name} = {zone.zone_id}")
        if zone.state != "available":
            impaired.append(f"{name} is {zone.state}")
    if missing:
        return CheckResult(
            check,
            "FAIL",
            f"{', '.join(missing)}: not a zone of {facts.region} in this account; zones: {_zone_list(facts.zones)}",
            "use zone names from that list in vpc.availability_zones",
        )
    if impaired:
        return CheckResult(
            check,
            "WARN",
            f"{', '.join(found)}; {', '.join(impaired)}",
            "retry later, or pick other zones for vpc.availability_zones",
        )
    return CheckResult(check, "PASS", ", ".join(found))


def check_trainium_zone(config: StackConfig, facts: AccountFacts) -> CheckResult:
    check = "trainium zone"
    trainium = config.trainium
    if isinstance(facts.zones, Unavailable):
        return _unavailable(check, facts.zones)
    zone = _zone_by_id(facts, trainium.availability_zone_id)
    if zone is None:
        return CheckResult(
            check,
            "FAIL",
            f"trainium.availability_zone_id {trainium.availability_zone_id} is not a zone of {facts.region}; "
            f"zones: {_zone_list(facts.zones)}",
            "set trainium.availability_zone_id to a zone id that offers the instance types (offering rows)",
        )
    if zone.name != trainium.availability_zone:
        return CheckResult(
            check,
            "FAIL",
            f"trainium.availability_zone_id {zone.zone_id} is {zone.name} in this account, "
            f"not {trainium.availability_zone} (trainium.availability_zone)",
            f"run again with --write (make preflight WRITE=1), or set trainium.availability_zone: {zone.name} "
            "and the same name in vpc.availability_zones",
        )
    if zone.state != "available":
        return CheckResult(
            check,
            "WARN",
            f"{zone.zone_id} is {zone.name}, state {zone.state}",
            "retry later or choose another zone",
        )
    return CheckResult(check, "PASS", f"{zone.zone_id} is {zone.name} in this account")


def check_offering(config: StackConfig, facts: AccountFacts, index: int) -> CheckResult:
    group = config.trainium.node_groups[index]
    check = f"offering {group.name}"
    if isinstance(facts.offerings, Unavailable):
        return _unavailable(check, facts.offerings)
    zone_id = config.trainium.availability_zone_id
    offered_in = facts.offerings.get(group.instance_type, ())
    if not offered_in:
        return CheckResult(
            check,
            "FAIL",
            f"{group.instance_type} is not offered in any zone of {facts.region}",
            f"choose another region or trainium.node_groups[{index}].instance_type",
        )
    where = f"offered in: {', '.join(_describe_zone_id(facts, zone) for zone in offered_in)}"
    if zone_id not in offered_in:
        return CheckResult(
            check,
            "FAIL",
            f"{group.instance_type} is not offered in {zone_id} (trainium.availability_zone_id); {where}",
            f"set trainium.availability_zone_id to one of {', '.join(offered_in)}, then run with --write",
        )
    return CheckResult(check, "PASS", f"{group.instance_type} in {zone_id}; {where}")


def check_quotas(config: StackConfig, facts: AccountFacts) -> list[CheckResult]:
    demands = quota_demands(config)
    if not demands:
        return [
            CheckResult(
                "quota",
                "PASS",
                "only capacity_block groups: they run in their Capacity Blocks, not on the On-Demand or Spot quota",
            )
        ]
    return [_check_quota(config, facts, demand) for demand in demands]


def _check_quota(config: StackConfig, facts: AccountFacts, demand: QuotaDemand) -> CheckResult:
    quota = demand.quota
    check = f"quota {quota.purchase}"
    value = facts.quotas.get(quota.code)
    if isinstance(value, Unavailable):
        return _unavailable(check, value)
    needs = f"needs {demand.vcpus} vCPUs ({', '.join(f'{g.name} {g.max_size} x {g.vcpus_per_instance}' for g in demand.groups)})"
    if value is None:
        return CheckResult(
            check,
            "WARN",
            f"{needs}; {quota.code} {quota.name} not found in {facts.region}",
            f"check {quota.name} in the Service Quotas console ({facts.region})",
        )
    have = f"{quota.code} {quota.name} = {value:g}"
    keys = ", ".join(f"trainium.node_groups[{g.index}].max_size" for g in demand.groups)
    in_use = facts.in_use
    used = InstancesInUse() if isinstance(in_use, Unavailable) else in_use.get(quota.code, InstancesInUse())
    total = demand.vcpus + used.vcpus
    if used.instances:
        plural = "s" if used.instances > 1 else ""
        needs += (
            f" + {used.vcpus} in use by {used.instances} Trn instance{plural} outside cluster {config.name}"
        )
    if value < total:
        stop = " or stop those instances" if used.instances else ""
        return CheckResult(
            check,
            "FAIL",
            f"{needs}; {have}",
            f"request {quota.code} >= {total} in Service Quotas (ec2, {facts.region}), or lower {keys}{stop}",
        )
    if isinstance(in_use, Unavailable):
        return CheckResult(
            check,
            "WARN",
            f"{needs}; {have}; Trn instances already running not counted: {in_use.reason}",
            f"allow {in_use.call} (read-only) for these credentials, or check the quota's usage in the "
            "Service Quotas console",
        )
    return CheckResult(check, "PASS", f"{needs}; {have}")


LAMBDA_CONCURRENCY_QUOTA = ("L-B99A9384", "Concurrent executions")
"""The Service Quotas code and name of the Region's Lambda concurrency (service code ``lambda``)."""


def check_lambda_concurrency(facts: AccountFacts, demand: LambdaDemand | None) -> CheckResult:
    """The deploy's custom resources must fit the Region's Lambda concurrency at their widest moment.

    A custom resource's Lambda is invoked by CloudFormation asynchronously, but the provider
    framework invokes the kubectl handler synchronously: throttled there, the invocation fails after
    the SDK's retries, and with it the resource and the deploy (preflight/lambda_concurrency.py).
    """
    check = "lambda concurrency"
    limits = facts.lambda_limits
    if isinstance(limits, Unavailable):
        return _unavailable(check, limits)
    code, name = LAMBDA_CONCURRENCY_QUOTA
    have = (
        f"{code} {name} = {limits.concurrent_executions} ({limits.unreserved} unreserved)"
        if isinstance(limits, LambdaLimits)
        else "not asked"
    )
    if demand is None:
        return CheckResult(
            check,
            "WARN",
            f"{have}; what a deploy runs at once is read from the synthesized template, and none was given",
            "run make preflight (it synthesizes first), or make synth and pass --template "
            "cdk.out/TrainiumStack.template.json",
        )
    if not isinstance(limits, LambdaLimits):
        return CheckResult(check, "WARN", f"needs {demand.peak} at once; {have}", "")
    needs = (
        f"a deploy runs up to {demand.peak} Lambda executions at once ({len(demand.peak_resources)} of the "
        f"template's {demand.custom_resources} custom resources may run together; a kubectl one holds 2)"
    )
    # What the stack reserves comes out of the unreserved pool when its functions are created.
    pool = limits.unreserved - demand.reserved_total
    already_reserved = limits.concurrent_executions - limits.unreserved
    wanted = max(
        demand.peak + already_reserved + demand.reserved_total,
        already_reserved + demand.reserved_total + MINIMUM_UNRESERVED if demand.reserved else 0,
    )
    problems: list[str] = []
    if demand.reserved:
        reserved = ", ".join(f"{fn} {n}" for fn, n in sorted(demand.reserved.items()))
        needs += f"; the stack reserves {demand.reserved_total} ({reserved})"
        kept = minimum_unreserved(limits.concurrent_executions)
        if pool < kept:
            problems.append(f"Lambda keeps {kept} unreserved, the stack's reservations leave {pool}")
        for function, peak in sorted(demand.reserved_peaks.items()):
            if peak > demand.reserved[function]:
                problems.append(
                    f"{function} runs up to {peak} at once on a reservation of {demand.reserved[function]}"
                )
    if demand.peak > pool:
        problems.append(f"{pool} left for them")
    # "New AWS accounts have reduced concurrency and memory quotas. AWS raises these quotas
    # automatically based on your usage" (Lambda developer guide, "Lambda quotas"; the default is 1,000,
    # reduced accounts report 10 or 50: preflight/lambda_concurrency.py). A request through Service
    # Quotas is the documented way to raise it at once (same page, "Requesting a quota increase").
    raise_it = (
        f"request {code} {name} >= {wanted} in Service Quotas (lambda, {facts.region}); a new account's "
        "quota is reduced (reported as low as 10) until AWS raises it with use"
    )
    if problems:
        return CheckResult(check, "FAIL", f"{needs}; {have}: {'; '.join(problems)}", raise_it)
    return CheckResult(
        check,
        "PASS",
        f"{needs}; {have}, shared with the account's other functions running at deploy time",
    )


def check_reservation(config: StackConfig, facts: AccountFacts, index: int) -> CheckResult:
    group = config.trainium.node_groups[index]
    check = f"reservation {group.name}"
    key = f"trainium.node_groups[{index}]"
    reservation_id = group.capacity_reservation_id
    assert reservation_id is not None
    reservation = facts.reservations.get(reservation_id)
    if isinstance(reservation, Unavailable):
        return _unavailable(check, reservation)
    if reservation is None:
        return CheckResult(
            check,
            "FAIL",
            f"{reservation_id} not found in account {facts.account_id}, {facts.region}",
            f"correct {key}.capacity_reservation_id (EC2 console, Capacity Reservations, {facts.region})",
        )
    problems = _reservation_problems(config, group, key, reservation, facts.checked_at)
    detail = _describe_reservation(reservation)
    if not problems:
        return CheckResult(check, "PASS", detail)
    status = worst(status for status, _, _ in problems)
    return CheckResult(
        check,
        status,
        "; ".join([detail, *(problem for _, problem, _ in problems)]),
        "; ".join(dict.fromkeys(action for _, _, action in problems)),
    )


def _reservation_problems(
    config: StackConfig,
    group: TrainiumNodeGroupSettings,
    key: str,
    reservation: Reservation,
    now: datetime | None,
) -> list[tuple[Status, str, str]]:
    """What keeps ``reservation`` from carrying ``group`` (at ``key``), in the order a reader fixes it:
    where and what it reserves, how many, which kind, whether it is usable now, and the update's surge."""
    problems = [
        *_placement_problems(config, group, key, reservation),
        *_size_problems(group, key, reservation),
        *_kind_problems(group, key, reservation),
        *_state_problems(key, reservation, now),
    ]
    if reservation.total_instances >= group.max_size:
        problems += _surge_problems(group, key, reservation, UPDATE_SURGE[group.update_strategy])
    return problems


def _placement_problems(
    config: StackConfig, group: TrainiumNodeGroupSettings, key: str, reservation: Reservation
) -> list[tuple[Status, str, str]]:
    """The reservation's zone and instance type against the configuration's."""
    problems: list[tuple[Status, str, str]] = []
    zone_id = config.trainium.availability_zone_id
    if reservation.zone_id != zone_id:
        problems.append(
            (
                "FAIL",
                f"in {reservation.zone_id}, not trainium.availability_zone_id {zone_id}",
                f"set trainium.availability_zone_id: {reservation.zone_id} and run with --write",
            )
        )
    if reservation.instance_type != group.instance_type:
        problems.append(
            (
                "FAIL",
                f"reserves {reservation.instance_type}, the group runs {group.instance_type}",
                f"set {key}.instance_type: {reservation.instance_type}",
            )
        )
    return problems


def _size_problems(
    group: TrainiumNodeGroupSettings, key: str, reservation: Reservation
) -> list[tuple[Status, str, str]]:
    """The reservation's instance count against the group's min_size and max_size."""
    problems: list[tuple[Status, str, str]] = []
    if reservation.total_instances < group.min_size:
        problems.append(
            (
                "FAIL",
                (
                    f"reserves {reservation.total_instances} instances, {key}.min_size keeps {group.min_size} "
                    "warm nodes"
                ),
                f"lower {key}.min_size to at most {reservation.total_instances}",
            )
        )
    if reservation.total_instances < group.max_size:
        problems.append(
            (
                "FAIL",
                f"reserves {reservation.total_instances} instances, {key}.max_size is {group.max_size}",
                f"lower {key}.max_size (and desired_size) to {reservation.total_instances}",
            )
        )
    return problems


def _kind_problems(
    group: TrainiumNodeGroupSettings, key: str, reservation: Reservation
) -> list[tuple[Status, str, str]]:
    """A Capacity Block where the group expects an On-Demand Capacity Reservation, or the reverse."""
    is_block = reservation.reservation_type == "capacity-block"
    if group.capacity_type == "capacity_block" and not is_block:
        return [
            (
                "FAIL",
                "an On-Demand Capacity Reservation, not a Capacity Block",
                f"set {key}.capacity_type: on_demand",
            )
        ]
    if group.capacity_type == "on_demand" and is_block:
        return [
            (
                "FAIL",
                "a Capacity Block, not an On-Demand Capacity Reservation",
                f"set {key}.capacity_type: capacity_block",
            )
        ]
    return []


def _state_problems(
    key: str, reservation: Reservation, now: datetime | None
) -> list[tuple[Status, str, str]]:
    """Whether an instance can launch in the reservation now: its state, and a Capacity Block's window."""
    if reservation.state in _NOT_YET_ACTIVE:
        starts = f" at {_when(reservation.start)}" if reservation.start else ""
        return [
            (
                "WARN",
                f"not active yet ({reservation.state})",
                f"nodes can start only when it becomes active{starts}",
            )
        ]
    if reservation.state != "active":
        return [
            (
                "FAIL",
                f"{reservation.state}: no instance can launch in it",
                f"buy or create a new reservation and set {key}.capacity_reservation_id",
            )
        ]
    if reservation.reservation_type != "capacity-block" or now is None:
        return []
    # The state lags the clock by minutes: the dates decide for an active Capacity Block.
    if reservation.end is not None and now >= reservation.end:
        return [
            (
                "FAIL",
                "its window has ended: no instance can launch in it",
                f"buy a new Capacity Block and set {key}.capacity_reservation_id",
            )
        ]
    if reservation.start is not None and now < reservation.start:
        return [
            (
                "WARN",
                "its window has not begun",
                f"nodes can start only when it begins at {_when(reservation.start)}",
            )
        ]
    return []


# EKS's DEFAULT update strategy for managed node groups starts the replacement nodes before it stops
# old ones: it raises the Auto Scaling group's maximum and desired size by the larger of twice the
# number of its Availability Zones and maxUnavailable (EKS User Guide, "Understand each phase of node
# updates"). A Trainium group sits in one subnet, so one zone, and the stack sets maxUnavailable 1.
# MINIMAL terminates old instances before it launches new ones (EKS API, NodegroupUpdateConfig): no
# surge. The stack gives every group with a reservation MINIMAL (config TrainiumNodeGroupSettings.
# update_strategy), so a reservation that holds max_size also holds an update.
_UPDATE_ZONES = 1
_MAX_UNAVAILABLE = 1
UPDATE_SURGE = {"DEFAULT": max(2 * _UPDATE_ZONES, _MAX_UNAVAILABLE), "MINIMAL": 0}
"""Nodes an update of a Trainium node group can launch on top of those running, by update strategy."""


def _surge_problems(
    group: TrainiumNodeGroupSettings, key: str, reservation: Reservation, surge: int
) -> list[tuple[Status, str, str]]:
    """A WARN when the group at max_size plus an update's surge does not fit the reservation."""
    held = reservation.total_instances
    needed = group.max_size + surge
    if held >= needed:
        return []
    room = held - surge
    lower = f"lower {key}.max_size to {room}" if room >= 1 else ""
    if reservation.reservation_type == "capacity-block":
        # EKS's guide for managed node groups on Capacity Blocks: desired size 0 when upgrading.
        ways = [
            (
                f"update only while the group runs no nodes (EKS asks for desired size 0 when updating a "
                f"Capacity Block node group): finish the jobs, keep {key}.min_size 0, let the autoscaler "
                "scale it to 0, then deploy"
            ),
            lower,
        ]
    else:
        ways = [
            (
                f"update the node group (a launch template change, an AMI upgrade) only while at most "
                f"{max(room, 0)} of its nodes run: between jobs, with {key}.min_size 0"
            ),
            f"grow the reservation to {needed} instances",
            lower,
        ]
    return [
        (
            "WARN",
            (
                f"no room for an update: EKS starts up to {surge} replacement nodes before stopping "
                f"old ones, so at max_size {group.max_size} an update needs {needed}, the reservation holds "
                f"{held}"
            ),
            "; or ".join(way for way in ways if way),
        )
    ]


def _window(reservation: Reservation) -> str:
    start = _when(reservation.start) if reservation.start else "now"
    end = _when(reservation.end) if reservation.end else "no end date"
    return f"{start} to {end}"


def _describe_reservation(reservation: Reservation) -> str:
    kind = "Capacity Block" if reservation.reservation_type == "capacity-block" else "ODCR"
    return (
        f"{kind} {reservation.reservation_id} {reservation.state}: {reservation.total_instances} x "
        f"{reservation.instance_type} ({reservation.available_instances} available) in "
        f"{reservation.zone_id} ({reservation.zone_name}), {_window(reservation)}"
    )


def check_kubernetes_version(config: StackConfig, facts: AccountFacts) -> CheckResult:
    wanted = config.cluster.kubernetes_version
    check = f"kubernetes {wanted}"
    if isinstance(facts.kubernetes_versions, Unavailable):
        return _unavailable(check, facts.kubernetes_versions)
    offered = {item.version: item for item in facts.kubernetes_versions if item.status != "UNSUPPORTED"}
    version: KubernetesVersion | None = offered.get(wanted)
    if version is None:
        usable = [v for v in sorted(offered, key=version_key) if v in KUBECTL_LAYERS]
        return CheckResult(
            check,
            "FAIL",
            f"EKS in {facts.region} does not offer {wanted}; offers: {', '.join(sorted(offered, key=version_key)) or 'none'}",
            f"set cluster.kubernetes_version to {' or '.join(usable)}"
            if usable
            else "no offered version has a kubectl layer in this project",
        )
    if version.status == "EXTENDED_SUPPORT":
        until = f" until {_day(version.end_of_extended_support)}" if version.end_of_extended_support else ""
        return CheckResult(
            check,
            "WARN",
            f"{wanted} is in extended support{until}: EKS charges more per cluster hour",
            "plan an upgrade of cluster.kubernetes_version",
        )
    until = f" until {_day(version.end_of_standard_support)}" if version.end_of_standard_support else ""
    return CheckResult(check, "PASS", f"offered by EKS in {facts.region}, standard support{until}")


def _unavailable(check: str, fact: Unavailable) -> CheckResult:
    return CheckResult(
        check,
        "FAIL",
        f"could not ask AWS: {fact.reason}",
        f"allow {fact.call} (read-only) for these credentials",
    )


def _zone_by_id(facts: AccountFacts, zone_id: str) -> Zone | None:
    if isinstance(facts.zones, Unavailable):
        return None
    return next((zone for zone in facts.zones if zone.zone_id == zone_id), None)


def _describe_zone_id(facts: AccountFacts, zone_id: str) -> str:
    zone = _zone_by_id(facts, zone_id)
    return f"{zone_id} ({zone.name})" if zone is not None else zone_id


def _zone_list(zones: tuple[Zone, ...]) -> str:
    return (
        ", ".join(f"{zone.name} = {zone.zone_id}" for zone in sorted(zones, key=lambda zone: zone.name))
        or "none"
    )


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _day(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d")
