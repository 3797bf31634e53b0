"""What a team's namespace may hold: ResourceQuotas of pods and objects, quotas that admit no critical
pod and no cross-namespace affinity, a LimitRange.

- ``team-quota``: how many pods the team's namespace holds, and the requests they may hold in total
  (cpu, memory, Neuron chips) only where the configuration sets them (``teams[].quota``). A quota
  refuses a pod when it is created, and Volcano's job controller treats a refused pod as a failed
  sync: it retries with a growing delay and ends the Job after 15 retries (``handleJobError``,
  pkg/controllers/job/job_controller.go; ``--max-requeue-num``, default 15; measured here: the Job
  ``Terminated`` 166 s after it was submitted, "Job failed on action SyncJob for retry limit
  reached"). An amount the team's running gangs fill therefore ends every gang queued behind them.
  So by default the quota sets none: a team's share is held by its Volcano queue's capability
  (what its node groups hold at ``max_size``, k8s_charts/teams/volcano_queue.py), which keeps a queued
  gang's pods Pending until the share frees (tests/cluster/test_queues.py). The pod count refuses in
  the same way: ``pods`` (default 64) bounds the team's running and queued pods together. Only
  ``requests.*``: the runs set no cpu or memory limits (a cap would throttle or OOM-kill a training
  pod that owns its node), and a quota on limits would refuse every pod without them. Extended
  resources take only the ``requests.`` prefix.
- ``no-critical-priority``: a quota scoped to the PriorityClasses ``system-node-critical`` and
  ``system-cluster-critical`` with ``pods: 0``. Since Kubernetes 1.17 the critical classes may be
  used in any namespace; a quota whose scope selects them is how a namespace refuses them
  (kubernetes#76310; the admission policy refuses every class but the team's as well,
  k8s_charts/teams/tenant_admission.py).
- ``team-objects``: how many API objects of each kind the namespace holds, so a team's load on the
  shared API server and etcd stays the team's (issue 34: thirty Volcano Jobs of 1 MiB each grew etcd
  by 36 MiB in 17 s, and nothing counted them): Volcano Jobs (``teams[].quota.jobs``), and for each
  Job one PodGroup, Service, ConfigMap and NetworkPolicy (what Volcano's controller and its svc
  plugin make per Job), on top of the platform's own objects there (``PlatformObjects``: read from
  the plan), the ConfigMap ``kube-root-ca.crt`` the controller manager puts in every namespace and
  the pipeline canary's program ConfigMap. Secrets and PersistentVolumeClaims: the platform's
  only (a team may create neither; the team admission policy refuses a Job whose Volcano plugin or
  volume would make one).
- ``no-cross-namespace-affinity``: a quota scoped to ``CrossNamespacePodAffinity`` with ``pods: 0``
  refuses every pod whose affinity or anti-affinity term names other namespaces or a namespace
  selector (pkg/quota/v1/evaluator/core/pods.go ``usesCrossNamespacePodAffinity``), whoever creates
  it: behind the team admission policy, which refuses such terms (and any topology but a node's) at
  the Job and the pod, and also judges pods the policy leaves to the platform.
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
from k8s_charts.shared.resources import CONTAINER_DEFAULTS, container_defaults

__all__ = [
    "CRITICAL_PRIORITY_CLASSES",
    "DEFAULT_CONTAINER_REQUESTS",
    "NO_CRITICAL_QUOTA",
    "NO_CROSS_NAMESPACE_QUOTA",
    "OBJECTS_QUOTA",
    "QUOTA_NAME",
    "TeamQuota",
    "TeamQuotaChart",
    "counted_kind",
]

QUOTA_NAME = "team-quota"
NO_CRITICAL_QUOTA = "no-critical-priority"
OBJECTS_QUOTA = "team-objects"
NO_CROSS_NAMESPACE_QUOTA = "no-cross-namespace-affinity"
# The ConfigMaps no manifest of the plan holds that a team namespace still gets: kube-root-ca.crt
# (the controller manager's root-ca-cert-publisher, in every namespace) and the pipeline canary's
# program (its deployment check creates it in the first team's namespace, cluster_plan/canary_run.py).
_OTHER_CONFIG_MAPS = 2
# What Volcano makes for every Job in its namespace (v1.15.1: its PodGroup, pkg/controllers/job/
# job_controller_actions.go createOrUpdatePodGroup; the svc plugin's Service, hosts ConfigMap
# <job>-svc and NetworkPolicy, pkg/controllers/job/plugins/svc/svc.go): one each, counted per Job.
_PER_JOB = (
    "count/podgroups.scheduling.volcano.sh",
    "services",
    "configmaps",
    "count/networkpolicies.networking.k8s.io",
)
# The object-count resources of ``team-objects`` and the manifest kinds (apiVersion group, kind) they count.
_COUNTED = {
    "count/jobs.batch.volcano.sh": ("batch.volcano.sh", "Job"),
    "count/podgroups.scheduling.volcano.sh": ("scheduling.volcano.sh", "PodGroup"),
    "services": ("", "Service"),
    "configmaps": ("", "ConfigMap"),
    "secrets": ("", "Secret"),
    "persistentvolumeclaims": ("", "PersistentVolumeClaim"),
    "count/networkpolicies.networking.k8s.io": ("networking.k8s.io", "NetworkPolicy"),
}


def counted_kind(api_version: str, kind: str) -> str | None:
    """The ``team-objects`` resource that counts an object of ``api_version``/``kind``, if any."""
    group = api_version.rpartition("/")[0]
    return next((resource for resource, counted in _COUNTED.items() if counted == (group, kind)), None)


LIMIT_RANGE_NAME = "team-defaults"
CRITICAL_PRIORITY_CLASSES = ("system-cluster-critical", "system-node-critical")
DEFAULT_CONTAINER_REQUESTS = CONTAINER_DEFAULTS["defaultRequest"]
"""What a container that asks for nothing is given (TorchX's and the stack's pods always ask): the
platform namespaces' requests, without their limits."""


@dataclass(frozen=True, kw_only=True)
class TeamQuota:
    """The most a team's namespace may hold at once (requests); ``None``: not limited by the quota."""

    pods: int
    jobs: int = 64
    """Volcano Jobs at once, running, queued and ended but not deleted."""
    platform_objects: Mapping[str, int] = field(default_factory=dict)
    """What the platform keeps in the namespace, by ``team-objects`` resource (``counted_kind``)."""
    cpu: int | None = None
    """Cores."""
    memory_gib: int | None = None
    neuron_devices: int | None = None
    device_classes: Mapping[str, int | None] = field(default_factory=dict)
    """DeviceClass -> the most devices of it the namespace's claims may request (None: no limit);
    empty on a cluster without DRA node groups."""

    def __post_init__(self) -> None:
        for name in ("pods", "jobs", "cpu", "memory_gib", "neuron_devices"):
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

    @property
    def objects(self) -> dict[str, str]:
        """``team-objects``' hard counts: room for the platform's objects twice over, plus the Jobs and
        what each brings."""
        unknown = set(self.platform_objects) - set(_COUNTED)
        if unknown:
            raise ValueError(f"no object-count resource {sorted(unknown)} in team-objects")
        # Twice what the platform keeps: a deploy that renames its objects (a file system replaced
        # gives its claims new names) creates the new ones before the old are pruned, and a quota of
        # exactly the kept count refuses them ("exceeded quota: team-objects", seen in the tier when
        # a second configuration's claims met the first's).
        counts = {resource: 2 * self.platform_objects.get(resource, 0) for resource in _COUNTED}
        counts["count/jobs.batch.volcano.sh"] += self.jobs
        for resource in _PER_JOB:
            counts[resource] += self.jobs
        counts["configmaps"] += _OTHER_CONFIG_MAPS
        return {resource: str(count) for resource, count in counts.items()}


class TeamQuotaChart(cdk8s.Chart):
    """ResourceQuotas ``team-quota``, ``no-critical-priority``, ``team-objects`` and
    ``no-cross-namespace-affinity`` and LimitRange ``team-defaults`` in ``namespace``."""

    def __init__(self, scope: Construct, id: str, *, namespace: str, quota: TeamQuota) -> None:
        super().__init__(scope, id)
        q = k8s.Quantity.from_string
        k8s.KubeResourceQuota(
            self,
            "Quota",
            metadata=k8s.ObjectMeta(name=QUOTA_NAME, namespace=namespace),
            spec=k8s.ResourceQuotaSpec(hard={key: q(value) for key, value in quota.hard.items()}),
        )
        _no_pods_where(
            self,
            "NoCritical",
            name=NO_CRITICAL_QUOTA,
            namespace=namespace,
            selecting=k8s.ScopedResourceSelectorRequirement(
                scope_name="PriorityClass", operator="In", values=list(CRITICAL_PRIORITY_CLASSES)
            ),
        )
        k8s.KubeResourceQuota(
            self,
            "Objects",
            metadata=k8s.ObjectMeta(name=OBJECTS_QUOTA, namespace=namespace),
            spec=k8s.ResourceQuotaSpec(hard={key: q(value) for key, value in quota.objects.items()}),
        )
        _no_pods_where(
            self,
            "NoCrossNamespaceAffinity",
            name=NO_CROSS_NAMESPACE_QUOTA,
            namespace=namespace,
            selecting=k8s.ScopedResourceSelectorRequirement(
                scope_name="CrossNamespacePodAffinity", operator="Exists"
            ),
        )
        container_defaults(
            self, "Defaults", name=LIMIT_RANGE_NAME, namespace=namespace, requests=DEFAULT_CONTAINER_REQUESTS
        )


def _no_pods_where(
    scope: Construct, id: str, *, name: str, namespace: str, selecting: k8s.ScopedResourceSelectorRequirement
) -> None:
    """A ResourceQuota of zero pods in the quota scope ``selecting``: such a pod is refused at creation."""
    k8s.KubeResourceQuota(
        scope,
        id,
        metadata=k8s.ObjectMeta(name=name, namespace=namespace),
        spec=k8s.ResourceQuotaSpec(
            hard={"pods": k8s.Quantity.from_string("0")},
            scope_selector=k8s.ScopeSelector(match_expressions=[selecting]),
        ),
    )
