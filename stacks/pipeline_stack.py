"""TrainiumPipeline: CDK Pipelines promoting TrainiumStack through the pipeline file's waves.

    cdk synth -c pipeline=config/pipeline.example.yaml
    cdk deploy TrainiumPipeline -c pipeline=config/my-pipeline.yaml     # once; then it updates itself

The pipeline runs in the tooling account. Source (a CodeConnections connection) -> Build (``make
deploy-setup``, ``make deploy-checks``, ``make synth PIPELINE=<this file>``: the deployment's checks
and the synth run once per change, with the CDK CLI pinned in package-lock.json) -> UpdatePipeline (self-mutation with that
same CLI) -> Assets (with the cdk-assets pinned there too) -> one CodePipeline stage per wave, in
file order. Each environment of a wave is a ``TrainiumStage`` (a ``cdk.Stage`` holding
TrainiumStack in the environment's account and region). Production waves check each stage's
security diff (``ConfirmPermissionsBroadening``) and wait for a manual approval after the stack's
change set is created and before it executes. After every stage, a CodeBuild check reads the
stack's outputs and checks the cluster, its Trainium node groups and EFA interfaces and, where the
API server is reachable, that every Trainium node advertises its Neuron and EFA devices.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import pipelines
from constructs import Construct, IConstruct

from cluster_plan.deployment_check import (
    CANARY_SOURCE,
    CHECK_OUTPUTS,
    deployment_check_env,
    deployment_check_script,
    deployment_check_timeout_minutes,
)
from cluster_plan.fabric_check_commands import pipeline_fabric_checks
from config.model import StackConfig
from config.pipeline import (
    PIPELINE_STACK_ID,
    REPO_ROOT,
    EnvironmentSettings,
    Pipeline,
    PipelineSettings,
    WaveSettings,
    construct_id_of,
)
from constructs_trn.deployment_check_role import DeploymentCheckTrust, deployment_check_role_name
from constructs_trn.log_encryption import LogEncryption
from constructs_trn.nag import acknowledge, aws_managed_policy
from stacks.trainium_stack import TrainiumStack, add_trainium_stack

__all__ = [
    "BUILD_IMAGE",
    "PIPELINE_STACK_ID",
    "RUNTIME_VERSIONS",
    "STANDARD_8_RUNTIMES",
    "SYNTH_CHECKS",
    "SYNTH_INSTALL",
    "TrainiumPipeline",
    "TrainiumStage",
    "pinned_assets_cli_version",
    "pinned_cli_version",
]

# Ubuntu 24.04 (aws/codebuild/standard:8.0) with the runtimes pinned: Python 3.11 (the project's
# target; make setup builds .venv from it) and Node.js 24 for the steps that npm-install a CLI.
# The synth itself runs on the Node.js 24 that make setup installs into .venv. By id: aws-cdk-lib
# names STANDARD_8_0 only from 2.274, whose cloud-assembly schema the pinned cdk-assets cannot read.
BUILD_IMAGE = codebuild.LinuxBuildImage.from_code_build_image_id("aws/codebuild/standard:8.0")
RUNTIME_VERSIONS = {"python": "3.11", "nodejs": "24"}
STANDARD_8_RUNTIMES: Mapping[str, tuple[str, ...]] = {
    "python": ("3.10", "3.11", "3.12", "3.13", "3.14"),
    "nodejs": ("22", "24"),
    "golang": ("1.24", "1.25", "1.26"),
}
"""The runtimes the standard:8.0 image offers for ``runtime-versions``, of those this project could
use: CodeBuild User Guide, "Available runtimes" (https://docs.aws.amazon.com/codebuild/latest/
userguide/available-runtimes.html), and the image's own runtimes.yml (aws/aws-codebuild-docker-images
ubuntu/standard/8.0, commit 0c5eb16 of 2026-04-07: Python 3.11.15, Node.js 24.14.0, Go 1.26.0).
Read 2026-11-28; a runtime the image drops fails the build's install phase, which names it."""

# What a deployment needs, and no more (docs/pipeline.md, "The build"): make deploy-setup installs
# .venv/, node_modules/ and .venv-checkov/ (no PyTorch, TorchX, Go or control-plane binaries);
# make deploy-checks runs lint, the fast tests and the guardrails (cdk-nag, cfn-lint, checkov);
# then the synth. The runtime and cluster tiers (make test) are the project's own CI. Measured here:
# about 8 minutes on 2 cores after the install (docs/pipeline.md); 30 minutes leaves the install
# and a slower host their room.
SYNTH_INSTALL = ("make deploy-setup",)
SYNTH_CHECKS = ("make deploy-checks",)
SYNTH_TIMEOUT_MINUTES = 30
# pip's and npm's download caches and mypy's cache (in the source directory), kept between builds in
# the artifact bucket: a build downloads only what changed since the last, and mypy, the longest of
# the lint steps without its cache, re-reads only what changed (buildspec cache.paths; CodeBuild
# "Build caching").
BUILD_CACHE_PATHS = ("/root/.cache/pip/**/*", "/root/.npm/**/*", ".mypy_cache/**/*")
BUILD_CACHE_PREFIX = "build-cache/synth"


def _locked_npm_version(package: str) -> str:
    lock = json.loads((REPO_ROOT / "package-lock.json").read_text(encoding="utf-8"))
    return str(lock["packages"][f"node_modules/{package}"]["version"])


def pinned_cli_version() -> str:
    """The CDK CLI version of package-lock.json: the one make synth runs, used by self-mutation too."""
    return _locked_npm_version("aws-cdk")


def pinned_assets_cli_version() -> str:
    """The cdk-assets version of package-lock.json: the Assets stage's publisher, which the tests run.

    CDK Pipelines would install ``cdk-assets@latest``, whose cloud-assembly schema support can trail
    aws-cdk-lib's by a release; the tests prove this version reads every stage's asset manifest.
    """
    return _locked_npm_version("cdk-assets")


class TrainiumStage(cdk.Stage):
    """TrainiumStack for one environment of the pipeline, in that environment's account and region."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StackConfig,
        deployment_check: DeploymentCheckTrust | None = None,
        permissions_boundary: str | None = None,
        canary: bool = False,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            env=cdk.Environment(account=config.account, region=config.region),
            # Every role of the stack carries the boundary its account's bootstrap role requires.
            permissions_boundary=(
                cdk.PermissionsBoundary.from_name(permissions_boundary) if permissions_boundary else None
            ),
        )
        self.config = config
        self.canary = canary
        # First child of the stage: add_trainium_stack seeds the stage's zone context (no lookup).
        self.stack: TrainiumStack = add_trainium_stack(
            self, config, deployment_check=deployment_check, deployment_check_canary=canary
        )


class TrainiumPipeline(cdk.Stack):
    """The CodePipeline in the tooling account; its stages are built as siblings of this stack.

    The stages are children of ``scope`` (the app), so each stack deploys as ``<Stage>-TrainiumStack``
    (``Dev-TrainiumStack``) and each stage is its own nested cloud assembly (``assembly-Dev``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str = PIPELINE_STACK_ID,
        *,
        pipeline: Pipeline,
        pipeline_file: str,
        cli_version: str | None = None,
        assets_cli_version: str | None = None,
    ) -> None:
        settings = pipeline.settings
        super().__init__(
            scope,
            construct_id,
            env=cdk.Environment(account=settings.tooling.account, region=settings.tooling.region),
            description=f"CDK Pipeline {settings.name}: promotes TrainiumStack through {len(settings.waves)} waves",
            # The pipeline deploys itself from the branch before any approval (self-mutation): the
            # boundary caps what a change merged to that branch can make its roles do.
            permissions_boundary=cdk.PermissionsBoundary.from_name(settings.permissions_boundary),
        )
        self.settings = settings
        # The checks' VPC names its one zone; seeding the stack's zone lookup keeps the synth offline.
        self.node.set_context(
            f"availability-zones:account={settings.tooling.account}:region={settings.tooling.region}",
            [_check_zone(settings.tooling.region)],
        )
        self.cli_version = cli_version or pinned_cli_version()
        self.assets_cli_version = assets_cli_version or pinned_assets_cli_version()
        self.artifact_bucket = self._artifact_bucket()

        self._add_pipeline(settings, pipeline_file)
        trust = self._add_check_role(settings)
        self._add_stages(scope, pipeline, pipeline_file, trust)
        self._allow_checks_into_stages()
        self.pipeline.build_pipeline()
        self._pin_security_check_cli()
        self._log_the_security_check_to_the_build_logs()
        self._acknowledge_pipeline_findings()
        self.log_encryption.encrypt_template_log_groups(self)

    def _add_pipeline(self, settings: PipelineSettings, pipeline_file: str) -> None:
        """The source, the build logs, the synth step and the CDK pipeline itself."""
        self.pipeline_file = pipeline_file
        self.source = source = pipelines.CodePipelineSource.connection(
            settings.source.repository,
            settings.source.branch,
            connection_arn=settings.source.connection_arn,
        )
        # Every CodeBuild project of the pipeline (synth, self-mutation, assets, checks) writes to one
        # group encrypted with the pipeline's own logs key, not to CodeBuild's default groups.
        self.log_encryption = LogEncryption(self, "LogEncryption", name=settings.name)
        self.build_logs = logs.LogGroup(
            self,
            "BuildLogs",
            encryption_key=self.log_encryption.key,
            retention=logs.RetentionDays.ONE_YEAR,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        self.synth_step = pipelines.CodeBuildStep(
            "Synth",
            input=source,
            install_commands=list(SYNTH_INSTALL),
            commands=[*SYNTH_CHECKS, f"make synth PIPELINE={pipeline_file}"],
            primary_output_directory="cdk.out",
        )
        self.pipeline = pipelines.CodePipeline(
            self,
            "Pipeline",
            pipeline_name=settings.name,
            synth=self.synth_step,
            cross_account_keys=True,
            enable_key_rotation=True,
            artifact_bucket=self.artifact_bucket,
            cli_version=self.cli_version,
            cdk_assets_cli_version=self.assets_cli_version,
            self_mutation=True,
            code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(
                    build_image=BUILD_IMAGE, compute_type=codebuild.ComputeType.SMALL
                ),
                partial_build_spec=codebuild.BuildSpec.from_object(
                    {"version": "0.2", "phases": {"install": {"runtime-versions": RUNTIME_VERSIONS}}}
                ),
                logging=codebuild.LoggingOptions(
                    cloud_watch=codebuild.CloudWatchLoggingOptions(log_group=self.build_logs)
                ),
            ),
            # The checks synthesize TrainiumStack several times on two pytest workers: MEDIUM (4 vCPUs,
            # 7 GB) holds two workers and their jsii processes.
            synth_code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(compute_type=codebuild.ComputeType.MEDIUM),
                timeout=cdk.Duration.minutes(SYNTH_TIMEOUT_MINUTES),
                cache=codebuild.Cache.bucket(self.artifact_bucket, prefix=BUILD_CACHE_PREFIX),
                partial_build_spec=codebuild.BuildSpec.from_object(
                    {"version": "0.2", "cache": {"paths": list(BUILD_CACHE_PATHS)}}
                ),
            ),
        )

    def _add_check_role(self, settings: PipelineSettings) -> DeploymentCheckTrust:
        """The role the post-deployment checks run as, and the trust each stage gives it."""
        # By name, known at synth: the stages' stacks trust it without referring to this stack.
        check_role_name = f"{settings.name}-deployment-check"
        self.check_role = iam.Role(
            self,
            "DeploymentCheckRole",
            role_name=check_role_name,
            description="Post-deployment checks of the pipeline: assumes each stage's read-only check role",
            assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com"),
        )
        trust = DeploymentCheckTrust(account=settings.tooling.account, role_name=check_role_name)
        self._check_egress(settings.tooling.region)
        return trust

    def _add_stages(
        self, scope: Construct, pipeline: Pipeline, pipeline_file: str, trust: DeploymentCheckTrust
    ) -> None:
        """A wave per configured wave, a stage per environment (children of the app, not of this stack)."""
        settings = pipeline.settings
        self.stages: dict[str, TrainiumStage] = {}
        self.waves: dict[str, pipelines.Wave] = {}
        self.canary_configs: dict[str, str] = {}
        for wave_settings in settings.waves:
            wave = self.pipeline.add_wave(construct_id_of(wave_settings.name))
            self.waves[wave_settings.name] = wave
            for environment in wave_settings.environments:
                config = pipeline.environments[environment.name]
                stage = TrainiumStage(
                    scope,
                    construct_id_of(environment.name),
                    config=config,
                    deployment_check=trust,
                    permissions_boundary=settings.permissions_boundary,
                    canary=environment.canary,
                )
                if environment.canary:
                    # The canary runs make canary from the checkout, with the environment file the
                    # stage was built from (named relative to the repository, as the synth names it).
                    self.canary_configs[environment.name] = (
                        PurePosixPath(pipeline_file).parent / environment.config
                    ).as_posix()
                self.stages[environment.name] = stage
                self._add_stage(wave, wave_settings, environment, stage)

    def _allow_checks_into_stages(self) -> None:
        """The check role may assume each stage's read-only check role, and nothing else."""
        self.check_role.add_to_policy(
            iam.PolicyStatement(
                actions=["sts:AssumeRole"],
                resources=[
                    f"arn:{self.partition}:iam::{stage.config.account}:role/"
                    f"{deployment_check_role_name(stage.config.name, stage.config.region)}"
                    for stage in self.stages.values()
                ],
            )
        )

    def _check_egress(self, region: str) -> None:
        """A fixed public address for the deployment checks, so no API server admits CodeBuild's ranges.

        CodeBuild's published ranges are shared by every customer's builds in the region: an API
        server that admits them admits everyone's. The checks run in this small VPC instead and reach
        the internet through one NAT gateway whose Elastic IP is the stack output
        ``DeploymentCheckEgressCidr``: that /32 is what an environment's ``cluster.endpoint_public_cidrs``
        admits for the check (docs/access.md). The address lives as long as this stack.
        """
        self.check_vpc = ec2.Vpc(
            self,
            "DeploymentCheckNetwork",
            availability_zones=[_check_zone(region)],
            nat_gateways=1,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="Egress", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=28),
                ec2.SubnetConfiguration(
                    name="Checks", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=26
                ),
            ],
            ip_addresses=ec2.IpAddresses.cidr("10.255.0.0/24"),
            flow_logs={"All": ec2.FlowLogOptions(traffic_type=ec2.FlowLogTrafficType.ALL)},
        )
        [public] = self.check_vpc.public_subnets
        eip = public.node.find_child("EIP")
        assert isinstance(eip, ec2.CfnEIP)
        self.check_egress_cidr = cdk.CfnOutput(
            self,
            "DeploymentCheckEgressCidr",
            value=f"{eip.ref}/32",
            description="The deployment checks' only public address: admit it in cluster.endpoint_public_cidrs",
        )

    def _artifact_bucket(self) -> s3.Bucket:
        """The artifact store: our own KMS key (rotated; target accounts' roles get grants) and access logs."""
        self.artifact_key = kms.Key(
            self,
            "ArtifactKey",
            description=f"{self.settings.name} pipeline artifacts (shared with the stages' deployment roles)",
            enable_key_rotation=True,
        )
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            versioned=True,
            lifecycle_rules=[s3.LifecycleRule(expiration=cdk.Duration.days(365))],
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        return s3.Bucket(
            self,
            "Artifacts",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.artifact_key,
            bucket_key_enabled=True,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            versioned=True,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="artifacts/",
            lifecycle_rules=[s3.LifecycleRule(noncurrent_version_expiration=cdk.Duration.days(30))],
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )

    def _add_stage(
        self,
        wave: pipelines.Wave,
        wave_settings: WaveSettings,
        environment: EnvironmentSettings,
        stage: TrainiumStage,
    ) -> None:
        stack = stage.stack
        pre: list[pipelines.Step] = []
        if wave_settings.production:
            # cdk diff --security-only against the deployed stack; broadening IAM or security groups
            # stops here for a confirmation (with a link to the diff) before anything is prepared.
            pre.append(pipelines.ConfirmPermissionsBroadening("SecurityCheck", stage=stage))
        stack_steps: list[pipelines.StackSteps] = []
        if wave_settings.approval == "manual":
            region = stage.config.region
            stack_steps.append(
                pipelines.StackSteps(
                    stack=stack,
                    change_set=[
                        pipelines.ManualApprovalStep(
                            "Approve",
                            comment=(
                                f"{environment.name}: review change set PipelineChange of stack "
                                f"{stack.stack_name} in account {stage.config.account} ({region}), the "
                                "full diff of this deployment, then approve to execute it"
                            ),
                            review_url=(
                                f"https://{region}.console.aws.amazon.com/cloudformation/home?region={region}"
                                f"#/stacks?filteringText={stack.stack_name}"
                            ),
                        )
                    ],
                )
            )
        wave.add_stage(
            stage,
            pre=pre,
            post=[self._deployment_check(stage, canary_config=self.canary_configs.get(environment.name))],
            stack_steps=stack_steps,
        )

    def _deployment_check(
        self, stage: TrainiumStage, *, canary_config: str | None
    ) -> pipelines.CodeBuildStep:
        config = stage.config
        stack = stage.stack
        return pipelines.CodeBuildStep(
            "DeploymentCheck",
            # The fabric checks' Jobs are files of the synth's output (cdk.out/fabric-check/<stage>/);
            # the canary runs from the checkout (make canary), in the folder CANARY_SOURCE.
            input=self.synth_step if pipeline_fabric_checks(config) or canary_config else None,
            additional_inputs={CANARY_SOURCE: self.source} if canary_config else None,
            commands=[deployment_check_script()],
            env_from_cfn_outputs={
                variable: stack.outputs[output] for variable, output in CHECK_OUTPUTS.items()
            },
            env=deployment_check_env(
                config,
                stage_id=stage.stage_name,
                check_role_arn=(
                    f"arn:{self.partition}:iam::{config.account}:role/"
                    f"{deployment_check_role_name(config.name, config.region)}"
                ),
                canary_config=canary_config,
            ),
            role=self.check_role,
            # From the fixed egress address (``_check_egress``), never CodeBuild's shared ranges.
            vpc=self.check_vpc,
            subnet_selection=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            timeout=cdk.Duration.minutes(
                deployment_check_timeout_minutes(config, canary=canary_config is not None)
            ),
            # CodeBuild runs commands with /bin/sh unless told otherwise; the check is a bash script.
            partial_build_spec=codebuild.BuildSpec.from_object({"version": "0.2", "env": {"shell": "bash"}}),
        )

    def _log_the_security_check_to_the_build_logs(self) -> None:
        """ConfirmPermissionsBroadening makes its CodeBuild project without ``code_build_defaults``:
        point it at the encrypted build log group too, and let its role write there."""
        security_check = self.pipeline.node.try_find_child("PipelinesSecurityCheck")
        if security_check is None:
            return
        project = security_check.node.find_child("CDKSecurityCheck")
        assert isinstance(project, codebuild.Project)
        cfn_project = project.node.default_child
        assert isinstance(cfn_project, codebuild.CfnProject)
        cfn_project.logs_config = codebuild.CfnProject.LogsConfigProperty(
            cloud_watch_logs=codebuild.CfnProject.CloudWatchLogsConfigProperty(
                status="ENABLED", group_name=self.build_logs.log_group_name
            )
        )
        self.build_logs.grant_write(project)

    def _pin_security_check_cli(self) -> None:
        """ConfirmPermissionsBroadening installs ``aws-cdk`` unpinned: pin it to our CLI.

        The registry's latest aws-cdk need not read this aws-cdk-lib's cloud assembly (its ``latest``
        tag has pointed past the 2.x line), and an unreadable assembly fails ``cdk diff``: every
        production deployment would ask for a confirmation without a diff. The rendered buildspec is
        rewritten at exactly that command.
        """
        security_check = self.pipeline.node.try_find_child("PipelinesSecurityCheck")
        if security_check is None:
            return
        project = security_check.node.find_child("CDKSecurityCheck").node.default_child
        assert isinstance(project, codebuild.CfnProject)
        build_spec = self.resolve(project.source)["buildSpec"]
        needle, replacement = '"npm install -g aws-cdk"', f'"npm install -g aws-cdk@{self.cli_version}"'
        pinned, count = _replace_in_strings(build_spec, needle, replacement)
        if count != 1:
            raise ValueError(
                f"expected one {needle} in CDK Pipelines' security check buildspec, found {count}: "
                "aws-cdk-lib changed it; update TrainiumPipeline._pin_security_check_cli"
            )
        project.add_property_override("Source.BuildSpec", pinned)
        project.add_property_override("Environment.Image", BUILD_IMAGE.image_id)

    def _acknowledge_pipeline_findings(self) -> None:
        """AwsSolutions findings in what CDK Pipelines generates, acknowledged on the construct itself.

        CDK Pipelines builds these roles and their grants; rewriting them would fork the library.
        Each acknowledgment names its exact finding and says why it holds for that role.
        """
        read, write, kms_use = self._artifact_grant_findings()
        pipeline_role = self.pipeline.pipeline.role
        self._acknowledge_all(pipeline_role, "the pipeline's service role", {**read, **write, **kms_use})
        acknowledge(
            pipeline_role,
            "IAM5[Resource::*]",
            reason="CodePipeline's grant on the KMS keys of its cross-region replication buckets, whose "
            "ARNs live in the support stacks of other regions",
        )
        for region, bucket in self._cross_region_buckets().items():
            acknowledge(
                pipeline_role,
                f"IAM5[Resource::arn:{self.partition}:s3:::{self.resolve(bucket.bucket_name)}/*]",
                reason=f"the objects of the pipeline's artifact replication bucket in {region}, for the "
                "actions that deploy there",
            )
            acknowledge(
                bucket,
                "S1",
                reason="CodePipeline's cross-region replication bucket holds KMS-encrypted copies of "
                "artifacts only; CloudTrail records its access, and that region has no log bucket",
            )
        for action in self.pipeline.pipeline.node.find_child("Source").node.children:
            role = action.node.try_find_child("CodePipelineActionRole")
            if role is not None:
                self._acknowledge_all(role, "the source action's role", {**read, **write, **kms_use})

        self._acknowledge_codebuild_role(self.pipeline.synth_project, "synth", {**read, **write, **kms_use})
        self._acknowledge_codebuild_role(
            self.pipeline.self_mutation_project,
            "self-mutation",
            {
                **read,
                **kms_use,
                "IAM5[Resource::*]": "cdk deploy of this stack reads cloudformation:DescribeStacks and "
                "s3:ListBucket of the bootstrap buckets, whose names it learns at run time",
                f"IAM5[Resource::arn:*:iam::{self.account}:role/*]": "assumes only the tooling account's CDK "
                "bootstrap roles (condition on the aws-cdk:bootstrap-role tag) to deploy this stack",
            },
        )
        self._acknowledge_security_check(read, kms_use)
        self._acknowledge_asset_role(read)

        self._acknowledge_all(self.check_role, "the deployment checks' role", {**read, **kms_use})
        acknowledge(
            self.check_role,
            "IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:network-interface/*]",
            reason="CodeBuild attaches the checks to their VPC through network interfaces it creates per "
            "build (ec2:CreateNetworkInterfacePermission, conditioned on the subnets and CodeBuild)",
        )
        checks = [
            check
            for check in self.pipeline.node.find_all()
            if isinstance(check, codebuild.PipelineProject) and check.node.id.endswith("DeploymentCheck")
        ]
        for index, check in enumerate(checks):
            # CodeBuild adds its VPC policy once per role: to the first project that uses the role.
            if index == 0:
                acknowledge(
                    check,
                    "IAM5[Resource::*]",
                    reason="CodeBuild in a VPC (the checks' fixed egress) describes subnets, security groups, "
                    "DHCP options and network interfaces and creates and deletes its own interfaces; these "
                    "EC2 actions have no resource-level permissions",
                )
            for finding in self._codebuild_logging_findings(check):
                acknowledge(
                    self.check_role,
                    finding,
                    reason="CodeBuild's own log group and report groups of one deployment check project",
                )

    def _artifact_grant_findings(self) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """The findings of CDK's read, write and KMS grants on the artifact bucket, with their reasons."""
        bucket = f"<{self._logical_id(self.artifact_bucket)}.Arn>"
        read = {
            "IAM5[Action::s3:GetBucket*]": "reads pipeline artifacts with CDK's bucket read grant (s3:GetBucket*)",
            "IAM5[Action::s3:GetObject*]": "reads pipeline artifacts with CDK's bucket read grant (s3:GetObject*)",
            "IAM5[Action::s3:List*]": "lists pipeline artifacts with CDK's bucket read grant (s3:List*)",
            f"IAM5[Resource::{bucket}/*]": "reaches the objects of the pipeline's own artifact bucket only",
        }
        write = {
            "IAM5[Action::s3:Abort*]": "writes pipeline artifacts with CDK's bucket write grant (s3:Abort*)",
            "IAM5[Action::s3:DeleteObject*]": "overwrites pipeline artifacts with CDK's bucket write grant",
        }
        kms_use = {
            "IAM5[Action::kms:GenerateDataKey*]": "encrypts artifacts with the pipeline's artifact key only",
            "IAM5[Action::kms:ReEncrypt*]": "re-encrypts artifacts under the pipeline's artifact key only",
        }
        return read, write, kms_use

    def _acknowledge_security_check(self, read: dict[str, str], kms_use: dict[str, str]) -> None:
        """ConfirmPermissionsBroadening's shared CodeBuild project and its auto-approve function."""
        security_check = self.pipeline.node.try_find_child("PipelinesSecurityCheck")
        if security_check is None:
            return
        approve = security_check.node.find_child("CDKPipelinesAutoApprove")
        project = security_check.node.find_child("CDKSecurityCheck")
        assert isinstance(project, codebuild.Project)
        self._acknowledge_codebuild_role(
            project,
            "security check",
            {
                **read,
                **kms_use,
                "IAM5[Resource::*]": "cdk diff assumes only the stages' CDK deploy roles (condition on the "
                "aws-cdk:bootstrap-role tag), in accounts it learns from the cloud assembly",
                f"IAM5[Resource::<{self._logical_id(approve)}.Arn>:*]": "invokes versions of CDK's own "
                "auto-approve function, which approves a stage only when its security diff is empty",
            },
        )
        role = approve.node.find_child("ServiceRole")
        acknowledge(
            role,
            aws_managed_policy("service-role/AWSLambdaBasicExecutionRole"),
            reason="CDK Pipelines' auto-approve function writes only its own CloudWatch logs with this AWS "
            "managed policy",
        )
        acknowledge(
            role,
            "IAM5[Resource::*]",
            reason="codepipeline:GetPipelineState and PutApprovalResult only on pipelines tagged "
            "SECURITY_CHECK=ALLOW_APPROVE, as CDK Pipelines tags this one",
        )

    def _acknowledge_asset_role(self, read: dict[str, str]) -> None:
        """The one role that every FileAsset publishing project of the Assets stage shares."""
        assets = self.pipeline.node.try_find_child("Assets")
        role = assets.node.try_find_child("FileRole") if assets is not None else None
        if role is None:
            return
        self._acknowledge_all(role, "the asset publishing role", read)
        codebuild_arn = f"arn:{self.partition}:codebuild:{self.region}:{self.account}"
        logs_arn = f"arn:{self.partition}:logs:{self.region}:{self.account}"
        for finding, reason in {
            "IAM5[Resource::*]": "CDK Pipelines lets the one asset role of all FileAsset projects start and "
            "read their builds (codebuild:StartBuild, BatchGetBuilds)",
            f"IAM5[Resource::{logs_arn}:log-group:/aws/codebuild/*]": "one role for all FileAsset "
            "projects writes each one's CodeBuild log group",
            f"IAM5[Resource::{codebuild_arn}:report-group/*]": "one role for all FileAsset projects "
            "writes each one's CodeBuild report groups",
        }.items():
            acknowledge(role, finding, reason=reason)

    def _acknowledge_codebuild_role(
        self, project: codebuild.IProject, label: str, findings: Mapping[str, str]
    ) -> None:
        role = project.role
        assert role is not None
        self._acknowledge_all(role, f"the {label} project's role", findings)
        for finding in self._codebuild_logging_findings(project):
            acknowledge(
                role,
                finding,
                reason=f"CodeBuild's own log group and report groups of the {label} project only",
            )

    @staticmethod
    def _acknowledge_all(scope: IConstruct, who: str, findings: Mapping[str, str]) -> None:
        for finding, reason in findings.items():
            acknowledge(scope, finding, reason=f"{who} {reason}")

    def _codebuild_logging_findings(self, project: IConstruct) -> list[str]:
        """CodeBuild's grant to its project role: the project's log group and report groups, by prefix."""
        name = f"<{self._logical_id(project)}>"
        codebuild_arn = f"arn:{self.partition}:codebuild:{self.region}:{self.account}"
        logs_arn = f"arn:{self.partition}:logs:{self.region}:{self.account}"
        return [
            f"IAM5[Resource::{logs_arn}:log-group:/aws/codebuild/{name}:*]",
            f"IAM5[Resource::{codebuild_arn}:report-group/{name}-*]",
        ]

    def _cross_region_buckets(self) -> dict[str, s3.Bucket]:
        """The replication bucket CodePipeline made for each region other than the tooling region."""
        buckets: dict[str, s3.Bucket] = {}
        app = self.node.scope
        for child in app.node.children if app is not None else []:
            if isinstance(child, cdk.Stack) and child.node.id.startswith(
                f"cross-region-stack-{self.account}:"
            ):
                bucket = child.node.find_child("Default").node.find_child(
                    "CrossRegionCodePipelineReplicationBucket"
                )
                assert isinstance(bucket, s3.Bucket)
                buckets[child.region] = bucket
        return buckets

    def _logical_id(self, construct: IConstruct) -> str:
        element = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
        assert isinstance(element, cdk.CfnElement)
        return str(self.resolve(element.stack.get_logical_id(element)))


def _check_zone(region: str) -> str:
    """The zone of the checks' VPC: every region has its "a" zone, in every account."""
    return f"{region}a"


def _replace_in_strings(value: Any, needle: str, replacement: str) -> tuple[Any, int]:
    """``value`` (resolved CloudFormation) with ``needle`` replaced in every string, and the count."""
    if isinstance(value, str):
        return value.replace(needle, replacement), value.count(needle)
    if isinstance(value, Mapping):
        total = 0
        result: dict[str, Any] = {}
        for key, item in value.items():
            result[key], count = _replace_in_strings(item, needle, replacement)
            total += count
        return result, total
    if isinstance(value, Sequence):
        items = [_replace_in_strings(item, needle, replacement) for item in value]
        return [item for item, _ in items], sum(count for _, count in items)
    return value, 0
