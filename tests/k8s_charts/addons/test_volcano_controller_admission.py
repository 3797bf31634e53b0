"""VolcanoControllerAdmissionChart: Volcano's controller writes only what a Volcano Job owns, where Jobs run.

The rendered policy's CEL, judged by the model of tests/admission.py; the real API server judges the
same requests with the plan applied (tests/cluster/test_tenants_apart.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from config import load_config
from k8s_charts.addons.volcano_controller_admission import POLICY_NAME, VolcanoControllerAdmissionChart
from k8s_charts.teams.job_pod_admission import volcano_controller
from tests.admission import admission_request, admit
from tests.conftest import EXAMPLE_CONFIG
from tests.k8s_charts.manifests import synth
from tests.k8s_validation import assert_valid
from tests.plans import shared_review_plan

CONTROLLER = volcano_controller(namespace="volcano-system", release="volcano")
JOB_OWNER = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "name": "bert",
    "uid": "0f0c0000-0000-4000-8000-000000000001",
    "controller": True,
    "blockOwnerDeletion": True,
}
MANIFESTS = synth(
    lambda app: VolcanoControllerAdmissionChart(
        app, "v", controller_username=CONTROLLER, namespaces=("training", "trainium-system")
    )
)
# (resource, group, kind) of what the policy judges.
SERVICE = ("services", "", "Service")
NETWORK_POLICY = ("networkpolicies", "networking.k8s.io", "NetworkPolicy")


def _object(kind: str, name: str, namespace: str, *, owned: bool) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if owned:
        metadata["ownerReferences"] = [JOB_OWNER]
    return {"apiVersion": "v1", "kind": kind, "metadata": metadata}


def _judge(
    operation: str,
    what: tuple[str, str, str],
    obj: dict[str, Any] | None,
    old: dict[str, Any] | None,
    *,
    namespace: str = "training",
    user: str = CONTROLLER,
) -> tuple[bool, bool]:
    resource, group, kind = what
    request = admission_request(
        user=user, operation=operation, resource=resource, name="x", namespace=namespace, kind=kind,
        group=group, version="v1",
    )  # fmt: skip
    decision = admit(list(MANIFESTS), request, obj=obj, old=old)
    return decision.matched, decision.allowed


def test_the_policy_is_valid_and_the_plan_applies_it_before_volcano() -> None:
    assert_valid(list(MANIFESTS))
    plan = shared_review_plan(load_config(EXAMPLE_CONFIG))
    names = [step.name for step in plan.steps]
    assert names.index("volcano-controller-admission") < names.index("volcano")
    [step] = [s for s in plan.manifest_sets() if s.name == "volcano-controller-admission"]
    [policy] = [m for m in step.manifests if m["kind"] == "ValidatingAdmissionPolicy"]
    assert policy["metadata"]["name"] == POLICY_NAME
    assert "'research', 'training', 'trainium-system'" in str(policy["spec"]["validations"])


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
def test_the_controller_writes_its_jobs_objects(operation: str) -> None:
    owned = _object("Service", "bert", "training", owned=True)
    obj = None if operation == "DELETE" else owned
    old = None if operation == "CREATE" else owned
    assert _judge(operation, SERVICE, obj, old) == (True, True)


@pytest.mark.parametrize(
    ("operation", "what", "namespace", "owned"),
    [
        ("DELETE", NETWORK_POLICY, "training", False),  # a team's default-deny
        ("DELETE", SERVICE, "training", False),  # the team's etcd
        ("CREATE", SERVICE, "training", False),  # a Service no Job owns
        ("CREATE", SERVICE, "kube-system", True),  # outside the Jobs' namespaces
        ("DELETE", SERVICE, "kube-system", True),
    ],
)
def test_the_controller_may_not_touch_what_no_job_owns_or_write_elsewhere(
    operation: str, what: tuple[str, str, str], namespace: str, owned: bool
) -> None:
    stored = _object(what[2], "default-deny", namespace, owned=owned)
    obj = None if operation == "DELETE" else stored
    old = stored if operation != "CREATE" else None
    assert _judge(operation, what, obj, old, namespace=namespace) == (True, False)


def test_an_update_that_adds_an_owner_to_someone_elses_object_is_refused() -> None:
    mine = _object("Service", "etcd-server", "training", owned=True)
    theirs = _object("Service", "etcd-server", "training", owned=False)
    assert _judge("UPDATE", SERVICE, mine, theirs) == (True, False)


def test_no_priority_class_or_crd() -> None:
    request = admission_request(
        user=CONTROLLER, operation="CREATE", resource="priorityclasses", name="x", kind="PriorityClass",
        group="scheduling.k8s.io", version="v1",
    )  # fmt: skip
    decision = admit(list(MANIFESTS), request, obj={"metadata": {"name": "x"}}, old=None)
    assert decision.matched and not decision.allowed


def test_no_one_else_is_judged() -> None:
    theirs = _object("NetworkPolicy", "default-deny", "training", owned=False)
    assert _judge("DELETE", NETWORK_POLICY, None, theirs, user="kubernetes-admin") == (False, True)
