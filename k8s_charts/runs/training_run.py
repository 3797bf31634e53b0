"""A distributed training run on Trainium: one Volcano Job, gang-scheduled, in the shape TorchX's
Kubernetes scheduler submits, whose pods precompile (once per graph key and cache) and train.

What a run is, is configuration (``TrainingRun``); how Trainium is wired is derived here from the
catalog and the cluster's facts: one pod per node taking every Neuron device and EFA interface,
``--nproc_per_node`` one worker per NeuronCore, the node group's label, the claim, the rendezvous.

Lifecycle (docs/runs.md#lifecycle):

- **Identity.** The Job is named ``<run>-<hash>``, the hash of everything rendered into it. Volcano
  refuses almost any change to a live Job's spec; a changed run is a new Job (its own output
  directory, its own precompile markers), and the deployment deletes the old one.
- **Attempts.** Every attempt (a new Job, or a Volcano RestartJob, which bumps the job's version)
  rendezvouses under its own id, ``<job>-<uid>-v<version>``, from Volcano's pod annotations through
  the downward API: torchrun closes a rendezvous whenever it exits, so a reused id fails at once.
- **Resume.** A retry resumes from the newest checkpoint in the run's output directory.
- **Fail fast.** A pod that cannot proceed (a data set failed to stage, a checksum is wrong, the
  compile cache is held by another run, Volcano's env plugin or annotations are missing) exits with ``CANNOT_PROCEED_EXIT_CODE``, which the Job's
  first policy turns into TerminateJob; any other failure restarts the whole gang, exactly
  ``retries`` times at most (``maxRetry`` is ``retries + 1``: cluster_facts/volcano_retries.py).
- **Scale-down.** Pods carry the cluster autoscaler's safe-to-evict "false": a node running a
  worker is never taken away under it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.dra import POD_DEVICE_CLAIM, NodeDevices
from cluster_facts.failure_recovery import (
    LUSTRE_DEAD_CLIENT_EVICTION_SECONDS,
    NODE_LOST_TAINT_KEYS,
    NODE_LOST_TOLERATION_SECONDS,
)
from cluster_facts.images import pinned_image_problem
from cluster_facts.instance_catalog import TrainiumInstanceType
from cluster_facts.kubernetes_names import (
    CANNOT_PROCEED_EXIT_CODE,
    DATA_MOUNT,
    DATASETS_ROOT,
    EFA_RESOURCE,
    NEURON_CACHE_DIR,
    NEURON_RESOURCE,
    NEURON_TAINT_KEY,
    NODE_GROUP_LABEL,
    POD_USER_ENVIRONMENT,
    RUNS_ROOT,
    SAFE_TO_EVICT_ANNOTATION,
    STUCK_MINUTES_ANNOTATION,
    TRAINING_PRIORITY_CLASS,
    VOLCANO_SCHEDULER,
    dataset_variable,
)
from cluster_facts.metadata_proxy import proxy_environment
from cluster_facts.pod_user import (
    POD_USER_DIR,
    POD_USER_FILES,
    POD_USER_VOLUME,
    pod_user_command,
    pod_user_init_container,
)
from cluster_facts.volcano_retries import volcano_max_retry
from k8s_charts.devices.device_claims import claim_template
from k8s_charts.imports import volcano_batch as vc
from k8s_charts.runs.dataset_staging import STAGING_ATTEMPTS, STAGING_DEADLINE_SECONDS, Dataset
from k8s_charts.runs.worker_script import (
    WORKER_SCRIPT_CONFIGMAP,
    WORKER_SCRIPT_DIR,
    WORKER_SCRIPT_MODE,
    WORKER_SCRIPT_VOLUME,
    worker_command,
)
from k8s_charts.shared.identity import spec_hash
from k8s_charts.shared.policy_exceptions import policy_exceptions

__all__ = [
    "DEVICE_CLAIM",
    "PROGRAM_DIR",
    "RUN_ID_MAX_LENGTH",
    "TrainingRun",
    "TrainingRunChart",
    "claim_template_name",
    "compile_key",
    "launcher_arguments",
    "program_config_map",
    "run_id",
]

_TASK = "worker"
# The Job's name is also its headless Service's (Volcano's svc plugin): a DNS label, and the pods'
# hostnames <job>-worker-<index> must stay within 63 characters.
RUN_ID_MAX_LENGTH = 48
_RUN_NAME = re.compile(r"[a-z]([a-z0-9-]*[a-z0-9])?")
_PYTHON_TARGET = "/opt/run/python"
PROGRAM_DIR = "/opt/run/program"
# A staging heartbeat older than this (with a failed attempt on record) means the staging pod
# died without recording it; longer than the Job's largest retry backoff (6 minutes).
HEARTBEAT_STALE_SECONDS = 15 * 60
# How long a pod waits for its replica's compile cache: another run's pods release it within their
# termination grace period, and a pod lost with its node holds its Lustre flock until the file
# system evicts that client (LUSTRE_DEAD_CLIENT_EVICTION_SECONDS). Past it, run_worker.sh ends the
# job only when another run holds the cache; this run's own lost pod's lock is left behind.
CACHE_LOCK_TIMEOUT_SECONDS = 300
assert CACHE_LOCK_TIMEOUT_SECONDS > LUSTRE_DEAD_CLIENT_EVICTION_SECONDS


@dataclass(frozen=True, kw_only=True)
class TrainingRun:
    """One distributed training run: what to run, where, and with what."""

    name: str
    instance: TrainiumInstanceType
    node_group: str
    nodes: int
    image: str
    namespace: str
    queue: str
    claim_name: str
    """The team's claim: its own directory of the file system, mounted at /data."""
    datasets_claim_name: str
    """The staged data sets, read-only, at /datasets (beside /data: never a mount inside the team's directory)."""
    script: str
    """What the launcher runs on every worker (a path in the image or on /data)."""
    script_args: tuple[str, ...] = ()
    """May name $(OUTPUT_DIR) and $(RUN_ID): Kubernetes expands them."""
    environment: Mapping[str, str] = field(default_factory=dict)
    datasets: tuple[Dataset, ...] = ()
    """Staged before any worker starts work; their markers are waited for."""
    verify_files: Mapping[str, str] = field(default_factory=dict)
    """Path -> SHA-256, checked by every worker before anything runs."""
    python_requirements: tuple[str, ...] = ()
    """pip requirement lines with --hash, installed into each pod (not onto the shared volume)."""
    precompile_args: tuple[str, ...] | None = None
    """None: no precompile phase; else appended to the launcher under neuron_parallel_compile."""
    resume_glob: str = ""
    resume_args: tuple[str, ...] = ()
    cacheset: str
    retries: int
    rendezvous_endpoint: str
    pod_labels: Mapping[str, str]
    run_as: int
    """The team's uid (and gid): owner of its directory, never root (root is squashed on Trainium nodes)."""
    program_files: Mapping[str, str] = field(default_factory=dict)
    """File name -> text of a program shipped with the run (the canary's), mounted read-only at
    ``PROGRAM_DIR`` from the ConfigMap ``<run id>-program``; every file is checked by its SHA-256
    like the run's other code. Empty: none."""
    stuck_minutes: int | None = None
    """The run's own limit for holding Trainium nodes without progress (the Job's annotation read by
    the gang watchdog); None: the cluster's. Not hashed into the run's id: a Job's annotations may
    change in place, so a new limit does not restart the run."""
    logical_core_size: int | None = None
    """Physical NeuronCores per logical one (``NEURON_LOGICAL_NC_CONFIG``), one worker per logical
    core; None: the instance type's default, and the variable is not set."""
    devices: NodeDevices | None = None
    """On a ``devices: dra`` node group: what each pod claims of its node (one connected set of
    Neuron devices, their EFA interfaces, the LNC), through the run's ResourceClaimTemplates (one, or
    two where one claim cannot hold the node: ``NodeDevices.claims``); None: the device plugins'
    extended resources."""

    def __post_init__(self) -> None:
        if not _RUN_NAME.fullmatch(self.name) or len(self.name) > RUN_ID_MAX_LENGTH - 9:
            raise ValueError(
                f"run name {self.name!r} must be a DNS label of at most {RUN_ID_MAX_LENGTH - 9} characters"
            )
        if self.nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {self.nodes}")
        if self.retries < 0:
            raise ValueError(f"retries must be at least 0, got {self.retries}")
        problem = pinned_image_problem(self.image)
        if problem is not None:
            raise ValueError(problem)
        if self.run_as < 1:
            raise ValueError(f"run_as must be a non-root uid, got {self.run_as}")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", self.cacheset):
            raise ValueError(f"cacheset {self.cacheset!r} may hold only letters, digits, '-' and '_'")
        self.instance.logical_cores(self.logical_core_size)  # a ValueError names the sizes it takes

    @property
    def processes_per_node(self) -> int:
        """``--nproc_per_node``: one worker per logical NeuronCore at the run's LNC."""
        return self.instance.logical_cores(self.logical_core_size)

    @property
    def cache_root(self) -> str:
        return f"{DATA_MOUNT}/{NEURON_CACHE_DIR}"


def compile_key(run: TrainingRun) -> str:
    """What the run's compiled graphs depend on, as 16 hex digits: two runs with the same key
    build the same graphs, so one's precompile serves the other (cluster_programs/run_worker.sh).

    The Neuron cache itself keys each graph by the compiler's version and the graph's hash; this
    key stands for "every graph of this run is in the cache" and covers what shapes those graphs:
    the image (compiler and framework versions), the instance type and node count (ranks per
    collective), the script, its arguments and files, its packages, its environment and the
    precompile's arguments. Not the run's name, team, retries or resume settings.
    """
    shaping = {
        "image": run.image,
        "instance_type": run.instance.name,
        "nodes": run.nodes,
        "processes_per_node": run.processes_per_node,
        "script": run.script,
        "script_args": list(run.script_args),
        "environment": dict(sorted(run.environment.items())),
        "verify_files": dict(sorted(_verified_files(run).items())),
        "python_requirements": list(run.python_requirements),
        "precompile_args": list(run.precompile_args or ()),
    }
    return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:16]


def launcher_arguments(run: TrainingRun) -> list[str]:
    """The launcher's argv, as TorchX's dist component writes it, with this attempt's rendezvous id.

    ``--role=`` is TorchX's ``--role ''`` as one word: neuron_parallel_compile takes the command as
    arguments that it may join into one string, and an empty argument would not survive that.
    """
    return [
        "python3", "-m", "torch.distributed.run",
        "--rdzv_backend", "etcd",
        "--rdzv_endpoint", run.rendezvous_endpoint,
        "--rdzv_id", "$(RDZV_ID)",
        "--nnodes", str(run.nodes),
        "--nproc_per_node", str(run.processes_per_node),
        "--tee", "3",
        "--role=",
        run.script,
        *run.script_args,
    ]  # fmt: skip


def _environment(
    run: TrainingRun, output_dir: str, run_id_value: str
) -> list[vc.JobSpecTasksTemplateSpecContainersEnv]:
    """The container's environment, in order: later values may name earlier ones as $(VAR)."""
    annotation = "metadata.annotations"
    downward = {
        # Volcano writes the job's identity (<job>-<uid>) and attempt on every pod it creates.
        "VC_JOB_GROUP": f"{annotation}['scheduling.k8s.io/group-name']",
        "VC_JOB_VERSION": f"{annotation}['volcano.sh/job-version']",
        # Each attempt records its nodes: the dashboard counts the replaced ones (run_worker.sh).
        "NODE_NAME": "spec.nodeName",
    }
    plain: dict[str, str] = {
        "RDZV_ID": "$(VC_JOB_GROUP)-v$(VC_JOB_VERSION)",
        "RUN_ID": run_id_value,
        "OUTPUT_DIR": output_dir,
        "NODES": str(run.nodes),
        # Collectives bootstrap over the pod's interface; data moves over EFA with device RDMA.
        "CCOM_SOCKET_IFNAME": "eth0",
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "FI_EFA_FORK_SAFE": "1",
        "NEURON_RT_RESET_CORES": "1",
        "XLA_TRANSFER_SEED_ASYNC": "1",
        # The team's uid has no passwd entry: a name and a writable home for tools that ask.
        **POD_USER_ENVIRONMENT,
        # Instance-metadata calls fail at once, nothing else is proxied (cluster_facts/metadata_proxy.py).
        **proxy_environment(job=run_id_value),
        **{dataset_variable(dataset.name): dataset.directory for dataset in run.datasets},
        # The runtime groups this many physical NeuronCores into each of the cores --nproc_per_node counts.
        **(
            {"NEURON_LOGICAL_NC_CONFIG": str(run.logical_core_size)}
            if run.logical_core_size is not None
            else {}
        ),
        **run.environment,
        # What cluster_programs/run_worker.sh reads.
        "REQUIRED_MARKERS": "\n".join(
            f"{dataset.marker} {dataset.staged_version}" for dataset in run.datasets
        ),
        "STAGING_ATTEMPTS": str(STAGING_ATTEMPTS),
        "HEARTBEAT_STALE_SECONDS": str(HEARTBEAT_STALE_SECONDS),
        # The staging Job's own deadline, plus its retries' backoff: past it, staging has ended.
        "WAIT_TIMEOUT_SECONDS": str(STAGING_DEADLINE_SECONDS + 1800),
        "VERIFY_FILES": "\n".join(f"{sha}  {path}" for path, sha in sorted(_verified_files(run).items())),
        "RUN_SCRIPT": run.script,
        "PYTHON_REQUIREMENTS": "\n".join(run.python_requirements),
        "PYTHON_TARGET": _PYTHON_TARGET,
        "NEURON_CACHE_ROOT": run.cache_root,
        "CACHESET": run.cacheset,
        "CACHE_LOCK_TIMEOUT_SECONDS": str(CACHE_LOCK_TIMEOUT_SECONDS),
        "PRECOMPILE_ARGS": " ".join(run.precompile_args) if run.precompile_args is not None else "",
        "COMPILE_KEY": compile_key(run),
        "RESUME_GLOB": run.resume_glob,
        "RESUME_ARGS": " ".join(run.resume_args),
        "CANNOT_PROCEED_EXIT_CODE": str(CANNOT_PROCEED_EXIT_CODE),
    }
    return [
        *(
            vc.JobSpecTasksTemplateSpecContainersEnv(
                name=name,
                value_from=vc.JobSpecTasksTemplateSpecContainersEnvValueFrom(
                    field_ref=vc.JobSpecTasksTemplateSpecContainersEnvValueFromFieldRef(field_path=path)
                ),
            )
            for name, path in downward.items()
        ),
        *(vc.JobSpecTasksTemplateSpecContainersEnv(name=name, value=value) for name, value in plain.items()),
    ]


def _verified_files(run: TrainingRun) -> dict[str, str]:
    """Path -> SHA-256 of what every worker checks before it runs: the run's data sets' single
    files (its code, when staged) and the files the run lists itself."""
    files = {dataset.path(remote.name): remote.sha256 for dataset in run.datasets for remote in dataset.files}
    shipped = {
        f"{PROGRAM_DIR}/{name}": hashlib.sha256(text.encode()).hexdigest()
        for name, text in run.program_files.items()
    }
    return {**files, **shipped, **run.verify_files}


def _container(run: TrainingRun, run_id_value: str) -> vc.JobSpecTasksTemplateSpecContainers:
    node = run.instance
    limit = vc.JobSpecTasksTemplateSpecContainersResourcesLimits.from_string
    request = vc.JobSpecTasksTemplateSpecContainersResourcesRequests.from_string
    return vc.JobSpecTasksTemplateSpecContainers(
        name="trainer",
        image=run.image,
        # cluster_programs/run_worker.sh from the team namespace's ConfigMap (k8s_charts/runs/worker_script.py),
        # not written into the pod: what it needs arrives as environment variables, the launcher as its
        # arguments ("$@").
        command=worker_command(),
        args=launcher_arguments(run),
        env=_environment(run, f"{RUNS_ROOT}/{run_id_value}", run_id_value),
        resources=vc.JobSpecTasksTemplateSpecContainersResources(
            # Every chip and EFA interface of the node: one pod per node, one worker per NeuronCore.
            # Extended resources are limits only; Kubernetes copies them to requests. On a DRA group
            # the pod's claim holds them (the run's ResourceClaimTemplate).
            limits=(
                None
                if run.devices is not None
                else {NEURON_RESOURCE: limit(str(node.chips)), EFA_RESOURCE: limit(str(node.efa_interfaces))}
            ),
            claims=(
                [
                    vc.JobSpecTasksTemplateSpecContainersResourcesClaims(name=name)
                    for name in run.devices.claims()
                ]
                if run.devices is not None
                else None
            ),
            # 7/8 of the node, the rest left to kubelet reservations and the DaemonSets. No cpu or
            # memory limits: the pod owns the node, and a cap would only throttle or OOM-kill a run.
            requests={
                "cpu": request(str(node.vcpus * 7 // 8)),
                "memory": request(f"{node.memory_gib * 7 // 8}Gi"),
            },
        ),
        volume_mounts=[
            vc.JobSpecTasksTemplateSpecContainersVolumeMounts(name="data", mount_path=DATA_MOUNT),
            vc.JobSpecTasksTemplateSpecContainersVolumeMounts(
                name="datasets", mount_path=DATASETS_ROOT, read_only=True
            ),
            vc.JobSpecTasksTemplateSpecContainersVolumeMounts(name="dshm", mount_path="/dev/shm"),
            vc.JobSpecTasksTemplateSpecContainersVolumeMounts(
                name=WORKER_SCRIPT_VOLUME, mount_path=WORKER_SCRIPT_DIR, read_only=True
            ),
            vc.JobSpecTasksTemplateSpecContainersVolumeMounts(name="python", mount_path=_PYTHON_TARGET),
            *(
                [
                    vc.JobSpecTasksTemplateSpecContainersVolumeMounts(
                        name="program", mount_path=PROGRAM_DIR, read_only=True
                    )
                ]
                if run.program_files
                else []
            ),
            # The image's passwd and group with the team's uid added (cluster_facts/pod_user.py).
            *(
                vc.JobSpecTasksTemplateSpecContainersVolumeMounts(
                    name=POD_USER_VOLUME, mount_path=path, sub_path=file, read_only=True
                )
                for path, file in POD_USER_FILES.items()
            ),
        ],
        security_context=vc.JobSpecTasksTemplateSpecContainersSecurityContext(
            allow_privilege_escalation=False,
            # Neuron devices and EFA need no capability: the device plugins hand the pod its device
            # nodes, and their modes (0666 from the Neuron driver's and rdma-core's udev rules) let any
            # uid open them; memory registration is bounded by RLIMIT_MEMLOCK, for root without
            # CAP_IPC_LOCK (not in the runtime's default set) exactly as for any other uid.
            capabilities=vc.JobSpecTasksTemplateSpecContainersSecurityContextCapabilities(drop=["ALL"]),
        ),
    )


def _pod_user_container(image: str) -> vc.JobSpecTasksTemplateSpecInitContainers:
    """Writes the pod's passwd and group files before the trainer starts (cluster_facts/pod_user.py)."""
    plain = pod_user_init_container(image)
    resources = plain["resources"]
    limit = vc.JobSpecTasksTemplateSpecInitContainersResourcesLimits.from_string
    request = vc.JobSpecTasksTemplateSpecInitContainersResourcesRequests.from_string
    return vc.JobSpecTasksTemplateSpecInitContainers(
        name=plain["name"],
        image=image,
        command=pod_user_command(),
        resources=vc.JobSpecTasksTemplateSpecInitContainersResources(
            limits={k: limit(v) for k, v in resources["limits"].items()},
            requests={k: request(v) for k, v in resources["requests"].items()},
        ),
        security_context=vc.JobSpecTasksTemplateSpecInitContainersSecurityContext(
            allow_privilege_escalation=False,
            capabilities=vc.JobSpecTasksTemplateSpecInitContainersSecurityContextCapabilities(drop=["ALL"]),
            read_only_root_filesystem=True,
        ),
        volume_mounts=[
            vc.JobSpecTasksTemplateSpecInitContainersVolumeMounts(
                name=POD_USER_VOLUME, mount_path=POD_USER_DIR
            )
        ],
    )


def _volumes(run: TrainingRun, run_id_value: str) -> list[vc.JobSpecTasksTemplateSpecVolumes]:
    """The pod's volumes: the team's claims, its user files, the worker script, shared memory,
    its Python packages and (when the run has one) its program."""
    volume = vc.JobSpecTasksTemplateSpecVolumes
    return [
        volume(
            name="data",
            persistent_volume_claim=vc.JobSpecTasksTemplateSpecVolumesPersistentVolumeClaim(
                claim_name=run.claim_name
            ),
        ),
        volume(
            name="datasets",
            persistent_volume_claim=vc.JobSpecTasksTemplateSpecVolumesPersistentVolumeClaim(
                claim_name=run.datasets_claim_name, read_only=True
            ),
        ),
        # The pod's passwd and group files, written by its init container.
        volume(
            name=POD_USER_VOLUME,
            empty_dir=vc.JobSpecTasksTemplateSpecVolumesEmptyDir(
                size_limit=vc.JobSpecTasksTemplateSpecVolumesEmptyDirSizeLimit.from_string("1Mi")
            ),
        ),
        # The worker script, once per team namespace (k8s_charts/runs/worker_script.py).
        volume(
            name=WORKER_SCRIPT_VOLUME,
            config_map=vc.JobSpecTasksTemplateSpecVolumesConfigMap(
                name=WORKER_SCRIPT_CONFIGMAP, default_mode=WORKER_SCRIPT_MODE
            ),
        ),
        # PyTorch data loaders share tensors through /dev/shm; the runtime's default is 64 MiB.
        volume(
            name="dshm",
            empty_dir=vc.JobSpecTasksTemplateSpecVolumesEmptyDir(medium="Memory"),
        ),
        # The run's Python packages, installed per pod: nothing shared can rewrite them.
        volume(
            name="python",
            empty_dir=vc.JobSpecTasksTemplateSpecVolumesEmptyDir(
                size_limit=vc.JobSpecTasksTemplateSpecVolumesEmptyDirSizeLimit.from_string("4Gi")
            ),
        ),
        *(
            [
                volume(
                    name="program",
                    config_map=vc.JobSpecTasksTemplateSpecVolumesConfigMap(
                        name=program_config_map(run_id_value), default_mode=0o444
                    ),
                )
            ]
            if run.program_files
            else []
        ),
    ]


def _tolerations() -> list[vc.JobSpecTasksTemplateSpecTolerations]:
    """The Neuron taint, and a minute's grace on a lost node."""
    return [
        vc.JobSpecTasksTemplateSpecTolerations(key=NEURON_TAINT_KEY, operator="Exists", effect="NoSchedule"),
        # A pod on a lost node goes a minute after the node is marked, not
        # the default five (cluster_facts/failure_recovery.py).
        *(
            vc.JobSpecTasksTemplateSpecTolerations(
                key=key,
                operator="Exists",
                effect="NoExecute",
                toleration_seconds=NODE_LOST_TOLERATION_SECONDS,
            )
            for key in NODE_LOST_TAINT_KEYS
        ),
    ]


def _pod_spec(run: TrainingRun, run_id_value: str) -> vc.JobSpecTasksTemplateSpec:
    """The pod of each replica: its user, node group, containers, device claims and volumes."""
    return vc.JobSpecTasksTemplateSpec(
        restart_policy="Never",
        # Training never calls the Kubernetes API.
        automount_service_account_token=False,
        # The runtime's default seccomp profile is what `docker run` gives the Neuron images.
        security_context=vc.JobSpecTasksTemplateSpecSecurityContext(
            # The team's own uid and gid: they own its directory (k8s_charts/runs/fsx_layout.py).
            run_as_non_root=True,
            run_as_user=run.run_as,
            run_as_group=run.run_as,
            # The package emptyDir is the group's; the FSx CSI driver's volumes
            # (no fsType) are left alone, and OnRootMismatch never walks a tree.
            fs_group=run.run_as,
            fs_group_change_policy="OnRootMismatch",
            seccomp_profile=vc.JobSpecTasksTemplateSpecSecurityContextSeccompProfile(type="RuntimeDefault"),
        ),
        node_selector={NODE_GROUP_LABEL: run.node_group},
        tolerations=_tolerations(),
        init_containers=[_pod_user_container(run.image)],
        containers=[_container(run, run_id_value)],
        resource_claims=(
            [
                vc.JobSpecTasksTemplateSpecResourceClaims(
                    name=name, resource_claim_template_name=claim_template_name(run, name)
                )
                for name in run.devices.claims()
            ]
            if run.devices is not None
            else None
        ),
        volumes=_volumes(run, run_id_value),
    )


def _task(run: TrainingRun, run_id_value: str, labels: Mapping[str, str]) -> vc.JobSpecTasks:
    """The Job's one task: a replica per node, its restart policies and its pod template."""
    restart_on = [
        vc.JobSpecTasksPolicies(event=event, action="RestartJob")
        for event in (vc.JobSpecTasksPoliciesEvent.POD_EVICTED, vc.JobSpecTasksPoliciesEvent.POD_FAILED)
    ]
    return vc.JobSpecTasks(
        name=_TASK,
        replicas=run.nodes,
        # Volcano's job webhook writes this default (replicas) at create; written out, a
        # second apply of the same run finds nothing to change.
        min_available=run.nodes,
        # Counts container restarts (none under restartPolicy Never); 0 would become 3.
        max_retry=volcano_max_retry(run.retries),
        # First match wins (Volcano's applyPolicies): the exit code before the events, so a
        # pod that cannot proceed ends the job instead of restarting it. Any other lost
        # worker breaks the collective: restart the whole job.
        policies=[
            vc.JobSpecTasksPolicies(exit_code=CANNOT_PROCEED_EXIT_CODE, action="TerminateJob"),
            *restart_on,
        ],
        template=vc.JobSpecTasksTemplate(
            metadata=vc.JobSpecTasksTemplateMetadata(
                labels={**run.pod_labels, **labels},
                annotations={**_POLICY_EXCEPTIONS, SAFE_TO_EVICT_ANNOTATION: "false"},
            ),
            spec=_pod_spec(run, run_id_value),
        ),
    )


def _job(scope: Construct, run: TrainingRun, run_id_value: str) -> vc.Job:
    labels = {"app.kubernetes.io/name": run.name, "app.kubernetes.io/instance": run_id_value}
    job_annotations = dict(_POLICY_EXCEPTIONS)
    if run.stuck_minutes is not None:
        job_annotations[STUCK_MINUTES_ANNOTATION] = str(run.stuck_minutes)
    return vc.Job(
        scope,
        "Job",
        metadata=cdk8s.ApiObjectMetadata(
            name=run_id_value, namespace=run.namespace, labels=labels, annotations=job_annotations
        ),
        spec=vc.JobSpec(
            scheduler_name=VOLCANO_SCHEDULER,
            queue=run.queue,
            # The teams' class (k8s_charts/addons/priority_classes.py); Volcano gives it to every pod.
            priority_class_name=TRAINING_PRIORITY_CLASS,
            min_available=run.nodes,
            # Volcano fails a Job when its retry count reaches maxRetry, so N restarts need N + 1
            # (cluster_facts/volcano_retries.py cites the v1.15.1 source); never 0, which its
            # webhook turns into 3.
            max_retry=volcano_max_retry(run.retries),
            plugins={
                # A headless Service per job; workers resolve peers before they are Ready. The plugin
                # also creates the NetworkPolicy by which the job's pods admit each other, and only
                # each other (k8s_charts/network/tenant_network.py): never pass --disable-network-policy.
                "svc": ["--publish-not-ready-addresses"],
                # VC_TASK_INDEX in every pod: selects the replica's cache directory.
                "env": [],
            },
            tasks=[_task(run, run_id_value, labels)],
        ),
    )


DEVICE_CLAIM = POD_DEVICE_CLAIM
"""The pod's claim (and the container's) of its Neuron devices on a DRA node group; a node whose
devices one claim cannot hold (trn2u) adds ``POD_EFA_CLAIM`` (cluster_facts/dra.py ``NodeDevices.claims``)."""


def claim_template_name(run: TrainingRun, claim: str = DEVICE_CLAIM) -> str:
    """``<run>-<claim>-<hash>`` (``<run>-devices-<hash>``, ``<run>-efa-<hash>``): the run's
    ResourceClaimTemplate of the pod's ``claim``, named after its spec (a template's spec cannot
    change in place; a changed claim is a new template, and with it a new Job)."""
    assert run.devices is not None
    spec = json.dumps(run.devices.claims()[claim], sort_keys=True)
    return f"{run.name}-{claim}-{hashlib.sha256(spec.encode()).hexdigest()[:8]}"


def _claim_templates(scope: Construct, run: TrainingRun, labels: Mapping[str, str]) -> None:
    """The run's ResourceClaimTemplates, one per claim of its pods: each pod of the Job gets a claim
    made from each, and loses them with the pod (a retry or a rerun gets new claims, allocated again)."""
    assert run.devices is not None
    for name, spec in run.devices.claims().items():
        claim_template(
            scope,
            "Devices" if name == DEVICE_CLAIM else f"Devices-{name}",
            name=claim_template_name(run, name),
            namespace=run.namespace,
            labels=labels,
            spec=spec,
        )


def run_id(run: TrainingRun) -> str:
    """``<name>-<hash>``: eight hex digits of a hash of everything the Job would hold."""
    try:
        unlimited = replace(run, stuck_minutes=None)
        digest = spec_hash(lambda scope, name: _job(scope, unlimited, name), kind="Job")
    except ValueError:
        raise ValueError(
            f"run {run.name!r} holds a deploy-time token; its identity must be known at synth"
        ) from None
    return f"{run.name}-{digest}"


# checkov looks for a batch/v1 Job's spec.template and, not finding one, reports its pod checks as
# failed; these pods are in spec.tasks[].template, which sets both (tests/k8s_charts/runs/test_training_run.py).
_NOT_A_BATCH_JOB = (
    "checkov reads a batch/v1 Job's spec.template; this Volcano Job's pod template in spec.tasks sets "
)
_POLICY_EXCEPTIONS = policy_exceptions(
    {
        "CKV_K8S_23": _NOT_A_BATCH_JOB + "runAsNonRoot with the team's uid",
        "CKV_K8S_40": _NOT_A_BATCH_JOB + "the team's uid, at least 10000",
        "CKV_K8S_29": _NOT_A_BATCH_JOB + "a pod security context",
        "CKV_K8S_31": _NOT_A_BATCH_JOB + "seccompProfile RuntimeDefault",
        "CKV_K8S_38": _NOT_A_BATCH_JOB + "automountServiceAccountToken false",
    }
)


def program_config_map(run_id_value: str) -> str:
    """The ConfigMap that carries a run's shipped program."""
    return f"{run_id_value}-program"


class TrainingRunChart(cdk8s.Chart):
    """The Volcano Job ``<run>-<hash>`` of ``run`` (and the ConfigMap of its shipped program, if any)."""

    def __init__(self, scope: Construct, id: str, *, run: TrainingRun) -> None:
        super().__init__(scope, id)
        self.run_id = run_id(run)
        if run.program_files:
            k8s.KubeConfigMap(
                self,
                "Program",
                metadata=k8s.ObjectMeta(
                    name=program_config_map(self.run_id),
                    namespace=run.namespace,
                    labels={"app.kubernetes.io/name": run.name, "app.kubernetes.io/instance": self.run_id},
                ),
                data=dict(run.program_files),
            )
        if run.devices is not None:
            _claim_templates(
                self, run, {"app.kubernetes.io/name": run.name, "app.kubernetes.io/instance": self.run_id}
            )
        _job(self, run, self.run_id)


def pod_command(job: Mapping[str, Any]) -> Sequence[str]:
    """The container's command and arguments of a rendered run Job (for tests and the review)."""
    [task] = job["spec"]["tasks"]
    [container] = task["template"]["spec"]["containers"]
    return [*container["command"], *container["args"]]
