"""The node check: every new Trainium node proves itself before a gang can land on it.

Trainium nodes register with the startup taint ``NODE_CHECK_TAINT`` (cluster_facts/node_check.py,
set on the node groups). This chart runs cluster_programs/node_check.py on each of them as a
DaemonSet in ``kube-system``, beside the device plugins: it tolerates the Neuron taint and the
startup taint (no training pod tolerates the latter), checks the node's Neuron devices and cores,
a local all-reduce, each EFA device and the file system, then lifts the taint or keeps it, sets
the condition ``TrainiumNodeCheck`` and, on failure, has the instance replaced within its group's
replacement budget (past it the node keeps a failed taint and the autoscaler removes it; a failure
that repeats after a replacement suspends the group's launches). docs/health.md ("The node check")
has the checks, their time and what a failure looks like; docs/capacity.md the bound on a failure
that hits every new node.

Two steps of the plan:

- ``NodeCheckAdmissionChart`` (applied first): a ValidatingAdmissionPolicy and binding that let the
  check's service account make exactly two changes, both on its own node (the node its pod-bound
  token names, as for the Neuron device plugin) and only on a Trainium node: remove the startup
  taint (nothing else of the node changes), put on or remove the EFA taint, put on the failed taint,
  and set its own condition in the node's status (no other condition, no other status field). RBAC
  cannot narrow ``patch nodes`` that far.
- ``NodeCheckChart``: ServiceAccount, ClusterRole (get nodes, patch nodes and nodes/status), a Role
  to record Events in ``kube-system`` and to read and update each group's replacement record (a
  ConfigMap per Trainium group, by name), those records, the programs in a ConfigMap, the DaemonSet;
  with unresponsive nodes replaced, the Deployment ``node-check-fence``: one unprivileged replica on
  the system nodes that fences the Trainium nodes whose kubelet went silent (same account).

Why privileged: a DaemonSet pod that requested the node's Neuron devices and EFA interfaces through
the device plugins would hold them for as long as it exists (a DaemonSet's pod never ends), and no
training pod could have them. Privileged, the container sees the host's ``/dev/neuron*`` and
``/dev/infiniband/*`` without taking them from the scheduler; it uses them only while the node is
still tainted, when nothing else may run there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.dra import DEVICES_LABEL, FAULTY_DEVICE_TAINT_KEY, NEURON_DRA_DRIVER
from cluster_facts.images import pinned_image_problem
from cluster_facts.kubernetes_names import (
    EFA_INTERFACES_LABEL,
    NEURON_CORES_LABEL,
    NEURON_DEVICES_LABEL,
    NEURON_TAINT_KEY,
    NODE_GROUP_LABEL,
)
from cluster_facts.node_check import (
    EFA_ERROR_COUNTERS,
    EFA_ERROR_LIMIT,
    EFA_ERROR_WINDOW_SECONDS,
    EFA_SUSPECT_TAINT,
    EFA_SUSPECT_TAINT_KEY,
    NODE_CHECK_CONDITION,
    NODE_CHECK_FAILED_TAINT_KEY,
    NODE_CHECK_NAME,
    NODE_CHECK_NAMESPACE,
    NODE_CHECK_TAINT,
    NODE_CHECK_TAINT_KEY,
    NODE_FENCE_NAME,
    NODE_READ_SECONDS,
    REPLACEMENT_RECORD_PREFIX,
    STEP_TIMEOUT_SECONDS,
    WATCH_SECONDS,
    replacement_record,
)
from k8s_charts.devices.device_plugin_admission import NODE_NAME_EXTRA
from k8s_charts.network.system_network import pod_identity_egress_rule, system_pod_policy
from k8s_charts.network.tenant_network import (
    api_server_egress_rules,
    dns_egress_rule,
    https_egress_rule,
    tcp_port,
)
from k8s_charts.shared.admission_policy import (
    admission_policy,
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
    "LUSTRE_PORT",
    "PROGRAM_FILES",
    "STEP",
    "STEP_TIMEOUT_SECONDS",
    "NodeCheckAdmissionChart",
    "NodeCheckChart",
    "NodeCheckValues",
]

STEP = NODE_CHECK_NAME
ADMISSION_STEP = f"{NODE_CHECK_NAME}-admission"
LUSTRE_PORT = 988
"""The port Lustre clients connect to (FSx for Lustre User Guide, "File System Access Control with
Amazon VPC": TCP 988 and 1018-1023)."""


_PROGRAM_DIR = "/opt/node-check"
# The program, its verdict parser, the fabric check's nccom-test parser it reuses, the API client,
# and the fence of unresponsive nodes (one Deployment for the cluster, same image and account).
PROGRAM_FILES = program_files(
    "node_check.py",
    "node_check_budget.py",
    "node_check_devices.py",
    "node_check_verdict.py",
    "fabric_verdict.py",
    "node_fence.py",
)
_LABELS = {"app.kubernetes.io/name": NODE_CHECK_NAME, "app.kubernetes.io/component": "health"}

# The path is where the module was before the rooms (issue #37): the text is rendered into the pods'
# template, so it waits for a change that restarts the node checks anyway.
_HOST_ACCESS = (
    "the node check reads the host's Neuron and EFA devices without taking them from the device "
    "plugins, which a DaemonSet pod would hold for good (k8s_charts/node_check.py)"
)
_EXCEPTIONS: dict[str, str] = {
    "CKV_K8S_16": _HOST_ACCESS,
    "CKV_K8S_20": "Kubernetes rejects allowPrivilegeEscalation false on a privileged container",
    "CKV_K8S_23": "privileged, as the device plugins are: " + _HOST_ACCESS,
    "CKV_K8S_40": "privileged, as the device plugins are: " + _HOST_ACCESS,
    "CKV_K8S_28": _HOST_ACCESS + " (a privileged container keeps every capability)",
    "CKV_K8S_37": _HOST_ACCESS + " (a privileged container keeps every capability)",
    "CKV_K8S_22": "the Neuron tools write their logs and compiled collectives under the image's paths",
    "CKV_K8S_38": "the check lifts its own node's startup taint and sets its condition through the API",
    "CKV_K8S_8": "the check runs once per node and then watches it; a probe would restart a check that is working",
    "CKV_K8S_9": "nothing connects to the check, so there is no readiness to report",
}


@dataclass(frozen=True, kw_only=True)
class NodeCheckValues:
    """The node check of the cluster's Trainium nodes."""

    image: str
    """A Neuron training image: it ships neuron-ls, nccom-test, fi_info, fi_pingpong and the AWS CLI.
    The cluster's default training image, so its pull also serves the first training pod."""
    lustre_host: str
    """The file system's DNS name (a token at synth)."""
    region: str
    vpc_cidr: str
    """The NetworkPolicy's address range for the file system and the API server's endpoints."""
    replace_failed_nodes: bool = True
    """Mark a failed node's instance Unhealthy in its Auto Scaling group (needs the check's AWS role)."""
    replace_unresponsive_after_seconds: int | None = 300
    """Mark Unhealthy the instance of a Trainium node whose kubelet has been silent this long (the
    Deployment ``node-check-fence`` does it for the cluster); None: leave it to EKS node auto repair.
    Only with ``replace_failed_nodes``."""

    @property
    def fences(self) -> bool:
        return self.replace_failed_nodes and self.replace_unresponsive_after_seconds is not None

    node_groups: tuple[str, ...] = ()
    """The Trainium node groups: one replacement record (ConfigMap) each, the only ones the check may
    read and update."""
    replacements_per_window: int = 1
    replacement_window_seconds: int = 1800
    """The replacement budget of each group (cluster_programs/node_check_budget.py)."""
    device_taint_rule_api: str | None = None
    """The API version of DeviceTaintRule where the cluster serves it and has ``devices: dra`` groups
    (cluster_facts/dra.py ``DEVICE_TAINTS``): the check then fences a DRA node's missing Neuron
    devices instead of failing the node (cluster_programs/node_check_devices.py); None: it fails it."""

    def __post_init__(self) -> None:
        problem = pinned_image_problem(self.image)
        if problem is not None:
            raise ValueError(f"node check image: {problem}")


def _is_startup_taint(variable: str) -> str:
    return f"{variable}.key == {cel_string(NODE_CHECK_TAINT_KEY)}"


def _is_efa_taint(variable: str) -> str:
    """Exactly the EFA taint (its key, value and effect, and nothing else)."""
    return " && ".join(
        [
            f"{variable}.key == {cel_string(EFA_SUSPECT_TAINT_KEY)}",
            f"has({variable}.value) && {variable}.value == {cel_string(EFA_SUSPECT_TAINT['value'])}",
            f"{variable}.effect == {cel_string(EFA_SUSPECT_TAINT['effect'])}",
            f"!has({variable}.timeAdded)",
        ]
    )


def _is_failed_taint(variable: str) -> str:
    """The failed taint, its value a reason (letters and digits, as the verdicts name them)."""
    return " && ".join(
        [
            f"{variable}.key == {cel_string(NODE_CHECK_FAILED_TAINT_KEY)}",
            f"has({variable}.value) && {variable}.value.matches('^[A-Za-z0-9]{{1,63}}$')",
            f"{variable}.effect == 'NoSchedule'",
            f"!has({variable}.timeAdded)",
        ]
    )


# Fields the API server writes on every update; the policy ignores them.
_SERVER_METADATA = ["managedFields", "resourceVersion"]


def _request_variables() -> list[dict[str, str]]:
    """Who calls (the node its token is bound to) and what: a node or a node status update of its own Trainium node."""
    extra = f"request.userInfo.extra[{cel_string(NODE_NAME_EXTRA)}]"
    return [
        {
            "name": "nodeName",
            "expression": f"has(request.userInfo.extra) && {cel_string(NODE_NAME_EXTRA)} in request.userInfo.extra"
            f" && size({extra}) == 1 ? {extra}[0] : ''",
        },
        {"name": "subResource", "expression": "has(request.subResource) ? request.subResource : ''"},
        {
            "name": "isNodeUpdate",
            "expression": "request.operation == 'UPDATE' && request.resource.resource == 'nodes'"
            " && variables.subResource == ''",
        },
        {
            "name": "isStatusUpdate",
            "expression": "request.operation == 'UPDATE' && request.resource.resource == 'nodes'"
            " && variables.subResource == 'status'",
        },
        {
            "name": "ownTrainiumNode",
            "expression": "(variables.isNodeUpdate || variables.isStatusUpdate) && variables.nodeName != ''"
            " && oldObject.metadata.name == variables.nodeName && has(oldObject.metadata.labels)"
            f" && {cel_string(NEURON_DEVICES_LABEL)} in oldObject.metadata.labels",
        },
    ]


def _taint_variables() -> list[dict[str, str]]:
    """The node's taints before and after, and whether only the check's own changed."""
    return [
        {
            "name": "newSpec",
            "expression": "variables.isNodeUpdate && has(object.spec) ? object.spec : {}",
        },
        {
            "name": "oldSpec",
            "expression": "variables.isNodeUpdate && has(oldObject.spec) ? oldObject.spec : {}",
        },
        {
            "name": "newTaints",
            "expression": "has(variables.newSpec.taints) ? variables.newSpec.taints : []",
        },
        {
            "name": "oldTaints",
            "expression": "has(variables.oldSpec.taints) ? variables.oldSpec.taints : []",
        },
        {
            # Nothing changes but the taints, and of those only three: the startup taint may go, the
            # EFA taint may come or go, the failed taint may come. Every other taint is kept; nothing
            # else is added (the startup taint cannot come back), and the failed taint never goes.
            "name": "onlyOwnTaintsChanged",
            "expression": " && ".join(
                [
                    "variables.isNodeUpdate",
                    same_except("object", "oldObject", ["metadata", "spec"]),
                    same_except("object.metadata", "oldObject.metadata", _SERVER_METADATA),
                    same_except("variables.newSpec", "variables.oldSpec", ["taints"]),
                    (
                        "variables.newTaints.all(t, t in variables.oldTaints"
                        f" || ({_is_efa_taint('t')}) || ({_is_failed_taint('t')}))"
                    ),
                    (
                        "variables.oldTaints.all(t, t in variables.newTaints || ("
                        f"{_is_startup_taint('t')}) || t.key == {cel_string(EFA_SUSPECT_TAINT_KEY)})"
                    ),
                ]
            ),
        },
    ]


def _condition_variables() -> list[dict[str, str]]:
    """The node's conditions before and after, and whether only the check's own changed."""
    condition = cel_string(NODE_CHECK_CONDITION)
    return [
        {
            "name": "newStatus",
            "expression": "variables.isStatusUpdate && has(object.status) ? object.status : {}",
        },
        {
            "name": "oldStatus",
            "expression": "variables.isStatusUpdate && has(oldObject.status) ? oldObject.status : {}",
        },
        {
            "name": "newConditions",
            "expression": "has(variables.newStatus.conditions) ? variables.newStatus.conditions : []",
        },
        {
            "name": "oldConditions",
            "expression": "has(variables.oldStatus.conditions) ? variables.oldStatus.conditions : []",
        },
        {
            # Nothing changes but this check's own condition (at most one entry of its type).
            "name": "onlyOwnCondition",
            "expression": " && ".join(
                [
                    "variables.isStatusUpdate",
                    same_except("object", "oldObject", ["metadata", "status"]),
                    same_except("object.metadata", "oldObject.metadata", _SERVER_METADATA),
                    same_except("variables.newStatus", "variables.oldStatus", ["conditions"]),
                    (
                        f"variables.newConditions.filter(c, c.type != {condition})"
                        f" == variables.oldConditions.filter(c, c.type != {condition})"
                    ),
                    f"size(variables.newConditions.filter(c, c.type == {condition})) <= 1",
                ]
            ),
        },
    ]


def _validations() -> list[dict[str, str]]:
    """One refusal, with its reason, per thing the node check may not do."""
    who = "the node check"
    return [
        refuse(
            "variables.nodeName != ''",
            f"{who} must call with a pod-bound service-account token (user extra {NODE_NAME_EXTRA})",
        ),
        refuse(
            "variables.isNodeUpdate || variables.isStatusUpdate",
            f"{who} may only update nodes and nodes/status",
        ),
        refuse(
            "!(variables.isNodeUpdate || variables.isStatusUpdate) || variables.ownTrainiumNode",
            f"{who} may only change its own node, and only a Trainium node",
        ),
        refuse(
            "!variables.isNodeUpdate || variables.onlyOwnTaintsChanged",
            f"{who} may only remove the taint {NODE_CHECK_TAINT_KEY}, put on or remove the taint "
            f"{EFA_SUSPECT_TAINT_KEY}={EFA_SUSPECT_TAINT['value']}:{EFA_SUSPECT_TAINT['effect']}, and put on "
            f"the taint {NODE_CHECK_FAILED_TAINT_KEY}=<reason>:NoSchedule, of a node",
        ),
        refuse(
            "!variables.isStatusUpdate || variables.onlyOwnCondition",
            f"{who} may only set the node condition {NODE_CHECK_CONDITION}",
        ),
    ]


def _policy_spec(username: str) -> dict[str, Any]:
    """The service account may only remove the startup taint from, and set its condition on, its
    own Trainium node. Every expression guards itself (failurePolicy Fail: an error refuses)."""
    return service_account_policy_spec(
        username=username,
        resources=["nodes", "nodes/*"],
        variables=[*_request_variables(), *_taint_variables(), *_condition_variables()],
        validations=_validations(),
    )


class NodeCheckAdmissionChart(cdk8s.Chart):
    """The ValidatingAdmissionPolicy ``node-check`` and its binding (enforcing)."""

    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        admission_policy(
            self,
            name=NODE_CHECK_NAME,
            labels=_LABELS,
            spec=_policy_spec(service_account_username(NODE_CHECK_NAMESPACE, NODE_CHECK_NAME)),
            binding_spec={"validationActions": ["Deny"]},
        )


def _environment(values: NodeCheckValues) -> list[k8s.EnvVar]:
    plain: Mapping[str, str] = {
        "TAINT_KEY": NODE_CHECK_TAINT_KEY,
        "CONDITION_TYPE": NODE_CHECK_CONDITION,
        "NEURON_DEVICES_LABEL": NEURON_DEVICES_LABEL,
        "NEURON_CORES_LABEL": NEURON_CORES_LABEL,
        "EFA_INTERFACES_LABEL": EFA_INTERFACES_LABEL,
        "LUSTRE_HOST": values.lustre_host,
        "LUSTRE_PORT": str(LUSTRE_PORT),
        "STEP_TIMEOUT_SECONDS": str(STEP_TIMEOUT_SECONDS),
        "REPAIR": "replace" if values.replace_failed_nodes else "none",
        "EFA_TAINT": ":".join(EFA_SUSPECT_TAINT[part] for part in ("key", "value", "effect")),
        **_repair_environment(values),
        "EFA_ERROR_COUNTERS": " ".join(EFA_ERROR_COUNTERS),
        "EFA_ERROR_LIMIT": str(EFA_ERROR_LIMIT),
        "EFA_ERROR_WINDOW_SECONDS": str(EFA_ERROR_WINDOW_SECONDS),
        "WATCH_SECONDS": str(WATCH_SECONDS),
        "NODE_READ_SECONDS": str(NODE_READ_SECONDS),
        **_device_fence_environment(values),
    }
    field = k8s.EnvVarSource
    return [
        k8s.EnvVar(
            name="NODE_NAME", value_from=field(field_ref=k8s.ObjectFieldSelector(field_path="spec.nodeName"))
        ),
        k8s.EnvVar(
            name="POD_NAMESPACE",
            value_from=field(field_ref=k8s.ObjectFieldSelector(field_path="metadata.namespace")),
        ),
        *(k8s.EnvVar(name=name, value=value) for name, value in plain.items()),
    ]


def _repair_environment(values: NodeCheckValues) -> dict[str, str]:
    """What the check and the fence share: how a replacement is asked for and bounded."""
    return {
        "FAILED_TAINT_KEY": NODE_CHECK_FAILED_TAINT_KEY,
        "NODE_GROUP_LABEL": NODE_GROUP_LABEL,
        "REPLACEMENT_RECORD_PREFIX": REPLACEMENT_RECORD_PREFIX,
        "REPLACEMENTS_PER_WINDOW": str(values.replacements_per_window),
        "REPLACEMENT_WINDOW_SECONDS": str(values.replacement_window_seconds),
        "AWS_REGION": values.region,
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _device_fence_environment(values: NodeCheckValues) -> dict[str, str]:
    if values.device_taint_rule_api is None:
        return {}
    return {
        "DEVICE_TAINT_RULE_API": values.device_taint_rule_api,
        "FAULTY_DEVICE_TAINT_KEY": FAULTY_DEVICE_TAINT_KEY,
        "NEURON_DRA_DRIVER": NEURON_DRA_DRIVER,
        "DEVICES_LABEL": DEVICES_LABEL,
    }


def _cluster_rules(values: NodeCheckValues) -> list[k8s.PolicyRule]:
    rules = [
        # list: the fence (node-check-fence, this account) finds the Trainium nodes whose kubelet went
        # silent (docs/health.md); the DaemonSet's pods no longer list (a second account would need
        # a second Pod Identity association of the same role).
        k8s.PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get", "list", "patch"]),
        k8s.PolicyRule(api_groups=[""], resources=["nodes/status"], verbs=["patch"]),
    ]
    if values.device_taint_rule_api is not None:
        # Only creates; which rule, the policy node-check-own-devices decides (k8s_charts/devices/dra_admission.py).
        rules.append(
            k8s.PolicyRule(api_groups=["resource.k8s.io"], resources=["devicetaintrules"], verbs=["create"])
        )
    return rules


class NodeCheckChart(cdk8s.Chart):
    """ServiceAccount, RBAC, ConfigMap and DaemonSet ``node-check`` in kube-system."""

    def __init__(self, scope: Construct, id: str, *, values: NodeCheckValues) -> None:
        super().__init__(scope, id)
        name, namespace = NODE_CHECK_NAME, NODE_CHECK_NAMESPACE
        # What the check reaches (_egress); nothing reaches it. Loopback (fi_pingpong's control
        # socket) and EFA never meet a policy.
        system_pod_policy(
            self, "NetworkPolicy", name=name, namespace=namespace, pod_labels=_LABELS, egress=_egress(values)
        )
        metadata = k8s.ObjectMeta(name=name, namespace=namespace, labels=_LABELS)
        k8s.KubeServiceAccount(
            self, "ServiceAccount", metadata=metadata, automount_service_account_token=False
        )
        subject = k8s.Subject(kind="ServiceAccount", name=name, namespace=namespace)
        k8s.KubeClusterRole(
            self,
            "ClusterRole",
            metadata=k8s.ObjectMeta(name=name, labels=_LABELS),
            rules=_cluster_rules(values),
        )
        k8s.KubeClusterRoleBinding(
            self,
            "ClusterRoleBinding",
            metadata=k8s.ObjectMeta(name=name, labels=_LABELS),
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=name),
            subjects=[subject],
        )
        k8s.KubeRole(self, "Role", metadata=metadata, rules=_namespace_rules(values))
        for group in values.node_groups if values.replace_failed_nodes else ():
            # Created empty: RBAC cannot grant ``create`` of one name, so the check only updates it. A
            # deploy's ``kubectl apply`` owns no key of it (none in the manifest) and so keeps the record.
            k8s.KubeConfigMap(
                self,
                f"Record-{group}",
                metadata=k8s.ObjectMeta(name=replacement_record(group), namespace=namespace, labels=_LABELS),
            )
        k8s.KubeRoleBinding(
            self,
            "RoleBinding",
            metadata=metadata,
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=name),
            subjects=[subject],
        )
        k8s.KubeConfigMap(self, "Program", metadata=metadata, data=PROGRAM_FILES)
        exceptions = policy_exceptions(
            {**_EXCEPTIONS, **digest_exceptions(values.image), **pull_policy_exceptions()}
        )
        k8s.KubeDaemonSet(
            self,
            "DaemonSet",
            metadata=k8s.ObjectMeta(name=name, namespace=namespace, labels=_LABELS, annotations=exceptions),
            spec=k8s.DaemonSetSpec(
                selector=k8s.LabelSelector(match_labels=_LABELS),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(
                        labels=_LABELS,
                        # A new program is a new pod: the ConfigMap alone would not restart it.
                        annotations={
                            **exceptions,
                            "trainium/program-sha256": program_digest(PROGRAM_FILES),
                        },
                    ),
                    spec=_pod_spec(values),
                ),
            ),
        )
        if values.fences:
            _fence(self, values)


def _namespace_rules(values: NodeCheckValues) -> list[k8s.PolicyRule]:
    """Events in kube-system; with replacement on, its groups' replacement records, by name: read
    and update (the write carries the resourceVersion it read, cluster_programs/node_check_budget.py)."""
    rules = [k8s.PolicyRule(api_groups=[""], resources=["events"], verbs=["create"])]
    if values.replace_failed_nodes and values.node_groups:
        names = [replacement_record(group) for group in values.node_groups]
        rules.append(
            k8s.PolicyRule(
                api_groups=[""], resources=["configmaps"], resource_names=names, verbs=["get", "update"]
            )
        )
    return rules


def _egress(values: NodeCheckValues) -> list[k8s.NetworkPolicyEgressRule]:
    """DNS, the API server (its node and condition, events), the file system's Lustre port in the
    VPC (its address is known only at run time: the VPC's range); with replacement on, the role's
    credentials from the Pod Identity Agent and the Auto Scaling API (HTTPS outside the cluster,
    through the NAT gateway)."""
    vpc = k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=values.vpc_cidr))
    rules = [
        dns_egress_rule(),
        *api_server_egress_rules(values.vpc_cidr),
        k8s.NetworkPolicyEgressRule(to=[vpc], ports=[tcp_port(LUSTRE_PORT)]),
    ]
    if values.replace_failed_nodes:
        rules += [pod_identity_egress_rule(), https_egress_rule(values.vpc_cidr)]
    return rules


def _pod_spec(values: NodeCheckValues) -> k8s.PodSpec:
    # Not NODE_GROUP_LABEL: the system nodes carry it too.
    trainium_only = k8s.NodeSelectorRequirement(key=NEURON_DEVICES_LABEL, operator="Exists")
    return k8s.PodSpec(
        service_account_name=NODE_CHECK_NAME,
        # Only this pod gets the token: it lifts its node's taint and sets its condition.
        automount_service_account_token=True,
        priority_class_name="system-node-critical",
        # A privileged container runs unconfined whatever this says; the pod states the default anyway.
        security_context=k8s.PodSecurityContext(seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault")),
        affinity=k8s.Affinity(
            node_affinity=k8s.NodeAffinity(
                required_during_scheduling_ignored_during_execution=k8s.NodeSelector(
                    node_selector_terms=[k8s.NodeSelectorTerm(match_expressions=[trainium_only])]
                )
            )
        ),
        # The Trainium taint and the startup taint the check exists to lift; nothing else.
        tolerations=[
            k8s.Toleration(key=NEURON_TAINT_KEY, operator="Exists", effect="NoSchedule"),
            k8s.Toleration(key=NODE_CHECK_TAINT["key"], operator="Exists", effect=NODE_CHECK_TAINT["effect"]),
        ],
        containers=[
            k8s.Container(
                name="check",
                image=values.image,
                image_pull_policy=PINNED_PULL_POLICY,
                command=["python3", f"{_PROGRAM_DIR}/node_check.py"],
                env=_environment(values),
                resources=k8s.ResourceRequirements(
                    requests={
                        "cpu": k8s.Quantity.from_string("1"),
                        "memory": k8s.Quantity.from_string("2Gi"),
                    },
                    limits={"cpu": k8s.Quantity.from_string("4"), "memory": k8s.Quantity.from_string("4Gi")},
                ),
                security_context=k8s.SecurityContext(
                    privileged=True, allow_privilege_escalation=True, run_as_user=0
                ),
                volume_mounts=[k8s.VolumeMount(name="program", mount_path=_PROGRAM_DIR, read_only=True)],
            )
        ],
        volumes=[
            k8s.Volume(
                name="program", config_map=k8s.ConfigMapVolumeSource(name=NODE_CHECK_NAME, default_mode=0o444)
            )
        ],
    )


# --- The fence of unresponsive nodes: one replica for the cluster --------------------------------

_FENCE_LABELS = {"app.kubernetes.io/name": NODE_FENCE_NAME, "app.kubernetes.io/component": "health"}
_FENCE_UID = 65532  # any non-root uid: the program writes nothing but the AWS CLI's cache under HOME
_FENCE_EXCEPTIONS = {
    "CKV_K8S_8": "a loop that serves nothing; an API or AWS call that fails is logged and the next pass tries again",
    "CKV_K8S_9": "a loop that serves nothing; an API or AWS call that fails is logged and the next pass tries again",
    "CKV_K8S_38": "the fence lists the Trainium nodes, updates the groups' replacement records and records events "
    "through the Kubernetes API with the node check's account (k8s_charts/checks/node_check.py)",
}


def _fence(chart: cdk8s.Chart, values: NodeCheckValues) -> None:
    """The Deployment ``node-check-fence`` (cluster_programs/node_fence.py) and its NetworkPolicy: one
    process reads the Trainium nodes once a pass and fences the silent ones, instead of every node's
    check reading the nodes every pass (issue #36). The node check's account: no new permission."""
    assert values.replace_unresponsive_after_seconds is not None
    # The credentials from the Pod Identity Agent and the Auto Scaling API; no file system.
    egress = [
        dns_egress_rule(),
        *api_server_egress_rules(values.vpc_cidr),
        pod_identity_egress_rule(),
        https_egress_rule(values.vpc_cidr),
    ]
    system_pod_policy(
        chart,
        "FenceNetworkPolicy",
        name=NODE_FENCE_NAME,
        namespace=NODE_CHECK_NAMESPACE,
        pod_labels=_FENCE_LABELS,
        egress=egress,
    )
    exceptions = policy_exceptions(
        {**_FENCE_EXCEPTIONS, **digest_exceptions(values.image), **pull_policy_exceptions()}
    )
    k8s.KubeDeployment(
        chart,
        "Fence",
        metadata=k8s.ObjectMeta(
            name=NODE_FENCE_NAME, namespace=NODE_CHECK_NAMESPACE, labels=_FENCE_LABELS, annotations=exceptions
        ),
        spec=k8s.DeploymentSpec(
            replicas=1,
            # One decider at a time, also during a rollout (each instance is decided once per process;
            # the groups' records bound the replacements across two).
            strategy=k8s.DeploymentStrategy(type="Recreate"),
            selector=k8s.LabelSelector(match_labels=_FENCE_LABELS),
            template=k8s.PodTemplateSpec(
                metadata=k8s.ObjectMeta(
                    labels=_FENCE_LABELS,
                    annotations={"trainium/program-sha256": program_digest(PROGRAM_FILES)},
                ),
                spec=_fence_pod_spec(values),
            ),
        ),
    )


def _fence_environment(values: NodeCheckValues) -> list[k8s.EnvVar]:
    plain = {
        "NEURON_DEVICES_LABEL": NEURON_DEVICES_LABEL,
        "FENCE_AFTER_SECONDS": str(values.replace_unresponsive_after_seconds),
        "WATCH_SECONDS": str(WATCH_SECONDS),
        "STEP_TIMEOUT_SECONDS": str(STEP_TIMEOUT_SECONDS),
        "REPAIR": "replace",
        **_repair_environment(values),
        # The AWS CLI keeps nothing it needs across calls; its HOME is the pod's scratch directory.
        "HOME": "/tmp",
    }
    namespace = k8s.EnvVarSource(field_ref=k8s.ObjectFieldSelector(field_path="metadata.namespace"))
    return [
        k8s.EnvVar(name="POD_NAMESPACE", value_from=namespace),
        *(k8s.EnvVar(name=name, value=value) for name, value in plain.items()),
    ]


def _fence_pod_spec(values: NodeCheckValues) -> k8s.PodSpec:
    return k8s.PodSpec(
        service_account_name=NODE_CHECK_NAME,
        automount_service_account_token=True,
        enable_service_links=False,
        # No toleration for the Trainium taint: it runs on the system nodes, so it answers while the
        # Trainium nodes it watches do not.
        priority_class_name="system-cluster-critical",
        security_context=k8s.PodSecurityContext(
            run_as_non_root=True,
            run_as_user=_FENCE_UID,
            run_as_group=_FENCE_UID,
            seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
        ),
        containers=[
            k8s.Container(
                name="fence",
                image=values.image,
                image_pull_policy=PINNED_PULL_POLICY,
                command=["python3", f"{_PROGRAM_DIR}/node_fence.py"],
                env=_fence_environment(values),
                # A list of the Trainium nodes once a minute (a page of 500 at a time).
                resources=container_resources(
                    requests={"cpu": "10m", "memory": "128Mi"}, limits={"cpu": "500m", "memory": "512Mi"}
                ),
                security_context=k8s.SecurityContext(
                    allow_privilege_escalation=False,
                    capabilities=k8s.Capabilities(drop=["ALL"]),
                    read_only_root_filesystem=True,
                ),
                volume_mounts=[
                    k8s.VolumeMount(name="program", mount_path=_PROGRAM_DIR, read_only=True),
                    k8s.VolumeMount(name="scratch", mount_path="/tmp"),
                ],
            )
        ],
        volumes=[
            k8s.Volume(
                name="program", config_map=k8s.ConfigMapVolumeSource(name=NODE_CHECK_NAME, default_mode=0o444)
            ),
            k8s.Volume(
                name="scratch",
                empty_dir=k8s.EmptyDirVolumeSource(size_limit=k8s.Quantity.from_string("64Mi")),
            ),
        ],
    )
