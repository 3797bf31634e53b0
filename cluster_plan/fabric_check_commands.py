"""The fabric checks a pipeline stage runs after its deploy: which groups, their Jobs' manifests
and how long to wait (the operator's ``make fabric-check`` is operator_tools/fabric_check.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cluster_facts.kubernetes_plan import KubernetesLayerPlan, ManifestSet
from cluster_plan.kubernetes_values import fabric_checks
from config import StackConfig
from k8s_charts.checks.fabric_check import (
    ACTIVE_DEADLINE_SECONDS,
    FabricCheckValues,
    job_name,
    skip_reason,
)

__all__ = [
    "pipeline_fabric_check_jobs",
    "pipeline_fabric_check_manifests",
    "pipeline_fabric_checks",
    "wait_seconds",
]


def wait_seconds(config: StackConfig) -> int:
    """How long a check may take to end: the autoscaler's time to bring nodes, then the pods' own
    deadline (waiting for the workers and running nccom-test), and five minutes of slack."""
    return config.autoscaler.max_node_provision_minutes * 60 + ACTIVE_DEADLINE_SECONDS + 5 * 60


def pipeline_fabric_checks(config: StackConfig) -> tuple[FabricCheckValues, ...]:
    """The checks the pipeline's deployment check runs: none unless fabric_check.pipeline is on
    and CodeBuild can reach the API server; only groups that can be checked."""
    if not (config.fabric_check.pipeline and config.cluster.endpoint_public_cidrs):
        return ()
    return tuple(check for check in fabric_checks(config) if skip_reason(check) is None)


def pipeline_fabric_check_jobs(config: StackConfig) -> list[str]:
    """The names of the Volcano Jobs the pipeline creates (its RBAC names them)."""
    return [job_name(check.node_group) for check in pipeline_fabric_checks(config)]


def pipeline_fabric_check_manifests(
    config: StackConfig, plan: KubernetesLayerPlan
) -> list[Mapping[str, Any]]:
    """The Volcano Jobs the pipeline creates, as ``plan`` rendered them: the files the synth writes
    and what the check's admission policy admits (k8s_charts/checks/deployment_check_rbac.py)."""
    jobs = []
    for check in pipeline_fabric_checks(config):
        step = plan.step(job_name(check.node_group))
        assert isinstance(step, ManifestSet)
        [job] = step.manifests
        jobs.append(job)
    return jobs
