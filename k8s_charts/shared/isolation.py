"""NetworkPolicies for pods that serve nothing: no pod may connect to them."""

from __future__ import annotations

from collections.abc import Mapping

from cdk8s_plus_27 import k8s
from constructs import Construct

__all__ = ["deny_ingress"]


def deny_ingress(
    scope: Construct, *, name: str, namespace: str, pod_labels: Mapping[str, str]
) -> k8s.KubeNetworkPolicy:
    """Select the pods for Ingress with no rule, which denies every connection to them.

    Egress is left open (no Egress policy type): these pods call the API server, registries or
    download sites, whose addresses a NetworkPolicy cannot name.
    """
    return k8s.KubeNetworkPolicy(
        scope,
        "DenyIngress",
        metadata=k8s.ObjectMeta(name=name, namespace=namespace, labels=dict(pod_labels)),
        spec=k8s.NetworkPolicySpec(
            pod_selector=k8s.LabelSelector(match_labels=dict(pod_labels)), policy_types=["Ingress"]
        ),
    )
