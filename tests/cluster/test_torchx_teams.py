"""The example configuration's documented TorchX commands, one per team, against the real control
plane, judged and run (tests/cluster/torchx_jobs.py says how)."""

from __future__ import annotations

from typing import Any

import pytest

from config import StackConfig
from tests.cluster.control_plane import ControlPlane
from tests.cluster.torchx_jobs import deployed_with_its_runs_ended, judge_as_the_model, run_to_completion
from tests.conftest import EXAMPLE_CONFIG
from tests.torchx_dryrun import CASES, Case


@pytest.fixture(scope="module", params=[case.name for case in CASES if case.config == EXAMPLE_CONFIG])
def submitted(
    request: pytest.FixtureRequest, control_plane: ControlPlane
) -> tuple[Case, dict[str, Any], StackConfig]:
    case = next(c for c in CASES if c.name == request.param)
    return (case, *deployed_with_its_runs_ended(control_plane, case))


def test_the_real_api_server_judges_the_documented_job_as_the_model_does(
    control_plane: ControlPlane, submitted: tuple[Case, dict[str, Any], StackConfig]
) -> None:
    case, job, _ = submitted
    judge_as_the_model(control_plane, case, job)


def test_the_documented_job_runs_whole_on_the_teams_nodes_and_completes(
    control_plane: ControlPlane, submitted: tuple[Case, dict[str, Any], StackConfig]
) -> None:
    case, job, config = submitted
    run_to_completion(control_plane, case, job, config)
