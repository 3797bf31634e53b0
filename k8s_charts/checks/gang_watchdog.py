"""The gang watchdog: cordon the idle Trainium nodes that stall a partly placeable Volcano gang.

Volcano 1.15.1 marks the placeable pods of a gang that does not fit whole with reason ``Schedulable``
and the Cluster Autoscaler acts only on ``Unschedulable`` (volcano-sh/volcano#3976): with fewer idle
nodes than a gang needs, the autoscaler neither adds the missing nodes nor removes the idle ones
(docs/capacity.md). cluster_programs/gang_watchdog.py cordons those idle nodes after the
autoscaler's own provision time, marked with ``GANG_WATCHDOG_ANNOTATION``, and lifts its cordon
once no waiting gang needs it; its docstring has the rules.

Two steps of the plan:

- ``GangWatchdogAdmissionChart`` (applied first): a ValidatingAdmissionPolicy and binding that let
  the watchdog's service account update only nodes of the Trainium groups, and on them only
  ``spec.unschedulable`` together with its own annotation, never a node someone else cordoned.
  RBAC cannot narrow ``patch nodes`` to a field or a label; this can.
- ``GangWatchdogChart``: the ServiceAccount; a ClusterRole to get and list pods and nodes and patch
  nodes; a Role in each team namespace to get and list PodGroups; the script in a ConfigMap; one
  replica on the system nodes (no toleration for the Trainium taint) as a non-root, read-only pod
  that passes Pod Security ``restricted``; a NetworkPolicy that admits no connection to it and
  lets it reach only DNS and the API server.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.image_pins import GANG_WATCHDOG_IMAGE
from cluster_facts.images import pinned_image_problem
from cluster_facts.kubernetes_names import (
    GANG_WATCHDOG_ANNOTATION,
    NODE_GROUP_LABEL,
    STUCK_MINUTES_ANNOTATION,
)
from cluster_facts.kubernetes_plan import ManifestSet
from k8s_charts.network.tenant_network import api_server_egress_rules, dns_egress_rule
from k8s_charts.shared.admission_policy import (
    admission_policy,
    cel_list,
    cel_string,
    refuse,
    same_except,
    service_account_policy_spec,
    service_account_username,
)
from k8s_charts.shared.pod_programs import program_digest, program_files
from k8s_charts.shared.policy_exceptions import (
    PINNED_PULL_POLICY,
    digest_exceptions,
    policy_exceptions,
    pull_policy_exceptions,
)
from k8s_charts.shared.resources import container_resources

__all__ = [
    "ADMISSION_STEP",
    "DEFAULT_IMAGE",
    "DEFAULT_INTERVAL_SECONDS",
    "GANG_WATCHDOG_LABELS",
    "NAME",
    "PROGRAM",
    "STEP",
    "GangWatchdogAdmissionChart",
    "GangWatchdogChart",
    "GangWatchdogValues",
    "gang_watchdog_steps",
]

NAME = "gang-watchdog"
STEP = NAME
ADMISSION_STEP = f"{NAME}-admission"
# Python from ECR Public (cluster_facts/image_pins.py), through the pull-through cache.
DEFAULT_IMAGE = GANG_WATCHDOG_IMAGE
DEFAULT_INTERVAL_SECONDS = 60
GANG_WATCHDOG_LABELS: dict[str, str] = {
    "app.kubernetes.io/name": NAME,
    "app.kubernetes.io/component": "capacity",
}
_PROGRAM_FILE = "gang_watchdog.py"
# The program, the stuck-run guard it imports and the API client, side by side in the ConfigMap.
PROGRAM_FILES = program_files(_PROGRAM_FILE, "stuck_runs.py", "kube_mirror.py")
PROGRAM = PROGRAM_FILES[_PROGRAM_FILE]
_PROGRAM_DIR = "/opt/gang-watchdog"
_UID = 65532  # any non-root uid: the program writes nothing
# The watchdog's writes are node updates; the server's own metadata changes with every write.
_SERVER_METADATA = ("managedFields", "resourceVersion")


# No server, so nothing to probe: the program is a loop whose API calls time out after 30 s, logs a
# failed pass and tries again; if it exits, the kubelet restarts it.
_NO_PROBE = (
    "a loop that serves nothing; each API call times out after 30 s and an exit restarts the container"
)
_POLICY_EXCEPTIONS = {
    "CKV_K8S_8": _NO_PROBE,
    "CKV_K8S_9": _NO_PROBE,
    # The path is where the module was before the rooms (issue #37): the text is rendered, so it waits for a
    # change that restarts the watchdog anyway.
    "CKV_K8S_38": "the watchdog reads pods and cordons nodes through the Kubernetes API with this token; "
    "an admission policy narrows what it may change (k8s_charts/gang_watchdog.py)",
}


@dataclass(frozen=True, kw_only=True)
class GangWatchdogValues:
    """What the configuration decides: which gangs and nodes it watches, and when it acts."""

    namespaces: tuple[str, ...]
    """The team namespaces, whose Volcano PodGroups it reads."""
    node_groups: tuple[str, ...]
    """The Trainium node groups: the only nodes it may cordon."""
    threshold_minutes: int
    """How long a gang stalls, and an idle node has been up, before it cordons: the autoscaler's
    ``max_node_provision_minutes`` (a scale-up still under way is given that long)."""
    interval_seconds: int = DEFAULT_INTERVAL_SECONDS
    image: str = DEFAULT_IMAGE
    stuck_run_minutes: int | None = None
    """End the runs whose pods hold Trainium nodes without progress for this long
    (``autoscaler.stuck_run_minutes``; a run's Job annotation overrides it); None: never."""
    stuck_run_max_minutes: int | None = None
    """The longest a run's own limit (its Job annotation) may make it: the guard clamps a larger one
    (``StackConfig.stuck_run_ceiling_minutes``; the team admission policy refuses it too). None:
    ``stuck_run_minutes`` is the ceiling."""
    team_node_groups: Mapping[str, tuple[str, ...]] | None = None
    """Namespace -> the node groups its gangs may use: the watchdog cordons a node only for a gang
    whose team owns the node's group. None: every namespace may use every group."""

    def __post_init__(self) -> None:
        if not self.namespaces or not self.node_groups:
            raise ValueError(
                "the gang watchdog needs at least one team namespace and one Trainium node group"
            )
        owned = self.owners()
        if set(owned) != set(self.namespaces) or not all(
            groups and set(groups) <= set(self.node_groups) for groups in owned.values()
        ):
            raise ValueError(
                "the gang watchdog's team_node_groups must give every namespace some of its node groups"
            )
        if self.threshold_minutes < 1 or self.interval_seconds < 1:
            raise ValueError("the gang watchdog's threshold and interval must be positive")
        if self.stuck_run_minutes is not None and self.stuck_run_minutes < 1:
            raise ValueError("the gang watchdog's stuck-run limit must be positive")
        problem = pinned_image_problem(self.image)
        if problem is not None:
            raise ValueError(problem)

    def owners(self) -> dict[str, tuple[str, ...]]:
        """Namespace -> the node groups its gangs may use."""
        if self.team_node_groups is None:
            return {namespace: self.node_groups for namespace in self.namespaces}
        return {namespace: tuple(groups) for namespace, groups in self.team_node_groups.items()}


def _policy(*, node_groups: Sequence[str], username: str) -> dict[str, Any]:
    """The admission policy's spec: ``username`` may only cordon or uncordon Trainium nodes, with its mark.

    Every expression guards itself (failurePolicy Fail: an error refuses the request).
    """
    mark = cel_string(GANG_WATCHDOG_ANNOTATION)
    label = cel_string(NODE_GROUP_LABEL)
    update = "variables.isNodeUpdate"

    def field_of(age: str, obj: str, path: str, name: str) -> dict[str, str]:
        return {
            "name": f"{age}{name}",
            "expression": f"{update} && has({obj}.{path}) ? {obj}.{path} : {{}}",
        }

    def cordoned(age: str) -> str:
        return f"'unschedulable' in variables.{age}Spec && variables.{age}Spec.unschedulable == true"

    variables = [
        {
            "name": "isNodeUpdate",
            "expression": "request.operation == 'UPDATE' && request.resource.resource == 'nodes'"
            " && !has(request.subResource)",
        },
        field_of("new", "object", "spec", "Spec"),
        field_of("old", "oldObject", "spec", "Spec"),
        field_of("new", "object", "metadata.annotations", "Annotations"),
        field_of("old", "oldObject", "metadata.annotations", "Annotations"),
        {
            # The node's group as stored before the change: a request cannot relabel its way in.
            "name": "isTrainiumNode",
            "expression": f"{update} && has(oldObject.metadata.labels) && {label} in oldObject.metadata.labels"
            f" && oldObject.metadata.labels[{label}] in {cel_list(node_groups)}",
        },
        {
            # Nothing but spec.unschedulable, the watchdog's annotation and the server's own metadata.
            "name": "onlyItsFieldsChanged",
            "expression": " && ".join(
                [
                    update,
                    same_except("object", "oldObject", ["metadata", "spec"]),
                    same_except("object.metadata", "oldObject.metadata", [*_SERVER_METADATA, "annotations"]),
                    same_except(
                        "variables.newAnnotations", "variables.oldAnnotations", [GANG_WATCHDOG_ANNOTATION]
                    ),
                    same_except("variables.newSpec", "variables.oldSpec", ["unschedulable"]),
                ]
            ),
        },
        {"name": "newCordoned", "expression": f"{update} && {cordoned('new')}"},
        {"name": "oldCordoned", "expression": f"{update} && {cordoned('old')}"},
        {"name": "newMarked", "expression": f"{update} && {mark} in variables.newAnnotations"},
        {"name": "oldMarked", "expression": f"{update} && {mark} in variables.oldAnnotations"},
    ]

    who = "the gang watchdog"
    validations = [
        refuse(update, f"{who} may only update nodes"),
        refuse(
            f"!{update} || variables.isTrainiumNode",
            f"{who} may only change nodes of the Trainium node groups {', '.join(node_groups)}",
        ),
        refuse(
            f"!{update} || variables.onlyItsFieldsChanged",
            f"{who} may only change spec.unschedulable and the annotation {GANG_WATCHDOG_ANNOTATION}",
        ),
        refuse(
            f"!{update} || variables.newCordoned == variables.newMarked",
            f"{who} cordons a node only with its annotation {GANG_WATCHDOG_ANNOTATION}, and lifts both together",
        ),
        refuse(
            f"!{update} || !variables.oldCordoned || variables.oldMarked",
            f"{who} may not change a node that someone else cordoned",
        ),
    ]
    return service_account_policy_spec(
        username=username, resources=["nodes", "nodes/*"], variables=variables, validations=validations
    )


# Volcano's job controller kills the job's pods on this action and leaves the job Terminated.
RUN_END_ACTION = "TerminateJob"
RUN_POLICY_NAME = f"{NAME}-runs"
_JOB_STATE_FIELDS = ("reason", "message")


def _run_policy(*, username: str) -> dict[str, Any]:
    """The second policy's spec: ``username`` may create only TerminateJob commands aimed at a
    Volcano Job, and change nothing of a Job's status but ``status.state.reason`` and ``message``."""
    who = "the gang watchdog"
    command = "request.resource.resource == 'commands'"
    status = (
        "request.resource.resource == 'jobs' && has(request.subResource) && request.subResource == 'status'"
    )
    old_state = "has(oldObject.status) && has(oldObject.status.state) ? oldObject.status.state : {}"
    new_state = "has(object.status) && has(object.status.state) ? object.status.state : {}"
    validations = [
        refuse(f"{command} || {status}", f"{who} may only create Volcano commands and update Job status"),
        refuse(
            f"!({command}) || (request.operation == 'CREATE' && has(object.action)"
            f" && object.action == {cel_string(RUN_END_ACTION)} && has(object.target)"
            " && has(object.target.kind) && object.target.kind == 'Job'"
            " && has(object.target.apiVersion) && object.target.apiVersion == 'batch.volcano.sh/v1alpha1')",
            f"{who} may only create {RUN_END_ACTION} commands aimed at a Volcano Job",
        ),
        refuse(
            f"!({status}) || (request.operation == 'UPDATE'"
            " && "
            + same_except("object", "oldObject", ["metadata", "status"])
            + " && "
            + same_except("object.metadata", "oldObject.metadata", list(_SERVER_METADATA))
            + " && "
            + same_except(
                "(has(object.status) ? object.status : {})",
                "(has(oldObject.status) ? oldObject.status : {})",
                ["state"],
            )
            + " && "
            + same_except(f"({new_state})", f"({old_state})", list(_JOB_STATE_FIELDS))
            + ")",
            f"{who} may only change a Job's status.state.reason and status.state.message",
        ),
    ]
    return {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": ["bus.volcano.sh"],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                    "resources": ["commands", "commands/*"],
                },
                {
                    "apiGroups": ["batch.volcano.sh"],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE", "DELETE"],
                    "resources": ["jobs", "jobs/*"],
                },
            ]
        },
        "matchConditions": [
            {
                "name": "this-service-account-only",
                "expression": f"has(request.userInfo.username) && request.userInfo.username == {cel_string(username)}",
            }
        ],
        "validations": validations,
    }


class GangWatchdogAdmissionChart(cdk8s.Chart):
    """The ValidatingAdmissionPolicies ``gang-watchdog`` (nodes) and ``gang-watchdog-runs`` (the
    stuck-run guard's Volcano writes), and their bindings (see the module's docstring)."""

    def __init__(self, scope: Construct, id: str, *, namespace: str, node_groups: Sequence[str]) -> None:
        super().__init__(scope, id)
        username = service_account_username(namespace, NAME)
        admission_policy(
            self,
            name=NAME,
            labels=GANG_WATCHDOG_LABELS,
            spec=_policy(node_groups=node_groups, username=username),
            binding_spec={"validationActions": ["Deny"]},
        )
        runs = Construct(self, "Runs")
        admission_policy(
            runs,
            name=RUN_POLICY_NAME,
            labels=GANG_WATCHDOG_LABELS,
            spec=_run_policy(username=username),
            binding_spec={"validationActions": ["Deny"]},
        )


def _arguments(values: GangWatchdogValues) -> list[str]:
    return [
        f"--namespaces={','.join(values.namespaces)}",
        f"--node-groups={','.join(values.node_groups)}",
        *(f"--team={namespace}={','.join(groups)}" for namespace, groups in values.owners().items()),
        f"--node-group-label={NODE_GROUP_LABEL}",
        f"--annotation={GANG_WATCHDOG_ANNOTATION}",
        f"--threshold-minutes={values.threshold_minutes}",
        f"--interval-seconds={values.interval_seconds}",
        *(
            [
                f"--stuck-minutes={values.stuck_run_minutes}",
                f"--stuck-annotation={STUCK_MINUTES_ANNOTATION}",
                f"--stuck-max-minutes={values.stuck_run_max_minutes or values.stuck_run_minutes}",
            ]
            if values.stuck_run_minutes is not None
            else []
        ),
    ]


def _metadata(**extra: Any) -> k8s.ObjectMeta:
    """The watchdog's name and labels, with ``extra`` (its namespace, annotations)."""
    return k8s.ObjectMeta(name=NAME, labels=GANG_WATCHDOG_LABELS, **extra)


class GangWatchdogChart(cdk8s.Chart):
    """ServiceAccount, RBAC, ConfigMap, Deployment and NetworkPolicy ``gang-watchdog`` in ``namespace``."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        values: GangWatchdogValues,
        namespace: str,
        vpc_cidr: str,
    ) -> None:
        super().__init__(scope, id)
        subject = self._cluster_access(namespace)
        self._team_roles(values, subject)
        self._workload(values, namespace)
        self._network_policy(namespace, vpc_cidr)

    def _cluster_access(self, namespace: str) -> k8s.Subject:
        """The ServiceAccount, and its ClusterRole on pods and nodes; returns it as a subject."""
        k8s.KubeServiceAccount(
            self,
            "ServiceAccount",
            metadata=_metadata(namespace=namespace),
            # Only the watchdog's pod asks for the token.
            automount_service_account_token=False,
        )
        subject = k8s.Subject(kind="ServiceAccount", name=NAME, namespace=namespace)
        # Pods everywhere (what runs on each node: DaemonSets in kube-system, any team's pods); nodes
        # to read and patch (the admission policy narrows the patch). Watch on nodes: the loop keeps the
        # lists each pass reads current through watches (cluster_programs/kube_mirror.py, issue #36);
        # pods it watches only in the team namespaces (their Roles).
        k8s.KubeClusterRole(
            self,
            "ClusterRole",
            metadata=_metadata(),
            rules=[
                k8s.PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list"]),
                k8s.PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get", "list", "watch", "patch"]),
            ],
        )
        k8s.KubeClusterRoleBinding(
            self,
            "ClusterRoleBinding",
            metadata=_metadata(),
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=NAME),
            subjects=[subject],
        )
        return subject

    def _team_roles(self, values: GangWatchdogValues, subject: k8s.Subject) -> None:
        """A Role and its binding in each team namespace the watchdog watches."""
        # PodGroups only in the team namespaces it watches; with the stuck-run guard, also what
        # judging and ending a run takes there: its Jobs, its pods' logs (the newest line: is it
        # progressing?), TerminateJob commands and the Job's status reason (the admission policy
        # gang-watchdog-runs narrows both), and an Event on the Job.
        guard_rules = [
            k8s.PolicyRule(
                api_groups=["batch.volcano.sh"], resources=["jobs"], verbs=["get", "list", "watch"]
            ),
            k8s.PolicyRule(api_groups=["batch.volcano.sh"], resources=["jobs/status"], verbs=["patch"]),
            k8s.PolicyRule(api_groups=["bus.volcano.sh"], resources=["commands"], verbs=["create"]),
            k8s.PolicyRule(api_groups=[""], resources=["pods/log"], verbs=["get"]),
            k8s.PolicyRule(api_groups=[""], resources=["events"], verbs=["create"]),
        ]
        for team in values.namespaces:
            k8s.KubeRole(
                self,
                f"Role-{team}",
                metadata=_metadata(namespace=team),
                rules=[
                    k8s.PolicyRule(
                        api_groups=["scheduling.volcano.sh"],
                        resources=["podgroups"],
                        verbs=["get", "list", "watch"],
                    ),
                    # The team's unfinished pods, kept by a watch (the ClusterRole lists them everywhere).
                    k8s.PolicyRule(api_groups=[""], resources=["pods"], verbs=["watch"]),
                    *(guard_rules if values.stuck_run_minutes is not None else []),
                ],
            )
            k8s.KubeRoleBinding(
                self,
                f"RoleBinding-{team}",
                metadata=_metadata(namespace=team),
                role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=NAME),
                subjects=[subject],
            )

    def _workload(self, values: GangWatchdogValues, namespace: str) -> None:
        """The program's ConfigMap and the Deployment that runs it."""
        k8s.KubeConfigMap(self, "Program", metadata=_metadata(namespace=namespace), data=PROGRAM_FILES)
        k8s.KubeDeployment(
            self,
            "Deployment",
            metadata=_metadata(
                namespace=namespace,
                annotations=policy_exceptions(
                    {**_POLICY_EXCEPTIONS, **digest_exceptions(values.image), **pull_policy_exceptions()}
                ),
            ),
            spec=k8s.DeploymentSpec(
                replicas=1,
                # One writer at a time, also during a rollout.
                strategy=k8s.DeploymentStrategy(type="Recreate"),
                selector=k8s.LabelSelector(match_labels=GANG_WATCHDOG_LABELS),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(
                        labels=GANG_WATCHDOG_LABELS,
                        # A new program is a new pod: the ConfigMap alone would not restart it.
                        annotations={"trainium/program-sha256": program_digest(PROGRAM_FILES)},
                    ),
                    spec=_pod_spec(values),
                ),
            ),
        )

    def _network_policy(self, namespace: str, vpc_cidr: str) -> None:
        """No ingress; egress to DNS and the API server only."""
        selector = k8s.LabelSelector(match_labels=GANG_WATCHDOG_LABELS)
        k8s.KubeNetworkPolicy(
            self,
            "NetworkPolicy",
            metadata=_metadata(namespace=namespace),
            spec=k8s.NetworkPolicySpec(
                pod_selector=selector,
                # Ingress selected with no rule: no pod may connect. Egress: DNS, and the API server
                # at its Service address and its endpoints, on 443.
                policy_types=["Ingress", "Egress"],
                egress=[dns_egress_rule(), *api_server_egress_rules(vpc_cidr)],
            ),
        )


def _pod_spec(values: GangWatchdogValues) -> k8s.PodSpec:
    return k8s.PodSpec(
        service_account_name=NAME,
        automount_service_account_token=True,
        enable_service_links=False,
        # No toleration for the Trainium taint: it runs on the system nodes.
        priority_class_name="system-cluster-critical",
        security_context=k8s.PodSecurityContext(
            run_as_non_root=True,
            run_as_user=_UID,
            run_as_group=_UID,
            seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
        ),
        containers=[
            k8s.Container(
                name=NAME,
                image=values.image,
                command=["python", f"{_PROGRAM_DIR}/{_PROGRAM_FILE}"],
                args=_arguments(values),
                env=[
                    k8s.EnvVar(name="PYTHONDONTWRITEBYTECODE", value="1"),
                    k8s.EnvVar(name="PYTHONUNBUFFERED", value="1"),
                ],
                # Pinned, from a repository that keeps its tags (k8s_charts/shared/policy_exceptions.py).
                image_pull_policy=PINNED_PULL_POLICY,
                # A Python loop that lists the teams' pods and PodGroups and the nodes' metadata once a
                # minute; a pass takes a CPU for a moment. Only while it holds a cordon or a gang is
                # stalled does it read the nodes in full and every pod of the cluster, a page of 500
                # at a time. When every pass read every pod at once, `make bench-scale` measured 282
                # MiB resident at 1,024 nodes (53 MiB of JSON a pass), over the 256Mi this had; 1Gi
                # is kept for that read at several thousand nodes (docs/performance.md, "Scale").
                resources=container_resources(
                    requests={"cpu": "10m", "memory": "96Mi"}, limits={"cpu": "500m", "memory": "1Gi"}
                ),
                security_context=k8s.SecurityContext(
                    allow_privilege_escalation=False,
                    capabilities=k8s.Capabilities(drop=["ALL"]),
                    read_only_root_filesystem=True,
                ),
                volume_mounts=[k8s.VolumeMount(name="program", mount_path=_PROGRAM_DIR, read_only=True)],
            )
        ],
        volumes=[
            k8s.Volume(name="program", config_map=k8s.ConfigMapVolumeSource(name=NAME, default_mode=0o444))
        ],
    )


Renderer = Callable[[Callable[[cdk8s.App, str], cdk8s.Chart], str], tuple[Mapping[str, Any], ...]]


def gang_watchdog_steps(
    values: GangWatchdogValues,
    *,
    namespace: str,
    vpc_cidr: str,
    after: tuple[str, ...],
    render: Renderer,
) -> list[ManifestSet]:
    """The admission policy, then the watchdog (after ``after``: its namespaces exist)."""
    return [
        ManifestSet(
            name=ADMISSION_STEP,
            manifests=render(
                partial(GangWatchdogAdmissionChart, namespace=namespace, node_groups=values.node_groups),
                ADMISSION_STEP,
            ),
        ),
        ManifestSet(
            name=STEP,
            manifests=render(
                partial(GangWatchdogChart, values=values, namespace=namespace, vpc_cidr=vpc_cidr), STEP
            ),
            # The API server confines the watchdog before it runs.
            after=(ADMISSION_STEP, *after),
        ),
    ]
