"""The team's settings, readable in its namespace: what a run of the team needs to name.

One ConfigMap (``TEAM_SETTINGS_CONFIGMAP``) per team namespace: its queue, its claims on the file
system, its uid and its node groups with their instance types and device paths, in the order a run
picks the first. A ``devices: dra`` group's entry also holds the Logical NeuronCore size its
``trainium-node-<group>`` ResourceClaimTemplate configures and the pod's claims with their templates
(``trainium-node-<group>-efa`` too on trn2u; k8s_charts/devices/device_claims.py renders the templates from
the same ``NodeDevices``), so a TorchX job claims the node as the templates give it.
The TorchX component reads it (``--team``) instead of four flags typed by hand, and refuses a run
whose instance type is not its node group's (docs/torchx.md); the team's members may read it and
nothing else of the ConfigMaps (k8s_charts/teams/namespaces.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import cdk8s
from cdk8s_plus_27 import k8s
from constructs import Construct

from cluster_facts.dra import DRA_DEVICES, PLUGIN_DEVICES, NodeDevices, node_claim_template
from cluster_facts.kubernetes_names import TEAM_SETTINGS_CONFIGMAP

__all__ = ["TeamSettingsChart", "team_settings_data"]


def team_settings_data(
    *,
    team: str,
    queue: str,
    claim: str,
    datasets_claim: str,
    uid: int,
    node_groups: Mapping[str, str],
    device_claims: Mapping[str, NodeDevices],
) -> dict[str, str]:
    """The ConfigMap's data; ``node_groups``: the team's groups (first is the default) -> instance type;
    ``device_claims``: its ``devices: dra`` groups -> what a pod claims there."""
    return {
        "team": team,
        "queue": queue,
        "claim": claim,
        "datasets_claim": datasets_claim,
        "uid": str(uid),
        "node_groups": json.dumps(
            [_group(name, kind, device_claims.get(name)) for name, kind in node_groups.items()]
        ),
    }


def _group(name: str, instance_type: str, claim: NodeDevices | None) -> dict[str, object]:
    """One group's entry: its device path; on ``dra`` the templates' LNC (null: they configure none)
    and the pod's claims, each with the template it is made from (``claims``: one, or two where one
    claim cannot hold the node, as on trn2u)."""
    if claim is None:
        return {"name": name, "instance_type": instance_type, "devices": PLUGIN_DEVICES}
    return {
        "name": name,
        "instance_type": instance_type,
        "devices": DRA_DEVICES,
        "logical_core_size": claim.logical_core_size,
        "claims": {pod_claim: node_claim_template(name, pod_claim) for pod_claim in claim.claims()},
    }


class TeamSettingsChart(cdk8s.Chart):
    def __init__(self, scope: Construct, id: str, *, namespace: str, data: Mapping[str, str]) -> None:
        super().__init__(scope, id)
        k8s.KubeConfigMap(
            self,
            "Settings",
            metadata=k8s.ObjectMeta(name=TEAM_SETTINGS_CONFIGMAP, namespace=namespace),
            data=dict(data),
        )
