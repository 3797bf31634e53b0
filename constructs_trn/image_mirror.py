"""Copies of upstream images in the account's ECR, made at deploy: Volcano's images without Docker Hub.

Volcano publishes its images on Docker Hub and ghcr.io only, which ECR's pull-through cache serves
only with a Secrets Manager credential (cluster_facts/versions.py). Without one, the nodes would pull
them from Docker Hub anonymously, within its limit for unauthenticated pulls per address, shared by
every node behind the NAT gateway; Volcano's admission webhooks fail closed while its pods cannot
start. Instead the stack copies each image once per version, at deploy, into a repository of the
account (``<cluster>/mirror/docker.io/<name>``, cluster_facts.image_sources.mirror_prefix), and the
nodes pull from there: ECR has no anonymous limit, and a copy that fails fails the deploy in its own
custom resource, before the Helm release, instead of leaving Volcano in ImagePullBackOff.

The copy is cdklabs' cdk-ecr-deployment (``ECRDeployment``): a custom resource whose Lambda (a Go
binary shipped prebuilt in the package, runtime provided.al2023, 15-minute timeout) copies the image
with containers/image, the library of skopeo: on create and update it copies ``src`` to ``dest``
(the linux/amd64 image of a multi-architecture index: the system nodes are amd64), on delete it does
nothing. The Lambda runs in the cluster's private subnets, so Docker Hub sees the cluster's NAT
address (three anonymous pulls per Volcano version), not Lambda's shared addresses. Its role is ours:
the construct's own grants (every ECR repository, every S3 object) are dropped
(``without_policy_updates``), and the role may push to these repositories only.

The repositories go with the stack (their names are fixed: the Volcano chart composes
``<registry>/<name>:<tag>``, and a repository retained by ``cdk destroy`` would collide with the next
deployment's); the copies are made again by the next deployment. Tags are immutable: the copy of a
tag is never replaced under a running pod.
"""

from __future__ import annotations

from collections.abc import Sequence

import cdk_ecr_deployment as ecr_deployment
from aws_cdk import CfnResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from cluster_facts.deploy_timeouts import ANSWER_SECONDS
from cluster_facts.images import split_image
from constructs_trn.nag import acknowledge, aws_managed_policy

__all__ = ["COPY_FUNCTION_ID_PREFIX", "ImageMirror"]

COPY_FUNCTION_ID_PREFIX = "Custom::CDKECRDeployment"
"""The construct id cdk-ecr-deployment's singleton copy function starts with (its ``lambdaPurpose``)."""


class ImageMirror(Construct):
    """A repository per image, and the deploy-time copy of the pinned tag into it.

    ``images``: (upstream reference, repository name) pairs; the copy keeps the upstream tag.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        images: Sequence[tuple[str, str]],
        keep_images: int,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = iam.Role(
            self,
            "CopyRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Copies the cluster's Docker Hub images into its ECR repositories at deploy",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSLambdaVPCAccessExecutionRole")
            ],
        )
        self.repositories: dict[str, ecr.Repository] = {}
        self.copies: list[ecr_deployment.ECRDeployment] = []
        for index, (upstream, repository_name) in enumerate(images):
            tag = split_image(upstream)[2]
            if tag is None:
                raise ValueError(f"a mirrored image needs a tag: {upstream!r}")
            repository = ecr.Repository(
                self,
                f"Repository{index}",
                repository_name=repository_name,
                image_scan_on_push=True,
                image_tag_mutability=ecr.TagMutability.IMMUTABLE,
                encryption=ecr.RepositoryEncryption.AES_256,
                removal_policy=RemovalPolicy.DESTROY,
                empty_on_delete=True,
                lifecycle_rules=[
                    ecr.LifecycleRule(
                        description=f"Keep the {keep_images} newest copies",
                        tag_status=ecr.TagStatus.ANY,
                        max_image_count=keep_images,
                    )
                ],
            )
            repository.grant_pull_push(self.role)
            self.repositories[upstream] = repository
            self.copies.append(
                ecr_deployment.ECRDeployment(
                    self,
                    f"Copy{index}",
                    src=ecr_deployment.DockerImageName(upstream),
                    dest=ecr_deployment.DockerImageName(f"{repository.repository_uri}:{tag}"),
                    role=self.role.without_policy_updates(),
                    # The system nodes, where Volcano runs, boot AL2023_X86_64_STANDARD (constructs_trn/cluster.py).
                    image_arch=["amd64"],
                    vpc=vpc,
                    vpc_subnets=subnets,
                )
            )
        self.function = self._copy_function()
        # aws-cdk-lib gives the function its log group resource (encrypted with the stack's logs key
        # like every other: stacks/trainium_stack.py); a copy must not run before it exists, or the
        # function's first write would create the group unencrypted and the resource would then fail.
        group = self.function.node.scope.node.try_find_child("LogGroup")  # type: ignore[union-attr]
        for copy in self.copies:
            if group is not None:
                copy.node.add_dependency(group)
            # A copy that hangs fails the deploy once its Lambda has timed out, not after
            # CloudFormation's default hour (cluster_facts/deploy_timeouts.py).
            resource = copy.node.find_child("CustomResource").node.default_child
            assert isinstance(resource, CfnResource)
            resource.add_property_override("ServiceTimeout", int(COPY_TIMEOUT.to_seconds()) + ANSWER_SECONDS)
        self._acknowledge()

    def _copy_function(self) -> lambda_.CfnFunction:
        """The singleton Lambda function cdk-ecr-deployment puts at the top of the stack."""
        stack = Stack.of(self)
        found = [child for child in stack.node.children if child.node.id.startswith(COPY_FUNCTION_ID_PREFIX)]
        if len(found) != 1:
            ids = sorted(child.node.id for child in stack.node.children)
            raise ValueError(f"expected one {COPY_FUNCTION_ID_PREFIX}* function in the stack, found {ids}")
        function = found[0].node.default_child
        assert isinstance(function, lambda_.CfnFunction)
        return function

    def _acknowledge(self) -> None:
        acknowledge(
            self.role,
            aws_managed_policy("service-role/AWSLambdaVPCAccessExecutionRole"),
            reason="the copy function runs in the cluster's private subnets (its pulls leave through the "
            "cluster's NAT address): it needs the network interface and log permissions of this policy",
        )
        acknowledge(
            self.role,
            "IAM5[Resource::*]",
            reason="ecr:GetAuthorizationToken has no resource-level permissions; the push and pull "
            "actions are granted on the mirror's repositories only",
        )


# The copy Lambda's timeout, as cdk-ecr-deployment sets it (src/index.ts: Duration.minutes(15)).
COPY_TIMEOUT = Duration.minutes(15)
