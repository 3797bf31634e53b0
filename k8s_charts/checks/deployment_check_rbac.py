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

When the pipeline runs the canary in the stage (``canary``: ``waves[].environments[].canary``), a
Role in the canary's team namespace lets it create Volcano Jobs and ConfigMaps, get and delete the
canary's Job and delete its ConfigMap by name, list pods and events and read its pods' logs by
name, and a Role in the platform namespace lets it read TensorBoard through the API server's service
proxy (``get`` on ``services/proxy`` of that one Service and port): what ``operator_tools/canary.py`` calls.

RBAC cannot name an object that does not exist yet, so ``create`` is for any Volcano Job (and, for
the canary, any ConfigMap): whoever holds the check's role could otherwise run any image,
privileged, on the nodes' files, in the platform namespace, or any code as a team's uid on its
data. A ValidatingAdmissionPolicy, bound before the Roles grant anything (same manifest, earlier in
it), fences that group's CREATE and UPDATE of Volcano Jobs in every namespace to the rendered Jobs
(``FabricCheckJob``, read from the fabric checks' and the canary's rendered Jobs): one of their
names, in that Job's namespace, every container one of its images, no Job-level volume, each task's
pod volumes and security context and each container's command, arguments, environment, mounts,
working directory and security context exactly as rendered, no host network, PID or IPC namespace,
no privileged container or added capability, no Secret in the environment, no service account
but the one the rendered Job names (none: no token mounted); and exactly the rendered queue,
priority class, node selector and tolerations (no nodeName or affinity), labels of the Job and of
each task's pods, tasks, replicas and minAvailable, with no runtime class or host aliases. What
stays open (docs/security.md): fields pinned by neither, such as the containers' resources, probes
and ports and the annotations of the Job and its pods. A second policy fences its CREATE and
UPDATE of ConfigMaps to the canary's program ConfigMap: its name, in its namespace, exactly its
rendered data and no binary data. Volcano's mutating webhook (v1.15.1 mutate_job.go) defaults task
names, minAvailable, maxRetry and plugins and writes the tasks back through its Go types before
validation: the policy judges the pinned fields, never the whole spec, and compares an environment
variable's empty value as absent (Go's ``omitempty`` drops it); the rendered Job must hold no other
value that re-marshalling would drop (``fabric_check_job`` refuses one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.autoscaling import AUTOSCALER_NAME, AUTOSCALER_NAMESPACE, AUTOSCALER_STATUS_CONFIGMAP
from k8s_charts.shared.admission_policy import (
    admission_policy,
    cel_list,
    cel_string,
    core_match_constraints,
    refuse,
)

__all__ = [
    "CanaryAccess",
    "DeploymentCheckRbacChart",
    "FabricCheckJob",
    "FabricCheckTask",
    "canary_access",
    "cel_literal",
    "config_map_fence_name",
    "fabric_check_job",
    "job_fence_name",
]

_VOLCANO_JOB = ("batch.volcano.sh", "v1alpha1", "Job")
# What the fence holds each container and each task's pod to, exactly as rendered.
_CONTAINER_PINS = ("command", "args", "envFrom", "volumeMounts", "workingDir", "securityContext")
_POD_PINS = ("volumes", "securityContext")
_EMPTY = {
    "command": "[]",
    "args": "[]",
    "envFrom": "[]",
    "volumeMounts": "[]",
    "volumes": "[]",
    "workingDir": "''",
}


@dataclass(frozen=True)
class FabricCheckJob:
    """What the admission policy lets the check create: one rendered Job's (a fabric check's or the
    canary's) name and namespace, its containers' images, its pods' service accounts and added
    capabilities, its queue, priority class, labels, minAvailable and ``tasks``
    (``FabricCheckTask``), and ``pins``: per task, its pod's volumes and security context and, per
    container, the fields ``_CONTAINER_PINS`` and the environment, as rendered
    (``fabric_check_job``). A Job without pins is admitted with no task at all."""

    name: str
    namespace: str
    images: tuple[str, ...]
    service_accounts: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    queue: str = ""
    priority_class: str = ""
    """The Job's priorityClassName ('' for none); its pod templates may name no other."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """The Job's labels, exactly."""
    min_available: int = 0
    tasks: tuple[FabricCheckTask, ...] = ()
    pins: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class FabricCheckTask:
    """One task of a rendered Job (a fabric check's or the canary's): what the fence holds it to,
    exactly."""

    name: str
    replicas: int
    labels: Mapping[str, str]
    """The pod template's labels."""
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class CanaryAccess:
    """What the pipeline's canary creates and reads (operator_tools/canary.py), read from its rendered objects."""

    job: FabricCheckJob
    config_map: str
    config_map_data: Mapping[str, str]
    pods: tuple[str, ...]
    """Its pods' names (Volcano names them <job>-<task>-<index>): whose logs it reads."""
    tensorboard_namespace: str
    tensorboard_proxy: str
    """The Service and port the canary reads TensorBoard through (``<service>:<port>``)."""


def canary_access(
    objects: Sequence[Mapping[str, Any]], *, tensorboard_namespace: str, tensorboard_proxy: str
) -> CanaryAccess:
    """From the canary's rendered objects (cluster_plan/canary_run.py ``canary_manifests``: its ConfigMap
    and its Volcano Job), so that RBAC and the fences name exactly what the canary creates."""
    [config_map] = [obj for obj in objects if obj["kind"] == "ConfigMap"]
    [manifest] = [obj for obj in objects if obj["kind"] == "Job"]
    job = fabric_check_job(manifest)
    if config_map["metadata"]["namespace"] != job.namespace:
        raise ValueError("canary_access: the canary's ConfigMap and Job are in different namespaces")
    if config_map.get("binaryData"):
        raise ValueError("canary_access: the fence admits no binary data")
    return CanaryAccess(
        job=job,
        config_map=config_map["metadata"]["name"],
        config_map_data=dict(config_map.get("data") or {}),
        pods=tuple(
            f"{job.name}-{task['name']}-{index}"
            for task in manifest["spec"]["tasks"]
            for index in range(task["replicas"])
        ),
        tensorboard_namespace=tensorboard_namespace,
        tensorboard_proxy=tensorboard_proxy,
    )


def _pod_specs(manifest: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [task["template"]["spec"] for task in manifest["spec"]["tasks"]]


def fabric_check_job(manifest: Mapping[str, Any]) -> FabricCheckJob:
    """The fence's values read from a rendered fabric-check Job (k8s_charts/checks/fabric_check.py), so the
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
    tasks = []
    for task in manifest["spec"]["tasks"]:
        spec = task["template"]["spec"]
        if (
            spec.get("affinity")
            or spec.get("nodeName")
            or spec.get("runtimeClassName")
            or spec.get("hostAliases")
        ):
            raise ValueError(
                f"fabric_check_job: the fence takes no affinity, nodeName, runtime class or host aliases ({task['name']})"
            )
        # Compared exactly, tolerationSeconds (a number) included: ``cel_literal`` types mixed values.
        tolerations = tuple(dict(toleration) for toleration in spec.get("tolerations", []))
        tasks.append(
            FabricCheckTask(
                name=task["name"],
                replicas=task["replicas"],
                labels=dict(task["template"].get("metadata", {}).get("labels", {})),
                node_selector=dict(spec.get("nodeSelector", {})),
                tolerations=tolerations,
            )
        )
    return FabricCheckJob(
        queue=manifest["spec"].get("queue", ""),
        priority_class=manifest["spec"].get("priorityClassName", ""),
        labels=dict(manifest["metadata"].get("labels", {})),
        min_available=manifest["spec"].get("minAvailable", 0),
        tasks=tuple(tasks),
        name=manifest["metadata"]["name"],
        namespace=manifest["metadata"]["namespace"],
        pins={task["name"]: _pod_pins(task["template"]["spec"]) for task in manifest["spec"]["tasks"]},
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


def _env(container: Mapping[str, Any]) -> list[list[Any]]:
    """The environment as the fence compares it: (name, value, valueFrom), an empty value as none."""
    return [[e["name"], e.get("value", ""), dict(e.get("valueFrom") or {})] for e in container.get("env", [])]


def _go_stable(value: Any, where: str) -> None:
    """Refuse what Volcano's write-back through Go types would drop (an empty string, list or map,
    a false ``readOnly``), which an exact comparison would then never find."""
    if value in ("", [], {}) or (where.endswith(".readOnly") and value is False):
        raise ValueError(f"fabric_check_job: {where} is {value!r}, which Volcano's webhook would drop")
    if isinstance(value, Mapping):
        for key, item in value.items():
            _go_stable(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _go_stable(item, f"{where}[{index}]")


def _pod_pins(spec: Mapping[str, Any]) -> dict[str, Any]:
    pins: dict[str, Any] = {key: spec[key] for key in _POD_PINS if key in spec}
    containers: dict[str, Any] = {}
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        present = {key: container[key] for key in _CONTAINER_PINS if key in container}
        for key, item in present.items():
            _go_stable(item, f"{container['name']}.{key}")
        # Absent fields as the fence reads them from a request (``_EMPTY``); the security context
        # must be absent there too, so it is pinned only when rendered.
        absent = {
            key: "" if key == "workingDir" else [] for key in _CONTAINER_PINS if key != "securityContext"
        }
        containers[container["name"]] = {**absent, **present, "env": _env(container)}
    for key, item in pins.items():
        _go_stable(item, key)
    return {**pins, "containers": containers}


def job_fence_name(group: str) -> str:
    """The ValidatingAdmissionPolicy (and binding) that fences ``group``'s Volcano Jobs."""
    return f"{group}-volcano-jobs"


def config_map_fence_name(group: str) -> str:
    """The ValidatingAdmissionPolicy (and binding) that fences ``group``'s ConfigMaps (the canary's)."""
    return f"{group}-config-maps"


def _cel_quoted(value: str) -> str:
    """``value`` as a double-quoted CEL string literal, with CEL's escapes (any text)."""
    escaped = []
    for char in value:
        if char in ('"', "\\"):
            escaped.append("\\" + char)
        elif char == "\n":
            escaped.append("\\n")
        elif char == "\t":
            escaped.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def cel_literal(value: Any) -> str:
    """A CEL literal of JSON-like ``value``. Every element of a list and value of a map is ``dyn``:
    the API server's CEL checker (cel-go) refuses a literal whose elements differ in type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _cel_quoted(value)
    if isinstance(value, Mapping):
        return (
            "{" + ", ".join(f"{_cel_quoted(str(k))}: dyn({cel_literal(v)})" for k, v in value.items()) + "}"
        )
    if isinstance(value, list | tuple):
        return "[" + ", ".join(f"dyn({cel_literal(item)})" for item in value) + "]"
    raise ValueError(f"cel_literal: {value!r} has no CEL literal here")


def _cel_map(entries: Mapping[str, Sequence[str]]) -> str:
    """A CEL map from names to lists of strings (no empty list: Kubernetes' CEL types literals)."""
    return (
        "{"
        + ", ".join(f"{cel_string(key)}: {cel_list(values)}" for key, values in entries.items() if values)
        + "}"
    )


def _lookup(entries: Mapping[str, object], key: str, empty: str) -> str:
    """CEL: ``entries[key]`` (a literal map; entries whose value is empty are left out) or ``empty``."""
    kept = {k: v for k, v in entries.items() if v or isinstance(v, int)}
    if not kept:
        return empty
    literal = cel_literal(kept)
    return f"({key} in {literal} ? {literal}[{key}] : {empty})"


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


def _pins_hold(pod: str, pins: str) -> str:
    """CEL: the pod spec ``pod`` matches the pins ``pins`` (a ``_pod_pins`` value) exactly."""
    container = f"{pins}.containers[c.name]"
    fields = " && ".join(
        f"(has(c.{key}) ? c.{key} : {_EMPTY.get(key, '{}')}) == {container}.{key}"
        for key in _CONTAINER_PINS
        if key != "securityContext"
    )
    environment = (
        "(has(c.env) ? c.env : []).map(e, [dyn(has(e.name) ? e.name : ''), dyn(has(e.value) ? e.value : ''),"
        " dyn(has(e.valueFrom) ? e.valueFrom : {})])"
    )
    each = (
        f"has(c.name) && c.name in {pins}.containers"
        f" && ('securityContext' in {container} ? has(c.securityContext) && c.securityContext == {container}.securityContext"
        " : !has(c.securityContext))"
        f" && {fields} && {environment} == {container}.env"
    )
    pod_fields = " && ".join(
        f"('{key}' in {pins} ? has({pod}.{key}) && {pod}.{key} == {pins}.{key} : !has({pod}.{key}))"
        for key in _POD_PINS
        if key != "volumes"  # the volume rule's own
    )
    return f"{pod_fields}" + "".join(
        f" && (has({pod}.{key}) ? {pod}.{key} : []).all(c, {each})"
        for key in ("initContainers", "containers")
    )


_TASK_KEY = "variables.name + '/' + (has(t.name) ? t.name : '')"


def _fence_variables(jobs: Sequence[FabricCheckJob]) -> list[dict[str, str]]:
    """The policy's variables: the named Job's rendered pins, images, accounts and scheduling."""
    pins = {f"{job.name}/{task}": pinned for job in jobs for task, pinned in job.pins.items()}
    variables = [
        {"name": "name", "expression": "has(object.metadata.name) ? object.metadata.name : ''"},
        {"name": "namespaces", "expression": cel_literal({job.name: job.namespace for job in jobs})},
        {
            "name": "tasks",
            "expression": "has(object.spec) && has(object.spec.tasks) ? object.spec.tasks : []",
        },
        # Per "<job>/<task>": its pod's volumes and security context, each container's pinned fields.
        {"name": "pins", "expression": cel_literal(pins)},
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
    variables += [
        {"name": "queue", "expression": _lookup({j.name: j.queue for j in jobs}, "variables.name", "''")},
        {"name": "priority", "expression": _lookup({j.name: j.priority_class for j in jobs}, "variables.name", "''")},
        {"name": "labels", "expression": _lookup({j.name: j.labels for j in jobs}, "variables.name", "{}")},
        {"name": "minAvailable", "expression": _lookup({j.name: j.min_available for j in jobs}, "variables.name", "0")},
        {"name": "taskCount", "expression": _lookup({j.name: len(j.tasks) for j in jobs}, "variables.name", "0")},
    ]  # fmt: skip
    return variables


def _refuse(group: str, expression: str, message: str) -> dict[str, str]:
    """One validation: a request where ``expression`` is false is refused with ``message``."""
    return {
        "expression": expression,
        "message": f"{group} may only create the rendered fabric checks and canary: {message}",
        "reason": "Forbidden",
    }


def _optional(obj: str, name: str, empty: str) -> str:
    """CEL: ``obj.name``, or ``empty`` when it is unset."""
    return f"(has({obj}.{name}) ? {obj}.{name} : {empty})"


def _pod_rules(group: str, jobs: Sequence[FabricCheckJob]) -> list[dict[str, str]]:
    """The validations on the Job's identity and its pods: name, namespace, images, volumes, pins,
    host namespaces, privilege, Secrets and service accounts."""
    names = [job.name for job in jobs]
    capabilities = sorted({capability for job in jobs for capability in job.capabilities})
    security = "c.securityContext"
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
    task_key = _TASK_KEY
    return [
        _refuse(group, f"variables.name in {cel_list(names)}", f"a Volcano Job named {', '.join(names)}"),
        _refuse(
            group,
            "has(request.namespace) && variables.name in variables.namespaces"
            " && request.namespace == variables.namespaces[variables.name]",
            "in the named Job's namespace ("
            + ", ".join(f"{job.name} in {job.namespace}" for job in jobs)
            + ")",
        ),
        _refuse(
            group,
            "size(variables.pods) > 0 && variables.pods.all(p, size(p) > 0)",
            "a Job whose every task has a pod template",
        ),
        _refuse(
            group,
            _each_container("has(c.image) && c.image in variables.images"),
            "every container's image one of the check's",
        ),
        _refuse(
            group,
            "(!has(object.spec.volumes) || size(object.spec.volumes) == 0)"
            f" && variables.tasks.all(t, ({task_key}) in variables.pins && has(t.template) && has(t.template.spec)"
            f" && ((has(t.template.spec.volumes) ? t.template.spec.volumes : []) == "
            f"('volumes' in variables.pins[{task_key}] ? variables.pins[{task_key}].volumes : [])))",
            "no volume but the rendered Job's own (a volume could mount the node's files, a Secret or a claim)",
        ),
        _refuse(
            group,
            f"variables.tasks.all(t, ({task_key}) in variables.pins && has(t.template) && has(t.template.spec)"
            f" && {_pins_hold('t.template.spec', f'variables.pins[{task_key}]')})",
            "each task's pod and containers as rendered (commands, arguments, environment, mounts, "
            "security contexts)",
        ),
        _refuse(group, f"variables.pods.all(p, {no_host})", "no host network, PID or IPC namespace"),
        _refuse(
            group,
            "variables.pods.all(p, !has(p.ephemeralContainers)) && " + _each_container(unprivileged),
            "no privileged container, unmasked /proc or added capability"
            + (f" beyond {', '.join(capabilities)}" if capabilities else ""),
        ),
        _refuse(group, _each_container(no_secrets), "no Secret in a container's environment"),
        _refuse(
            group,
            identity,
            "no service account but the check's own (a pod without one mounts no token)",
        ),
    ]


def _scheduling_rules(group: str, jobs: Sequence[FabricCheckJob]) -> list[dict[str, str]]:
    """The validations that hold the Job to its rendered queue, priority, node group, labels,
    tasks and replicas."""
    by_task = {f"{job.name}/{task.name}": task for job in jobs for task in job.tasks}

    def per_task(attribute: str, empty: str) -> str:
        return _lookup({key: getattr(task, attribute) for key, task in by_task.items()}, _TASK_KEY, empty)

    return [
        _refuse(
            group,
            "has(object.spec.queue) && object.spec.queue == variables.queue",
            "its own queue, the one rendered",
        ),
        _refuse(
            group,
            f"{_optional('object.spec', 'priorityClassName', chr(39) * 2)} == variables.priority"
            " && variables.pods.all(p, !has(p.priorityClassName) || p.priorityClassName == variables.priority)",
            "the rendered priority class and no other",
        ),
        _refuse(
            group,
            "variables.pods.all(p, !has(p.nodeName) && !has(p.affinity))"
            f" && variables.tasks.all(t, !has(t.template) || !has(t.template.spec)"
            f" || ({_optional('t.template.spec', 'nodeSelector', '{}')} == {per_task('node_selector', '{}')}"
            f" && {_optional('t.template.spec', 'tolerations', '[]')} == {per_task('tolerations', '[]')}))",
            "the rendered node group: its node selector and tolerations, no nodeName or affinity",
        ),
        _refuse(
            group,
            "variables.pods.all(p, !has(p.runtimeClassName) && !has(p.hostAliases))",
            "no runtime class or host aliases",
        ),
        _refuse(
            group,
            f"{_optional('object.metadata', 'labels', '{}')} == variables.labels"
            " && variables.tasks.all(t, (has(t.template) && has(t.template.metadata)"
            f" && has(t.template.metadata.labels) ? t.template.metadata.labels : {{}}) == {per_task('labels', '{}')})",
            "the rendered labels, no others",
        ),
        _refuse(
            group,
            "size(variables.tasks) == variables.taskCount"
            f" && variables.tasks.all(t, has(t.replicas) && t.replicas == {per_task('replicas', '-1')})"
            f" && {_optional('object.spec', 'minAvailable', '0')} == variables.minAvailable",
            "the rendered tasks and replicas",
        ),
    ]


def _fence_spec(*, group: str, jobs: Sequence[FabricCheckJob]) -> dict[str, Any]:
    """The policy's spec: members of ``group`` may create and update only the Volcano Jobs ``jobs``."""
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
                }
            ]
        },
        "matchConditions": [
            {
                "name": "the-deployment-check",
                "expression": f"has(request.userInfo.groups) && {cel_string(group)} in request.userInfo.groups",
            }
        ],
        "variables": _fence_variables(jobs),
        "validations": [*_pod_rules(group, jobs), *_scheduling_rules(group, jobs)],
    }


def _check_namespaces(fabric_check_jobs: Sequence[FabricCheckJob], fabric_check_namespace: str) -> None:
    """Refuse fabric check jobs without a namespace or outside ``fabric_check_namespace``."""
    if fabric_check_jobs and not fabric_check_namespace:
        raise ValueError("DeploymentCheckRbacChart: fabric_check_jobs need fabric_check_namespace")
    elsewhere = [job.name for job in fabric_check_jobs if job.namespace != fabric_check_namespace]
    if elsewhere:
        raise ValueError(
            f"DeploymentCheckRbacChart: fabric check jobs {', '.join(elsewhere)} are not in "
            f"{fabric_check_namespace}"
        )


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
        canary: CanaryAccess | None = None,
    ) -> None:
        super().__init__(scope, id)
        self._readers(group)
        _check_namespaces(fabric_check_jobs, fabric_check_namespace)
        jobs = [*fabric_check_jobs, *([canary.job] if canary is not None else [])]
        if not jobs:
            return
        # The fences first: a Role that grants create must never be in place without them.
        fences = Construct(self, "Fences")
        admission_policy(
            Construct(fences, "VolcanoJobs"),
            name=job_fence_name(group),
            labels={"app.kubernetes.io/name": job_fence_name(group)},
            spec=_fence_spec(group=group, jobs=jobs),
            binding_spec={"validationActions": ["Deny"]},
        )
        if canary is not None:
            admission_policy(
                Construct(fences, "ConfigMaps"),
                name=config_map_fence_name(group),
                labels={"app.kubernetes.io/name": config_map_fence_name(group)},
                spec=_config_map_fence_spec(group=group, canary=canary),
                binding_spec={"validationActions": ["Deny"]},
            )
            self._canary_roles(group, canary)
        if fabric_check_jobs:
            self._fabric_check_role(group, fabric_check_jobs, fabric_check_namespace)

    def _readers(self, group: str) -> None:
        """The ClusterRole that reads nodes and the Role that reads the autoscaler's health,
        both bound to the group ``group``."""
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

    def _fabric_check_role(
        self, group: str, fabric_check_jobs: Sequence[FabricCheckJob], fabric_check_namespace: str
    ) -> None:
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

    def _canary_roles(self, group: str, canary: CanaryAccess) -> None:
        """What operator_tools/canary.py calls, and nothing more: in the team's namespace, create (fenced) and
        get and delete its Job, create (fenced) and delete its ConfigMap, list pods and events (it
        selects its pods by label), read its pods' logs; in the platform namespace, TensorBoard's
        run list through the service proxy. Named apart from the fabric check's Role."""
        name = f"{group}-canary"
        namespace = canary.job.namespace
        roles = {
            namespace: [
                # RBAC cannot name an object that does not exist yet: create is for any name, and the
                # admission policies above admit only the canary's rendered Job and ConfigMap.
                k8s.PolicyRule(api_groups=["batch.volcano.sh"], resources=["jobs"], verbs=["create"]),
                k8s.PolicyRule(
                    api_groups=["batch.volcano.sh"],
                    resources=["jobs"],
                    resource_names=[canary.job.name],
                    verbs=["get", "delete"],
                ),
                k8s.PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["create"]),
                k8s.PolicyRule(
                    api_groups=[""],
                    resources=["configmaps"],
                    resource_names=[canary.config_map],
                    verbs=["delete"],
                ),
                k8s.PolicyRule(api_groups=[""], resources=["pods", "events"], verbs=["list"]),
                k8s.PolicyRule(
                    api_groups=[""], resources=["pods/log"], resource_names=list(canary.pods), verbs=["get"]
                ),
            ],
            canary.tensorboard_namespace: [
                k8s.PolicyRule(
                    api_groups=[""],
                    resources=["services/proxy"],
                    resource_names=[canary.tensorboard_proxy],
                    verbs=["get"],
                )
            ],
        }
        if len(roles) != 2:
            raise ValueError(
                "DeploymentCheckRbacChart: the canary's team namespace is the platform namespace"
            )
        for index, (where, rules) in enumerate(roles.items()):
            suffix = "" if index == 0 else "TensorBoard"
            k8s.KubeRole(
                self,
                f"CanaryRunner{suffix}",
                metadata=k8s.ObjectMeta(name=name, namespace=where),
                rules=rules,
            )
            k8s.KubeRoleBinding(
                self,
                f"CanaryRunner{suffix}Binding",
                metadata=k8s.ObjectMeta(name=name, namespace=where),
                role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
                subjects=[k8s.Subject(api_group="rbac.authorization.k8s.io", kind="Group", name=group)],
            )


def _config_map_fence_spec(*, group: str, canary: CanaryAccess) -> dict[str, Any]:
    """Members of ``group`` may create and update only the canary's program ConfigMap, as rendered."""
    who = f"{group} may only create the canary's rendered ConfigMap"
    return {
        "failurePolicy": "Fail",
        "matchConstraints": core_match_constraints(["CREATE", "UPDATE"], ["configmaps"]),
        "matchConditions": [
            {
                "name": "the-deployment-check",
                "expression": f"has(request.userInfo.groups) && {cel_string(group)} in request.userInfo.groups",
            }
        ],
        "validations": [
            refuse(
                f"has(object.metadata.name) && object.metadata.name == {cel_string(canary.config_map)}"
                f" && has(request.namespace) && request.namespace == {cel_string(canary.job.namespace)}",
                f"{who}: the ConfigMap {canary.config_map} in namespace {canary.job.namespace}",
            ),
            refuse(
                f"has(object.data) && object.data == {cel_literal(dict(canary.config_map_data))}"
                " && !has(object.binaryData)",
                f"{who}: exactly its rendered data (the canary's program), no binary data",
            ),
        ],
    }
