"""Names the Kubernetes objects, the node groups, the pipeline's check and the configuration share.

A label, a resource name or a path typed in two places is a future mismatch; each lives here once
and every layer reads it from here.
"""

from __future__ import annotations

import hashlib

from cluster_facts.dra import DEVICES_LABEL, DRA_DEVICES
from cluster_facts.instance_catalog import TrainiumInstanceType

__all__ = [
    "CANNOT_PROCEED_EXIT_CODE",
    "CDK_PRUNE_LABEL_PREFIX",
    "DATASETS_DIR",
    "DATASETS_ROOT",
    "DATA_MOUNT",
    "DEPLOYMENT_CHECK_GROUP",
    "EFA_INTERFACES_LABEL",
    "EFA_RESOURCE",
    "ETCD_CLIENT_PORT",
    "ETCD_LABELS",
    "ETCD_METRICS_PORT",
    "ETCD_PEER_PORT",
    "ETCD_REPLICAS",
    "ETCD_SERVICE_NAME",
    "FABRIC_CHECK_TAINT",
    "FABRIC_CHECK_TAINT_KEY",
    "GANG_WATCHDOG_ANNOTATION",
    "INSTANCE_FAMILY_LABEL",
    "INSTANCE_TYPE_LABEL",
    "KUBE_DNS_LABELS",
    "NEURON_CACHE_DIR",
    "NEURON_CORES_LABEL",
    "NEURON_CORE_RESOURCE",
    "NEURON_DEVICES_LABEL",
    "NEURON_RESOURCE",
    "NEURON_TAINT_KEY",
    "NEURON_TAINT_VALUE",
    "NODE_GROUP_LABEL",
    "PLATFORM_NAMESPACE",
    "PLATFORM_PRIORITY_CLASS",
    "PLATFORM_UID",
    "POD_USER_ENVIRONMENT",
    "ROOT_SQUASH_ID",
    "RUNS_ROOT",
    "SAFE_TO_EVICT_ANNOTATION",
    "STUCK_MINUTES_ANNOTATION",
    "TEAMS_DIR",
    "TEAM_NAMESPACE_LABEL",
    "TEAM_SETTINGS_CONFIGMAP",
    "TORCHX_POD_LABELS",
    "TRAINING_NAMESPACE",
    "TRAINING_POD_LABELS",
    "TRAINING_PRIORITY_CLASS",
    "VOLCANO_DEFAULT_QUEUE",
    "VOLCANO_JOB_NAMESPACE_LABEL",
    "VOLCANO_JOB_NAME_LABEL",
    "VOLCANO_QUEUE_LABEL",
    "VOLCANO_SCHEDULER",
    "dataset_variable",
    "datasets_claim",
    "file_system_claim",
    "system_node_group",
    "team_rbac_group",
    "team_uid",
    "trainium_node_labels",
]

# The extended resources the device plugins advertise: whole Trainium chips, and one per EFA interface.
NEURON_RESOURCE = "aws.amazon.com/neuron"
NEURON_CORE_RESOURCE = "aws.amazon.com/neuroncore"
"""NeuronCores, advertised by the same device plugin; jobs that share a node request these."""
EFA_RESOURCE = "vpc.amazonaws.com/efa"

# The Trainium nodes' taint. Its key equals the Neuron resource name, so EKS's
# ExtendedResourceToleration admission tolerates it for every pod that asks for Neuron devices.
NEURON_TAINT_KEY = NEURON_RESOURCE
NEURON_TAINT_VALUE = "present"

# What a failed fabric check puts on the nodes it ran on (k8s_charts/checks/fabric_check.py): no training
# pod tolerates it, so the next run lands elsewhere; `kubectl taint nodes <node> <key>-` lifts it.
FABRIC_CHECK_TAINT_KEY = "trainium/fabric-check"
FABRIC_CHECK_TAINT: dict[str, str] = {
    "key": FABRIC_CHECK_TAINT_KEY,
    "value": "failed",
    "effect": "NoSchedule",
}

# What the gang watchdog (k8s_charts/checks/gang_watchdog.py) writes on a Trainium node it cordons: the
# gang (``<namespace>/<podgroup>``) it cordoned the node for. A cordoned node without it was cordoned
# by someone else, and the watchdog never touches it; `kubectl uncordon` leaves it, and the
# watchdog then removes it.
GANG_WATCHDOG_ANNOTATION = "trainium/gang-watchdog-cordoned-for"

# A run's own limit, in minutes, on its Volcano Job: how long its pods may hold Trainium nodes
# without progressing before the gang watchdog ends it (cluster_programs/stuck_runs.py).
STUCK_MINUTES_ANNOTATION = "trainium/stuck-minutes"

# aws-eks-v2's KubernetesManifest (the kubectl handler's apply of every manifest step) labels each
# object it applies with ``aws.cdk.eks/prune-<construct address>`` and prunes by it on update
# (aws-cdk-lib lib/aws-eks-v2/lib/k8s-manifest.js): the mark of an object the stack applied.
CDK_PRUNE_LABEL_PREFIX = "aws.cdk.eks/prune-"

# The well-known label the kubelet sets from the EC2 instance type.
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# Labels the stack puts on its node groups (trainium_node_labels; the system group gets the first).
NODE_GROUP_LABEL = "trainium/node-group"
INSTANCE_FAMILY_LABEL = "trainium/instance-family"
# Only Trainium nodes carry it (the system group carries NODE_GROUP_LABEL too): what selects every
# Trainium node, whatever its group.
NEURON_DEVICES_LABEL = "trainium/neuron-devices"
NEURON_CORES_LABEL = "trainium/neuron-cores"
EFA_INTERFACES_LABEL = "trainium/efa-interfaces"


def system_node_group(cluster_name: str) -> str:
    """The system node group's name (and its ``NODE_GROUP_LABEL`` value)."""
    return f"{cluster_name}-system"


def trainium_node_labels(
    instance: TrainiumInstanceType, *, node_group: str, dra: bool = False
) -> dict[str, str]:
    """What a Trainium node says about itself, read from the catalog; a node of a ``devices: dra``
    group says so (``DEVICES_LABEL``: the device plugins keep off it, the DRA drivers keep to it).

    The pipeline's deployment check compares the devices a node advertises with these labels.
    """
    return {
        NODE_GROUP_LABEL: node_group,
        INSTANCE_FAMILY_LABEL: instance.family,
        NEURON_DEVICES_LABEL: str(instance.chips),
        NEURON_CORES_LABEL: str(instance.neuron_cores),
        EFA_INTERFACES_LABEL: str(instance.efa_interfaces),
        **({DEVICES_LABEL: DRA_DEVICES} if dra else {}),
    }


# The cluster's own namespace for what serves every team: data set staging, the file system's
# layout, TensorBoard. It mounts the whole file system.
PLATFORM_NAMESPACE = "trainium-system"
# The default team's namespace (config.workloads.DEFAULT_TEAMS): etcd, claims and runs of a team
# live in the team's own namespace.
TRAINING_NAMESPACE = "training"


TEAM_SETTINGS_CONFIGMAP = "trainium-team"
"""The ConfigMap in each team's namespace that says what a run of the team needs (its queue, claims,
uid and node groups with their instance types): the TorchX component reads it (``--team``), and
the team's members may read it (k8s_charts/teams/team_settings.py)."""


def file_system_claim(generation: str) -> str:
    """The claim of the stack's file system of one ``generation``, in every namespace that mounts it.

    In the platform namespace it is the whole file system; in a team's namespace, the team's own
    directory. A replaced file system gets new names: a volume's source and a bound claim cannot change.
    """
    return f"fsx-{generation}"


def datasets_claim(generation: str) -> str:
    """The claim, in a team's namespace, of the staged data sets: read-only."""
    return f"fsx-{generation}-datasets"


# Where every pod mounts its claim, and what it finds there. On the file system itself:
#   /datasets/<name>/<identity>      staged once by the platform, mounted read-only by every team
#   /teams/<team>/runs/<run id>      a team's run outputs (its pods see /teams/<team> as /data)
#   /teams/<team>/neuron_cache       a team's compile caches
# No volume is mounted inside another that lives on the file system: the container runtime creates
# each mount point as the node's root, which Lustre squashes to nobody on the Trainium nodes, and a
# team's directory (mode 2750, the team's uid) lets nobody neither search nor create in it. A data
# sets mount at /data/datasets left every run in CreateContainerError (tests/k8s_charts/runs/test_mount_layout.py).
# Sources: runc libcontainer/rootfs_linux.go (setupRootfs -> mountToRootfs per mount, in order,
# creating a missing destination under the rootfs before the bind mount, as the runtime's root);
# the same failure on NFS with root squash: containers/podman#17129.
DATA_MOUNT = "/data"
TEAMS_DIR = "teams"
"""Each team's directory on the file system: ``/<TEAMS_DIR>/<team>``."""
NEURON_CACHE_DIR = "neuron_cache"
"""A team's Neuron compile caches, ``/data/neuron_cache/<cacheset>_<replica>`` in its pods."""
DATASETS_DIR = "datasets"
DATASETS_ROOT = f"/{DATASETS_DIR}"
"""Staged data sets, one versioned directory each: ``<root>/<name>/<identity>``. Beside /data, never
inside it: the same path in the staging pods (the file system's /datasets, mounted by sub-path) and
in a team's (its read-only claim of /datasets)."""
RUNS_ROOT = f"{DATA_MOUNT}/runs"
"""A team's runs, ``/data/runs/<run id>`` in its pods."""


# Root on a Trainium node is this user and group on the file system (root squash): nobody:nogroup.
ROOT_SQUASH_ID = 65534
# The platform's own uid and gid on the file system: owner of /datasets, which the staging Jobs write
# as this uid (never as root). Below every team's id (teams[].uid is at least 10000, derived ids at
# least _TEAM_ID_BASE) and no distribution's system or nobody id.
PLATFORM_UID = 9999
# A team's uid and gid on the file system, when the configuration names none: a hash of its name into
# [_TEAM_ID_BASE, _TEAM_ID_BASE + _TEAM_ID_SPAN). Above the distributions' system and login ranges
# (below 10000) and the nobody id; the configuration refuses two teams with one id.
_TEAM_ID_BASE = 100_000
_TEAM_ID_SPAN = 900_000


def team_uid(team: str) -> int:
    """The uid (and gid) that owns ``/teams/<team>`` and that the team's training pods run as.

    Derived from the name alone, so it never changes when teams are added, removed or reordered:
    a team's files keep their owner."""
    digest = hashlib.sha256(f"trainium-team/{team}".encode()).hexdigest()
    return _TEAM_ID_BASE + int(digest[:8], 16) % _TEAM_ID_SPAN


def team_rbac_group(team: str) -> str:
    """The Kubernetes group of a team's members (their EKS access entries map to it)."""
    return f"trainium-team-{team}"


def dataset_variable(name: str) -> str:
    """The environment variable in which a run's pods find a data set's directory: ``DATASET_<NAME>``.

    Run arguments name it as ``$(DATASET_<NAME>)``, which Kubernetes expands.
    """
    return "DATASET_" + name.upper().replace("-", "_")


# etcd for TorchElastic rendezvous: the Service the launchers dial, in the training namespace.
ETCD_SERVICE_NAME = "etcd-server"
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
ETCD_METRICS_PORT = 2381
"""Each member's metrics and health listener (``--listen-metrics-urls``), where the kubelet probes
``/readyz`` and ``/livez``: with the v2 API on, the client port serves ``/health`` only."""
ETCD_REPLICAS = 3
"""Each team's rendezvous etcd: three members in the team's namespace (a quorum survives the loss of
any one: k8s_charts/teams/etcd.py), counted by its quota's ``pods``."""
ETCD_LABELS: dict[str, str] = {"app.kubernetes.io/name": "etcd", "app.kubernetes.io/component": "rendezvous"}
"""The labels of a team's etcd pods: what its Services select and the NetworkPolicies admit or reach."""
TRAINING_POD_LABELS: dict[str, str] = {"trainium/role": "training"}
"""Labels every training pod of this project carries (for selection by people; not an identity)."""
TORCHX_POD_LABELS: dict[str, str] = {"app.kubernetes.io/managed-by": "torchx.pytorch.org"}
"""Labels TorchX's Kubernetes scheduler puts on every pod it submits."""
# Volcano's job controller labels every pod it creates for a Job with the Job's name and namespace
# (volcano v1.15.1 pkg/controllers/job/job_controller_util.go, createJobPod; the keys are JobNameKey
# and JobNamespaceKey of volcano.sh/apis batch/v1alpha1 labels.go), overwriting the template's values.
# In a team namespace an admission policy lets no one else set them (k8s_charts/teams/job_pod_admission.py):
# they are what etcd's and the workers' NetworkPolicies trust.
VOLCANO_JOB_NAME_LABEL = "volcano.sh/job-name"
VOLCANO_JOB_NAMESPACE_LABEL = "volcano.sh/job-namespace"
# Volcano's scheduler name (pods and Jobs name it in schedulerName); the queue Volcano's job webhook
# puts a Job without one into (pkg/webhooks/admission/jobs/mutate, DefaultQueue: uncapped, shared by
# everyone); the label the job controller writes on every pod with its Job's queue (createJobPod).
VOLCANO_SCHEDULER = "volcano"
VOLCANO_DEFAULT_QUEUE = "default"
VOLCANO_QUEUE_LABEL = "volcano.sh/queue-name"
# The PriorityClasses of the cluster (k8s_charts/addons/priority_classes.py): the platform's own pods, and
# every team's training pods (an admission policy holds team pods to it: k8s_charts/teams/tenant_admission.py).
PLATFORM_PRIORITY_CLASS = "trainium-platform"
TRAINING_PRIORITY_CLASS = "trainium-training"
# Every team's namespace carries this label (value: the team); cluster-wide policies select on it.
TEAM_NAMESPACE_LABEL = "trainium/team"
# CoreDNS's pods in kube-system and the selector of the kube-dns Service (EKS's CoreDNS add-on).
KUBE_DNS_LABELS: dict[str, str] = {"k8s-app": "kube-dns"}

# The Kubernetes group of the pipeline's read-only deployment check (its EKS access entry maps to it).
DEPLOYMENT_CHECK_GROUP = "trainium-deployment-check"

# A training pod that cannot proceed (a prerequisite failed, a checksum does not match) exits with
# this code; the run's Volcano policy turns it into the end of the job instead of a restart.
# 78 is EX_CONFIG in sysexits.h: nothing a retry can fix. Neither torchrun nor Python use it.
CANNOT_PROCEED_EXIT_CODE = 78

# A training pod runs as its team's uid, which has no passwd entry in the image; the pod gets one
# (cluster_facts/pod_user.py: USER is its name, HOME its home). Set in the environment too:
# getpass.getuser() (CPython: LOGNAME, USER, LNAME, USERNAME, then pwd.getpwuid) and the tools that
# call it (torch 2.9's compile cache names its directory after it:
# torch/_inductor/runtime/cache_dir_utils.py, default_cache_dir) find a name here first, and HOME a
# writable directory (~ expands from HOME before the passwd database).
POD_USER_ENVIRONMENT: dict[str, str] = {"HOME": "/tmp", "USER": "trainium", "LOGNAME": "trainium"}

# The cluster autoscaler never removes a node that runs a pod with this annotation set to "false".
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
