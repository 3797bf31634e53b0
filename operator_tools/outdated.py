"""``make outdated CONFIG=<file>``: every pin of a configuration with what the project knows about it.

    python -m operator_tools.outdated --config config/default.yaml

Offline, from the tables in cluster_facts/ and the rendered Kubernetes plan: the Kubernetes version
and its EKS support dates, each node group's AMI release with its driver, containerd and known
faults, the Neuron SDK of each run's image and whether it still supports its training path, the
device plugin, the kubectl layer (its kubectl and helm), the cluster autoscaler, the EKS add-ons,
the charts and every image the cluster pulls; each with the newer versions the tables know. A row
marked ``!`` has a known problem (support ending or ended, a known fault, a path no longer
supported). What the tables cannot know (a newer EKS version, AMI release or image tag published
since) is for ``make preflight`` to ask AWS (docs/upgrades.md). Exit 0; bad configuration: one line
per problem on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import re
import sys
import tarfile
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TextIO

from cluster_facts.ami_releases import AMI_RELEASES, DEFAULT_AMI_RELEASES, newest_release
from cluster_facts.image_sources import digest_exception_reason, upstream_repository
from cluster_facts.kubernetes_plan import HelmRelease, KubernetesLayerPlan
from cluster_facts.kubernetes_versions import EKS_VERSIONS, support_notice, synth_date
from cluster_facts.neuron_stack import (
    DEVICE_PLUGIN_VERSION,
    NEURON_RELEASES,
    NeuronRelease,
    image_neuron_release,
)
from cluster_facts.node_startup import FEATURES_TURNED_ON
from cluster_facts.versions import ADDON_NAMES, CLUSTER_AUTOSCALER_IMAGE_TAGS, KUBECTL_LAYERS, version_key
from cluster_plan.kubernetes_values import review_plan
from config import DEFAULT_CONFIG, ConfigError, StackConfig, load_config

__all__ = ["Pin", "main", "pins", "render"]


@dataclass(frozen=True)
class Pin:
    name: str
    pinned: str
    known: str
    """What the project knows about the pinned version (dates, facts, problems)."""
    newer: str = "-"
    """Newer versions the offline tables know."""
    attention: bool = False
    """A known problem with the pin."""


def kubernetes_pin(config: StackConfig, today: date) -> Pin:
    minor = config.cluster.kubernetes_version
    version = EKS_VERSIONS[minor]
    newer = [m for m in EKS_VERSIONS if version_key(m) > version_key(minor)]
    notice = support_notice(minor, today)
    known = (
        f"EKS release {version.eks_release}; standard support until {version.end_of_standard_support} "
        f"({(version.end_of_standard_support - today).days} days), extended until "
        f"{version.end_of_extended_support} ({version.source})"
    )
    return Pin(
        "kubernetes",
        minor,
        f"{known}. {notice}" if notice else known,
        ", ".join(newer) or "none known (preflight asks EKS)",
        attention=notice is not None,
    )


def ami_pins(config: StackConfig) -> list[Pin]:
    minor = config.cluster.kubernetes_version
    result = []
    for group in config.trainium.node_groups:
        version = group.ami_release or DEFAULT_AMI_RELEASES[minor]
        release = AMI_RELEASES.get(version)
        newest = newest_release(minor, features=FEATURES_TURNED_ON)
        later = (
            newest.release_version
            if newest and release and newest.release_date > release.release_date
            else "-"
        )
        if release is None:
            facts = group.ami_facts
            declared = f"driver {facts.neuron_driver}, containerd {facts.containerd}" if facts else "no facts"
            known = f"not in the table: {declared}, as declared under ami_facts"
            result.append(Pin(f"ami {group.name}", version, known, later, attention=True))
            continue
        faults = "; ".join(
            f"known fault with {f.feature}: {f.what} (fixed in {f.fixed_in})" for f in release.faults
        )
        known = (
            f"Neuron driver {release.driver}, containerd {release.containerd}; {faults or 'no known fault'}"
        )
        result.append(Pin(f"ami {group.name}", version, known, later, attention=bool(release.faults)))
    return result


def _training_path(release: NeuronRelease) -> str:
    if release.training_path is None:
        return "trains on neither stack"
    return f"trains on the {release.training_path} stack"


def neuron_pins(config: StackConfig) -> list[Pin]:
    """The Neuron SDK of each distinct run image that names one, and the device plugin."""
    result = []
    for sdk in sorted({s for run in config.runs if (s := image_neuron_release(run.image))}, key=version_key):
        release = NEURON_RELEASES.get(sdk)
        newer = ", ".join(
            f"{v} ({_training_path(NEURON_RELEASES[v])})"
            for v in sorted(NEURON_RELEASES, key=version_key)
            if version_key(v) > version_key(sdk)
        )
        if release is None:
            result.append(
                Pin(f"neuron sdk {sdk}", sdk, "not in the Neuron table", newer or "-", attention=True)
            )
            continue
        known = f"{_training_path(release)}; needs Neuron driver {release.driver} or later"
        result.append(
            Pin(f"neuron sdk {sdk}", sdk, known, newer or "-", attention=release.training_path is None)
        )
    result.append(
        Pin("neuron device plugin", DEVICE_PLUGIN_VERSION, "the cluster's Neuron SDK release's own")
    )
    return result


def _layer_tools(minor: str) -> str:
    """The kubectl and helm releases the layer's zip holds (its Dockerfile's ARGs)."""
    module_name, _ = KUBECTL_LAYERS[minor]
    package = Path(importlib.import_module(module_name).__file__ or "").parent
    (bundle,) = (package / "_jsii").glob("*.jsii.tgz")
    with tarfile.open(bundle) as archive:
        member = archive.extractfile("package/layer/Dockerfile")
        dockerfile = member.read().decode() if member is not None else ""
    found = dict(re.findall(r"^ARG (KUBECTL_VERSION|HELM_VERSION)=(\S+)$", dockerfile, re.MULTILINE))
    return f"kubectl {found.get('KUBECTL_VERSION', '?')}, helm {found.get('HELM_VERSION', '?')}"


def platform_pins(config: StackConfig) -> list[Pin]:
    minor = config.cluster.kubernetes_version
    module_name, _ = KUBECTL_LAYERS[minor]
    # aws_cdk.lambda_layer_kubectl_v36 is the module of the distribution aws-cdk.lambda-layer-kubectl-v36.
    package = "aws-cdk." + module_name.split(".", 1)[1].replace("_", "-")
    result = [
        Pin(
            "kubectl layer",
            f"{package} {importlib.metadata.version(package)}",
            f"{_layer_tools(minor)} (the kubectl handler's; the test tier builds the same)",
        ),
        Pin(
            "cluster autoscaler",
            CLUSTER_AUTOSCALER_IMAGE_TAGS[minor],
            f"the newest {minor} patch release the table knows (one release per Kubernetes minor)",
        ),
    ]
    for name in ADDON_NAMES:
        pinned = config.cluster.addon_versions.get(name)
        known = (
            "pinned in cluster.addon_versions"
            if pinned
            else f"EKS's default for {minor} when the add-on is created"
        )
        result.append(Pin(f"add-on {name}", pinned or "-", known))
    return result


def plan_pins(plan: KubernetesLayerPlan) -> list[Pin]:
    """The charts and every image the cluster pulls."""
    result = [
        Pin(f"chart {step.chart}", step.version, f"from {step.source}")
        for step in plan
        if isinstance(step, HelmRelease)
    ]
    for image in plan.images():
        repository = upstream_repository(image)
        reference = image.split("@", 1)[0].rsplit(":", 1)[-1]
        reason = digest_exception_reason(image) or "pinned by digest"
        result.append(Pin(f"image {repository}", reference, reason))
    return result


def pins(config: StackConfig, today: date) -> list[Pin]:
    return [
        kubernetes_pin(config, today),
        *ami_pins(config),
        *neuron_pins(config),
        *platform_pins(config),
        *plan_pins(review_plan(config)),
    ]


_WIDTH = 100


def render(rows: Sequence[Pin]) -> str:
    """One block per pin: ``! name: pinned`` (``!`` for a known problem), what the project knows,
    and the newer versions the tables know."""
    lines: list[str] = []
    for row in rows:
        lines.append(f"{'!' if row.attention else ' '} {row.name}: {row.pinned}")
        lines += textwrap.wrap(
            row.known, _WIDTH, initial_indent="    ", subsequent_indent="    ", break_on_hyphens=False
        )
        if row.newer != "-":
            lines.append(f"    newer in the tables: {row.newer}")
    return "\n".join(lines)


def main(
    argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print("\n".join(error.lines()), file=err)
        return 1
    today = synth_date()
    rows = pins(config, today)
    print(
        f"Pins of {args.config} on {today} (! = a known problem; `make preflight` asks AWS what is newer)",
        file=out,
    )
    print(file=out)
    print(render(rows), file=out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
