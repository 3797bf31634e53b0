"""Where the device plugins run: on Trainium nodes only, through their taint."""

from __future__ import annotations

from collections.abc import Sequence

from cdk8s_plus_27 import k8s

from constructs_trn.instance_catalog import NEURON_RESOURCE

__all__ = ["device_plugin_tolerations", "instance_type_affinity"]


def device_plugin_tolerations() -> list[k8s.Toleration]:
    return [
        k8s.Toleration(key="CriticalAddonsOnly", operator="Exists"),
        # The Trainium node groups carry this taint; the plugins are what those nodes need.
        k8s.Toleration(key=NEURON_RESOURCE, operator="Exists", effect="NoSchedule"),
    ]


def instance_type_affinity(instance_types: Sequence[str]) -> k8s.Affinity:
    """Required node affinity: one of ``instance_types`` (node.kubernetes.io/instance-type)."""
    requirement = k8s.NodeSelectorRequirement(
        key="node.kubernetes.io/instance-type", operator="In", values=list(instance_types)
    )
    return k8s.Affinity(
        node_affinity=k8s.NodeAffinity(
            required_during_scheduling_ignored_during_execution=k8s.NodeSelector(
                node_selector_terms=[k8s.NodeSelectorTerm(match_expressions=[requirement])]
            )
        )
    )
