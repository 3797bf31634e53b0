"""The pipeline's deployment check on the real control plane: its RBAC and admission fences, applied as
the stack applies them, let its group create exactly the rendered fabric-check Job and the canary's
Job and program, and the pods Volcano's controller then creates for the canary pass Pod Security
restricted and the team policies.

The configuration is the default with ``fabric_check.pipeline`` on; the fences are rendered as
stacks/trainium_stack.py renders them (from the plan's fabric-check Job and the canary's objects,
through k8s_charts.plan.render). The check is impersonated: the group its access entry maps to.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from cluster_facts.kubernetes_names import DEPLOYMENT_CHECK_GROUP, PLATFORM_NAMESPACE
from cluster_plan.canary_run import canary_manifests, canary_run
from cluster_plan.fabric_check_commands import pipeline_fabric_check_manifests
from k8s_charts.checks.deployment_check_rbac import DeploymentCheckRbacChart, canary_access, fabric_check_job
from k8s_charts.plan import render
from k8s_charts.runs.tensorboard import SERVICE_PROXY_NAME
from tests.cluster.control_plane import ControlPlane, Kubectl
from tests.cluster.plans import config_data, plan_of
from tests.conftest import DEFAULT_CONFIG
from tests.yaml_edits import with_change

CHECK_USER = "arn:aws:sts::111122223333:assumed-role/trainium-deploy-check/codebuild"
DATA = with_change(config_data(DEFAULT_CONFIG), "fabric_check", {"pipeline": True})


@pytest.fixture(scope="module")
def fenced(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    from config import parse_config  # noqa: PLC0415 - the module's one configuration

    config = parse_config(DATA)
    plan = plan_of(DATA)
    control_plane.apply_plan(plan)
    jobs = pipeline_fabric_check_manifests(config, plan)
    _, canary = canary_manifests(canary_run(config))
    rbac = render(
        partial(
            DeploymentCheckRbacChart,
            group=DEPLOYMENT_CHECK_GROUP,
            fabric_check_jobs=[fabric_check_job(job) for job in jobs],
            fabric_check_namespace=PLATFORM_NAMESPACE,
            canary=canary_access(
                canary, tensorboard_namespace=PLATFORM_NAMESPACE, tensorboard_proxy=SERVICE_PROXY_NAME
            ),
        ),
        "deployment-check-rbac",
    )
    manifests = "".join(json.dumps(m) for m in rbac)
    control_plane.kubectl("apply", "-f", "-", input=manifests)
    # A new policy is enforced a moment after it is stored (the admission plugin's informer): the
    # stack's check runs long after its deploy; here, wait until a tampered Job is refused.
    tampered = json.dumps(_tampered(_objects()[0][0]))
    control_plane.wait_for(
        lambda: (
            _check(control_plane)(
                "create", "--dry-run=server", "-f", "-", input=tampered, check=False
            ).returncode
            != 0
        ),
        timeout=30,
        what="the deployment check's fence enforced",
    )
    yield control_plane
    control_plane.kubectl("delete", "-f", "-", "--ignore-not-found", input=manifests)


def _check(plane: ControlPlane) -> Kubectl:
    return plane.impersonate(CHECK_USER, [DEPLOYMENT_CHECK_GROUP])


def _objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from config import parse_config  # noqa: PLC0415

    config = parse_config(DATA)
    jobs = [copy.deepcopy(dict(j)) for j in pipeline_fabric_check_manifests(config, plan_of(DATA))]
    _, canary = canary_manifests(canary_run(config))
    return jobs, [copy.deepcopy(dict(o)) for o in canary]


def _tampered(job: dict[str, Any]) -> dict[str, Any]:
    """The fabric-check Job with another image in its first task."""
    tampered = copy.deepcopy(job)
    tampered["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"] = "docker.io/library/busybox:1"
    return tampered


def test_the_checks_fences_type_check(fenced: ControlPlane) -> None:
    checked, warnings = fenced.policy_type_checking()
    assert any(name.startswith("trainium-deployment-check") for name in checked), checked
    assert warnings == {}, json.dumps(warnings, indent=1)


def test_the_check_may_create_the_rendered_fabric_check_job_and_nothing_else(fenced: ControlPlane) -> None:
    [job], _ = _objects()
    check = _check(fenced)
    refused = check("create", "-f", "-", input=json.dumps(_tampered(job)), check=False)
    assert refused.returncode != 0, refused.stdout
    assert "every container's image one of the check's" in refused.stderr, refused.stderr
    created = check("create", "-f", "-", input=json.dumps(job), check=False)
    try:
        assert created.returncode == 0, created.stderr
    finally:
        fenced.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=true", input=json.dumps(job))


def test_the_check_may_start_the_canary_and_volcano_creates_its_pods(fenced: ControlPlane) -> None:
    _, canary = _objects()
    check = _check(fenced)
    [job] = [o for o in canary if o["kind"] == "Job"]
    try:
        for obj in canary:
            created = check("create", "-f", "-", input=json.dumps(obj), check=False)
            assert created.returncode == 0, f"{obj['kind']} {obj['metadata']['name']}: {created.stderr}"
        replicas = sum(int(task["replicas"]) for task in job["spec"]["tasks"])
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        fenced.wait_for(
            lambda: (
                len(
                    fenced.kubectl.json("get", "pods", "-n", namespace, "-l", f"volcano.sh/job-name={name}")[
                        "items"
                    ]
                )
                == replicas
            ),
            timeout=60,
            what="the canary's pods, created by Volcano's controller",
        )
    finally:
        for obj in canary:
            fenced.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=true", input=json.dumps(obj))
