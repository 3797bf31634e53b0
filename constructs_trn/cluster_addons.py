"""EKS add-ons: networking, DNS, Pod Identity, the FSx CSI driver, CloudWatch observability and node
health monitoring."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cluster_facts.versions import (
    AMAZON_CLOUDWATCH_OBSERVABILITY,
    AWS_FSX_CSI_DRIVER,
    COREDNS,
    EKS_NODE_MONITORING_AGENT,
    EKS_POD_IDENTITY_AGENT,
    KUBE_PROXY,
    VPC_CNI,
)
from constructs_trn.iam_roles import pod_identity_role
from constructs_trn.nag import acknowledge, aws_managed_policy

__all__ = ["ClusterAddons"]


class ClusterAddons(Construct):
    """The managed add-ons, with their Pod Identity roles and the order they need.

    ``versions`` pins add-on versions by name; an add-on left out gets the version EKS makes
    default for the cluster's Kubernetes version (for the supported versions that VPC CNI is far
    past 1.18.5, the first to support ``efa-only`` interfaces).

    Order: the networking add-ons come first (``networking``: node groups wait on them); the ones
    that run Deployments wait for ``wait_for`` (the system nodes), and those that use Pod Identity
    (the VPC CNI among them) also wait for its agent.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.Cluster,
        cluster_name: str,
        versions: Mapping[str, str],
        wait_for: Construct,
    ) -> None:
        super().__init__(scope, construct_id)
        self._cluster = cluster
        self._versions = versions

        self._networking(cluster_name)
        self.coredns = coredns = self._addon(COREDNS)
        fsx_csi = self.fsx_csi = self._fsx_csi_driver(cluster_name)
        cloudwatch = self._cloudwatch(cluster_name)
        # Reports Neuron, EFA, kernel, storage and runtime faults as node conditions and events, which
        # node auto repair acts on (docs/health.md). No AWS permissions: it only reads the node's logs
        # and writes Node conditions and Events (EKS User Guide, "Node monitoring agent" add-on:
        # "This add-on doesn't require additional permissions"). No configuration either: its
        # DaemonSet tolerates every taint, the Trainium taint included (chart default
        # nodeAgent.tolerations [{operator: Exists}] since the first release, aws/eks-node-monitoring-agent
        # charts/eks-node-monitoring-agent/values.yaml).
        self.node_monitoring = self._addon(EKS_NODE_MONITORING_AGENT)

        for addon in (coredns, fsx_csi, cloudwatch):
            addon.node.add_dependency(wait_for)
        for addon in (fsx_csi, cloudwatch):
            addon.node.add_dependency(self.pod_identity_agent)

    def _networking(self, cluster_name: str) -> None:
        """The VPC CNI (with its own identity), kube-proxy and the Pod Identity agent."""
        # The VPC CNI's network-interface permissions (create, attach, detach, delete ENIs, assign IPs,
        # on every interface of the account) belong to its own pods, through Pod Identity, not to the
        # node role that every host-network pod and anything reaching the node's IMDS could use.
        self.vpc_cni_role = pod_identity_role(
            self,
            "VpcCniRole",
            cluster_name=cluster_name,
            namespace="kube-system",
            service_account="aws-node",
            description="VPC CNI (aws-node): network interfaces and IP addresses of the nodes",
            managed_policy_names=["AmazonEKS_CNI_Policy"],
        )
        acknowledge(
            self.vpc_cni_role,
            aws_managed_policy("AmazonEKS_CNI_Policy"),
            reason="the policy EKS documents for the VPC CNI's service account (network interfaces and IP "
            "addresses, EFA interfaces included); AWS extends it as the CNI gains features",
        )
        vpc_cni = self._addon(
            VPC_CNI,
            # Network policies are enforced so that, for example, etcd admits only training pods. The
            # policy agent stays in its default `standard` mode (no env.NETWORK_POLICY_ENFORCING_MODE):
            # `strict` would deny every pod no policy selects, the EKS add-ons' CoreDNS, FSx CSI and
            # CloudWatch pods included, and start every new pod denied until its policies reach its
            # node, a training pod's pip install and rendezvous among them (docs/security-policies.md,
            # "Standard, not strict").
            configuration={"enableNetworkPolicy": "true"},
            pod_identity={
                "namespace": "kube-system",
                "service_account": "aws-node",
                "role": self.vpc_cni_role,
            },
        )
        kube_proxy = self._addon(KUBE_PROXY)
        pod_identity_agent = self._addon(EKS_POD_IDENTITY_AGENT)
        # aws-node gets its credentials from the Pod Identity agent on its node: the agent's add-on
        # comes first, and the node groups wait for both.
        vpc_cni.node.add_dependency(pod_identity_agent)
        self.networking: list[Construct] = [vpc_cni, kube_proxy, pod_identity_agent]
        self.vpc_cni, self.kube_proxy, self.pod_identity_agent = vpc_cni, kube_proxy, pod_identity_agent

    def _fsx_csi_driver(self, cluster_name: str) -> eks_l1.CfnAddon:
        # Static provisioning only (the PersistentVolume names the stack's file system), so the
        # controller needs to describe file systems and nothing that creates or deletes them.
        self.fsx_csi_role = pod_identity_role(
            self,
            "FsxCsiDriverRole",
            cluster_name=cluster_name,
            namespace="kube-system",
            service_account="fsx-csi-controller-sa",
            description="FSx CSI driver controller: read-only, static provisioning",
            statements=[iam.PolicyStatement(actions=["fsx:DescribeFileSystems"], resources=["*"])],
        )
        acknowledge(
            self.fsx_csi_role,
            "IAM5[Resource::*]",
            reason="fsx:DescribeFileSystems is the role's only action, a read-only describe for static "
            "volumes; the role can create, change or delete nothing, whatever file system it names",
        )
        return self._addon(
            AWS_FSX_CSI_DRIVER,
            pod_identity={
                "namespace": "kube-system",
                "service_account": "fsx-csi-controller-sa",
                "role": self.fsx_csi_role,
            },
        )

    def _cloudwatch(self, cluster_name: str) -> eks_l1.CfnAddon:
        # Container Insights with enhanced observability collects Neuron (neuron-monitor) and EFA
        # metrics per pod on Trainium nodes.
        self.cloudwatch_role = pod_identity_role(
            self,
            "CloudWatchAgentRole",
            cluster_name=cluster_name,
            namespace="amazon-cloudwatch",
            service_account="cloudwatch-agent",
            description="CloudWatch agent: container, Neuron and EFA metrics and logs",
            managed_policy_names=["CloudWatchAgentServerPolicy"],
        )
        acknowledge(
            self.cloudwatch_role,
            aws_managed_policy("CloudWatchAgentServerPolicy"),
            reason="the policy the amazon-cloudwatch-observability add-on documents for its agent "
            "(metrics, logs, X-Ray); AWS extends it as the agent gains collectors",
        )
        return self._addon(
            AMAZON_CLOUDWATCH_OBSERVABILITY,
            pod_identity={
                "namespace": "amazon-cloudwatch",
                "service_account": "cloudwatch-agent",
                "role": self.cloudwatch_role,
            },
        )

    def _addon(
        self,
        name: str,
        *,
        configuration: Mapping[str, Any] | None = None,
        pod_identity: Mapping[str, Any] | None = None,
    ) -> eks_l1.CfnAddon:
        # The L1 resource: the aws-eks-v2 Addon construct cannot attach Pod Identity associations.
        return eks_l1.CfnAddon(
            self,
            "".join(part.capitalize() for part in name.split("-")),
            addon_name=name,
            cluster_name=self._cluster.cluster_name,
            addon_version=self._versions.get(name),
            # EKS installs self-managed vpc-cni, kube-proxy and coredns at creation; take them over.
            resolve_conflicts="OVERWRITE",
            configuration_values=json.dumps(configuration, sort_keys=True) if configuration else None,
            pod_identity_associations=(
                [
                    eks_l1.CfnAddon.PodIdentityAssociationProperty(
                        service_account=pod_identity["service_account"],
                        role_arn=pod_identity["role"].role_arn,
                    )
                ]
                if pod_identity
                else None
            ),
        )
