"""The node check: what a new Trainium node carries until it has proven itself, and what it says after.

Every Trainium node group registers its nodes with ``NODE_CHECK_TAINT`` (constructs_trn/trainium_node_group.py).
No training pod tolerates it, so Volcano and the scheduler keep gangs off a node until the check
(k8s_charts/node_check.py, k8s_charts/scripts/node_check.py) has passed on it and lifted the taint.

The key's prefix makes it a startup taint for the Cluster Autoscaler, read in its source at the
version cluster_facts/versions.py pins for Kubernetes 1.34 (tag cluster-autoscaler-1.34.5):

- ``utils/taints/taints.go``: ``StartupTaintPrefix = "startup-taint.cluster-autoscaler.kubernetes.io/"``;
  ``SanitizeTaints`` drops every taint ``IsStartupTaint`` matches when it builds a node template
  from a real node, so a pending pod is judged as if the taint were not there;
- ``FilterOutNodesWithStartupTaints`` (called from ``core/static_autoscaler.go``) treats a node
  with such a taint as not ready, and ``clusterstate/clusterstate.go`` counts a not-ready node
  younger than ``MaxNodeStartupTime`` (15 minutes) as ``NotStarted``: an upcoming node the
  pending pods are expected to land on, so no second node is added for them meanwhile;
- a template built from the Auto Scaling group's tags (scale-up from zero, ``aws_manager.go``) has
  only the taints of the ``k8s.io/cluster-autoscaler/node-template/taint/`` tags, which do not
  name this one: nothing to add there.

The FAQ ("How does Cluster Autoscaler treat nodes with status/startup/ignore taints?") says the same.
"""

from __future__ import annotations

__all__ = [
    "NODE_CHECK_CONDITION",
    "NODE_CHECK_NAME",
    "NODE_CHECK_NAMESPACE",
    "NODE_CHECK_TAINT",
    "NODE_CHECK_TAINT_KEY",
    "STARTUP_TAINT_PREFIX",
]

STARTUP_TAINT_PREFIX = "startup-taint.cluster-autoscaler.kubernetes.io/"
NODE_CHECK_TAINT_KEY = f"{STARTUP_TAINT_PREFIX}node-check"
# EKS's Taint key is at most 63 characters (EKS API Reference, "Taint").
assert len(NODE_CHECK_TAINT_KEY) <= 63
NODE_CHECK_TAINT: dict[str, str] = {"key": NODE_CHECK_TAINT_KEY, "value": "pending", "effect": "NoSchedule"}

NODE_CHECK_CONDITION = "TrainiumNodeCheck"
"""The node condition the check sets: ``True`` (passed) or ``False`` with a reason and a message a
person can read in ``kubectl describe node``."""

NODE_CHECK_NAME = "node-check"
"""The DaemonSet, its ServiceAccount, RBAC and admission policy."""
NODE_CHECK_NAMESPACE = "kube-system"
"""Beside the device plugins: the check reads the node's devices (privileged), which Pod Security
forbids in the platform's own namespaces."""
