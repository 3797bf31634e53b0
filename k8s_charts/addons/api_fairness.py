"""API Priority and Fairness: a team's requests, and Volcano's work for it, queue apart from another's.

Without this, every team member's request falls into the API server's ``global-default`` flow schema
and every service account's, Volcano's controller included, into ``service-accounts``, one flow per
user: a team that floods the API server queues ahead of another (flowcontrol.apiserver.k8s.io/v1,
GA in Kubernetes 1.29; the API server's defaults, pkg/apis/flowcontrol/bootstrap/default.go).

- ``trainium-teams`` (PriorityLevelConfiguration, queued): the FlowSchema ``trainium-teams`` matches
  every team's Kubernetes group, with one flow per namespace (``ByNamespace``): a team acts only in
  its namespace, so each team is its own flow and the API server's fair queuing serves the teams in
  turn, however many members or requests one of them has. One schema for every team, not one per
  team: kubectl's prune leaves flow-control objects alone (a dropped team's schema would stay).
- ``trainium-volcano`` (queued): Volcano's controller (its service account), one flow per
  namespace, so its requests for one team's Jobs (pod creations, status) queue apart from those for
  another's. Volcano's own client-side limits cannot be told apart: one token bucket for all its
  requests (the chart's ``controller_kube_api_qps``, 50, and burst 100) and three job workers that
  take Jobs by a hash of their name (pkg/controllers/job/job_controller.go ``getWorkerQueue``). Those
  are fenced before Volcano sees a Job: the team admission policy refuses Jobs whose pods would be
  refused, and bounds a Job's replicas (k8s_charts/teams/tenant_job_rules.py).

Precedence 1000: after the API server's own system schemas (below 1000: exempt, probes, leader
election, nodes, the controller manager, the scheduler, kube-system's service accounts) and before
``service-accounts`` (9000) and ``global-default`` (9900).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cdk8s
from constructs import Construct

from cluster_facts.kubernetes_names import team_rbac_group

__all__ = [
    "FLOW_SCHEMA_PRECEDENCE",
    "TEAMS_FLOW_SCHEMA",
    "TEAMS_PRIORITY_LEVEL",
    "VOLCANO_FLOW_SCHEMA",
    "VOLCANO_PRIORITY_LEVEL",
    "ApiFairnessChart",
]

_API_VERSION = "flowcontrol.apiserver.k8s.io/v1"
TEAMS_PRIORITY_LEVEL = "trainium-teams"
TEAMS_FLOW_SCHEMA = "trainium-teams"
VOLCANO_PRIORITY_LEVEL = "trainium-volcano"
VOLCANO_FLOW_SCHEMA = "trainium-volcano-controllers"
FLOW_SCHEMA_PRECEDENCE = 1000
_LABELS = {"app.kubernetes.io/name": "trainium-api-fairness"}
# Shares of the API server's concurrency: the teams as much as the global-default level they came
# from (20), Volcano's controller as much as workload-high (40). Queuing as the API server's own
# defaults write it (64 queues, hand size 8, 50 requests each), written out so that a second apply
# finds nothing to change.
_TEAMS_SHARES = 20
_VOLCANO_SHARES = 40
_QUEUING = {"queues": 64, "handSize": 8, "queueLengthLimit": 50}
_EVERYTHING = {
    "resourceRules": [
        {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"], "clusterScope": True}
    ],
    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
}


def _priority_level(scope: Construct, id: str, name: str, shares: int) -> None:
    level = cdk8s.ApiObject(
        scope,
        id,
        api_version=_API_VERSION,
        kind="PriorityLevelConfiguration",
        metadata=cdk8s.ApiObjectMetadata(name=name, labels=dict(_LABELS)),
    )
    limited = {
        "nominalConcurrencyShares": shares,
        "lendablePercent": 0,
        "limitResponse": {"type": "Queue", "queuing": dict(_QUEUING)},
    }
    level.add_json_patch(cdk8s.JsonPatch.add("/spec", {"type": "Limited", "limited": limited}))


def _flow_schema(scope: Construct, id: str, name: str, level: str, subjects: list[dict[str, Any]]) -> None:
    schema = cdk8s.ApiObject(
        scope,
        id,
        api_version=_API_VERSION,
        kind="FlowSchema",
        metadata=cdk8s.ApiObjectMetadata(name=name, labels=dict(_LABELS)),
    )
    spec = {
        "priorityLevelConfiguration": {"name": level},
        "matchingPrecedence": FLOW_SCHEMA_PRECEDENCE,
        "distinguisherMethod": {"type": "ByNamespace"},
        "rules": [{"subjects": subjects, **_EVERYTHING}],
    }
    schema.add_json_patch(cdk8s.JsonPatch.add("/spec", spec))


class ApiFairnessChart(cdk8s.Chart):
    """The two priority levels, the teams' flow schema and Volcano's controller's."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        teams: Sequence[str],
        volcano_controller: tuple[str, str],
    ) -> None:
        super().__init__(scope, id)
        if not teams:
            raise ValueError("ApiFairnessChart: at least one team is needed")
        _priority_level(self, "TeamsLevel", TEAMS_PRIORITY_LEVEL, _TEAMS_SHARES)
        _priority_level(self, "VolcanoLevel", VOLCANO_PRIORITY_LEVEL, _VOLCANO_SHARES)
        _flow_schema(
            self,
            "Teams",
            TEAMS_FLOW_SCHEMA,
            TEAMS_PRIORITY_LEVEL,
            [{"kind": "Group", "group": {"name": team_rbac_group(team)}} for team in teams],
        )
        namespace, account = volcano_controller
        _flow_schema(
            self,
            "Volcano",
            VOLCANO_FLOW_SCHEMA,
            VOLCANO_PRIORITY_LEVEL,
            [{"kind": "ServiceAccount", "serviceAccount": {"namespace": namespace, "name": account}}],
        )
