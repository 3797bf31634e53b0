"""ECR pull-through cache rules: the account's registry serves the cluster's third-party images.

One ``AWS::ECR::PullThroughCacheRule`` per upstream registry, prefix ``upstream/<registry>``
(cluster_facts.image_sources), and a repository creation template for that prefix, so every
repository the cache creates on a first pull is encrypted and keeps a bounded number of images.
A rule is a singleton of the account and region (its prefix is its identity): a second stack in the
same account and region uses the first one's rules (``ecr.pull_through_cache_rules: existing``).

The rules must exist before any pod pulls: the Kubernetes layer waits for this construct.
A first pull through a rule creates the repository, so whoever pulls (the node role) needs, on
``pull_through_repository_arn``, registry pull plus ``ecr:BatchImportUpstreamImage`` and
``ecr:CreateRepository``: the node roles get that grant (constructs_trn/iam_roles.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from aws_cdk import aws_ecr as ecr
from constructs import Construct

from cluster_facts.image_sources import (
    PULL_THROUGH_PREFIX,
    UPSTREAM_REGISTRIES,
    cache_rule_prefix,
    pull_through_repository_arn,
)

__all__ = ["PullThroughCache"]


def _construct_id(host: str) -> str:
    return "".join(part.capitalize() for part in host.replace("-", ".").split("."))


class PullThroughCache(Construct):
    """A pull-through cache rule for each of ``registries`` and the template of their repositories."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        account: str,
        region: str,
        registries: Sequence[str],
        credentials: Mapping[str, str],
        keep_images: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.repository_arn = pull_through_repository_arn(account=account, region=region)
        self.rules: dict[str, ecr.CfnPullThroughCacheRule] = {}
        for host in sorted(registries):
            registry = UPSTREAM_REGISTRIES[host]
            credential = credentials.get(host)
            if registry.needs_credential and credential is None:
                raise ValueError(
                    f"ECR caches {host} only with a credential (ecr.upstream_credentials.{host})"
                )
            self.rules[host] = ecr.CfnPullThroughCacheRule(
                self,
                _construct_id(host),
                ecr_repository_prefix=cache_rule_prefix(host),
                upstream_registry_url=registry.upstream_url,
                upstream_registry=registry.kind,
                credential_arn=credential,
            )
        # Repositories the cache creates: encrypted, tags immutable, the newest images kept.
        # IMMUTABLE (ECR API, CreateRepositoryCreationTemplate imageTagMutability: "all image tags
        # within the repository will be immutable which will prevent them from being overwritten"):
        # the first image cached under a pinned tag stays what every node pulls under that tag, even
        # if upstream moves the tag; the cache cannot overwrite it. A template applies only to
        # repositories created after it: one cached before keeps its setting (docs/supply-chain.md).
        self.template = ecr.CfnRepositoryCreationTemplate(
            self,
            "RepositoryTemplate",
            prefix=PULL_THROUGH_PREFIX,
            applied_for=["PULL_THROUGH_CACHE"],
            description="Repositories of the cluster's pull-through cache (TrainiumStack)",
            encryption_configuration=ecr.CfnRepositoryCreationTemplate.EncryptionConfigurationProperty(
                encryption_type="AES256"
            ),
            image_tag_mutability="IMMUTABLE",
            lifecycle_policy=json.dumps(
                {
                    "rules": [
                        {
                            "rulePriority": 1,
                            "description": f"Keep the {keep_images} newest images of each cached repository",
                            "selection": {
                                "tagStatus": "any",
                                "countType": "imageCountMoreThan",
                                "countNumber": keep_images,
                            },
                            "action": {"type": "expire"},
                        }
                    ]
                },
                sort_keys=True,
            ),
        )
