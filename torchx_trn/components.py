"""The TorchX components of this cluster: distributed training on its Trainium nodes, one per Neuron
stack: ``trainium_ddp`` (xla: PyTorch/XLA, the cluster's default image) and ``trainium_native``
(native: TorchNeuron, an image of Neuron SDK 2.33 that the user names).

From the repository's root, with torchx installed (requirements-torchx.txt) and kubectl pointed at
the cluster (docs/torchx.md)::

    torchx run -s kubernetes -cfg queue=test,namespace=training \\
        torchx_trn/components.py:trainium_ddp --script my_train.py --nnodes 2 --claim fsx-<generation> \\
        --node_group trn1-32xl --uid <the team's uid>

What it derives, and from where, is in torchx_trn/trainium.py. This file only turns that into a
TorchX AppDef, whose role completes the Volcano Job TorchX's Kubernetes scheduler renders with what
the team admission policies require and the scheduler cannot render (``Role.pre_proc``, TorchX's
hook for a role to amend its scheduler's request, run on every dry run and submission).
TorchX runs this file's text with ``exec`` in a module of its own (the ``<file>:<function>`` form),
so its names land among TorchX's: keep them few. The component's annotations are the ``typing``
forms TorchX's argument parser reads (Optional, Dict), not ``X | None``.
"""

import os
import sys
from dataclasses import dataclass
from typing import Any, Dict, Optional  # noqa: UP035 - TorchX's parser reads the typing forms

from torchx import specs
from torchx.schedulers.kubernetes_scheduler import sanitize_for_serialization as _plain_data
from torchx.specs.finder import ComponentValidationException

# Its imports resolve through sys.path, which holds the torchx script's directory, not this
# repository: the documented commands run from the repository's root, so put that first.
if os.path.isfile(os.path.join("torchx_trn", "trainium.py")) and os.getcwd() not in sys.path:
    sys.path.insert(0, os.getcwd())
try:
    from torchx_trn import trainium as _trainium
except ImportError as _error:
    raise ComponentValidationException(
        f"run torchx from the root of the repository that holds torchx_trn/ ({_error})"
    ) from None


@dataclass
class _TrainiumRole(specs.Role):  # type: ignore[misc]  # torchx has no type information here
    """The role, and the Job it completes for the Kubernetes scheduler."""

    trainium: Optional[_trainium.TrainiumJob] = None  # noqa: UP045

    def pre_proc(self, scheduler: str, dryrun_info: Any) -> Any:
        if scheduler != "kubernetes" or self.trainium is None:
            return dryrun_info
        request = dryrun_info.request
        # Plain data (the pod templates are the Kubernetes client's objects); the scheduler prints
        # and submits plain data as it is.
        rendered = _plain_data(request.resource)
        try:
            request.resource = self.trainium.admitted_job(
                rendered, priority_class=rendered["spec"].get("priorityClassName")
            )
        except ValueError as error:
            raise ComponentValidationException(str(error)) from None
        return dryrun_info


def _team_values(team: str, **given: Any) -> Any:
    """The team's settings from its namespace's ConfigMap (kubectl's kubeconfig), checked against ``given``."""
    from kubernetes import client, config  # type: ignore[import-untyped]  # noqa: PLC0415 - only --team reads it

    from cluster_facts.kubernetes_names import TEAM_SETTINGS_CONFIGMAP  # noqa: PLC0415
    from torchx_trn.team_settings import resolve_team  # noqa: PLC0415

    try:
        config.load_kube_config()
        found = client.CoreV1Api().read_namespaced_config_map(TEAM_SETTINGS_CONFIGMAP, team)
    except Exception as error:  # noqa: BLE001 - no kubeconfig, no access, no such team: one line each
        reason = getattr(error, "reason", None) or str(error).splitlines()[0]
        raise ComponentValidationException(
            f"cannot read team {team}'s settings (ConfigMap {team}/{TEAM_SETTINGS_CONFIGMAP}): {reason}; "
            "check the kubeconfig (aws eks update-kubeconfig) and the team's name"
        ) from None
    try:
        return resolve_team(team, dict(found.data or {}), **given)
    except ValueError as error:
        raise ComponentValidationException(str(error)) from None


@dataclass(frozen=True)
class _Where:
    claim: str
    node_group: str
    uid: int
    instance_type: Optional[str]  # noqa: UP045
    node_claim: Optional[_trainium.NodeClaim]  # noqa: UP045


def _where(
    team: Optional[str],  # noqa: UP045
    *,
    claim: Optional[str],  # noqa: UP045
    node_group: Optional[str],  # noqa: UP045
    uid: Any,
    instance_type: Optional[str],  # noqa: UP045
) -> _Where:
    """Claim, node group, uid, instance type and (on a ``dra`` group) the node claim: from the team's
    settings with --team, else from the flags (the device plugins' path: only the settings know a
    group's devices)."""
    # TorchX's parser hands an Optional[int] over as the text given.
    uid = int(uid) if uid is not None else None
    node_claim = None
    if team is not None:
        resolved = _team_values(
            team, node_group=node_group, instance_type=instance_type, claim=claim, uid=uid
        )
        claim, node_group, uid = resolved.claim, resolved.node_group, resolved.uid
        instance_type, node_claim = resolved.instance_type, resolved.node_claim
    missing = [
        flag
        for flag, value in (("--claim", claim), ("--node_group", node_group), ("--uid", uid))
        if value is None
    ]
    if missing or claim is None or node_group is None or uid is None:
        raise ComponentValidationException(
            f"give --team <team> (its settings name the rest), or {', '.join(missing)} (docs/torchx.md)"
        )
    return _Where(claim, node_group, uid, instance_type, node_claim)


def trainium_ddp(
    *script_args: str,
    script: str,
    team: Optional[str] = None,  # noqa: UP045 - TorchX's parser reads typing.Optional
    claim: Optional[str] = None,  # noqa: UP045
    node_group: Optional[str] = None,  # noqa: UP045
    uid: Optional[int] = None,  # noqa: UP045
    nnodes: int = 1,
    instance_type: Optional[str] = None,  # noqa: UP045
    name: str = "trainium-ddp",
    image: str = _trainium.DEFAULT_IMAGE,
    cacheset: Optional[str] = None,  # noqa: UP045 - TorchX's parser reads typing.Optional
    max_retries: int = 0,
    env: Optional[Dict[str, str]] = None,  # noqa: UP006, UP045
) -> specs.AppDef:
    """Distributed data-parallel training on Trainium nodes: one pod per node with every Neuron
    device and EFA interface, one torchrun worker per NeuronCore, rendezvous at the namespace's etcd
    under an id of each attempt's own.

    Args:
        script_args: arguments to the script (after --); $(OUTPUT_DIR) and $(RUN_ID) are expanded in the pod
        script: the training script: a path in the image or under /data
        team: the team (its namespace): claim, node group, uid, instance type and devices come from its settings
        claim: without --team: the file system's claim in the namespace, fsx-<generation>
        node_group: the team's node group to run on (default with --team: its first)
        uid: without --team: the team's uid, owner of its directory
        nnodes: number of nodes (pods), each taking a whole node
        instance_type: the node group's instance type (with --team: checked against it; default trn1.32xlarge)
        name: the job's name; TorchX appends a unique suffix
        image: the container image, pinned by tag or digest
        cacheset: a Neuron compile cache to reuse across runs (never by two at once); default: the job's own
        max_retries: times Volcano restarts the whole job after a pod fails or is evicted
        env: environment variables for the script, NAME=value,NAME=value
    """
    where = _where(team, claim=claim, node_group=node_group, uid=uid, instance_type=instance_type)
    try:
        job = _trainium.trainium_job(
            script=script,
            script_args=script_args,
            claim=where.claim,
            node_group=where.node_group,
            uid=where.uid,
            nnodes=nnodes,
            instance_type=where.instance_type or _trainium.DEFAULT_INSTANCE_TYPE,
            image=image,
            cacheset=cacheset,
            max_retries=max_retries,
            environment=env or {},
            node_claim=where.node_claim,
        )
    except ValueError as error:
        raise ComponentValidationException(str(error)) from None
    return _app(job, name)


def trainium_native(
    *script_args: str,
    script: str,
    image: str,
    team: Optional[str] = None,  # noqa: UP045 - TorchX's parser reads typing.Optional
    claim: Optional[str] = None,  # noqa: UP045
    node_group: Optional[str] = None,  # noqa: UP045
    uid: Optional[int] = None,  # noqa: UP045
    nnodes: int = 1,
    instance_type: Optional[str] = None,  # noqa: UP045
    lnc: Optional[int] = None,  # noqa: UP045 - TorchX's parser reads typing.Optional
    name: str = "trainium-native",
    cacheset: Optional[str] = None,  # noqa: UP045
    max_retries: int = 0,
    env: Optional[Dict[str, str]] = None,  # noqa: UP006, UP045
) -> specs.AppDef:
    """Native PyTorch training (TorchNeuron, Neuron SDK 2.33) on trn2 nodes of the native stack: one
    pod per node with every Neuron device and EFA interface, one torchrun worker per logical
    NeuronCore; the script initializes the "neuron" process group and device itself.

    Args:
        script_args: arguments to the script (after --); $(OUTPUT_DIR) and $(RUN_ID) are expanded in the pod
        script: the training script: a path in the image or under /data
        image: a Neuron SDK 2.33 TorchNeuron image, pinned by tag or digest (sdk2.33.x in its tag)
        team: the team (its namespace): claim, node group, uid, instance type and devices come from its settings
        claim: without --team: the file system's claim in the namespace, fsx-<generation> (kubectl get pvc)
        node_group: the team's node group of the native stack to run on (default with --team: its first)
        uid: without --team: the team's uid, owner of its directory (teams[].uid, or derived from the team's name)
        nnodes: number of nodes (pods), each taking a whole node
        instance_type: the nodes' instance type (with --team: checked against the group's; default trn2.48xlarge)
        lnc: physical NeuronCores per logical one (1 or 2); default: the instance type's (2 on trn2), on a DRA group its claim's
        name: the job's name; TorchX appends a unique suffix
        cacheset: a Neuron compile cache to reuse across runs (never by two at once); default: the job's own
        max_retries: times Volcano restarts the whole job after a pod fails or is evicted
        env: environment variables for the script, NAME=value,NAME=value
    """
    where = _where(team, claim=claim, node_group=node_group, uid=uid, instance_type=instance_type)
    try:
        job = _trainium.trainium_job(
            script=script,
            script_args=script_args,
            claim=where.claim,
            node_group=where.node_group,
            uid=where.uid,
            nnodes=nnodes,
            instance_type=where.instance_type or _trainium.DEFAULT_NATIVE_INSTANCE_TYPE,
            image=image,
            cacheset=cacheset,
            max_retries=max_retries,
            environment=env or {},
            stack="native",
            logical_core_size=int(lnc) if lnc is not None else None,
            node_claim=where.node_claim,
        )
    except ValueError as error:
        raise ComponentValidationException(str(error)) from None
    return _app(job, name)


def _app(job: _trainium.TrainiumJob, name: str) -> specs.AppDef:
    role = _TrainiumRole(
        trainium=job,
        name="worker",
        image=job.image,
        entrypoint="python3",
        args=job.command(job_id=specs.macros.app_id)[1:],
        num_replicas=job.nnodes,
        resource=specs.Resource(
            cpu=job.cpu,
            gpu=0,
            memMB=job.memory_mb,
            devices=job.devices,
            capabilities=job.node_selector,
        ),
        env=job.pod_environment(job_id=specs.macros.app_id, replica=specs.macros.replica_id),
        max_retries=job.volcano_max_retries,
        retry_policy=specs.RetryPolicy.APPLICATION,
        mounts=[
            specs.VolumeMount(src=mount.claim, dst_path=mount.path, read_only=mount.read_only)
            for mount in job.mounts
        ],
    )
    return specs.AppDef(name=name, roles=[role])
