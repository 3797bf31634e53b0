"""The example configuration's documented TorchX commands, one per team, against the real control
plane, judged and run (tests/cluster/torchx_jobs.py)."""

from tests.cluster.torchx_jobs import (
    submitted_for,
    test_the_documented_job_runs_whole_on_the_teams_nodes_and_completes,
    test_the_real_api_server_judges_the_documented_job_as_the_model_does,
)
from tests.conftest import EXAMPLE_CONFIG

__all__ = [
    "submitted",
    "test_the_documented_job_runs_whole_on_the_teams_nodes_and_completes",
    "test_the_real_api_server_judges_the_documented_job_as_the_model_does",
]

submitted = submitted_for(EXAMPLE_CONFIG)
