"""Imports run one way: each package may import only the packages below it.

    app.py
    stacks/            (composes the stacks, nothing else)
    operator_tools/    (the operator's command-line tools; never the stacks)
    cluster_plan/      (what a configuration renders besides the stacks, shared by both above)
    torchx_trn/        (the TorchX component: runs on a laptop with torchx, beside the app, not in it)
    preflight/         config/  constructs_trn/  k8s_charts/
    config/            (preflight reads it)
    cluster_facts/     (the facts every layer shares; imports no project package, aws-cdk-lib or cdk8s)
    cluster_programs/  (the in-cluster programs: read as files and shipped in ConfigMaps; they import
                        only each other, by plain name, as they do in a pod)

Charts never import constructs, constructs never import charts, and the configuration imports
neither: a plan (cluster_facts.kubernetes_plan) carries rendered charts to the construct that
applies them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PROJECT = (
    "cluster_facts",
    "cluster_plan",
    "cluster_programs",
    "config",
    "constructs_trn",
    "k8s_charts",
    "operator_tools",
    "preflight",
    "stacks",
    "torchx_trn",
)
ALLOWED: dict[str, set[str]] = {
    "cluster_facts": {"cluster_facts"},
    "config": {"cluster_facts", "config"},
    "constructs_trn": {"cluster_facts", "constructs_trn"},
    "k8s_charts": {"cluster_facts", "k8s_charts"},
    "preflight": {"cluster_facts", "config", "preflight"},
    "cluster_plan": {"cluster_facts", "config", "k8s_charts", "cluster_plan"},
    "operator_tools": {"cluster_facts", "config", "k8s_charts", "cluster_plan", "operator_tools"},
    "stacks": {"cluster_facts", "config", "constructs_trn", "k8s_charts", "cluster_plan", "stacks"},
    # The programs run in a pod with only each other: no project package at all.
    "cluster_programs": set(),
    # Only the facts: the component must load where torchx is installed and aws-cdk, cdk8s and
    # pydantic are not (tests/torchx_trn/test_torchx_component.py runs it from .venv-torchx, which has none).
    "torchx_trn": {"cluster_facts", "torchx_trn"},
}
# Third-party packages a layer must not need: the facts and the configuration are read before any
# construct or chart exists (preflight uses them without aws-cdk-lib).
FORBIDDEN_THIRD_PARTY = {
    "cluster_facts": {"aws_cdk", "cdk8s", "cdk8s_plus_27", "constructs", "pydantic", "boto3"},
    "config": {"aws_cdk", "cdk8s", "cdk8s_plus_27", "constructs", "boto3"},
    "torchx_trn": {"aws_cdk", "cdk8s", "cdk8s_plus_27", "constructs", "pydantic", "boto3", "yaml"},
}


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def package_files(package: str) -> list[Path]:
    return sorted((REPO_ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", PROJECT)
def test_a_package_imports_only_the_layers_below_it(package: str) -> None:
    problems = []
    for path in package_files(package):
        for module in imported_modules(path):
            top = module.split(".")[0]
            if top in PROJECT and top not in ALLOWED[package]:
                problems.append(f"{path.relative_to(REPO_ROOT)} imports {module}")
            if top in FORBIDDEN_THIRD_PARTY.get(package, set()):
                problems.append(f"{path.relative_to(REPO_ROOT)} imports {module}")
    assert problems == []


def test_the_rule_catches_an_upward_import(tmp_path: Path) -> None:
    offender = tmp_path / "bad.py"
    offender.write_text("from k8s_charts.plan import VOLCANO\nimport aws_cdk\n")
    assert imported_modules(offender) == {"k8s_charts.plan", "aws_cdk"}
