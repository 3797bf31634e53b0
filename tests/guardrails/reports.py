"""Reading what the guardrails report: CDK's policy validation report and its plugins' verdicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from constructs import IConstruct

from constructs_trn.nag import ACKNOWLEDGMENT_METADATA

AWS_SOLUTIONS = "AwsSolutions"


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
