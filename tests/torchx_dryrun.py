"""The TorchX commands of docs/torchx.md, run with the real torchx CLI, and what they would submit.

The CLI runs from .venv-torchx (requirements-torchx.txt: torchx and the Kubernetes client, no
aws-cdk, cdk8s or pydantic), in the repository's root, as a user runs it. Each command line is run
by bash exactly as written in the docs (``docs_commands`` reads them back); ``$CLAIM`` is the team's
file system claim, taken from the rendered plan of the command's configuration, ``$NODE_GROUP`` the
team's first node group of the instance type and ``$TEAM_UID`` the team's uid, from the configuration
(``submission_environment``).
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cluster_facts.kubernetes_plan import KubernetesLayerPlan, ManifestSet
from cluster_plan.kubernetes_values import review_plan
from config import load_config
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG, REPO_ROOT

NATIVE_CONFIG = REPO_ROOT / "config" / "native.example.yaml"
NATIVE_IMAGE = "444455556666.dkr.ecr.us-east-2.amazonaws.com/trainium-native/training:torchneuron-sdk2.33.0-1"

__all__ = [
    "CASES",
    "DOC",
    "NATIVE_CONFIG",
    "NATIVE_IMAGE",
    "TORCHX_BIN",
    "Case",
    "docs_commands",
    "other_team",
    "plan_objects",
    "run_torchx",
    "submission_environment",
    "team_claim",
    "torchx_available",
]

TORCHX_BIN = REPO_ROOT / ".venv-torchx" / "bin"
DOC = REPO_ROOT / "docs" / "torchx.md"
_REQUEST_MARKER = "=== SCHEDULER REQUEST ==="
_COMPONENT = "torchx_trn/components.py:trainium_ddp"
# What every documented command passes for the team, from the variables its setup block sets.
_TEAM_ARGUMENTS = '--claim "$CLAIM" --node_group "$NODE_GROUP" --uid "$TEAM_UID"'


@dataclass(frozen=True, kw_only=True)
class Case:
    """One documented command, the configuration whose cluster it targets, and what it asks for."""

    name: str
    config: Path
    namespace: str
    queue: str
    instance_type: str
    nnodes: int
    command: str


CASES = (
    # The default configuration's one team: what TorchX users pass.
    Case(
        name="default-team",
        config=DEFAULT_CONFIG,
        namespace="training",
        queue="test",
        instance_type="trn1.32xlarge",
        nnodes=2,
        command=(
            'torchx run --dryrun --workspace "" -s kubernetes -cfg queue=test,namespace=training '
            f"{_COMPONENT} --script my_train.py --nnodes 2 {_TEAM_ARGUMENTS}"
        ),
    ),
    # config/example.yaml: the training team on its trn1n group (16 EFA interfaces per node).
    Case(
        name="example-trn1n",
        config=EXAMPLE_CONFIG,
        namespace="training",
        queue="test",
        instance_type="trn1n.32xlarge",
        nnodes=4,
        command=(
            'torchx run --dryrun --workspace "" -s kubernetes -cfg queue=test,namespace=training '
            f"{_COMPONENT} --instance_type trn1n.32xlarge --script my_train.py --nnodes 4 {_TEAM_ARGUMENTS}"
        ),
    ),
    # config/example.yaml's second team, with retries and script arguments.
    Case(
        name="example-research",
        config=EXAMPLE_CONFIG,
        namespace="research",
        queue="research",
        instance_type="trn1.32xlarge",
        nnodes=8,
        command=(
            'torchx run --dryrun --workspace "" -s kubernetes -cfg queue=research,namespace=research '
            f"{_COMPONENT} --script /data/code/train.py --nnodes 8 --max_retries 2 {_TEAM_ARGUMENTS} "
            "-- --data /datasets/wikitext --output_dir '$(OUTPUT_DIR)'"
        ),
    ),
    # config/native.example.yaml: native PyTorch (TorchNeuron) on its trn2 group of the native stack.
    Case(
        name="native-trn2",
        config=NATIVE_CONFIG,
        namespace="training",
        queue="test",
        instance_type="trn2.48xlarge",
        nnodes=2,
        command=(
            'torchx run --dryrun --workspace "" -s kubernetes -cfg queue=test,namespace=training '
            f"torchx_trn/components.py:trainium_native --image {NATIVE_IMAGE} --script /data/code/train.py "
            f"--nnodes 2 {_TEAM_ARGUMENTS} -- --device neuron --output_dir '$(OUTPUT_DIR)'"
        ),
    ),
)


def torchx_available() -> str | None:
    """Why the CLI cannot run here, or None."""
    if not os.access(TORCHX_BIN / "torchx", os.X_OK):
        return f"{TORCHX_BIN / 'torchx'} is missing: `make setup` installs .venv-torchx (requirements-torchx.txt)"
    return None


@functools.cache
def _plan(config: Path) -> KubernetesLayerPlan:
    return review_plan(load_config(config))


def plan_objects(config: Path) -> list[dict[str, Any]]:
    """Every object of the configuration's Kubernetes layer, as ``make synth`` renders it."""
    return [
        dict(manifest)
        for step in _plan(config)
        if isinstance(step, ManifestSet)
        for manifest in step.manifests
    ]


def team_claim(config: Path, namespace: str) -> str:
    """The file system's claim in the team's namespace (the one that is not the data sets')."""
    claims = [
        obj["metadata"]["name"]
        for obj in plan_objects(config)
        if obj["kind"] == "PersistentVolumeClaim"
        and obj["metadata"]["namespace"] == namespace
        and not obj["metadata"]["name"].endswith("-datasets")
    ]
    assert len(claims) == 1, f"expected one claim in {namespace}, found {claims}"
    return str(claims[0])


def submission_environment(case: Case) -> dict[str, str]:
    """The variables a documented command reads: the team's claim (from the plan), its first node
    group of the command's instance type and its uid (from the configuration)."""
    config = load_config(case.config)
    team = config.team(case.namespace)
    assert team.name == case.namespace, f"no team {case.namespace} in {case.config}"
    groups = [g.name for g in config.team_node_groups(team) if g.instance_type == case.instance_type]
    assert groups, f"team {team.name} has no node group of {case.instance_type}"
    return {
        "CLAIM": team_claim(case.config, case.namespace),
        "NODE_GROUP": groups[0],
        "TEAM_UID": str(team.owner_id),
    }


def run_torchx(
    command: str, *, env: Mapping[str, str], timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``command`` under bash in the repository's root, with .venv-torchx's torchx first on PATH."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=REPO_ROOT,
        env={
            "PATH": os.pathsep.join([str(TORCHX_BIN), "/usr/bin", "/bin"]),
            "HOME": os.environ.get("HOME", "/tmp"),
            "LANG": "C.UTF-8",
            # No kubeconfig, no Docker: a dry run needs neither.
            "KUBECONFIG": os.devnull,
            **env,
        },
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def dryrun_job(case: Case) -> dict[str, Any]:
    """The Volcano Job the case's command would submit, in the namespace it names: TorchX's
    scheduler passes the namespace in the API call, not in the object (the submission test in
    tests/torchx_trn/test_torchx_component.py checks the call's)."""
    result = run_torchx(case.command, env=submission_environment(case))
    assert result.returncode == 0, result.stderr[-3000:]
    assert _REQUEST_MARKER in result.stdout, result.stdout[-3000:]
    job: dict[str, Any] = yaml.safe_load(result.stdout.split(_REQUEST_MARKER, 1)[1])
    job["metadata"]["namespace"] = case.namespace
    return job


def docs_commands(doc: Path = DOC) -> list[str]:
    """Every line of ``doc``'s ``sh`` blocks that runs torchx, joined across ``\\`` ends."""
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", doc.read_text(), re.DOTALL):
        text = re.sub(r"\\\n\s*", "", block)
        lines.extend(line.strip() for line in text.splitlines() if line.strip().startswith("torchx "))
    return lines


def other_team(case: Case) -> tuple[str, str]:
    """Another team's node group and queue in the case's configuration, or names of none."""
    config = load_config(case.config)
    mine = {group.name for group in config.team_node_groups(config.team(case.namespace))}
    others = [team for team in config.teams if team.name != case.namespace]
    groups = [g.name for team in others for g in config.team_node_groups(team) if g.name not in mine]
    return (groups[0] if groups else "not-this-teams-group"), (
        others[0].queue_name if others else "not-this-teams-queue"
    )
