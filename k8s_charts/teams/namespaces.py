"""Namespaces: the platform's, and one per team with the Role its members submit and watch jobs with."""

from __future__ import annotations

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.kubernetes_names import TEAM_NAMESPACE_LABEL, TEAM_SETTINGS_CONFIGMAP
from k8s_charts.addons.pod_security import PodSecurity

__all__ = ["TEAM_MEMBER_RULES", "NamespaceChart"]

# What a team member does in the team's namespace: submit, watch and stop runs (Volcano Jobs; TorchX
# submits the same), read their pods, logs and events, port-forward to them. No Secrets, no RBAC,
# no exec into pods (they run as root on shared storage), nothing outside the namespace.
TEAM_MEMBER_RULES = (
    k8s.PolicyRule(
        api_groups=["batch.volcano.sh"],
        resources=["jobs"],
        verbs=["get", "list", "watch", "create", "delete"],
    ),
    k8s.PolicyRule(
        api_groups=["scheduling.volcano.sh"], resources=["podgroups"], verbs=["get", "list", "watch"]
    ),
    k8s.PolicyRule(
        api_groups=[""], resources=["pods", "pods/log", "events", "services"], verbs=["get", "list", "watch"]
    ),
    k8s.PolicyRule(api_groups=[""], resources=["pods/portforward"], verbs=["create"]),
    # A run of a `devices: dra` group brings its ResourceClaimTemplate (k8s_charts/devices/device_claims.py);
    # the claims made from it are read only. Which DeviceClasses a template may name is the API
    # server's business (k8s_charts/devices/dra_admission.py, team-device-claims).
    k8s.PolicyRule(
        api_groups=["resource.k8s.io"],
        resources=["resourceclaimtemplates"],
        verbs=["get", "list", "watch", "create", "delete"],
    ),
    k8s.PolicyRule(
        api_groups=["resource.k8s.io"], resources=["resourceclaims"], verbs=["get", "list", "watch"]
    ),
    # The team's settings (k8s_charts/teams/team_settings.py), which TorchX's --team reads; no other ConfigMap.
    k8s.PolicyRule(
        api_groups=[""], resources=["configmaps"], resource_names=[TEAM_SETTINGS_CONFIGMAP], verbs=["get"]
    ),
)


class NamespaceChart(cdk8s.Chart):
    """A namespace of its own, so a workload's objects, policies and quotas stay apart.

    Pod Security Admission enforces ``pod_security``'s level and audits and warns about anything
    the restricted profile would refuse (k8s_charts/addons/pod_security.py). With ``member_group`` it is
    a team's namespace: labelled ``TEAM_NAMESPACE_LABEL: <name>`` (what the team-wide admission
    policy selects), and the group's members may do what ``TEAM_MEMBER_RULES`` allows in it.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        name: str,
        pod_security: PodSecurity,
        member_group: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        labels = dict(pod_security.labels)
        if member_group is not None:
            labels[TEAM_NAMESPACE_LABEL] = name
        k8s.KubeNamespace(self, "Namespace", metadata=k8s.ObjectMeta(name=name, labels=labels))
        if member_group is None:
            return
        role_name = "trainium-team-member"
        k8s.KubeRole(
            self,
            "MemberRole",
            metadata=k8s.ObjectMeta(name=role_name, namespace=name),
            rules=list(TEAM_MEMBER_RULES),
        )
        k8s.KubeRoleBinding(
            self,
            "MemberBinding",
            metadata=k8s.ObjectMeta(name=role_name, namespace=name),
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=role_name),
            subjects=[k8s.Subject(api_group="rbac.authorization.k8s.io", kind="Group", name=member_group)],
        )
