"""The post-deployment check script, run under bash with stand-ins for the AWS CLI and curl.

The stand-ins answer like the services would for a deployed stage; each test changes one answer
and expects the check to pass, or to fail with a line saying what is wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_plan.deployment_check import (
    deployment_check_env,
    deployment_check_script,
    deployment_check_timeout_minutes,
)
from cluster_plan.review_files import write_fabric_check_jobs
from config import StackConfig, load_config, parse_config
from k8s_charts.checks.deployment_check_rbac import DeploymentCheckRbacChart, FabricCheckJob
from tests.conftest import REPO_ROOT
from tests.k8s_charts.manifests import synth
from tests.k8s_validation import assert_valid

pytestmark = pytest.mark.skipif(
    shutil.which("jq") is None, reason="the check needs jq, as CodeBuild images have"
)

CHECK_ROLE_ARN = "arn:aws:iam::111111111111:role/trainium-dev-us-west-2-deploy-check"

FAKE_AWS = r"""#!/usr/bin/env bash
echo "${AWS_ACCESS_KEY_ID:-none} $*" >> "${FAKE_LOG}"
case "$*" in
  "sts assume-role"*) echo '{"AccessKeyId": "ASIACHECK", "SecretAccessKey": "secret", "SessionToken": "token"}' ;;
  *describe-cluster*cluster.status*) echo "${FAKE_CLUSTER_STATUS:-ACTIVE}" ;;
  *describe-cluster*endpoint*) printf 'https://cluster.example\t%s\n' "$(printf certificate | base64)" ;;
  *describe-nodegroup*) printf '%s\t%s\t%s\n' "${FAKE_NODEGROUP_STATUS:-ACTIVE}" "${FAKE_HEALTH_ISSUES:-0}" "${FAKE_ASG}" ;;
  *describe-auto-scaling-groups*) cat "${FAKE_ASG_TAGS}" ;;
  *describe-instances*) printf '%b' "${FAKE_INSTANCES}" ;;
  "eks get-token"*) echo '{"status": {"token": "k8s-aws-v1.token"}}' ;;
  "eks update-kubeconfig"*)
    # The kubeconfig the canary reads: the stand-in API server when a test gives one.
    shift 2; while [ "$#" -gt 0 ]; do if [ "$1" = --kubeconfig ]; then kubeconfig=$2; fi; shift; done
    printf 'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "%s"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n' \
      "${FAKE_KUBE_SERVER:-https://cluster.example}" > "${kubeconfig}" ;;
  *) echo "unexpected aws call: $*" >&2; exit 2 ;;
esac
"""
FAKE_CURL = r"""#!/usr/bin/env bash
echo "curl $*" >> "${FAKE_LOG}"
case "$*" in
  *"-X DELETE"*/jobs/*) rm -f "${FAKE_JOB}"; echo '{}' ;;
  *"-X POST"*/jobs*)
    for arg in "$@"; do case "${arg}" in @*) cp "${arg#@}" "${FAKE_POSTED}" ;; esac; done
    jq -n --arg phase "${FAKE_JOB_PHASE}" '{status: {state: {phase: $phase}}}' > "${FAKE_JOB}"; echo '{}' ;;
  */jobs/*) if [ -f "${FAKE_JOB}" ]; then cat "${FAKE_JOB}"; else exit 22; fi ;;
  */pods/*/log*) printf '%s\n' "noise from nccom-test" "nccom-test result table:" "    size(B) ... busbw(GB/s)" "${FAKE_VERDICT}" ;;
  */pods/*) jq -n --arg message "${FAKE_VERDICT}" '{status: {containerStatuses: [{state: {terminated: {message: $message}}}]}}' ;;
  */deployments/*) cat "${FAKE_DEPLOYMENT}" ;;
  */configmaps/*) cat "${FAKE_STATUS}" ;;
  */api/v1/nodes*) cat "${FAKE_NODES}" ;;
  *) echo "unexpected request: $*" >&2; exit 22 ;;
esac
"""
FAKE_ASG = "eks-trn1-32xl-4ec6e3f0-1a2b-3c4d-5e6f-0123456789ab"
# The autoscaler's status ConfigMap as cluster-autoscaler 1.34 writes it (clusterstate/api/types.go).
HEALTHY_STATUS = f"""time: 2026-11-23 10:00:00.000000000 +0000 UTC
autoscalerStatus: Running
clusterWide:
  health:
    status: Healthy
    nodeCounts:
      registered:
        total: 2
        ready: 2
  scaleUp:
    status: NoActivity
nodeGroups:
- name: {FAKE_ASG}
  health:
    status: Healthy
    cloudProviderTarget: 0
    minSize: 0
    maxSize: 2
"""


def node(
    name: str, *, neuron: str | None = "16", efa: str | None = "8", ready: bool = True
) -> dict[str, Any]:
    allocatable = {"cpu": "127", **({"aws.amazon.com/neuron": neuron} if neuron else {})}
    if efa:
        allocatable["vpc.amazonaws.com/efa"] = efa
    return {
        "metadata": {
            "name": name,
            "labels": {
                "trainium/node-group": "trn1-32xl",
                "trainium/neuron-devices": "16",
                "trainium/efa-interfaces": "8",
            },
        },
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


@dataclass
class Run:
    result: subprocess.CompletedProcess[str]
    calls: list[str]

    @property
    def output(self) -> str:
        return self.result.stdout + self.result.stderr


# make in the pipeline's checkout: records how it was called and with which credentials, then either
# prints a canned canary's output (FAKE_CANARY_OUTPUT, exit FAKE_CANARY_STATUS) or, with
# FAKE_CANARY_REAL, runs the real canary program as `make canary` does (quicker polls).
FAKE_MAKE = r"""#!/usr/bin/env bash
echo "${AWS_ACCESS_KEY_ID:-own-credentials} KUBECONFIG=${KUBECONFIG} make $*" >> "${FAKE_LOG}"
config=""; for arg in "$@"; do case "${arg}" in CONFIG=*) config=${arg#CONFIG=} ;; esac; done
if [ -n "${FAKE_CANARY_REAL:-}" ]; then
  cd "${FAKE_REPO}" && exec "${FAKE_PYTHON}" -m operator_tools.canary --config "${config}" --poll-seconds 0.05 \
    --timeout-minutes 1 --scale-down-minutes 0.05
fi
printf '%b' "${FAKE_CANARY_OUTPUT:-}"
exit "${FAKE_CANARY_STATUS:-0}"
"""


@pytest.fixture
def run_check(tmp_path: Path) -> Callable[..., Run]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("aws", FAKE_AWS), ("curl", FAKE_CURL), ("make", FAKE_MAKE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod((bin_dir / name).stat().st_mode | stat.S_IEXEC)
    config = load_config(REPO_ROOT / "config" / "environments" / "dev.yaml")

    def run(
        *,
        nodes: list[dict[str, Any]] | None = None,
        private: bool = False,
        tags: dict[str, str] | None = None,
        status: str = HEALTHY_STATUS,
        available: int = 1,
        **overrides: str,
    ) -> Run:
        environment_of_config = deployment_check_env(config, stage_id="Dev", check_role_arn=CHECK_ROLE_ARN)
        nodes_file = tmp_path / "nodes.json"
        nodes_file.write_text(json.dumps({"items": nodes if nodes is not None else []}))
        expected = dict(
            line.split(" ", 1)[1].split("=", 1)
            for line in environment_of_config["TRAINIUM_TEMPLATE_TAGS"].splitlines()
        )
        tags_file = tmp_path / "tags.txt"
        tags_file.write_text(
            "".join(f"{key}\t{value}\n" for key, value in (tags if tags is not None else expected).items())
        )
        deployment_file = tmp_path / "deployment.json"
        deployment_file.write_text(json.dumps({"status": {"availableReplicas": available}}))
        status_file = tmp_path / "status.json"
        status_file.write_text(json.dumps({"data": {"status": status}}))
        log = tmp_path / "calls.log"
        log.write_text("")
        environment = {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(tmp_path),
            **environment_of_config,
            "CLUSTER_NAME": config.name,
            "ECR_REPOSITORY_URI": "111111111111.dkr.ecr.us-west-2.amazonaws.com/trainium-dev/training",
            "FSX_FILE_SYSTEM_ID": "fs-0123456789abcdef0",
            "FSX_DNS_NAME": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
            "FSX_MOUNT_NAME": "abcdefgh",
            "TRAINIUM_SUBNET_ID": "subnet-0123456789abcdef0",
            "FAKE_LOG": str(log),
            "FAKE_NODES": str(nodes_file),
            "FAKE_ASG": FAKE_ASG,
            "FAKE_ASG_TAGS": str(tags_file),
            "FAKE_DEPLOYMENT": str(deployment_file),
            "FAKE_STATUS": str(status_file),
            "FAKE_INSTANCES": "i-0aaaaaaaaaaaaaaa1\t8\n",
            "DEVICE_WAIT_SECONDS": "0",
            **({"CHECK_KUBERNETES": "false"} if private else {}),
            **overrides,
        }
        result = subprocess.run(
            ["bash", "-c", deployment_check_script()],
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return Run(result=result, calls=log.read_text().splitlines())

    return run


@pytest.mark.process
def test_a_stage_with_no_trainium_node_passes_on_the_autoscalers_word(run_check: Callable[..., Run]) -> None:
    """The default: min_size 0, no job queued, no Trainium node runs; the autoscaler could bring them."""
    run = run_check()
    assert run.result.returncode == 0, run.output
    assert (
        f"ok: {FAKE_ASG} (trn1-32xl) scales from zero to nodes with aws.amazon.com/neuron=16 "
        "aws.amazon.com/neuroncore=32 vpc.amazonaws.com/efa=8"
    ) in run.output
    assert f"ok: the cluster autoscaler is Healthy and scales {FAKE_ASG}" in run.output
    assert "ok: every running Trainium node (0, at least 0 warm) is Ready" in run.output
    assume, *calls = run.calls
    assert assume.startswith(f"none sts assume-role --role-arn {CHECK_ROLE_ARN}")
    assert all(call.startswith(("ASIACHECK ", "curl ")) for call in calls), calls
    assert any(
        f"describe-auto-scaling-groups --auto-scaling-group-names {FAKE_ASG}" in call for call in calls
    )
    assert any("/namespaces/kube-system/deployments/cluster-autoscaler" in call for call in calls)
    assert any("/namespaces/kube-system/configmaps/cluster-autoscaler-status" in call for call in calls)
    assert any("labelSelector=trainium%2Fnode-group" in call for call in calls)
    assert any("Authorization: Bearer k8s-aws-v1.token" in call for call in calls)


@pytest.mark.process
def test_running_nodes_must_advertise_their_devices(run_check: Callable[..., Run]) -> None:
    run = run_check(nodes=[node("ip-10-10-1-1")])
    assert run.result.returncode == 0, run.output
    assert "ok: i-0aaaaaaaaaaaaaaa1 (trn1-32xl) has 8 EFA interfaces" in run.output
    assert "ok: every running Trainium node (1, at least 0 warm) is Ready" in run.output


@pytest.mark.process
def test_a_private_endpoint_skips_only_the_kubernetes_part(run_check: Callable[..., Run]) -> None:
    run = run_check(private=True)
    assert run.result.returncode == 0, run.output
    assert (
        "Autoscaler health and Neuron and EFA allocatable not checked: the API endpoint of trainium-dev is private"
        in run.output
    )
    assert f"ok: {FAKE_ASG} (trn1-32xl) scales from zero" in run.output
    assert "ok: i-0aaaaaaaaaaaaaaa1 (trn1-32xl) has 8 EFA interfaces" in run.output
    assert not any(call.startswith("curl") for call in run.calls)


def test_the_expected_tags_are_the_catalogs() -> None:
    config = load_config(REPO_ROOT / "config" / "environments" / "dev.yaml")
    lines = deployment_check_env(config, stage_id="Dev", check_role_arn=CHECK_ROLE_ARN)[
        "TRAINIUM_TEMPLATE_TAGS"
    ]
    assert set(lines.splitlines()) >= {
        "trn1-32xl k8s.io/cluster-autoscaler/enabled=true",
        "trn1-32xl k8s.io/cluster-autoscaler/trainium-dev=owned",
        "trn1-32xl k8s.io/cluster-autoscaler/node-template/label/trainium/node-group=trn1-32xl",
        "trn1-32xl k8s.io/cluster-autoscaler/node-template/taint/aws.amazon.com/neuron=present:NoSchedule",
        "trn1-32xl k8s.io/cluster-autoscaler/node-template/resources/aws.amazon.com/neuron=16",
        "trn1-32xl k8s.io/cluster-autoscaler/node-template/resources/vpc.amazonaws.com/efa=8",
    }


def _without(key: str) -> dict[str, str]:
    config = load_config(REPO_ROOT / "config" / "environments" / "dev.yaml")
    lines = deployment_check_env(config, stage_id="Dev", check_role_arn=CHECK_ROLE_ARN)[
        "TRAINIUM_TEMPLATE_TAGS"
    ]
    tags = dict(line.split(" ", 1)[1].split("=", 1) for line in lines.splitlines())
    return {tag: value for tag, value in tags.items() if tag != key}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            {"CLUSTER_NAME": ""}, "FAIL: the stack output behind CLUSTER_NAME is empty", id="no-output"
        ),
        pytest.param(
            {"CLUSTER_NAME": "other"},
            "FAIL: ClusterName is other, the configuration says trainium-dev",
            id="other-cluster",
        ),
        pytest.param(
            {"FAKE_CLUSTER_STATUS": "UPDATING"}, "FAIL: cluster trainium-dev is UPDATING", id="cluster"
        ),
        pytest.param(
            {"FAKE_NODEGROUP_STATUS": "DEGRADED", "FAKE_HEALTH_ISSUES": "1"},
            "FAIL: node group trn1-32xl is DEGRADED with 1 health issues",
            id="node-group",
        ),
        pytest.param(
            {"FAKE_INSTANCES": "i-0aaaaaaaaaaaaaaa1\t8\ni-0bbbbbbbbbbbbbbb2\t1\n"},
            "FAIL: i-0bbbbbbbbbbbbbbb2 (trn1-32xl) has 1 EFA interfaces, expected 8",
            id="missing-efa-interfaces",
        ),
        pytest.param(
            {"tags": _without("k8s.io/cluster-autoscaler/node-template/resources/aws.amazon.com/neuron")},
            f"FAIL: Auto Scaling group {FAKE_ASG} (trn1-32xl) lacks the tag "
            "k8s.io/cluster-autoscaler/node-template/resources/aws.amazon.com/neuron=16: the autoscaler "
            "cannot scale it from zero",
            id="no-neuron-tag",
        ),
        pytest.param(
            {"tags": _without("k8s.io/cluster-autoscaler/trainium-dev")},
            f"FAIL: Auto Scaling group {FAKE_ASG} (trn1-32xl) lacks the tag k8s.io/cluster-autoscaler/trainium-dev=owned",
            id="not-discovered",
        ),
        pytest.param(
            {"available": 0},
            "FAIL: the cluster autoscaler (kube-system/cluster-autoscaler) has no available replica",
            id="autoscaler-down",
        ),
        pytest.param(
            {
                "status": HEALTHY_STATUS.replace(
                    "    status: Healthy\n    nodeCounts", "    status: Unhealthy\n    nodeCounts"
                )
            },
            "FAIL: the cluster autoscaler reports Unhealthy, not Healthy",
            id="autoscaler-unhealthy",
        ),
        pytest.param(
            {"status": HEALTHY_STATUS.replace(f"- name: {FAKE_ASG}", "- name: eks-system-0000")},
            f"FAIL: the cluster autoscaler does not list {FAKE_ASG}: it will not scale that group",
            id="group-unknown-to-the-autoscaler",
        ),
    ],
)
@pytest.mark.process
def test_each_problem_fails_the_check_with_its_line(
    run_check: Callable[..., Run], change: dict[str, Any], expected: str
) -> None:
    run = run_check(**change)
    assert run.result.returncode != 0
    assert expected in run.output


@pytest.mark.parametrize(
    ("nodes", "warm"),
    [
        pytest.param([node("ip-10-10-1-1", neuron=None)], "0", id="no-neuron-devices"),
        pytest.param([node("ip-10-10-1-1", efa="0")], "0", id="no-efa-devices"),
        pytest.param([node("ip-10-10-1-1", ready=False)], "0", id="not-ready"),
        pytest.param([], "1", id="fewer-nodes-than-warm-min-size"),
        pytest.param([node("ip-10-10-1-1"), node("ip-10-10-1-2", neuron="8")], "0", id="one-of-two-nodes"),
    ],
)
@pytest.mark.process
def test_nodes_without_their_devices_fail_after_the_wait(
    run_check: Callable[..., Run], nodes: list[dict[str, Any]], warm: str
) -> None:
    run = run_check(nodes=nodes, MIN_TRAINIUM_NODES=warm)
    assert run.result.returncode != 0
    assert (
        f"FAIL: after 0s fewer than {warm} Trainium nodes are Ready, or one lacks its devices" in run.output
    )


@pytest.mark.process
def test_the_script_is_valid_bash() -> None:
    result = subprocess.run(
        ["bash", "-n", "-c", deployment_check_script()], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


# --- The fabric check (fabric_check.pipeline) ------------------------------------------------------

PASS_VERDICT = (
    "FABRIC CHECK PASS: all-reduce bus bandwidth 50.99 GiB/s (438.0 Gbps) at 1073741824 B over EFA >= "
    "required 23.28 GiB/s (0.25 x 800 Gbps = 200.0 Gbps)"
)
FAIL_VERDICT = (
    "FABRIC CHECK FAIL: network provider is tcp, not EFA (...); tainted ip-10-10-1-1 ip-10-10-1-2 with "
    "trainium/fabric-check=failed:NoSchedule"
)


def fabric_config(pipeline: bool = True, *, extra_group: bool = False) -> StackConfig:
    data = yaml.safe_load((REPO_ROOT / "config" / "environments" / "dev.yaml").read_text())
    data["fabric_check"] = {"pipeline": pipeline}
    if extra_group:
        data["trainium"]["node_groups"].append(
            {"name": "trn1-one", "instance_type": "trn1.32xlarge", "max_size": 1}
        )
    return parse_config(data)


def fabric_run(run_check: Callable[..., Run], tmp_path: Path, **overrides: str) -> tuple[Run, Path]:
    """The check with the pipeline's fabric check on: the Job file where the synth writes it, and a
    last run of the job still there (the check deletes it first)."""
    config = fabric_config(extra_group=True)
    [job_file] = write_fabric_check_jobs(config, stage_id="Dev", outdir=tmp_path)
    state = tmp_path / "job-state.json"
    state.write_text('{"status": {"state": {"phase": "Completed"}}}')
    environment = deployment_check_env(config, stage_id="Dev", check_role_arn=CHECK_ROLE_ARN)
    posted = tmp_path / "posted.json"
    run = run_check(
        **{
            **{key: environment[key] for key in environment if key.startswith("FABRIC_CHECK")},
            "FABRIC_CHECK_POLL_SECONDS": "0",
            "FAKE_JOB": str(state),
            "FAKE_POSTED": str(posted),
            "FAKE_JOB_PHASE": "Completed",
            "FAKE_VERDICT": PASS_VERDICT,
            **overrides,
        }
    )
    assert job_file.relative_to(tmp_path).as_posix() == "fabric-check/Dev/fabric-check-trn1-32xl.json"
    return run, posted


@pytest.mark.process
def test_the_fabric_check_deletes_the_last_run_creates_the_job_and_passes_on_its_verdict(
    run_check: Callable[..., Run], tmp_path: Path
) -> None:
    run, posted = fabric_run(run_check, tmp_path)
    assert run.result.returncode == 0, run.output
    assert "Fabric check skipped: fabric-check-trn1-one: node group trn1-one has max_size 1" in run.output
    assert f"ok: fabric-check-trn1-32xl: {PASS_VERDICT}" in run.output
    assert "nccom-test result table:" in run.output and "noise from nccom-test" not in run.output
    jobs = "/apis/batch.volcano.sh/v1alpha1/namespaces/trainium-system/jobs"
    writes = [call for call in run.calls if " -X " in call]
    assert [call.split(" -X ")[1].split()[0] for call in writes] == ["DELETE", "POST"]
    assert writes[0].endswith(f"{jobs}/fabric-check-trn1-32xl")
    assert '{"propagationPolicy": "Foreground"}' in writes[0]
    assert writes[1].endswith(jobs)
    # Exactly what the synth rendered: the Volcano Job, nothing else.
    created = json.loads(posted.read_text())
    assert (created["kind"], created["metadata"]["name"]) == ("Job", "fabric-check-trn1-32xl")
    assert any("/pods/fabric-check-trn1-32xl-launcher-0/log" in call for call in run.calls)


@pytest.mark.process
def test_a_failed_fabric_check_fails_the_stage_with_its_verdict(
    run_check: Callable[..., Run], tmp_path: Path
) -> None:
    run, _ = fabric_run(run_check, tmp_path, FAKE_JOB_PHASE="Terminated", FAKE_VERDICT=FAIL_VERDICT)
    assert run.result.returncode == 1
    assert run.output.splitlines()[-1] == f"FAIL: fabric-check-trn1-32xl ended Terminated: {FAIL_VERDICT}"


@pytest.mark.process
def test_a_fabric_check_that_does_not_end_fails_after_the_bounded_wait(
    run_check: Callable[..., Run], tmp_path: Path
) -> None:
    run, _ = fabric_run(run_check, tmp_path, FAKE_JOB_PHASE="Pending", FABRIC_CHECK_WAIT_SECONDS="0")
    assert run.result.returncode == 1
    assert run.output.splitlines()[-1] == (
        "FAIL: fabric-check-trn1-32xl did not end within 0s (phase Pending): nodes not brought up, or the check hung"
    )


def test_the_fabric_check_is_off_by_default_and_needs_a_reachable_api_server() -> None:
    off = deployment_check_env(fabric_config(pipeline=False), stage_id="Dev", check_role_arn=CHECK_ROLE_ARN)
    assert (off["FABRIC_CHECK"], off["FABRIC_CHECK_JOBS"]) == ("false", "")
    on = deployment_check_env(fabric_config(), stage_id="Dev", check_role_arn=CHECK_ROLE_ARN)
    assert (on["FABRIC_CHECK"], on["FABRIC_CHECK_JOBS"]) == (
        "true",
        "fabric-check/Dev/fabric-check-trn1-32xl.json",
    )
    # 15 minutes for the nodes, the pods' 60-minute deadline, 5 of slack; CodeBuild gets that on top of 30.
    assert on["FABRIC_CHECK_WAIT_SECONDS"] == "4800"
    assert deployment_check_timeout_minutes(fabric_config()) == 30 + 80
    assert deployment_check_timeout_minutes(fabric_config(pipeline=False)) == 30
    data = yaml.safe_load((REPO_ROOT / "config" / "environments" / "dev.yaml").read_text())
    data["fabric_check"] = {"pipeline": True}
    data["cluster"]["endpoint_public_cidrs"] = []
    private = parse_config(data)
    assert (
        deployment_check_env(private, stage_id="Dev", check_role_arn=CHECK_ROLE_ARN)["FABRIC_CHECK"]
        == "false"
    )


IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training-neuronx@sha256:" + "0" * 64


def test_the_checks_rbac_runs_only_the_named_fabric_checks() -> None:
    manifests = synth(
        lambda app: DeploymentCheckRbacChart(
            app,
            "rbac",
            group="trainium-deployment-check",
            fabric_check_jobs=[
                FabricCheckJob(name="fabric-check-trn1-32xl", namespace="trainium-system", images=(IMAGE,))
            ],
            fabric_check_namespace="trainium-system",
        )
    )
    assert_valid(manifests)
    roles = [m for m in manifests if m["kind"] == "Role" and m["metadata"]["namespace"] == "trainium-system"]
    [runner] = roles
    assert runner["rules"] == [
        {"apiGroups": ["batch.volcano.sh"], "resources": ["jobs"], "verbs": ["create"]},
        {
            "apiGroups": ["batch.volcano.sh"],
            "resources": ["jobs"],
            "resourceNames": ["fabric-check-trn1-32xl"],
            "verbs": ["get", "delete"],
        },
        {
            "apiGroups": [""],
            "resources": ["pods", "pods/log"],
            "resourceNames": ["fabric-check-trn1-32xl-launcher-0"],
            "verbs": ["get"],
        },
    ]
    # Its create is fenced by the admission policy (tests/pipeline/test_deployment_check_fence.py).
    assert [m["kind"] for m in manifests if m["kind"].startswith("ValidatingAdmissionPolicy")] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    without = synth(lambda app: DeploymentCheckRbacChart(app, "rbac", group="trainium-deployment-check"))
    assert not any(m["metadata"].get("namespace") == "trainium-system" for m in without)
    assert not any(m["kind"].startswith("ValidatingAdmissionPolicy") for m in without)
    with pytest.raises(ValueError, match="fabric check jobs fabric-check-x are not in trainium-system"):
        synth(
            lambda app: DeploymentCheckRbacChart(
                app,
                "rbac",
                group="trainium-deployment-check",
                fabric_check_jobs=[
                    FabricCheckJob(name="fabric-check-x", namespace="team-a", images=(IMAGE,))
                ],
                fabric_check_namespace="trainium-system",
            )
        )


# --- The canary (the pipeline file's waves[].environments[].canary) ---------------------------------------------

CANARY_FAILURE = (
    "CANARY FAIL at mounts: pod canary-1234abcd-worker-1: container trainer CreateContainerError: "
    'failed to mkdir "/data/datasets": permission denied'
)


def canary_env(**overrides: str) -> dict[str, str]:
    config = load_config(REPO_ROOT / "config" / "environments" / "dev.yaml")
    environment = deployment_check_env(
        config, stage_id="Dev", check_role_arn=CHECK_ROLE_ARN, canary_config="config/environments/dev.yaml"
    )
    return {**{key: environment[key] for key in environment if key.startswith("CANARY")}, **overrides}


@pytest.mark.process
def test_the_canary_runs_make_canary_with_the_stages_file_and_fresh_credentials(
    run_check: Callable[..., Run], tmp_path: Path
) -> None:
    run = run_check(**canary_env(FAKE_CANARY_OUTPUT="PASS ...\\nCANARY PASS: every stage passed\\n"))
    assert run.result.returncode == 0, run.output
    assert "CANARY PASS: every stage passed" in run.output
    assert "ok: the canary passed every stage" in run.output
    [kubeconfig_call] = [call for call in run.calls if "update-kubeconfig" in call]
    # Written with the assumed session (DescribeCluster), naming the check role for every token.
    assert kubeconfig_call.startswith("ASIACHECK eks update-kubeconfig --name trainium-dev ")
    assert f"--role-arn {CHECK_ROLE_ARN}" in kubeconfig_call
    [make] = [call for call in run.calls if " make " in call]
    # make runs without the assumed session (tokens re-assume the role), from the checkout.
    assert make == (
        f"own-credentials KUBECONFIG={tmp_path}/canary-kubeconfig make -C source canary "
        "CONFIG=config/environments/dev.yaml"
    )


@pytest.mark.process
def test_a_failed_canary_fails_the_stage_with_its_failure_line(run_check: Callable[..., Run]) -> None:
    run = run_check(
        **canary_env(
            FAKE_CANARY_OUTPUT=f"PASS ...\\nFAIL ... mounts\\n{CANARY_FAILURE}\\n", FAKE_CANARY_STATUS="1"
        )
    )
    assert run.result.returncode == 1
    assert run.output.splitlines()[-1] == f"FAIL: {CANARY_FAILURE}"
    # The fabric check does not run after a failed canary (nor at all here: it is off).
    assert not any("/jobs" in call for call in run.calls)


@pytest.mark.process
def test_a_canary_that_cannot_start_fails_the_stage_with_makes_last_line(
    run_check: Callable[..., Run],
) -> None:
    run = run_check(
        **canary_env(
            FAKE_CANARY_OUTPUT="make: *** [Makefile:70: .venv/.installed] Error 1\\n", FAKE_CANARY_STATUS="2"
        )
    )
    assert run.result.returncode == 1
    assert run.output.splitlines()[-1] == (
        "FAIL: the canary did not run: make: *** [Makefile:70: .venv/.installed] Error 1"
    )


@pytest.mark.process
def test_without_the_option_the_canary_is_not_run(run_check: Callable[..., Run]) -> None:
    run = run_check()
    assert run.result.returncode == 0, run.output
    assert "Canary not run (waves[].environments[].canary is false for Dev)" in run.output
    assert not any(" make " in call or "update-kubeconfig" in call for call in run.calls)


@pytest.mark.process
def test_the_check_runs_the_real_canary_through_the_kubeconfig_it_writes(
    run_check: Callable[..., Run],
) -> None:
    """The script, then the real canary program reading the kubeconfig the script had written, against
    the loopback stand-in of the API server that plays a good scale-from-zero run (tests/operator_tools/test_canary.py)."""
    import sys  # noqa: PLC0415

    from tests.operator_tools.test_canary import Cluster  # noqa: PLC0415
    from tests.stand_in_api import json_api  # noqa: PLC0415

    state = Cluster()
    with json_api(lambda method, path, headers, body: state.answer(method, path, body)) as url:
        run = run_check(
            **canary_env(
                CANARY_CONFIG="config/default.yaml",
                FAKE_CANARY_REAL="1",
                FAKE_KUBE_SERVER=url,
                FAKE_REPO=str(REPO_ROOT),
                FAKE_PYTHON=sys.executable,
            )
        )
    assert run.result.returncode == 0, run.output
    assert "CANARY PASS: every stage passed" in run.output
    assert "ok: the canary passed every stage" in run.output
    assert state.tensorboard_reads, "TensorBoard was read through the stand-in's service proxy"


def test_the_canarys_bounds_make_the_checks_codebuild_limit() -> None:
    config = load_config(REPO_ROOT / "config" / "environments" / "dev.yaml")
    # 15 for make's install, the run's 15 + 30, TensorBoard's listing of it 2, the nodes' removal
    # 5 + 5, on top of 30.
    assert deployment_check_timeout_minutes(config, canary=True) == 30 + 15 + 45 + 2 + 10
    assert deployment_check_timeout_minutes(config) == 30
    off = deployment_check_env(config, stage_id="Dev", check_role_arn=CHECK_ROLE_ARN)
    assert (off["CANARY"], off["CANARY_CONFIG"]) == ("false", "")
