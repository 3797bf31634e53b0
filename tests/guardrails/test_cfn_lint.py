"""cfn-lint over every synthesized template, with the repository's .cfnlintrc.yaml and nothing else.

Zero errors, and zero warnings beyond the ones .cfnlintrc.yaml switches off with a reason.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO_ROOT, Synthesized

CFN_LINT = REPO_ROOT / ".venv" / "bin" / "cfn-lint"
STACKS = ["default_stack", "example_stack"]


def cfn_lint(*templates: Path) -> list[dict[str, Any]]:
    """cfn-lint's findings, run from the repository root so that it reads .cfnlintrc.yaml."""
    result = subprocess.run(
        [str(CFN_LINT), "--format", "json", *map(str, templates)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # Exit status is a bit mask of the levels found (2 error, 4 warning, 8 informational); a crash
    # (or a bad option) is 1 or 32 and prints no JSON.
    assert result.stdout.strip(), f"cfn-lint printed nothing (exit {result.returncode}): {result.stderr}"
    findings: list[dict[str, Any]] = json.loads(result.stdout)
    return findings


def summary(findings: list[dict[str, Any]]) -> list[str]:
    return [f"{item['Rule']['Id']} {item['Message']} ({item['Location']['Path']})" for item in findings]


@pytest.mark.parametrize("stack_fixture", STACKS)
def test_trainium_templates_pass_cfn_lint(
    stack_fixture: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    synthesized: Synthesized = request.getfixturevalue(stack_fixture)
    template = tmp_path / "TrainiumStack.template.json"
    template.write_text(json.dumps(synthesized.json, indent=1))
    assert summary(cfn_lint(template)) == []


def test_an_invalid_resource_fails_cfn_lint(default_stack: Synthesized, tmp_path: Path) -> None:
    """The real template plus one broken volume: cfn-lint reports it as an error."""
    broken = json.loads(json.dumps(default_stack.json))
    broken["Resources"]["BrokenVolume"] = {
        "Type": "AWS::EC2::Volume",
        "Properties": {"AvailabilityZone": "us-west-2d", "Size": 10, "VolumeType": "gp9", "Encrypted": True},
    }
    template = tmp_path / "broken.template.json"
    template.write_text(json.dumps(broken))
    errors = [item for item in cfn_lint(template) if item["Level"] == "Error"]
    assert any(
        item["Location"]["Path"][:2] == ["Resources", "BrokenVolume"] and "gp9" in item["Message"]
        for item in errors
    ), summary(errors)


def test_configured_exceptions_only_cover_warnings() -> None:
    """.cfnlintrc.yaml may silence reviewed warnings; an error rule must never be listed there."""
    settings = yaml.safe_load((REPO_ROOT / ".cfnlintrc.yaml").read_text())
    assert set(settings) == {"ignore_checks"}
    assert all(rule.startswith(("W", "I")) for rule in settings["ignore_checks"])
