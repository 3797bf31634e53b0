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

from config import load_config
from stacks.deployment_check import deployment_check_env, deployment_check_script
from tests.conftest import REPO_ROOT

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
  *describe-nodegroup*) printf '%s\t%s\n' "${FAKE_NODEGROUP_STATUS:-ACTIVE}" "${FAKE_HEALTH_ISSUES:-0}" ;;
  *describe-instances*) printf '%b' "${FAKE_INSTANCES}" ;;
  "eks get-token"*) echo '{"status": {"token": "k8s-aws-v1.token"}}' ;;
  *) echo "unexpected aws call: $*" >&2; exit 2 ;;
esac
"""
FAKE_CURL = r"""#!/usr/bin/env bash
echo "curl $*" >> "${FAKE_LOG}"
cat "${FAKE_NODES}"
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


@pytest.fixture
def run_check(tmp_path: Path) -> Callable[..., Run]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("aws", FAKE_AWS), ("curl", FAKE_CURL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod((bin_dir / name).stat().st_mode | stat.S_IEXEC)
    config = load_config(REPO_ROOT / "config" / "environments" / "dev.yaml")

    def run(*, nodes: list[dict[str, Any]] | None = None, private: bool = False, **overrides: str) -> Run:
        nodes_file = tmp_path / "nodes.json"
        nodes_file.write_text(json.dumps({"items": nodes if nodes is not None else [node("ip-10-10-1-1")]}))
        log = tmp_path / "calls.log"
        log.write_text("")
        environment = {
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(tmp_path),
            **deployment_check_env(config, stage_id="Dev", check_role_arn=CHECK_ROLE_ARN),
            "CLUSTER_NAME": config.name,
            "ECR_REPOSITORY_URI": "111111111111.dkr.ecr.us-west-2.amazonaws.com/trainium-dev/training",
            "FSX_FILE_SYSTEM_ID": "fs-0123456789abcdef0",
            "FSX_DNS_NAME": "fs-0123456789abcdef0.fsx.us-west-2.amazonaws.com",
            "FSX_MOUNT_NAME": "abcdefgh",
            "TRAINIUM_SUBNET_ID": "subnet-0123456789abcdef0",
            "FAKE_LOG": str(log),
            "FAKE_NODES": str(nodes_file),
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


def test_a_healthy_stage_passes_and_every_call_uses_the_stage_role(run_check: Callable[..., Run]) -> None:
    run = run_check()
    assert run.result.returncode == 0, run.output
    assert "ok: i-0aaaaaaaaaaaaaaa1 (trn1-32xl) has 8 EFA interfaces" in run.output
    assert (
        "ok: every Trainium node is Ready and advertises its Neuron devices and EFA interfaces" in run.output
    )
    assume, *calls = run.calls
    assert assume.startswith(f"none sts assume-role --role-arn {CHECK_ROLE_ARN}")
    assert all(call.startswith(("ASIACHECK ", "curl ")) for call in calls), calls
    assert any("labelSelector=trainium%2Fnode-group" in call for call in calls)
    assert any("Authorization: Bearer k8s-aws-v1.token" in call for call in calls)


def test_a_private_endpoint_skips_only_the_kubernetes_part(run_check: Callable[..., Run]) -> None:
    run = run_check(private=True)
    assert run.result.returncode == 0, run.output
    assert "Neuron and EFA allocatable not checked: the API endpoint of trainium-dev is private" in run.output
    assert "ok: i-0aaaaaaaaaaaaaaa1 (trn1-32xl) has 8 EFA interfaces" in run.output
    assert not any(call.startswith("curl") for call in run.calls)


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
    ],
)
def test_each_problem_fails_the_check_with_its_line(
    run_check: Callable[..., Run], change: dict[str, str], expected: str
) -> None:
    run = run_check(**change)
    assert run.result.returncode != 0
    assert expected in run.output


@pytest.mark.parametrize(
    "nodes",
    [
        pytest.param([node("ip-10-10-1-1", neuron=None)], id="no-neuron-devices"),
        pytest.param([node("ip-10-10-1-1", efa="0")], id="no-efa-devices"),
        pytest.param([node("ip-10-10-1-1", ready=False)], id="not-ready"),
        pytest.param([], id="fewer-nodes-than-min-size"),
        pytest.param([node("ip-10-10-1-1"), node("ip-10-10-1-2", neuron="8")], id="one-of-two-nodes"),
    ],
)
def test_nodes_without_their_devices_fail_after_the_wait(
    run_check: Callable[..., Run], nodes: list[dict[str, Any]]
) -> None:
    run = run_check(nodes=nodes)
    assert run.result.returncode != 0
    assert "FAIL: after 0s fewer than 1 Trainium nodes are Ready, or one lacks its devices" in run.output


def test_the_script_is_valid_bash() -> None:
    result = subprocess.run(
        ["bash", "-n", "-c", deployment_check_script()], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
