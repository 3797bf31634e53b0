"""The one Neuron stack this cluster supports: which AMI release brings which Neuron driver, which
Neuron SDK release each training image is, what driver it needs, and the device plugin of that SDK.

Checked at synth (config/consistency.py): a node group's AMI release must be in the table for the
cluster's Kubernetes version, and a run's image, when its tag names its SDK (``sdk<version>``, as
Neuron's own images and docker/README.md's tags do), must be an SDK release that supports this
training path and whose driver the node group's AMI brings. The node groups pin their AMI release
(``releaseVersion``), so a scale-up next month boots the same driver as today's.

Sources (read 2026-11-25; docs/neuron.md says what to do when Neuron moves on):

- Neuron driver of each EKS AMI release: cluster_facts/ami_releases.py (moved there with the AMI
  releases' containerd and known faults).
- Neuron SDK releases and their driver: aws-neuron/aws-neuron-sdk src/helperscripts/n2-manifest.json
  (the package list of each release that release-notes/prev/content.rst prints), packages
  ``aws-neuronx-dkms`` and ``aws-neuronx-k8-plugin``.
- Driver compatibility: aws-neuron-sdk neuron-runtime/nrt-troubleshoot.rst ("The driver remains
  backwards compatible with older versions of Neuron Runtime, but newer versions of the Runtime
  might rely on the functionality that is only provided by a newer driver"): a host driver at least
  the SDK release's own is supported. release-notes/components/runtime.rst (2.30.0): "Neuron Runtime
  Library 2.32 is not backward-compatible with Neuron Driver 2.26 or earlier".
- Training images: aws-neuron/deep-learning-containers README.md (pytorch-training-neuronx, one row
  per SDK release); release-notes/components/containers.rst: "Starting with Neuron SDK 2.31.0, the
  pytorch-training-neuronx DLC is no longer published".
- The training path: about-neuron/announcements/neuron2.x/announce-no-support-pytorch-xla-training.rst:
  "Starting with Neuron Release 2.30.0, PyTorch/XLA is no longer supported for training workloads on
  Trainium. PyTorch 2.9 was the last version based on the PyTorch/XLA backend for training." The
  sdk2.30.0 training image is still published (the last one); its SDK no longer supports the
  training it would run, so the newest supported release is 2.29.1 (two sources disagree on what
  "last" means; the supported one is the safer).
- Device plugin: see ``DEVICE_PLUGIN_VERSION`` below (the image tag, with the sources that name it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from cluster_facts.ami_releases import AMI_RELEASES
from cluster_facts.images import split_image
from cluster_facts.versions import version_key

__all__ = [
    "DEVICE_PLUGIN_IMAGE",
    "DEVICE_PLUGIN_VERSION",
    "NEURON_RELEASES",
    "TRAINING_IMAGE",
    "NeuronRelease",
    "image_neuron_release",
    "stack_problem",
]


@dataclass(frozen=True, kw_only=True)
class NeuronRelease:
    """One Neuron SDK release, as the table knows it."""

    version: str
    driver: str
    """``aws-neuronx-dkms`` of the release: the oldest host driver this table accepts for it."""
    device_plugin: str | None
    """``aws-neuronx-k8-plugin`` of the release (None: the manifest names none)."""
    training_images: tuple[str, ...]
    pytorch_xla_training: bool
    """Whether the release supports PyTorch/XLA training (the path of the BERT script and torchrun runs)."""


_IMAGE = "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk{}-ubuntu24.04"

NEURON_RELEASES: Mapping[str, NeuronRelease] = {
    release.version: release
    for release in (
        NeuronRelease(
            version="2.27.1",
            driver="2.25.4.0",
            device_plugin="2.29.16.0",
            training_images=(_IMAGE.format("2.27.1"),),
            pytorch_xla_training=True,
        ),
        NeuronRelease(
            version="2.29.1",
            driver="2.27.4.0",
            device_plugin="2.29.147.0",
            training_images=(_IMAGE.format("2.29.1"),),
            pytorch_xla_training=True,
        ),
        NeuronRelease(
            version="2.30.0",
            driver="2.28.0.0",
            device_plugin=None,
            training_images=(_IMAGE.format("2.30.0"),),
            pytorch_xla_training=False,
        ),
    )
}
"""Releases the table knows; a run may use those with ``pytorch_xla_training``."""

TRAINING_IMAGE = _IMAGE.format("2.29.1")
"""The cluster's training image (the BERT preset's, the TorchX component's default, TensorBoard's):
the newest release that supports PyTorch/XLA training. docker/Dockerfile builds FROM it too."""

# The device plugin image: a tag that a source names as an image, in the plugin line SDK 2.29 ships.
# Read 2026-11-28. n2-manifest.json names the package ``aws-neuronx-k8-plugin`` 2.29.147.0 for SDK
# 2.29.0 and 2.29.1, but no manifest, chart or page readable here names an image of that tag. Neuron's
# Helm chart names the image tags of the same 2.29 plugin line: its README's Configuration table,
# ``devicePlugin.image.tag``, gives 2.29.148.0 and then, at chart 1.7.0 (aws-neuron/neuron-helm-charts
# commit 2f5072d7, charts/neuron-helm-chart/README.md and Chart.yaml), 2.29.149.0 for
# ``public.ecr.aws/neuron/neuron-device-plugin``. The chart writes those values with its
# update-image-tags.sh from the registry's own tag list (public.ecr.aws/v2/neuron/neuron-device-plugin
# /tags/list), so the tag existed in ECR Public when the chart named it. Chart 1.9.0 (released
# 2026-07-10, Neuron SDK 2.31.0) moved on to 2.31.0.0. The RBAC (``nodes/proxy`` get, list) and host
# paths (``/opt/aws`` read-only) of k8s_charts/neuron_device_plugin.py are those of that chart
# generation's templates/device-plugin/ and values.yaml. Known wrong: 2.29.149.0 is a later build
# than SDK 2.29's own package (2.29.147.0) and no Neuron release note ties it to an SDK release; it is
# pinned by tag (no source publishes a digest); the chart's date of 1.7.0 could not be read (between
# SDK 2.29.0, 2026-04-09, and chart 1.9.0). ``make preflight`` asks the registry that the tag exists
# (preflight/image_checks.py).
DEVICE_PLUGIN_VERSION = "2.29.149.0"
DEVICE_PLUGIN_IMAGE = f"public.ecr.aws/neuron/neuron-device-plugin:{DEVICE_PLUGIN_VERSION}"

_SDK_IN_TAG = re.compile(r"(?:^|[^0-9a-z])sdk(\d+\.\d+\.\d+)(?:[^0-9]|$)")


def image_neuron_release(image: str) -> str | None:
    """The Neuron SDK release an image's tag names (``...-sdk2.29.1-...``), or None."""
    tag = split_image(image)[2] or ""
    match = _SDK_IN_TAG.search(tag)
    return match.group(1) if match else None


def stack_problem(*, image: str, ami_release: str) -> str | None:
    """Why ``image`` may not run on nodes of ``ami_release``, in one line, or None.

    An image whose tag names no SDK release is not judged (a project image may be named freely; name
    the SDK in its tag to have it checked)."""
    sdk = image_neuron_release(image)
    if sdk is None:
        return None
    supported = sorted((v for v, r in NEURON_RELEASES.items() if r.pytorch_xla_training), key=version_key)
    release = NEURON_RELEASES.get(sdk)
    if release is None:
        return (
            f"{image!r} is Neuron SDK {sdk}, which this cluster's Neuron table does not know; "
            f"allowed: {', '.join(supported)}"
        )
    if not release.pytorch_xla_training:
        return (
            f"{image!r} is Neuron SDK {sdk}, which no longer supports PyTorch/XLA training (Neuron 2.30 "
            f"announcement); allowed: {', '.join(supported)}"
        )
    ami = AMI_RELEASES[ami_release]
    if version_key(ami.driver) < version_key(release.driver):
        newer = sorted(
            (
                r.release_version
                for r in AMI_RELEASES.values()
                if r.kubernetes_version == ami.kubernetes_version
                and version_key(r.driver) >= version_key(release.driver)
                and not r.faults  # never suggest a release synth refuses (cluster_facts/ami_releases.py)
            ),
            key=lambda version: (version_key(version), version),
        )
        return (
            f"{image!r} is Neuron SDK {sdk}, which needs Neuron driver {release.driver} or later; AMI release "
            f"{ami_release} brings {ami.driver}: use AMI release {', '.join(newer) or '(none known)'}"
        )
    return None
