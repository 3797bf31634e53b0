"""A team's settings as its namespace's ConfigMap holds them (k8s_charts/teams/team_settings.py), and what a
TorchX run of the team takes from them: the claim, the node group, the uid, the instance type and,
on a ``devices: dra`` group, the claim its pods take their node's devices through.

Pure: the component (torchx_trn/components.py) reads the ConfigMap with the Kubernetes client and
passes its data here. A value given on the command line must agree with the settings: a node group
the team may not use, or an instance type that is not the node group's, is refused before anything
is submitted (a trn1-shaped Job on a trn2 group could never be placed).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from cluster_facts.dra import (
    DEVICE_PATHS,
    DRA_DEVICES,
    PLUGIN_DEVICES,
    POD_DEVICE_CLAIM,
    POD_EFA_CLAIM,
    node_claim_template,
)
from cluster_facts.kubernetes_names import TEAM_SETTINGS_CONFIGMAP
from torchx_trn.trainium import NodeClaim

__all__ = ["ResolvedTeam", "resolve_team"]


@dataclass(frozen=True)
class ResolvedTeam:
    claim: str
    node_group: str
    uid: int
    instance_type: str
    queue: str
    node_claim: NodeClaim | None = None
    """The node group's whole-node claim on a ``devices: dra`` group; None on the device plugins'."""


def resolve_team(
    team: str,
    data: Mapping[str, str],
    *,
    node_group: str | None = None,
    instance_type: str | None = None,
    claim: str | None = None,
    uid: int | None = None,
) -> ResolvedTeam:
    """The run's values from ``data`` (the ConfigMap's), checked against what the command gave."""
    where = f"ConfigMap {team}/{TEAM_SETTINGS_CONFIGMAP}"
    try:
        entries = {str(g["name"]): g for g in json.loads(data["node_groups"])}
        groups = {name: str(entry["instance_type"]) for name, entry in entries.items()}
        # A ConfigMap written before the stack knew DRA names no device path: the device plugins'.
        paths = {name: entry.get("devices", PLUGIN_DEVICES) for name, entry in entries.items()}
        if any(path not in DEVICE_PATHS for path in paths.values()):
            raise ValueError(f"devices not one of {', '.join(DEVICE_PATHS)}")
        sizes = {name: entry.get("logical_core_size") for name, entry in entries.items()}
        if any(size is not None and not isinstance(size, int) for size in sizes.values()):
            raise ValueError("logical_core_size not a whole number")
        # A ConfigMap written before a node could take two claims names none: one, the group's template.
        claims = {name: dict(entry.get("claims", {})) for name, entry in entries.items()}
        if any(set(found) - {POD_DEVICE_CLAIM, POD_EFA_CLAIM} for found in claims.values()):
            raise ValueError(f"claims other than {POD_DEVICE_CLAIM}, {POD_EFA_CLAIM}")
        settings = ResolvedTeam(
            claim=data["claim"], node_group="", uid=int(data["uid"]), instance_type="", queue=data["queue"]
        )
    except (KeyError, ValueError, TypeError) as error:
        raise ValueError(
            f"{where} is not the stack's team settings ({error!r}); redeploy the stack"
        ) from None
    if not groups:
        raise ValueError(f"team {team} has no node group ({where})")
    chosen = node_group or next(iter(groups))
    if chosen not in groups:
        raise ValueError(f"team {team} may not use node group {chosen!r}; its groups: {', '.join(groups)}")
    shape = groups[chosen]
    if instance_type is not None and instance_type != shape:
        raise ValueError(
            f"node group {chosen!r} is {shape}, not {instance_type}: a Job of that shape could never be "
            f"placed there; leave --instance_type out (it follows the node group) or pick a group of {instance_type}"
        )
    if claim is not None and claim != settings.claim:
        raise ValueError(f"team {team}'s claim is {settings.claim}, not {claim}; leave --claim out")
    if uid is not None and uid != settings.uid:
        raise ValueError(f"team {team}'s uid is {settings.uid}, not {uid}; leave --uid out")
    node_claim = (
        NodeClaim(
            template=str(claims[chosen].get(POD_DEVICE_CLAIM, node_claim_template(chosen))),
            logical_core_size=sizes[chosen],
            efa_template=None if POD_EFA_CLAIM not in claims[chosen] else str(claims[chosen][POD_EFA_CLAIM]),
        )
        if paths[chosen] == DRA_DEVICES
        else None
    )
    return ResolvedTeam(
        claim=settings.claim,
        node_group=chosen,
        uid=settings.uid,
        instance_type=shape,
        queue=settings.queue,
        node_claim=node_claim,
    )
