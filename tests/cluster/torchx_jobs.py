"""The Jobs the documented TorchX commands submit (docs/torchx.md; tests/torchx_dryrun.py runs the
real torchx CLI), against the real control plane with each command's configuration deployed
(test_torchx.py: the default configuration's command; test_torchx_teams.py: the example's, one per
team):

- judged by the real API server and Volcano's webhooks as the CEL model judges them in
  tests/torchx_trn/test_torchx_admission.py (tests/cluster/verdicts.py): the Job as a team member submits it
  and each pod Volcano's controller creates for it admitted; the Job broken one rule at a time, and
  named after a platform object, refused with that rule's message;
- run: created by a team member, its pods made by Volcano's controller (through the pod policy and
  Pod Security ``restricted``) and left unbound until the team's nodes exist; with as many nodes of
  the command's group added (as the autoscaler adds them: test_scale_from_zero.py runs it), the gang
  is bound at once, one pod per node of that group; every worker exiting 0 completes the Job.

The configuration's own runs are ended first: they would take the nodes the test adds. The tests
are written once, here; each module imports them with the fixture ``submitted_for`` makes for its
configuration (a module runs on one worker, with one configuration deployed).
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from cluster_facts.kubernetes_names import NODE_GROUP_LABEL, team_rbac_group
from config import StackConfig, load_config
from k8s_charts.teams.tenant_admission import JOBS_POLICY, PODS_POLICY
from tests.cluster.control_plane import ControlPlane
from tests.cluster.nodes import group_nodes
from tests.cluster.plans import deployed_plan
from tests.cluster.runs import RunHandle, end_runs
from tests.cluster.verdicts import verdict
from tests.tenant_cases import (
    CONTROLLER,
    MEMBER,
    RESERVED_NAMES,
    AdmissionCase,
    refused_variants,
    volcano_pod,
)
from tests.torchx_dryrun import CASES, Case, dryrun_job, other_team, submission_environment, torchx_available

__all__ = [
    "submitted_for",
    "test_the_documented_job_runs_whole_on_the_teams_nodes_and_completes",
    "test_the_real_api_server_judges_the_documented_job_as_the_model_does",
]


def _cases(case: Case, job: dict[str, Any]) -> list[AdmissionCase]:
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


def judge_as_the_model(control_plane: ControlPlane, case: Case, job: dict[str, Any]) -> None:
    """Every case of ``_cases`` judged by the real server as the model judges it."""
    cases = _cases(case, job)
    how: Counter[str] = Counter()
    disagreements = {c.id: said for c in cases if (said := verdict(control_plane, c, how)) is not None}
    assert disagreements == {}, json.dumps(disagreements, indent=1)
    assert how["accepted"] == 1 + case.nnodes, how
    refused_jobs = [c for c in cases if c.policy == JOBS_POLICY and not c.allowed]
    assert how[f"refused by {JOBS_POLICY}"] == len(refused_jobs), how


def run_to_completion(
    control_plane: ControlPlane, case: Case, job: dict[str, Any], config: StackConfig
) -> None:
    """The Job created by a team member, placed whole once its nodes exist, completed."""
    run = RunHandle.of_job(control_plane, job)
    group = submission_environment(case)["NODE_GROUP"]
    nodes = [f"{group}-torchx-{index}" for index in range(case.nnodes)]
    member = control_plane.impersonate(MEMBER, [team_rbac_group(run.namespace)])
    member("create", "-f", "-", input=json.dumps(job))
    try:
        pending = control_plane.wait_for(
            lambda: found if len(found := run.pods()) == case.nnodes else None,
            timeout=60,
            what=f"Volcano's controller creating the {case.nnodes} pods of {run.name}",
        )
        assert not any(pod["spec"].get("nodeName") for pod in pending), "bound before its nodes existed"
        control_plane.add_nodes(group_nodes(config, group, nodes))
        running = control_plane.wait_for(run.running, timeout=90, what=f"{run.name} placed whole and running")
        assert sorted(pod["spec"]["nodeName"] for pod in running) == sorted(nodes)
        for node in nodes:
            labels = control_plane.kubectl.json("get", "node", node)["metadata"]["labels"]
            assert labels[NODE_GROUP_LABEL] == group, node
        run.finish(0)
        control_plane.wait_for(
            lambda: run.job_status().get("state", {}).get("phase") == "Completed",
            timeout=60,
            what=f"{run.name} Completed",
        )
    finally:
        control_plane.kubectl(
            "delete",
            "jobs.batch.volcano.sh",
            run.name,
            "-n",
            run.namespace,
            "--ignore-not-found",
            "--wait=true",
        )
        # The pods go after their Job, by the garbage collector: a later case that creates pods of
        # the same names (the judge's dry runs) must not find them.
        control_plane.wait_for(
            lambda: (
                None
                if control_plane.kubectl.json(
                    "get", "pods", "-n", run.namespace, "-l", f"volcano.sh/job-name={run.name}"
                )["items"]
                else True
            ),
            timeout=60,
            what=f"the pods of {run.name} gone (terminating ones too)",
        )
        control_plane.remove_nodes(nodes)


Submitted = tuple[Case, dict[str, Any], StackConfig]
"""A documented command, its Job (a dry run of the real CLI) and its configuration, deployed."""


def submitted_for(config_file: Path) -> Any:
    """A module fixture: each documented command of ``config_file``, with that configuration
    deployed and its own runs ended."""

    @pytest.fixture(scope="module", params=[case.name for case in CASES if case.config == config_file])
    def submitted(request: pytest.FixtureRequest, control_plane: ControlPlane) -> Submitted:
        assert torchx_available() is None, torchx_available()
        case = next(c for c in CASES if c.name == request.param)
        config = load_config(case.config)
        control_plane.apply_plan(deployed_plan(config))
        end_runs(control_plane, [team.name for team in config.teams])
        return case, dryrun_job(case), config

    return submitted


def test_the_real_api_server_judges_the_documented_job_as_the_model_does(
    control_plane: ControlPlane, submitted: Submitted
) -> None:
    case, job, _ = submitted
    judge_as_the_model(control_plane, case, job)


def test_the_documented_job_runs_whole_on_the_teams_nodes_and_completes(
    control_plane: ControlPlane, submitted: Submitted
) -> None:
    case, job, config = submitted
    run_to_completion(control_plane, case, job, config)
