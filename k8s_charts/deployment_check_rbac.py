"""What the pipeline's post-deployment check may do in Kubernetes: get and list nodes, and read the
cluster autoscaler's Deployment and status ConfigMap; nothing else.

Its IAM role reaches the cluster through an EKS access entry in the group ``DEPLOYMENT_CHECK_GROUP``
(constructs_trn/deployment_check_role.py), with no access policy: AmazonEKSViewPolicy cannot read
nodes, and AmazonEKSAdminViewPolicy would read Secrets too. This chart binds that group to a
ClusterRole with just the node reads the check makes, and a Role in the autoscaler's namespace that
reads those two objects by name.
"""

from __future__ import annotations

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.autoscaling import AUTOSCALER_NAME, AUTOSCALER_NAMESPACE, AUTOSCALER_STATUS_CONFIGMAP

__all__ = ["DeploymentCheckRbacChart"]


class DeploymentCheckRbacChart(cdk8s.Chart):
    """A ClusterRole named ``group`` that reads nodes and a Role that reads the autoscaler's health,
    both bound to the Kubernetes group ``group``."""

    def __init__(self, scope: Construct, id: str, *, group: str) -> None:
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
