"""Exceptions to the Kubernetes policy checks, written on the object that needs them.

``make test`` runs checkov's Kubernetes checks over every chart (tests/guardrails). An object that
must break a check (a device plugin needs the host) carries one ``checkov.io/skip<N>`` annotation
per check, with the reason, so the exception is reviewed with the chart and visible in the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping

from cluster_facts.image_sources import digest_exception_reason

__all__ = ["PINNED_PULL_POLICY", "digest_exceptions", "policy_exceptions", "pull_policy_exceptions"]

DIGEST_CHECK = "CKV_K8S_43"
"""checkov: an image should be pinned by digest."""


PULL_POLICY_CHECK = "CKV_K8S_15"
"""checkov: imagePullPolicy should be Always."""
PINNED_PULL_POLICY = "IfNotPresent"
"""Every image is pinned (by tag or digest) and the cache's repositories keep their tags immutable
(constructs_trn/pull_through_cache.py): a node pulls an image once and runs those bytes from then on.
Always would ask the registry again at every start, and follow a tag that moved."""


def pull_policy_exceptions() -> dict[str, str]:
    """The exception for ``PINNED_PULL_POLICY`` (checkov wants Always)."""
    return {
        PULL_POLICY_CHECK: "the image is pinned and its cache repository keeps tags immutable, so a node "
        "runs the bytes it pulled first; Always would follow a tag that moved upstream"
    }


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
