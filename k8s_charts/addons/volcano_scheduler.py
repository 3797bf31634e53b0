"""Volcano's scheduler configuration: gang scheduling that the cluster autoscaler can see.

Volcano's default configuration (chart v1.15.1, ``config/volcano-scheduler.conf``) runs the actions
``enqueue, allocate, backfill``. ``enqueue`` admits a PodGroup (phase Pending -> Inqueue) only when the
cluster's current idle resources, times the overcommit factor, hold the job's minimum resources, and
Volcano's job controller creates a job's pods only once its PodGroup has left Pending
(pkg/controllers/job/job_controller_actions.go, ``syncJob``). On a cluster whose Trainium groups
stand at zero nothing ever holds a training gang, so its pods never exist and no autoscaler ever
sees them (volcano-sh/volcano issues 3910, 3804, 2558).

Without ``enqueue``, ``allocate`` moves a Pending PodGroup to Inqueue itself ("If not config enqueue
action, change Pending pg into Inqueue state", pkg/scheduler/actions/allocate/allocate.go,
``buildAllocateContext``): the controller creates the pods at once. ``gang`` still commits an
allocation only when ``minAvailable`` tasks fit (``allocateResourcesForTasks`` returns the statement
only when the job is ready and discards it otherwise), so no training pod starts before the whole gang
has nodes. Each session then writes PodScheduled=False with reason ``Unschedulable`` on every pod
that found no node (``SchedulerCache.RecordJobStatusEvent`` -> ``taskUnschedulable``,
``JobInfo.TaskSchedulingReason``), which is what the cluster autoscaler scales up for.

``overcommit`` only votes in ``enqueue``; without that action it does nothing and is left out.

Queues share through ``capacity``, not the chart's ``proportion`` (v1.15.1,
pkg/scheduler/plugins/). ``proportion`` ignores a Queue's ``deserved`` (it reads weight, capability
and guarantee: proportion.go lines 108-139) and computes one itself, a weighted share of every node
of the cluster, water-filled up to each queue's request (lines 197-264); a queue at or above it is
``Overused`` (lines 319-331) and ``allocate`` skips it (allocate.go line 294). Here every team's pods
are held to the team's own node groups (k8s_charts/teams/tenant_admission.py), so that share mixes nodes
a team can never use: a team with a backlog on its own full groups inflates its share, and another
team is then "overused" and kept off its own idle nodes (tests/k8s_charts/addons/test_queue_sharing.py shows it with
the example configuration's weights). ``capacity`` reads ``deserved`` from the Queue, registers no
overused test, lets a queue allocate up to its realCapability (its capability, within what the
cluster holds now) and orders queues by allocated / deserved (capacity.go lines 1042-1193,
1629-1652): a team is never kept off its own nodes, borrows a shared group's idle nodes up to its
capability, and a returning team goes first for the next free node of a shared group.

No ``reclaim`` (nor ``preempt``, ``gangreclaim``, ``gangpreempt``): reclaim evicts a borrowing
team's pods, and every eviction restarts that team's whole gang (its Job's ``PodEvicted`` policy is
``RestartJob``), spends one of its retries and loses the work since its last checkpoint on every
node of the gang. It would also act before the cluster autoscaler could add the nodes (it knows
nothing of max_size), and a training pod could not reclaim anyway: its priority class has
``preemptionPolicy: Never``, which reclaim.go (line 144) refuses as a reclaimer. A returning team
therefore waits for the borrower's run to end, or for new nodes while the shared group is below
max_size (docs/capacity.md, "Teams that share node groups"). The other plugins are the chart's
defaults.
"""

from __future__ import annotations

from typing import Any

import yaml

from cluster_facts.cluster_scale import VOLCANO_LOG_LEVEL
from cluster_facts.versions import VOLCANO_IMAGE_NAMES, VOLCANO_IMAGE_REGISTRY, VOLCANO_IMAGE_TAG

__all__ = [
    "DEVICE_TAINT_GATES",
    "QUEUE_PLUGIN",
    "SCHEDULER_ACTIONS",
    "VOLCANO_CONTROLLERS",
    "VOLCANO_IMAGE_PULL_POLICY",
    "VOLCANO_POLICY_EXCEPTIONS",
    "VOLCANO_RESOURCES",
    "VOLCANO_SCHEDULER_CONFIG",
    "scheduler_configuration",
    "volcano_images",
    "volcano_values",
]

SCHEDULER_ACTIONS = ("allocate", "backfill")
"""No ``enqueue``: a gang that does not fit yet still gets its pods, so the autoscaler sees them.
No ``reclaim`` or ``preempt``: nothing evicts a running gang to make room for another."""
QUEUE_PLUGIN = "capacity"
"""How queues share: each queue's ``deserved`` and ``capability`` as written (k8s_charts/teams/volcano_queue.py)."""


def scheduler_configuration() -> dict[str, Any]:
    return {
        "actions": ", ".join(SCHEDULER_ACTIONS),
        "tiers": [
            {
                "plugins": [
                    {"name": "priority"},
                    {"name": "gang", "enablePreemptable": False},
                    {"name": "conformance"},
                ]
            },
            {
                "plugins": [
                    {"name": "drf", "enablePreemptable": False},
                    {"name": "predicates"},
                    {"name": QUEUE_PLUGIN},
                    {"name": "nodeorder"},
                    {"name": "binpack"},
                ]
            },
        ],
    }


VOLCANO_SCHEDULER_CONFIG = yaml.safe_dump(scheduler_configuration(), sort_keys=False)
"""The scheduler's configuration file (``volcano-scheduler.conf``) as the chart's override takes it."""


VOLCANO_IMAGE_PULL_POLICY = "IfNotPresent"
"""Every container of the chart takes ``basic.image_pull_policy`` (the chart's default is Always)."""

VOLCANO_POLICY_EXCEPTIONS = {
    "CKV_K8S_15": (
        "the tag is a pinned Volcano release, pulled once per node from the account's registry (the "
        "stack's copy or the pull-through cache, both with immutable tags) or, with the cache off, from "
        "Docker Hub; Always would ask the registry again at every pod start, and Docker Hub counts each "
        "anonymous pull against a limit per address that every node behind the NAT gateway shares"
    )
}
"""checkov's pull-policy check (``imagePullPolicy`` should be Always), accepted for Volcano's objects.
The chart takes no annotations for its Deployments and Jobs, and the Helm release is rendered by the
kubectl handler at deploy, outside checkov's reach (it reads cdk.out/k8s/): the exception is kept
here, beside the value it excuses, with the reason a reviewer reads."""


DEVICE_TAINT_GATES = "DRADeviceTaints=true"
"""Volcano's scheduler reads device taints only with this gate of its own (v1.15.1 vendors Kubernetes
1.35.3, where ``DRADeviceTaints`` is alpha and off: pkg/scheduler/plugins/predicates/predicates.go
``EnableDRADeviceTaints``), and with it on it watches DeviceTaintRules at ``resource.k8s.io/v1alpha3``
(pkg/scheduler/cache/cache.go, ``resourceslicetracker.Options``): set only where that API is served
(cluster_facts/dra.py ``DEVICE_TAINTS``), or the scheduler waits for an informer that never syncs."""

VOLCANO_RESOURCES: dict[str, dict[str, dict[str, str]]] = {
    # The scheduler and the job controller: what Huawei's CCE and UCS ship as their Volcano add-on's
    # default below 100 nodes (CPU 500m requested, 2000m limit; memory 500Mi requested, 2000Mi
    # limit; more per 100 nodes: support.huaweicloud.com/usermanual-ucs/ucs_10_0193.html); Volcano's
    # own chart sets none. Both hold every pod, node, PodGroup and queue of the cluster in informer
    # caches; the scheduler runs a session every second over all of them. The chart sets GOMEMLIMIT
    # from the memory limit, so Go's collector works harder before the limit is reached.
    "scheduler_resources": {
        "requests": {"cpu": "500m", "memory": "512Mi"},
        "limits": {"cpu": "2", "memory": "2Gi"},
    },
    "controller_resources": {
        "requests": {"cpu": "500m", "memory": "512Mi"},
        "limits": {"cpu": "2", "memory": "2Gi"},
    },
    # The webhook answers each Job, PodGroup, queue and pod admission of the cluster (one at a time,
    # small), and the same values size the chart's admission-init Job (a certificate script). The
    # chart's values.yaml example: limits of 300m and 300Mi.
    "admission_resources": {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"cpu": "1", "memory": "512Mi"},
    },
}
"""Requests and limits of Volcano's containers, through the chart's ``custom.*_resources`` values
(chart v1.15.1: templates/scheduler.yaml, controllers.yaml, admission.yaml, admission-init.yaml)."""


VOLCANO_CONTROLLERS = "*,-sharding-controller,-colocation-config-controller"
"""The controllers Volcano's controller manager runs (the chart's ``custom.controller_enabled_controllers``,
its ``--controllers``): its defaults (v1.15.1 cmd/controller-manager/app/options ``defaultControllers``,
``*,-sharding-controller``) without the colocation controller, which this platform does not use
(ColocationConfiguration: online and offline workloads sharing nodes) and which can crash the whole
controller manager as it starts: it adds its pod event handlers before it makes the queue they feed
(pkg/controllers/colocationconfig/colocation_config_controller.go ``Initialize``, lines 69 to 82), so a
pod event delivered in between dereferences a nil queue. Seen in the test tier: a nil pointer panic in
``enqueuePod`` while the plan's steps were applied concurrently, after which no Job was handled."""


def volcano_values(
    *,
    image_registry: str = VOLCANO_IMAGE_REGISTRY,
    image_tag: str = VOLCANO_IMAGE_TAG,
    device_taints: bool = False,
    log_level: int = VOLCANO_LOG_LEVEL,
) -> dict[str, Any]:
    """The Volcano Helm release's values: the chart's defaults but for the scheduler configuration
    and the images, which come from ``image_registry`` (the account's pull-through cache of Docker
    Hub, or Docker Hub) with the tag written here rather than left to the chart's default, pulled
    ``IfNotPresent`` (``VOLCANO_POLICY_EXCEPTIONS``); with ``device_taints``, the scheduler's gate
    for DRA device taints (``DEVICE_TAINT_GATES``); the scheduler's klog verbosity ``log_level``
    (the chart's ``custom.scheduler_log_level``; cluster_facts/cluster_scale.py ``VOLCANO_LOG_LEVEL``).

    DRA claims need nothing more: the ``predicates`` plugin allocates them (Kubernetes' own
    dynamicresources plugin), and ``capacity`` counts them against a queue's ``deviceclass/<class>``
    capability, on by default (v1.15.1 capacity.go ``New``: ``capacity.DynamicResourceAllocationEnable``
    defaults to the DynamicResourceAllocation gate, GA and on)."""
    custom: dict[str, Any] = {
        "scheduler_config_override": VOLCANO_SCHEDULER_CONFIG,
        "controller_enabled_controllers": VOLCANO_CONTROLLERS,
        "scheduler_log_level": log_level,
        **VOLCANO_RESOURCES,
    }
    if device_taints:
        custom["scheduler_feature_gates"] = DEVICE_TAINT_GATES
    return {
        "basic": {
            "image_registry": image_registry,
            "image_tag_version": image_tag,
            "image_pull_policy": VOLCANO_IMAGE_PULL_POLICY,
        },
        "custom": custom,
    }


def volcano_images(values: dict[str, Any]) -> tuple[str, ...]:
    """The images the chart runs with ``values`` (templates: ``<image_registry>/<name>:<tag>``)."""
    basic = values["basic"]
    return tuple(
        f"{basic['image_registry']}/{name}:{basic['image_tag_version']}" for name in VOLCANO_IMAGE_NAMES
    )
