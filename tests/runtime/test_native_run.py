"""The native-fsdp2 run's pods with real torchrun agents, real etcd and the real program, on CPU.

Rendered from config/native.example.yaml (its recipe made small), each pod runs what the cluster
would: cluster_programs/run_worker.sh with the rendered launcher, which runs
cluster_programs/native_fsdp2_train.py with the rendered arguments. Two differences, both the
harness's: one worker per node instead of 64, and ``--device cpu --backend gloo`` after the rendered
``--device neuron --backend neuron``, as Neuron's distributed tutorial runs its examples on CPU first.

What is proven here: FSDP2 over the rendezvous torchrun forms, torch.distributed.checkpoint on the
run's output directory, and a Volcano RestartJob after a lost pod resuming from the newest whole
checkpoint, to the same losses as a run that was never interrupted. What is not: the ``neuron``
device and process-group backend of TorchNeuron, which need a Trainium node and the Neuron 2.33
image (the program imports ``torch_neuronx`` only for ``--device neuron``).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_plan.kubernetes_values import review_plan
from config import parse_config
from tests.conftest import REPO_ROOT
from tests.runtime.etcd_cluster import EtcdCluster
from tests.runtime.harness import Agent, LocalJob, RuntimeTools, option_value, training_job
from tests.yaml_edits import with_change

pytestmark = pytest.mark.slow

PROGRAM = REPO_ROOT / "cluster_programs" / "native_fsdp2_train.py"
STEPS = 120
RECIPE = {
    "steps": STEPS,
    "batch_size": 2,
    "sequence_length": 32,
    "layers": 2,
    "model_dim": 64,
    "heads": 4,
    "checkpoint_every": 4,
}
JOB_UID = "6f1c2a4e-0000-4000-8000-00000000000a"


def native_container() -> Any:
    data = yaml.safe_load((REPO_ROOT / "config" / "native.example.yaml").read_text())
    data = with_change(data, "runs", [{**data["runs"][1], "parameters": RECIPE}])
    return training_job(review_plan(parse_config(data)))


def native_job(tools: RuntimeTools, etcd: EtcdCluster, work_dir: Path) -> LocalJob:
    container = native_container()
    job = LocalJob(
        tools=tools,
        container=container,
        etcd=etcd,
        work_dir=work_dir,
        nodes=int(option_value(container.args, "--nnodes")),
        program=PROGRAM,
        program_args=["--device", "cpu", "--backend", "gloo"],
        timeout=180,
    )
    # The staged data set: a text the program reads where the rendered --data points.
    [data] = [arg for arg in container.args if arg.endswith("/input.txt")]
    variable = re.fullmatch(r"\$\((\w+)\)/input.txt", data)
    assert variable is not None, data
    directory = next(env["value"] for env in container.env if env["name"] == variable[1])
    text = work_dir / "datasets" / directory.removeprefix("/datasets/") / "input.txt"
    text.parent.mkdir(parents=True)
    text.write_text("".join(f"{n}: to be, or not to be, that is the question.\n" for n in range(400)))
    return job


def describe(agents: list[Agent]) -> str:
    return "\n".join(agent.describe() for agent in agents)


def first_to_say(agents: list[Agent], text: str, timeout: float) -> Agent | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for agent in agents:
            if text in agent.output:
                return agent
        time.sleep(0.1)
    return None


def losses(output: Path) -> dict[int, float]:
    """Each step's loss as the run last recorded it (a step redone after a restart overwrites)."""
    records = [json.loads(line) for line in (output / "metrics.jsonl").read_text().splitlines()]
    return {record["step"]: record["loss"] for record in records}


def output_dir(job: LocalJob) -> Path:
    [run] = (job.work_dir / "data" / "runs").iterdir()
    return run


def test_a_lost_pod_restarts_the_gang_which_resumes_from_the_newest_checkpoint(
    runtime_tools: RuntimeTools, etcd: EtcdCluster, tmp_path: Path
) -> None:
    job = native_job(runtime_tools, etcd, tmp_path / "restarted")
    with job.attempt("failed", job_uid=JOB_UID, version=0) as agents:
        # Global rank 0 (which reports checkpoints) is on whichever pod the rendezvous put it.
        reporter = first_to_say(agents, "checkpoint step=8", 120)
        assert reporter is not None, describe(agents)
        lost = agents[1 - reporter.index]
        lost.kill()  # a lost node: the pod and its worker die at once
        reporter.wait(60)
    output = output_dir(job)
    saved = sorted(path.name for path in output.glob("step-*"))
    assert saved, describe(agents)
    newest = int(saved[-1].removeprefix("step-"))
    assert newest >= 8 and newest < STEPS, describe(agents)

    # Volcano's RestartJob: new pods of the same Job at the next version.
    restarted = job.run("restarted", job_uid=JOB_UID, version=1)
    assert [(a.returncode, a.stopped_by_harness) for a in restarted] == [(0, False)] * 2, describe(restarted)
    log = "\n".join(agent.output for agent in restarted)
    assert f"resuming {job.container.owner}" in log, log[-3000:]
    assert f"attempt=1 replica=0 node_changed=0 resume_step={newest:08d}" in log, log[-3000:]
    assert f"training from step {newest} to {STEPS} on 2 cpu workers" in log, log[-3000:]
    assert f"done: {STEPS} steps" in log, log[-3000:]
    assert max(path.name for path in output.glob("step-*")) == f"step-{STEPS:08d}"

    # The same losses as a run never interrupted: the checkpoint held model, optimizer and progress.
    reference = native_job(runtime_tools, etcd, tmp_path / "reference")
    whole = reference.run("whole", job_uid="6f1c2a4e-0000-4000-8000-00000000000b", version=0)
    assert [a.returncode for a in whole] == [0, 0], describe(whole)
    resumed, uninterrupted = losses(output), losses(output_dir(reference))
    assert sorted(uninterrupted) == list(range(1, STEPS + 1))
    assert {step: resumed[step] for step in range(newest + 1, STEPS + 1)} == {
        step: uninterrupted[step] for step in range(newest + 1, STEPS + 1)
    }
