"""The canary's program (cluster_programs/canary_worker.py) with the torch virtualenv, as one rank of
a run: what ``--not-measurable`` tells it (CANARY_NOT_MEASURABLE, cluster_plan/canary_run.py) decides
which checks it runs. Named, the device checks are not run and the process group is gloo's on the
CPU (torchrun's variables: a world of one here), so the rendezvous and the output are still
measured; unnamed, the device checks run and judge this machine's /dev (no Neuron device: a failure).
tests/cluster/test_canary_pods.py runs it in the canary's run on a real node.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from cluster_plan.canary_run import CANARY_PROGRAM_STAGES
from tests.conftest import REPO_ROOT
from tests.runtime.harness import RuntimeTools

pytestmark = pytest.mark.slow

PROGRAM = REPO_ROOT / "cluster_programs" / "canary_worker.py"
READ_ONLY = "/proc"
"""The data sets' stand-in: a directory where not even root can create a file, as the read-only mount."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _run(tools: RuntimeTools, data: Path, **extra: str) -> tuple[int, list[dict[str, object]], str]:
    env = {
        "PATH": f"{tools.bin_dir}:/usr/bin:/bin",
        "HOME": str(data),
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "DATA_MOUNT": str(data),
        "DATASETS_ROOT": READ_ONLY,
        "OUTPUT_DIR": str(data / "runs" / "canary-test"),
        "CANARY_NEURON_DEVICES": "16",
        "CANARY_EFA_DEVICES": "8",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }
    done = subprocess.run(
        [str(tools.python), str(PROGRAM)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    lines = [
        json.loads(line.removeprefix("CANARY "))
        for line in done.stdout.splitlines()
        if line.startswith("CANARY ")
    ]
    return done.returncode, lines, done.stdout + done.stderr


def test_named_stages_are_not_checked_and_the_rendezvous_is_gloos_on_the_cpu(
    runtime_tools: RuntimeTools, tmp_path: Path
) -> None:
    code, lines, output = _run(runtime_tools, tmp_path, CANARY_NOT_MEASURABLE=",".join(CANARY_PROGRAM_STAGES))
    assert code == 0, output
    assert [(line["stage"], line["ok"]) for line in lines] == [
        ("mounts", True),
        ("data_ready", True),
        ("rendezvous", True),
        ("output_write", True),
    ], output
    said = {str(line["stage"]): str(line["detail"]) for line in lines}
    assert said["mounts"] == f"{tmp_path} writable as uid {os.getuid()}, {READ_ONLY} read-only", output
    assert said["rendezvous"] == "process group of 1 ranks (gloo on the CPU: one all-reduce over every rank)"
    (written,) = (tmp_path / "runs" / "canary-test").glob("events.out.tfevents.*")
    assert said["output_write"] == f"{written.name} in {tmp_path / 'runs' / 'canary-test'}", output


def test_unnamed_the_device_checks_run_and_judge_the_node(
    runtime_tools: RuntimeTools, tmp_path: Path
) -> None:
    code, lines, output = _run(runtime_tools, tmp_path)
    assert code == 1, output
    assert [(line["stage"], line["ok"]) for line in lines] == [
        ("mounts", True),
        ("data_ready", True),
        ("neuron_devices", False),
    ], output
    assert lines[-1]["detail"] == "RuntimeError: 0 Neuron devices in the pod, the instance type has 16", (
        output
    )
