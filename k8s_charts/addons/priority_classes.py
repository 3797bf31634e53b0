"""The cluster's PriorityClasses: one for the platform's own pods, one for every team's training pods.

Without them every pod of the cluster ran at priority 0 and a team's pod template could name
``system-node-critical`` (2000001000): the critical classes may be used in any namespace since
Kubernetes 1.17 (kubernetes#76310), and a pod at that priority preempts other teams' gangs, every
team's etcd, CoreDNS and the autoscaler. Now:

- ``trainium-training`` (``TRAINING_VALUE``, ``preemptionPolicy: Never``): every team's runs. The
  admission policy of the team namespaces admits no other class (k8s_charts/teams/tenant_admission.py),
  and a ResourceQuota refuses the critical classes there (k8s_charts/teams/team_quota.py). All teams share
  the class, so no team outranks another; Volcano orders gangs by it (its ``priority`` plugin) and
  shares nodes between queues by their weights. ``Never``: a training pod never evicts anything to
  get a node (kube-scheduler's preemption; Volcano's scheduler runs no preempt or reclaim action
  here, k8s_charts/addons/volcano_scheduler.py).
- ``trainium-platform`` (``PLATFORM_VALUE``): the platform's pods (each team's etcd, the data set
  staging and layout Jobs, TensorBoard, the gang watchdog). Above training, below the system classes
  (CoreDNS, the device plugins and the autoscaler keep ``system-*-critical``).

Neither is ``globalDefault``: a pod that names no class keeps priority 0, and the team policy
refuses it.
"""

from __future__ import annotations

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.kubernetes_names import PLATFORM_PRIORITY_CLASS, TRAINING_PRIORITY_CLASS

__all__ = ["PLATFORM_VALUE", "TRAINING_VALUE", "PriorityClassChart"]

PLATFORM_VALUE = 100_000
"""Above every team's runs, far below system-cluster-critical (2000000000)."""
TRAINING_VALUE = 1_000


class PriorityClassChart(cdk8s.Chart):
    """The cluster-scoped PriorityClasses ``trainium-platform`` and ``trainium-training``."""

    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        k8s.KubePriorityClass(
            self,
            "Platform",
            metadata=k8s.ObjectMeta(name=PLATFORM_PRIORITY_CLASS),
            value=PLATFORM_VALUE,
            global_default=False,
            preemption_policy="PreemptLowerPriority",
            description="The training platform's own pods: etcd, data set staging, layout, TensorBoard, "
            "the gang watchdog",
        )
        k8s.KubePriorityClass(
            self,
            "Training",
            metadata=k8s.ObjectMeta(name=TRAINING_PRIORITY_CLASS),
            value=TRAINING_VALUE,
            global_default=False,
            # A training pod never evicts another pod to get a node.
            preemption_policy="Never",
            description="Every team's training pods (the only class the team namespaces admit)",
        )
