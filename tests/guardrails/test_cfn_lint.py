"""cfn-lint over every synthesized template, with the repository's .cfnlintrc.yaml and nothing else.

Zero errors, and zero warnings beyond the ones .cfnlintrc.yaml switches off with a reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO_ROOT, Synthesized
from tests.guardrails.reports import cfn_lint, summary

STACKS = ["default_stack", "example_stack"]


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
