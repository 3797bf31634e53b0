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
"""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.autoscaling import AUTOSCALER_NAME, AUTOSCALER_NAMESPACE, AUTOSCALER_STATUS_CONFIGMAP

__all__ = ["DeploymentCheckRbacChart"]


class DeploymentCheckRbacChart(cdk8s.Chart):
    """A ClusterRole named ``group`` that reads nodes and a Role that reads the autoscaler's health,
    both bound to the Kubernetes group ``group``."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        group: str,
        fabric_check_jobs: Sequence[str] = (),
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
        jobs = list(fabric_check_jobs)
        # Volcano names a task's pods <job>-<task>-<index>: the launcher is <job>-launcher-0.
        launchers = [f"{job}-launcher-0" for job in jobs]
        k8s.KubeRole(
            self,
            "FabricCheckRunner",
            metadata=k8s.ObjectMeta(name=group, namespace=fabric_check_namespace),
            rules=[
                # RBAC cannot name an object that does not exist yet: create is for any name.
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
