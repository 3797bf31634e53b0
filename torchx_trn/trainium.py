"""What a distributed training job on this cluster's Trainium nodes needs, derived from the cluster's
facts: the devices and EFA interfaces of the instance type and ``--nproc_per_node`` from the
catalog, the instance-type label, the team's etcd Service, the file system's claims and where they
mount, the EFA and Neuron runtime environment; and what the team admission policies
(k8s_charts/teams/tenant_admission.py) require of a team's Job and pods that TorchX does not render.

Plain values only (no torchx import): torchx_trn/components.py turns them into a TorchX AppDef, and
the tests read them directly. Every refusal is a ValueError of one line that names the argument.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cluster_facts.dra import POD_DEVICE_CLAIM, POD_EFA_CLAIM
from cluster_facts.failure_recovery import NODE_LOST_TAINT_KEYS, NODE_LOST_TOLERATION_SECONDS
from cluster_facts.images import pinned_image_problem
from cluster_facts.instance_catalog import CATALOG, TrainiumInstanceType
from cluster_facts.kubernetes_names import (
    DATA_MOUNT,
    DATASETS_ROOT,
    EFA_RESOURCE,
    ETCD_CLIENT_PORT,
    ETCD_SERVICE_NAME,
    INSTANCE_TYPE_LABEL,
    NEURON_CACHE_DIR,
    NEURON_RESOURCE,
    NEURON_TAINT_KEY,
    NODE_GROUP_LABEL,
    POD_USER_ENVIRONMENT,
    ROOT_SQUASH_ID,
    RUNS_ROOT,
    TRAINING_PRIORITY_CLASS,
    datasets_claim,
    file_system_claim,
)
from cluster_facts.metadata_proxy import proxy_environment
from cluster_facts.neuron_stack import STACKS, TRAINING_IMAGE, image_stack, release_problem, stack_releases
from cluster_facts.pod_user import pod_user_init_container, pod_user_mounts, pod_user_volume
from cluster_facts.script_files import script_body
from cluster_facts.volcano_retries import volcano_max_retry

__all__ = [
    "DEFAULT_IMAGE",
    "DEFAULT_INSTANCE_TYPE",
    "DEFAULT_NATIVE_INSTANCE_TYPE",
    "RENDEZVOUS_ENDPOINT",
    "RENDEZVOUS_PROGRAM",
    "Mount",
    "NodeClaim",
    "TrainiumJob",
    "trainium_job",
]

# The cluster's training image, from its one home (the Neuron table, which the configuration's
# default and docker/Dockerfile follow).
DEFAULT_IMAGE = TRAINING_IMAGE
# The instance type of the default configuration's node group.
DEFAULT_INSTANCE_TYPE = "trn1.32xlarge"
# The native stack's (TorchNeuron) instance type of config/native.example.yaml.
DEFAULT_NATIVE_INSTANCE_TYPE = "trn2.48xlarge"
# A short name resolves in the pod's own namespace: the job's team's etcd, which admits TorchX pods.
RENDEZVOUS_ENDPOINT = f"{ETCD_SERVICE_NAME}:{ETCD_CLIENT_PORT}"
# Run first in every pod (python3 -c): finds this attempt's rendezvous id, then execs the launcher.
RENDEZVOUS_PROGRAM = script_body("torchx_trn", "rendezvous_attempt.py")

# Nodes carry the taint aws.amazon.com/neuron:NoSchedule. TorchX renders no tolerations; EKS's
# ExtendedResourceToleration admission adds one to every pod that requests the resource of the
# same name, which every pod of this job on a device-plugin group does. On a ``dra`` group the pod
# requests no extended resource, so admitted_job writes the toleration (as the stack's runs do).
assert NEURON_TAINT_KEY == NEURON_RESOURCE, "the Trainium taint is tolerated only through the resource's name"

# The EFA and Neuron runtime settings of the cluster's own runs.
FABRIC_ENVIRONMENT: Mapping[str, str] = {
    "CCOM_SOCKET_IFNAME": "eth0",
    "FI_PROVIDER": "efa",
    "FI_EFA_USE_DEVICE_RDMA": "1",
    "FI_EFA_FORK_SAFE": "1",
    "NEURON_RT_RESET_CORES": "1",
    "XLA_TRANSFER_SEED_ASYNC": "1",
}
# PyTorch/XLA's own setting: the native stack's runs have no use for it.
_XLA_ONLY = ("XLA_TRANSFER_SEED_ASYNC",)
_CACHESET = re.compile(r"[A-Za-z0-9_-]+")
# A Kubernetes label value (the node group's name is the value of NODE_GROUP_LABEL on its nodes).
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)")
# The largest uid the configuration takes for a team (teams[].uid); 0 and the squashed id never are.
_MAX_UID = 2**31 - 1
_GENERATION = re.compile(r"[a-z0-9]+")
_CLAIM_PREFIX = file_system_claim("")


@dataclass(frozen=True, kw_only=True)
class Mount:
    claim: str
    path: str
    read_only: bool


@dataclass(frozen=True, kw_only=True)
class NodeClaim:
    """A ``devices: dra`` node group's whole-node claim, as the team's settings describe it: the team
    namespace's ResourceClaimTemplate (cluster_facts/dra.py ``node_claim_template``) and the Logical
    NeuronCore size it configures (None: it configures none, as on Trainium1)."""

    template: str
    logical_core_size: int | None
    efa_template: str | None = None
    """The template of the pod's second claim, its node's EFA interfaces, where one claim cannot hold
    the whole node (trn2u: cluster_facts/dra.py ``NodeDevices.claims``); None: ``template`` holds all."""

    @property
    def claims(self) -> dict[str, str]:
        """The pod's claims: name -> the template each is made from."""
        efa = {} if self.efa_template is None else {POD_EFA_CLAIM: self.efa_template}
        return {POD_DEVICE_CLAIM: self.template, **efa}


@dataclass(frozen=True, kw_only=True)
class TrainiumJob:
    """One job: ``nnodes`` pods, one per node, each with every device of its node."""

    instance: TrainiumInstanceType
    nnodes: int
    script: str
    script_args: tuple[str, ...]
    image: str
    claim: str
    node_group: str
    """The team's node group its pods run on (the admission policy allows only the team's)."""
    uid: int
    """The team's uid and gid: they own the team's directory (k8s_charts/runs/fsx_layout.py)."""
    cacheset: str | None
    """None: the job's own (its app id); a name reuses that cache set's compiled graphs."""
    max_retries: int
    """Whole-gang restarts after a pod fails or is evicted: exactly this many, 0 for none."""
    environment: Mapping[str, str]
    stack: str = "xla"
    """The Neuron stack the job trains on (cluster_facts/neuron_stack.py): ``xla`` or ``native``."""
    logical_core_size: int | None = None
    """Physical NeuronCores per logical one (NEURON_LOGICAL_NC_CONFIG); None: the node claim's, else
    the instance type's."""
    node_claim: NodeClaim | None = None
    """On a ``devices: dra`` group: the claim each pod takes its node's devices through; None: the
    device plugins' extended resources."""

    @property
    def processes_per_node(self) -> int:
        """One worker per logical NeuronCore."""
        claimed = self.node_claim.logical_core_size if self.node_claim is not None else None
        return self.instance.logical_cores(self.logical_core_size or claimed)

    @property
    def volcano_max_retries(self) -> int:
        """The TorchX role's ``max_retries``. TorchX writes it as the Job's and each task's ``maxRetry``
        and, only when above 0, adds the RestartJob policies. Volcano fails a Job when its retry count
        reaches ``maxRetry`` (cluster_facts/volcano_retries.py), so N restarts need N + 1; with 0 the
        job has no restart policy at all and its ``maxRetry`` (which Volcano's webhook makes 3) is
        never consulted."""
        return volcano_max_retry(self.max_retries) if self.max_retries > 0 else 0

    @property
    def node_selector(self) -> dict[str, str]:
        return {INSTANCE_TYPE_LABEL: self.instance.name}

    @property
    def devices(self) -> dict[str, int]:
        """Every Trainium chip and EFA interface of the node: one pod per node. None on a ``dra`` group:
        no node there advertises them; the pod's claim holds them (``admitted_job``)."""
        if self.node_claim is not None:
            return {}
        return {NEURON_RESOURCE: self.instance.chips, EFA_RESOURCE: self.instance.efa_interfaces}

    @property
    def cpu(self) -> int:
        """7/8 of the node, the rest left to kubelet reservations and the DaemonSets."""
        return self.instance.vcpus * 7 // 8

    @property
    def memory_mb(self) -> int:
        return self.instance.memory_gib * 7 // 8 * 1024

    @property
    def mounts(self) -> tuple[Mount, ...]:
        """The team's directory of the file system at /data, the staged data sets read-only."""
        generation = self.claim.removeprefix(_CLAIM_PREFIX)
        return (
            Mount(claim=self.claim, path=DATA_MOUNT, read_only=False),
            Mount(claim=datasets_claim(generation), path=DATASETS_ROOT, read_only=True),
        )

    def launcher(self, *, job_id: str) -> list[str]:
        """torchrun, as the cluster's runs start it; the rendezvous program makes ``job_id``
        this attempt's id before it execs this."""
        return [
            "python3", "-m", "torch.distributed.run",
            "--rdzv_backend", "etcd",
            "--rdzv_endpoint", RENDEZVOUS_ENDPOINT,
            "--rdzv_id", job_id,
            "--nnodes", str(self.nnodes),
            "--nproc_per_node", str(self.processes_per_node),
            "--tee", "3",
            "--role=",
            self.script,
            *self.script_args,
        ]  # fmt: skip

    def command(self, *, job_id: str) -> list[str]:
        """The container's whole command: the rendezvous program, then the launcher as its argv."""
        return ["python3", "-c", RENDEZVOUS_PROGRAM, *self.launcher(job_id=job_id)]

    def pod_environment(self, *, job_id: str, replica: str) -> dict[str, str]:
        """The container's environment; ``replica`` selects this pod's compile cache."""
        cacheset = self.cacheset or job_id
        fabric = {k: v for k, v in FABRIC_ENVIRONMENT.items() if self.stack == "xla" or k not in _XLA_ONLY}
        lnc = (
            {}
            if self.logical_core_size is None
            else {"NEURON_LOGICAL_NC_CONFIG": str(self.logical_core_size)}
        )
        return {
            **fabric,
            **lnc,
            # Instance-metadata calls fail at once, nothing else is proxied (as in the cluster's runs).
            **proxy_environment(job=job_id),
            # The team's uid (the pod's runAsUser) has no passwd entry in the image.
            **POD_USER_ENVIRONMENT,
            "RUN_ID": job_id,
            "OUTPUT_DIR": f"{RUNS_ROOT}/{job_id}",
            # Never two running jobs on one cache directory: concurrent writers corrupt it.
            "NEURON_CC_FLAGS": f"--cache_dir={DATA_MOUNT}/{NEURON_CACHE_DIR}/{cacheset}_{replica}",
            **self.environment,
        }

    def admitted_job(self, job: Mapping[str, Any], *, priority_class: str | None) -> dict[str, Any]:
        """TorchX's Volcano Job (plain data, as its scheduler renders it) with what the team admission
        policies require and its Kubernetes scheduler (0.7.0) cannot render: the team's priority
        class; in every pod, the team's node group beside the instance type, the team's uid and gid
        from the start (non-root, no privilege escalation, no capability, the runtime's seccomp
        profile), the data sets' claim read-only on the volume as well as on the mount, and no
        service-account token (training never calls the Kubernetes API). On a ``dra`` group, what the
        stack's runs carry there (k8s_charts/runs/training_run.py): the pod's claim from the team's
        ``trainium-node-<group>`` template, named by the container, and the tolerations of the
        Trainium taint and of a lost node. ``priority_class`` is what ``-cfg priority_class`` asked
        for, if anything: only the team's class is allowed.
        """
        if priority_class not in (None, TRAINING_PRIORITY_CLASS):
            raise ValueError(
                f"-cfg priority_class={priority_class}: a team's jobs run at priority class "
                f"{TRAINING_PRIORITY_CLASS}, which the component sets; leave priority_class out"
            )
        admitted = copy.deepcopy(dict(job))
        spec = admitted["spec"]
        # Volcano gives the Job's class to every pod it creates (as the stack's runs do).
        spec["priorityClassName"] = TRAINING_PRIORITY_CLASS
        read_only = {mount.claim for mount in self.mounts if mount.read_only}
        for task in spec["tasks"]:
            pod = task["template"]["spec"]
            pod["nodeSelector"] = {**pod.get("nodeSelector", {}), NODE_GROUP_LABEL: self.node_group}
            pod["automountServiceAccountToken"] = False
            pod["securityContext"] = {
                **pod.get("securityContext", {}),
                "runAsNonRoot": True,
                "runAsUser": self.uid,
                "runAsGroup": self.uid,
                "seccompProfile": {"type": "RuntimeDefault"},
            }
            for volume in pod.get("volumes", []):
                claim = volume.get("persistentVolumeClaim")
                if claim is not None and claim.get("claimName") in read_only:
                    # The kubelet mounts a claim read-only only when the pod's volume says so
                    # (kubernetes#69843); the mount's readOnly alone is TorchX's.
                    claim["readOnly"] = True
            if self.node_claim is not None:
                _claim_the_node(pod, self.node_claim)
            for container in pod["containers"]:
                container["securityContext"] = {
                    **container.get("securityContext", {}),
                    # Neuron devices and EFA need no capability (k8s_charts/runs/training_run.py says why).
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                }
                # The image's passwd and group with the team's uid added (cluster_facts/pod_user.py).
                container["volumeMounts"] = [*container.get("volumeMounts", []), *pod_user_mounts()]
            pod["initContainers"] = [pod_user_init_container(self.image), *pod.get("initContainers", [])]
            pod["volumes"] = [*pod.get("volumes", []), pod_user_volume()]
        return admitted


def _claim_the_node(pod: dict[str, Any], claim: NodeClaim) -> None:
    """The pod's devices through ``claim`` (before the init container is added: it claims nothing)."""
    pod["resourceClaims"] = [
        *pod.get("resourceClaims", []),
        *({"name": name, "resourceClaimTemplateName": template} for name, template in claim.claims.items()),
    ]
    for container in pod["containers"]:
        resources = container.setdefault("resources", {})
        resources["claims"] = [*resources.get("claims", []), *({"name": name} for name in claim.claims)]
    pod["tolerations"] = [
        *pod.get("tolerations", []),
        {"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
        # A pod on a lost node goes a minute after the node is marked (cluster_facts/failure_recovery.py).
        *(
            {
                "key": key,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": NODE_LOST_TOLERATION_SECONDS,
            }
            for key in NODE_LOST_TAINT_KEYS
        ),
    ]


def trainium_job(
    *,
    script: str,
    script_args: tuple[str, ...],
    claim: str,
    node_group: str,
    uid: int,
    nnodes: int,
    instance_type: str,
    image: str,
    cacheset: str | None,
    max_retries: int,
    environment: Mapping[str, str],
    stack: str = "xla",
    logical_core_size: int | None = None,
    node_claim: NodeClaim | None = None,
) -> TrainiumJob:
    """The job, or a ValueError of one line naming the argument that is wrong and what is allowed."""
    instance = CATALOG.get(instance_type)
    if instance is None:
        raise ValueError(
            f"--instance_type {instance_type!r} is not a Trainium instance type of this cluster; "
            f"known: {', '.join(CATALOG)}"
        )
    if nnodes < 1:
        raise ValueError(f"--nnodes must be at least 1, got {nnodes}")
    if max_retries < 0:
        raise ValueError(f"--max_retries must be at least 0, got {max_retries}")
    if not script:
        raise ValueError("--script must name the training script (a path in the image or under /data)")
    problem = pinned_image_problem(image)
    if problem is not None:
        raise ValueError(f"--image {problem}")
    _check_stack(stack=stack, instance=instance, image=image, logical_core_size=logical_core_size)
    generation = claim.removeprefix(_CLAIM_PREFIX)
    if claim == generation or not _GENERATION.fullmatch(generation):
        raise ValueError(
            f"--claim {claim!r} is not the file system's claim: `kubectl -n <namespace> get pvc` "
            f"lists it as {_CLAIM_PREFIX}<generation> (the one without -datasets)"
        )
    if not _LABEL_VALUE.fullmatch(node_group):
        raise ValueError(
            f"--node_group {node_group!r} is not a node group's name: one of the team's "
            "(teams[].node_groups in the cluster's configuration; all trainium.node_groups when empty)"
        )
    if not 0 < uid <= _MAX_UID or uid == ROOT_SQUASH_ID:
        raise ValueError(
            f"--uid {uid} is not a team's uid: the one that owns the team's directory (teams[].uid in "
            f"the cluster's configuration, or derived from the team's name), never 0 or {ROOT_SQUASH_ID}"
        )
    if cacheset is not None and not _CACHESET.fullmatch(cacheset):
        raise ValueError(f"--cacheset {cacheset!r} may hold only letters, digits, '-' and '_'")
    if node_claim is not None and logical_core_size is not None:
        # The driver configures the claimed devices' LNC (the template's, else the type's default);
        # a runtime told otherwise by NEURON_LOGICAL_NC_CONFIG would disagree with its devices.
        claimed = node_claim.logical_core_size or instance.default_logical_core_size
        if logical_core_size != claimed:
            raise ValueError(
                f"--lnc {logical_core_size}: node group {node_group!r} gives a pod its devices through "
                f"the ResourceClaimTemplate {node_claim.template}, which configures LNC {claimed}; "
                f"leave --lnc out or give {claimed}"
            )
    return TrainiumJob(
        instance=instance,
        nnodes=nnodes,
        script=script,
        script_args=script_args,
        image=image,
        claim=claim,
        node_group=node_group,
        uid=uid,
        cacheset=cacheset,
        max_retries=max_retries,
        environment=dict(environment),
        stack=stack,
        logical_core_size=logical_core_size,
        node_claim=node_claim,
    )


def _check_stack(
    *, stack: str, instance: TrainiumInstanceType, image: str, logical_core_size: int | None
) -> None:
    """The instance type runs the component's stack, the image (when its tag names its SDK) is a
    release of that stack, and the Logical NeuronCore size is one the instance type takes."""
    component = {"xla": "trainium_ddp", "native": "trainium_native"}
    if instance.family not in STACKS[stack].instance_families:
        allowed = ", ".join(
            name for name, entry in CATALOG.items() if entry.family in STACKS[stack].instance_families
        )
        raise ValueError(
            f"--instance_type {instance.name!r} does not run the {stack} stack of {component[stack]}; allowed: {allowed}"
        )
    problem = release_problem(image)
    if problem is not None:
        raise ValueError(f"--image {problem}")
    other = image_stack(image)
    if other is not None and other != stack:
        raise ValueError(
            f"--image {image!r} is of the {other} stack: use {component[other]}, or an image of SDK "
            f"{', '.join(stack_releases(stack))}"
        )
    if logical_core_size is not None and logical_core_size not in instance.logical_core_sizes:
        allowed = ", ".join(map(str, instance.logical_core_sizes))
        raise ValueError(
            f"--lnc {logical_core_size} is not a Logical NeuronCore size of {instance.name}; allowed: {allowed}"
        )
