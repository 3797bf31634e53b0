"""Scenario a: the default configuration's plan, deployed as the kubectl handler deploys it, against the
real API server with Volcano's webhook in the loop; then every step again, which must change nothing.

The order matters and is the module's: the first test deploys, the next ones read what it left.
"""

from __future__ import annotations

import json

import pytest

from cluster_facts.kubernetes_plan import ManifestSet
from config import StackConfig
from tests.cluster.control_plane import ControlPlane
from tests.cluster.plans import deployed_plan


@pytest.fixture(scope="module")
def deployed(control_plane: ControlPlane, default_config: StackConfig) -> ControlPlane:
    report = control_plane.apply_plan(deployed_plan(default_config))
    assert [r.action for r in report.steps] == ["Create"] * len(report.steps), report.steps
    return control_plane


def test_every_step_of_the_default_plan_is_accepted(
    deployed: ControlPlane, default_config: StackConfig
) -> None:
    plan = deployed_plan(default_config)
    # Each applied step became a custom resource the harness holds; nothing was refused on the way.
    assert {d.step.name for d in deployed.deployed.values()} == {s.name for s in plan.applied()}
    # Volcano's webhook answers: the readiness gate saw the CA bundle, and the queue is Open.
    state = deployed.kubectl(
        "get", "queue.scheduling.volcano.sh", "test", "-o", "jsonpath={.status.state}"
    ).stdout
    assert state == "Open"


def test_the_same_plan_again_changes_nothing(deployed: ControlPlane, default_config: StackConfig) -> None:
    """Every step updated (as if each had changed): kubectl must find every object as it stored it.
    An object rendered with an empty list or a default the server drops or fills in reports
    ``configured`` on every deployment."""
    plan = deployed_plan(default_config)
    report = deployed.apply_plan(plan, update_all=True)
    changed = report.changed_but_budgets()
    differences = deployed.stored_differences(plan)
    assert changed == [] and differences == {}, "\n".join([*changed, json.dumps(differences, indent=1)])


def test_a_fabric_check_job_applied_again_is_unchanged(
    deployed: ControlPlane, default_config: StackConfig
) -> None:
    """A fabric check's rendered Job (rendered only; `make fabric-check` applies it), applied twice
    without a delete in between: Volcano's job webhook completes each task at create (minAvailable,
    maxRetry), a second apply replaces the task list (a merge patch) and Volcano's update
    validation refuses any change to the tasks but their sizes, unless the rendering names what the
    webhook writes (k8s_charts/checks/fabric_check.py)."""
    step = deployed_plan(default_config).step(f"fabric-check-{default_config.trainium.node_groups[0].name}")
    assert isinstance(step, ManifestSet) and not step.applied
    manifests = "".join(json.dumps(m) for m in step.manifests)
    try:
        deployed.kubectl("apply", "-f", "-", input=manifests)
        again = deployed.kubectl("apply", "-f", "-", input=manifests, check=False)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip().endswith(" unchanged"), again.stdout
    finally:
        deployed.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=true", input=manifests)


def test_every_admission_policy_type_checks(deployed: ControlPlane) -> None:
    """The API server type-checks each ValidatingAdmissionPolicy's CEL against the schemas of the
    kinds it matches (status.typeChecking): a warning there is an expression that may not compile or
    evaluate as written (an error at admission refuses the request under failurePolicy Fail)."""
    checked, warnings = deployed.policy_type_checking()
    assert len(checked) >= 5, checked
    assert warnings == {}, json.dumps(warnings, indent=1)
