"""torchrun's etcd rendezvous across attempts, with real agents, real etcd and the rendered launcher.

The legacy ``etcd`` backend marks a run ``closed`` whenever an agent exits normally (after success
or after a worker failure), and the run's etcd directory outlives the job (7,200 s). So the id
decides whether a second attempt can start:

- a. with one fixed ``--rdzv_id`` (what the launcher rendered before it took the id from the pod):
  a rerun after success and a Volcano RestartJob after a failure both fail at once with
  RendezvousClosedError;
- b. with the rendered launcher, whose ``--rdzv_id $(RDZV_ID)`` is ``<job>-<uid>-v<version>``
  from Volcano's pod annotations: all of them train.

Each attempt is one Volcano Job version: new pods, hence new agents. A rerun is a new Job object
(new uid, version 0); RestartJob keeps the Job and bumps its version.
"""

from __future__ import annotations

import re

import pytest

from tests.runtime.harness import Agent, LocalJob

pytestmark = pytest.mark.slow

FIXED_ID = "bert-train"
FIRST_JOB_UID = "6f1c2a4e-0000-4000-8000-000000000001"
SECOND_JOB_UID = "6f1c2a4e-0000-4000-8000-000000000002"
FAILURES = ["pod-killed", "worker-exception"]


def describe(agents: list[Agent]) -> str:
    return "\n".join(agent.describe() for agent in agents)


def run_ids(agents: list[Agent], phase: str = "train") -> set[str]:
    """The rendezvous ids the workers of ``phase`` ran under (torchrun sets TORCHELASTIC_RUN_ID)."""
    pattern = rf"standin: phase={phase} step=0 .* run_id=(\S+)"
    return {match for agent in agents for match in re.findall(pattern, agent.output)}


def assert_trained(job: LocalJob, agents: list[Agent]) -> None:
    """Every agent exited 0 by itself, and every worker of the world finished its collectives."""
    ranks = {
        int(rank)
        for agent in agents
        for rank in re.findall(r"standin: phase=train done rank=(\d+)", agent.output)
    }
    assert [(agent.returncode, agent.stopped_by_harness) for agent in agents] == [(0, False)] * len(agents), (
        describe(agents)
    )
    assert ranks == set(range(job.nodes * job.nproc_per_node)), describe(agents)


def assert_closed(agents: list[Agent]) -> None:
    """Every agent gave up by itself on a closed rendezvous, before any worker trained."""
    for agent in agents:
        assert agent.returncode != 0, describe(agents)
        assert not agent.stopped_by_harness, describe(agents)
        assert "RendezvousClosedError" in agent.output, describe(agents)
        assert "standin: phase=train" not in agent.output, describe(agents)


def failed_attempt(
    job: LocalJob, failure: str, *, job_uid: str, version: int, rdzv_id: str | None
) -> list[Agent]:
    """An attempt that breaks mid-run: one pod is killed (SIGKILL, as on a lost node) or one
    worker raises. Then, as Volcano's RestartJob does, whatever still runs is deleted."""
    env = {"STANDIN_SECONDS": "30"}
    if failure == "worker-exception":
        env["STANDIN_FAIL_RANK"] = "1"
    with job.attempt("failed", env=env, job_uid=job_uid, version=version, rdzv_id=rdzv_id) as agents:
        assert all(agent.wait_for_output("standin: phase=train step=0", 30) for agent in agents), describe(
            agents
        )
        if failure == "pod-killed":
            agents[1].kill()
        for agent in agents:
            agent.wait(20)
    return agents


def rendered_id(job: LocalJob, *, job_uid: str, version: int) -> str:
    """What the rendered ``--rdzv_id $(RDZV_ID)`` becomes on pods of that Job object and version."""
    return f"{job.container.owner}-{job_uid}-v{version}"


# a. One fixed id.


def test_fixed_id_a_rerun_after_success_finds_the_run_closed(job: LocalJob) -> None:
    first = job.run("first", rdzv_id=FIXED_ID, job_uid=FIRST_JOB_UID)
    assert_trained(job, first)
    assert run_ids(first) == {FIXED_ID}
    assert '\\"status\\": \\"closed\\"' in job.etcd.keys(
        f"/torchelastic/p2p/run_{FIXED_ID}/rdzv/active_version"
    )

    assert_closed(job.run("rerun", rdzv_id=FIXED_ID, job_uid=SECOND_JOB_UID))


@pytest.mark.parametrize("failure", FAILURES)
def test_fixed_id_a_restart_after_a_failure_finds_the_run_closed(job: LocalJob, failure: str) -> None:
    failed = failed_attempt(job, failure, rdzv_id=FIXED_ID, job_uid=FIRST_JOB_UID, version=0)
    survivor = failed[0]
    assert survivor.returncode != 0, describe(failed)
    assert not survivor.stopped_by_harness, "with --max_restarts 0 the surviving agent gives up by itself"

    assert_closed(job.run("restarted", rdzv_id=FIXED_ID, job_uid=FIRST_JOB_UID, version=1))


# b. The rendered launcher: an id per Job object and attempt.


def test_the_rendered_launcher_a_rerun_after_success_trains(job: LocalJob) -> None:
    first = job.run("first", job_uid=FIRST_JOB_UID)
    assert_trained(job, first)
    first_id = rendered_id(job, job_uid=FIRST_JOB_UID, version=0)
    # run_worker.sh precompiles under an id of its own: that rendezvous closes before training.
    assert run_ids(first, "precompile") == {f"{first_id}-precompile"}
    assert run_ids(first) == {first_id}

    rerun = job.run("rerun", job_uid=SECOND_JOB_UID)
    assert_trained(job, rerun)
    assert run_ids(rerun) == {rendered_id(job, job_uid=SECOND_JOB_UID, version=0)}


@pytest.mark.parametrize("failure", FAILURES)
def test_the_rendered_launcher_a_restart_after_a_failure_trains(job: LocalJob, failure: str) -> None:
    failed = failed_attempt(job, failure, job_uid=FIRST_JOB_UID, version=0, rdzv_id=None)
    assert run_ids(failed) == {rendered_id(job, job_uid=FIRST_JOB_UID, version=0)}

    restarted = job.run("restarted", job_uid=FIRST_JOB_UID, version=1)
    assert_trained(job, restarted)
    assert run_ids(restarted) == {rendered_id(job, job_uid=FIRST_JOB_UID, version=1)}
    assert run_ids(restarted, "precompile") == set(), "every replica precompiled in the failed attempt"
