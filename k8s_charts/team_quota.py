"""What a team's namespace may hold: a ResourceQuota, a quota that admits no critical pod, a LimitRange.

- ``team-quota``: how many pods the team's namespace holds, and the requests they may hold in total
  (cpu, memory, Neuron chips) only where the configuration sets them (``teams[].quota``). A quota
  refuses a pod when it is created, and Volcano's job controller treats a refused pod as a failed
  sync: it retries with a growing delay and ends the Job after 15 retries (``handleJobError``,
  pkg/controllers/job/job_controller.go; ``--max-requeue-num``, default 15; measured here: the Job
  ``Terminated`` 166 s after it was submitted, "Job failed on action SyncJob for retry limit
  reached"). An amount the team's running gangs fill therefore ends every gang queued behind them.
  So by default the quota sets none: a team's share is held by its Volcano queue's capability
  (what its node groups hold at ``max_size``, k8s_charts/volcano_queue.py), which keeps a queued
  gang's pods Pending until the share frees (tests/cluster/test_queues.py). The pod count refuses in
  the same way: ``pods`` (default 64) bounds the team's running and queued pods together. Only
  ``requests.*``: the runs set no cpu or memory limits (a cap would throttle or OOM-kill a training
  pod that owns its node), and a quota on limits would refuse every pod without them. Extended
  resources take only the ``requests.`` prefix.
- ``no-critical-priority``: a quota scoped to the PriorityClasses ``system-node-critical`` and
  ``system-cluster-critical`` with ``pods: 0``. Since Kubernetes 1.17 the critical classes may be
  used in any namespace; a quota whose scope selects them is how a namespace refuses them
  (kubernetes#76310; the admission policy refuses every class but the team's as well,
  k8s_charts/tenant_admission.py).
- ``team-defaults``: a LimitRange that gives a container without requests small ones, so that a
  configured quota on requests does not refuse a pod for leaving them out (the API server refuses
  a pod without a request for a resource a quota tracks).

A quota is judged at admission: lowering it never evicts running pods; it refuses new ones until
the namespace is under it again.

On a cluster with ``devices: dra`` node groups the quota also counts devices by DeviceClass
(``<class>.deviceclass.resource.k8s.io/devices``, Kubernetes 1.34+), on the ResourceClaims the
resourceclaim controller makes from a run's template, not on its pods: a claim the quota refuses is
retried by that controller and its pod waits Pending (Volcano does not end the Job, unlike a refused
pod; tests/cluster/test_dra.py). A team with no ``dra`` group gets 0 of every class: its namespace
can claim no DRA device at all; a team with one gets ``neuron_devices`` of the Neuron class when
that is set, and no limit otherwise (its queue's capability holds its share).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.dra import NEURON_DEVICE_CLASS, device_quota_resource
from cluster_facts.kubernetes_names import NEURON_RESOURCE

__all__ = [
    "CRITICAL_PRIORITY_CLASSES",
    "DEFAULT_CONTAINER_REQUESTS",
    "NO_CRITICAL_QUOTA",
    "QUOTA_NAME",
    "TeamQuota",
    "TeamQuotaChart",
]

QUOTA_NAME = "team-quota"
NO_CRITICAL_QUOTA = "no-critical-priority"
LIMIT_RANGE_NAME = "team-defaults"
CRITICAL_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")
DEFAULT_CONTAINER_REQUESTS = {"cpu": "100m", "memory": "128Mi"}
"""What a container that asks for nothing is given (TorchX's and the stack's pods always ask)."""


@dataclass(frozen=True, kw_only=True)
class TeamQuota:
    """The most a team's namespace may hold at once (requests); ``None``: not limited by the quota."""

    pods: int
    cpu: int | None = None
    """Cores."""
    memory_gib: int | None = None
    neuron_devices: int | None = None
    device_classes: Mapping[str, int | None] = field(default_factory=dict)
    """DeviceClass -> the most devices of it the namespace's claims may request (None: no limit);
    empty on a cluster without DRA node groups."""

    def __post_init__(self) -> None:
        for name in ("pods", "cpu", "memory_gib", "neuron_devices"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"quota {name} must be at least 1, got {value}")

    @property
    def hard(self) -> dict[str, str]:
        amounts = {
            "requests.cpu": None if self.cpu is None else str(self.cpu),
            "requests.memory": None if self.memory_gib is None else f"{self.memory_gib}Gi",
            f"requests.{NEURON_RESOURCE}": None if self.neuron_devices is None else str(self.neuron_devices),
        }
        devices = {
            device_quota_resource(name): str(limit)
            for name, limit in sorted(self.device_classes.items())
            if limit is not None
        }
        return {
            "pods": str(self.pods),
            **{key: value for key, value in amounts.items() if value is not None},
            **devices,
        }

    @classmethod
    def device_limits(
        cls, classes: tuple[str, ...], *, uses_dra: bool, neuron_devices: int | None
    ) -> dict[str, int | None]:
        """The per-class limits of a team: none of any class without a DRA group; with one, the
        configured Neuron chips on the Neuron class and no other limit."""
        if not uses_dra:
            return dict.fromkeys(classes, 0)
        return {name: (neuron_devices if name == NEURON_DEVICE_CLASS else None) for name in classes}


class TeamQuotaChart(cdk8s.Chart):
    """ResourceQuotas ``team-quota`` and ``no-critical-priority`` and LimitRange ``team-defaults`` in ``namespace``."""

    def __init__(self, scope: Construct, id: str, *, namespace: str, quota: TeamQuota) -> None:
        super().__init__(scope, id)
        q = k8s.Quantity.from_string
        k8s.KubeResourceQuota(
            self,
            "Quota",
            metadata=k8s.ObjectMeta(name=QUOTA_NAME, namespace=namespace),
            spec=k8s.ResourceQuotaSpec(hard={key: q(value) for key, value in quota.hard.items()}),
        )
        k8s.KubeResourceQuota(
            self,
            "NoCritical",
            metadata=k8s.ObjectMeta(name=NO_CRITICAL_QUOTA, namespace=namespace),
            spec=k8s.ResourceQuotaSpec(
                hard={"pods": q("0")},
                scope_selector=k8s.ScopeSelector(
                    match_expressions=[
                        k8s.ScopedResourceSelectorRequirement(
                            scope_name="PriorityClass",
                            operator="In",
                            values=list(CRITICAL_PRIORITY_CLASSES),
                        )
                    ]
                ),
            ),
        )
        k8s.KubeLimitRange(
            self,
            "Defaults",
            metadata=k8s.ObjectMeta(name=LIMIT_RANGE_NAME, namespace=namespace),
            spec=k8s.LimitRangeSpec(
                limits=[
                    k8s.LimitRangeItem(
                        type="Container",
                        default_request={key: q(value) for key, value in DEFAULT_CONTAINER_REQUESTS.items()},
                    )
                ]
            ),
        )
