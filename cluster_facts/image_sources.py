"""Where the cluster's images come from: the account's ECR pull-through cache, digests, exceptions.

Every third-party image the cluster pulls goes through the account's own ECR registry: one
pull-through cache rule per upstream registry, all under one repository prefix
(``PULL_THROUGH_PREFIX``), so the cluster pulls from one scanned place and the nodes' registry
permissions name one repository pattern (``pull_through_repository_arn``). An upstream reference
maps to the cache by putting the account's registry and the prefix in front of it::

    quay.io/coreos/etcd:v3.5.33
    -> 111122223333.dkr.ecr.us-west-2.amazonaws.com/upstream/quay.io/coreos/etcd:v3.5.33

Each rule's ECR repository prefix is ``upstream/<registry host>``: the cached repository's name is
the upstream reference itself, readable in the console and in ``kubectl describe``.

ECR caches public.ecr.aws, registry.k8s.io and quay.io without credentials; Docker Hub and the
GitHub Container Registry only with a Secrets Manager secret (name ``ecr-pullthroughcache/...``),
so their rules exist only when the configuration names one (``ecr.upstream_credentials``).

Images ECR's cache cannot serve without a credential (Docker Hub's: Volcano's) are copied at deploy
into repositories of the account under ``<cluster name>/mirror/<registry host>/...``
(``mirror_prefix``, ``ImageSource.mirrored``; constructs_trn/image_mirror.py copies them) when the
configuration names no Docker Hub credential, so no node pulls Docker Hub anonymously::

    docker.io/volcanosh/vc-scheduler:v1.15.1
    -> 111122223333.dkr.ecr.us-west-2.amazonaws.com/trainium/mirror/docker.io/volcanosh/vc-scheduler:v1.15.1

Digests: ``IMAGE_DIGESTS`` holds the digests that upstream releases publish for the tags the
project pins; ``TAG_ONLY_IMAGES`` names every image that stays pinned by tag, with the reason.
``DIRECT_PULLS`` names the images that do not come through the cache, with the reason.

Pure data and string functions: account and region are opaque strings here (the stack passes the
configuration's concrete values, so object names that hash an image stay stable).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from cluster_facts.images import split_image

__all__ = [
    "DIRECT_PULLS",
    "IMAGE_DIGESTS",
    "PULL_THROUGH_PREFIX",
    "TAG_ONLY_IMAGES",
    "UPSTREAM_REGISTRIES",
    "ImageSource",
    "UpstreamRegistry",
    "cache_rule_prefix",
    "cached_repository_arn",
    "digest_exception_reason",
    "ecr_registry",
    "ecr_repository_arn",
    "is_ecr_private_registry",
    "mirror_prefix",
    "mirrored_image",
    "pull_through_image",
    "pull_through_repository_arn",
    "upstream_repository",
    "with_published_digest",
]

PULL_THROUGH_PREFIX = "upstream"
"""Every pull-through cache rule's ECR repository prefix starts with this (``upstream/<host>``)."""


@dataclass(frozen=True, kw_only=True)
class UpstreamRegistry:
    """An upstream registry ECR's pull-through cache supports (AWS::ECR::PullThroughCacheRule)."""

    host: str
    """The registry as image references name it."""
    upstream_url: str
    """The rule's UpstreamRegistryUrl."""
    kind: str
    """The rule's UpstreamRegistry."""
    needs_credential: bool
    """ECR caches it only with a Secrets Manager credential (CredentialArn)."""


UPSTREAM_REGISTRIES: Mapping[str, UpstreamRegistry] = {
    registry.host: registry
    for registry in (
        UpstreamRegistry(
            host="public.ecr.aws", upstream_url="public.ecr.aws", kind="ecr-public", needs_credential=False
        ),
        UpstreamRegistry(
            host="registry.k8s.io", upstream_url="registry.k8s.io", kind="k8s", needs_credential=False
        ),
        UpstreamRegistry(host="quay.io", upstream_url="quay.io", kind="quay", needs_credential=False),
        UpstreamRegistry(
            host="docker.io", upstream_url="registry-1.docker.io", kind="docker-hub", needs_credential=True
        ),
        UpstreamRegistry(
            host="ghcr.io", upstream_url="ghcr.io", kind="github-container-registry", needs_credential=True
        ),
    )
}
"""The registries the cache can serve, by host; the stack creates a rule for each it can (see above)."""


def cache_rule_prefix(host: str) -> str:
    """The ECR repository prefix of ``host``'s pull-through cache rule (at most 30 characters)."""
    if host not in UPSTREAM_REGISTRIES:
        raise ValueError(
            f"ECR's pull-through cache does not serve {host!r}; it serves {', '.join(UPSTREAM_REGISTRIES)}"
        )
    return f"{PULL_THROUGH_PREFIX}/{host}"


def _dns_suffix(region: str) -> str:
    return "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"


def _partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    return "aws-us-gov" if region.startswith("us-gov-") else "aws"


def ecr_registry(*, account: str, region: str) -> str:
    """The account's private registry in ``region``: ``<account>.dkr.ecr.<region>.amazonaws.com``."""
    return f"{account}.dkr.ecr.{region}.{_dns_suffix(region)}"


_ECR_PRIVATE = re.compile(r"\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com(\.cn)?")


def is_ecr_private_registry(host: str) -> bool:
    return _ECR_PRIVATE.fullmatch(host) is not None


def _upstream_path(host: str, path: str) -> str:
    # Docker Hub's official images live under library/; the cache needs the full path.
    return f"library/{path}" if host == "docker.io" and "/" not in path else path


def pull_through_image(upstream: str, *, account: str, region: str) -> str:
    """``upstream`` as the account's pull-through cache serves it (tag and digest kept).

    ValueError for a reference that is not pinned or whose registry the cache cannot serve.
    """
    host, path, tag, digest = split_image(upstream)
    cache_rule_prefix(host)  # refuses a registry without a rule
    reference = f"{ecr_registry(account=account, region=region)}/{PULL_THROUGH_PREFIX}/{host}/{_upstream_path(host, path)}"
    return reference + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


def pull_through_repository_arn(*, account: str, region: str) -> str:
    """The ARN pattern of every repository the cache creates: what nodes need registry pull (and
    ``ecr:BatchImportUpstreamImage``, ``ecr:CreateRepository`` for a first pull) on."""
    return f"arn:{_partition(region)}:ecr:{region}:{account}:repository/{PULL_THROUGH_PREFIX}/*"


def cached_repository_arn(image: str, *, account: str, region: str) -> str | None:
    """The ARN of the pull-through cache repository ``image`` is pulled from (``image`` as the cache
    serves it), or None for an image pulled from anywhere else."""
    host, path, _, _ = split_image(image)
    if host != ecr_registry(account=account, region=region) or not path.startswith(f"{PULL_THROUGH_PREFIX}/"):
        return None
    return f"arn:{_partition(region)}:ecr:{region}:{account}:repository/{path}"


_MIRROR = "mirror"


def mirror_prefix(cluster_name: str) -> str:
    """The repository prefix under which the stack of ``cluster_name`` keeps its copies of upstream images."""
    return f"{cluster_name}/{_MIRROR}"


def mirrored_image(upstream: str, *, account: str, region: str, prefix: str) -> str:
    """``upstream`` as copied into the account's repository ``<prefix>/<host>/<path>`` (tag and digest kept)."""
    host, path, tag, digest = split_image(upstream)
    reference = f"{ecr_registry(account=account, region=region)}/{prefix}/{host}/{_upstream_path(host, path)}"
    return reference + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


def ecr_repository_arn(image: str) -> str | None:
    """The ARN of the private ECR repository ``image`` is pulled from (any account and region), or
    None for an image of another registry: what a node role needs ``ecr:BatchGetImage`` on."""
    host, path, _, _ = split_image(image)
    if not is_ecr_private_registry(host):
        return None
    account, _, _, region = host.split(".")[:4]
    return f"arn:{_partition(region)}:ecr:{region}:{account}:repository/{path}"


def upstream_repository(image: str) -> str:
    """``host/path`` of the upstream repository ``image`` comes from, whether named upstream, through
    the cache (``<registry>/upstream/quay.io/coreos/etcd:v3`` -> ``quay.io/coreos/etcd``) or as the
    stack's copy (``<registry>/<cluster>/mirror/docker.io/volcanosh/vc-scheduler``)."""
    host, path, _, _ = split_image(image)
    if is_ecr_private_registry(host):
        inside = (
            path.removeprefix(f"{PULL_THROUGH_PREFIX}/")
            if path.startswith(f"{PULL_THROUGH_PREFIX}/")
            else None
        )
        if inside is None and f"/{_MIRROR}/" in path:
            inside = path.split(f"/{_MIRROR}/", 1)[1]
        if inside is not None:
            cached_host, _, cached_path = inside.partition("/")
            if cached_host in UPSTREAM_REGISTRIES and cached_path:
                return f"{cached_host}/{cached_path}"
    return f"{host}/{_upstream_path(host, path)}"


@dataclass(frozen=True, kw_only=True)
class ImageSource:
    """Where this cluster pulls an upstream image from: the cache for the registries it has rules for."""

    account: str = ""
    region: str = ""
    cached: frozenset[str] = frozenset()
    """Hosts with a pull-through cache rule; empty: every image comes from upstream directly."""
    mirrored: frozenset[str] = frozenset()
    """Hosts whose images the stack copies into the account at deploy (under ``mirror``)."""
    mirror: str = ""
    """The repository prefix of those copies (``mirror_prefix``)."""

    def __post_init__(self) -> None:
        unknown = sorted(self.cached - set(UPSTREAM_REGISTRIES))
        if unknown:
            raise ValueError(f"no pull-through cache rule is possible for {', '.join(unknown)}")
        if (self.cached or self.mirrored) and not (self.account and self.region):
            raise ValueError("a pull-through cache or a mirror needs the account and region of its registry")
        if self.mirrored & self.cached or (self.mirrored and not self.mirror):
            raise ValueError("a mirrored registry needs a mirror prefix and no cache rule")

    def resolve(self, upstream: str) -> str:
        """The reference the cluster pulls ``upstream`` by: with its published digest, if any, and
        through the cache (or the stack's copy) when this cluster has one for its registry."""
        upstream = with_published_digest(upstream)
        host = split_image(upstream)[0]
        if host in self.cached:
            return pull_through_image(upstream, account=self.account, region=self.region)
        if host in self.mirrored:
            return mirrored_image(upstream, account=self.account, region=self.region, prefix=self.mirror)
        return upstream

    def registry(self, host: str) -> str:
        """Where a chart that takes a registry value finds the images of ``host``."""
        if host in self.cached:
            return f"{ecr_registry(account=self.account, region=self.region)}/{PULL_THROUGH_PREFIX}/{host}"
        if host in self.mirrored:
            return f"{ecr_registry(account=self.account, region=self.region)}/{self.mirror}/{host}"
        return host


# Digests that upstream publishes for the tags pinned here (release notes, signed manifests, chart
# values), by upstream repository:tag. None of the pinned tags has one that can be read offline
# (see TAG_ONLY_IMAGES); an entry here makes every rendered reference of that tag carry the digest,
# and tests/test_supply_chain.py keeps it so.
IMAGE_DIGESTS: Mapping[str, str] = {}

TAG_ONLY_IMAGES: Mapping[str, str] = {
    "public.ecr.aws/neuron/neuron-device-plugin": (
        "the Neuron release notes, manifests (k8s-neuron-device-plugin.yml) and Helm chart values "
        "(aws-neuron/neuron-helm-charts) publish tags only"
    ),
    "public.ecr.aws/neuron/pytorch-training-neuronx": (
        "aws-neuron/deep-learning-containers lists each image by tag only, with no digest"
    ),
    "public.ecr.aws/docker/library/alpine": (
        "a Docker Official Image: the tag is rebuilt when its base changes, and docker-library/repo-info "
        "records digests only for docker.io and only of the current build, none for the ECR Public copy"
    ),
    "public.ecr.aws/docker/library/python": (
        "a Docker Official Image: the tag is rebuilt when its base changes, and docker-library/repo-info "
        "records digests only for docker.io and only of the current build, none for the ECR Public copy"
    ),
    "public.ecr.aws/aws-cli/aws-cli": (
        "AWS publishes the CLI's images on ECR Public by version tag; the release notes (aws/aws-cli "
        "CHANGELOG) name versions only, no image digests"
    ),
    "quay.io/coreos/etcd": (
        "etcd's release notes name the images by tag (gcr.io/etcd-development and quay.io) and publish "
        "checksums only for the release tarballs"
    ),
    "registry.k8s.io/autoscaling/cluster-autoscaler": (
        "the chart pins the tag only, and the registry's promotion manifest (kubernetes/k8s.io "
        "images/k8s-staging-autoscaling) readable offline ends at v1.28; its digests for the pinned "
        "v1.33-v1.36 releases could not be read"
    ),
    "docker.io/volcanosh/vc-controller-manager": (
        "the Volcano chart sets a tag only (basic.image_tag_version) and the release publishes no digests"
    ),
    "docker.io/volcanosh/vc-scheduler": (
        "the Volcano chart sets a tag only (basic.image_tag_version) and the release publishes no digests"
    ),
    "docker.io/volcanosh/vc-webhook-manager": (
        "the Volcano chart sets a tag only (basic.image_tag_version) and the release publishes no digests"
    ),
    "public.ecr.aws/neuron/neuron-dra-driver": (
        "Neuron's Helm chart values and the Neuron DRA documentation name the driver by tag only"
    ),
    "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/dranet": (
        "the eks-charts aws-dranet chart and the EKS docs publish the tag only, and the digest differs per "
        "regional registry"
    ),
    "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin": (
        "the eks-charts chart and the EKS docs publish the tag only, and the digest differs per regional registry"
    ),
}
"""Every image of the project's own defaults that stays pinned by tag, by upstream repository, and why.

The EFA plugin's entry stands for its image in every region (the repository path is the same)."""

DIRECT_PULLS: Mapping[str, str] = {
    "eks/dranet": (
        "EKS's own regional ECR registry (k8s_charts/devices/efa_dra_driver.py), as for the EFA device plugin: caching "
        "it would take an ECR-to-ECR rule with a role that EKS's registry would have to trust"
    ),
    "eks/aws-efa-k8s-device-plugin": (
        "EKS's own regional ECR registry (k8s_charts/devices/efa_device_plugin.py), as for EKS's add-ons: caching it "
        "would take an ECR-to-ECR rule with a role that EKS's registry would have to trust"
    ),
    "docker.io/volcanosh/": (
        "Docker Hub, only with ecr.pull_through_cache: false: then every image comes from upstream, and "
        "Volcano's anonymously within Docker Hub's limit for unauthenticated pulls (100 per 6 hours per "
        "IPv4 address or IPv6 /64 subnet, docs/supply-chain.md); otherwise the cache (with a Docker Hub "
        "credential) or the stack's copy in the account serves them"
    ),
}
"""Images the cluster may pull from elsewhere than the account's registry, by repository prefix
(path prefix for ECR registries, whose account differs per region), and why."""


def with_published_digest(image: str) -> str:
    """``image`` with the digest IMAGE_DIGESTS records for its tag (unchanged without one)."""
    _, _, tag, digest = split_image(image)
    published = IMAGE_DIGESTS.get(f"{upstream_repository(image)}:{tag}")
    if digest is not None or published is None:
        return image
    return f"{image}@{published}"


def digest_exception_reason(image: str) -> str | None:
    """Why ``image`` carries no digest (for its policy exception), or None when it does."""
    if split_image(image)[3] is not None:
        return None
    repository = upstream_repository(image)
    host, _, path = repository.partition("/")
    key = (
        repository
        if not is_ecr_private_registry(host)
        else next((known for known in TAG_ONLY_IMAGES if known.endswith(f"/{path}")), repository)
    )
    known = TAG_ONLY_IMAGES.get(key)
    if known is not None:
        return f"pinned by tag: {known}"
    return "pinned by tag as configured: give the image as repository:tag@sha256:digest to pin its content"
