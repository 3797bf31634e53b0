"""BERT-large pretraining on Trainium as Volcano Jobs, in the shape TorchX's Kubernetes scheduler submits.

Two phases of one run, rendered by one chart class:

- ``precompile`` (Job ``bert-precompile``): the training command under ``neuron_parallel_compile``
  for a few steps; it extracts the graphs and compiles them in parallel into the Neuron cache.
- ``train`` (Job ``bert-train``): the same command; it finds its graphs in that cache.

Run ``train`` after ``precompile`` has finished: both write to the same cache directories.

What TorchX would produce (torchx/schedulers/kubernetes_scheduler.py, ``app_to_resource`` and
``role_to_pod``): ``schedulerName: volcano``, the queue, job ``maxRetry``, plugins ``svc``
(``--publish-not-ready-addresses``) and ``env``, and per task ``maxRetry`` with the APPLICATION
retry policy (PodEvicted/PodFailed -> RestartJob); pods with ``restartPolicy: Never``, a
memory-backed ``/dev/shm``, the PVC mount and the instance-type node selector. Two deliberate
differences: one task with ``replicas: nodes`` (TorchX writes one task per replica only to expand
its per-replica macros; the replica index comes from Volcano's ``env`` plugin here) and an explicit
``minAvailable: nodes`` (gang scheduling: no node starts before all can).

The Neuron compiler cache is per replica, ``/data/neuron_cache/<cacheset>_<VC_TASK_INDEX>``, as in
the aws-neuron-eks-samples TorchX tutorial. Both phases use the same parameters, hence the same
``cacheset``, hence the same directories. Two runs that may overlap in time (say, on two queues or
namespaces sharing one file system) need different cachesets: concurrent writers corrupt a cache.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cdk8s
from constructs import Construct

from cluster_facts.images import pinned_image_problem
from cluster_facts.instance_catalog import TrainiumInstanceType
from cluster_facts.kubernetes_names import (
    DATA_MOUNT,
    EFA_RESOURCE,
    INSTANCE_TYPE_LABEL,
    NEURON_CACHE_ROOT,
    NEURON_RESOURCE,
    NEURON_TAINT_KEY,
    OUTPUT_ROOT,
    PYTHON_PACKAGES_ROOT,
)
from cluster_facts.script_files import script_body
from k8s_charts.data_staging import DATASET_DIR, DATASET_MARKER, OPTIMIZER_MODULE_PATH, SCRIPT_PATH
from k8s_charts.policy_exceptions import policy_exceptions

__all__ = [
    "PHASES",
    "PYTHON_PACKAGES_DIR",
    "PYTHON_REQUIREMENTS",
    "WORKER_SCRIPT",
    "BertJobChart",
    "BertTrainingParameters",
    "job_name",
    "torchrun_arguments",
]

PHASES = ("precompile", "train")
_JOB_NAMES = {"precompile": "bert-precompile", "train": "bert-train"}
_TASK_NAME = "worker"

_CACHESET = re.compile(r"[A-Za-z0-9_-]+")

# bash; what it needs arrives as environment variables, the launcher as its arguments.
WORKER_SCRIPT = script_body("k8s_charts", "bert_worker.sh")


@dataclass(frozen=True, kw_only=True)
class BertTrainingParameters:
    """One BERT-large phase-1 run (sequence length 128); shared by its precompile and training Jobs.

    Every value is required: the configuration owns the recipe's defaults, the cluster's facts
    (namespace, claim, rendezvous endpoint, pod labels) come from ``cluster_facts``.
    """

    instance: TrainiumInstanceType
    """Pods take every Neuron chip and EFA interface of such a node."""
    nodes: int
    image: str
    """The training image (docker/Dockerfile), pinned by tag or digest."""
    queue: str
    batch_size: int
    """Per worker (NeuronCore)."""
    grad_accum_usteps: int
    """Micro-steps per optimizer step; the configuration keeps the global batch when ``nodes`` changes."""
    bf16: bool
    """BF16 weights (the script's default, model.to(torch.bfloat16)); False passes --enable_fp32,
    for which the upstream recipe halves batch_size and doubles grad_accum_usteps."""
    stochastic_rounding: bool
    """NEURON_RT_STOCHASTIC_ROUNDING_EN; set explicitly either way, since the script turns it on
    for BF16 whenever the variable is absent."""
    cacheset: str
    """Names this run's Neuron cache directories; never shared by runs that overlap in time."""
    precompile_steps: int
    namespace: str
    claim_name: str
    rendezvous_endpoint: str
    pod_labels: Mapping[str, str]
    """Labels etcd's NetworkPolicy admits (cluster_facts.kubernetes_names.TRAINING_POD_LABELS)."""

    def __post_init__(self) -> None:
        for name in ("nodes", "batch_size", "grad_accum_usteps", "precompile_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not _CACHESET.fullmatch(self.cacheset):
            raise ValueError(f"cacheset {self.cacheset!r} may hold only letters, digits, '-' and '_'")
        problem = pinned_image_problem(self.image)
        if problem is not None:
            raise ValueError(problem)


def job_name(phase: str) -> str:
    try:
        return _JOB_NAMES[phase]
    except KeyError:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}") from None


def torchrun_arguments(parameters: BertTrainingParameters, phase: str) -> list[str]:
    """The launcher's argv, as TorchX's dist component writes it; identical in both phases but for
    ``--steps_this_run`` (neuron_parallel_compile needs the same graphs the real run builds).

    ``--role=`` is TorchX's ``--role ''`` as one word: neuron_parallel_compile takes the command as
    arguments that it may join into one string, and an empty argument would not survive that.
    """
    script_arguments = [
        "--batch_size", str(parameters.batch_size),
        "--grad_accum_usteps", str(parameters.grad_accum_usteps),
        "--data_dir", DATASET_DIR,
        "--output_dir", OUTPUT_ROOT,
    ]  # fmt: skip
    if not parameters.bf16:
        script_arguments.append("--enable_fp32")
    if phase == "precompile":
        script_arguments += ["--steps_this_run", str(parameters.precompile_steps)]
    return [
        "python3", "-m", "torch.distributed.run",
        "--rdzv_backend", "etcd",
        "--rdzv_endpoint", parameters.rendezvous_endpoint,
        "--rdzv_id", job_name(phase),
        "--nnodes", str(parameters.nodes),
        "--nproc_per_node", str(parameters.instance.processes_per_node),
        "--tee", "3",
        "--role=",
        SCRIPT_PATH,
        *script_arguments,
    ]  # fmt: skip


# The stock Neuron training image ships a transformers release without ``transformers.AdamW``,
# which the pinned script imports; the pods install the release the script was written for onto
# FSx once (under a lock: every pod of every job shares it) and put it first on PYTHONPATH.
# docker/Dockerfile bakes the same pins into the project image, where this is a no-op (a test
# keeps the two lists equal).
PYTHON_REQUIREMENTS = ("transformers==4.44.0", "tokenizers==0.19.1", "huggingface-hub==0.24.5")
PYTHON_PACKAGES_DIR = f"{PYTHON_PACKAGES_ROOT}/bert-transformers-4.44.0"
# How long a pod waits for what must finish before it (data staging, then precompile).
WAIT_TIMEOUT_SECONDS = 6 * 3600


def _script_inputs(parameters: BertTrainingParameters, phase: str) -> dict[str, str]:
    """What k8s_charts/scripts/bert_worker.sh reads from its environment.

    Both jobs can be applied in one deployment: precompile waits until the staging Job has put
    the data and script on FSx, and training waits until precompile has filled this replica's
    cache (Volcano queues jobs in creation order, and precompile is created first).
    """
    return {
        "PHASE": phase,
        "REQUIRED_FILES": f"{DATASET_MARKER} {SCRIPT_PATH} {OPTIMIZER_MODULE_PATH}",
        "NEURON_CACHE_ROOT": NEURON_CACHE_ROOT,
        "CACHESET": parameters.cacheset,
        "PYTHON_PACKAGES_DIR": PYTHON_PACKAGES_DIR,
        "PYTHON_REQUIREMENTS": " ".join(PYTHON_REQUIREMENTS),
        "WAIT_TIMEOUT_SECONDS": str(WAIT_TIMEOUT_SECONDS),
    }


def _environment(parameters: BertTrainingParameters) -> dict[str, str]:
    return {
        # Collectives bootstrap over the pod's interface; data moves over EFA with device RDMA.
        "CCOM_SOCKET_IFNAME": "eth0",
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "FI_EFA_FORK_SAFE": "1",
        "NEURON_RT_RESET_CORES": "1",
        "XLA_TRANSFER_SEED_ASYNC": "1",
        "NEURON_RT_STOCHASTIC_ROUNDING_EN": "1" if parameters.stochastic_rounding else "0",
    }


def _pod_template(parameters: BertTrainingParameters, phase: str) -> dict[str, Any]:
    node = parameters.instance
    labels = {
        **parameters.pod_labels,
        "app.kubernetes.io/name": "bert-large",
        "app.kubernetes.io/component": phase,
    }
    container = {
        "name": "trainer",
        "image": parameters.image,
        # k8s_charts/scripts/bert_worker.sh, with the launcher as its arguments ("$@").
        "command": ["/bin/bash", "-c", WORKER_SCRIPT, "bert-worker"],
        "args": torchrun_arguments(parameters, phase),
        "env": [
            {"name": name, "value": value}
            for name, value in {**_environment(parameters), **_script_inputs(parameters, phase)}.items()
        ],
        "resources": {
            # Every chip and EFA interface of the node: one pod per node, one worker per NeuronCore.
            # Extended resources are limits only; Kubernetes copies them to requests.
            "limits": {NEURON_RESOURCE: str(node.chips), EFA_RESOURCE: str(node.efa_interfaces)},
            # 7/8 of the node, the rest left to kubelet reservations and the DaemonSets. No cpu or
            # memory limits: the pod owns the node, and a cap would only throttle or OOM-kill a run.
            "requests": {"cpu": str(node.vcpus * 7 // 8), "memory": f"{node.memory_gib * 7 // 8}Gi"},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_MOUNT},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    return {
        "metadata": {
            "labels": labels,
            "annotations": _POLICY_EXCEPTIONS,
        },
        "spec": {
            "restartPolicy": "Never",
            # Training never calls the Kubernetes API.
            "automountServiceAccountToken": False,
            # The runtime's default seccomp profile is what `docker run` gives the Neuron images.
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "nodeSelector": {INSTANCE_TYPE_LABEL: node.name},
            "tolerations": [{"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [container],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": parameters.claim_name}},
                # PyTorch data loaders share tensors through /dev/shm; the runtime's default is 64 MiB.
                {"name": "dshm", "emptyDir": {"medium": "Memory"}},
            ],
        },
    }


# Root, as AWS ships and tests the Neuron training images (their docs run them with `docker run`).
_AS_ROOT = (
    "the Neuron training image runs as root, as AWS ships and tests it; the compile cache, packages "
    "and checkpoints live on the root-owned Lustre file system shared with the staging job"
)
# checkov looks for a batch/v1 Job's spec.template and, not finding one, reports its pod checks as
# failed; these pods are in spec.tasks[].template, which sets both (tests/k8s/test_bert_jobs.py).
_NOT_A_BATCH_JOB = (
    "checkov reads a batch/v1 Job's spec.template; this Volcano Job's pod template in spec.tasks sets "
)
_POLICY_EXCEPTIONS = policy_exceptions(
    {
        "CKV_K8S_23": _AS_ROOT,
        "CKV_K8S_40": _AS_ROOT,
        "CKV_K8S_29": _NOT_A_BATCH_JOB + "a pod security context",
        "CKV_K8S_31": _NOT_A_BATCH_JOB + "seccompProfile RuntimeDefault",
        "CKV_K8S_38": _NOT_A_BATCH_JOB + "automountServiceAccountToken false",
    }
)


class BertJobChart(cdk8s.Chart):
    """The Volcano Job of one ``phase`` ("precompile" or "train") of the run ``parameters``.

    One class for both phases: they differ only in name, launcher and step count, and deriving both
    from one parameter set is what guarantees they share the compile cache.
    """

    def __init__(self, scope: Construct, id: str, *, parameters: BertTrainingParameters, phase: str) -> None:
        super().__init__(scope, id)
        name = job_name(phase)
        job = cdk8s.ApiObject(
            self,
            "Job",
            api_version="batch.volcano.sh/v1alpha1",
            kind="Job",
            metadata=cdk8s.ApiObjectMetadata(
                name=name,
                namespace=parameters.namespace,
                labels={"app.kubernetes.io/name": "bert-large", "app.kubernetes.io/component": phase},
                annotations=_POLICY_EXCEPTIONS,
            ),
        )
        restart_job_on = [{"event": event, "action": "RestartJob"} for event in ("PodEvicted", "PodFailed")]
        job.add_json_patch(
            cdk8s.JsonPatch.add(
                "/spec",
                {
                    "schedulerName": "volcano",
                    "queue": parameters.queue,
                    "minAvailable": parameters.nodes,
                    "maxRetry": 3,
                    "plugins": {
                        # A headless Service per job; workers resolve peers before they are Ready.
                        "svc": ["--publish-not-ready-addresses"],
                        # VC_TASK_INDEX in every pod: selects the replica's cache directory.
                        "env": [],
                    },
                    "tasks": [
                        {
                            "name": _TASK_NAME,
                            "replicas": parameters.nodes,
                            # Any lost worker breaks the collective: restart the whole job.
                            "maxRetry": 3,
                            "policies": restart_job_on,
                            "template": _pod_template(parameters, phase),
                        }
                    ],
                },
            )
        )
