"""What the Kubernetes Cluster Autoscaler and the stack agree on: names, tags and scale-from-zero capacity.

The autoscaler scales each Trainium node group's Auto Scaling group. EKS tags those groups for
auto-discovery (``k8s.io/cluster-autoscaler/enabled``, ``k8s.io/cluster-autoscaler/<cluster>``) but
copies neither the node group's labels nor its taint to them, and nothing says how many Neuron devices
and EFA interfaces a node will advertise. With no node running, the autoscaler builds its picture of a
new node from the group's instance type and from ``node-template`` tags; the stack writes those tags
(constructs_trn/trainium_node_group.py) from ``node_template_tags``, which reads the instance catalog,
so a scale-up from zero expects exactly what the node will have. The autoscaler takes a template
node's allocatable to be its capacity; the tags give it the kubelet's allocatable cpu and memory
instead, and the EFA hugepages (cluster_facts/node_allocatable.py).

Pure data: the stack, the autoscaler's Helm values and the pipeline's deployment check read it.
"""

from __future__ import annotations

from cluster_facts.failure_recovery import EKS_READY_REPAIR_SECONDS
from cluster_facts.instance_catalog import TrainiumInstanceType
from cluster_facts.kubernetes_names import (
    EFA_RESOURCE,
    NEURON_CORE_RESOURCE,
    NEURON_RESOURCE,
    NEURON_TAINT_KEY,
    NEURON_TAINT_VALUE,
    NODE_GROUP_LABEL,
    trainium_node_labels,
)
from cluster_facts.node_allocatable import HUGEPAGES_2MI_RESOURCE, template_allocatable

__all__ = [
    "AUTOSCALER_NAME",
    "AUTOSCALER_NAMESPACE",
    "AUTOSCALER_STATUS_CONFIGMAP",
    "DEFAULT_MAX_CLUSTER_CORES",
    "DEFAULT_MAX_CLUSTER_MEMORY_GIB",
    "LABEL_TAG_PREFIX",
    "MAX_NODE_STARTUP_MINUTES",
    "MAX_TOTAL_UNREADY_PERCENTAGE",
    "RESOURCE_TAG_PREFIX",
    "SCALE_DOWN_UNREADY_MINUTES",
    "TAINT_TAG_PREFIX",
    "TEMPLATE_TAG_PREFIX",
    "TRAINIUM_DISCOVERY_TAG",
    "cores_total",
    "discovery_tags",
    "memory_total",
    "node_template_tags",
    "ok_total_unready_count",
    "owner_tag",
    "scale_from_zero_resources",
    "template_capacity",
]

AUTOSCALER_NAMESPACE = "kube-system"
AUTOSCALER_NAME = "cluster-autoscaler"
"""The Deployment, its ServiceAccount (the Pod Identity association names it) and the Helm release."""
AUTOSCALER_STATUS_CONFIGMAP = "cluster-autoscaler-status"
"""Where the autoscaler writes its health and each node group's sizes (its default name)."""

TEMPLATE_TAG_PREFIX = "k8s.io/cluster-autoscaler/node-template/"
LABEL_TAG_PREFIX = f"{TEMPLATE_TAG_PREFIX}label/"
TAINT_TAG_PREFIX = f"{TEMPLATE_TAG_PREFIX}taint/"
RESOURCE_TAG_PREFIX = f"{TEMPLATE_TAG_PREFIX}resources/"

TRAINIUM_DISCOVERY_TAG = f"{LABEL_TAG_PREFIX}{NODE_GROUP_LABEL}"
"""Only the Trainium groups' Auto Scaling groups carry it (the stack writes it): the autoscaler
discovers them and not the system node group, whose size stays the configuration's."""


def owner_tag(cluster_name: str) -> str:
    """The tag EKS puts on every Auto Scaling group of the cluster's managed node groups (value ``owned``)."""
    return f"k8s.io/cluster-autoscaler/{cluster_name}"


def discovery_tags(cluster_name: str) -> tuple[str, ...]:
    """The tag keys an Auto Scaling group must carry, all of them, for the autoscaler to scale it."""
    return ("k8s.io/cluster-autoscaler/enabled", owner_tag(cluster_name), TRAINIUM_DISCOVERY_TAG)


def scale_from_zero_resources(instance: TrainiumInstanceType) -> dict[str, int]:
    """The extended resources a new node of ``instance`` will advertise, from the catalog."""
    return {
        NEURON_RESOURCE: instance.chips,
        NEURON_CORE_RESOURCE: instance.neuron_cores,
        EFA_RESOURCE: instance.efa_interfaces,
    }


def template_capacity(instance: TrainiumInstanceType) -> dict[str, str]:
    """cpu, memory and hugepages as the kubelet will allocate them, for the node template.

    The autoscaler reads cpu and memory from the instance type and takes them as allocatable
    (cluster-autoscaler v1.34.5 and v1.36.1 ``aws_manager.go`` ``buildNodeFromTemplate``); a tag of the same name
    overrides each, and any other ``resources/<name>`` tag (``hugepages-2Mi``) becomes one more.
    """
    allocatable = template_allocatable(instance)
    return {
        "cpu": f"{allocatable.cpu_millicores}m",
        "memory": f"{allocatable.memory_mib}Mi",
        HUGEPAGES_2MI_RESOURCE: f"{allocatable.hugepages_2mi_mib}Mi",
    }


def node_template_tags(
    instance: TrainiumInstanceType, *, node_group: str, dra: bool = False
) -> dict[str, str]:
    """The Auto Scaling group tags that describe a node of ``node_group`` before one exists:
    its labels, its taint, its Neuron and EFA devices, and the cpu, memory and hugepages its kubelet
    will allocate (without which the autoscaler counts the instance type's whole memory).

    A ``dra`` group's node advertises no extended resources (its devices are in ResourceSlices, which
    no tag can describe: cluster_facts/dra.py ``AUTOSCALER_FROM_ZERO_ISSUE``)."""
    return {
        **{
            f"{LABEL_TAG_PREFIX}{key}": value
            for key, value in trainium_node_labels(instance, node_group=node_group, dra=dra).items()
        },
        f"{TAINT_TAG_PREFIX}{NEURON_TAINT_KEY}": f"{NEURON_TAINT_VALUE}:NoSchedule",
        **{
            f"{RESOURCE_TAG_PREFIX}{resource}": str(amount)
            for resource, amount in ({} if dra else scale_from_zero_resources(instance)).items()
        },
        **{
            f"{RESOURCE_TAG_PREFIX}{resource}": amount
            for resource, amount in template_capacity(instance).items()
        },
    }


# --- Unready nodes: when the autoscaler removes them, and why it never halts for them ----------------
#
# Read in cluster-autoscaler-1.34.5 (the same in 1.33.0, the release the test tier runs):
# - a node is *unready* for the autoscaler when its Ready condition is not True, or when it carries a
#   startup taint (``taints.FilterOutNodesWithStartupTaints`` overrides its Ready condition);
# - ``clusterstate.updateReadinessStats`` counts an unready node younger than ``MaxNodeStartupTime``
#   (15 minutes since the Node was created) as NotStarted, an upcoming node, never removed; older, as
#   Unready;
# - an Unready node with nothing but DaemonSet pods is removed once unneeded for
#   ``--scale-down-unready-time`` (``scaledown/unneeded/nodes.go`` ``unremovableReason``);
# - ``IsClusterHealthy``: while more than ``--ok-total-unready-count`` nodes *and* more than
#   ``--max-total-unready-percentage`` of all nodes (system nodes included) are Unready, every loop
#   ends before scale-up and scale-down ("Cluster is not ready for autoscaling", Warning event
#   ``ClusterUnhealthy``): the unready nodes are never removed, and nothing else scales.

MAX_NODE_STARTUP_MINUTES = 15
"""``clusterstate.MaxNodeStartupTime``: a constant in 1.33 and 1.34 (a flag, ``--max-node-startup-time``,
from 1.36, default the same)."""

_REPAIR_MARGIN_MINUTES = 5
"""Between the autoscaler's removal of a never-ready node and EKS's repair of it: the autoscaler's
10 s loop, its drain of DaemonSet pods and the Auto Scaling call, and EKS's own delay."""

SCALE_DOWN_UNREADY_MINUTES = (
    EKS_READY_REPAIR_SECONDS // 60 - MAX_NODE_STARTUP_MINUTES - _REPAIR_MARGIN_MINUTES
)
"""``--scale-down-unready-time``: 30 - 15 - 5 = 10 minutes (the default is 20).

A node whose kubelet never becomes Ready (or whose node check never gets to run: its pod never
starts) keeps the startup taint. EKS node auto repair replaces a node whose Ready condition has been
bad for 30 minutes (``EKS_READY_REPAIR_SECONDS``): a replacement keeps the group's size, so the
cycle would go on without the autoscaler. The autoscaler counts the node NotStarted for 15 minutes,
then Unready, and removes it (lowering the group's size) this long after: 15 + 10 = 25 minutes from
the node's creation, 5 minutes before the repair. With the default 20 the repair came first (35 > 30)."""

MAX_TOTAL_UNREADY_PERCENTAGE = 45
"""``--max-total-unready-percentage``: the autoscaler's default, set explicitly beside
``ok_total_unready_count``, which alone keeps the Trainium groups from halting it."""


def ok_total_unready_count(trainium_max_nodes: int) -> int:
    """``--ok-total-unready-count``: every Trainium node the groups may hold (the sum of their
    ``max_size``), instead of the default 3.

    The autoscaler halts only while the Unready count passes both limits. Trainium nodes are the only
    ones it starts, and a failure that hits every new node (an AMI, a security group rule, a driver)
    can leave every one of them unready at once: with the defaults, one stuck 4-node group beside two
    system nodes (4 > 3 and 4/6 > 45%) would stop every scale-down, the stuck nodes' included, for as
    long as the failure lasts. With this count, Trainium nodes alone never halt it; the system nodes
    (not autoscaled) must be unready too, which is a cluster problem the halt is for. The node check
    keeps its failed nodes out of the count altogether: a node whose replacement it withholds trades
    the startup taint for ``trainium/node-check-failed`` and is Ready for the autoscaler
    (cluster_facts/node_check.py). The same two limits judge each group (``IsNodeGroupHealthy``: a
    group with more unready nodes than both is not scaled up); with this count a stuck group is
    still scaled, which the node check's budget and its stop of the group's launches bound instead."""
    return trainium_max_nodes


DEFAULT_MAX_CLUSTER_CORES = 5000 * 64
"""``config.DefaultMaxClusterCores`` (cluster-autoscaler config/const.go): ``--cores-total``'s default
maximum, 320,000 cores, counted over every node of the cluster (the system nodes too): the capacity's
cpu, rounded up, summed (core/scaleup/resource/manager.go, ``coresMemoryTotal``)."""

DEFAULT_MAX_CLUSTER_MEMORY_GIB = 5000 * 64 * 20
"""``config.DefaultMaxClusterMemory``: ``--memory-total``'s default maximum, 6,400,000 GiB (the flag is in
gigabytes, multiplied by 2^30 when parsed: config/flags/flags.go, ``Options``)."""


def cores_total(trainium_max_cores: int) -> str:
    """``--cores-total``: the default's room for the system nodes and anything else, plus every vCPU
    the Trainium groups may hold at their ``max_size``.

    The default caps the cluster below what the stack lets the groups reach: 2,048 trn2.48xlarge
    (192 vCPUs each) are 393,216 cores, past 320,000, and the autoscaler refuses every scale-up that
    would cross the limit ("max cluster cpu limit reached"; the 2,048-node bench's scale-up found no
    expansion option). With the groups' whole capacity added, the groups' ``max_size`` stays the only
    limit a configuration sets, as ``ok_total_unready_count`` keeps it for the unready halt."""
    return f"0:{DEFAULT_MAX_CLUSTER_CORES + trainium_max_cores}"


def memory_total(trainium_max_memory_gib: int) -> str:
    """``--memory-total`` in GiB, as ``cores_total``: the default plus the Trainium groups' whole
    memory (2,048 trn2.48xlarge hold 4,194,304 GiB, inside the default alone; 3,200 would not be)."""
    return f"0:{DEFAULT_MAX_CLUSTER_MEMORY_GIB + trainium_max_memory_gib}"
