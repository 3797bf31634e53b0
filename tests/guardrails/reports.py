"""Running the guardrails and reading what they report: CDK's validation report, cfn-lint."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from constructs import IConstruct

from constructs_trn.nag import ACKNOWLEDGMENT_METADATA
from tests.conftest import REPO_ROOT

AWS_SOLUTIONS = "AwsSolutions"
CFN_LINT = REPO_ROOT / ".venv" / "bin" / "cfn-lint"


def plugin_report(assembly_dir: Path, plugin: str = AWS_SOLUTIONS) -> dict[str, Any]:
    """One plugin's part of ``validation-report.json`` (written on success and on failure)."""
    report = json.loads((assembly_dir / "validation-report.json").read_text())
    (found,) = [entry for entry in report["pluginReports"] if entry["pluginName"] == plugin]
    return dict(found)


def violation_ids(report: dict[str, Any]) -> set[tuple[str, str]]:
    """(construct path, rule) for each unacknowledged finding."""
    return {
        (construct["constructPath"], violation["ruleName"])
        for violation in report["violations"]
        for construct in violation["violatingConstructs"]
    }


def acknowledgments_made(root: IConstruct) -> set[tuple[str, str]]:
    """(construct path, acknowledged id) for every constructs_trn.nag.acknowledge() under ``root``."""
    return {
        (construct.node.path, str(entry.data))
        for construct in root.node.find_all()
        for entry in construct.node.metadata
        if entry.type == ACKNOWLEDGMENT_METADATA
    }


def acknowledgments_used(report: dict[str, Any]) -> set[tuple[str, str]]:
    """(construct path, acknowledged id) of every acknowledgment that suppressed a finding."""
    return {
        (suppressed["acknowledgedAt"], suppressed["acknowledgedId"])
        for suppressed in report["suppressedViolations"]
    }


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
    return [
        f"{item['Rule']['Id']} {item['Message']} ({Path(item['Filename']).name}: {item['Location']['Path']})"
        for item in findings
    ]
