"""The EKS control plane, its kubectl handler, its administrators and the system node group."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct, IConstruct

from cluster_facts.cluster_scale import STANDARD_TIER
from cluster_facts.kubernetes_names import NODE_GROUP_LABEL
from constructs_trn.kubectl_layer import kubectl_layer
from constructs_trn.nag import acknowledge, aws_managed_policy
from constructs_trn.node_group_version import follow_cluster_version
from constructs_trn.node_launch_template import metadata_options, root_volume

__all__ = ["TrainingCluster"]

_ALL_CONTROL_PLANE_LOGS = [
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
]


class TrainingCluster(Construct):
    """An EKS cluster on managed node groups (not Auto Mode), with KMS-encrypted secrets.

    Only the access entries in the template grant Kubernetes access: the kubectl handler's (cluster
    admin, added by aws-eks-v2) and ``admin_role_arns``; ``creator_admin`` keeps the creator's hidden
    entry of a cluster created before that was switched off (changing it would replace the cluster).

    The kubectl handler runs in the private subnets so that it reaches the API server whether the
    public endpoint is off or restricted to a few CIDRs, and uses the kubectl of the cluster's minor
    version.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        kubernetes_version: str,
        vpc: ec2.IVpc,
        private_subnets: ec2.SubnetSelection,
        endpoint_public_cidrs: Sequence[str],
        admin_role_arns: Sequence[str],
        creator_admin: bool = False,
        control_plane_tier: str = STANDARD_TIER,
    ) -> None:
        super().__init__(scope, construct_id)
        self.kubernetes_version = kubernetes_version
        self.secrets_key = kms.Key(
            self,
            "SecretsKey",
            description=f"{cluster_name}: EKS secrets envelope encryption",
            enable_key_rotation=True,
            # Only this cluster's secrets use it, and they go with the cluster: a destroyed stack
            # schedules the key's deletion (KMS waits 30 days, during which it can be cancelled).
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=cluster_name,
            version=eks.KubernetesVersion.of(kubernetes_version),
            vpc=vpc,
            vpc_subnets=[private_subnets],
            # Managed node groups added below; Auto Mode cannot run the EFA launch templates.
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            endpoint_access=(
                eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*endpoint_public_cidrs)
                if endpoint_public_cidrs
                else eks.EndpointAccess.PRIVATE
            ),
            secrets_encryption_key=self.secrets_key,
            # Only a provisioned tier is written: with `standard` the template stays what every
            # deployed stack has, as the property's first appearance would be an update of the
            # cluster whose no-op EKS's answer is not documented. Going back from a provisioned tier:
            # docs/performance.md ("What the figures mean for a real cluster").
            control_plane_scaling_tier=(
                None
                if control_plane_tier == STANDARD_TIER
                else eks.ControlPlaneScalingTier.of(control_plane_tier)
            ),
            # No hidden cluster-admin: EKS would otherwise give whoever creates the cluster (the
            # CloudFormation execution role) an access entry that this template does not show. The
            # kubectl handler's role has its own entry (aws-eks-v2 adds it, visible in the template),
            # and people get in through admin_role_arns (docs/access.md). The property forces a new
            # cluster when it changes, so a cluster created before keeps EKS's default (omitted:
            # ``creator_admin``); its name makes CloudFormation refuse, not perform, a replacement.
            bootstrap_cluster_creator_admin_permissions=None if creator_admin else False,
            cluster_logging=_ALL_CONTROL_PLANE_LOGS,
            kubectl_provider_options=eks.KubectlProviderOptions(
                kubectl_layer=kubectl_layer(self, "KubectlLayer", kubernetes_version=kubernetes_version),
                private_subnets=vpc.select_subnets(subnet_type=private_subnets.subnet_type).subnets,
            ),
        )
        acknowledge(
            self.cluster.role,
            aws_managed_policy("AmazonEKSClusterPolicy"),
            reason="EKS requires this AWS managed policy on the cluster service role; AWS updates it as "
            "the control plane gains features",
        )
        _acknowledge_kubectl_provider(self.cluster.node.find_child("KubectlProvider"))
        cluster_admin = eks.AccessPolicy.from_access_policy_name(
            "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER
        )
        for index, role_arn in enumerate(admin_role_arns):
            self.cluster.grant_access(f"Admin{index}", role_arn, [cluster_admin])

    @property
    def interface(self) -> eks.ICluster:
        """The cluster where an ``ICluster`` is asked for (node groups, manifests, Helm charts).

        aws-cdk-lib's Python stubs leave ``kubectl_provider_options`` off ``Cluster`` although
        ``ICluster`` lists it, so a type checker cannot see that a Cluster is one; jsii accepts it.
        """
        return cast(eks.ICluster, self.cluster)

    def add_system_nodes(
        self,
        construct_id: str,
        *,
        name: str,
        instance_type: str,
        node_role: iam.IRole,
        subnets: ec2.SubnetSelection,
        min_size: int,
        desired_size: int,
        max_size: int,
        disk_size_gib: int,
    ) -> eks.Nodegroup:
        """Untainted general-purpose nodes for cluster services (CoreDNS, Volcano, etcd, controllers)."""
        launch_template = ec2.CfnLaunchTemplate(
            self,
            f"{construct_id}LaunchTemplate",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                metadata_options=metadata_options(),
                block_device_mappings=[root_volume(disk_size_gib)],
            ),
        )
        nodegroup = eks.Nodegroup(
            self,
            construct_id,
            cluster=self.interface,
            nodegroup_name=name,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            instance_types=[ec2.InstanceType(instance_type)],
            launch_template_spec=eks.LaunchTemplateSpec(
                id=launch_template.ref, version=launch_template.attr_latest_version_number
            ),
            subnets=subnets,
            node_role=node_role,
            min_size=min_size,
            desired_size=desired_size,
            max_size=max_size,
            labels={NODE_GROUP_LABEL: name},
        )
        # The newest AMI of the cluster's version, moved with it (docs/upgrades.md).
        follow_cluster_version(nodegroup, self.kubernetes_version)
        return nodegroup


def _acknowledge_kubectl_provider(provider: IConstruct) -> None:
    """The kubectl handler and its custom-resource provider are built by aws-eks-v2, not by us.

    Their roles, runtime and invoke permission come from aws-cdk-lib; changing them would fork its
    KubectlProvider. They run in the private subnets and only act on this cluster.
    """
    handler = provider.node.find_child("Handler")
    stack = Stack.of(provider)
    handler_id = stack.resolve(stack.get_logical_id(handler.node.find_child("Resource")))  # type: ignore[arg-type]
    ecr_public_condition = stack.resolve(stack.get_logical_id(handler.node.find_child("HasEcrPublic")))  # type: ignore[arg-type]
    lambda_basics = {
        "service-role/AWSLambdaBasicExecutionRole": "write its own CloudWatch logs",
        "service-role/AWSLambdaVPCAccessExecutionRole": "run in the cluster's private subnets",
    }
    for scope in (handler, provider.node.find_child("Provider")):
        for policy, purpose in lambda_basics.items():
            acknowledge(
                scope,
                aws_managed_policy(policy),
                reason=f"aws-eks-v2's kubectl Lambda roles use this AWS managed policy to {purpose}",
            )
    for finding, reason in {
        aws_managed_policy("AmazonEC2ContainerRegistryReadOnly"): "aws-eks-v2 lets the kubectl handler read "
        "ECR so Helm charts can come from OCI repositories; it is read-only",
        (
            'IAM4[Policy::{"Fn::If":["' + ecr_public_condition + '",{"Fn::Join":["",["arn:",'
            '{"Ref":"AWS::Partition"},":iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly"]]},'
            '{"Ref":"AWS::NoValue"}]}]'
        ): "read-only ECR Public access that aws-eks-v2 adds only in partitions with ECR Public, for Helm "
        "charts hosted there",
        "L1": "aws-eks-v2 pins the kubectl handler's runtime to match its kubectl layer; a newer runtime is "
        "not offered for this handler by aws-cdk-lib",
    }.items():
        acknowledge(handler, finding, reason=reason)
    acknowledge(
        provider.node.find_child("Provider"),
        f"IAM5[Resource::<{handler_id}.Arn>:*]",
        reason="the custom-resource framework may invoke every version of the kubectl handler and nothing "
        "else; the wildcard is the version suffix of that one function's ARN",
    )
