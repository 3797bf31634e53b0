"""Issue 34, tenants apart (round three): what one team could do to another through the shared machinery,
asked of the real API server, scheduler and Volcano with the example configuration's two teams
(``training``, team A; ``research``, team B). Each escape an attacker's review found is sent as a
member of A sends it and must be refused (or contained); its benign neighbour is still admitted and runs.

- scheduling terms: an anti-affinity term over B's pods (or the platform's), by namespace selector or
  by name, on a topology every node shares (``kubernetes.io/os``, the zone) or on a node, and a
  same-namespace term on a cluster-wide topology, are refused; a same-namespace term on one node is
  admitted, its pod placed, and B's run still binds;
- load: Jobs of 1,500 replicas whose pods Pod Security refuses, and Jobs of 1 MiB, are refused at the
  Job (Volcano never loops on them), and B's one-pod run binds in seconds; the object quota counts
  Volcano Jobs; requests of a team and of Volcano's controller are classified into their own flow
  schemas (API Priority and Fairness);
- deputies: Volcano is not made to create a claim or a plugin's objects the team may not, and its
  controller's token may delete or change nothing a Volcano Job does not own (a team's
  default-deny, a platform object), while its own Jobs' objects come and go;
- overrides: a stuck-minutes annotation above the configured ceiling, a maxRetry above the most a run
  may have, are refused;
- names: a member may not create a Job under an applied run's name, and a redeploy meeting a Job the
  stack did not create fails with a line naming it;
- the worker script: each team namespace holds run_worker.sh's ConfigMap, which the runs' pods name,
  the API server keeps immutable and no member may write.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from cluster_facts.kubernetes_names import (
    NEURON_RESOURCE,
    PLATFORM_NAMESPACE,
    STUCK_MINUTES_ANNOTATION,
    VOLCANO_JOB_NAME_LABEL,
    team_rbac_group,
)
from cluster_facts.kubernetes_plan import ManifestSet
from config import StackConfig
from k8s_charts.addons.api_fairness import TEAMS_FLOW_SCHEMA, VOLCANO_FLOW_SCHEMA
from k8s_charts.addons.volcano_controller_admission import POLICY_NAME as CONTROLLER_POLICY
from k8s_charts.runs.worker_script import (
    WORKER_SCRIPT,
    WORKER_SCRIPT_CONFIGMAP,
    WORKER_SCRIPT_FILE,
    WORKER_SCRIPT_PATH,
    WORKER_SCRIPT_VOLUME,
)
from k8s_charts.teams.team_quota import OBJECTS_QUOTA
from k8s_charts.teams.tenant_admission import JOBS_POLICY, Message
from tests.cluster.control_plane import ControlPlane, Kubectl
from tests.cluster.nodes import group_nodes
from tests.cluster.plans import deployed_plan
from tests.cluster.runs import end_runs, run_handle
from tests.tenant_cases import MEMBER_JOB_NAME, blocker_terms

A, B = "training", "research"
GROUPS = {A: "trn1n-32xl", B: "trn1-32xl-block"}
NODES = 2
BOUND_WITHIN_SECONDS = 10.0
"""B's one-pod run is bound within this long of its creation while A floods (0.5 s unloaded; the
attacker measured 295.7 s before this fence)."""


@pytest.fixture(scope="module")
def example(control_plane: ControlPlane, example_config: StackConfig) -> Iterator[ControlPlane]:
    control_plane.apply_plan(deployed_plan(example_config))
    end_runs(control_plane, [A, B])
    names = [
        name
        for team, group in GROUPS.items()
        for name in control_plane.add_nodes(
            group_nodes(example_config, group, (f"{group}-apart-{i}" for i in range(NODES)))
        )
    ]
    yield control_plane
    end_runs(control_plane, [A, B])
    control_plane.remove_nodes(names)


@pytest.fixture(autouse=True)
def _each_test_on_its_own(example: ControlPlane) -> Iterator[None]:
    """Every Job a test leaves is ended after it: an admitted blocker would keep later tests' pods off
    every node (as it did, run against the code before this fence)."""
    yield
    end_runs(example, [A, B])


def member(plane: ControlPlane, team: str) -> Kubectl:
    return plane.impersonate(f"member@{team}", [team_rbac_group(team)])


def one_pod_job(plane: ControlPlane, config: StackConfig, team: str, name: str) -> dict[str, Any]:
    """The team's run (the stack's, from the plan) as a member's own Job of one pod."""
    run = next(r for r in config.runs if (r.team or config.teams[0].name) == team)
    job = copy.deepcopy(run_handle(plane, deployed_plan(config), run.name).job)
    job["metadata"] = {"name": name, "namespace": team, "labels": job["metadata"].get("labels", {})}
    job["spec"]["minAvailable"] = 1
    for task in job["spec"]["tasks"]:
        task["replicas"] = task["minAvailable"] = 1
    return dict(job)


def _refused(result: Any, message: str, policy: str = JOBS_POLICY) -> None:
    assert result.returncode != 0, f"accepted: {result.stdout}"
    said = f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: "
    assert said in result.stderr, result.stderr
    assert message in result.stderr.split(said, 1)[1], result.stderr


def _submit(who: Kubectl, job: dict[str, Any]) -> Any:
    return who("create", "-f", "-", input=json.dumps(job), check=False)


def _bound(plane: ControlPlane, namespace: str, job: str) -> bool:
    pods = plane.kubectl.json("get", "pods", "-n", namespace, "-l", f"{VOLCANO_JOB_NAME_LABEL}={job}")[
        "items"
    ]
    return bool(pods) and all(pod["spec"].get("nodeName") for pod in pods)


def _time_to_bind(plane: ControlPlane, config: StackConfig, team: str, name: str) -> float:
    started = time.monotonic()
    created = _submit(member(plane, team), one_pod_job(plane, config, team, name))
    assert created.returncode == 0, created.stderr
    plane.wait_for(lambda: _bound(plane, team, name), timeout=600, what=f"{team}'s one-pod run {name} bound")
    return time.monotonic() - started


# ----- scheduling terms --------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(blocker_terms(B)))
def test_a_term_beyond_the_pods_namespace_or_node_is_refused(
    example: ControlPlane, example_config: StackConfig, variant: str
) -> None:
    """A's pod with anti-affinity to every pod of B's namespace (or the platform's, or its own on a
    topology every node shares): on a zone or ``kubernetes.io/os`` every node is one domain, so one
    such pod kept every pod of B off every node until it ended."""
    job = one_pod_job(example, example_config, A, f"blocker-{variant}")
    spec = job["spec"]["tasks"][0]["template"]["spec"]
    spec["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {}, **blocker_terms(B)[variant]}
            ]
        }
    }
    _refused(_submit(member(example, A), job), Message.AFFINITY)


def test_a_term_on_one_node_of_the_pods_own_namespace_runs_beside_another_teams_run(
    example: ControlPlane, example_config: StackConfig
) -> None:
    job = one_pod_job(example, example_config, A, "one-per-node")
    job["spec"]["tasks"][0]["template"]["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app.kubernetes.io/name": "bert-large"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }  # fmt: skip
    created = _submit(member(example, A), job)
    assert created.returncode == 0, created.stderr
    example.wait_for(lambda: _bound(example, A, "one-per-node"), timeout=60, what="A's spread run bound")
    seconds = _time_to_bind(example, example_config, B, "beside-a-spread-run")
    print(f"B's one-pod run bound {seconds:.1f} s after its creation, beside A's")
    end_runs(example, [A, B])


# ----- load ---------------------------------------------------------------------------------------


def test_a_flood_is_refused_at_the_job_and_another_teams_run_binds_in_seconds(
    example: ControlPlane, example_config: StackConfig
) -> None:
    """The attacker's flood: three Jobs of 1,500 replicas whose pods Pod Security refuses (Volcano's
    controller sent 15,024 refused creations in five minutes, and B's one-pod run waited 295.7 s), and
    thirty Jobs of about 1 MiB each (etcd grew 36 MiB in 17 s). Each is refused before it is stored."""
    a = member(example, A)
    answers = {}
    for index in range(3):
        job = one_pod_job(example, example_config, A, f"flood-{index}")
        task = job["spec"]["tasks"][0]
        task["replicas"] = 1500
        task["template"]["spec"]["containers"][0]["resources"]["limits"].pop(NEURON_RESOURCE)
        # Keeps every capability: Pod Security (restricted) refuses each pod, the team policy did not.
        task["template"]["spec"]["containers"][0]["securityContext"].pop("capabilities")
        answers[f"flood-{index}"] = _submit(a, job)
    padding = "x" * (1 << 20)
    for index in range(30):
        job = one_pod_job(example, example_config, A, f"heavy-{index}")
        job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"].append(
            {"name": "PADDING", "value": padding}
        )
        answers[f"heavy-{index}"] = _submit(a, job)
    seconds = _time_to_bind(example, example_config, B, "after-the-flood")
    print(f"B's one-pod run bound {seconds:.1f} s after its creation")
    accepted = sorted(name for name, answer in answers.items() if answer.returncode == 0)
    assert accepted == [], f"stored: {accepted}; B's run bound after {seconds:.1f} s"
    for name, answer in answers.items():
        said = answer.stderr
        assert Message.SIZE in said if name.startswith("heavy-") else Message.REPLICAS in said, said
    assert seconds < BOUND_WITHIN_SECONDS


def test_the_object_quota_counts_a_teams_volcano_jobs(
    example: ControlPlane, example_config: StackConfig
) -> None:
    """The quota ``team-objects`` as the real API server keeps it: its count of Volcano Jobs moves with
    a member's Job, and a Job beyond its hard count is refused (the count lowered to what is used, for
    this test: the example's 64 Jobs would take long to create)."""
    quota = example.kubectl.json("get", "resourcequota", OBJECTS_QUOTA, "-n", A)
    resource = "count/jobs.batch.volcano.sh"
    assert quota["spec"]["hard"][resource] == str(example_config.team(A).quota.jobs)
    before = int(quota["status"]["used"][resource])
    a = member(example, A)
    assert _submit(a, one_pod_job(example, example_config, A, "counted")).returncode == 0
    example.wait_for(
        lambda: int(example.kubectl.json("get", "resourcequota", OBJECTS_QUOTA, "-n", A)["status"]["used"][resource])
        == before + 1,
        timeout=30,
        what="the quota counting the member's Job",
    )  # fmt: skip
    patch = {"spec": {"hard": {resource: str(before + 1)}}}
    example.kubectl("patch", "resourcequota", OBJECTS_QUOTA, "-n", A, "--type=merge", "-p", json.dumps(patch))
    try:
        refused = _submit(a, one_pod_job(example, example_config, A, "one-too-many"))
        assert refused.returncode != 0, refused.stdout
        assert f"exceeded quota: {OBJECTS_QUOTA}" in refused.stderr and resource in refused.stderr, (
            refused.stderr
        )
    finally:
        patch = {"spec": {"hard": {resource: quota["spec"]["hard"][resource]}}}
        example.kubectl(
            "patch", "resourcequota", OBJECTS_QUOTA, "-n", A, "--type=merge", "-p", json.dumps(patch)
        )
        end_runs(example, [A])


def _flow_schema_of(who: Kubectl, *args: str) -> str:
    """The uid of the FlowSchema the API server classified ``who``'s request into (its response header)."""
    result = who(*args, "-v=8", check=False)
    for line in result.stderr.splitlines():
        if "X-Kubernetes-Pf-Flowschema-Uid:" in line:
            return line.rsplit(":", 1)[1].strip()
    raise AssertionError(f"no flow schema header in the response: {result.stderr[-2000:]}")


def test_a_teams_requests_and_volcanos_for_it_queue_in_their_own_flow_schemas(example: ControlPlane) -> None:
    uids = {
        name: example.kubectl.json("get", "flowschema", name)["metadata"]["uid"]
        for name in (TEAMS_FLOW_SCHEMA, VOLCANO_FLOW_SCHEMA)
    }
    for team in (A, B):
        assert (
            _flow_schema_of(member(example, team), "get", "jobs.batch.volcano.sh", "-n", team)
            == uids[TEAMS_FLOW_SCHEMA]
        )
    controller = example.as_service_account("volcano-system", "volcano-controllers")
    assert _flow_schema_of(controller, "get", "pods", "-n", A) == uids[VOLCANO_FLOW_SCHEMA]  # fmt: skip


# ----- Volcano acts within the team's rights ---------------------------------------------------------


@pytest.mark.parametrize(
    ("what", "change", "message"),
    [
        ("a claim of a petabyte for Volcano to create", {"volumes": [{"mountPath": "/big", "volumeClaim": {
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Pi"}}}}]}, Message.CLAIMS),
        ("the ray plugin's Service", {"plugins": {"env": [], "svc": [], "ray": []}}, Message.PLUGINS),
        ("the ssh plugin's Secret", {"plugins": {"env": [], "svc": [], "ssh": []}}, Message.PLUGINS),
    ],
)  # fmt: skip
def test_a_job_may_not_make_volcano_create_what_the_team_may_not(
    example: ControlPlane, example_config: StackConfig, what: str, change: dict[str, Any], message: str
) -> None:
    job = one_pod_job(example, example_config, A, f"deputy-{len(what)}")
    job["spec"].update(change)
    _refused(_submit(member(example, A), job), message)


@pytest.mark.parametrize(
    ("what", "args"),
    [
        ("delete a team's default-deny", ("delete", "networkpolicy", "default-deny", "-n", A)),
        ("delete the team's etcd Service", ("delete", "service", "etcd-server", "-n", A)),
        ("delete a platform ConfigMap", ("delete", "configmap", "gang-watchdog", "-n", PLATFORM_NAMESPACE)),
        ("create a Secret no Job owns", ("create", "secret", "generic", "x", "--from-literal=a=b", "-n", A)),
        ("write outside the Jobs' namespaces", ("create", "configmap", "x", "-n", "kube-system")),
        ("create a Service no Job owns", ("create", "service", "clusterip", "x", "--tcp=80:80", "-n", A)),
        ("create a PriorityClass", ("create", "priorityclass", "above-all", "--value=1000000000")),
    ],
)
def test_volcanos_controller_may_not_touch_what_no_volcano_job_owns(
    example: ControlPlane, what: str, args: tuple[str, ...]
) -> None:
    controller = example.as_service_account("volcano-system", "volcano-controllers")
    result = controller(*args, "--dry-run=server", check=False)
    assert result.returncode != 0, f"{what}: accepted: {result.stdout}"
    assert f"ValidatingAdmissionPolicy '{CONTROLLER_POLICY}'" in result.stderr, result.stderr


def test_volcanos_controller_still_creates_and_deletes_its_own_jobs_objects(
    example: ControlPlane, example_config: StackConfig
) -> None:
    """The svc plugin's Service, hosts ConfigMap and NetworkPolicy and the Job's pods, made and removed
    by the real controller through the fence."""
    job = one_pod_job(example, example_config, A, "owned")
    assert _submit(member(example, A), job).returncode == 0
    made = {("service", "owned"), ("configmap", "owned-svc"), ("networkpolicy", "owned")}

    def present() -> set[tuple[str, str]]:
        return {
            (kind, name)
            for kind, name in made
            if example.kubectl("get", kind, name, "-n", A, check=False).returncode == 0
        }

    example.wait_for(
        lambda: present() == made and _bound(example, A, "owned"), timeout=60, what="the Job's objects"
    )
    example.kubectl("delete", "jobs.batch.volcano.sh", "owned", "-n", A, "--wait=true")
    example.wait_for(lambda: not present(), timeout=60, what="the Job's objects deleted with it")
    end_runs(example, [A])


# ----- overrides ------------------------------------------------------------------------------------


def test_a_run_may_not_take_itself_out_of_the_stuck_run_guard_or_retry_without_end(
    example: ControlPlane, example_config: StackConfig
) -> None:
    a = member(example, A)
    ceiling = example_config.stuck_run_ceiling_minutes
    assert ceiling is not None
    job = one_pod_job(example, example_config, A, "forever")
    job["metadata"]["annotations"] = {STUCK_MINUTES_ANNOTATION: "1e9"}
    _refused(_submit(a, job), Message.stuck_minutes(ceiling))
    job["metadata"]["annotations"] = {STUCK_MINUTES_ANNOTATION: str(ceiling + 1)}
    _refused(_submit(a, job), Message.stuck_minutes(ceiling))
    job["metadata"]["annotations"] = {}
    job["spec"]["maxRetry"] = 1_000_000
    _refused(_submit(a, job), Message.RETRIES)
    job["metadata"]["annotations"] = {STUCK_MINUTES_ANNOTATION: str(ceiling)}
    job["spec"]["maxRetry"] = 11
    assert _submit(a, job).returncode == 0
    end_runs(example, [A])


# ----- names the stack applies ------------------------------------------------------------------------


def test_a_member_may_not_take_an_applied_runs_name(
    example: ControlPlane, example_config: StackConfig
) -> None:
    """After the stack's run ended (its Job deleted), its name is free in the namespace; the member's
    Job under it made the next deploy's apply fail on Volcano's update rule."""
    applied = run_handle(example, deployed_plan(example_config), "bert-large")
    job = one_pod_job(example, example_config, A, applied.name)
    _refused(_submit(member(example, A), job), Message.APPLIED_NAME)
    job["metadata"]["name"] = MEMBER_JOB_NAME
    assert _submit(member(example, A), job).returncode == 0
    end_runs(example, [A])


def test_a_redeploy_meeting_a_job_the_stack_did_not_create_fails_with_a_line_naming_it(
    example: ControlPlane, example_config: StackConfig
) -> None:
    """Someone the fence does not hold (here the cluster admin) creates a Job under the applied run's
    name; the stack's next apply of that run fails with the policy's line naming the Job and how it
    was created, not with Volcano's update message."""
    plan = deployed_plan(example_config)
    applied = run_handle(example, plan, "bert-large")
    squat = one_pod_job(example, example_config, A, applied.name)
    example.kubectl("create", "-f", "-", input=json.dumps(squat))
    step = plan.step("run-bert-large")
    assert isinstance(step, ManifestSet)
    resource = f"{step.name}-{step.identity}"
    kept = example.deployed.pop(resource)
    try:
        with pytest.raises(AssertionError) as refused:
            example.apply_plan(plan)
        said = str(refused.value)
        assert f"Volcano Job {A}/{applied.name} was not created by the stack: created " in said, said
        assert "kubectl-create" in said and "job updates may not change fields" not in said, said
    finally:
        example.kubectl("delete", "jobs.batch.volcano.sh", applied.name, "-n", A, "--wait=true")
        example.deployed[resource] = kept
        end_runs(example, [A])


# ----- the worker script -------------------------------------------------------------------------


def test_each_team_runs_the_platforms_worker_script_which_no_member_may_change(
    example: ControlPlane, example_config: StackConfig
) -> None:
    """run_worker.sh lives once per team namespace (k8s_charts/runs/worker_script.py), not in each pod: the
    run's pods name its ConfigMap, the API server holds it immutable, and a member may not write it."""
    for team in (A, B):
        config_map = example.kubectl.json("get", "configmap", WORKER_SCRIPT_CONFIGMAP, "-n", team)
        assert config_map["immutable"] is True and config_map["data"] == {WORKER_SCRIPT_FILE: WORKER_SCRIPT}
        job = one_pod_job(example, example_config, team, f"{team}-script")
        pod = job["spec"]["tasks"][0]["template"]["spec"]
        assert {
            "name": WORKER_SCRIPT_VOLUME,
            "configMap": {"name": WORKER_SCRIPT_CONFIGMAP, "defaultMode": 0o444},
        } in pod["volumes"]
        assert WORKER_SCRIPT_PATH in pod["containers"][0]["command"]
        assert "set -euo pipefail" not in json.dumps(job)
        who = member(example, team)
        for verb in ("create", "update", "patch", "delete"):
            assert not who.can_i(verb, f"configmaps/{WORKER_SCRIPT_CONFIGMAP}", namespace=team), (team, verb)
        patched = who(
            "patch", "configmap", WORKER_SCRIPT_CONFIGMAP, "-n", team, "--type=merge",
            "-p", json.dumps({"data": {WORKER_SCRIPT_FILE: "id\n"}}), check=False,
        )  # fmt: skip
        assert patched.returncode != 0 and "forbidden" in patched.stderr.lower(), patched.stderr
        # Not even the platform rewrites a version under a running Job: a changed script is a new name.
        rewritten = example.kubectl(
            "patch", "configmap", WORKER_SCRIPT_CONFIGMAP, "-n", team, "--type=merge",
            "-p", json.dumps({"data": {WORKER_SCRIPT_FILE: "id\n"}}), check=False,
        )  # fmt: skip
        assert rewritten.returncode != 0 and "immutable" in rewritten.stderr, rewritten.stderr
