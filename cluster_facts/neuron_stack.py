"""The Neuron stacks this cluster runs, side by side: which SDK release each training image is, the
training path it supports, the driver it needs, the instance types each path runs on. Which AMI
release brings which Neuron driver is cluster_facts/ami_releases.py's.

Two stacks (``STACKS``), one per training path:

- ``xla``: the seed's path. PyTorch/XLA (torch-neuronx 2.9, ``neuron_parallel_compile``, the BERT
  preset), on trn1, trn1n and trn2, with SDK releases up to 2.29.x. Neuron 2.30 ended it.
- ``native``: TorchNeuron, native PyTorch on a ``neuron`` device (eager and ``torch.compile``, DDP,
  FSDP2, DTensor), SDK 2.33.x, on trn2, trn2u and trn3 (public beta in 2.33.0).

Checked at synth (config/consistency.py): a node group serves one stack; a run's image, when its tag
names its SDK (``sdk<version>``, as Neuron's own images and docker/README.md's tags do), must be a
release of its node group's stack whose driver the group's AMI brings; the group's instance type must
be one its stack runs on, and its AMI's driver at least the stack's oldest release's. The node groups
pin their AMI release (``releaseVersion``), so a scale-up next month boots the same driver as today's.

Sources (read 2026-11-28; docs/neuron.md says what to do when Neuron moves on):

- Neuron driver of each EKS AMI release: cluster_facts/ami_releases.py (moved there with the AMI
  releases' containerd and known faults).
- Neuron SDK releases and their driver: aws-neuron/aws-neuron-sdk src/helperscripts/n2-manifest.json
  (the package list of each release up to 2.32.0, which release-notes/prev/content.rst prints),
  packages ``aws-neuronx-dkms`` and ``aws-neuronx-k8-plugin``; for 2.33.0, the release artifacts page
  (release-notes/releasecontent, "Neuron 2.33.0 (10/19/2026)": ``aws-neuronx-dkms-2.31.7.0``, no
  Kubernetes plugin package) and the component index (Neuron Driver 2.33.0: 2.31.7.0).
- Driver compatibility: aws-neuron-sdk neuron-runtime/nrt-troubleshoot.rst ("The driver remains
  backwards compatible with older versions of Neuron Runtime, but newer versions of the Runtime
  might rely on the functionality that is only provided by a newer driver"): a host driver at least
  the SDK release's own is supported. release-notes/components/runtime.rst (2.30.0): "Neuron Runtime
  Library 2.32 is not backward-compatible with Neuron Driver 2.26 or earlier".
- Training images: aws-neuron/deep-learning-containers README.md (pytorch-training-neuronx, one row
  per SDK release up to 2.30.0); release-notes/components/containers.rst: "Starting with Neuron SDK
  2.31.0, the pytorch-training-neuronx DLC is no longer published". Neuron 2.33's DLCs are Ubuntu
  26.04 and Python 3.14 only (setup/pytorch/update-dlc.rst of 2.33.0: "Starting with Neuron 2.33.0,
  Neuron DLC images are published on Ubuntu 26.04 only"). Its setup page lists a "PyTorch Training
  (TorchNeuron)" DLC, but no source readable here gives that image's repository and tag (the DLC
  README stops at 2.32.0; the only 2.33 tag in the docs is the vLLM inference image's
  ``pytorch-inference-vllm-neuronx:0.29.0.1.2.0-neuronx-py314-sdk2.33.0-ubuntu26.04``), so the native
  stack names no default training image: a native run names its own (docs/neuron.md).
- The training paths: about-neuron/announcements/neuron2.x/announce-no-support-pytorch-xla-training.rst:
  "Starting with Neuron Release 2.30.0, PyTorch/XLA is no longer supported for training workloads on
  Trainium. PyTorch 2.9 was the last version based on the PyTorch/XLA backend for training." (native
  PyTorch was then a private beta); setup/pytorch/update-manual.rst of 2.32.0: "torch-neuronx
  (PyTorch/XLA) is not included in Neuron 2.32.0"; release-notes/components/torchneuron.rst (2.33.0):
  "Neuron 2.33.0 introduces the native torch-neuronx backend as a public beta ... to run them on
  Trainium2 or Trainium3" (torch-neuronx 2.13.3.0 and 2.14.3.0). The sdk2.30.0 training image is
  still published (the last one); its SDK no longer supports the training it would run, so the
  newest xla release is 2.29.1 (two sources disagree on what "last" means; the supported one is the
  safer). 2.30, 2.31 and 2.32 support neither path.
- Instance types of each path: the xla path's releases list trn1, trn1n and trn2 among their
  instance types (the DLC README's "Supported EC2 Instance Types", which adds trn3 and inf2 from
  2.27.1; no trn3 type is in the catalog: cluster_facts/instance_catalog.py says why); the native path: TorchNeuron "Supported instances: Trn2 and Trn3"
  (torchneuron.rst, 2.33.0); trn2u.48xlarge is a Trn2 instance (about-neuron/arch/neuron-hardware/
  trn2-arch.rst: "trn2.48xlarge / trn2u.48xlarge", 16 Trainium2 chips each), the node of a Trn2
  UltraServer, whose scheduling needs the Neuron device plugin 2.30.0.0 or later (deploy/eks/
  ultraserver.rst), which no xla release ships: trn2u is the native stack's only.
- Device plugin: see ``DEVICE_PLUGIN_VERSION`` below (the image tag, with the sources that name it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from cluster_facts.images import split_image
from cluster_facts.versions import version_key

__all__ = [
    "DEVICE_PLUGIN_IMAGE",
    "DEVICE_PLUGIN_VERSION",
    "NEURON_RELEASES",
    "STACKS",
    "TRAINING_IMAGE",
    "NeuronRelease",
    "NeuronStack",
    "StackName",
    "driver_problem",
    "image_neuron_release",
    "image_stack",
    "release_problem",
    "stack_driver",
    "stack_releases",
    "stacks_of_family",
]

StackName = Literal["xla", "native"]


@dataclass(frozen=True, kw_only=True)
class NeuronStack:
    """One training path, the SDK releases that support it and the instance families it runs on."""

    name: StackName
    title: str
    instance_families: tuple[str, ...]
    """``TrainiumInstanceType.family`` values (cluster_facts/instance_catalog.py)."""


STACKS: Mapping[str, NeuronStack] = {
    stack.name: stack
    for stack in (
        NeuronStack(
            name="xla",
            title="PyTorch/XLA (torch-neuronx 2.9, neuron_parallel_compile; SDK up to 2.29.x)",
            instance_families=("trn1", "trn1n", "trn2"),
        ),
        NeuronStack(
            name="native",
            title="TorchNeuron (native PyTorch on the neuron device; SDK 2.33.x, public beta)",
            instance_families=("trn2", "trn2u", "trn3"),
        ),
    )
}
DEFAULT_STACK: StackName = "xla"
"""A node group's stack when neither its configuration nor its instance type nor its runs say: the
seed's path, which every configuration written before the native stack means."""


@dataclass(frozen=True, kw_only=True)
class NeuronRelease:
    """One Neuron SDK release, as the table knows it."""

    version: str
    driver: str
    """``aws-neuronx-dkms`` of the release: the oldest host driver this table accepts for it."""
    device_plugin: str | None
    """``aws-neuronx-k8-plugin`` of the release (None: the manifest names none)."""
    training_images: tuple[str, ...]
    """The training images Neuron publishes for it whose exact name a source gives (may be none)."""
    training_path: StackName | None
    """The stack whose training the release supports; None: neither (2.30 to 2.32)."""

    @property
    def pytorch_xla_training(self) -> bool:
        """Whether the release supports PyTorch/XLA training (the path of the BERT script)."""
        return self.training_path == "xla"


_IMAGE = "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk{}-ubuntu24.04"


def _release(
    version: str, driver: str, path: StackName | None, *images: str, plugin: str | None = None
) -> NeuronRelease:
    return NeuronRelease(
        version=version, driver=driver, device_plugin=plugin, training_images=images, training_path=path
    )


NEURON_RELEASES: Mapping[str, NeuronRelease] = {
    release.version: release
    for release in (
        _release("2.27.1", "2.25.4.0", "xla", _IMAGE.format("2.27.1"), plugin="2.29.16.0"),
        _release("2.29.1", "2.27.4.0", "xla", _IMAGE.format("2.29.1"), plugin="2.29.147.0"),
        # PyTorch/XLA training ended; the image is still published (the last one).
        _release("2.30.0", "2.28.0.0", None, _IMAGE.format("2.30.0")),
        # No training image any more; native PyTorch a private beta.
        _release("2.31.0", "2.29.0.0", None),
        _release("2.31.1", "2.29.0.0", None),
        # torch-neuronx (PyTorch/XLA) not included.
        _release("2.32.0", "2.30.2.0", None),
        # TorchNeuron public beta; its training DLC's tag is not in a source readable here.
        _release("2.33.0", "2.31.7.0", "native"),
    )
}
"""Releases the table knows; a run may use those with a ``training_path``."""

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
# paths (``/opt/aws`` read-only) of k8s_charts/devices/neuron_device_plugin.py are those of that chart
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


def stack_releases(stack: str) -> tuple[str, ...]:
    """The releases that support ``stack``'s training, oldest first."""
    return tuple(sorted((v for v, r in NEURON_RELEASES.items() if r.training_path == stack), key=version_key))


def stacks_of_family(family: str) -> tuple[str, ...]:
    """The stacks that run on an instance family, in ``STACKS`` order."""
    return tuple(name for name, stack in STACKS.items() if family in stack.instance_families)


def stack_driver(stack: str) -> str:
    """The oldest host driver on which some release of ``stack`` runs: a node group of the stack
    must boot at least this one."""
    return min((NEURON_RELEASES[v].driver for v in stack_releases(stack)), key=version_key)


def _allowed() -> str:
    return "; ".join(f"{', '.join(stack_releases(name))} ({name})" for name in STACKS)


def image_stack(image: str) -> StackName | None:
    """The stack of an image whose tag names a known release with a training path, else None."""
    sdk = image_neuron_release(image)
    release = NEURON_RELEASES.get(sdk) if sdk is not None else None
    return release.training_path if release is not None else None


def release_problem(image: str) -> str | None:
    """Why ``image``'s Neuron SDK can train on no stack, in one line, or None (also when its tag
    names no SDK: a project image may be named freely; name the SDK in its tag to have it checked)."""
    sdk = image_neuron_release(image)
    if sdk is None:
        return None
    release = NEURON_RELEASES.get(sdk)
    if release is None:
        return f"{image!r} is Neuron SDK {sdk}, which this cluster's Neuron table does not know; allowed: {_allowed()}"
    if release.training_path is None:
        return (
            f"{image!r} is Neuron SDK {sdk}, which supports neither training path (PyTorch/XLA training "
            f"ended in Neuron 2.30; TorchNeuron begins in 2.33); allowed: {_allowed()}"
        )
    return None


def driver_problem(image: str, *, driver: str) -> str | None:
    """Why ``image`` may not run on nodes whose Neuron driver is ``driver``: the start of one line
    (the caller names the AMI releases that would do), or None."""
    sdk = image_neuron_release(image)
    release = NEURON_RELEASES.get(sdk) if sdk is not None else None
    if release is None or version_key(driver) >= version_key(release.driver):
        return None
    return f"{image!r} is Neuron SDK {sdk}, which needs Neuron driver {release.driver} or later"
