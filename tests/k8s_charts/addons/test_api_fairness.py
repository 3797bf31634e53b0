"""ApiFairnessChart: each team's requests, and Volcano's controller's, in flow schemas of their own.

What the objects say; the real API server classifies a member's and the controller's requests into
them (tests/cluster/test_tenants_apart.py, from its response headers).
"""

from __future__ import annotations

from typing import Any

from cluster_facts.kubernetes_names import team_rbac_group
from config import load_config
from k8s_charts.addons.api_fairness import (
    FLOW_SCHEMA_PRECEDENCE,
    TEAMS_FLOW_SCHEMA,
    TEAMS_PRIORITY_LEVEL,
    VOLCANO_FLOW_SCHEMA,
    VOLCANO_PRIORITY_LEVEL,
)
from tests.conftest import EXAMPLE_CONFIG
from tests.k8s_validation import assert_valid
from tests.plans import shared_review_plan

# The API server's own flow schemas and their precedence (pkg/apis/flowcontrol/bootstrap/default.go):
# the system's come first, then ours, then every other service account and user.
_SYSTEM_BEFORE = {"exempt": 1, "probes": 2, "system-leader-election": 100, "kube-controller-manager": 800,
                  "kube-scheduler": 800, "kube-system-service-accounts": 900}  # fmt: skip
_OTHERS_AFTER = {"service-accounts": 9000, "global-default": 9900, "catch-all": 10000}


def _objects() -> dict[tuple[str, str], dict[str, Any]]:
    plan = shared_review_plan(load_config(EXAMPLE_CONFIG))
    [step] = [s for s in plan.manifest_sets() if s.name == "api-fairness"]
    assert_valid([dict(m) for m in step.manifests])
    return {(m["kind"], m["metadata"]["name"]): dict(m) for m in step.manifests}


def test_every_team_is_a_flow_of_its_own_in_the_teams_level() -> None:
    schema = _objects()[("FlowSchema", TEAMS_FLOW_SCHEMA)]["spec"]
    assert schema["priorityLevelConfiguration"] == {"name": TEAMS_PRIORITY_LEVEL}
    assert schema["distinguisherMethod"] == {"type": "ByNamespace"}
    [rule] = schema["rules"]
    assert rule["subjects"] == [
        {"kind": "Group", "group": {"name": team_rbac_group(team.name)}}
        for team in load_config(EXAMPLE_CONFIG).teams
    ]


def test_volcanos_controller_queues_apart_by_namespace() -> None:
    schema = _objects()[("FlowSchema", VOLCANO_FLOW_SCHEMA)]["spec"]
    assert schema["priorityLevelConfiguration"] == {"name": VOLCANO_PRIORITY_LEVEL}
    assert schema["distinguisherMethod"] == {"type": "ByNamespace"}
    [rule] = schema["rules"]
    assert rule["subjects"] == [
        {
            "kind": "ServiceAccount",
            "serviceAccount": {"namespace": "volcano-system", "name": "volcano-controllers"},
        }
    ]


def test_the_levels_queue_and_the_schemas_come_after_the_systems_and_before_everyone_elses() -> None:
    objects = _objects()
    for level in (TEAMS_PRIORITY_LEVEL, VOLCANO_PRIORITY_LEVEL):
        spec = objects[("PriorityLevelConfiguration", level)]["spec"]
        assert spec["type"] == "Limited" and spec["limited"]["limitResponse"]["type"] == "Queue"
    assert max(_SYSTEM_BEFORE.values()) < FLOW_SCHEMA_PRECEDENCE < min(_OTHERS_AFTER.values())
    for name in (TEAMS_FLOW_SCHEMA, VOLCANO_FLOW_SCHEMA):
        assert objects[("FlowSchema", name)]["spec"]["matchingPrecedence"] == FLOW_SCHEMA_PRECEDENCE
