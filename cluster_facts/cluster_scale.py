"""What sources say a cluster's size asks of its control plane, the autoscaler and Volcano.

Pure data, each figure with its source and the date it was read (2026-11-28). The configuration's
synth warnings (config/scale.py), the stack's control plane tier (constructs_trn/cluster.py) and the
autoscaler's values (k8s_charts/addons/cluster_autoscaler.py) read it; docs/performance.md ("What
the figures mean for a real cluster") says what an operator changes by hand and why.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "AUTOSCALER_FULL_CORE_NODES",
    "AUTOSCALER_TESTED_NODES",
    "CONTROL_PLANE_TIERS",
    "EKS_PLAN_SCALE_NODES",
    "KUBERNETES_MAX_NODES",
    "STANDARD_TIER",
    "TIER_CAPACITY",
    "VOLCANO_LOG_LEVEL",
    "VOLCANO_QUIET_LOG_LEVEL",
    "VOLCANO_QUIET_LOG_NODES",
    "ControlPlaneTier",
    "TierCapacity",
]

ControlPlaneTier = Literal["standard", "tier-xl", "tier-2xl", "tier-4xl", "tier-8xl"]
"""EKS's control plane scaling tiers: the API's ``ControlPlaneScalingConfig.tier`` ("Valid Values:
standard | tier-xl | tier-2xl | tier-4xl | tier-8xl", EKS API Reference, read 2026-11-28; the
CloudFormation property ``AWS::EKS::Cluster ControlPlaneScalingConfig.Tier``, "Update requires: No
interruption"; aws-cdk-lib 2.273.0's ``aws_eks_v2.ControlPlaneScalingTier``). Known wrong: some
copies of the API and CloudFormation references still list only standard to tier-4xl, and the user
guide gives no figures above 4XL ("contact your account team"); tier-8xl is accepted here because the
current API reference and the CDK enum have it."""

CONTROL_PLANE_TIERS: tuple[str, ...] = get_args(ControlPlaneTier)
STANDARD_TIER: ControlPlaneTier = "standard"
"""EKS's default and no extra charge: the control plane scales itself with load, with no published
capacity (the user guide: standard "dynamically allocates" capacity; its database up to 8 GB)."""

TierCapacity = tuple[int, int]
"""(API request concurrency in APF seats, pod scheduling rate of the default scheduler in pods/s)."""

TIER_CAPACITY: dict[str, TierCapacity] = {
    "tier-xl": (1700, 167),
    "tier-2xl": (3400, 283),
    "tier-4xl": (6800, 400),
}
"""Per provisioned tier at EKS 1.30 and later (EKS user guide, "Amazon EKS Provisioned Control Plane",
"Control Plane Scaling Tiers", awsdocs/amazon-eks-user-guide
latest/ug/clusters/eks-provisioned-control-plane-introduction.adoc, read 2026-11-28; 1.28 and 1.29:
the same seats at 100 pods/s; every tier a 16 GB database). DescribeClusterVersions returns the same
per tier (``ControlPlaneScalingTierInfo.apiRequestConcurrency``, ``podSchedulingRatePerSecond``).
The seats are APF's concurrency across all priority levels, not requests per second: a LIST costs
more seats than a GET. The scheduling rate is kube-scheduler's, not Volcano's: a training gang is
bound by Volcano, whose binds are API requests counted in the seats. No figure for tier-8xl."""

EKS_PLAN_SCALE_NODES = 300
"""EKS Best Practices Guide, "EKS Scalability best practices" (read 2026-11-28): "you will need to
plan how you are going to scale a cluster beyond 300 nodes or 5000 pods" ("not absolute numbers").
Past it, a standard control plane scales reactively and not instantly ("Limit workload and node
bursting"); the synth warns that a provisioned tier is the plan EKS offers."""

KUBERNETES_MAX_NODES = 5000
"""kubernetes.io, "Considerations for large clusters" (read 2026-11-28): Kubernetes is designed for
no more than 5,000 nodes, 150,000 pods, 300,000 containers and 110 pods a node."""

AUTOSCALER_TESTED_NODES = 1000
"""Cluster Autoscaler FAQ (kubernetes/autoscaler cluster-autoscaler/FAQ.md at 55c37cd, 2026-08-22):
"CA should handle up to 1000 nodes running 30 pods each"; "We didn't run any performance tests on
clusters bigger than 1000 nodes"."""

AUTOSCALER_FULL_CORE_NODES = 100
"""The same FAQ ("What are the Service Level Objectives"): big clusters are 100 to 1000 nodes, and
"It is also important to request full 1 core (or make it available) for CA pod in a bigger
clusters". From this many Trainium nodes the autoscaler's CPU request is a whole core."""


VOLCANO_LOG_LEVEL = 3
"""Volcano's scheduler's klog verbosity as its chart sets it (chart v1.15.1 values.yaml
``custom.scheduler_log_level: 3``): at 3 it logs each session's opening and closing
(pkg/scheduler/framework/session.go, ``Open Session``/``Close Session``, V(3)) and one line per task
and node that fails a predicate (actions/allocate/allocate.go and util/predicate_helper.go
``Predicates failed``, V(3); volcano-sh/volcano at ed72c7c, read 2026-11-29)."""

VOLCANO_QUIET_LOG_LEVEL = 2
"""From ``VOLCANO_QUIET_LOG_NODES`` on: warnings, errors and the V(2) lines only, without the
per-task, per-node predicate lines and the per-session lines of V(3)."""

VOLCANO_QUIET_LOG_NODES = 256
"""From this many Trainium nodes (the groups' ``max_size`` summed) the scheduler logs at
``VOLCANO_QUIET_LOG_LEVEL``. Measured here (``make bench-scale``, 2026-11-29, docs/performance.md):
at 2,048 simulated nodes the chart's level wrote 151 MB in 12 minutes, 785,568 of its lines
"Predicates failed", one per task and node while a gang waited; the kubelet's log rotation (10 MiB,
5 files) keeps minutes of that, and a log shipper pays for all of it. The lines grow with tasks times
nodes, so a 64-node cluster writes about a thousandth as much; 256 is where the series' second size
starts and a gang of a few hundred pods meets a few hundred nodes. Known wrong: the threshold is a
judgement from one machine's logs, not a published figure."""
