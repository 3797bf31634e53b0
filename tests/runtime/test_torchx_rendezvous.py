"""The TorchX component's rendezvous across attempts, with real torchrun agents and a real etcd.

The Job is what ``torchx run --dryrun`` renders for the default team's documented command
(tests/torchx_dryrun.py, the real CLI from .venv-torchx); each agent runs the container's whole
command: the rendezvous program (``python3 -c``), which picks this attempt's id in etcd and execs
the launcher. Each attempt is new pods of the same Job, as after Volcano's RestartJob, with the
same rendered command:

- a fixed id (the launcher alone, as TorchX's own dist component renders it with the job's name):
  a second attempt fails at once with RendezvousClosedError;
- the component's command: a second attempt after success, and one after a worker failure, train,
  each under the next ``-a<N>``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.runtime.etcd_cluster import EtcdCluster
from tests.runtime.harness import LocalJob, RenderedContainer, RuntimeTools
from tests.runtime.test_rendezvous_ids import assert_closed, assert_trained, describe, run_ids
from tests.torchx_dryrun import CASES, dryrun_job, torchx_available

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def torchx_job() -> dict[str, object]:
    problem = torchx_available()
    assert problem is None, problem
    return dryrun_job(CASES[0])


def local_job(
    job: dict[str, object], tools: RuntimeTools, etcd: EtcdCluster, work_dir: Path, *, fixed_id: bool
) -> LocalJob:
    spec = job["spec"]
    assert isinstance(spec, dict)
    task = spec["tasks"][0]
    [container] = task["template"]["spec"]["containers"]
    command = list(container["command"])
    assert command[:2] == ["python3", "-c"]
    metadata = job["metadata"]
    assert isinstance(metadata, dict)
    return LocalJob(
        tools=tools,
        container=RenderedContainer(
            owner=metadata["name"],
            task=task["name"],
            command=(),
            # The whole command as the launcher argv: the harness points --rdzv_endpoint at the
            # local etcd, lowers --nproc_per_node and swaps the script for the stand-in.
            args=tuple(command[3:] if fixed_id else command),
            env=tuple(container["env"]),
        ),
        etcd=etcd,
        work_dir=work_dir,
        nodes=len(spec["tasks"]),
        worker_script=False,
    )


def test_a_fixed_id_cannot_start_a_second_attempt(
    torchx_job: dict[str, object], runtime_tools: RuntimeTools, etcd: EtcdCluster, tmp_path: Path
) -> None:
    job = local_job(torchx_job, runtime_tools, etcd, tmp_path, fixed_id=True)
    first = job.run("first")
    assert_trained(job, first)
    assert_closed(job.run("second", version=1))


def test_every_attempt_rendezvouses_under_its_own_id(
    torchx_job: dict[str, object], runtime_tools: RuntimeTools, etcd: EtcdCluster, tmp_path: Path
) -> None:
    job = local_job(torchx_job, runtime_tools, etcd, tmp_path, fixed_id=False)
    name = job.container.owner
    first = job.run("first")
    assert_trained(job, first)
    assert run_ids(first) == {f"{name}-a0"}, describe(first)

    # A worker fails mid-run: its agents exit (closing -a1); Volcano restarts the job.
    failed = job.run("failed", version=1, env={"STANDIN_FAIL_RANK": "1", "STANDIN_SECONDS": "5"})
    assert any(agent.returncode != 0 for agent in failed), describe(failed)
    assert run_ids(failed) == {f"{name}-a1"}, describe(failed)

    again = job.run("again", version=2)
    assert_trained(job, again)
    assert run_ids(again) == {f"{name}-a2"}, describe(again)
    assert all("this attempt rendezvouses as" in agent.output for agent in again)
