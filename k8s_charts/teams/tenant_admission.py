"""A team's pods run only where, how and as what the team may: two ValidatingAdmissionPolicies.

Bound to every namespace labelled ``TEAM_NAMESPACE_LABEL`` (admissionregistration.k8s.io/v1):

- ``trainium-team-volcano-jobs`` judges every CREATE and UPDATE of a Volcano Job
  (``batch.volcano.sh``, any version) there, whoever sends it: what a team member submits (the
  Role lets members create Jobs, k8s_charts/teams/namespaces.py), what TorchX submits for them, and the
  stack's own runs.
- ``trainium-team-pods`` judges every pod CREATE there. Volcano's job controller creates a team's
  pods (its service account is the requester), so the pod's spec is judged, not who sends it. The
  platform's own pods in the team namespaces (each team's etcd, a Deployment: the ReplicaSet
  controller creates its pods) are not judged: ``PlatformPod`` names them, read from the rendered
  plan, and a pod is theirs only when the ReplicaSet controller creates it with their labels, under
  a ReplicaSet, without Volcano's job label (team members cannot create ReplicaSets).

Each rule is one validation with one message (a request that breaks several gets each message):

- no ``nodeName`` (it skips the scheduler, its node selection and the taints' NoSchedule);
- ``schedulerName: volcano`` (Volcano's gang scheduling and queues; other schedulers ignore both);
- the priority class ``TRAINING_PRIORITY_CLASS``, on the Job and on every pod (the critical
  classes preempt every other team's gangs, etcd, CoreDNS and the autoscaler);
- tolerations only of the Trainium taint (what the team's groups need) and the
  ``not-ready``/``unreachable`` NoExecute ones the API server adds to every pod: none of a cordon, of
  the fabric check's failed taint, or of everything;
- ``nodeSelector`` ``trainium/node-group`` naming one of the team's node groups: a pod's node
  selector and its node affinity must both hold, so affinity can only narrow this, never widen it
  (never a system node, which no team pod tolerates being kept off otherwise, never another team's
  group or Capacity Block);
- the team's own queue (a Job's ``spec.queue``; Volcano's job webhook puts a Job without one into
  the uncapped ``default`` queue before this policy sees it; a pod's ``volcano.sh/queue-name``);
- every container non-root: ``runAsNonRoot: true`` and a ``runAsUser`` other than 0, on the
  container or inherited from the pod (root is not squashed on the system nodes' subnet, and a
  container escape as root is the node);
- no host network, PID or IPC; volumes only of the kinds a run needs (claims, emptyDir, ConfigMap,
  Secret, projected, downward API): no hostPath, no inline CSI, NFS or anything else;
- the read-only claims (the staged data sets) mounted read-only by the pod itself:
  ``persistentVolumeClaim.readOnly: true`` and every ``volumeMount`` of them ``readOnly: true``.
  The PersistentVolume's ``csi.readOnly`` does not reach the node: the kubelet's NodePublish takes
  ``readonly`` from the pod (kubernetes#69843; the FSx CSI driver mounts ``ro`` only when asked).
  A Volcano Job's own ``spec.volumes`` may not name them either (Volcano mounts those read-write);
- a Job's name may not be one that Volcano would delete a platform object by: its svc plugin
  deletes the Service and NetworkPolicy named after a deleted Job and the ConfigMap ``<job>-svc``,
  its ssh plugin the Secret ``<job>-ssh``, its ray plugin the Service ``<job>-head-svc``, none of
  them checking who owns what they delete (volcano v1.15.1 pkg/controllers/job/plugins). The
  reserved names are those of every object the platform keeps in a team namespace, from the plan.
- pod affinity and anti-affinity terms (required and preferred) only over the pod's own namespace
  (no ``namespaces``, no ``namespaceSelector``) and only on one node (``topologyKey``
  ``kubernetes.io/hostname``): a term over another team's pods on a topology every node shares
  (``kubernetes.io/os``, the zone: every Trainium node is in one) kept that team's pods off every
  node, and one over the platform's its staging, layout and fabric-check pods; a same-namespace
  term on such a topology still fences the team's own etcd (issue 34);
- Pod Security's ``restricted`` checks the team rules above do not already make stricter
  (k8s_charts/teams/pod_security_cel.py), on the Job's templates too: a Job whose pods Pod Security would
  refuse is refused before Volcano's controller loops creating them.

A Job also answers to the rules only a Job has (k8s_charts/teams/tenant_job_rules.py): the plugins and
claims Volcano acts on for it, its replicas, chips and size, its retries and stuck-run limit, and
the names the stack applies.

Per-team values (queue, node groups) are CEL maps keyed by namespace; a namespace labelled as a
team's that the maps do not know gets no queue and no groups, so everything there is refused.
The policies see objects after the mutating webhooks (Volcano's job webhook fills in the queue,
scheduler, task names) and after the API server's own defaulting and mutating admission
(DefaultTolerationSeconds, the ServiceAccount token volume, LimitRanger, Priority).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cdk8s
from constructs import Construct

from cluster_facts.kubernetes_names import (
    EFA_RESOURCE,
    NEURON_CORE_RESOURCE,
    NEURON_TAINT_KEY,
    NEURON_TAINT_VALUE,
    NODE_GROUP_LABEL,
    TEAM_NAMESPACE_LABEL,
    TRAINING_PRIORITY_CLASS,
    VOLCANO_JOB_NAME_LABEL,
    VOLCANO_QUEUE_LABEL,
    VOLCANO_SCHEDULER,
)
from k8s_charts.shared.admission_policy import admission_policy, cel_list, cel_string, refuse
from k8s_charts.teams.pod_security_cel import PodSecurityMessage, pod_metadata_rules, pod_spec_rules
from k8s_charts.teams.tenant_job_rules import JOB_TEXT_LIMIT, JobMessage, job_rules, job_variables

__all__ = [
    "JOBS_POLICY",
    "JOB_TEXT_LIMIT",
    "PODS_POLICY",
    "VOLCANO_DELETED_SUFFIXES",
    "Message",
    "PlatformPod",
    "TeamPlacement",
    "TenantAdmissionChart",
    "reserved_job_names",
]

JOBS_POLICY = "trainium-team-volcano-jobs"
PODS_POLICY = "trainium-team-pods"
_LABELS = {"app.kubernetes.io/name": "trainium-team-admission"}
# The names Volcano v1.15.1 deletes when a Job named <job> is deleted, as suffixes of <job>: svc
# (Service and NetworkPolicy <job>, ConfigMap <job>-svc), ssh (Secret <job>-ssh), ray (Service
# <job>-head-svc).
VOLCANO_DELETED_SUFFIXES: tuple[str, ...] = ("", "-svc", "-ssh", "-head-svc")
# Added to every pod by the API server's DefaultTolerationSeconds admission plugin (300 s each).
_DEFAULT_NO_EXECUTE_KEYS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
# ExtendedResourceToleration (on in EKS) tolerates, for each extended resource a pod requests, a
# NoSchedule taint of the resource's name.
_EXTENDED_RESOURCES = (EFA_RESOURCE, NEURON_CORE_RESOURCE)
# What a run's pod needs to mount: its claims, scratch and shared memory, its ConfigMaps and Secrets,
# and what the API server itself adds (the service-account token as a projected volume).
_VOLUME_SOURCES = ("persistentVolumeClaim", "emptyDir", "configMap", "secret", "projected", "downwardAPI")
# The one topology a team's pod affinity terms may use: a node. A term keyed on a label every node
# shares (kubernetes.io/os, or topology.kubernetes.io/zone: every Trainium node is in one zone) turns
# one pod's anti-affinity into a fence around every node (issue 34).
_HOSTNAME = "kubernetes.io/hostname"


class Message:
    """The one message of each rule (tests compare with these)."""

    NODE_NAME = "a team's pods are placed by Volcano: nodeName is not allowed"
    SCHEDULER = f"a team's pods are scheduled by Volcano: schedulerName must be {VOLCANO_SCHEDULER}"
    PRIORITY = f"a team's Volcano Jobs and pods run at priority class {TRAINING_PRIORITY_CLASS}, and no other"
    TOLERATIONS = (
        f"a team's pods may tolerate only the Trainium taint {NEURON_TAINT_KEY} (NoSchedule), what "
        "ExtendedResourceToleration adds for the pod's extended resources, and the API server's own "
        f"{' and '.join(_DEFAULT_NO_EXECUTE_KEYS)} (NoExecute)"
    )
    NODE_GROUP = (
        f"a team's pods run only on the team's Trainium node groups: nodeSelector {NODE_GROUP_LABEL} "
        "must name one of them"
    )
    JOB_QUEUE = (
        "a team's Volcano Jobs go to the team's own queue: spec.queue must be it (not Volcano's "
        "default queue, not another team's)"
    )
    POD_QUEUE = f"a team's pods belong to the team's own queue ({VOLCANO_QUEUE_LABEL})"
    NON_ROOT = (
        "a team's containers run as a non-root user: runAsNonRoot true and a runAsUser other than 0, "
        "on the container or its pod"
    )
    HOST = "a team's pods may not use the host's network, PID or IPC namespace"
    VOLUMES = (
        "a team's pods may mount only claims, emptyDir, ConfigMap, Secret, projected and downward API "
        "volumes (no hostPath or other volume source)"
    )
    READ_ONLY = (
        "the data sets' claim is mounted read-only: persistentVolumeClaim.readOnly true and every "
        "volumeMount of it readOnly true (a Volcano Job's spec.volumes may not name it)"
    )
    TEMPLATES = "every task of a Volcano Job needs a pod template"
    AFFINITY = (
        "a team's pod affinity and anti-affinity terms (required and preferred) reach only the pod's "
        f"own namespace and one node: no namespaces or namespaceSelector, topologyKey {_HOSTNAME}"
    )
    PRIVILEGE = PodSecurityMessage.PRIVILEGE
    SECCOMP = PodSecurityMessage.SECCOMP
    HOST_PORTS = PodSecurityMessage.HOST_PORTS
    KERNEL = PodSecurityMessage.KERNEL
    PLUGINS = JobMessage.PLUGINS
    CLAIMS = JobMessage.CLAIMS
    REPLICAS = JobMessage.REPLICAS
    DEVICES = JobMessage.DEVICES
    SIZE = JobMessage.SIZE
    RETRIES = JobMessage.RETRIES
    APPLIED_NAME = JobMessage.APPLIED_NAME
    ADOPTED = JobMessage.ADOPTED
    stuck_minutes = staticmethod(JobMessage.stuck_minutes)

    @staticmethod
    def reserved(names: Sequence[str]) -> str:
        return (
            "a Volcano Job may not be named so that deleting it deletes a platform object (Volcano "
            "deletes the Service and NetworkPolicy <job>, ConfigMap <job>-svc, Secret <job>-ssh and "
            f"Service <job>-head-svc); reserved here: {', '.join(names)}"
        )


@dataclass(frozen=True, kw_only=True)
class TeamPlacement:
    """Where one team's pods may run."""

    namespace: str
    queue: str
    node_groups: tuple[str, ...]
    claims: tuple[str, ...] = ()
    """The team's own claims a Volcano Job's ``spec.volumes`` may name (not the read-only ones)."""
    pod_budget: int = 0
    """The most pods one Job may have: what the team's pod quota leaves beside the platform's pods."""
    neuron_devices: int = 0
    """The Trainium chips of the team's queue capability: the most one Job may ask for."""
    applied_runs: tuple[str, ...] = ()
    """The runs the stack applies in the namespace: a member may not take their Jobs' names."""

    def __post_init__(self) -> None:
        if not self.namespace or not self.queue or not self.node_groups:
            raise ValueError(f"team {self.namespace!r} needs a namespace, a queue and node groups")


@dataclass(frozen=True, kw_only=True)
class PlatformPod:
    """Pods the platform runs in the team namespaces: created by ``creators`` under a ``owner_kind``
    controller, with ``labels`` (their template's)."""

    labels: Mapping[str, str]
    owner_kind: str = "ReplicaSet"
    creators: tuple[str, ...] = (
        # kube-controller-manager with per-controller credentials, or with its own.
        "system:serviceaccount:kube-system:replicaset-controller",
        "system:kube-controller-manager",
    )


def reserved_job_names(platform_object_names: Sequence[str]) -> tuple[str, ...]:
    """Every name that makes a Job's deletion delete one of ``platform_object_names``."""
    reserved = {
        name.removesuffix(suffix)
        for name in platform_object_names
        for suffix in VOLCANO_DELETED_SUFFIXES
        if name.endswith(suffix) and name.removesuffix(suffix)
    }
    return tuple(sorted(reserved))


def _cel_string_map(entries: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{cel_string(k)}: {cel_string(v)}" for k, v in entries.items()) + "}"


def _cel_list_map(entries: Mapping[str, Sequence[str]]) -> str:
    return "{" + ", ".join(f"{cel_string(k)}: {cel_list(v)}" for k, v in entries.items()) + "}"


def _is(obj: str, field: str, value: str) -> str:
    """CEL: ``obj.field`` is set and equals ``value`` (a CEL literal)."""
    return f"(has({obj}.{field}) && {obj}.{field} == {value})"


def _string_or(obj: str, field: str, fallback: str) -> str:
    """CEL: ``obj.field`` when set and not empty, else ``fallback``."""
    return f"(has({obj}.{field}) && {obj}.{field} != '' ? {obj}.{field} : {fallback})"


def _containers(p: str) -> str:
    return (
        f"((has({p}.containers) ? {p}.containers : []) + (has({p}.initContainers) ? {p}.initContainers : []))"
    )


def _effective(p: str, c: str, field: str) -> tuple[str, str]:
    """CEL: whether the container's security context sets ``field``, and the pod's."""
    return (
        f"(has({c}.securityContext) && has({c}.securityContext.{field}))",
        f"(has({p}.securityContext) && has({p}.securityContext.{field}))",
    )


def _non_root(p: str) -> str:
    def holds(field: str, test: str) -> str:
        on_container, on_pod = _effective(p, "c", field)
        return (
            f"({on_container} ? c.securityContext.{field} {test}"
            f" : ({on_pod} && {p}.securityContext.{field} {test}))"
        )

    return f"{_containers(p)}.all(c, {holds('runAsNonRoot', '== true')} && {holds('runAsUser', '!= 0')})"


def _tolerated(t: str) -> str:
    neuron = (
        f"({_is(t, 'key', cel_string(NEURON_TAINT_KEY))}"
        f" && (!has({t}.effect) || {t}.effect in ['', 'NoSchedule'])"
        f" && ({_is(t, 'operator', cel_string('Exists'))}"
        f" || ((!has({t}.operator) || {t}.operator in ['', 'Equal'])"
        f" && {_is(t, 'value', cel_string(NEURON_TAINT_VALUE))})))"
    )
    # What ExtendedResourceToleration adds for the other extended resources a pod requests: no node
    # carries a taint of these keys, so tolerating them opens nothing.
    resources = (
        f"(has({t}.key) && {t}.key in {cel_list(_EXTENDED_RESOURCES)}"
        f" && {_is(t, 'effect', cel_string('NoSchedule'))} && {_is(t, 'operator', cel_string('Exists'))})"
    )
    defaults = (
        f"(has({t}.key) && {t}.key in {cel_list(_DEFAULT_NO_EXECUTE_KEYS)}"
        f" && {_is(t, 'effect', cel_string('NoExecute'))} && {_is(t, 'operator', cel_string('Exists'))})"
    )
    return f"({neuron} || {resources} || {defaults})"


def _read_only_claims(p: str) -> tuple[str, str]:
    """CEL: the read-only claims' volumes say readOnly; every mount of them says readOnly."""
    claim = "v.persistentVolumeClaim"
    volumes = f"(has({p}.volumes) ? {p}.volumes : [])"
    of_read_only = f"has(v.persistentVolumeClaim) && {claim}.claimName in variables.readOnlyClaims"
    volume_says = f"{volumes}.all(v, !({of_read_only}) || {_is(claim, 'readOnly', 'true')})"
    names = f"{volumes}.filter(v, {of_read_only}).map(v, v.name)"
    mounts_say = (
        f"{_containers(p)}.all(c, !has(c.volumeMounts) || c.volumeMounts.all(m,"
        f" !(m.name in {names}) || {_is('m', 'readOnly', 'true')}))"
    )
    return volume_says, mounts_say


def _affinity_terms(p: str) -> str:
    """CEL: every pod affinity and anti-affinity term of ``p``, required and preferred."""
    parts = []
    for kind in ("podAffinity", "podAntiAffinity"):
        a = f"{p}.affinity.{kind}"
        required = f"(has({a}.requiredDuringSchedulingIgnoredDuringExecution) ? {a}.requiredDuringSchedulingIgnoredDuringExecution : [])"
        preferred = (
            f"(has({a}.preferredDuringSchedulingIgnoredDuringExecution) ? {a}.preferredDuringSchedulingIgnoredDuringExecution"
            ".map(w, has(w.podAffinityTerm) ? w.podAffinityTerm : {}) : [])"
        )
        parts.append(f"(has({p}.affinity) && has({a}) ? {required} + {preferred} : [])")
    return " + ".join(parts)


def _own_namespace_one_node(t: str) -> str:
    """CEL: the term ``t`` selects pods of its own pod's namespace only, within one node."""
    return (
        f"(!has({t}.namespaces) || size({t}.namespaces) == 0) && !has({t}.namespaceSelector)"
        f" && {_is(t, 'topologyKey', cel_string(_HOSTNAME))}"
    )


def _pod_spec_validations() -> list[dict[str, str]]:
    """The rules of a pod spec ``p``, each over ``variables.specs`` (the pod's, or every task's), and
    of its metadata ``m`` over ``variables.metas``."""
    volume_says, mounts_say = _read_only_claims("p")
    label = cel_string(NODE_GROUP_LABEL)
    rules = [
        ("!has(p.nodeName) || p.nodeName == ''", Message.NODE_NAME),
        (f"{_string_or('p', 'schedulerName', 'variables.jobScheduler')} == {cel_string(VOLCANO_SCHEDULER)}",
         Message.SCHEDULER),
        (f"{_string_or('p', 'priorityClassName', 'variables.jobPriority')} == {cel_string(TRAINING_PRIORITY_CLASS)}",
         Message.PRIORITY),
        (f"!has(p.tolerations) || p.tolerations.all(t, {_tolerated('t')})", Message.TOLERATIONS),
        (f"has(p.nodeSelector) && {label} in p.nodeSelector && p.nodeSelector[{label}] in variables.groups",
         Message.NODE_GROUP),
        (_non_root("p"), Message.NON_ROOT),
        (" && ".join(f"!{_is('p', field, 'true')}" for field in ("hostNetwork", "hostPID", "hostIPC")),
         Message.HOST),
        (f"!has(p.volumes) || p.volumes.all(v, v.all(k, k == 'name' || k in {cel_list(_VOLUME_SOURCES)}))",
         Message.VOLUMES),
        (f"{volume_says} && {mounts_say}", Message.READ_ONLY),
        (f"({_affinity_terms('p')}).all(t, {_own_namespace_one_node('t')})", Message.AFFINITY),
        *pod_spec_rules("p"),
    ]  # fmt: skip
    on_specs = [refuse(f"variables.specs.all(p, {expression})", message) for expression, message in rules]
    on_metas = [refuse(f"variables.metas.all(m, {e})", message) for e, message in pod_metadata_rules("m")]
    # The AppArmor annotations join the rule of the same message (the other kernel checks).
    leftover = _dedupe(on_metas, on_specs)
    return [*on_specs, *leftover]


def _team_variables(teams: Sequence[TeamPlacement], read_only_claims: Sequence[str]) -> list[dict[str, str]]:
    queues = _cel_string_map({team.namespace: team.queue for team in teams})
    groups = _cel_list_map({team.namespace: team.node_groups for team in teams})
    return [
        {"name": "ns", "expression": "has(request.namespace) ? request.namespace : ''"},
        {"name": "queue", "expression": f"variables.ns in {queues} ? {queues}[variables.ns] : ''"},
        {"name": "groups", "expression": f"variables.ns in {groups} ? {groups}[variables.ns] : []"},
        {"name": "readOnlyClaims", "expression": cel_list(read_only_claims) if read_only_claims else "[]"},
    ]


def _binding(namespace_label: str) -> dict[str, Any]:
    return {
        "validationActions": ["Deny"],
        "matchResources": {
            "namespaceSelector": {"matchExpressions": [{"key": namespace_label, "operator": "Exists"}]}
        },
    }


def _jobs_policy(
    teams: Sequence[TeamPlacement],
    read_only_claims: Sequence[str],
    reserved: Sequence[str],
    stuck_minutes_ceiling: int | None,
) -> dict[str, Any]:
    variables = [
        *_team_variables(teams, read_only_claims),
        {"name": "name", "expression": "has(object.metadata.name) ? object.metadata.name : ''"},
        {"name": "jobScheduler", "expression": _string_or("object.spec", "schedulerName", "''")},
        {"name": "jobPriority", "expression": _string_or("object.spec", "priorityClassName", "''")},
        {
            "name": "specs",
            "expression": "has(object.spec.tasks) ? object.spec.tasks.map(t,"
            " has(t.template) && has(t.template.spec) ? t.template.spec : {}) : []",
        },
        {
            "name": "metas",
            "expression": "has(object.spec.tasks) ? object.spec.tasks.map(t,"
            " has(t.template) && has(t.template.metadata) ? t.template.metadata : {}) : []",
        },
        *job_variables(
            claims={team.namespace: team.claims for team in teams},
            pod_budgets={team.namespace: team.pod_budget for team in teams},
            neuron_devices={team.namespace: team.neuron_devices for team in teams},
            applied_runs={team.namespace: team.applied_runs for team in teams},
        ),
    ]
    taken = " || ".join(f"(variables.name + {cel_string(s) if s else repr('')}) in {cel_list(reserved)}"
                        for s in VOLCANO_DELETED_SUFFIXES)  # fmt: skip
    rules = [
        refuse("size(variables.specs) > 0 && variables.specs.all(p, size(p) > 0)", Message.TEMPLATES),
        refuse(
            f"{_is('object.spec', 'queue', 'variables.queue')} && variables.queue != ''", Message.JOB_QUEUE
        ),
        refuse(f"variables.jobPriority == {cel_string(TRAINING_PRIORITY_CLASS)}", Message.PRIORITY),
        refuse(
            "!has(object.spec.volumes) || object.spec.volumes.all(v,"
            " !has(v.volumeClaimName) || !(v.volumeClaimName in variables.readOnlyClaims))",
            Message.READ_ONLY,
        ),
    ]
    if reserved:
        rules.append(refuse(f"request.operation != 'CREATE' || !({taken})", Message.reserved(reserved)))
    rules += job_rules(stuck_minutes_ceiling=stuck_minutes_ceiling)
    return {
        # An error in an expression refuses the request rather than letting it through.
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": ["batch.volcano.sh"],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["jobs"],
                }
            ]
        },
        "variables": variables,
        "validations": [*rules, *_dedupe(_pod_spec_validations(), rules)],
    }


def _dedupe(rules: list[dict[str, str]], before: list[dict[str, str]]) -> list[dict[str, str]]:
    """``rules`` without a second validation of a message already given (the Job's priority)."""
    given = {rule["message"] for rule in before}
    merged = []
    for rule in rules:
        if rule["message"] in given:
            previous = next(r for r in before if r["message"] == rule["message"])
            previous["expression"] = f"({previous['expression']}) && ({rule['expression']})"
        else:
            merged.append(rule)
    return merged


def _platform_pod(pod: PlatformPod) -> str:
    labels = "object.metadata.labels"
    matches = " && ".join(
        f"{cel_string(key)} in {labels} && {labels}[{cel_string(key)}] == {cel_string(value)}"
        for key, value in sorted(pod.labels.items())
    )
    return (
        f"(request.userInfo.username in {cel_list(pod.creators)} && {matches}"
        " && has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r,"
        f" r.kind == {cel_string(pod.owner_kind)} && {_is('r', 'controller', 'true')}))"
    )


def _pods_policy(
    teams: Sequence[TeamPlacement], read_only_claims: Sequence[str], platform_pods: Sequence[PlatformPod]
) -> dict[str, Any]:
    not_volcanos = f"!({cel_string(VOLCANO_JOB_NAME_LABEL)} in object.metadata.labels)"
    platform = " || ".join(_platform_pod(pod) for pod in platform_pods)
    exempt = (
        f"has(request.userInfo.username) && has(object.metadata.labels) && {not_volcanos} && ({platform})"
        if platform_pods
        else "false"
    )
    queue = cel_string(VOLCANO_QUEUE_LABEL)
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
            ]
        },
        "matchConditions": [
            {
                # The platform's own pods (each team's etcd) are the platform's business.
                "name": "not-a-platform-pod",
                "expression": f"!({exempt})",
            }
        ],
        "variables": [
            *_team_variables(teams, read_only_claims),
            {"name": "jobScheduler", "expression": "''"},
            {"name": "jobPriority", "expression": "''"},
            {"name": "specs", "expression": "[object.spec]"},
            {"name": "metas", "expression": "[object.metadata]"},
        ],
        "validations": [
            refuse(
                f"has(object.metadata.labels) && {queue} in object.metadata.labels"
                f" && object.metadata.labels[{queue}] == variables.queue && variables.queue != ''",
                Message.POD_QUEUE,
            ),
            *_pod_spec_validations(),
        ],
    }


class TenantAdmissionChart(cdk8s.Chart):
    """The policies ``trainium-team-volcano-jobs`` and ``trainium-team-pods`` and their bindings to
    the namespaces labelled ``namespace_label``."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        teams: Sequence[TeamPlacement],
        read_only_claims: Sequence[str],
        platform_object_names: Sequence[str],
        platform_pods: Sequence[PlatformPod],
        stuck_minutes_ceiling: int | None = None,
        namespace_label: str = TEAM_NAMESPACE_LABEL,
    ) -> None:
        super().__init__(scope, id)
        if not teams:
            raise ValueError("TenantAdmissionChart: at least one team is needed")
        reserved = reserved_job_names(platform_object_names)
        jobs = Construct(self, "Jobs")
        admission_policy(
            jobs,
            name=JOBS_POLICY,
            labels=_LABELS,
            spec=_jobs_policy(teams, read_only_claims, reserved, stuck_minutes_ceiling),
            binding_spec=_binding(namespace_label),
        )
        pods = Construct(self, "Pods")
        admission_policy(
            pods,
            name=PODS_POLICY,
            labels=_LABELS,
            spec=_pods_policy(teams, read_only_claims, platform_pods),
            binding_spec=_binding(namespace_label),
        )
