"""What a team's namespace may hold: a ResourceQuota, a quota that admits no critical pod, a LimitRange.

- ``team-quota``: the team's pods and the requests they may hold in total (pods, cpu, memory, Neuron
  chips, EFA interfaces), from the configuration's ``teams[].quota`` (by default what the team's node
  groups hold at ``max_size``, plus the team's etcd). Only ``requests.*``: the runs set no cpu or
  memory limits (a cap would throttle or OOM-kill a training pod that owns its node), and a quota on
  limits would refuse every pod without them. Extended resources take only the ``requests.`` prefix.
- ``no-critical-priority``: a quota scoped to the PriorityClasses ``system-node-critical`` and
  ``system-cluster-critical`` with ``pods: 0``. Since Kubernetes 1.17 the critical classes may be
  used in any namespace; a quota whose scope selects them is how a namespace refuses them
  (kubernetes#76310; the admission policy refuses every class but the team's as well,
  k8s_charts/tenant_admission.py).
- ``team-defaults``: a LimitRange that gives a container without requests small ones, so that the
  quota on requests does not refuse a pod for leaving them out (the API server refuses a pod
  without a request for a resource a quota tracks).

A quota is judged at admission: lowering it never evicts running pods; it refuses new ones until
the namespace is under it again.
"""

from __future__ import annotations

from dataclasses import dataclass

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.kubernetes_names import EFA_RESOURCE, NEURON_RESOURCE

__all__ = [
    "CRITICAL_PRIORITY_CLASSES",
    "DEFAULT_CONTAINER_REQUESTS",
    "NO_CRITICAL_QUOTA",
    "PLATFORM_POD_ALLOWANCE",
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
PLATFORM_POD_ALLOWANCE = {"cpu": 1, "memory_gib": 1}
"""Room the default quota leaves beside the team's nodes for the platform's pods in the namespace
(its etcd requests 100m and 256Mi)."""


@dataclass(frozen=True, kw_only=True)
class TeamQuota:
    """The most a team's namespace may hold at once (requests)."""

    pods: int
    cpu: int
    """Cores."""
    memory_gib: int
    neuron_devices: int
    efa_interfaces: int

    def __post_init__(self) -> None:
        for name in ("pods", "cpu", "memory_gib", "neuron_devices"):
            if getattr(self, name) < 1:
                raise ValueError(f"quota {name} must be at least 1, got {getattr(self, name)}")
        if self.efa_interfaces < 0:
            raise ValueError(f"quota efa_interfaces must be at least 0, got {self.efa_interfaces}")

    @property
    def hard(self) -> dict[str, str]:
        return {
            "pods": str(self.pods),
            "requests.cpu": str(self.cpu),
            "requests.memory": f"{self.memory_gib}Gi",
            f"requests.{NEURON_RESOURCE}": str(self.neuron_devices),
            f"requests.{EFA_RESOURCE}": str(self.efa_interfaces),
        }


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
