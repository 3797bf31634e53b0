"""A team's Volcano queue: what its jobs may hold (capability) and what it deserves when teams share.

TorchX's Volcano scheduler puts every job in a named queue (the tutorial's ``test``). A Queue is
cluster-scoped. The scheduler runs Volcano's ``capacity`` plugin (k8s_charts/addons/volcano_scheduler.py
says why not ``proportion``); in v1.15.1 (pkg/scheduler/plugins/capacity/capacity.go):

- ``capability`` caps what the queue's jobs hold in total: a task is allocatable only while the
  queue's allocated resources plus the task stay within its ``realCapability``, the smaller of
  ``capability`` and the cluster's current total less every other queue's guarantee
  (``buildQueueAttrs``, lines 1081-1088; ``queueAllocatableWithReserved``, 1629-1652). A task over
  the cap finds no node however many nodes the autoscaler adds, which would idle them until
  scale-down. So the capability is never below what the team's node groups hold at ``max_size``
  (``trainium_capability``, from the instance catalog): only a job no configuration of those nodes
  could hold is refused. The admission policy keeps a team's pods on its own groups anyway.
- ``deserved`` is the team's share (``deserved_share``): of each of its node groups at ``max_size``,
  its weight over the weights of every team on that group. A group only one team uses is wholly its
  own. ``deserved`` is no limit: the queue may borrow up to its capability whatever the others
  deserve. It orders queues (the one furthest below its deserved share goes first for the next free
  node: ``share`` = allocated / deserved, lines 1183-1193, 1541-1561, 1800-1829) and would bound a
  reclaim, which this cluster does not run (no ``reclaim`` action; queues not ``reclaimable``).
- ``guarantee``: none. Volcano subtracts every queue's guarantee from every other queue's
  realCapability whatever nodes exist (line 1081): it cannot name node groups, so in an autoscaled
  cluster it would hold nodes that are running for one team away from the others (and a guarantee
  larger than what runs would hold them all). A group no other team lists is the team's guarantee,
  kept by the admission policy, which no other team's pod gets past.

Volcano's queue webhook refuses a Queue whose deserved exceeds its capability or whose guarantee
exceeds its deserved (pkg/webhooks/admission/queues/validate/validate_queue.go,
``validateResourceQuantityOfQueue``, lines 227-293); the chart refuses the same at synth. The
webhook rejects Queues until ``volcano-admission`` is ready: the stack orders this chart after Volcano.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

import cdk8s
from constructs import Construct

from cluster_facts.dra import node_devices, queue_device_resource
from cluster_facts.instance_catalog import TrainiumInstanceType
from cluster_facts.kubernetes_names import EFA_RESOURCE, NEURON_RESOURCE
from k8s_charts.imports.volcano_scheduling import Queue, QueueSpec, QueueSpecCapability, QueueSpecDeserved

__all__ = ["VolcanoQueueChart", "deserved_share", "quantity_value", "queue_capability", "trainium_capability"]


def queue_capability(instance: TrainiumInstanceType, nodes: int, *, dra: bool = False) -> dict[str, str]:
    """Total cpu, memory, Neuron chips and EFA interfaces of ``nodes`` instances of one catalog type.

    Whole-instance figures, not allocatable ones: the capability is an upper bound, and the
    job's pods request less than their node's allocatable anyway. A ``dra`` group's devices are
    counted by DeviceClass (``deviceclass/<class>``), which Volcano v1.15.1's capacity plugin counts
    from each task's claims (pkg/scheduler/cache/cache.go ``buildTaskDRAInfo``: ExactCount requests;
    capacity.go ``checkDRAAllocatable``), with ``capacity.DynamicResourceAllocationEnable``
    (k8s_charts/addons/volcano_scheduler.py); its pods request no extended resource.
    """
    if nodes < 1:
        raise ValueError(f"nodes must be at least 1, got {nodes}")
    devices = (
        {
            queue_device_resource(name): str(count * nodes)
            for name, count in node_devices(instance).counts.items()
        }
        if dra
        else {
            NEURON_RESOURCE: str(instance.chips * nodes),
            EFA_RESOURCE: str(instance.efa_interfaces * nodes),
        }
    )
    return {"cpu": str(instance.vcpus * nodes), "memory": f"{instance.memory_gib * nodes}Gi", **devices}


def trainium_capability(
    groups: Sequence[tuple[TrainiumInstanceType, int] | tuple[TrainiumInstanceType, int, bool]],
) -> dict[str, str]:
    """The total of ``queue_capability`` over (instance type, max_size[, dra]) tuples: every Trainium
    node the autoscaler may run at once."""
    if not groups:
        raise ValueError("at least one Trainium node group is needed")
    totals: dict[str, int] = {}
    for instance, nodes, *dra in groups:
        for resource, amount in queue_capability(instance, nodes, dra=bool(dra and dra[0])).items():
            totals[resource] = totals.get(resource, 0) + int(amount.removesuffix("Gi"))
    return {
        resource: f"{amount}Gi" if resource == "memory" else str(amount)
        for resource, amount in totals.items()
    }


def deserved_share(
    groups: Sequence[
        tuple[TrainiumInstanceType, int, Fraction] | tuple[TrainiumInstanceType, int, Fraction, bool]
    ],
) -> dict[str, str]:
    """A team's deserved resources: over (instance type, max_size, the team's share of the group[,
    dra]) tuples, the share of what each group holds at max_size. Rounded down (to a millicore, a
    MiB, a whole chip or interface), so it never exceeds the capability of the same groups. Chips and
    EFA interfaces are extended resources, which Kubernetes counts in whole units only: Volcano
    1.15.1's queue webhook refuses ``1638400m`` chips ("must be an integer"), seen in `make
    bench-scale` with five teams on a group of 512 trn1 nodes (8,192 chips / 5)."""
    if not groups:
        raise ValueError("at least one Trainium node group is needed")
    milli: dict[str, Fraction] = {}
    for instance, nodes, share, *dra in groups:
        if not 0 < share <= 1:
            raise ValueError(f"a team's share of a node group must be within (0, 1], got {share}")
        whole = queue_capability(instance, nodes, dra=bool(dra and dra[0]))
        for resource, amount in whole.items():
            # cpu, chips and interfaces in thousandths; memory in MiB
            unit = 1024 if resource == "memory" else 1000
            milli[resource] = milli.get(resource, Fraction(0)) + share * int(amount.removesuffix("Gi")) * unit
    rendered: dict[str, str] = {}
    for resource, total in milli.items():
        value = int(total)  # rounded down
        if resource == "memory":
            rendered[resource] = f"{value // 1024}Gi" if value % 1024 == 0 else f"{value}Mi"
        elif resource == "cpu":
            rendered[resource] = str(value // 1000) if value % 1000 == 0 else f"{value}m"
        else:
            rendered[resource] = str(value // 1000)
    return rendered


_SUFFIXES = {
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
}


def quantity_value(quantity: str) -> Fraction:
    """The exact value of a quantity of the forms this module writes (``12``, ``500m``, ``64Mi``, ``8Gi``)."""
    for suffix in ("Ki", "Mi", "Gi", "m"):
        if quantity.endswith(suffix):
            return Fraction(int(quantity.removesuffix(suffix))) * _SUFFIXES[suffix]
    return Fraction(int(quantity))


class VolcanoQueueChart(cdk8s.Chart):
    """One cluster-scoped ``scheduling.volcano.sh/v1beta1`` Queue."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        name: str,
        weight: int = 1,
        reclaimable: bool = False,
        capability: Mapping[str, str] | None = None,
        deserved: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(scope, id)
        if not 1 <= weight <= 65535:  # the bounds of the Queue CRD
            raise ValueError(f"queue weight must be within 1..65535, got {weight}")
        # What Volcano's queue webhook refuses (validate_queue.go, lines 271-290): a deserved amount
        # above the capability of the same resource.
        for resource, amount in (deserved or {}).items():
            cap = (capability or {}).get(resource)
            if cap is not None and quantity_value(amount) > quantity_value(cap):
                raise ValueError(
                    f"queue {name}: deserved {resource} {amount} exceeds its capability {cap}; "
                    "Volcano's queue webhook refuses it"
                )
        # The typed Queue (k8s_charts/imports, generated from the CRD) checks field names and types
        # at synth. cdk8s renders its spec with sorted keys: the same object as a dict would give.
        Queue(
            self,
            "Queue",
            metadata=cdk8s.ApiObjectMetadata(name=name),
            spec=QueueSpec(
                weight=weight,
                reclaimable=reclaimable,
                capability=(
                    {
                        resource: QueueSpecCapability.from_string(amount)
                        for resource, amount in capability.items()
                    }
                    if capability
                    else None
                ),
                deserved=(
                    {resource: QueueSpecDeserved.from_string(amount) for resource, amount in deserved.items()}
                    if deserved
                    else None
                ),
            ),
        )
