"""What the configuration costs per hour, before it is deployed: the Price List queries, the rows.

Pure, like ``quotas``: ``price_queries`` says which prices the configuration needs (``aws`` asks
``pricing:GetProducts`` for each and stores the answers in ``AccountFacts.prices``), and
``cost_rows`` turns configuration and facts into report rows. What is counted, and how:

- idle: every Trainium node group at ``min_size`` (its warm nodes) and the system node group at
  its ``min_size``; at max_size: every group at ``max_size``, the most the autoscaler may run.
- ``on_demand`` groups at the On-Demand price of their instance type (Linux, shared tenancy). An
  On-Demand Capacity Reservation (ODCR) bills every reserved instance while it is active, used or
  not, so a group on an active ODCR costs at least the reservation: max(nodes, reserved) x price.
- ``spot`` groups at the On-Demand price, shown as an upper bound: Spot prices are lower and move.
- ``capacity_block`` groups at $0/h: a Capacity Block is paid up front for its whole window.
- what bills whether nodes run or not: the EKS control plane (per cluster-hour, standard support),
  the NAT gateways (per hour; their per-GB processing charge is traffic, not counted), and FSx for
  Lustre (per GB-month of storage, converted at ``HOURS_PER_MONTH``).

A price the Price List does not give exactly once is unknown, never guessed: its row is a WARN,
and the total is then "at least". Not counted at all: EBS volumes, data transfer, CloudWatch logs,
ECR storage, KMS keys, public IPv4 addresses, and what a Capacity Block cost up front.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from config.model import StackConfig, TrainiumNodeGroupSettings
from preflight.checks import CheckResult
from preflight.facts import AccountFacts, NoPrice, Price, Reservation, Unavailable

__all__ = [
    "HOURS_PER_MONTH",
    "PRICE_LIST_CALL",
    "PriceQuery",
    "cost_rows",
    "price_queries",
]

HOURS_PER_MONTH = 730
"""365 x 24 / 12: the average month, to turn a per-GB-month price into a per-hour one."""

PRICE_LIST_CALL = "pricing:GetProducts"

# ODCR states in which the reservation bills (active) or will bill once its start date comes.
_ODCR_BILLING = frozenset({"active"})
_ODCR_UPCOMING = frozenset({"pending", "scheduled", "payment-pending", "assessing", "delayed"})


@dataclass(frozen=True)
class PriceQuery:
    """One ``pricing:GetProducts`` question, and how to pick the one price out of its answer."""

    key: str
    """Names the price in ``AccountFacts.prices``, such as ``ec2 trn1.32xlarge``."""
    what: str
    """What is priced, for the report, such as ``trn1.32xlarge On-Demand``."""
    service_code: str
    filters: tuple[tuple[str, str, str], ...]
    """(Type, Field, Value) filters sent to the Price List, such as ("TERM_MATCH", "tenancy", "Shared")."""
    units: frozenset[str]
    """The price dimension's unit, lower case: {"hrs"} or {"gb-mo"}."""
    usage_type: str | None = None
    """A regular expression the product's ``usagetype`` must match after its region prefix
    (``USW2-``, ``EU-``; us-east-1 often has none); None: any usage type."""
    exclude: tuple[tuple[str, str], ...] = ()
    """(attribute, value): a product that has the attribute with another value is not this price."""


def _term(field: str, value: str) -> tuple[str, str, str]:
    return ("TERM_MATCH", field, value)


def ec2_query(instance_type: str, region: str) -> PriceQuery:
    """On-Demand Linux, shared tenancy, no pre-installed software; ``capacitystatus Used`` leaves out
    the rows of unused reservations, and a ``marketoption`` other than OnDemand (Capacity Block
    rows of accelerated instance types) is left out after the answer."""
    return PriceQuery(
        key=f"ec2 {instance_type}",
        what=f"{instance_type} On-Demand",
        service_code="AmazonEC2",
        filters=(
            _term("instanceType", instance_type),
            _term("regionCode", region),
            _term("operatingSystem", "Linux"),
            _term("tenancy", "Shared"),
            _term("preInstalledSw", "NA"),
            _term("capacitystatus", "Used"),
            _term("licenseModel", "No License required"),
        ),
        units=frozenset({"hrs"}),
        usage_type=rf"BoxUsage:{_escape(instance_type)}",
        exclude=(("marketoption", "OnDemand"),),
    )


def eks_query(region: str) -> PriceQuery:
    return PriceQuery(
        key="eks cluster",
        what="EKS cluster-hour",
        service_code="AmazonEKS",
        filters=(_term("regionCode", region), ("CONTAINS", "usagetype", "AmazonEKS-Hours:perCluster")),
        units=frozenset({"hrs", "hours"}),
        usage_type=r"AmazonEKS-Hours:perCluster",
    )


def nat_query(region: str) -> PriceQuery:
    return PriceQuery(
        key="nat gateway",
        what="NAT gateway-hour",
        service_code="AmazonEC2",
        filters=(_term("regionCode", region), _term("productFamily", "NAT Gateway")),
        units=frozenset({"hrs"}),
        usage_type=r"NatGateway-Hours",
    )


def fsx_query(region: str, throughput_mib_per_tib: int) -> PriceQuery:
    """PERSISTENT_2 SSD storage: the throughput tier is part of the product (``Storage.SSD.<tier>``)."""
    return PriceQuery(
        key=f"fsx lustre ssd {throughput_mib_per_tib}",
        what=f"FSx for Lustre SSD {throughput_mib_per_tib} MB/s/TiB GB-month",
        service_code="AmazonFSx",
        filters=(_term("regionCode", region), _term("fileSystemType", "Lustre")),
        units=frozenset({"gb-mo"}),
        usage_type=rf"Storage\.SSD\.{throughput_mib_per_tib}",
    )


def _escape(text: str) -> str:
    return text.replace(".", r"\.")


def _priced_groups(config: StackConfig) -> list[TrainiumNodeGroupSettings]:
    # Capacity Block groups need no hourly price: the block is paid up front.
    return [group for group in config.trainium.node_groups if group.capacity_type != "capacity_block"]


def price_queries(config: StackConfig) -> list[PriceQuery]:
    """The prices this configuration needs, each once: instance types, then the fixed items."""
    region = config.region
    instance_types = dict.fromkeys(
        [config.system_nodes.instance_type, *(group.instance_type for group in _priced_groups(config))]
    )
    queries = [ec2_query(instance_type, region) for instance_type in instance_types]
    queries.append(eks_query(region))
    queries.append(nat_query(region))
    if config.fsx.deployment_type == "PERSISTENT_2" and config.fsx.throughput_mib_per_tib is not None:
        queries.append(fsx_query(region, config.fsx.throughput_mib_per_tib))
    return queries


# --- rows ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Cost:
    """One row's hourly cost idle and at max_size; None where a price is unknown."""

    idle: float | None
    peak: float | None
    unknown: tuple[tuple[str, str], ...] = ()
    """(what, why) for each item that could not be priced."""
    denied: bool = False
    """An unknown price is unknown because the Price List could not be asked."""


def cost_rows(config: StackConfig, facts: AccountFacts) -> list[CheckResult]:
    """Per Trainium group, the system nodes, the fixed items, and the total: PASS, or WARN when a
    price is unknown. When the Price List could not be asked at all, one WARN row instead."""
    asked = [facts.prices.get(query.key) for query in price_queries(config)]
    refused = [answer for answer in asked if isinstance(answer, Unavailable)]
    if asked and len(refused) == len(asked):
        return [_price_list_refused(config, refused[0])]

    rows = [_group_row(config, facts, index) for index in range(len(config.trainium.node_groups))]
    rows += [_system_row(config, facts), _fixed_row(config, facts)]
    total = _total_row(config, facts, [cost for _, cost in rows])
    return [row for row, _ in rows] + [total]


def _group_row(config: StackConfig, facts: AccountFacts, index: int) -> tuple[CheckResult, _Cost]:
    group = config.trainium.node_groups[index]
    check = f"cost {group.name}"
    if group.capacity_type == "capacity_block":
        reservation = facts.reservations.get(group.capacity_reservation_id or "")
        window = ""
        if isinstance(reservation, Reservation) and reservation.start and reservation.end:
            window = f" {_when(reservation.start)} to {_when(reservation.end)}"
        detail = (
            f"Capacity Block {group.capacity_reservation_id}, {group.max_size} x {group.instance_type} at "
            f"most: paid up front for its window{window}, so $0/h here"
        )
        return CheckResult(check, "PASS", detail), _Cost(0.0, 0.0)

    price = facts.prices.get(ec2_query(group.instance_type, config.region).key)
    if not isinstance(price, Price):
        cost = _Cost(None, None, (_unknown(f"{group.instance_type} On-Demand", price),), _denied(price))
        return _unknown_row(check, cost), cost

    each = price.usd
    idle_nodes, peak_nodes = group.min_size, group.max_size
    reserved, odcr_note = _odcr_billing(group, facts)
    parts = [f"{group.instance_type} On-Demand {_rate(each)}/h"]
    if group.capacity_type == "spot":
        parts = [
            (
                f"{group.instance_type} Spot, priced at On-Demand {_rate(each)}/h as an upper bound "
                "(Spot prices are lower and change)"
            )
        ]
    if odcr_note:
        parts.append(odcr_note)
    idle = max(idle_nodes, reserved) * each
    peak = max(peak_nodes, reserved) * each
    bound = "at most " if group.capacity_type == "spot" else ""
    detail = (
        f"{'; '.join(parts)}: idle (min_size {idle_nodes}) {bound}{_amount(idle)}/h, "
        f"at max_size {peak_nodes} {bound}{_amount(peak)}/h"
    )
    return CheckResult(check, "PASS", detail), _Cost(idle, peak)


def _odcr_billing(group: TrainiumNodeGroupSettings, facts: AccountFacts) -> tuple[int, str]:
    """Instances an ODCR bills regardless of use, and the note that says so."""
    if group.capacity_type != "on_demand" or group.capacity_reservation_id is None:
        return 0, ""
    reservation_id = group.capacity_reservation_id
    reservation = facts.reservations.get(reservation_id)
    if not isinstance(reservation, Reservation):
        return 0, f"ODCR {reservation_id} not read: what it bills is not counted"
    if reservation.reservation_type == "capacity-block" or reservation.instance_type != group.instance_type:
        return 0, f"{reservation_id} is not an ODCR of {group.instance_type}: not counted (reservation row)"
    count = reservation.total_instances
    if reservation.state in _ODCR_BILLING:
        return count, f"ODCR {reservation_id} bills its {count} instances while active, used or not"
    if reservation.state in _ODCR_UPCOMING:
        starts = f" from {_when(reservation.start)}" if reservation.start else " once active"
        return 0, f"ODCR {reservation_id} ({reservation.state}) will bill {count} instances{starts}"
    return 0, f"ODCR {reservation_id} is {reservation.state} and bills nothing"


def _system_row(config: StackConfig, facts: AccountFacts) -> tuple[CheckResult, _Cost]:
    nodes = config.system_nodes
    check = "cost system nodes"
    price = facts.prices.get(ec2_query(nodes.instance_type, config.region).key)
    if not isinstance(price, Price):
        cost = _Cost(None, None, (_unknown(f"{nodes.instance_type} On-Demand", price),), _denied(price))
        return _unknown_row(check, cost), cost
    idle, peak = nodes.min_size * price.usd, nodes.max_size * price.usd
    detail = (
        f"{nodes.instance_type} On-Demand {_rate(price.usd)}/h: idle (min_size {nodes.min_size}) "
        f"{_amount(idle)}/h, at max_size {nodes.max_size} {_amount(peak)}/h"
    )
    return CheckResult(check, "PASS", detail), _Cost(idle, peak)


def _fixed_row(config: StackConfig, facts: AccountFacts) -> tuple[CheckResult, _Cost]:
    check = "cost fixed"
    region = config.region
    parts: list[str] = []
    known = 0.0
    unknown: list[tuple[str, str]] = []
    denied = False

    eks = facts.prices.get(eks_query(region).key)
    if isinstance(eks, Price):
        known += eks.usd
        parts.append(f"EKS control plane {_rate(eks.usd)}/h{_extended_support_note(config, facts)}")
    else:
        unknown.append(_unknown("EKS control plane", eks))
        denied = denied or _denied(eks)

    # An existing VPC (vpc.vpc_id): its NAT gateways are its owner's, not this stack's.
    count = config.vpc.nat_gateways or 0
    nat = facts.prices.get(nat_query(region).key)
    gateways = f"{count} NAT gateway{'s' if count > 1 else ''}"
    if count == 0:
        parts.append("no NAT gateway of this stack (the existing VPC's are its owner's)")
    elif isinstance(nat, Price):
        known += count * nat.usd
        parts.append(f"{gateways} x {_rate(nat.usd)} = {_amount(count * nat.usd)}/h (plus per GB processed)")
    else:
        unknown.append(_unknown(gateways, nat))
        denied = denied or _denied(nat)

    fsx = config.fsx
    size = fsx.storage_capacity_gib
    if fsx.deployment_type == "PERSISTENT_2" and fsx.throughput_mib_per_tib is not None:
        label = f"FSx for Lustre PERSISTENT_2 {size} GiB at {fsx.throughput_mib_per_tib} MB/s/TiB"
        storage = facts.prices.get(fsx_query(region, fsx.throughput_mib_per_tib).key)
    else:
        label = f"FSx for Lustre {fsx.deployment_type} {size} GiB"
        storage = NoPrice(
            f"preflight knows no Price List product that is {fsx.deployment_type} storage alone"
        )
    if isinstance(storage, Price):
        hourly = size * storage.usd / HOURS_PER_MONTH
        known += hourly
        parts.append(
            f"{label}: {size} GB x {_rate(storage.usd)}/GB-month / {HOURS_PER_MONTH} h = {_amount(hourly)}/h"
        )
    else:
        unknown.append(_unknown(label, storage))
        denied = denied or _denied(storage)

    cost = _Cost(known, known, tuple(unknown), denied)
    detail = "bills while the stack exists, nodes or not: " + "; ".join(parts + _describe_unknown(unknown))
    if unknown:
        return CheckResult(check, "WARN", detail, _unknown_action(cost)), cost
    return CheckResult(check, "PASS", detail), cost


def _extended_support_note(config: StackConfig, facts: AccountFacts) -> str:
    versions = facts.kubernetes_versions
    if isinstance(versions, Unavailable):
        return ""
    wanted = config.cluster.kubernetes_version
    if any(item.version == wanted and item.status == "EXTENDED_SUPPORT" for item in versions):
        return f" (standard support; {wanted} is in extended support, which costs more per hour)"
    return ""


def _total_row(config: StackConfig, facts: AccountFacts, costs: Sequence[_Cost]) -> CheckResult:
    check = "cost total"
    idle = sum(cost.idle or 0.0 for cost in costs)
    peak = sum(cost.peak or 0.0 for cost in costs)
    unknown = [item for cost in costs for item in cost.unknown]
    at_least = "at least " if unknown else ""
    parts = [
        f"idle {at_least}{_amount(idle)}/h (about {_day(idle)}/day)",
        f"at max_size {at_least}{_amount(peak)}/h (about {_day(peak)}/day)",
    ]
    notes = []
    if any(group.capacity_type == "capacity_block" for group in config.trainium.node_groups):
        notes.append("Capacity Blocks are paid up front, not counted")
    if any(group.capacity_type == "spot" for group in config.trainium.node_groups):
        notes.append("Spot at On-Demand prices (an upper bound)")
    notes.append("not counted: EBS volumes, traffic, logs")
    published = sorted({price.published[:10] for price in facts.prices.values() if isinstance(price, Price)})
    if published:
        notes.append(
            f"On-Demand list prices of the AWS Price List, published {' to '.join(_ends(published))}"
        )
    detail = "; ".join(parts + notes)
    if unknown:
        detail += f"; unknown: {', '.join(what for what, _ in unknown)}"
        cost = _Cost(None, None, tuple(unknown), any(cost.denied for cost in costs))
        return CheckResult(check, "WARN", detail, _unknown_action(cost))
    return CheckResult(check, "PASS", detail)


def _price_list_refused(config: StackConfig, refused: Unavailable) -> CheckResult:
    """One row when no price could be asked: what would run, and the permission that is missing."""
    idle = [f"{config.system_nodes.min_size} x {config.system_nodes.instance_type}"]
    peak = [f"{config.system_nodes.max_size} x {config.system_nodes.instance_type}"]
    for group in _priced_groups(config):
        if group.min_size:
            idle.append(f"{group.min_size} x {group.instance_type}")
        peak.append(f"{group.max_size} x {group.instance_type}")
    return CheckResult(
        "cost",
        "WARN",
        f"prices unknown: could not ask the AWS Price List ({refused.reason}). Idle runs {', '.join(idle)}; "
        f"at max_size {', '.join(peak)}; always: the EKS control plane, {config.vpc.nat_gateways or 0} NAT "
        f"gateway(s), FSx for Lustre {config.fsx.storage_capacity_gib} GiB",
        f"allow {refused.call} (read-only, Resource *) for these credentials to see the hourly cost",
    )


def _unknown(what: str, answer: Price | NoPrice | Unavailable | None) -> tuple[str, str]:
    if isinstance(answer, (Unavailable, NoPrice)):
        return what, answer.reason
    return what, "not asked"


def _describe_unknown(unknown: Sequence[tuple[str, str]]) -> list[str]:
    return [f"{what}: price unknown ({why})" for what, why in unknown]


def _denied(answer: Price | NoPrice | Unavailable | None) -> bool:
    return isinstance(answer, Unavailable)


def _unknown_row(check: str, cost: _Cost) -> CheckResult:
    return CheckResult(check, "WARN", "; ".join(_describe_unknown(cost.unknown)), _unknown_action(cost))


def _unknown_action(cost: _Cost) -> str:
    if cost.denied:
        return f"allow {PRICE_LIST_CALL} (read-only, Resource *) for these credentials"
    return "look the price up on the AWS pricing pages; preflight shows no price it cannot read exactly once"


def _rate(usd: float) -> str:
    """A unit price as the Price List gives it: at least cents, up to four decimals."""
    text = f"{usd:,.4f}".rstrip("0")
    whole, _, cents = text.partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"


def _amount(usd: float) -> str:
    """An amount: cents, or up to four decimals below a dollar (one NAT gateway is $0.045/h)."""
    return _rate(usd) if 0 < usd < 1 else f"${usd:,.2f}"


def _day(hourly: float) -> str:
    return f"${hourly * 24:,.0f}"


def _ends(days: list[str]) -> list[str]:
    return [days[0]] if len(days) == 1 else [days[0], days[-1]]


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
