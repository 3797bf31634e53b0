"""``make runs CONFIG=<file>``: each configured run, its identity, where it runs and where its output goes.

    python -m operator_tools.run_listing --config config/example.yaml

Offline, from the configuration alone: a run's identity (``<name>-<hash>``, the Volcano Job's name)
is a hash of what its Job holds, which is known at synth (k8s_charts/shared/identity.py), so the names
printed here are the names the deployed cluster shows. Bad configuration: one line per problem
on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from cluster_facts.kubernetes_names import DATA_MOUNT, RUNS_ROOT, TEAMS_DIR
from cluster_plan.kubernetes_values import kubernetes_values, placeholder_file_system
from cluster_plan.review_files import KUBERNETES_DIR
from config import DEFAULT_CONFIG, ConfigError, StackConfig, load_config
from k8s_charts.runs.training_run import run_id

DEFAULT_OUT = "cdk.out"
"""cdk.json's output: where ``make synth`` writes unless ``OUT`` says otherwise."""

__all__ = ["RunListing", "main", "run_listings"]


@dataclass(frozen=True, kw_only=True)
class RunListing:
    name: str
    identity: str
    """The Volcano Job's name, and the run's directory under its team's runs/."""
    namespace: str
    queue: str
    nodes: str
    """``<count> x <instance type> (<node group>)``."""
    output: str
    """Where the run writes, as a path of the file system (its pods see it at $OUTPUT_DIR)."""
    applied: bool
    manifest: str
    """The rendered Job, for ``kubectl apply -f`` after ``make synth``."""


def run_listings(config: StackConfig, *, out: str = DEFAULT_OUT) -> list[RunListing]:
    """``out``: where ``make synth`` wrote the review files (``make runs OUT=...``, as ``make synth``)."""
    values = kubernetes_values(config, file_system=placeholder_file_system(config))
    listings = []
    for planned in values.runs:
        run = planned.run
        identity = run_id(run)
        in_team_directory = f"{RUNS_ROOT}/{identity}".removeprefix(DATA_MOUNT)
        listings.append(
            RunListing(
                name=run.name,
                identity=identity,
                namespace=run.namespace,
                queue=run.queue,
                nodes=f"{run.nodes} x {run.instance.name} ({run.node_group})",
                output=f"/{TEAMS_DIR}/{run.namespace}{in_team_directory}",
                applied=planned.applied,
                manifest=f"{out.rstrip('/')}/{KUBERNETES_DIR}/run-{run.name}.yaml",
            )
        )
    return listings


_COLUMNS = ("run", "job (identity)", "namespace", "queue", "nodes", "output on FSx", "at deploy", "manifest")


def _rows(listings: Sequence[RunListing]) -> list[tuple[str, ...]]:
    return [
        (
            listing.name,
            listing.identity,
            listing.namespace,
            listing.queue,
            listing.nodes,
            listing.output,
            "applied" if listing.applied else "rendered only",
            listing.manifest,
        )
        for listing in listings
    ]


def format_table(listings: Sequence[RunListing]) -> str:
    rows = [_COLUMNS, *_rows(listings)]
    widths = [max(len(row[column]) for row in rows) for column in range(len(_COLUMNS))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def main(
    argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    parser = argparse.ArgumentParser(prog="make runs", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--out", default=DEFAULT_OUT, help="where make synth wrote cdk.out (make's OUT)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print("\n".join(error.lines()), file=err)
        return 1
    listings = run_listings(config, out=args.out)
    if not listings:
        print(f"{args.config}: no runs configured (runs: [] ); docs/runs.md shows how to add one", file=out)
        return 0
    print(format_table(listings), file=out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
