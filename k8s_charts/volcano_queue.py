"""The Volcano queue that TorchX submits training jobs to.

TorchX's Volcano scheduler puts every job in a named queue (the tutorial's ``test``: weight 1,
not reclaimable). A Queue is cluster-scoped. Its ``capability`` caps what the queue's jobs may hold
in total. Volcano's ``proportion`` plugin checks every task against the queue before it looks for a
node (``ssn.Allocatable`` in pkg/scheduler/actions/allocate/allocate.go; capability caps the queue's
``realCapability``, and with it what the queue deserves): a task over the cap finds no node and stays
pending however many nodes the autoscaler adds, which would idle them until scale-down. So the
capability must never be below what the Trainium node groups can hold: ``trainium_capability``
sizes it from the instance catalog at every group's ``max_size``, the most the autoscaler can bring.
Only a job that no configuration of nodes could hold is refused. Volcano's admission webhook
rejects Queues until ``volcano-admission`` is ready: the stack must order this chart after Volcano.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import cdk8s
from constructs import Construct

from cluster_facts.instance_catalog import TrainiumInstanceType
from cluster_facts.kubernetes_names import EFA_RESOURCE, NEURON_RESOURCE
from k8s_charts.imports.volcano_scheduling import Queue, QueueSpec, QueueSpecCapability

__all__ = ["VolcanoQueueChart", "queue_capability", "trainium_capability"]


def queue_capability(instance: TrainiumInstanceType, nodes: int) -> dict[str, str]:
    """Total cpu, memory, Neuron chips and EFA interfaces of ``nodes`` instances of one catalog type.

    Whole-instance figures, not allocatable ones: the capability is an upper bound, and the
    job's pods request less than their node's allocatable anyway.
    """
    if nodes < 1:
        raise ValueError(f"nodes must be at least 1, got {nodes}")
    return {
        "cpu": str(instance.vcpus * nodes),
        "memory": f"{instance.memory_gib * nodes}Gi",
        NEURON_RESOURCE: str(instance.chips * nodes),
        EFA_RESOURCE: str(instance.efa_interfaces * nodes),
    }


def trainium_capability(groups: Sequence[tuple[TrainiumInstanceType, int]]) -> dict[str, str]:
    """The total of ``queue_capability`` over (instance type, max_size) pairs: every Trainium node the
    autoscaler may run at once."""
    if not groups:
        raise ValueError("at least one Trainium node group is needed")
    totals: dict[str, int] = {}
    for instance, nodes in groups:
        for resource, amount in queue_capability(instance, nodes).items():
            totals[resource] = totals.get(resource, 0) + int(amount.removesuffix("Gi"))
    return {
        resource: f"{amount}Gi" if resource == "memory" else str(amount)
        for resource, amount in totals.items()
    }


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
    ) -> None:
        super().__init__(scope, id)
        if not 1 <= weight <= 65535:  # the bounds of the Queue CRD
            raise ValueError(f"queue weight must be within 1..65535, got {weight}")
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
            ),
        )
