"""The team admission cases (tests/tenant_cases.py), judged by the real API server with the example
configuration's plan applied, as the CEL model judges them in tests/k8s/test_tenant_admission.py;
then the Jobs the example's documented TorchX commands submit (tests/torchx_dryrun.py: the real
torchx CLI), judged likewise and one of them run: created by a team member, its pods created by
Volcano's controller through the same policies and Pod Security, placed whole on the team's nodes.

Each case is one request, sent with ``--dry-run=server`` (every admission step runs, Volcano's
webhooks included, and nothing is stored) by the case's requester, impersonated: a team member as the
group its access entry maps to, Volcano's job controller and the ReplicaSet controller as their
service accounts, and the kubectl handler as a cluster admin (its EKS access entry is the cluster
admin policy). What the real server adds to the model:

- the order of admission: Pod Security (the team namespaces enforce ``restricted``) judges a pod
  before the policies, so a pod both refuse is refused with Pod Security's message;
- RBAC before both: a member's request in another team's namespace never reaches the policy, so that
  case is sent again by the admin, whom the policy judges like anyone;
- one message per refusal: the API server reports the first failed validation of a policy, so a
  case expecting several messages is checked for one of them.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from cluster_facts.kubernetes_names import NODE_GROUP_LABEL, team_rbac_group
from config import StackConfig
from k8s_charts.team_quota import CRITICAL_PRIORITY_CLASSES, DEFAULT_CONTAINER_REQUESTS, NO_CRITICAL_QUOTA
from k8s_charts.tenant_admission import JOBS_POLICY, PODS_POLICY, Message
from tests.cluster.control_plane import ControlPlane, Kubectl
from tests.cluster.nodes import group_nodes
from tests.cluster.plans import deployed_plan
from tests.cluster.runs import end_runs
from tests.conftest import EXAMPLE_CONFIG
from tests.tenant_cases import (
    CONTROLLER,
    HANDLER,
    MEMBER,
    REPLICASET_CONTROLLER,
    AdmissionCase,
    etcd_pod,
    refused_variants,
    tenant_cases,
    volcano_pod,
)
from tests.torchx_dryrun import CASES, Case, dryrun_job, other_team, submission_environment, torchx_available

CLUSTER_ADMINS = "system:masters"


@pytest.fixture(scope="module")
def example(control_plane: ControlPlane, example_config: StackConfig) -> Iterator[ControlPlane]:
    control_plane.apply_plan(deployed_plan(example_config))
    # The runs the example applies hold their names and the team's pods: the cases create them anew.
    end_runs(control_plane, [team.name for team in example_config.teams])
    yield control_plane


def _requester(plane: ControlPlane, user: str, groups: tuple[str, ...]) -> Kubectl:
    return plane.impersonate(user, [*groups, CLUSTER_ADMINS] if user == HANDLER else groups)


def _send(plane: ControlPlane, case: AdmissionCase, who: Kubectl) -> tuple[int, str]:
    body = json.dumps(case.obj)
    if case.operation == "CREATE":
        result = who("create", "--dry-run=server", "-f", "-", input=body, check=False)
        return result.returncode, result.stderr
    assert case.operation == "UPDATE" and case.old is not None, case.id
    old = json.dumps(case.old)
    # The old object as the cluster holds it (the example applies its first run), else created.
    created = plane.kubectl("get", "-f", "-", input=old, check=False).returncode != 0
    if created:
        plane.kubectl("create", "-f", "-", input=old)
    try:
        # kubectl replace reads the object's resourceVersion, then sends the update: Volcano's
        # controller writing the Job's status in between makes it a Conflict, which is no verdict.
        for _ in range(5):
            result = who("replace", "--dry-run=server", "-f", "-", input=body, check=False)
            if "the object has been modified" not in result.stderr:
                break
    finally:
        if created:
            plane.kubectl("delete", "-f", "-", "--wait=true", input=old)
    return result.returncode, result.stderr


def _verdict(plane: ControlPlane, case: AdmissionCase, how: Counter[str]) -> str | None:
    """None when the real server agrees with the case; otherwise what it did. ``how`` counts who
    decided the cases it agrees with."""
    status, error = _send(plane, case, _requester(plane, case.user, case.groups))
    if status != 0 and "cannot " in error and "is forbidden: User" in error and not case.allowed:
        # RBAC refused the requester before admission: the policy judges the admin's request too.
        how["RBAC first, then sent by the admin"] += 1
        status, error = _send(plane, case, _requester(plane, HANDLER, ()))
    if case.allowed:
        how["accepted"] += status == 0
        return None if status == 0 else f"refused: {error.strip()}"
    if status == 0:
        return "accepted"
    if "violates PodSecurity" in error:
        how["refused by Pod Security first"] += 1
        return None
    denied = f"ValidatingAdmissionPolicy '{case.policy}' with binding '{case.policy}' denied request: "
    if denied not in error:
        return f"refused otherwise: {error.strip()}"
    said = error.split(denied, 1)[1].strip()
    if any(said.startswith(message) for message in case.messages):
        how[f"refused by {case.policy}"] += 1
        return None
    return f"refused with: {said}"


def test_the_real_api_server_judges_every_team_admission_case_as_the_model_does(
    example: ControlPlane, example_config: StackConfig
) -> None:
    cases = tenant_cases(deployed_plan(example_config))
    assert len(cases) > 40
    how: Counter[str] = Counter()
    disagreements = {
        case.id: verdict for case in cases if (verdict := _verdict(example, case, how)) is not None
    }
    assert disagreements == {}, json.dumps(disagreements, indent=1)
    print(dict(how))
    # Every Job case reaches its policy (no Pod Security for Jobs): the policies decided most cases.
    refused_jobs = [c for c in cases if c.policy == JOBS_POLICY and not c.allowed]
    assert how[f"refused by {JOBS_POLICY}"] == len(refused_jobs), how


@pytest.mark.parametrize("critical", CRITICAL_PRIORITY_CLASSES)
def test_each_teams_quota_refuses_a_platform_pod_at_a_critical_priority(
    example: ControlPlane, example_config: StackConfig, critical: str
) -> None:
    """The pod policy leaves the team's etcd pods, made by the ReplicaSet controller, unjudged; the
    team's quota ``no-critical-priority`` still refuses one at a critical class, which the API
    server otherwise admits in any namespace (kubernetes#76310)."""
    plan = deployed_plan(example_config)
    controller = example.impersonate(REPLICASET_CONTROLLER)
    for team in example_config.teams:
        pod = etcd_pod(plan, team.name)
        admitted = controller("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
        assert admitted.returncode == 0, (team.name, admitted.stderr)
        pod["spec"]["priorityClassName"] = critical
        refused = controller("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
        assert refused.returncode != 0, (team.name, critical)
        assert f"exceeded quota: {NO_CRITICAL_QUOTA}" in refused.stderr, refused.stderr


def test_a_container_without_requests_gets_the_teams_defaults(
    example: ControlPlane, example_config: StackConfig
) -> None:
    """The team's LimitRange, applied by the real API server's LimitRanger: a container that asks
    for nothing is stored with the defaults (the ResourceQuota then counts them)."""
    plan = deployed_plan(example_config)
    controller = example.impersonate(REPLICASET_CONTROLLER)
    for team in example_config.teams:
        pod = etcd_pod(plan, team.name)
        for container in pod["spec"]["containers"]:
            container.pop("resources", None)
        stored = controller(
            "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod), check=False
        )
        assert stored.returncode == 0, (team.name, stored.stderr)
        for container in json.loads(stored.stdout)["spec"]["containers"]:
            assert container["resources"]["requests"] == DEFAULT_CONTAINER_REQUESTS, (team.name, container)


EXAMPLE_TORCHX = [case for case in CASES if case.config == EXAMPLE_CONFIG]
RESERVED_NAMES = Message.reserved([]).split("; reserved here")[0]
"""The reserved-name rule's message up to its list of names (which differs per plan)."""


@pytest.fixture(scope="module", params=[case.name for case in EXAMPLE_TORCHX])
def torchx_job(request: pytest.FixtureRequest) -> tuple[Case, dict[str, Any]]:
    assert torchx_available() is None, torchx_available()
    case = next(c for c in EXAMPLE_TORCHX if c.name == request.param)
    return case, dryrun_job(case)


def _torchx_cases(case: Case, job: dict[str, Any]) -> list[AdmissionCase]:
    """The Job as a member submits it and each pod Volcano creates for it (admitted); the Job broken
    one rule at a time (tests/tenant_cases.py) and named after a platform object (refused)."""
    groups = (team_rbac_group(case.namespace),)
    other_group, other_queue = other_team(case)
    renamed = copy.deepcopy(job)
    renamed["metadata"]["name"] = "etcd-server"  # Volcano would delete the team's etcd Service with it
    return [
        AdmissionCase(id="torchx", policy=JOBS_POLICY, obj=job, user=MEMBER, groups=groups, allowed=True),
        *(
            AdmissionCase(
                id=f"torchx-pod-{task}",
                policy=PODS_POLICY,
                obj=volcano_pod(job, task=task),
                user=CONTROLLER,
                allowed=True,
            )
            for task in range(len(job["spec"]["tasks"]))
        ),
        *refused_variants(job, other_group=other_group, other_queue=other_queue, groups=groups),
        AdmissionCase(
            id="named-etcd-server",
            policy=JOBS_POLICY,
            obj=renamed,
            user=MEMBER,
            groups=groups,
            allowed=False,
            messages=(RESERVED_NAMES,),
        ),
    ]


def test_the_real_api_server_judges_each_documented_torchx_job_as_the_model_does(
    example: ControlPlane, torchx_job: tuple[Case, dict[str, Any]]
) -> None:
    """tests/test_torchx_admission.py's cases for the example's documented commands, sent to the real
    server (Volcano's webhooks included) by the requester each names."""
    case, job = torchx_job
    cases = _torchx_cases(case, job)
    how: Counter[str] = Counter()
    disagreements = {c.id: verdict for c in cases if (verdict := _verdict(example, c, how)) is not None}
    assert disagreements == {}, json.dumps(disagreements, indent=1)
    assert how["accepted"] == 1 + case.nnodes, how
    refused_jobs = [c for c in cases if c.policy == JOBS_POLICY and not c.allowed]
    assert how[f"refused by {JOBS_POLICY}"] == len(refused_jobs), how


def _pods(plane: ControlPlane, job: dict[str, Any]) -> list[dict[str, Any]]:
    found = plane.kubectl.json(
        "get",
        "pods",
        "-n",
        job["metadata"]["namespace"],
        "-l",
        f"volcano.sh/job-name={job['metadata']['name']}",
    )
    return [pod for pod in found["items"] if "deletionTimestamp" not in pod["metadata"]]


def test_a_documented_torchx_job_runs_whole_on_the_teams_nodes_and_completes(
    example: ControlPlane, example_config: StackConfig
) -> None:
    """The trn1n command of docs/torchx.md, submitted by a team member: Volcano's controller creates
    every pod (each admitted by the pod policy and Pod Security); with the team's nodes added, the
    gang is bound at once, each pod on the team's group; every worker exiting 0 completes the Job."""
    [case] = [c for c in EXAMPLE_TORCHX if c.name == "example-trn1n"]
    job = dryrun_job(case)
    namespace, name = case.namespace, job["metadata"]["name"]
    group = submission_environment(case)["NODE_GROUP"]
    member = example.impersonate(MEMBER, [team_rbac_group(namespace)])
    nodes = [f"{group}-torchx-{index}" for index in range(case.nnodes)]
    member("create", "-f", "-", input=json.dumps(job))
    try:
        pending = example.wait_for(
            lambda: p if len(p := _pods(example, job)) == case.nnodes else None,
            timeout=60,
            what=f"Volcano's controller creating the {case.nnodes} pods of {name}",
        )
        assert not any(pod["spec"].get("nodeName") for pod in pending), "bound before its nodes existed"
        example.add_nodes(group_nodes(example_config, group, nodes))
        running = example.wait_for(
            lambda: (
                p
                if len(p := _pods(example, job)) == case.nnodes
                and all(pod["status"].get("phase") == "Running" for pod in p)
                else None
            ),
            timeout=90,
            what=f"{name} placed whole and running",
        )
        assert sorted(pod["spec"]["nodeName"] for pod in running) == nodes
        for node in nodes:
            labels = example.kubectl.json("get", "node", node)["metadata"]["labels"]
            assert labels[NODE_GROUP_LABEL] == group
        for pod in running:
            example.kubectl(
                "annotate", "pod", pod["metadata"]["name"], "-n", namespace, "cluster-test/exit-code=0"
            )
        example.wait_for(
            lambda: (
                example.kubectl.json("get", "jobs.batch.volcano.sh", name, "-n", namespace)
                .get("status", {})
                .get("state", {})
                .get("phase")
                == "Completed"
            ),
            timeout=60,
            what=f"{name} Completed",
        )
    finally:
        example.kubectl(
            "delete", "jobs.batch.volcano.sh", name, "-n", namespace, "--ignore-not-found", "--wait=true"
        )
        example.remove_nodes(nodes)
