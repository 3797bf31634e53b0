"""Every image a deploy of the configuration makes the nodes pull, where they pull it, and why it is there.

The same images as the rendered plan's (``KubernetesLayerPlan.images()``, applied or not: a rendered
run or fabric check may be applied by hand) plus the training image the TorchX component submits by
default; tests/preflight/test_image_inventory.py keeps the two equal for the shipped configurations
and their variants. Built from the configuration and the pins in cluster_facts (preflight may import
nothing else), each image with the configuration key or pin it comes from, so a missing one is
reported against what to change.

Where the bytes come from decides which registry preflight asks (``Source``):

- through the account's pull-through cache: the cache fetches the image from its upstream registry
  on the first pull, so the upstream is asked (``UPSTREAM``);
- from the stack's copy in the account (Docker Hub's images without a Docker Hub credential): the
  deploy copies it from upstream (constructs_trn/image_mirror.py), so the upstream is asked too;
- the account's own ECR registry (a run's image in the stack's repository): ``ecr:DescribeImages``
  in the account (``OWN_ECR``);
- another account's ECR registry (EKS's registry for the EFA device plugin): ``ecr:BatchGetImage``,
  the call a pull makes, in that account (``OTHER_ECR``);
- any other registry, pulled directly: that registry (``UPSTREAM``).

Pure: configuration in, a tuple of ``PulledImage`` out.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from cluster_facts.image_pins import (
    EFA_DEVICE_PLUGIN_TAG,
    ETCD_IMAGE,
    GANG_WATCHDOG_IMAGE,
    PLATFORM_JOB_IMAGE,
    efa_plugin_image,
)
from cluster_facts.image_sources import (
    PULL_THROUGH_PREFIX,
    ImageSource,
    ecr_registry,
    is_ecr_private_registry,
    mirror_prefix,
    upstream_repository,
    with_published_digest,
)
from cluster_facts.images import split_image
from cluster_facts.neuron_stack import DEVICE_PLUGIN_IMAGE, TRAINING_IMAGE
from cluster_facts.versions import (
    CLUSTER_AUTOSCALER_IMAGE_REPOSITORY,
    CLUSTER_AUTOSCALER_IMAGE_TAGS,
    VOLCANO_IMAGE_NAMES,
    VOLCANO_IMAGE_REGISTRY,
    VOLCANO_IMAGE_TAG,
)
from config.model import StackConfig

__all__ = ["Origin", "PulledImage", "Source", "Via", "pulled_images"]

Via = Literal["cache", "copy", "direct"]


class Source(Enum):
    """Which API answers whether the image exists where its bytes come from."""

    UPSTREAM = "upstream"
    """A registry's own OCI distribution API (the one a node or the pull-through cache pulls through)."""
    OWN_ECR = "own-ecr"
    """This account's ECR registry: ``ecr:DescribeImages``."""
    OTHER_ECR = "other-ecr"
    """Another account's ECR registry: ``ecr:BatchGetImage`` (what a pull calls)."""


@dataclass(frozen=True)
class Origin:
    """Why the stack pulls an image: a configuration key, or a pin of the project."""

    what: str
    """``runs[1].image``, or the pin's name and module: ``DEVICE_PLUGIN_VERSION (cluster_facts/neuron_stack.py)``."""
    used_by: str
    """What runs it: ``the Neuron device plugin``."""
    configured: bool = False
    """A configuration key (the fix is in the file), not a pin (the fix is in the project)."""


@dataclass(frozen=True)
class PulledImage:
    reference: str
    """What the nodes pull (the cache's reference when it comes through the cache)."""
    upstream: str
    """The image as pinned (with its published digest, if any): what the source is asked about."""
    source: Source
    registry: str
    """The registry asked: the upstream host, or the ECR registry's host."""
    origins: tuple[Origin, ...]

    via: Via = "direct"
    """Through the pull-through cache, from the stack's copy (made at deploy), or from ``registry`` itself."""

    @property
    def through_cache(self) -> bool:
        return self.via == "cache"


def _pins(config: StackConfig) -> Iterator[tuple[str, Origin]]:
    """The images of the platform, each with the pin it comes from."""
    yield (
        DEVICE_PLUGIN_IMAGE,
        Origin("DEVICE_PLUGIN_VERSION (cluster_facts/neuron_stack.py)", "the Neuron device plugin"),
    )
    yield (
        efa_plugin_image(config.region),
        Origin(
            f"EFA_DEVICE_PLUGIN_TAG {EFA_DEVICE_PLUGIN_TAG} (cluster_facts/image_pins.py), in EKS's registry "
            f"of {config.region}",
            "the EFA device plugin",
        ),
    )
    for name in VOLCANO_IMAGE_NAMES:
        yield (
            f"{VOLCANO_IMAGE_REGISTRY}/{name}:{VOLCANO_IMAGE_TAG}",
            Origin("VOLCANO_IMAGE_TAG (cluster_facts/versions.py)", "Volcano"),
        )
    version = config.cluster.kubernetes_version
    yield (
        f"{CLUSTER_AUTOSCALER_IMAGE_REPOSITORY}:{CLUSTER_AUTOSCALER_IMAGE_TAGS[version]}",
        Origin(
            f"CLUSTER_AUTOSCALER_IMAGE_TAGS[{version!r}] (cluster_facts/versions.py), for "
            "cluster.kubernetes_version",
            "the cluster autoscaler",
        ),
    )
    yield ETCD_IMAGE, Origin("ETCD_IMAGE (cluster_facts/image_pins.py)", "each team's rendezvous etcd")
    yield (
        PLATFORM_JOB_IMAGE,
        Origin("PLATFORM_JOB_IMAGE (cluster_facts/image_pins.py)", "the data staging and FSx layout Jobs"),
    )
    # The platform's Python image: every team's etcd members start with an init container on it.
    python_users = "the etcd members' init container" + (
        ", the gang watchdog" if config.autoscaler.gang_watchdog else ""
    )
    yield GANG_WATCHDOG_IMAGE, Origin("GANG_WATCHDOG_IMAGE (cluster_facts/image_pins.py)", python_users)
    yield (
        TRAINING_IMAGE,
        Origin(
            "TRAINING_IMAGE (cluster_facts/neuron_stack.py)",
            "TensorBoard, the node check, the fabric checks and the TorchX component's default",
        ),
    )


def _runs(config: StackConfig) -> Iterator[tuple[str, Origin]]:
    for index, run in enumerate(config.runs):
        if "image" in run.model_fields_set:
            yield run.image, Origin(f"runs[{index}].image", f"run {run.name}", configured=True)
        else:
            yield (
                run.image,
                Origin(
                    "TRAINING_IMAGE (cluster_facts/neuron_stack.py), the default of runs[].image",
                    f"run {run.name}",
                ),
            )


def _source(image: str, *, account: str, region: str, mirror: str) -> tuple[Source, str, Via]:
    host, path, _, _ = split_image(image)
    own = ecr_registry(account=account, region=region)
    # The cache's reference, or the stack's copy: the upstream is where the bytes come from.
    if host == own and path.startswith(f"{PULL_THROUGH_PREFIX}/"):
        return Source.UPSTREAM, upstream_repository(image).partition("/")[0], "cache"
    if host == own and path.startswith(f"{mirror}/"):
        return Source.UPSTREAM, upstream_repository(image).partition("/")[0], "copy"
    if host == own:
        return Source.OWN_ECR, host, "direct"
    if is_ecr_private_registry(host):
        return Source.OTHER_ECR, host, "direct"
    return Source.UPSTREAM, host, "direct"


def pulled_images(config: StackConfig) -> tuple[PulledImage, ...]:
    """Each distinct image the nodes pull, once, with every origin; in the order first named."""
    # As cluster_plan/kubernetes_values.py's image_source (test_image_inventory.py keeps the two equal).
    mirror = mirror_prefix(config.name)
    images = ImageSource(
        account=config.account,
        region=config.region,
        cached=config.ecr.cached_registries,
        mirrored=config.ecr.mirrored_registries,
        mirror=mirror,
    )
    found: dict[str, tuple[str, list[Origin]]] = {}
    for upstream, origin in [*_pins(config), *_runs(config)]:
        # Volcano's chart composes <registry>/<name>:<tag> from the cache's (or Docker Hub's) registry.
        reference = images.resolve(upstream)
        _, origins = found.setdefault(reference, (with_published_digest(upstream), []))
        if origin not in origins:
            origins.append(origin)
    pulled = []
    for reference, (upstream, origins) in found.items():
        source, registry, via = _source(
            reference, account=config.account, region=config.region, mirror=mirror
        )
        pulled.append(
            PulledImage(
                reference=reference,
                upstream=upstream,
                source=source,
                registry=registry,
                origins=tuple(origins),
                via=via,
            )
        )
    return tuple(pulled)
