"""Scenarios a (the example configuration) and f (two teams) on the real control plane.

The example configuration is deployed over whatever the session's cluster holds (a redeploy: every
step it adds is created in plan order, the rest updated), then every step again, which must change
nothing. Then its two teams' runs: each lands only on its team's node group and queue; a team's share
holds even with free nodes in the group; a Job aimed at another team's group is refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from cluster_facts.autoscaling import scale_from_zero_resources
from cluster_facts.instance_catalog import instance_type
from cluster_facts.kubernetes_names import (
    NEURON_CORE_RESOURCE,
    NODE_GROUP_LABEL,
    team_rbac_group,
)
from cluster_facts.kubernetes_names import TRAINING_NAMESPACE as TRAINING
from config import StackConfig
from k8s_charts.teams.tenant_admission import JOBS_POLICY, Message
from tests.cluster.control_plane import ControlPlane
from tests.cluster.nodes import SIMULATED_GROUP_ANNOTATION, group_nodes
from tests.cluster.plans import deployed_plan
from tests.cluster.runs import end_runs, run_handle
from tests.cluster.scheduler_log import SchedulerLog


@pytest.fixture(scope="module")
def example(control_plane: ControlPlane, example_config: StackConfig) -> Iterator[ControlPlane]:
    report = control_plane.apply_plan(deployed_plan(example_config))
    assert all(r.action in ("Create", "Update", "Unchanged", "Delete") for r in report.steps)
    yield control_plane
    end_runs(control_plane, [team.name for team in example_config.teams])
    control_plane.remove_nodes(_simulated_nodes(control_plane))


def _simulated_nodes(plane: ControlPlane) -> list[str]:
    nodes = plane.kubectl.json("get", "nodes")["items"]
    return [
        n["metadata"]["name"]
        for n in nodes
        if SIMULATED_GROUP_ANNOTATION in n["metadata"].get("annotations", {})
    ]


def _add_group_nodes(
    plane: ControlPlane, config: StackConfig, group: str, count: int, *, first: int = 0
) -> None:
    plane.add_nodes(
        group_nodes(config, group, (f"{group}-sim-{index}" for index in range(first, first + count)))
    )


def _node_groups(plane: ControlPlane, pods: list[dict[str, Any]]) -> set[str]:
    groups = set()
    for pod in pods:
        node = plane.kubectl.json("get", "node", pod["spec"]["nodeName"])
        groups.add(node["metadata"]["labels"][NODE_GROUP_LABEL])
    return groups


def test_every_step_of_the_example_is_accepted_and_a_second_apply_changes_nothing(
    example: ControlPlane, example_config: StackConfig
) -> None:
    plan = deployed_plan(example_config)
    report = example.apply_plan(plan, update_all=True)
    changed = report.changed_but_budgets()
    differences = example.stored_differences(plan)
    assert changed == [] and differences == {}, "\n".join([*changed, json.dumps(differences, indent=1)])


def test_every_admission_policy_of_the_example_type_checks(example: ControlPlane) -> None:
    """As for the default plan (test_deploy.py): the two teams' policies too."""
    checked, warnings = example.policy_type_checking()
    assert len(checked) >= 5, checked
    assert warnings == {}, json.dumps(warnings, indent=1)


def test_each_run_lands_only_on_its_teams_group_and_queue(
    example: ControlPlane, example_config: StackConfig
) -> None:
    plan = deployed_plan(example_config)
    runs = {name: run_handle(example, plan, name) for name in ("bert-large", "llm")}
    runs["llm"].apply()  # rendered only: applied as docs/runs.md says, with kubectl
    for run in example_config.runs:
        _add_group_nodes(example, example_config, example_config.run_node_group(run).name, run.nodes)
    for name, handle in runs.items():
        pods = example.wait_for(handle.running, timeout=90, what=f"every pod of {name} Running")
        run = next(r for r in example_config.runs if r.name == name)
        team = example_config.team(run.team)
        assert _node_groups(example, pods) == {example_config.run_node_group(run).name}, name
        queues = {
            pg["spec"]["queue"]
            for pg in example.kubectl.json("get", "podgroups.scheduling.volcano.sh", "-n", handle.namespace)[
                "items"
            ]
        }
        assert queues == {team.queue_name}, (name, queues)


def test_a_teams_second_gang_waits_with_free_nodes_in_its_group(
    example: ControlPlane, example_config: StackConfig
) -> None:
    """The training team's share is what its group holds at max_size; its run takes all of it.
    A second gang of the team, with as many free nodes of the group as it needs, stays unplaced
    while the first runs, and is placed once the first has finished. The team's ResourceQuota sets
    no amount (k8s_charts/teams/team_quota.py), so the second gang's pods exist: the team's queue's
    capability keeps them off the free nodes: the scheduler's log says the queue is overused for each
    of its pods, and two sessions later none is placed."""
    plan = deployed_plan(example_config)
    first = run_handle(example, plan, "bert-large")
    group = example_config.run_node_group(next(r for r in example_config.runs if r.name == "bert-large")).name
    assert first.replicas() == example_config.node_group(group).max_size
    _add_group_nodes(example, example_config, group, first.replicas(), first=100)
    probe = first.copy_as("capacity-probe")
    log = SchedulerLog(example)
    example.kubectl("create", "-f", "-", input=json.dumps(probe.job))
    tasks = example.wait_for(
        lambda: (
            {p["metadata"]["name"] for p in found} if len(found := probe.pods()) == probe.replicas() else None
        ),
        timeout=30,
        what="the second gang's pods created",
    )
    queue = example_config.team(first.namespace).queue_name

    def refused() -> bool:
        assert all(not pod["spec"].get("nodeName") for pod in probe.pods()), "the team's share did not hold"
        return tasks <= log.queue_refusals(queue)

    example.wait_for(refused, timeout=30, what=f"queue {queue} refusing every pod of the second gang")
    log.wait_sessions(2)
    assert all(not pod["spec"].get("nodeName") for pod in probe.pods()), "the team's share did not hold"
    first.finish(0)
    example.wait_for(probe.running, timeout=90, what="the second gang placed once the first finished")


def test_a_team_member_may_submit_only_in_the_teams_namespace(
    example: ControlPlane, example_config: StackConfig
) -> None:
    member = example.impersonate("member@training", [team_rbac_group("training")])
    assert member.can_i("create", "jobs.batch.volcano.sh", namespace="training")
    assert not member.can_i("create", "jobs.batch.volcano.sh", namespace="research")
    assert not member.can_i("create", "pods", namespace="training")


def test_a_team_members_job_aimed_at_another_teams_group_is_refused(
    example: ControlPlane, example_config: StackConfig
) -> None:
    """A member of `training` submits a gang whose pods select `research`'s Capacity Block group,
    sized for its nodes, with free nodes there. The queue's capability counts resources, not
    groups (this ran there before issue 23): the team admission policy refuses the Job itself."""
    plan = deployed_plan(example_config)
    theirs = example_config.run_node_group(next(r for r in example_config.runs if r.team == "research")).name
    _add_group_nodes(example, example_config, theirs, 1, first=200)
    job = run_handle(example, plan, "bert-large").copy_as("other-group-probe").job
    job["spec"]["minAvailable"] = 1
    instance = instance_type(example_config.node_group(theirs).instance_type)
    for task in job["spec"]["tasks"]:
        task["replicas"] = task["minAvailable"] = 1
        task["template"]["spec"]["nodeSelector"] = {NODE_GROUP_LABEL: theirs}
        # Sized for their nodes, so that only isolation, not a misfit, can keep it off them.
        for container in task["template"]["spec"]["containers"]:
            container["resources"]["limits"].update(scale_from_zero_resources(instance))
            container["resources"]["limits"].pop(NEURON_CORE_RESOURCE, None)
            container["resources"]["limits"] = {
                k: str(v) for k, v in container["resources"]["limits"].items()
            }
    member = example.impersonate("member@training", [team_rbac_group("training")])
    submitted = member("create", "-f", "-", input=json.dumps(job), check=False)
    assert submitted.returncode != 0, f"accepted: {submitted.stdout}"
    assert (
        f"ValidatingAdmissionPolicy '{JOBS_POLICY}' with binding '{JOBS_POLICY}' denied request: "
        f"{Message.NODE_GROUP}"
    ) in submitted.stderr, submitted.stderr
    assert not example.kubectl.json(
        "get", "pods", "-n", TRAINING, "-l", "volcano.sh/job-name=other-group-probe"
    )["items"]
