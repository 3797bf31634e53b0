"""What AWS says now against what the tables know: the EKS version calendar and the AMI releases.

``make outdated`` reads the offline tables (cluster_facts/kubernetes_versions.py,
cluster_facts/ami_releases.py); these checks ask the live sources the same questions and report
what the tables do not know yet, or get wrong:

- ``eks dates <minor>``: EKS ``DescribeClusterVersions`` gives the configured version's end of
  standard and extended support; a date that differs from the table is a WARN (correct the table).
- ``eks versions``: a version EKS offers that the table does not know (newer than every one it
  knows) is a WARN: the project cannot deploy it until it has its dates, kubectl layer, autoscaler
  image and AMI releases (docs/upgrades.md).
- ``ami recommended <minor>``: the release SSM recommends for Neuron nodes of the version; one the
  table does not know is a WARN (read its release notes, add it, docs/upgrades.md).
- ``ami <group>``: each node group's release is published in the region (its SSM image parameter
  exists); a release EKS does not have there, a declared one above all, is a FAIL.
- ``cluster version``: a cluster already deployed under the configuration's name (EKS
  ``DescribeCluster``) is at the configured version or one minor below: EKS updates a control plane
  one minor at a time and not back ("Update existing cluster to new Kubernetes version"), so a
  larger step would fail mid-deploy.
"""

from __future__ import annotations

from datetime import datetime

from cluster_facts.ami_releases import AMI_RELEASES, DEFAULT_AMI_RELEASES, newest_release
from cluster_facts.kubernetes_versions import EKS_VERSIONS
from cluster_facts.node_startup import FEATURES_TURNED_ON
from cluster_facts.versions import version_key
from config.model import StackConfig
from preflight.checks import CheckResult
from preflight.facts import AccountFacts, AmiReleaseFacts, KubernetesVersion, Unavailable

__all__ = ["version_checks"]

_UPGRADES = "docs/upgrades.md"


def version_checks(config: StackConfig, facts: AccountFacts) -> list[CheckResult]:
    results: list[CheckResult] = [check_deployed_version(config, facts.deployed_version)]
    if not isinstance(facts.kubernetes_versions, Unavailable):
        # Denied: the kubernetes check already fails and names the permission.
        results += [
            check_eks_dates(config, facts.kubernetes_versions),
            check_new_versions(facts.kubernetes_versions),
        ]
    if facts.ami_releases is not None:
        results.append(check_recommended_release(config, facts.ami_releases, facts.region))
        results += [
            check_release_published(config, facts.ami_releases, facts.region, index)
            for index in range(len(config.trainium.node_groups))
        ]
    return results


def _day(value: datetime | None) -> str:
    return value.date().isoformat() if value is not None else "?"


def check_eks_dates(config: StackConfig, versions: tuple[KubernetesVersion, ...]) -> CheckResult:
    minor = config.cluster.kubernetes_version
    check = f"eks dates {minor}"
    known = EKS_VERSIONS[minor]
    live = next((v for v in versions if v.version == minor), None)
    if live is None or live.end_of_standard_support is None:
        return CheckResult(
            check, "PASS", f"EKS gives no support dates for {minor}; the table's: {_table(minor)}"
        )
    said = (_day(live.end_of_standard_support), _day(live.end_of_extended_support))
    table = (known.end_of_standard_support.isoformat(), known.end_of_extended_support.isoformat())
    if said[0] == table[0] and said[1] in (table[1], "?"):
        return CheckResult(check, "PASS", f"EKS's dates are the table's: {_table(minor)}")
    return CheckResult(
        check,
        "WARN",
        f"EKS says {minor} has standard support until {said[0]} and extended until {said[1]}; the table "
        f"says {table[0]} and {table[1]}",
        f"correct {minor} in cluster_facts/kubernetes_versions.py (the synth warning reads it)",
    )


def _table(minor: str) -> str:
    known = EKS_VERSIONS[minor]
    return f"standard support until {known.end_of_standard_support}, extended until {known.end_of_extended_support}"


def check_new_versions(versions: tuple[KubernetesVersion, ...]) -> CheckResult:
    newest_known = max(EKS_VERSIONS, key=version_key)
    offered = sorted((v.version for v in versions if v.status != "UNSUPPORTED"), key=version_key)
    unknown = [v for v in offered if version_key(v) > version_key(newest_known)]
    if not unknown:
        return CheckResult(
            "eks versions",
            "PASS",
            f"EKS offers nothing newer than {newest_known}, the newest the table knows",
        )
    return CheckResult(
        "eks versions",
        "WARN",
        f"EKS offers {', '.join(unknown)}, which the tables do not know (newest known: {newest_known})",
        f"add its dates, kubectl layer, autoscaler image and AMI releases ({_UPGRADES})",
    )


def check_recommended_release(config: StackConfig, releases: AmiReleaseFacts, region: str) -> CheckResult:
    minor = config.cluster.kubernetes_version
    check = f"ami recommended {minor}"
    recommended = releases.recommended
    if isinstance(recommended, Unavailable):
        return CheckResult(
            check, "WARN", f"could not ask SSM: {recommended.reason}", f"allow {recommended.call} (read-only)"
        )
    if recommended is None:
        return CheckResult(
            check, "WARN", f"SSM names no recommended Neuron AMI release for {minor} in {region}", "-"
        )
    known = AMI_RELEASES.get(recommended)
    if known is not None:
        faults = f"; known fault with {', '.join(f.feature for f in known.faults)}" if known.faults else ""
        return CheckResult(
            check,
            "WARN" if faults else "PASS",
            f"AWS recommends {recommended} for Neuron nodes of {minor}: in the table (Neuron driver "
            f"{known.driver}, containerd {known.containerd}{faults})",
            "keep the pin; the recommendation has a known fault" if faults else "",
        )
    newest = newest_release(minor, features=FEATURES_TURNED_ON)
    return CheckResult(
        check,
        "WARN",
        f"AWS recommends {recommended} for Neuron nodes of {minor}, which the table does not know (newest "
        f"known: {newest.release_version if newest else 'none'})",
        "read its release notes (awslabs/amazon-eks-ami CHANGELOG.md) and add it to "
        f"cluster_facts/ami_releases.py ({_UPGRADES})",
    )


def check_release_published(
    config: StackConfig, releases: AmiReleaseFacts, region: str, index: int
) -> CheckResult:
    group = config.trainium.node_groups[index]
    minor = config.cluster.kubernetes_version
    release = group.ami_release or DEFAULT_AMI_RELEASES[minor]
    check = f"ami {group.name}"
    published = releases.published.get(release)
    origin = "declared under ami_facts" if release not in AMI_RELEASES else "from the table"
    if isinstance(published, Unavailable):
        return CheckResult(
            check, "FAIL", f"could not ask SSM: {published.reason}", f"allow {published.call} (read-only)"
        )
    if published:
        return CheckResult(
            check, "PASS", f"EKS publishes Neuron AMI release {release} ({origin}) in {region}"
        )
    recommended = releases.recommended if isinstance(releases.recommended, str) else None
    return CheckResult(
        check,
        "FAIL",
        f"EKS publishes no Neuron AMI of release {release} ({origin}) in {region}: the group's nodes could "
        "not be created",
        f"set trainium.node_groups[{index}].ami_release to a published release"
        + (f" (SSM recommends {recommended})" if recommended else ""),
    )


def check_deployed_version(config: StackConfig, deployed: str | Unavailable | None) -> CheckResult:
    wanted = config.cluster.kubernetes_version
    if isinstance(deployed, Unavailable):
        return CheckResult(
            "cluster version",
            "FAIL",
            f"could not ask EKS: {deployed.reason}",
            f"allow {deployed.call} (read-only)",
        )
    if deployed is None:
        return CheckResult(
            "cluster version", "PASS", f"no cluster named {config.name} yet: it is created at {wanted}"
        )
    major, minor = version_key(deployed)[:2]
    step = version_key(wanted)[1] - minor if version_key(wanted)[0] == major else -1
    if step == 0:
        return CheckResult("cluster version", "PASS", f"{config.name} runs {deployed}, as configured")
    if step == 1:
        return CheckResult(
            "cluster version",
            "PASS",
            f"{config.name} runs {deployed}: the deploy upgrades it to {wanted}, then its node groups ({_UPGRADES})",
        )
    if step > 1:
        return CheckResult(
            "cluster version",
            "FAIL",
            f"{config.name} runs {deployed}; EKS upgrades one minor version at a time, so {wanted} would fail mid-deploy",
            f"set cluster.kubernetes_version to {major}.{minor + 1}, deploy, then move on ({_UPGRADES})",
        )
    return CheckResult(
        "cluster version",
        "FAIL",
        f"{config.name} runs {deployed}; a deploy does not move a control plane to an older version ({wanted})",
        f"set cluster.kubernetes_version to {deployed}",
    )
