"""What each documented TorchX command submits gets through the team admission policies.

For every command of docs/torchx.md (tests/torchx_dryrun.py: the real torchx CLI from .venv-torchx),
against the policies its configuration renders (k8s_charts/teams/tenant_admission.py): the Volcano Job as
a team member submits it is admitted, and so is every pod Volcano's job controller creates for it
(``volcano_pod``: the template with the Job's priority class, Volcano's labels and owner, after the
API server's defaulting and ExtendedResourceToleration); the same Job broken one rule at a time is
refused with that rule's message, the Job and its pods alike. The verdicts are the CEL model's
(tests/admission.py), as in tests/k8s_charts/teams/test_tenant_admission.py. The real API server, with
Volcano's webhooks and controller, judges every case here the same way and runs
each Job (tests/cluster/torchx_jobs.py).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from cluster_facts.kubernetes_names import (
    DATASETS_ROOT,
    NODE_GROUP_LABEL,
    TRAINING_PRIORITY_CLASS,
    team_rbac_group,
)
from config import load_config
from k8s_charts.teams.tenant_admission import JOBS_POLICY, PODS_POLICY, Message
from tests.admission import Decision
from tests.plans import shared_review_plan
from tests.pod_security import violations
from tests.tenant_cases import (
    CONTROLLER,
    MEMBER,
    RESERVED_NAMES,
    AdmissionCase,
    decide,
    plan_namespace_labels,
    refused_variants,
    tenant_admission_manifests,
    volcano_pod,
)
from tests.torchx_dryrun import CASES, Case, dryrun_job, other_team, submission_environment, torchx_available

pytestmark = pytest.mark.process

BY_NAME = {case.name: case for case in CASES}


@pytest.fixture(scope="module", params=[case.name for case in CASES])
def submitted(request: pytest.FixtureRequest) -> tuple[Case, dict[str, Any]]:
    assert torchx_available() is None, torchx_available()
    case = BY_NAME[request.param]
    return case, dryrun_job(case)


def judge(case: Case, admission: AdmissionCase) -> Decision:
    plan = shared_review_plan(load_config(case.config))
    labels = plan_namespace_labels(plan)
    return decide(tenant_admission_manifests(plan), admission, labels[case.namespace])


def as_submitted(case: Case, job: dict[str, Any], *, id: str = "torchx") -> AdmissionCase:
    return AdmissionCase(
        id=id,
        policy=JOBS_POLICY,
        obj=job,
        user=MEMBER,
        groups=(team_rbac_group(case.namespace),),
        allowed=True,
    )


def test_the_job_a_member_submits_is_admitted(submitted: tuple[Case, dict[str, Any]]) -> None:
    case, job = submitted
    assert judge(case, as_submitted(case, job)) == Decision(matched=True, allowed=True)


def test_every_pod_volcano_creates_for_it_is_admitted(submitted: tuple[Case, dict[str, Any]]) -> None:
    case, job = submitted
    assert len(job["spec"]["tasks"]) == case.nnodes  # TorchX renders one task per replica
    for task in range(case.nnodes):
        pod = volcano_pod(job, task=task)
        decision = judge(
            case, AdmissionCase(id="pod", policy=PODS_POLICY, obj=pod, user=CONTROLLER, allowed=True)
        )
        assert decision == Decision(matched=True, allowed=True), (task, decision)


def test_the_pods_run_as_the_teams_uid_on_its_node_group_from_the_start(
    submitted: tuple[Case, dict[str, Any]],
) -> None:
    """What the policies require, as the component renders it: the values of the configuration, the
    data sets' claim read-only on the volume, and a pod that passes Pod Security's restricted level."""
    case, job = submitted
    environment = submission_environment(case)
    uid = int(environment["TEAM_UID"])
    assert job["spec"]["priorityClassName"] == TRAINING_PRIORITY_CLASS
    for task in job["spec"]["tasks"]:
        spec = task["template"]["spec"]
        assert spec["nodeSelector"][NODE_GROUP_LABEL] == environment["NODE_GROUP"]
        assert spec["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": uid,
            "runAsGroup": uid,
            "seccompProfile": {"type": "RuntimeDefault"},
        }
        assert spec["automountServiceAccountToken"] is False
        [container] = spec["containers"]
        datasets = next(m["name"] for m in container["volumeMounts"] if m["mountPath"] == DATASETS_ROOT)
        [volume] = [v for v in spec["volumes"] if v["name"] == datasets]
        assert volume["persistentVolumeClaim"] == {
            "claimName": f"{environment['CLAIM']}-datasets",
            "readOnly": True,
        }
        assert violations(spec, "restricted") == []


def test_each_rule_broken_is_still_refused(submitted: tuple[Case, dict[str, Any]]) -> None:
    """The documented Job with one thing changed, for every rule: the Job and its pod are refused
    with that rule's message and no other."""
    case, job = submitted
    other_group, other_queue = other_team(case)
    cases = refused_variants(
        job,
        other_group=other_group,
        other_queue=other_queue,
        groups=(team_rbac_group(case.namespace),),
    )
    renamed = copy.deepcopy(job)
    renamed["metadata"]["name"] = "etcd-server"  # Volcano would delete the team's etcd Service with it
    decision = judge(case, as_submitted(case, renamed, id="named-etcd-server"))
    assert not decision.allowed, decision
    assert [message.split("; reserved here")[0] for message in decision.messages] == [RESERVED_NAMES]
    refused_messages = set()
    for admission in cases:
        decision = judge(case, admission)
        assert decision.matched and not decision.allowed, (admission.id, decision)
        assert sorted(decision.messages) == sorted(admission.messages), (admission.id, decision)
        refused_messages |= set(decision.messages)
    rules = {
        validation["message"]
        for manifest in tenant_admission_manifests(shared_review_plan(load_config(case.config)))
        if manifest["kind"] == "ValidatingAdmissionPolicy"
        for validation in manifest["spec"]["validations"]
    }
    # Every rule but the pod-template one (TorchX always renders templates), the reserved names
    # (above), and those of the stack's applied runs and a run's stuck-run override: their cases are
    # the runs' own (tests/tenant_cases.py, judged by tests/k8s_charts/teams/test_tenant_admission.py and the tier).
    runs_own = (Message.APPLIED_NAME, Message.ADOPTED, "annotation trainium/stuck-minutes ")
    assert {
        rule
        for rule in rules - refused_messages
        if not rule.startswith(RESERVED_NAMES) and not rule.startswith(runs_own)
    } == {Message.TEMPLATES}
