"""The EKS Kubernetes minor versions the project supports, with their release and support dates.

EKS gives a minor version 14 months of standard support from its EKS release, then 12 months of
extended support billed at a higher rate per cluster hour, then upgrades the control plane itself
(EKS user guide, "Understand the Kubernetes version lifecycle on EKS": "A minor version is under
standard support in Amazon EKS for the first 14 months after it's released. Once a version is past
the end of standard support date, it enters extended support for the next 12 months"; extended
support is on by default, the cluster's ``upgradePolicy`` EXTENDED). Synth warns when the configured
version's standard support ends within ``WARN_DAYS`` (or has ended) and refuses a version past its
extended support (config/model.py); ``make outdated`` lists the table; preflight asks EKS
(``DescribeClusterVersions``) for the live dates and reports what differs or what the table lacks.

Sources, read 2026-11-28:

- EKS user guide, kubernetes-versions.adoc, "Amazon EKS Kubernetes release calendar"
  (awsdocs/amazon-eks-user-guide, the stored copy lists 1.29 to 1.34): 1.33 and 1.34.
- endoflife.date products/amazon-eks.md (endoflife-date/endoflife.date, snapshot of 2026-08-22),
  whose support dates are read from that calendar (its ``release_table`` method) and whose release
  dates link AWS's What's New posts: 1.35 (PR #9378) and 1.36 (PR #10240, "amazon-eks-distro-
  kubernetes-version-1-36", 2026-06-02). It lists no 1.37; neither does any source read here
  (aws/containers-roadmap#2864, "Support for Kubernetes 1.37", is open), so 1.37 is not offered.
- Upstream releases: kubernetes.io/releases/<minor> and kubernetes/sig-release releases/release-1.35.
- Prices: AWS containers blog, "Amazon EKS extended support for Kubernetes versions pricing": "$0.60
  per cluster per hour" in extended support; "you will continue to pay $0.10 per cluster per hour"
  in standard support (the EKS pricing page gives the same; preflight reads the Region's from the
  Price List).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime

__all__ = [
    "EKS_VERSIONS",
    "EXTENDED_SUPPORT_USD_PER_HOUR",
    "HOURS_PER_MONTH",
    "STANDARD_SUPPORT_USD_PER_HOUR",
    "SYNTH_DATE_VARIABLE",
    "WARN_DAYS",
    "EksVersion",
    "extra_cost_per_month",
    "support_notice",
    "support_problem",
    "synth_date",
]

STANDARD_SUPPORT_USD_PER_HOUR = 0.10
EXTENDED_SUPPORT_USD_PER_HOUR = 0.60
HOURS_PER_MONTH = 730
"""AWS's pricing pages' month (8,760 hours a year / 12)."""
WARN_DAYS = 90
"""Synth warns this many days before a version's standard support ends."""
SYNTH_DATE_VARIABLE = "TRAINIUM_SYNTH_DATE"
"""An ISO date that stands for today in the support checks (tests, and a reproducible review)."""


@dataclass(frozen=True, kw_only=True)
class EksVersion:
    minor: str
    upstream_release: date
    eks_release: date
    end_of_standard_support: date
    end_of_extended_support: date
    source: str
    """Where the EKS dates come from."""


EKS_VERSIONS: Mapping[str, EksVersion] = {
    version.minor: version
    for version in (
        EksVersion(
            minor="1.33",
            upstream_release=date(2025, 4, 23),
            eks_release=date(2025, 5, 29),
            end_of_standard_support=date(2026, 7, 29),
            end_of_extended_support=date(2027, 7, 29),
            source="EKS user guide release calendar",
        ),
        EksVersion(
            minor="1.34",
            upstream_release=date(2025, 8, 27),
            eks_release=date(2025, 10, 2),
            end_of_standard_support=date(2026, 12, 2),
            end_of_extended_support=date(2027, 12, 2),
            source="EKS user guide release calendar",
        ),
        EksVersion(
            minor="1.35",
            upstream_release=date(2025, 12, 17),
            eks_release=date(2026, 1, 28),
            end_of_standard_support=date(2027, 3, 27),
            end_of_extended_support=date(2028, 3, 27),
            source="endoflife.date, read from the EKS release calendar",
        ),
        EksVersion(
            minor="1.36",
            upstream_release=date(2026, 4, 22),
            eks_release=date(2026, 6, 2),
            end_of_standard_support=date(2027, 8, 2),
            end_of_extended_support=date(2028, 8, 2),
            source="endoflife.date, read from the EKS release calendar",
        ),
    )
}
"""Every minor version the configuration accepts (one kubectl layer each, cluster_facts/versions.py)."""


def synth_date() -> date:
    """Today (UTC), or the date ``TRAINIUM_SYNTH_DATE`` names."""
    named = os.environ.get(SYNTH_DATE_VARIABLE)
    return date.fromisoformat(named) if named else datetime.now(UTC).date()


def extra_cost_per_month() -> float:
    """What extended support adds to a cluster's control plane a month, in USD."""
    return (EXTENDED_SUPPORT_USD_PER_HOUR - STANDARD_SUPPORT_USD_PER_HOUR) * HOURS_PER_MONTH


def _supported_until(today: date) -> list[str]:
    return [v.minor for v in EKS_VERSIONS.values() if today <= v.end_of_extended_support]


def support_problem(minor: str, today: date) -> str | None:
    """Why EKS no longer runs ``minor`` on ``today``, in one line (None: it does)."""
    version = EKS_VERSIONS[minor]
    if today <= version.end_of_extended_support:
        return None
    allowed = ", ".join(_supported_until(today)) or "none: the table needs a newer version"
    return (
        f"{minor!r} left EKS extended support on {version.end_of_extended_support}: EKS creates no "
        f"cluster on it and upgrades existing ones itself; allowed: {allowed}"
    )


def support_notice(minor: str, today: date) -> str | None:
    """A warning when ``minor``'s standard support has ended or ends within ``WARN_DAYS``, with
    the date and what extended support costs more (None: nothing to say yet)."""
    version = EKS_VERSIONS[minor]
    days = (version.end_of_standard_support - today).days
    if days > WARN_DAYS or today > version.end_of_extended_support:
        return None
    cost = (
        f"extended support bills ${EXTENDED_SUPPORT_USD_PER_HOUR:.2f} instead of "
        f"${STANDARD_SUPPORT_USD_PER_HOUR:.2f} per cluster hour, about ${extra_cost_per_month():.0f} more a month"
    )
    newer = [
        v.minor for v in EKS_VERSIONS.values() if v.end_of_standard_support > version.end_of_standard_support
    ]
    upgrade = f"upgrade to {newer[-1]} (docs/upgrades.md)" if newer else "no newer version in the table yet"
    if days >= 0:
        when = f"ends EKS standard support on {version.end_of_standard_support} (in {days} day{'' if days == 1 else 's'})"
    else:
        when = (
            f"left EKS standard support on {version.end_of_standard_support}; EKS upgrades it itself after "
            f"{version.end_of_extended_support}"
        )
    return f"Kubernetes {minor} {when}: {cost}; {upgrade}"
