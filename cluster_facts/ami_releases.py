"""EKS AL2023 Neuron AMI releases: per release its Neuron driver, its containerd and its known faults.

A Trainium node group pins its AMI release (``releaseVersion``), so a scale-up next month boots the
same driver and container runtime as today's. Checked at synth (config/consistency.py): a group's
release is one of this table for the cluster's Kubernetes version, or one whose facts the
configuration declares (``ami_facts``: the release is then trusted on that declaration, synth says
so and preflight asks AWS that it exists); a release with a known fault for a feature the stack
turns on is refused, naming the release that fixes it.

Sources (read 2026-11-28):

- Releases, drivers, containerd: awslabs/amazon-eks-ami CHANGELOG.md, "AMI Release v<date>", per
  Kubernetes minor its release version and the package table, column AL2023_x86_64_NEURON, rows
  ``aws-neuronx-dkms`` and ``containerd``. Releases the CHANGELOG marks "[ABANDONED]" (v20260128,
  v20260311) are left out; so are tags without release notes (v20260512 to v20260529, v20260707,
  v20260709, v20260724), which the CHANGELOG never names as released AMIs.
- The FastImagePull deadlock: awslabs/amazon-eks-ami issues #2712 ("EKS AMI v20260505 with
  containerd 2.2.3 breaks SOCI snapshotter and nodes stay NotReady") and #2710; the cause in
  containerd/containerd#12835 (from 2.2.3, the pause image is unpacked through the SOCI snapshotter,
  which asks ECR for layer metadata before the kubelet's credential provider can run: no sandbox, no
  aws-node, never Ready). The fix is in nodeadm, commit f2bdcc06 (PR #2717, 2026-05-11: containerd
  waits for soci-snapshotter and the pause image is imported into it before the kubelet starts).
  ``git tag --contains f2bdcc06``: not v20260505; the first tag with release notes that contains it
  is v20260610 (v20260618, v20260625 and v20260714 do too).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cluster_facts.node_startup import FAST_IMAGE_PULL_FEATURE
from cluster_facts.versions import version_key

__all__ = [
    "AMI_RELEASES",
    "DEFAULT_AMI_RELEASES",
    "FAST_IMAGE_PULL_DEADLOCK",
    "KNOWN_FAULTS",
    "AmiRelease",
    "KnownFault",
    "declared_release",
    "fault_problem",
    "faults_of",
    "fixing_release",
    "neuron_ami_parameter",
    "newest_release",
    "release_minor",
]


@dataclass(frozen=True, kw_only=True)
class KnownFault:
    """A fault of some AMI releases that breaks a feature the stack can turn on."""

    name: str
    feature: str
    """The feature it breaks (a nodeadm feature gate the launch template sets, cluster_facts/node_startup.py)."""
    what: str
    """What a user sees, in a few words."""
    sources: tuple[str, ...]
    fixed_in: str
    """The first AMI release (``v<date>``) with the fix."""
    containerd_from: str
    """The first containerd with the behaviour (a release built earlier with an older containerd is not affected)."""

    def affects(self, *, containerd: str, release_date: str) -> bool:
        """Whether a release built on ``release_date`` (``YYYYMMDD``) with ``containerd`` has the fault."""
        return release_date < self.fixed_in.removeprefix("v") and version_key(containerd) >= version_key(
            self.containerd_from
        )


FAST_IMAGE_PULL_DEADLOCK = KnownFault(
    name="FastImagePull sandbox deadlock",
    feature=FAST_IMAGE_PULL_FEATURE,
    what="pod sandbox creation deadlocks, aws-node never starts and the node never becomes Ready",
    sources=(
        "awslabs/amazon-eks-ami#2712",
        "#2710",
        "containerd/containerd#12835",
        "fix: nodeadm f2bdcc06 (#2717)",
    ),
    fixed_in="v20260610",
    containerd_from="2.2.3",
)
KNOWN_FAULTS = (FAST_IMAGE_PULL_DEADLOCK,)


@dataclass(frozen=True, kw_only=True)
class AmiRelease:
    """An EKS AL2023 Neuron AMI release (a managed node group's ``releaseVersion``)."""

    release_version: str
    """``<kubernetes version>-<date>``, as EKS names it."""
    driver: str
    """Its ``aws-neuronx-dkms``."""
    containerd: str
    """Its ``containerd`` package (``2.2.4-1.amzn2023.0.3``)."""
    faults: tuple[KnownFault, ...] = ()
    declared: bool = False
    """True when the facts come from the configuration's ``ami_facts``, not from this table."""

    @property
    def kubernetes_version(self) -> str:
        return release_minor(self.release_version)

    @property
    def release_date(self) -> str:
        """``YYYYMMDD``: the AMI release tag without its ``v``."""
        return self.release_version.rsplit("-", 1)[1]

    @property
    def tag(self) -> str:
        return f"v{self.release_date}"


def release_minor(release_version: str) -> str:
    """``"1.36.2-20260714"`` -> ``"1.36"``."""
    return ".".join(release_version.split(".")[:2])


def faults_of(*, containerd: str, release_date: str) -> tuple[KnownFault, ...]:
    """The known faults a release built on ``release_date`` with ``containerd`` has."""
    return tuple(
        fault for fault in KNOWN_FAULTS if fault.affects(containerd=containerd, release_date=release_date)
    )


# (tag, aws-neuronx-dkms, containerd, the Neuron AMI's release version per Kubernetes minor the
# project supports), newest first, as the CHANGELOG lists them.
_CHANGELOG: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("v20260714", "2.29.0.0", "2.2.4-1.amzn2023.0.3", ("1.33.13", "1.34.9", "1.35.6", "1.36.2")),
    ("v20260625", "2.28.0.0", "2.2.4-1.amzn2023.0.3", ("1.33.13", "1.34.9", "1.35.6", "1.36.2")),
    ("v20260618", "2.28.0.0", "2.2.4-1.amzn2023.0.3", ("1.33.13", "1.34.9", "1.35.6", "1.36.2")),
    # The first release with 1.36 (and the first with the nodeadm fix above).
    ("v20260610", "2.28.0.0", "2.2.4-1.amzn2023.0.1", ("1.33.12", "1.34.8", "1.35.5", "1.36.1")),
    ("v20260505", "2.27.4.0", "2.2.3-1.amzn2023.0.1", ("1.33.11", "1.34.7", "1.35.4")),
    ("v20260423", "2.27.4.0", "2.2.1-1.amzn2023.0.2", ("1.33.11", "1.34.7", "1.35.4")),
    ("v20260415", "2.27.4.0", "2.2.1-1.amzn2023.0.2", ("1.33.10", "1.34.6", "1.35.3")),
    ("v20260409", "2.27.4.0", "2.2.1-1.amzn2023.0.1", ("1.33.10", "1.34.6", "1.35.3")),
    ("v20260403", "2.26.10.0", "2.2.1-1.amzn2023.0.1", ("1.33.8", "1.34.4", "1.35.2")),
    ("v20260318", "2.26.10.0", "2.2.1-1.amzn2023.0.1", ("1.33.8", "1.34.4", "1.35.2")),
    ("v20260304", "2.26.5.0", "2.1.5-1.amzn2023.0.5", ("1.33.8", "1.34.4", "1.35.2")),
    ("v20260224", "2.25.4.0", "2.1.5-1.amzn2023.0.5", ("1.33.8", "1.34.4", "1.35.0")),
    ("v20260209", "2.25.4.0", "2.1.5-1.amzn2023.0.5", ("1.33.7", "1.34.3", "1.35.0")),
    ("v20260129", "2.25.4.0", "2.1.5-1.amzn2023.0.4", ("1.33.5", "1.34.2", "1.35.0")),
    ("v20260120", "2.25.4.0", "2.1.5-1.amzn2023.0.3", ("1.33.5", "1.34.2", "1.35.0")),
    ("v20260116", "2.25.4.0", "2.1.5-1.amzn2023.0.3", ("1.33.5", "1.34.2", "1.35.0")),
    ("v20260114", "2.25.4.0", "2.1.5-1.amzn2023.0.3", ("1.33.5", "1.34.2", "1.35.0")),
    ("v20260107", "2.25.4.0", "2.1.5-1.amzn2023.0.1", ("1.33.5", "1.34.2")),
)


def _rows() -> Iterable[AmiRelease]:
    for tag, driver, containerd, kubernetes in _CHANGELOG:
        date = tag.removeprefix("v")
        for patch in kubernetes:
            yield AmiRelease(
                release_version=f"{patch}-{date}",
                driver=driver,
                containerd=containerd,
                faults=faults_of(containerd=containerd, release_date=date),
            )


AMI_RELEASES: Mapping[str, AmiRelease] = {release.release_version: release for release in _rows()}
"""AMI releases the table knows, by release version."""

DEFAULT_AMI_RELEASES: Mapping[str, str] = {
    # The newest release without a known fault whose driver serves the cluster's training image
    # (the xla stack's SDK 2.29.1 needs 2.27.4.0; a newer driver serves an older runtime, docs/neuron.md).
    # tests/cluster_facts/test_ami_releases.py fails when a newer such release enters the table and this stays behind.
    "1.33": "1.33.13-20260714",
    "1.34": "1.34.9-20260714",
    "1.35": "1.35.6-20260714",
    "1.36": "1.36.2-20260714",
}
"""A node group's AMI release when its configuration names none, by Kubernetes version."""


def newest_release(
    minor: str, *, driver_at_least: str = "0", features: Iterable[str] = ()
) -> AmiRelease | None:
    """The newest release of the table for ``minor`` whose driver is at least ``driver_at_least``
    and that has no known fault for any of ``features``."""
    wanted = set(features)
    candidates = [
        release
        for release in AMI_RELEASES.values()
        if release.kubernetes_version == minor
        and version_key(release.driver) >= version_key(driver_at_least)
        and not any(fault.feature in wanted for fault in release.faults)
    ]
    return max(
        candidates,
        key=lambda release: (release.release_date, version_key(release.release_version)),
        default=None,
    )


def fixing_release(fault: KnownFault, minor: str) -> str | None:
    """The release of ``minor`` that first carries the fix of ``fault`` (None: the table has none)."""
    fixed = [
        release.release_version
        for release in AMI_RELEASES.values()
        if release.kubernetes_version == minor and release.tag == fault.fixed_in
    ]
    return fixed[0] if fixed else None


_RELEASE = re.compile(r"\d+\.\d+\.\d+-(\d{8})")


def declared_release(release_version: str, *, neuron_driver: str, containerd: str) -> AmiRelease:
    """A release the table does not know, from the facts the configuration declares for it."""
    match = _RELEASE.fullmatch(release_version)
    if match is None:
        raise ValueError(f"{release_version!r} is not an EKS AMI release version")
    return AmiRelease(
        release_version=release_version,
        driver=neuron_driver,
        containerd=containerd,
        faults=faults_of(containerd=containerd, release_date=match.group(1)),
        declared=True,
    )


def fault_problem(release: AmiRelease, features: Iterable[str]) -> str | None:
    """Why ``release`` may not boot nodes that turn on ``features``, in one line, naming the release
    that fixes it and the newest one without a known fault (None: no known fault of those features)."""
    wanted = set(features)
    for fault in release.faults:
        if fault.feature not in wanted:
            continue
        minor = release.kubernetes_version
        fixed = fixing_release(fault, minor)
        newest = newest_release(minor, features=wanted)
        fix = f"fixed in {fixed} ({fault.fixed_in})" if fixed else f"fixed from {fault.fixed_in}"
        if newest is not None and newest.release_version != fixed:
            fix += f"; newest without a known fault: {newest.release_version}"
        return (
            f"{release.release_version!r} (containerd {release.containerd}) has a known fault with {fault.feature}, "
            f"which every Trainium node turns on: {fault.what} ({', '.join(fault.sources[:2])}); {fix}"
        )
    return None


_SSM_ROOT = "/aws/service/eks/optimized-ami"


def neuron_ami_parameter(minor: str, *, release: str | None = None) -> str:
    """The SSM public parameter of the recommended Neuron AMI release of ``minor`` (its
    ``release_version``), or of one release's image (its ``image_id``; a release absent from the
    region has none): the EKS user guide, "Retrieve recommended Amazon Linux AMI IDs", and the AMI
    names of the release notes (``amazon-eks-node-al2023-x86_64-neuron-<minor>-v<date>``)."""
    root = f"{_SSM_ROOT}/{minor}/amazon-linux-2023/x86_64/neuron"
    if release is None:
        return f"{root}/recommended/release_version"
    date = release.rsplit("-", 1)[1]
    return f"{root}/amazon-eks-node-al2023-x86_64-neuron-{minor}-v{date}/image_id"
