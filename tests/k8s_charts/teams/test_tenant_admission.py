"""TenantAdmissionChart: a team's Volcano Jobs and pods stay on the team's nodes, queue, priority,
user and read-only data sets; Jobs cannot take a platform object's name.

The cases are data (tests/tenant_cases.py); the rendered policies' CEL judges them here, as the API
server would (tests/admission.py). A real kube-apiserver can judge the same cases once
tests/cluster/ has one.
"""

from __future__ import annotations

from typing import Any

import pytest

from cluster_facts.kubernetes_names import TEAM_NAMESPACE_LABEL
from cluster_facts.kubernetes_plan import KubernetesLayerPlan, ManifestSet
from config import load_config
from k8s_charts.plan import QueueValues, TeamValues, _tenant_admission_values
from k8s_charts.teams.team_quota import TeamQuota
from k8s_charts.teams.tenant_admission import (
    JOBS_POLICY,
    PODS_POLICY,
    Message,
    PlatformPod,
    TeamPlacement,
    TenantAdmissionChart,
    reserved_job_names,
)
from tests.admission import Decision
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG
from tests.k8s_charts.manifests import synth
from tests.k8s_validation import assert_valid
from tests.plans import shared_review_plan
from tests.tenant_cases import (
    HANDLER,
    AdmissionCase,
    decide,
    plan_namespace_labels,
    reserved_name_cases,
    tenant_admission_manifests,
    tenant_cases,
    volcano_pod,
)

PLAN = shared_review_plan(load_config(EXAMPLE_CONFIG))
MANIFESTS = tenant_admission_manifests(PLAN)
LABELS = plan_namespace_labels(PLAN)
RESERVED = reserved_job_names(
    sorted(
        {
            m["metadata"]["name"]
            for step in PLAN.manifest_sets()
            for m in step.manifests
            if m.get("metadata", {}).get("namespace") in ("training", "research")
            and not m["apiVersion"].startswith("batch.volcano.sh/")
        }
    )
)
CASES = [*tenant_cases(PLAN), *reserved_name_cases(PLAN, Message.reserved(RESERVED))]


def verdict(case: AdmissionCase) -> Decision:
    return decide(MANIFESTS, case, LABELS[case.namespace])


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_each_case_gets_its_verdict_and_messages(case: AdmissionCase) -> None:
    decision = verdict(case)
    assert decision.matched == case.judged, decision
    assert decision.allowed == case.allowed, decision.messages
    assert sorted(decision.messages) == sorted(case.messages)


def test_every_rule_is_exercised_by_a_refused_case() -> None:
    messages = {
        validation["message"]
        for m in MANIFESTS
        if m["kind"] == "ValidatingAdmissionPolicy"
        for validation in m["spec"]["validations"]
    }
    refused = {message for case in CASES for message in case.messages}
    # The adoption rule's message is its messageExpression's (it names the Job): its case is by id.
    assert messages - refused <= {Message.TEMPLATES, Message.ADOPTED}, messages - refused
    assert any(case.id == "the-stack-applies-over-a-job-it-did-not-create" for case in CASES)


def test_every_object_is_valid_and_named() -> None:
    assert_valid([dict(m) for m in MANIFESTS])
    assert sorted((m["kind"], m["metadata"]["name"]) for m in MANIFESTS) == sorted(
        (kind, name)
        for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
        for name in (JOBS_POLICY, PODS_POLICY)
    )


def test_the_reserved_names_are_every_platform_object_in_the_team_namespaces() -> None:
    for name in ("default-deny", "volcano-job-pods", "etcd-server", "trainium-team-member", "team-quota"):
        assert name in RESERVED
    # The name of a platform object less a suffix Volcano appends is reserved too.
    assert reserved_job_names(["x-svc", "y-ssh", "z-head-svc", "w"]) == (
        "w", "x", "x-svc", "y", "y-ssh", "z", "z-head", "z-head-svc",
    )  # fmt: skip


def test_a_job_of_any_other_name_is_still_admitted() -> None:
    [case] = [c for c in CASES if c.id == "a-member-submits-the-run-under-a-name-of-their-own"]
    for name in ("default-deny-2", "my-etcd-server", "bert"):
        job = {**case.obj, "metadata": {**case.obj["metadata"], "name": name}}
        assert verdict(AdmissionCase(**{**case.__dict__, "obj": job})).allowed, name


def test_only_creates_are_judged_for_names() -> None:
    [case] = [c for c in CASES if c.id == "job-named-etcd-server"]
    update = AdmissionCase(
        **{**case.__dict__, "id": "u", "operation": "UPDATE", "old": case.obj, "user": "admin"}
    )
    assert verdict(update).allowed


def test_a_namespace_labelled_as_a_teams_but_unknown_to_the_policy_admits_nothing() -> None:
    [case] = [c for c in CASES if c.id == "a-member-submits-the-run-under-a-name-of-their-own"]
    job = {**case.obj, "metadata": {**case.obj["metadata"], "namespace": "rogue"}}
    decision = decide(
        MANIFESTS, AdmissionCase(**{**case.__dict__, "obj": job}), {TEAM_NAMESPACE_LABEL: "rogue"}
    )
    assert not decision.allowed and Message.JOB_QUEUE in decision.messages


def test_other_namespaces_are_not_judged() -> None:
    [case] = [c for c in CASES if c.id == "job-run-as-root"]
    job = {**case.obj, "metadata": {**case.obj["metadata"], "namespace": "trainium-system"}}
    decision = decide(MANIFESTS, AdmissionCase(**{**case.__dict__, "obj": job}), LABELS["trainium-system"])
    assert decision == Decision(matched=False, allowed=True)


# --- The plan -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [DEFAULT_CONFIG, EXAMPLE_CONFIG], ids=["default", "example"])
def test_every_run_of_the_plan_and_its_pods_are_admitted(config: Any) -> None:
    plan = shared_review_plan(load_config(config))
    manifests = tenant_admission_manifests(plan)
    labels = plan_namespace_labels(plan)
    runs = [m for step in plan.manifest_sets() if step.name.startswith("run-") for m in step.manifests]
    assert runs
    for job in runs:
        for case in (
            AdmissionCase(id="job", policy=JOBS_POLICY, obj=dict(job), user=HANDLER, allowed=True),
            AdmissionCase(id="pod", policy=PODS_POLICY, obj=volcano_pod(dict(job)), user="x", allowed=True),
        ):
            decision = decide(manifests, case, labels[case.namespace])
            assert decision == Decision(matched=True, allowed=True), (job["metadata"]["name"], decision)


def _team_namespace_workloads(plan: KubernetesLayerPlan) -> list[dict[str, Any]]:
    teams = {name for name, labels in plan_namespace_labels(plan).items() if TEAM_NAMESPACE_LABEL in labels}
    return [
        dict(m)
        for step in plan.manifest_sets()
        for m in step.manifests
        if m.get("metadata", {}).get("namespace") in teams and "template" in m.get("spec", {})
    ]


@pytest.mark.parametrize("config", [DEFAULT_CONFIG, EXAMPLE_CONFIG], ids=["default", "example"])
def test_every_platform_pod_of_a_team_namespace_is_left_to_the_platform(config: Any) -> None:
    """Enumerated from the plan: each StatefulSet the platform runs in a team namespace (etcd) gets
    pods the policy does not judge; anything else there would fail the plan."""
    plan = shared_review_plan(load_config(config))
    workloads = _team_namespace_workloads(plan)
    assert {m["kind"] for m in workloads} == {"StatefulSet"}
    manifests = tenant_admission_manifests(plan)
    labels = plan_namespace_labels(plan)
    for statefulset in workloads:
        template = statefulset["spec"]["template"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                **template["metadata"],
                "name": f"{statefulset['metadata']['name']}-0",
                "namespace": statefulset["metadata"]["namespace"],
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "StatefulSet",
                        "name": statefulset["metadata"]["name"],
                        "uid": "u",
                        "controller": True,
                    }
                ],
            },
            "spec": template["spec"],
        }
        case = AdmissionCase(
            id="platform",
            policy=PODS_POLICY,
            obj=pod,
            user="system:serviceaccount:kube-system:statefulset-controller",
            allowed=True,
            judged=False,
        )
        assert decide(manifests, case, labels[case.namespace]) == Decision(matched=False, allowed=True)


def test_a_workload_the_policy_cannot_exempt_in_a_team_namespace_fails_the_plan() -> None:
    plan = shared_review_plan(load_config(DEFAULT_CONFIG))
    steps = list(plan.steps)
    daemons = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "x", "namespace": "training"},
        "spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {}}},
    }
    steps.append(ManifestSet(name="extra", manifests=(daemons,)))
    with pytest.raises(ValueError, match="DaemonSet x in a team namespace"):
        _tenant_admission_values(steps, (_team_values(),))


def _team_values() -> TeamValues:
    return TeamValues(
        name="training",
        queue=QueueValues(name="test", capability={}),
        member_group="g",
        uid=100001,
        node_groups=("trn1-32xl",),
        quota=TeamQuota(pods=2, cpu=1, memory_gib=1, neuron_devices=16),
    )


@pytest.mark.parametrize("config", [DEFAULT_CONFIG, EXAMPLE_CONFIG], ids=["default", "example"])
def test_the_plan_applies_the_policy_before_the_team_namespaces_and_every_run(config: Any) -> None:
    plan = shared_review_plan(load_config(config))
    names = plan.names
    assert names.index("team-admission") < names.index("training-namespace")
    teams = plan.step("training-namespace")
    assert "team-admission" in teams.after and "priority-classes" in teams.after
    for step in plan.manifest_sets():
        if step.name.startswith("run-"):
            assert "team-admission" in step.after


# --- The chart ----------------------------------------------------------------------------------------


def test_the_chart_needs_a_team_and_each_team_a_queue_and_groups() -> None:
    with pytest.raises(ValueError, match="at least one team"):
        synth(
            lambda app: TenantAdmissionChart(
                app, "x", teams=[], read_only_claims=[], platform_object_names=[], platform_pods=[]
            )
        )
    with pytest.raises(ValueError, match="node groups"):
        TeamPlacement(namespace="a", queue="a", node_groups=())


def test_without_platform_pods_every_pod_is_judged() -> None:
    manifests = synth(
        lambda app: TenantAdmissionChart(
            app,
            "x",
            teams=[TeamPlacement(namespace="training", queue="test", node_groups=("g",))],
            read_only_claims=[],
            platform_object_names=[],
            platform_pods=[],
        )
    )
    [pods] = [
        m
        for m in manifests
        if m["kind"] == "ValidatingAdmissionPolicy" and m["metadata"]["name"] == PODS_POLICY
    ]
    assert pods["spec"]["matchConditions"][0]["expression"] == "!(false)"
    assert PlatformPod(labels={"a": "b"}).owner_kind == "ReplicaSet"


# --- Done when: a member of one team, with the team's Role, cannot ... ---------------------------------


def team_role_allows(verb: str, group: str, resource: str, namespace: str = "training") -> bool:
    """Whether the team's Role (as the plan renders it) grants ``verb`` on ``group``/``resource``."""
    [role] = [
        m
        for step in PLAN.manifest_sets()
        for m in step.manifests
        if m["kind"] == "Role" and m["metadata"] == {"name": "trainium-team-member", "namespace": namespace}
    ]
    return any(
        group in rule.get("apiGroups", [])
        and resource in rule.get("resources", [])
        and verb in rule.get("verbs", [])
        for rule in role["rules"]
    )


def refused(case_id: str, message: str) -> None:
    [case] = [c for c in CASES if c.id == case_id]
    decision = verdict(case)
    assert decision.matched and not decision.allowed and message in decision.messages, (case_id, decision)


def test_a_team_member_creates_pods_only_through_volcano_jobs() -> None:
    """The Role's only writes: Volcano Jobs (create, delete) and port-forwards; so every pod of a team
    comes from Volcano's job controller, judged by both policies."""
    assert team_role_allows("create", "batch.volcano.sh", "jobs")
    for resource in ("pods", "deployments", "replicasets", "statefulsets", "daemonsets", "jobs"):
        for group in ("", "apps", "batch"):
            assert not team_role_allows("create", group, resource), (group, resource)
    assert not team_role_allows("update", "batch.volcano.sh", "jobs")
    assert not team_role_allows("patch", "", "pods")


def test_a_team_member_cannot_run_as_root_on_any_node() -> None:
    for variant in ("run-as-root", "run-as-non-root-false", "no-security-context", "container-runs-as-root"):
        refused(f"job-{variant}", Message.NON_ROOT)
        refused(f"pod-{variant}", Message.NON_ROOT)


def test_a_team_member_cannot_write_a_data_set() -> None:
    for variant in ("data-set-claim-writable", "data-set-mount-writable"):
        refused(f"job-{variant}", Message.READ_ONLY)
        refused(f"pod-{variant}", Message.READ_ONLY)
    refused("job-names-the-data-sets-claim-in-its-volumes", Message.READ_ONLY)
    # Nor through root on an unsquashed node (refused above), nor by placing a pod there (below).


def test_a_team_member_cannot_run_on_a_system_node_or_another_teams_group() -> None:
    for variant in ("another-team-group", "system-node-by-zone", "no-node-selector"):
        refused(f"job-{variant}", Message.NODE_GROUP)
        refused(f"pod-{variant}", Message.NODE_GROUP)
    for variant in ("node-name", "default-scheduler", "tolerates-everything", "tolerates-cordons"):
        [case] = [c for c in CASES if c.id == f"job-{variant}"]
        assert not verdict(case).allowed, variant


def test_a_team_member_cannot_use_another_queue_or_the_default_queue() -> None:
    refused("job-another-teams-queue", Message.JOB_QUEUE)
    refused("job-volcanos-default-queue", Message.JOB_QUEUE)
    refused("pod-another-teams-queue", Message.POD_QUEUE)
    refused("pod-volcanos-default-queue", Message.POD_QUEUE)


def test_a_team_member_cannot_set_a_critical_priority() -> None:
    """Refused by the policy (any class but the team's), and by the namespace's quota on the critical
    classes should the policy ever be missing (tests/k8s_charts/teams/test_team_quota.py)."""
    for variant in ("critical-priority-on-the-template", "critical-priority-on-the-job", "no-priority"):
        refused(f"job-{variant}", Message.PRIORITY)
        refused(f"pod-{variant}", Message.PRIORITY)
    [quota] = [
        m
        for step in PLAN.manifest_sets()
        for m in step.manifests
        if m["kind"] == "ResourceQuota"
        and m["metadata"] == {"name": "no-critical-priority", "namespace": "training"}
    ]
    assert quota["spec"]["hard"] == {"pods": "0"}


def test_a_team_member_cannot_delete_a_platform_policy() -> None:
    """Not directly (the Role writes no NetworkPolicy, Service, ConfigMap, Secret, quota or RBAC), and
    not through Volcano, which deletes the Service and NetworkPolicy named after a deleted Job."""
    for group, resource in (
        ("networking.k8s.io", "networkpolicies"),
        ("", "services"),
        ("", "configmaps"),
        ("", "secrets"),
        ("", "resourcequotas"),
        ("", "limitranges"),
        ("rbac.authorization.k8s.io", "roles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("admissionregistration.k8s.io", "validatingadmissionpolicies"),
    ):
        for verb in ("delete", "update", "patch", "create"):
            assert not team_role_allows(verb, group, resource), (verb, group, resource)
    reserved = Message.reserved(RESERVED)
    for name in ("default-deny", "volcano-job-pods", "etcd-server"):
        refused(f"job-named-{name}", reserved)
