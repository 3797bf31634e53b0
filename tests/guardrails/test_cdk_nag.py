"""cdk-nag's AwsSolutions pack runs in every synth, and every exception is acknowledged on purpose.

The session stacks are built like app.py builds them, plugin included (tests/conftest.py), so a
new finding fails the whole session. These tests read the validation report the synth wrote.
"""

from __future__ import annotations

from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2

from constructs_trn.nag import acknowledge, add_aws_solutions_checks
from tests.conftest import Synthesized, project_context
from tests.guardrails.reports import (
    acknowledgments_made,
    acknowledgments_used,
    plugin_report,
    violation_ids,
)

STACKS = ["default_stack", "example_stack"]


@pytest.mark.parametrize("stack_fixture", STACKS)
def test_trainium_stack_passes_aws_solutions(stack_fixture: str, request: pytest.FixtureRequest) -> None:
    synthesized: Synthesized = request.getfixturevalue(stack_fixture)
    report = plugin_report(synthesized.assembly_dir)
    assert report["conclusion"] == "success"
    assert violation_ids(report) == set()


@pytest.mark.parametrize("stack_fixture", STACKS)
def test_every_acknowledgment_suppresses_a_finding(
    stack_fixture: str, request: pytest.FixtureRequest
) -> None:
    """An acknowledgment whose finding was fixed (or renamed) must be removed, not left behind."""
    synthesized: Synthesized = request.getfixturevalue(stack_fixture)
    report = plugin_report(synthesized.assembly_dir)
    made = acknowledgments_made(synthesized.stack)
    assert made, "the stack acknowledges nothing: is constructs_trn.nag.acknowledge still used?"
    assert acknowledgments_used(report) == made


@pytest.mark.parametrize("stack_fixture", STACKS)
def test_acknowledgments_give_specific_reasons(stack_fixture: str, request: pytest.FixtureRequest) -> None:
    synthesized: Synthesized = request.getfixturevalue(stack_fixture)
    reasons = {
        entry["acknowledgedId"]: entry["reason"]
        for entry in plugin_report(synthesized.assembly_dir)["suppressedViolations"]
    }
    for finding, reason in reasons.items():
        assert len(reason) >= 60, f"{finding}: say why this construct may break the rule ({reason!r})"


def fixture_app(outdir: Path) -> tuple[cdk.App, ec2.CfnVolume]:
    """A deliberately bad template: one EBS volume without encryption (AwsSolutions-EC26)."""
    app = cdk.App(context=project_context(), outdir=str(outdir))
    add_aws_solutions_checks(app)
    stack = cdk.Stack(app, "Fixture", env=cdk.Environment(account="111122223333", region="us-west-2"))
    volume = ec2.CfnVolume(stack, "Unencrypted", availability_zone="us-west-2a", size=10)
    return app, volume


def test_an_unencrypted_volume_fails_the_synth(tmp_path: Path) -> None:
    app, _ = fixture_app(tmp_path)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = plugin_report(tmp_path)
    assert report["conclusion"] == "failure"
    assert ("Fixture/Unencrypted", "AwsSolutions-EC26") in violation_ids(report)


def test_an_acknowledgment_for_another_rule_does_not_hide_the_finding(tmp_path: Path) -> None:
    app, volume = fixture_app(tmp_path)
    acknowledge(volume, "EC27", reason="a different rule: must not suppress EC26 on this fixture volume")
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    assert ("Fixture/Unencrypted", "AwsSolutions-EC26") in violation_ids(plugin_report(tmp_path))


def test_the_exact_acknowledgment_lets_the_synth_pass(tmp_path: Path) -> None:
    app, volume = fixture_app(tmp_path)
    acknowledge(volume, "EC26", reason="fixture only: shows that an exact acknowledgment is honoured")
    app.synth()
    report = plugin_report(tmp_path)
    assert report["conclusion"] == "success"
    assert acknowledgments_used(report) == {("Fixture/Unencrypted", "AwsSolutions::AwsSolutions-EC26")}


def test_an_acknowledgment_needs_a_reason() -> None:
    app = cdk.App(context=project_context())
    with pytest.raises(ValueError, match="needs a reason"):
        acknowledge(cdk.Stack(app, "Fixture"), "EC26", reason=" ")
