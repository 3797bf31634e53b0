"""Exceptions to the Kubernetes policy checks, written on the object that needs them.

``make test`` runs checkov's Kubernetes checks over every chart (tests/guardrails). An object that
must break a check (a device plugin needs the host) carries one ``checkov.io/skip<N>`` annotation
per check, with the reason, so the exception is reviewed with the chart and visible in the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping

from cluster_facts.image_sources import digest_exception_reason

__all__ = ["digest_exceptions", "policy_exceptions"]

DIGEST_CHECK = "CKV_K8S_43"
"""checkov: an image should be pinned by digest."""


def digest_exceptions(*images: str) -> dict[str, str]:
    """The digest check's exception (check id to reason) when an image of the object has no digest:
    the reason comes from cluster_facts.image_sources (why upstream publishes no digest)."""
    reasons = sorted({reason for image in images if (reason := digest_exception_reason(image))})
    return {DIGEST_CHECK: "; ".join(reasons)} if reasons else {}


def policy_exceptions(reasons: Mapping[str, str]) -> dict[str, str]:
    """Annotations accepting each check id in ``reasons`` for the one object they are put on."""
    annotations = {}
    for number, (check, reason) in enumerate(sorted(reasons.items()), start=1):
        # checkov splits the value on "=", so a reason with one would be cut short.
        if "=" in reason or not reason.strip():
            raise ValueError(f"{check}: the reason must be a non-empty sentence without '='")
        annotations[f"checkov.io/skip{number}"] = f"{check}={reason}"
    return annotations
