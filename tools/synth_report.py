#!/usr/bin/env python3
"""The one line ``make synth`` ends with: what the synth wrote, and where.

    python tools/synth_report.py cdk.out
    wrote cdk.out/: TrainiumStack.template.json, <n> charts in cdk.out/k8s/, summary in cdk.out/summary/TrainiumStack.md

The templates and stage assemblies are read from the cloud assembly's ``manifest.json`` (what this
synth produced, not whatever else lies in the directory); the review files from ``k8s/`` and
``summary/``, which ``make synth`` empties before it synthesizes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["describe", "main"]

_STACK = "aws:cloudformation:stack"
_NESTED_ASSEMBLY = "cdk:cloud-assembly"


def _count(number: int, singular: str, plural: str) -> str:
    return f"{number} {singular if number == 1 else plural}"


def describe(outdir: Path) -> str:
    """One line naming the templates, stage assemblies, review YAML and summaries in ``outdir``."""
    shown = str(outdir)
    artifacts = json.loads((outdir / "manifest.json").read_text())["artifacts"]
    templates = [
        artifact["properties"]["templateFile"]
        for artifact in artifacts.values()
        if artifact["type"] == _STACK
    ]
    stages = [
        f"{artifact['properties']['directoryName']}/"
        for artifact in artifacts.values()
        if artifact["type"] == _NESTED_ASSEMBLY
    ]
    parts = list(templates)
    if stages:
        parts.append(f"{_count(len(stages), 'stage', 'stages')} in {', '.join(stages)}")
    charts = sorted((outdir / "k8s").glob("*.yaml"))
    if charts:
        parts.append(f"{_count(len(charts), 'chart', 'charts')} in {shown}/k8s/")
    summaries = sorted((outdir / "summary").glob("*.md"))
    if len(summaries) == 1:
        parts.append(f"summary in {shown}/summary/{summaries[0].name}")
    elif summaries:
        parts.append(f"{len(summaries)} summaries in {shown}/summary/")
    return f"wrote {shown}/: {', '.join(parts)}"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: synth_report.py <cdk output directory>", file=sys.stderr)
        return 2
    print(describe(Path(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
