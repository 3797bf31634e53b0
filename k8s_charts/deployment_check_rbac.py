"""What the pipeline's post-deployment check may do in Kubernetes: get and list nodes, and read the
cluster autoscaler's Deployment and status ConfigMap; nothing else.

Its IAM role reaches the cluster through an EKS access entry in the group ``DEPLOYMENT_CHECK_GROUP``
(constructs_trn/deployment_check_role.py), with no access policy: AmazonEKSViewPolicy cannot read
nodes, and AmazonEKSAdminViewPolicy would read Secrets too. This chart binds that group to a
ClusterRole with just the node reads the check makes, and a Role in the autoscaler's namespace that
reads those two objects by name.

When the pipeline runs the fabric check (``fabric_check_jobs``), a Role in the checks' namespace
also lets it create Volcano Jobs, get and delete those jobs by name, and read the launcher pods'
status and log by name: what running a check, waiting for it and reading its verdict takes.

RBAC cannot name an object that does not exist yet, so ``create`` is for any Volcano Job: whoever
holds the check's role could otherwise run any image, privileged, on the nodes' files, in the
platform namespace. A ValidatingAdmissionPolicy, bound before the Role grants anything (same
manifest, earlier in it), fences that group's CREATE and UPDATE of Volcano Jobs in every namespace
to the rendered fabric-check Jobs (``FabricCheckJob``, read from them): one of their names, in
their namespace, every container one of their images, no volume (Job or pod), no host network,
PID or IPC namespace, no privileged container or added capability, no Secret in the environment,
and no service account but the one the rendered Job names (none: no token mounted). Volcano's
mutating webhook defaults fields (task names, minAvailable, maxRetry, plugins) before validation,
so the policy judges these fields, never the whole spec.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.autoscaling import AUTOSCALER_NAME, AUTOSCALER_NAMESPACE, AUTOSCALER_STATUS_CONFIGMAP
from k8s_charts.admission_policy import admission_policy, cel_list, cel_string

__all__ = ["DeploymentCheckRbacChart", "FabricCheckJob", "fabric_check_job", "job_fence_name"]

_VOLCANO_JOB = ("batch.volcano.sh", "v1alpha1", "Job")


@dataclass(frozen=True)
class FabricCheckJob:
    """What the admission policy lets the check create: one rendered fabric-check Job's name and
    namespace, its containers' images, its pods' service accounts and added capabilities."""

    name: str
    namespace: str
    images: tuple[str, ...]
    service_accounts: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()


def _pod_specs(manifest: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [task["template"]["spec"] for task in manifest["spec"]["tasks"]]


def fabric_check_job(manifest: Mapping[str, Any]) -> FabricCheckJob:
    """The fence's values read from a rendered fabric-check Job (k8s_charts/fabric_check.py), so the
    policy admits exactly what the synth rendered."""
    group, _, version = manifest["apiVersion"].partition("/")
    if (group, version, manifest["kind"]) != _VOLCANO_JOB:
        raise ValueError(
            f"fabric_check_job: {manifest['kind']} {manifest['apiVersion']} is not a Volcano Job"
        )
    pods = _pod_specs(manifest)
    containers = [
        container
        for pod in pods
        for key in ("initContainers", "containers")
        for container in pod.get(key, [])
    ]
    return FabricCheckJob(
        name=manifest["metadata"]["name"],
        namespace=manifest["metadata"]["namespace"],
        images=tuple(dict.fromkeys(container["image"] for container in containers)),
        service_accounts=tuple(
            dict.fromkeys(pod["serviceAccountName"] for pod in pods if pod.get("serviceAccountName"))
        ),
        capabilities=tuple(
            dict.fromkeys(
                capability
                for container in containers
                for capability in container.get("securityContext", {}).get("capabilities", {}).get("add", [])
            )
        ),
    )


def job_fence_name(group: str) -> str:
    """The ValidatingAdmissionPolicy (and binding) that fences ``group``'s Volcano Jobs."""
    return f"{group}-volcano-jobs"


def _cel_map(entries: Mapping[str, Sequence[str]]) -> str:
    """A CEL map from names to lists of strings (no empty list: Kubernetes' CEL types literals)."""
    return (
        "{"
        + ", ".join(f"{cel_string(key)}: {cel_list(values)}" for key, values in entries.items() if values)
        + "}"
    )


def _field_is(obj: str, field: str, value: str) -> str:
    """CEL: ``obj.field`` is set and equals the literal ``value`` (``true``, a quoted string)."""
    return f"(has({obj}.{field}) && {obj}.{field} == {value})"


def _each_container(condition: str) -> str:
    """CEL: ``condition`` (on ``c``) holds for every container and init container of every task."""
    return (
        "variables.pods.all(p, "
        + " && ".join(
            f"(has(p.{key}) ? p.{key} : []).all(c, {condition})" for key in ("containers", "initContainers")
        )
        + ")"
    )


def _fence_spec(*, group: str, jobs: Sequence[FabricCheckJob]) -> dict[str, Any]:
    """The policy's spec: members of ``group`` may create and update only the Volcano Jobs ``jobs``."""
    names = [job.name for job in jobs]
    namespaces = sorted({job.namespace for job in jobs})
    capabilities = sorted({capability for job in jobs for capability in job.capabilities})
    security = "c.securityContext"
    variables = [
        {"name": "name", "expression": "has(object.metadata.name) ? object.metadata.name : ''"},
        # The named Job's images and service accounts (none for a name that is not a check's).
        {"name": "imagesByJob", "expression": _cel_map({job.name: job.images for job in jobs})},
        {
            "name": "images",
            "expression": "variables.name in variables.imagesByJob ? variables.imagesByJob[variables.name] : []",
        },
        {
            "name": "serviceAccountsByJob",
            "expression": _cel_map({job.name: job.service_accounts for job in jobs}),
        },
        {
            "name": "serviceAccounts",
            "expression": "variables.name in variables.serviceAccountsByJob"
            " ? variables.serviceAccountsByJob[variables.name] : []",
        },
        {
            # Every task's pod template spec (a malformed one is an empty map, refused below).
            "name": "pods",
            "expression": "has(object.spec) && has(object.spec.tasks) ? object.spec.tasks.map(t,"
            " has(t.template) && has(t.template.spec) ? t.template.spec : {}) : []",
        },
    ]

    def refuse(expression: str, message: str) -> dict[str, str]:
        return {
            "expression": expression,
            "message": f"{group} may only create the fabric checks: {message}",
            "reason": "Forbidden",
        }

    no_host = " && ".join(
        f"!{_field_is('p', field, 'true')}" for field in ("hostNetwork", "hostPID", "hostIPC")
    )
    unprivileged = (
        f"!has(c.securityContext) || (!{_field_is(security, 'privileged', 'true')}"
        f" && !{_field_is(security, 'procMount', cel_string('Unmasked'))}"
        f" && (!has({security}.capabilities) || !has({security}.capabilities.add)"
        f" || {security}.capabilities.add.all(x, x in {cel_list(capabilities)})))"
    )
    no_secrets = (
        "(!has(c.env) || c.env.all(e, !has(e.valueFrom) || !has(e.valueFrom.secretKeyRef)))"
        " && (!has(c.envFrom) || c.envFrom.all(f, !has(f.secretRef)))"
    )
    identity = (
        "variables.pods.all(p, (has(p.serviceAccountName) || has(p.serviceAccount))"
        " ? ((!has(p.serviceAccountName) || p.serviceAccountName in variables.serviceAccounts)"
        " && (!has(p.serviceAccount) || p.serviceAccount in variables.serviceAccounts))"
        f" : {_field_is('p', 'automountServiceAccountToken', 'false')})"
    )
    validations = [
        refuse(f"variables.name in {cel_list(names)}", f"a Volcano Job named {', '.join(names)}"),
        refuse(
            f"has(request.namespace) && request.namespace in {cel_list(namespaces)}",
            f"in namespace {', '.join(namespaces)}",
        ),
        refuse(
            "size(variables.pods) > 0 && variables.pods.all(p, size(p) > 0)",
            "a Job whose every task has a pod template",
        ),
        refuse(
            _each_container("has(c.image) && c.image in variables.images"),
            "every container's image one of the check's",
        ),
        refuse(
            "(!has(object.spec.volumes) || size(object.spec.volumes) == 0)"
            " && variables.pods.all(p, !has(p.volumes) || size(p.volumes) == 0)",
            "no volume (the checks mount none: a volume could mount the node's files, a Secret or a claim)",
        ),
        refuse(f"variables.pods.all(p, {no_host})", "no host network, PID or IPC namespace"),
        refuse(
            "variables.pods.all(p, !has(p.ephemeralContainers)) && " + _each_container(unprivileged),
            "no privileged container, unmasked /proc or added capability"
            + (f" beyond {', '.join(capabilities)}" if capabilities else ""),
        ),
        refuse(_each_container(no_secrets), "no Secret in a container's environment"),
        refuse(
            identity,
            "no service account but the check's own (a pod without one mounts no token)",
        ),
    ]
    return {
        # An error in an expression refuses the request rather than letting it through.
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [_VOLCANO_JOB[0]],
                    # Any version Volcano serves now or later; subresources too (the check needs none).
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["jobs", "jobs/*"],
                    # The server's default, written out: without it every apply patches the rule.
                    "scope": "*",
                }
            ]
        },
        "matchConditions": [
            {
                "name": "the-deployment-check",
                "expression": f"has(request.userInfo.groups) && {cel_string(group)} in request.userInfo.groups",
            }
        ],
        "variables": variables,
        "validations": validations,
    }


class DeploymentCheckRbacChart(cdk8s.Chart):
    """A ClusterRole named ``group`` that reads nodes and a Role that reads the autoscaler's health,
    both bound to the Kubernetes group ``group``."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        group: str,
        fabric_check_jobs: Sequence[FabricCheckJob] = (),
        fabric_check_namespace: str = "",
    ) -> None:
        super().__init__(scope, id)
        k8s.KubeClusterRole(
            self,
            "ClusterRole",
            metadata=k8s.ObjectMeta(name=group),
            rules=[k8s.PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get", "list"])],
        )
        k8s.KubeClusterRoleBinding(
            self,
            "ClusterRoleBinding",
            metadata=k8s.ObjectMeta(name=group),
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=group),
            subjects=[k8s.Subject(api_group="rbac.authorization.k8s.io", kind="Group", name=group)],
        )
        k8s.KubeRole(
            self,
            "AutoscalerReader",
            metadata=k8s.ObjectMeta(name=group, namespace=AUTOSCALER_NAMESPACE),
            rules=[
                k8s.PolicyRule(
                    api_groups=["apps"],
                    resources=["deployments"],
                    resource_names=[AUTOSCALER_NAME],
                    verbs=["get"],
                ),
                k8s.PolicyRule(
                    api_groups=[""],
                    resources=["configmaps"],
                    resource_names=[AUTOSCALER_STATUS_CONFIGMAP],
                    verbs=["get"],
                ),
            ],
        )
        k8s.KubeRoleBinding(
            self,
            "AutoscalerReaderBinding",
            metadata=k8s.ObjectMeta(name=group, namespace=AUTOSCALER_NAMESPACE),
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=group),
            subjects=[k8s.Subject(api_group="rbac.authorization.k8s.io", kind="Group", name=group)],
        )
        if not fabric_check_jobs:
            return
        if not fabric_check_namespace:
            raise ValueError("DeploymentCheckRbacChart: fabric_check_jobs need fabric_check_namespace")
        elsewhere = [job.name for job in fabric_check_jobs if job.namespace != fabric_check_namespace]
        if elsewhere:
            raise ValueError(
                f"DeploymentCheckRbacChart: fabric check jobs {', '.join(elsewhere)} are not in "
                f"{fabric_check_namespace}"
            )
        # The fence first: a Role that grants create must never be in place without it.
        admission_policy(
            self,
            name=job_fence_name(group),
            labels={"app.kubernetes.io/name": job_fence_name(group)},
            spec=_fence_spec(group=group, jobs=fabric_check_jobs),
            binding_spec={"validationActions": ["Deny"]},
        )
        jobs = [job.name for job in fabric_check_jobs]
        # Volcano names a task's pods <job>-<task>-<index>: the launcher is <job>-launcher-0.
        launchers = [f"{job}-launcher-0" for job in jobs]
        k8s.KubeRole(
            self,
            "FabricCheckRunner",
            metadata=k8s.ObjectMeta(name=group, namespace=fabric_check_namespace),
            rules=[
                # RBAC cannot name an object that does not exist yet: create is for any name, and
                # the admission policy above admits only the rendered fabric checks.
                k8s.PolicyRule(api_groups=["batch.volcano.sh"], resources=["jobs"], verbs=["create"]),
                k8s.PolicyRule(
                    api_groups=["batch.volcano.sh"],
                    resources=["jobs"],
                    resource_names=jobs,
                    verbs=["get", "delete"],
                ),
                k8s.PolicyRule(
                    api_groups=[""], resources=["pods", "pods/log"], resource_names=launchers, verbs=["get"]
                ),
            ],
        )
        k8s.KubeRoleBinding(
            self,
            "FabricCheckRunnerBinding",
            metadata=k8s.ObjectMeta(name=group, namespace=fabric_check_namespace),
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=group),
            subjects=[k8s.Subject(api_group="rbac.authorization.k8s.io", kind="Group", name=group)],
        )
