"""A batch/v1 Job of the platform: runs once on the system nodes with the file system at /data (or
one of its directories at a path of its own).

Data set staging and the file system's layout are such Jobs. They share how they run: a pinned
image, no service-account token, the runtime's seccomp profile, no capabilities, a read-only root
file system, nothing may connect to them, the platform's priority class, and a few retries within
a deadline.

Only the layout runs as root: the Lustre root directory is root-owned, and the layout creates the
team directories and hands each to its team (and ``/datasets`` to ``PLATFORM_UID``). Staging runs
as ``PLATFORM_UID`` (``run_as``): an archive unpacked by it can hold no root-owned, setuid or device
file, whatever it carries. Root squash (constructs_trn/lustre_storage.py) maps root to nobody on
every client but the system nodes outside the Trainium zone: the Jobs run there (``root_zones``),
the one place root is root, and a place no team's pod can be (an admission policy holds every team
pod to its Trainium groups: k8s_charts/teams/tenant_admission.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.image_pins import PLATFORM_JOB_IMAGE
from cluster_facts.images import pinned_image_problem
from cluster_facts.kubernetes_names import DATA_MOUNT, PLATFORM_PRIORITY_CLASS
from k8s_charts.shared.isolation import deny_ingress
from k8s_charts.shared.policy_exceptions import (
    PINNED_PULL_POLICY,
    digest_exceptions,
    policy_exceptions,
    pull_policy_exceptions,
)
from k8s_charts.shared.resources import container_resources

__all__ = ["DEFAULT_IMAGE", "ZONE_LABEL", "platform_job"]

# Alpine from ECR Public (cluster_facts/image_pins.py, with its source): its busybox has everything
# the platform's scripts use.
DEFAULT_IMAGE = PLATFORM_JOB_IMAGE
# The well-known label the cloud provider sets on every node: its availability zone.
ZONE_LABEL = "topology.kubernetes.io/zone"

_PLATFORM_UID = (
    "the platform's uid on the file system, below the 10000 every team's uid starts at, so that no "
    "team can be given it"
)
_ROOT_WRITER = (
    "the first writer on a new Lustre file system, whose root directory is root-owned; it runs "
    "with no capabilities, no privilege escalation and a read-only root file system"
)


def _mounts(mount_path: str, sub_path: str | None, scratch_path: str | None) -> list[k8s.VolumeMount]:
    """The claim (or its ``sub_path``) at ``mount_path``, and the init containers' scratch, read-only."""
    return [
        k8s.VolumeMount(name="data", mount_path=mount_path, sub_path=sub_path),
        *([k8s.VolumeMount(name="scratch", mount_path=scratch_path, read_only=True)] if scratch_path else []),
    ]


def _main_container(
    image: str,
    *,
    command: list[str],
    arguments: Sequence[str],
    environment: Mapping[str, str],
    added: list[str],
    mounts: list[k8s.VolumeMount],
) -> k8s.Container:
    """The Job's container: no privilege, a read-only root, and only the capabilities ``added``."""
    return k8s.Container(
        name="main",
        image=image,
        # Pinned, from a repository that keeps its tags (k8s_charts/shared/policy_exceptions.py).
        image_pull_policy=PINNED_PULL_POLICY,
        command=command,
        args=list(arguments),
        env=[k8s.EnvVar(name=key, value=value) for key, value in environment.items()],
        resources=container_resources(
            # I/O bound; the memory limit leaves room for the page cache of the writes.
            requests={"cpu": "250m", "memory": "256Mi"},
            limits={"cpu": "1", "memory": "1Gi"},
        ),
        security_context=k8s.SecurityContext(
            allow_privilege_escalation=False,
            capabilities=k8s.Capabilities(drop=["ALL"], add=added or None),
            read_only_root_filesystem=True,
        ),
        volume_mounts=mounts,
    )


def _exceptions(image: str, run_as: int | None, added: Mapping[str, str]) -> dict[str, str]:
    """The Job's policy exceptions, each with its reason: root, a low uid, added capabilities, the image."""
    return policy_exceptions(
        {
            **({"CKV_K8S_23": _ROOT_WRITER, "CKV_K8S_40": _ROOT_WRITER} if run_as is None else {}),
            # Below 10000 so that no team's uid (at least 10000) can be the platform's.
            **({"CKV_K8S_40": _PLATFORM_UID} if run_as is not None and run_as < 10000 else {}),
            **({"CKV_K8S_25": "; ".join(f"{name}: {why}" for name, why in added.items())} if added else {}),
            **digest_exceptions(image),
            **pull_policy_exceptions(),
        }
    )


def _in_zones(root_zones: Sequence[str]) -> k8s.Affinity:
    """Only nodes in ``root_zones``: squashed elsewhere, root would be nobody and could create nothing."""
    return k8s.Affinity(
        node_affinity=k8s.NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s.NodeSelector(
                node_selector_terms=[
                    k8s.NodeSelectorTerm(
                        match_expressions=[
                            k8s.NodeSelectorRequirement(
                                key=ZONE_LABEL, operator="In", values=list(root_zones)
                            )
                        ]
                    )
                ]
            )
        )
    )


def _volumes(claim_name: str, scratch_path: str | None) -> list[k8s.Volume]:
    """The claim, and an emptyDir scratch for the init containers when there is a ``scratch_path``."""
    return [
        k8s.Volume(
            name="data",
            persistent_volume_claim=k8s.PersistentVolumeClaimVolumeSource(claim_name=claim_name),
        ),
        *([k8s.Volume(name="scratch", empty_dir=k8s.EmptyDirVolumeSource())] if scratch_path else []),
    ]


def _check_inputs(image: str, root_zones: Sequence[str]) -> None:
    """Refuse an unpinned image, or no zone whose nodes keep root on the file system."""
    problem = pinned_image_problem(image)
    if problem is not None:
        raise ValueError(problem)
    if not root_zones:
        raise ValueError("a platform Job needs the zones whose nodes keep root on the file system")


def _pod_security(run_as: int | None) -> k8s.PodSecurityContext:
    """The runtime's default seccomp profile; the uid and gid ``run_as`` (root when None)."""
    return k8s.PodSecurityContext(
        seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
        run_as_non_root=True if run_as is not None else None,
        run_as_user=run_as,
        run_as_group=run_as,
    )


def platform_job(
    scope: Construct,
    *,
    name: str,
    namespace: str,
    claim_name: str,
    labels: Mapping[str, str],
    script: str,
    script_name: str,
    arguments: Sequence[str] = (),
    environment: Mapping[str, str],
    backoff_limit: int,
    deadline_seconds: int,
    root_zones: Sequence[str],
    add_capabilities: Mapping[str, str] | None = None,
    image: str = DEFAULT_IMAGE,
    mount_path: str = DATA_MOUNT,
    sub_path: str | None = None,
    run_as: int | None = None,
    init_containers: Sequence[k8s.Container] = (),
    scratch_path: str | None = None,
    service_account: str | None = None,
) -> k8s.KubeJob:
    """The Job ``name`` running ``script`` under ``/bin/sh -c`` with ``arguments`` as "$@".

    ``add_capabilities``: capability -> why the Job needs it (its policy exception says so).
    ``sub_path``: only this directory of the claim, at ``mount_path`` (the whole claim when None).
    ``run_as``: a uid (and gid) to run as; None: root, the first writer on the file system.
    ``init_containers`` run first, each with a scratch directory (an emptyDir at ``scratch_path``) that
    the main container then reads; ``service_account``: the pod's, for an AWS identity through Pod
    Identity (no Kubernetes API token is mounted either way)."""
    added = dict(add_capabilities or {})
    _check_inputs(image, root_zones)
    container = _main_container(
        image,
        command=["/bin/sh", "-c", script, script_name],
        arguments=arguments,
        environment=environment,
        added=sorted(added),
        mounts=_mounts(mount_path, sub_path, scratch_path),
    )
    job = k8s.KubeJob(
        scope,
        "Job",
        metadata=k8s.ObjectMeta(
            name=name,
            namespace=namespace,
            labels=dict(labels),
            annotations=_exceptions(image, run_as, added),
        ),
        spec=k8s.JobSpec(
            backoff_limit=backoff_limit,
            active_deadline_seconds=deadline_seconds,
            # No ttlSecondsAfterFinished: the finished Job stays as the record that it ran.
            template=k8s.PodTemplateSpec(
                metadata=k8s.ObjectMeta(labels=dict(labels)),
                spec=k8s.PodSpec(
                    restart_policy="Never",
                    service_account_name=service_account,
                    automount_service_account_token=False,
                    enable_service_links=False,
                    security_context=_pod_security(run_as),
                    priority_class_name=PLATFORM_PRIORITY_CLASS,
                    # Squashed elsewhere, root would be nobody and could create nothing.
                    affinity=_in_zones(root_zones),
                    init_containers=list(init_containers) or None,
                    containers=[container],
                    volumes=_volumes(claim_name, scratch_path),
                ),
            ),
        ),
    )
    # The Job only writes files; nothing has a reason to connect to it.
    deny_ingress(scope, name=name, namespace=namespace, pod_labels=labels)
    return job
