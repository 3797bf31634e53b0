"""What a synthesized TrainiumStack bills per month, read from its template: the floor and the ceiling.

The floor is what bills with no job running: the EKS control plane, the NAT gateways, the file
system's storage, and every node group at ``MinSize`` (the system nodes, a Trainium group's warm
nodes). The ceiling is every node group at ``MaxSize``, the most the cluster autoscaler may run.
Read from the template rather than the configuration, so that ``make review`` prices the base and
the head of a pull request alike, whichever configuration keys each of them knows.

Prices: cluster_facts/list_prices.py (us-east-1 list prices, approximate). An item without a price
there is named as unknown and the total is "at least". A Capacity Block is paid up front (named, not
counted); an On-Demand Capacity Reservation bills every reserved instance while it is active,
whose count the template does not hold (``make preflight`` reads it): named, counted at the group's
nodes. Not counted: EBS volumes, traffic, logs, public IPv4 addresses, KMS keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cluster_facts.list_prices import (
    EKS_CLUSTER_HOUR,
    HOURS_PER_MONTH,
    INSTANCE_HOUR,
    LUSTRE_PERSISTENT_2_GB_MONTH,
    NAT_GATEWAY_HOUR,
    PRICES_AS_OF,
    PRICES_REGION,
)

__all__ = ["PRICE_BASIS", "MonthlyCost", "monthly_cost", "usd"]


@dataclass(frozen=True)
class MonthlyCost:
    floor: float
    """USD per month of what has a price, idle."""
    ceiling: float
    """USD per month of what has a price, every node group at MaxSize."""
    unknown: tuple[str, ...] = ()
    """Items without a price (the totals are then "at least")."""
    notes: tuple[str, ...] = ()
    """Capacity Blocks and reservations: billed otherwise than per hour here."""
    items: tuple[str, ...] = field(default=())
    """One line per priced item, for the summary."""

    def describe(self) -> str:
        at_least = "at least " if self.unknown else ""
        return (
            f"{at_least}{usd(self.floor)}/month idle, {at_least}{usd(self.ceiling)}/month with every node "
            f"group at max_size ({PRICE_BASIS})"
        )


PRICE_BASIS = f"{PRICES_REGION} On-Demand list prices of {PRICES_AS_OF}, {HOURS_PER_MONTH} h/month"
"""What the figures rest on, said next to every figure."""


def usd(amount: float) -> str:
    return f"${amount:,.0f}"


def _resolve_launch_template(template: Mapping[str, Any], reference: Any) -> Mapping[str, Any]:
    resources = template.get("Resources", {})
    if isinstance(reference, Mapping) and "Ref" in reference:
        found = resources.get(reference["Ref"], {})
        return dict(found.get("Properties", {}).get("LaunchTemplateData", {}))
    return {}


def _node_group(
    template: Mapping[str, Any], logical_id: str, properties: Mapping[str, Any]
) -> dict[str, Any]:
    """Instance type, bounds and how a node group's nodes are paid for."""
    data = _resolve_launch_template(template, properties.get("LaunchTemplate", {}).get("Id"))
    types = properties.get("InstanceTypes") or [data.get("InstanceType")]
    reservation = (
        data.get("CapacityReservationSpecification", {})
        .get("CapacityReservationTarget", {})
        .get("CapacityReservationId")
    )
    scaling = properties.get("ScalingConfig", {})
    return {
        "name": properties.get("NodegroupName", logical_id),
        "instance_type": types[0] if types and isinstance(types[0], str) else None,
        "min": int(scaling.get("MinSize", 0)),
        "max": int(scaling.get("MaxSize", 0)),
        "capacity_block": properties.get("CapacityType") == "CAPACITY_BLOCK",
        "reservation": reservation if isinstance(reservation, str) else None,
    }


def monthly_cost(template: Mapping[str, Any]) -> MonthlyCost:
    """The template's monthly floor and ceiling at the list prices (see the module's docstring)."""
    floor = ceiling = 0.0
    unknown: list[str] = []
    notes: list[str] = []
    items: list[str] = []
    for logical_id, resource in sorted(template.get("Resources", {}).items()):
        kind, properties = resource.get("Type"), resource.get("Properties", {})
        if kind == "AWS::EKS::Cluster":
            month = EKS_CLUSTER_HOUR * HOURS_PER_MONTH
            floor, ceiling = floor + month, ceiling + month
            items.append(f"EKS control plane {usd(month)}")
        elif kind == "AWS::EC2::NatGateway":
            month = NAT_GATEWAY_HOUR * HOURS_PER_MONTH
            floor, ceiling = floor + month, ceiling + month
            items.append(f"NAT gateway {usd(month)} (plus per GB processed)")
        elif kind == "AWS::FSx::FileSystem":
            lustre = properties.get("LustreConfiguration", {})
            price = LUSTRE_PERSISTENT_2_GB_MONTH.get(lustre.get("PerUnitStorageThroughput", 0))
            size = int(properties.get("StorageCapacity", 0))
            if lustre.get("DeploymentType") == "PERSISTENT_2" and price is not None:
                month = size * price
                floor, ceiling = floor + month, ceiling + month
                items.append(f"FSx for Lustre {size} GB {usd(month)}")
            else:
                unknown.append(f"FSx for Lustre {lustre.get('DeploymentType')} {size} GB")
        elif kind == "AWS::EKS::Nodegroup":
            group = _node_group(template, logical_id, properties)
            name, instance_type = group["name"], group["instance_type"]
            if group["capacity_block"]:
                notes.append(f"{name}: Capacity Block, paid up front for its window (not counted)")
                continue
            if group["reservation"]:
                notes.append(
                    f"{name}: On-Demand Capacity Reservation {group['reservation']} bills every reserved "
                    "instance while active, used or not (make preflight reads its size)"
                )
            price = INSTANCE_HOUR.get(instance_type or "")
            if price is None:
                if group["max"]:
                    unknown.append(f"{name} ({instance_type or 'instance type unknown'})")
                continue
            low, high = group["min"] * price * HOURS_PER_MONTH, group["max"] * price * HOURS_PER_MONTH
            floor, ceiling = floor + low, ceiling + high
            items.append(
                f"{name}: {group['min']} to {group['max']} x {instance_type} {usd(low)} to {usd(high)}"
            )
    return MonthlyCost(floor, ceiling, tuple(unknown), tuple(notes), tuple(items))
