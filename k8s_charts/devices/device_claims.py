"""ResourceClaimTemplates: what a pod on a ``devices: dra`` node group claims of its node.

Two kinds, both one whole node (cluster_facts/dra.py ``NodeDevices``: every Neuron device as one
connected set, their EFA interfaces in the same device group, the Logical NeuronCore size), each one
template per claim of the pod: one claim where the node's devices fit one, else two (a trn2u's 16
Neuron devices and its ``neuron_node`` in ``devices``, its 16 EFA interfaces in ``efa``:
``NodeDevices.claims``):

- each configured run's own templates, ``<run>-devices-<hash>`` (and ``<run>-efa-<hash>``;
  k8s_charts/runs/training_run.py), applied with the run;
- in every team namespace, per ``dra`` group the team may use, ``trainium-node-<group>`` (and
  ``trainium-node-<group>-efa``; ``node_claim_template``), which the TorchX component names from the
  team's settings (torchx_trn/trainium.py): a TorchX submission is one Volcano Job and cannot bring
  its own template.

A template is immutable in effect: its claims are made when a pod is made, so a changed spec is a new
template (the run's name carries its hash).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cdk8s
from constructs import Construct

from cluster_facts.dra import POD_DEVICE_CLAIM, NodeDevices, node_claim_template

__all__ = ["NodeClaimTemplatesChart", "claim_template"]


def claim_template(
    scope: Construct,
    id: str,
    *,
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    spec: Mapping[str, Any],
) -> cdk8s.ApiObject:
    """A ResourceClaimTemplate (resource.k8s.io/v1; cdk8s-plus-27 has no type for it) of ``spec``."""
    template = cdk8s.ApiObject(
        scope,
        id,
        api_version="resource.k8s.io/v1",
        kind="ResourceClaimTemplate",
        metadata=cdk8s.ApiObjectMetadata(name=name, namespace=namespace, labels=dict(labels)),
    )
    template.add_json_patch(cdk8s.JsonPatch.add("/spec", {"spec": dict(spec)}))
    return template


class NodeClaimTemplatesChart(cdk8s.Chart):
    """``trainium-node-<group>`` (and ``-efa``) in ``namespace`` for each of ``groups`` (group -> what a
    pod claims)."""

    def __init__(
        self, scope: Construct, id: str, *, namespace: str, groups: Mapping[str, NodeDevices]
    ) -> None:
        super().__init__(scope, id)
        for group, devices in sorted(groups.items()):
            for claim, spec in devices.claims().items():
                claim_template(
                    self,
                    group if claim == POD_DEVICE_CLAIM else f"{group}-{claim}",
                    name=node_claim_template(group, claim),
                    namespace=namespace,
                    labels={"app.kubernetes.io/part-of": "trainium-dra", "trainium/node-group": group},
                    spec=spec,
                )
