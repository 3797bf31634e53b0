"""The ECR repository that holds the project's training images."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_ecr as ecr
from constructs import Construct

__all__ = ["TrainingImageRepository"]


class TrainingImageRepository(Construct):
    """Scanned on push, immutable tags (a job's image cannot change under it), old images expire.

    ``repository_name`` None lets CloudFormation generate a unique name: a repository retained by
    ``cdk destroy`` then never collides with the next deployment's.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        repository_name: str | None,
        keep_images: int,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        self.repository = ecr.Repository(
            self,
            "Repository",
            repository_name=repository_name,
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            encryption=ecr.RepositoryEncryption.AES_256,
            removal_policy=removal_policy,
            # A destroyed stack takes its images along instead of failing on a non-empty repository.
            empty_on_delete=removal_policy == RemovalPolicy.DESTROY,
            lifecycle_rules=[
                ecr.LifecycleRule(
                    description="Drop untagged layers of superseded pushes",
                    rule_priority=1,
                    tag_status=ecr.TagStatus.UNTAGGED,
                    max_image_age=Duration.days(7),
                ),
                ecr.LifecycleRule(
                    description=f"Keep the {keep_images} newest images",
                    rule_priority=2,
                    tag_status=ecr.TagStatus.ANY,
                    max_image_count=keep_images,
                ),
            ],
        )
