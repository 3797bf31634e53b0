"""The node check: what a new Trainium node carries until it has proven itself, and what it says after.

Every Trainium node group registers its nodes with ``NODE_CHECK_TAINT`` (constructs_trn/trainium_node_group.py).
No training pod tolerates it, so Volcano and the scheduler keep gangs off a node until the check
(k8s_charts/checks/node_check.py, cluster_programs/node_check.py) has passed on it and lifted the taint.

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
    "DEFAULT_REPLACEMENTS_PER_WINDOW",
    "DEFAULT_REPLACEMENT_WINDOW_MINUTES",
    "EFA_ERROR_COUNTERS",
    "EFA_ERROR_LIMIT",
    "EFA_ERROR_WINDOW_SECONDS",
    "EFA_SUSPECT_TAINT",
    "EFA_SUSPECT_TAINT_KEY",
    "NODE_CHECK_CONDITION",
    "NODE_CHECK_FAILED_TAINT_KEY",
    "NODE_CHECK_NAME",
    "NODE_CHECK_NAMESPACE",
    "NODE_CHECK_TAINT",
    "NODE_CHECK_TAINT_KEY",
    "NODE_FENCE_NAME",
    "NODE_READ_SECONDS",
    "REPLACEMENT_RECORD_PREFIX",
    "STARTUP_TAINT_PREFIX",
    "STEP_TIMEOUT_SECONDS",
    "WATCH_SECONDS",
    "check_time_limit_seconds",
    "replacement_record",
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
NODE_FENCE_NAME = f"{NODE_CHECK_NAME}-fence"
"""The Deployment that fences unresponsive Trainium nodes for the whole cluster (cluster_programs/node_fence.py)."""
NODE_CHECK_NAMESPACE = "kube-system"
"""Beside the device plugins: the check reads the node's devices (privileged), which Pod Security
forbids in the platform's own namespaces."""

WATCH_SECONDS = 60
"""After its first verdict the check stays on its node and looks again this often: the EFA
counters, a held node's state; the fence looks at the other Trainium nodes' kubelets as often
(docs/health.md)."""

NODE_READ_SECONDS = 600
"""How often the check reads its own Node while the node is in use and its EFA counters are quiet:
it reads it every pass while one of its taints is on or the counters grew (issue #36: a read a
minute on every node was 17 requests/s at 1,024 nodes; this is 1.7)."""

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

NODE_CHECK_FAILED_TAINT_KEY = "trainium/node-check-failed"
"""What a failed node keeps, value the failure's reason (``trainium/node-check-failed=NeuronDevicesMissing:NoSchedule``),
when the check does not have it replaced (the group's budget, or ``replace_failed_nodes: false``):
the startup taint gives way to it in one write. Deliberately neither a startup nor a status taint
of the Cluster Autoscaler (read at cluster-autoscaler-1.34.5, ``utils/taints/taints.go``):

- without the startup taint the node is Ready for the autoscaler (``FilterOutNodesWithStartupTaints``
  no longer overrides its Ready condition), so it never counts as unready: it never adds to the
  unready count that halts the autoscaler (``clusterstate.IsClusterHealthy``), and an empty node is
  removed after ``--scale-down-unneeded-time``, not ``MaxNodeStartupTime`` (15 minutes, a constant)
  plus ``--scale-down-unready-time``;
- a Ready, schedulable node is what the autoscaler builds its picture of a new node of the group
  from (``MixedTemplateNodeInfoProvider.Process``, ``isNodeGoodTemplateCandidate``), and
  ``SanitizeTaints`` keeps every taint but the autoscaler's own, the node-condition ones and the
  startup and status taints: while the group's Ready nodes all carry this taint, and afterwards from
  its cache (``--node-info-cache-expire-time``, default 10 years: until the autoscaler restarts),
  the autoscaler expects a new node of the group to carry it, so pods that do not tolerate it
  trigger no scale-up of the group.

No training pod tolerates it; the device plugins and the check already run there (NoSchedule
evicts nothing)."""

REPLACEMENT_RECORD_PREFIX = "node-check-replacements-"


def replacement_record(node_group: str) -> str:
    """The ConfigMap in ``NODE_CHECK_NAMESPACE`` that counts a group's replacements
    (cluster_programs/node_check_budget.py): every node-check pod of the group reads and writes it."""
    return f"{REPLACEMENT_RECORD_PREFIX}{node_group}"


DEFAULT_REPLACEMENTS_PER_WINDOW = 1
DEFAULT_REPLACEMENT_WINDOW_MINUTES = 30
"""The default budget: one replacement per group per 30 minutes (``node_check.replacements_per_window``,
``node_check.replacement_window_minutes``). A replacement is launched, pulled and checked within
about 14 minutes (docs/capacity.md), inside the window of the one it replaces: with one per window,
a replacement that fails in any way is not replaced in turn, and one that fails the same way also
stops the group's launches (cluster_programs/node_check_budget.py)."""


STEP_TIMEOUT_SECONDS = 30
"""Each of the check's tools gets this long (``nccom-test`` four times as long: it builds its NEFF
first). On a healthy node the whole check takes about two minutes (docs/health.md)."""

_FILE_SYSTEM_SECONDS = 10
"""The TCP connection to the file system (``min(step timeout, 10)``)."""
_PINGPONG_START_SECONDS = 0.5
"""Each loopback's server is given this long to bind before its client starts."""


def check_time_limit_seconds(efa_interfaces: int) -> float:
    """The longest a node's check can take, every tool at its time limit (cluster_programs/node_check.py
    ``check_node``): ``neuron-ls`` twice (is a device in use; the check), ``nccom-test``, ``fi_info``, a
    loopback per EFA device, the file system. A failing node's verdict comes no later."""
    step = STEP_TIMEOUT_SECONDS
    loopbacks = efa_interfaces * (step + _PINGPONG_START_SECONDS)
    return 2 * step + 4 * step + step + loopbacks + _FILE_SYSTEM_SECONDS
