"""The native stack's documented TorchX command (trainium_native on config/native.example.yaml's trn2
group), against the real control plane, judged and run (tests/cluster/torchx_jobs.py)."""

from tests.cluster.torchx_jobs import (
    submitted_for,
    test_the_documented_job_runs_whole_on_the_teams_nodes_and_completes,
    test_the_real_api_server_judges_the_documented_job_as_the_model_does,
)
from tests.torchx_dryrun import NATIVE_CONFIG

__all__ = [
    "submitted",
    "test_the_documented_job_runs_whole_on_the_teams_nodes_and_completes",
    "test_the_real_api_server_judges_the_documented_job_as_the_model_does",
]

submitted = submitted_for(NATIVE_CONFIG)
