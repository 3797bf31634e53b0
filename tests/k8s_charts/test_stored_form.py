"""Rendered objects carry no value the API server drops or stores otherwise (k8s_charts/stored_form.py).

The real API server's verdict is tests/cluster/test_deploy.py (a second apply of the whole plan
reports nothing ``configured``); these say what ``as_stored`` does with each case, without a server."""

from __future__ import annotations

import cdk8s
from constructs import Construct

from config import load_config
from k8s_charts.shared.admission_policy import admission_policy
from k8s_charts.stored_form import as_stored
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG
from tests.k8s_charts.manifests import synth
from tests.plans import shared_review_plan


def test_empty_resource_names_and_service_account_api_group_are_dropped() -> None:
    role = {"kind": "ClusterRole", "rules": [{"verbs": ["get"], "resources": ["nodes"], "resourceNames": []}]}
    assert as_stored(role)["rules"] == [{"verbs": ["get"], "resources": ["nodes"]}]
    named = {"kind": "Role", "rules": [{"verbs": ["get"], "resourceNames": ["x"]}]}
    assert as_stored(named) == named
    binding = {
        "kind": "ClusterRoleBinding",
        "subjects": [
            {"kind": "ServiceAccount", "name": "a", "namespace": "n", "apiGroup": ""},
            {"kind": "Group", "name": "g", "apiGroup": "rbac.authorization.k8s.io"},
        ],
    }
    assert as_stored(binding)["subjects"] == [
        {"kind": "ServiceAccount", "name": "a", "namespace": "n"},
        {"kind": "Group", "name": "g", "apiGroup": "rbac.authorization.k8s.io"},
    ]


def test_a_services_empty_external_ips_and_a_volumes_empty_class_are_dropped_a_claims_kept() -> None:
    assert as_stored({"kind": "Service", "spec": {"externalIPs": [], "type": "ClusterIP"}})["spec"] == {
        "type": "ClusterIP"
    }
    assert as_stored({"kind": "PersistentVolume", "spec": {"storageClassName": ""}})["spec"] == {}
    claim = {"kind": "PersistentVolumeClaim", "spec": {"storageClassName": ""}}
    assert as_stored(claim) == claim


def test_an_empty_environment_value_is_written_as_the_server_keeps_it() -> None:
    job = {
        "kind": "Job",
        "spec": {
            "template": {
                "spec": {"containers": [{"env": [{"name": "A", "value": ""}, {"name": "B", "value": "1"}]}]}
            }
        },
    }
    assert as_stored(job)["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "A"},
        {"name": "B", "value": "1"},
    ]
    # The input is left as it was.
    assert job["spec"]["template"]["spec"]["containers"][0]["env"][0] == {"name": "A", "value": ""}


def test_a_priority_class_that_is_not_the_default_says_nothing_about_it() -> None:
    """``globalDefault`` is a plain bool the server omits when false (tests/cluster/test_deploy.py
    found both PriorityClasses ``configured`` on every apply)."""
    rendered = {"kind": "PriorityClass", "value": 1000, "globalDefault": False}
    assert as_stored(rendered) == {"kind": "PriorityClass", "value": 1000}
    default = {"kind": "PriorityClass", "value": 1000, "globalDefault": True}
    assert as_stored(default) == default


def test_every_admission_policy_rule_names_the_servers_default_scope() -> None:
    """The server stores ``scope: "*"`` on a rule that names none (tests/cluster/test_deploy.py found
    the team and watchdog policies ``configured`` on every apply); every policy is made by
    ``admission_policy``, which writes it."""
    spec = {
        "matchConstraints": {
            "resourceRules": [
                {"apiGroups": [""], "resources": ["pods"]},
                {"apiGroups": [""], "resources": ["nodes"], "scope": "Cluster"},
            ]
        }
    }

    def chart(app: Construct) -> cdk8s.Chart:
        built = cdk8s.Chart(app, "policy")
        admission_policy(built, name="p", labels={}, spec=spec, binding_spec={"validationActions": ["Deny"]})
        return built

    [policy] = [m for m in synth(chart) if m["kind"] == "ValidatingAdmissionPolicy"]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert [rule["scope"] for rule in rules] == ["*", "Cluster"]
    assert "scope" not in spec["matchConstraints"]["resourceRules"][0]
    # Every policy of both shipped plans is made so.
    for config in (DEFAULT_CONFIG, EXAMPLE_CONFIG):
        for step in shared_review_plan(load_config(config)).manifest_sets():
            for manifest in step.manifests:
                if manifest["kind"] == "ValidatingAdmissionPolicy":
                    for rule in manifest["spec"]["matchConstraints"]["resourceRules"]:
                        assert rule.get("scope") == "*", (step.name, manifest["metadata"]["name"])
