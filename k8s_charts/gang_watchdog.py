"""The gang watchdog: cordon the idle Trainium nodes that stall a partly placeable Volcano gang.

Volcano 1.15.1 marks the placeable pods of a gang that does not fit whole with reason ``Schedulable``
and the Cluster Autoscaler acts only on ``Unschedulable`` (volcano-sh/volcano#3976): with fewer idle
nodes than a gang needs, the autoscaler neither adds the missing nodes nor removes the idle ones
(docs/capacity.md). k8s_charts/scripts/gang_watchdog.py cordons those idle nodes after the
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

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.images import pinned_image_problem
from cluster_facts.kubernetes_names import GANG_WATCHDOG_ANNOTATION, NODE_GROUP_LABEL
from cluster_facts.kubernetes_plan import ManifestSet
from cluster_facts.script_files import script_text
from k8s_charts.admission_policy import (
    admission_policy,
    cel_list,
    cel_string,
    refuse,
    same_except,
    service_account_policy_spec,
    service_account_username,
)
from k8s_charts.policy_exceptions import (
    PINNED_PULL_POLICY,
    digest_exceptions,
    policy_exceptions,
    pull_policy_exceptions,
)
from k8s_charts.resources import container_resources
from k8s_charts.tenant_network import api_server_egress_rules, dns_egress_rule

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
# Docker Official Image python:3.12.12-slim-trixie on ECR Public, TensorBoard's too: one image in
# the pull-through cache for both.
DEFAULT_IMAGE = "public.ecr.aws/docker/library/python:3.12.12-slim-trixie"
DEFAULT_INTERVAL_SECONDS = 60
GANG_WATCHDOG_LABELS: dict[str, str] = {
    "app.kubernetes.io/name": NAME,
    "app.kubernetes.io/component": "capacity",
}
PROGRAM = script_text("k8s_charts", "gang_watchdog.py")
_PROGRAM_FILE = "gang_watchdog.py"
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


class GangWatchdogAdmissionChart(cdk8s.Chart):
    """The ValidatingAdmissionPolicy ``gang-watchdog`` and its binding (see the module's docstring)."""

    def __init__(self, scope: Construct, id: str, *, namespace: str, node_groups: Sequence[str]) -> None:
        super().__init__(scope, id)
        admission_policy(
            self,
            name=NAME,
            labels=GANG_WATCHDOG_LABELS,
            spec=_policy(node_groups=node_groups, username=service_account_username(namespace, NAME)),
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
    ]


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
        labels = GANG_WATCHDOG_LABELS

        def metadata(**extra: Any) -> k8s.ObjectMeta:
            return k8s.ObjectMeta(name=NAME, labels=labels, **extra)

        k8s.KubeServiceAccount(
            self,
            "ServiceAccount",
            metadata=metadata(namespace=namespace),
            # Only the watchdog's pod asks for the token.
            automount_service_account_token=False,
        )
        subject = k8s.Subject(kind="ServiceAccount", name=NAME, namespace=namespace)
        # Pods everywhere (what runs on each node: DaemonSets in kube-system, any team's pods); nodes
        # to read and patch (the admission policy narrows the patch). No watch: each pass lists.
        k8s.KubeClusterRole(
            self,
            "ClusterRole",
            metadata=metadata(),
            rules=[
                k8s.PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list"]),
                k8s.PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get", "list", "patch"]),
            ],
        )
        k8s.KubeClusterRoleBinding(
            self,
            "ClusterRoleBinding",
            metadata=metadata(),
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=NAME),
            subjects=[subject],
        )
        # PodGroups only in the team namespaces it watches.
        for team in values.namespaces:
            k8s.KubeRole(
                self,
                f"Role-{team}",
                metadata=metadata(namespace=team),
                rules=[
                    k8s.PolicyRule(
                        api_groups=["scheduling.volcano.sh"], resources=["podgroups"], verbs=["get", "list"]
                    )
                ],
            )
            k8s.KubeRoleBinding(
                self,
                f"RoleBinding-{team}",
                metadata=metadata(namespace=team),
                role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=NAME),
                subjects=[subject],
            )
        k8s.KubeConfigMap(
            self, "Program", metadata=metadata(namespace=namespace), data={_PROGRAM_FILE: PROGRAM}
        )
        k8s.KubeDeployment(
            self,
            "Deployment",
            metadata=metadata(
                namespace=namespace,
                annotations=policy_exceptions(
                    {**_POLICY_EXCEPTIONS, **digest_exceptions(values.image), **pull_policy_exceptions()}
                ),
            ),
            spec=k8s.DeploymentSpec(
                replicas=1,
                # One writer at a time, also during a rollout.
                strategy=k8s.DeploymentStrategy(type="Recreate"),
                selector=k8s.LabelSelector(match_labels=labels),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(
                        labels=labels,
                        # A new program is a new pod: the ConfigMap alone would not restart it.
                        annotations={"trainium/program-sha256": hashlib.sha256(PROGRAM.encode()).hexdigest()},
                    ),
                    spec=_pod_spec(values),
                ),
            ),
        )
        selector = k8s.LabelSelector(match_labels=labels)
        k8s.KubeNetworkPolicy(
            self,
            "NetworkPolicy",
            metadata=metadata(namespace=namespace),
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
                # Pinned, from a repository that keeps its tags (k8s_charts/policy_exceptions.py).
                image_pull_policy=PINNED_PULL_POLICY,
                resources=container_resources(
                    requests={"cpu": "10m", "memory": "96Mi"}, limits={"cpu": "500m", "memory": "256Mi"}
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
