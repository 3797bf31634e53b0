"""The node check: what a new Trainium node carries until it has proven itself, and what it says after.

Every Trainium node group registers its nodes with ``NODE_CHECK_TAINT`` (constructs_trn/trainium_node_group.py).
No training pod tolerates it, so Volcano and the scheduler keep gangs off a node until the check
(k8s_charts/node_check.py, k8s_charts/scripts/node_check.py) has passed on it and lifted the taint.

The key's prefix makes it a startup taint for the Cluster Autoscaler, read in its source at the
versions cluster_facts/versions.py pins for Kubernetes 1.34 and 1.36 (tags cluster-autoscaler-1.34.5
and -1.36.1; 1.36 makes ``MaxNodeStartupTime`` configurable per group, 15 minutes by default):

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
    "EFA_ERROR_COUNTERS",
    "EFA_ERROR_LIMIT",
    "EFA_ERROR_WINDOW_SECONDS",
    "EFA_SUSPECT_TAINT",
    "EFA_SUSPECT_TAINT_KEY",
    "NODE_CHECK_CONDITION",
    "NODE_CHECK_NAME",
    "NODE_CHECK_NAMESPACE",
    "NODE_CHECK_TAINT",
    "NODE_CHECK_TAINT_KEY",
    "STARTUP_TAINT_PREFIX",
    "WATCH_SECONDS",
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

WATCH_SECONDS = 60
"""After its first verdict the check stays on its node and looks again this often: the EFA
counters, a held node's state, the other Trainium nodes' kubelets (docs/health.md)."""

EFA_SUSPECT_TAINT_KEY = "trainium/efa-errors"
EFA_SUSPECT_TAINT: dict[str, str] = {"key": EFA_SUSPECT_TAINT_KEY, "value": "suspect", "effect": "NoSchedule"}
"""Put on a node in use whose EFA error counters passed ``EFA_ERROR_LIMIT``: no new pod lands there
(running pods stay), until the node is idle and passes the EFA loopback again (the check lifts it)
or fails it (the node is replaced). Not a startup taint: the autoscaler sees the node as it is."""

EFA_ERROR_COUNTERS: tuple[str, ...] = (
    "rdma_read_wr_err",
    "rdma_write_wr_err",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
)
"""The EFA port counters the check watches, files under ``/sys/class/infiniband/<device>/ports/<port>/hw_counters/``.
Their names are the EFA kernel driver's (Linux ``drivers/infiniband/hw/efa/efa_verbs.c``,
``EFA_DEFINE_PORT_STATS``; the retransmit and remote-connection counters came with its network
statistics); the EKS node monitoring agent warns on the same ones (aws/eks-node-monitoring-agent
``monitors/networking/efa/efa.go``, which also watches ``rx_drops`` and the retransmitted bytes and
packets: congestion and a receiver that posts too few buffers move those, not a broken device).
The remote-connection counters also move when a peer dies: that is why a suspect node is tested on
its own (loopback) before it is blamed."""

EFA_ERROR_WINDOW_SECONDS = 300
EFA_ERROR_LIMIT = 400
"""A counter that grows by more than this within ``EFA_ERROR_WINDOW_SECONDS`` on one device makes the
node suspect: the node monitoring agent's own warning rate (a token bucket of one per second after a
burst of 100, ``rate.NewLimiter(rate.Every(time.Second), 100)`` in efa.go) held for five minutes,
rather than one burst."""
assert EFA_ERROR_LIMIT == EFA_ERROR_WINDOW_SECONDS + 100
