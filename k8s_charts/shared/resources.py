"""Container resource requests and limits: from plain strings ("250m", "1Gi"), and the platform
namespaces' backstop for a container that declares none.

Every container the stack renders declares its own (tests/k8s_charts/test_all_charts.py and
tests/k8s_charts/test_helm_release_resources.py fail otherwise). ``ContainerDefaultsChart`` is for what
the stack does not render: a container a chart upgrade adds, or one someone applies by hand in a
platform namespace. The API server's LimitRanger gives it these requests and limits when it is
created (tests/cluster/test_security.py asks the real one).
"""

from __future__ import annotations

from collections.abc import Mapping

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

__all__ = [
    "CONTAINER_DEFAULTS",
    "CONTAINER_DEFAULTS_NAME",
    "ContainerDefaultsChart",
    "container_defaults",
    "container_resources",
]

CONTAINER_DEFAULTS_NAME = "platform-defaults"
CONTAINER_DEFAULTS: dict[str, dict[str, str]] = {
    # A small controller's share of a system node (m6i.2xlarge: 8 vCPUs, 32 GiB), what the team
    # namespaces' LimitRange requests too (k8s_charts/teams/team_quota.py) ...
    "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
    # ... and a ceiling that keeps one undeclared process from taking the node from Volcano, etcd
    # and the rest: it is throttled at one CPU, and killed (and restarted) past 512 MiB.
    "default": {"cpu": "1", "memory": "512Mi"},
}


def container_resources(
    *, requests: Mapping[str, str], limits: Mapping[str, str]
) -> k8s.ResourceRequirements:
    return k8s.ResourceRequirements(
        requests={name: k8s.Quantity.from_string(value) for name, value in requests.items()},
        limits={name: k8s.Quantity.from_string(value) for name, value in limits.items()},
    )


class ContainerDefaultsChart(cdk8s.Chart):
    """LimitRange ``platform-defaults`` in ``namespace``: ``CONTAINER_DEFAULTS`` for a container
    that declares no requests or limits (no minimum or maximum: it refuses nothing)."""

    def __init__(self, scope: Construct, id: str, *, namespace: str) -> None:
        super().__init__(scope, id)
        container_defaults(
            self,
            "Defaults",
            name=CONTAINER_DEFAULTS_NAME,
            namespace=namespace,
            requests=CONTAINER_DEFAULTS["defaultRequest"],
            limits=CONTAINER_DEFAULTS["default"],
        )


def container_defaults(
    scope: Construct,
    id: str,
    *,
    name: str,
    namespace: str,
    requests: Mapping[str, str],
    limits: Mapping[str, str] | None = None,
) -> k8s.KubeLimitRange:
    """A LimitRange that gives a container declaring none these requests (and limits); no minimum or
    maximum, so it refuses nothing."""
    q = k8s.Quantity.from_string
    return k8s.KubeLimitRange(
        scope,
        id,
        metadata=k8s.ObjectMeta(name=name, namespace=namespace),
        spec=k8s.LimitRangeSpec(
            limits=[
                k8s.LimitRangeItem(
                    type="Container",
                    default_request={k: q(v) for k, v in requests.items()},
                    default=None if limits is None else {k: q(v) for k, v in limits.items()},
                )
            ]
        ),
    )
