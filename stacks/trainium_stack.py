"""TrainiumStack: the AWS side of a Trainium training cluster, built from one validated configuration."""

from __future__ import annotations

from typing import Any

from aws_cdk import Annotations, Aws, CfnOutput, CfnResource, Environment, RemovalPolicy, Stack, Tags
from aws_cdk import aws_logs as logs
from constructs import Construct

from cluster_facts.ami_releases import DEFAULT_AMI_RELEASES
from cluster_facts.image_sources import pull_through_repository_arn
from cluster_facts.kubernetes_names import (
    DEPLOYMENT_CHECK_GROUP,
    PLATFORM_NAMESPACE,
    ROOT_SQUASH_ID,
    system_node_group,
)
from cluster_facts.kubernetes_versions import synth_date
from cluster_facts.stack_outputs import StackOutput
from cluster_plan.canary_run import canary_manifests, canary_run
from cluster_plan.fabric_check_commands import pipeline_fabric_check_jobs, pipeline_fabric_check_manifests
from cluster_plan.kubernetes_values import (
    applied_plan,
    cached_repository_arns,
    mirrored_images,
    review_plan,
    root_zones,
    run_image_repository_arns,
    team_exports,
    team_member_groups,
)
from cluster_plan.kubernetes_values import (
    datasets as staged_datasets,
)
from config.model import StackConfig
from config.notices import configuration_notices
from constructs_trn.cluster import TrainingCluster
from constructs_trn.cluster_addons import ClusterAddons
from constructs_trn.cluster_autoscaler import ClusterAutoscalerAccess
from constructs_trn.dataset_access import DatasetStagingAccess
from constructs_trn.deployment_check_role import (
    DeploymentCheckAccess,
    DeploymentCheckTrust,
    deployment_check_role_name,
)
from constructs_trn.efa_security_group import EfaSecurityGroup
from constructs_trn.iam_roles import node_role
from constructs_trn.image_mirror import ImageMirror
from constructs_trn.image_repository import TrainingImageRepository
from constructs_trn.kubernetes_layer import KubernetesLayer, StepWaits
from constructs_trn.log_encryption import LogEncryption
from constructs_trn.lustre_storage import LustreStorage
from constructs_trn.network import ExistingNetwork, SubnetAttributes, TrainingNetwork
from constructs_trn.node_check_access import NodeCheckAccess
from constructs_trn.pull_through_cache import PullThroughCache
from constructs_trn.team_access import TeamAccess
from constructs_trn.training_dashboard import TrainingDashboard, dashboard_url
from constructs_trn.trainium_node_group import TrainiumNodeGroup
from k8s_charts.checks.deployment_check_rbac import DeploymentCheckRbacChart, canary_access, fabric_check_job
from k8s_charts.checks.fabric_check import ACCESS_STEP
from k8s_charts.checks.node_check import STEP as NODE_CHECK_STEP
from k8s_charts.devices.efa_device_plugin import EKS_IMAGE_ACCOUNTS
from k8s_charts.plan import CLUSTER_AUTOSCALER as AUTOSCALER_STEP
from k8s_charts.plan import PLATFORM_STEP, TEAMS_STEP, render
from k8s_charts.plan import VOLCANO as VOLCANO_STEP
from k8s_charts.runs.dataset_staging import s3_sources, staging_service_account
from k8s_charts.runs.tensorboard import SERVICE_PROXY_NAME

__all__ = ["TrainiumStack", "add_trainium_stack", "availability_zones_context"]

STACK_ID = "TrainiumStack"
# The groups the amazon-cloudwatch-observability add-on (Container Insights, enhanced) writes to.
CONTAINER_INSIGHTS_LOG_GROUPS = ("application", "dataplane", "host", "performance")

_REMOVAL_POLICIES = {"retain": RemovalPolicy.RETAIN, "destroy": RemovalPolicy.DESTROY}
_RETENTION = {
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
}


def _repository_name(config: StackConfig) -> str | None:
    """The configured name; else ``<name>/training`` when the repository goes with the stack, and a
    generated name when it is retained (a fixed name would collide with the retained repository on
    the next deployment after ``cdk destroy``; docs/costs.md#how-to-get-to-zero lists what stays)."""
    if config.ecr.repository_name is not None:
        return config.ecr.repository_name
    return f"{config.name}/training" if config.ecr.removal_policy == "destroy" else None


def _network(scope: Construct, config: StackConfig) -> TrainingNetwork | ExistingNetwork:
    """The stack's own VPC, or the existing one ``vpc.vpc_id`` names (nothing of it is created)."""
    vpc, zone = config.vpc, config.trainium.availability_zone
    if vpc.vpc_id is None or vpc.private_subnets is None:
        assert vpc.nat_gateways is not None and vpc.flow_log_retention_days is not None
        return TrainingNetwork(
            scope,
            "Network",
            cidr=vpc.cidr,
            availability_zones=vpc.availability_zones,
            trainium_availability_zone=zone,
            nat_gateways=vpc.nat_gateways,
            flow_log_retention=_RETENTION[vpc.flow_log_retention_days],
        )
    trainium = vpc.trainium_subnet
    return ExistingNetwork(
        scope,
        "Network",
        vpc_id=vpc.vpc_id,
        cidr=vpc.cidr,
        private_subnets=[
            SubnetAttributes(subnet_id=subnet.id, availability_zone=name, cidr=subnet.cidr)
            for subnet, name in zip(vpc.private_subnets, vpc.availability_zones, strict=True)
        ],
        trainium_subnet=(
            SubnetAttributes(subnet_id=trainium.id, availability_zone=zone, cidr=trainium.cidr)
            if trainium is not None
            else None
        ),
        trainium_availability_zone=zone,
    )


def availability_zones_context(config: StackConfig) -> tuple[str, list[str]]:
    """The context entry that answers the stack's availability-zone lookup from the configuration.

    ``ec2.Vpc`` asks its stack for the region's zones; in an environment-specific stack that is a
    context lookup, which needs credentials. Seeding the answer keeps the synth offline.
    """
    key = f"availability-zones:account={config.account}:region={config.region}"
    return key, list(config.vpc.availability_zones)


def add_trainium_stack(scope: Construct, config: StackConfig, **stack_props: Any) -> TrainiumStack:
    """Seed ``scope``'s zone context, then add a TrainiumStack (call before ``scope`` has children)."""
    scope.node.set_context(*availability_zones_context(config))
    return TrainiumStack(scope, STACK_ID, config=config, **stack_props)


class TrainiumStack(Stack):
    """VPC, EKS with a system and Trainium node groups, FSx for Lustre and ECR.

    The long creations (the EKS control plane, the Lustre file system) share no dependency, so
    CloudFormation runs them side by side; nothing of storage, images or IAM waits on the cluster.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StackConfig,
        deployment_check: DeploymentCheckTrust | None = None,
        deployment_check_canary: bool = False,
        **kwargs: Any,
    ) -> None:
        """``deployment_check_canary`` (with ``deployment_check``): the check runs the canary, so its
        Kubernetes identity may create exactly the canary's rendered objects (the pipeline's
        ``waves[].environments[].canary``)."""
        super().__init__(
            scope,
            construct_id,
            env=Environment(account=config.account, region=config.region),
            description=f"Trainium training cluster {config.name}: VPC, EKS, EFA node groups, FSx for Lustre, ECR",
            **kwargs,
        )
        self.config = config
        Tags.of(self).add("project", config.name)
        # Pins that age or rest on a declaration: `cdk synth` prints each as a warning.
        for key, message in configuration_notices(config, synth_date()):
            Annotations.of(self).add_warning_v2(f"trainium:{key}", f"{key}: {message}")

        self._add_network_and_storage(config)
        self._add_image_sources(config)
        self._add_node_roles(config)
        self._add_cluster(config)
        self._add_trainium_nodes(config)
        self._add_cluster_identities(config)
        self._add_kubernetes_layer(config)
        self._add_dashboard(config)
        self._add_deployment_check(config, deployment_check, canary=deployment_check_canary)
        self._encrypt_logs()
        self._order_deployment_check(config, canary=deployment_check_canary)
        self._add_outputs()

    def _add_network_and_storage(self, config: StackConfig) -> None:
        """The network, the EFA security group, the file system and the training images' repository."""
        self.network = _network(self, config)
        vpc = self.network.vpc

        self.efa_security_group = EfaSecurityGroup(self, "EfaSecurityGroup", vpc=vpc, name=config.name)
        self.storage = LustreStorage(
            self,
            "Storage",
            name=config.name,
            vpc=vpc,
            subnet=self.network.trainium_subnet,
            client_security_groups=[self.efa_security_group.security_group],
            deployment_type=config.fsx.deployment_type,
            storage_capacity_gib=config.fsx.storage_capacity_gib,
            throughput_mib_per_tib=config.fsx.throughput_mib_per_tib,
            s3_import_path=config.fsx.s3_import_path,
            s3_bucket_owner=config.fsx.s3_bucket_owner or config.account,
            removal_policy=_REMOVAL_POLICIES[config.fsx.removal_policy],
            # Root on a Trainium node (or on a system node in the Trainium subnet) is nobody on the
            # file system; the system nodes' subnets of the other zones, where the platform's Jobs
            # run (cluster_plan/kubernetes_values.root_zones), keep root.
            root_squash_to=f"{ROOT_SQUASH_ID}:{ROOT_SQUASH_ID}",
            root_squash_exempt_cidrs=self.network.private_subnet_cidrs(root_zones(config)),
            # fsx.backups: FSx's automatic daily backups, or each team's directory exported to S3.
            backup_retention_days=config.fsx.backup_retention_days or 0,
            backup_start_time_utc=config.fsx.backup_start_time_utc,
            exports=team_exports(config),
            exports_owner=config.account,
        )
        self.images = TrainingImageRepository(
            self,
            "TrainingImages",
            repository_name=_repository_name(config),
            keep_images=config.ecr.keep_images,
            removal_policy=_REMOVAL_POLICIES[config.ecr.removal_policy],
        )

    def _add_image_sources(self, config: StackConfig) -> None:
        """Where nodes pull third-party images: the pull-through cache and the mirror of Docker Hub's."""
        # Third-party images come through the account's registry (docs/supply-chain.md).
        ecr_settings = config.ecr
        self.pull_through_cache = (
            PullThroughCache(
                self,
                "PullThroughCache",
                account=config.account,
                region=config.region,
                registries=sorted(ecr_settings.cached_registries),
                credentials={str(host): arn for host, arn in ecr_settings.upstream_credentials.items()},
                keep_images=ecr_settings.keep_images,
            )
            if ecr_settings.cached_registries and ecr_settings.pull_through_cache_rules == "create"
            else None
        )
        # Docker Hub's images (Volcano's) without a Docker Hub credential: copied into the account at
        # deploy, so no node pulls Docker Hub anonymously (constructs_trn/image_mirror.py).
        self.review_plan = review_plan(config)
        mirrored = mirrored_images(config, self.review_plan)
        self.image_mirror = (
            ImageMirror(
                self,
                "ImageMirror",
                images=mirrored,
                keep_images=ecr_settings.keep_images,
                vpc=self.network.vpc,
                subnets=self.network.private_subnets,
            )
            if mirrored
            else None
        )

    def _add_node_roles(self, config: StackConfig) -> None:
        """One role per kind of node, each pulling only what its pods run."""
        ecr_settings = config.ecr
        # One role per kind of node. The system nodes keep the construct id of the role all nodes once
        # shared: a node group's role cannot change without replacing the group, and replacing the
        # system nodes would stop every cluster service; the Trainium groups (0 nodes when idle) move.
        pull_repositories = self._image_repository_arns()
        # Rendered once, above: the node roles import into the cache only the images it names. The
        # review files (cluster_plan/review_files.py) are written from it, and the applied plan is the
        # same with the file system's deploy-time values filled in (below).
        imports = cached_repository_arns(config, self.review_plan)
        # With the cache in use (rules of this stack or of another in the account), the nodes pull
        # from its repositories and may trigger a first import there.
        pull_through = (
            [pull_through_repository_arn(account=config.account, region=config.region)]
            if ecr_settings.cached_registries
            else []
        )
        self.node_role = node_role(
            self,
            "NodeRole",
            description=f"{config.name}: system nodes (join the cluster, pull the cluster's images)",
            # Volcano runs on the system nodes only: they alone pull the stack's copies of its images.
            pull_repository_arns=[
                *pull_repositories,
                *(
                    repository.repository_arn
                    for repository in (self.image_mirror.repositories.values() if self.image_mirror else ())
                ),
            ],
            pull_through_repository_arns=pull_through,
            import_repository_arns=imports if pull_through else (),
        )
        self.trainium_node_role = node_role(
            self,
            "TrainiumNodeRole",
            description=f"{config.name}: Trainium nodes (join the cluster, pull the cluster's images)",
            # The runs' own images in private ECR repositories: each by its ARN, so that an image
            # synth accepts is one the nodes may pull (config/consistency.py refuses the rest).
            pull_repository_arns=[*pull_repositories, *run_image_repository_arns(config)],
            pull_through_repository_arns=pull_through,
            import_repository_arns=imports if pull_through else (),
        )

    def _add_cluster(self, config: StackConfig) -> None:
        """The EKS cluster, its teams' access, the system nodes and the add-ons."""
        self.cluster = TrainingCluster(
            self,
            "Cluster",
            cluster_name=config.name,
            kubernetes_version=config.cluster.kubernetes_version,
            vpc=self.network.vpc,
            private_subnets=self.network.private_subnets,
            endpoint_public_cidrs=config.cluster.endpoint_public_cidrs,
            admin_role_arns=config.cluster.admin_role_arns,
            creator_admin=config.cluster.keep_creator_admin,
            control_plane_tier=config.cluster.control_plane_tier,
        )
        eks_cluster = self.cluster.cluster
        if isinstance(self.network, ExistingNetwork):
            # The stack tags nothing of an existing VPC; preflight checks the owner tagged the subnets.
            Annotations.of(eks_cluster).acknowledge_warning(
                "@aws-cdk/aws-eks:clusterMustManuallyTagSubnet",
                "an existing VPC's subnets are tagged by its owner; make preflight checks the tag",
            )
        self.team_access = TeamAccess(
            self, "TeamAccess", cluster=self.cluster.interface, groups_by_role_arn=team_member_groups(config)
        )
        self.system_nodes = self.cluster.add_system_nodes(
            "SystemNodes",
            name=system_node_group(config.name),
            instance_type=config.system_nodes.instance_type,
            node_role=self.node_role,
            subnets=self.network.private_subnets,
            min_size=config.system_nodes.min_size,
            desired_size=config.system_nodes.desired_size,
            max_size=config.system_nodes.max_size,
            disk_size_gib=config.system_nodes.disk_size_gib,
        )
        self.addons = ClusterAddons(
            self,
            "Addons",
            cluster=eks_cluster,
            cluster_name=config.name,
            versions=config.cluster.addon_versions,
            wait_for=self.system_nodes,
        )

    def _add_trainium_nodes(self, config: StackConfig) -> None:
        """The Trainium node groups, joining once the pod network is in place."""
        eks_cluster = self.cluster.cluster
        # Every interface of a Trainium node carries the EFA group and the cluster group (which
        # EKS would otherwise add itself, and which lets the node reach the control plane).
        interface_groups = [
            self.efa_security_group.security_group.security_group_id,
            eks_cluster.cluster_security_group_id,
        ]
        self.trainium_node_groups: dict[str, TrainiumNodeGroup] = {}
        for group in config.trainium.node_groups:
            node_group = TrainiumNodeGroup(
                self,
                f"Trainium-{group.name}",
                cluster=self.cluster.interface,
                name=group.name,
                instance=group.instance,
                subnet=self.network.trainium_subnet,
                security_group_ids=interface_groups,
                node_role=self.trainium_node_role,
                min_size=group.min_size,
                # Only a new group's count: later the template carries the count the group runs.
                initial_size=group.desired_size,
                max_size=group.max_size,
                capacity_type=group.capacity_type,
                capacity_reservation_id=group.capacity_reservation_id,
                placement_group=group.uses_placement_group,
                root_volume_gib=group.root_volume_gib,
                update_strategy=group.update_strategy,
                # The Neuron driver a scale-up boots: pinned, checked against the runs' images at synth.
                ami_release=group.ami_release or DEFAULT_AMI_RELEASES[config.cluster.kubernetes_version],
                # Its devices through the DRA drivers (cluster_facts/dra.py): labelled for them.
                dra=group.uses_dra,
            )
            self.trainium_node_groups[group.name] = node_group
        for nodes in (self.system_nodes, *(group.nodegroup for group in self.trainium_node_groups.values())):
            # Nodes join with the configured VPC CNI (efa-only support, network policies) in place.
            for addon in self.addons.networking:
                nodes.node.add_dependency(addon)

    def _add_cluster_identities(self, config: StackConfig) -> None:
        """The AWS identities of the cluster's own services (autoscaler, node check, data staging)."""
        eks_cluster = self.cluster.cluster
        # The autoscaler's AWS identity; its Helm release is a step of the Kubernetes layer.
        self.autoscaler = ClusterAutoscalerAccess(
            self, "ClusterAutoscaler", cluster=self.cluster.interface, cluster_name=config.name
        )
        # The node check's AWS identity: it replaces a Trainium node that failed it.
        self.node_check = NodeCheckAccess(
            self, "NodeCheck", cluster=self.cluster.interface, cluster_name=config.name
        )

        # Cluster services (the data staging Job) run on the system nodes, which carry only the
        # cluster security group; they mount the file system too.
        self.storage.allow_clients(eks_cluster.cluster_security_group)

        # A data set with s3:// sources: its staging Job reads exactly those objects (Pod Identity).
        self.dataset_access = {
            dataset.name: DatasetStagingAccess(
                self,
                f"DatasetAccess-{dataset.name}",
                cluster=self.cluster.interface,
                cluster_name=config.name,
                dataset=dataset.name,
                namespace=PLATFORM_NAMESPACE,
                service_account=staging_service_account(dataset),
                urls=list(s3_sources(dataset)),
            )
            for dataset in staged_datasets(config).values()
            if s3_sources(dataset)
        }

    def _add_kubernetes_layer(self, config: StackConfig) -> None:
        """The Kubernetes layer's plan, applied step by step, each waiting only for what it uses."""
        self.kubernetes_plan = applied_plan(
            self.review_plan,
            file_system_id=self.storage.file_system_id,
            dns_name=self.storage.dns_name,
            mount_name=self.storage.mount_name,
        )
        self.kubernetes = KubernetesLayer(
            self,
            "Kubernetes",
            cluster=self.cluster.interface,
            plan=self.kubernetes_plan,
            # Each step waits only for what it uses (cluster_facts/step_needs.py): a step that waits
            # for pods to run needs the system nodes, the pod network, kube-proxy and CoreDNS; a step
            # that mounts the file system its CSI driver; the autoscaler's release its Pod Identity.
            # Never CloudWatch or node monitoring, which no step uses, and never the Trainium node
            # groups: nothing here needs a Trainium node (the device plugins are DaemonSets that
            # start when nodes come), and a group that cannot get capacity must not hold up, or roll
            # back, the deployment. Every step: the pull-through cache rules (a pod's first pull
            # through a missing rule fails; they are created in seconds, beside the cluster).
            waits=StepWaits(
                every_step=[self.pull_through_cache] if self.pull_through_cache is not None else [],
                running_pods=[
                    self.system_nodes,
                    self.addons.vpc_cni,
                    self.addons.kube_proxy,
                    self.addons.coredns,
                ],
                file_system=[self.addons.fsx_csi],
                by_step={
                    # Volcano's pods pull the stack's copies of its images.
                    **({VOLCANO_STEP: [self.image_mirror]} if self.image_mirror is not None else {}),
                    AUTOSCALER_STEP: [self.autoscaler.association, self.addons.pod_identity_agent],
                    # Its pods get AWS credentials only if the association exists when they start.
                    NODE_CHECK_STEP: [self.node_check.association, self.addons.pod_identity_agent],
                    **{
                        f"data-{name}": [access.association, self.addons.pod_identity_agent]
                        for name, access in self.dataset_access.items()
                    },
                },
            ),
        )

    def _add_dashboard(self, config: StackConfig) -> None:
        """The CloudWatch dashboard, when the configuration asks for one."""
        self.dashboard = (
            TrainingDashboard(
                self,
                "Dashboard",
                cluster_name=config.name,
                dashboard_name=config.dashboard_name,
                file_system_id=self.storage.file_system_id,
                training_namespaces=[team.name for team in config.teams],
                period_seconds=config.observability.dashboard_period_seconds,
            )
            if config.observability.dashboard
            else None
        )

    def _add_deployment_check(
        self, config: StackConfig, trust: DeploymentCheckTrust | None, *, canary: bool
    ) -> None:
        """Opt-in (the pipeline's stages): a read-only role for the post-deployment check."""
        self.deployment_check = (
            DeploymentCheckAccess(
                self,
                "DeploymentCheck",
                cluster=self.cluster.interface,
                role_name=deployment_check_role_name(config.name, config.region),
                trust=trust,
                node_groups=[group.nodegroup for group in self.trainium_node_groups.values()],
                rbac_manifests=render(
                    lambda app, name: DeploymentCheckRbacChart(
                        app,
                        name,
                        group=DEPLOYMENT_CHECK_GROUP,
                        # Read from the rendered Jobs: the admission policy admits exactly those.
                        fabric_check_jobs=[
                            fabric_check_job(job)
                            for job in pipeline_fabric_check_manifests(config, self.kubernetes_plan)
                        ],
                        fabric_check_namespace=PLATFORM_NAMESPACE,
                        # Read from the canary's rendered objects, which make canary renders alike.
                        canary=canary_access(
                            canary_manifests(canary_run(config))[1],
                            tensorboard_namespace=PLATFORM_NAMESPACE,
                            tensorboard_proxy=SERVICE_PROXY_NAME,
                        )
                        if canary
                        else None,
                    )
                ),
            )
            if trust is not None
            else None
        )

    def _order_deployment_check(self, config: StackConfig, *, canary: bool) -> None:
        """The check's Kubernetes access waits for the namespaces its Roles live in."""
        if self.deployment_check is not None and pipeline_fabric_check_jobs(config):
            # Its Role for running the fabric checks lives in the platform namespace.
            # (its manifest is the cluster's child, not the access construct's).
            self.deployment_check.rbac.node.add_dependency(self.kubernetes.applied[ACCESS_STEP])
        if self.deployment_check is not None and canary:
            # The canary's Roles live in the first team's namespace and the platform namespace.
            for step in (TEAMS_STEP, PLATFORM_STEP):
                self.deployment_check.rbac.node.add_dependency(self.kubernetes.applied[step])

    def _encrypt_logs(self) -> None:
        """Every log group of the cluster under the stack's logs key (constructs_trn/log_encryption.py)."""
        name = self.config.name
        self.log_encryption = LogEncryption(self, "LogEncryption", name=name)
        # EKS writes the control-plane logs to this group, and uses it with its key when it exists.
        self.log_encryption.encrypt_service_log_group("ControlPlaneLogs", f"/aws/eks/{name}/cluster")
        for kind in CONTAINER_INSIGHTS_LOG_GROUPS:
            self.log_encryption.encrypt_service_log_group(
                f"ContainerInsights{kind.capitalize()}", f"/aws/containerinsights/{name}/{kind}"
            )
        # ec2.Vpc's default-security-group function has no log group resource: Lambda would create it.
        # (An existing VPC has no such function: the stack leaves its default security group alone.)
        provider = self.node.try_find_child("Custom::VpcRestrictDefaultSGCustomResourceProvider")
        if provider is not None:
            restrict = self.network.vpc.node.find_child("RestrictDefaultSecurityGroupCustomResource")
            handler, custom_resource = provider.node.find_child("Handler"), restrict.node.default_child
            assert isinstance(handler, CfnResource) and isinstance(custom_resource, CfnResource)
            self.log_encryption.encrypt_lambda_default_log_group(handler, invoked_by=custom_resource)
        # Last: every construct that brings a log group exists now.
        self.log_encryption.encrypt_template_log_groups(self)

    def _image_repository_arns(self) -> list[str]:
        """The ECR repositories any node pulls from (images on public.ecr.aws or other registries need no IAM).

        The stack's own repository (training images), and the EKS image registry of the region: the
        managed add-ons (VPC CNI, kube-proxy, CoreDNS, Pod Identity agent, FSx CSI driver, CloudWatch
        agent, node monitoring agent), the pause image and the EFA device plugin all come from there,
        under repository names EKS chooses per add-on version.
        """
        region = self.config.region
        return [
            self.images.repository.repository_arn,
            f"arn:{Aws.PARTITION}:ecr:{region}:{EKS_IMAGE_ACCOUNTS[region]}:repository/*",
        ]

    def _add_outputs(self) -> None:
        config = self.config
        outputs = {
            StackOutput.CLUSTER_NAME: (self.cluster.cluster.cluster_name, "EKS cluster name"),
            StackOutput.UPDATE_KUBECONFIG_COMMAND: (
                f"aws eks update-kubeconfig --region {config.region} --name {config.name}",
                "Point kubectl at the cluster (needs an identity listed in cluster.admin_role_arns)",
            ),
            StackOutput.ECR_REPOSITORY_URI: (
                self.images.repository.repository_uri,
                "Push training images here",
            ),
            StackOutput.FSX_FILE_SYSTEM_ID: (self.storage.file_system_id, "FSx for Lustre file system id"),
            StackOutput.FSX_MOUNT_NAME: (
                self.storage.mount_name,
                "Lustre mount name (for the PersistentVolume)",
            ),
            StackOutput.FSX_DNS_NAME: (self.storage.dns_name, "Lustre DNS name (for the PersistentVolume)"),
            StackOutput.TRAINIUM_SUBNET_ID: (
                self.network.trainium_subnet.subnet_id,
                "The one subnet of Trainium nodes and FSx",
            ),
            StackOutput.TRAINIUM_AVAILABILITY_ZONE: (
                f"{config.trainium.availability_zone} ({config.trainium.availability_zone_id})",
                "Zone name and id of the Trainium subnet",
            ),
        }
        if self.dashboard is not None:
            outputs[StackOutput.DASHBOARD_URL] = (
                dashboard_url(region=config.region, dashboard_name=self.dashboard.dashboard_name),
                "The cluster's CloudWatch dashboard (docs/health.md)",
            )
        # Kept by name: the pipeline's post-deployment check reads them (env_from_cfn_outputs).
        self.outputs: dict[StackOutput, CfnOutput] = {
            output: CfnOutput(self, output.value, value=value, description=description)
            for output, (value, description) in outputs.items()
        }
