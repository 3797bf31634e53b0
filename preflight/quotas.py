"""Which EC2 Service Quota each Trainium node group draws on, and how many vCPUs it needs.

Both Trn quotas count vCPUs (service code ``ec2``):

- L-2C3B7624 "Running On-Demand Trn instances";
- L-6B0D517C "All Trn Spot Instance Requests".

What counts against which, and why:

- ``on_demand`` groups count against the On-Demand quota, with or without an On-Demand Capacity
  Reservation (ODCR): an ODCR is itself created within, and held against, the On-Demand quota for
  the instances it reserves, so the quota must cover the group whether it runs in the ODCR or not.
- ``spot`` groups count against the Spot quota.
- ``capacity_block`` groups count against neither. This is a decision, not an observation:
  AWS sizes Capacity Blocks for ML in instances with limits of their own (up to 64 instances
  per block, 256 across blocks), they launch with market type ``capacity-block`` rather than as
  On-Demand instances, and we found no AWS statement that they draw on the On-Demand vCPU
  quota. Should AWS count them after all, the on-demand row would under-report. Those groups
  are sized against their block by the reservation check instead.

Every group counts at ``max_size``: that is what the autoscaler may ask for. Trn instances already
pending or running in the region outside this stack's cluster use the same quotas, so the check
adds them (``quota_of_instance``); the cluster's own nodes, tagged ``eks:cluster-name``, are
already counted at ``max_size``. Open Spot requests that have no instance yet are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.model import StackConfig

__all__ = ["ON_DEMAND", "SPOT", "GroupDemand", "Quota", "QuotaDemand", "quota_demands", "quota_of_instance"]


@dataclass(frozen=True)
class Quota:
    code: str
    name: str
    purchase: str
    """How the quota is called in the report: on-demand or spot."""


ON_DEMAND = Quota(code="L-2C3B7624", name="Running On-Demand Trn instances", purchase="on-demand")
SPOT = Quota(code="L-6B0D517C", name="All Trn Spot Instance Requests", purchase="spot")

_QUOTA_BY_CAPACITY_TYPE = {"on_demand": ON_DEMAND, "spot": SPOT}


@dataclass(frozen=True)
class GroupDemand:
    index: int
    """The group's position in trainium.node_groups (for the key path in a message)."""
    name: str
    max_size: int
    vcpus_per_instance: int

    @property
    def vcpus(self) -> int:
        return self.max_size * self.vcpus_per_instance


@dataclass(frozen=True)
class QuotaDemand:
    quota: Quota
    groups: tuple[GroupDemand, ...]

    @property
    def vcpus(self) -> int:
        return sum(group.vcpus for group in self.groups)


def quota_demands(config: StackConfig) -> list[QuotaDemand]:
    """One entry per quota that some node group draws on, On-Demand before Spot."""
    demands: list[QuotaDemand] = []
    for quota in (ON_DEMAND, SPOT):
        groups = tuple(
            GroupDemand(
                index=index,
                name=group.name,
                max_size=group.max_size,
                vcpus_per_instance=group.instance.vcpus,
            )
            for index, group in enumerate(config.trainium.node_groups)
            if _QUOTA_BY_CAPACITY_TYPE.get(group.capacity_type) == quota
        )
        if groups:
            demands.append(QuotaDemand(quota=quota, groups=groups))
    return demands


def quota_of_instance(lifecycle: str | None) -> Quota | None:
    """The quota a running instance draws on, from its ``InstanceLifecycle`` (absent: On-Demand).

    Capacity Block instances (``capacity-block``) draw on neither, as decided above.
    """
    if lifecycle == "capacity-block":
        return None
    return SPOT if lifecycle == "spot" else ON_DEMAND
