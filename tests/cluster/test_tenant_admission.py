"""The team admission cases (tests/tenant_cases.py), judged by the real API server with the example
configuration's plan applied, as the CEL model judges them in tests/k8s_charts/teams/test_tenant_admission.py
(tests/cluster/verdicts.py: how each is sent, and what the real server adds to the model); then
the team quota and LimitRange as the real server applies them. The Jobs of the documented TorchX
commands: test_torchx.py.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest

from config import StackConfig
from k8s_charts.teams.team_quota import (
    CRITICAL_PRIORITY_CLASSES,
    DEFAULT_CONTAINER_REQUESTS,
    NO_CRITICAL_QUOTA,
)
from k8s_charts.teams.tenant_admission import JOBS_POLICY
from tests.cluster.control_plane import ControlPlane
from tests.cluster.plans import deployed_plan
from tests.cluster.runs import end_runs
from tests.cluster.verdicts import verdict
from tests.tenant_cases import (
    STATEFULSET_CONTROLLER,
    etcd_pod,
    tenant_cases,
)


@pytest.fixture(scope="module")
def example(control_plane: ControlPlane, example_config: StackConfig) -> Iterator[ControlPlane]:
    control_plane.apply_plan(deployed_plan(example_config))
    # The runs the example applies hold their names and the team's pods: the cases create them anew.
    end_runs(control_plane, [team.name for team in example_config.teams])
    yield control_plane


def test_the_real_api_server_judges_every_team_admission_case_as_the_model_does(
    example: ControlPlane, example_config: StackConfig
) -> None:
    cases = tenant_cases(deployed_plan(example_config))
    assert len(cases) > 40
    how: Counter[str] = Counter()
    disagreements = {case.id: said for case in cases if (said := verdict(example, case, how)) is not None}
    assert disagreements == {}, json.dumps(disagreements, indent=1)
    print(dict(how))
    # Every Job case reaches its policy (no Pod Security for Jobs): the policies decided most cases.
    refused_jobs = [c for c in cases if c.policy == JOBS_POLICY and not c.allowed]
    assert how[f"refused by {JOBS_POLICY}"] == len(refused_jobs), how


@pytest.mark.parametrize("critical", CRITICAL_PRIORITY_CLASSES)
def test_each_teams_quota_refuses_a_platform_pod_at_a_critical_priority(
    example: ControlPlane, example_config: StackConfig, critical: str
) -> None:
    """The pod policy leaves the team's etcd pods, made by the StatefulSet controller, unjudged; the
    team's quota ``no-critical-priority`` still refuses one at a critical class, which the API
    server otherwise admits in any namespace (kubernetes#76310)."""
    plan = deployed_plan(example_config)
    controller = example.impersonate(STATEFULSET_CONTROLLER)
    for team in example_config.teams:
        pod = etcd_pod(plan, team.name)
        admitted = controller("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
        assert admitted.returncode == 0, (team.name, admitted.stderr)
        pod["spec"]["priorityClassName"] = critical
        refused = controller("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
        assert refused.returncode != 0, (team.name, critical)
        assert f"exceeded quota: {NO_CRITICAL_QUOTA}" in refused.stderr, refused.stderr


def test_a_container_without_requests_gets_the_teams_defaults(
    example: ControlPlane, example_config: StackConfig
) -> None:
    """The team's LimitRange, applied by the real API server's LimitRanger: a container that asks
    for nothing is stored with the defaults (the ResourceQuota then counts them)."""
    plan = deployed_plan(example_config)
    controller = example.impersonate(STATEFULSET_CONTROLLER)
    for team in example_config.teams:
        pod = etcd_pod(plan, team.name)
        for container in pod["spec"]["containers"]:
            container.pop("resources", None)
        stored = controller(
            "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(pod), check=False
        )
        assert stored.returncode == 0, (team.name, stored.stderr)
        for container in json.loads(stored.stdout)["spec"]["containers"]:
            assert container["resources"]["requests"] == DEFAULT_CONTAINER_REQUESTS, (team.name, container)
