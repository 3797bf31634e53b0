"""Container resource requests and limits from plain strings ("250m", "1Gi")."""

from __future__ import annotations

from collections.abc import Mapping

from cdk8s_plus_27 import k8s

__all__ = ["container_resources"]


def container_resources(
    *, requests: Mapping[str, str], limits: Mapping[str, str]
) -> k8s.ResourceRequirements:
    return k8s.ResourceRequirements(
        requests={name: k8s.Quantity.from_string(value) for name, value in requests.items()},
        limits={name: k8s.Quantity.from_string(value) for name, value in limits.items()},
    )
