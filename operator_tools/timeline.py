"""``make timeline CONFIG=<file>``: the modelled time from ``kubectl apply`` of each configured run on
zero Trainium nodes to its first training step, stage by stage, with the source of every number.

    python -m operator_tools.timeline --config config/default.yaml [--run NAME]

Offline, from the configuration and the model (operator_tools/first_step_model.py). Stages print in the
order of cluster_facts/run_stages.py, the order the canary (``make canary``) prints its
measurements in. Three columns: cold caches (the first run of its kind), warm caches (its data set
staged and its graphs compiled) and warm caches as the stack started runs before issue 25.
Bad configuration: one line per problem on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from cluster_facts.neuron_stack import TRAINING_IMAGE as DEFAULT_TRAINING_IMAGE
from cluster_facts.node_startup import FAST_IMAGE_PULL, ROOT_VOLUME_THROUGHPUT_MIB_PER_SECOND
from config import DEFAULT_CONFIG, ConfigError, StackConfig, load_config
from operator_tools.first_step_model import (
    COLD,
    FIGURES,
    GOAL_SECONDS,
    WARM,
    Figure,
    RunStart,
    before_the_cuts,
    timeline,
    total_seconds,
)

__all__ = ["main", "render", "run_starts"]

# Whether the stack pulls a run's image at node start (a pre-pull while the node is checked).
PREPULL = False
# run_worker.sh skips neuron_parallel_compile when every replica's cache holds the run's graph key.
COMPILE_KEY_REUSE = True


def _image_bytes(image: str) -> Figure:
    if image.endswith(DEFAULT_TRAINING_IMAGE.split("/", 1)[1]):
        return FIGURES["image_bytes"]
    return Figure(
        FIGURES["image_bytes"].value,
        f"not known for {image}: taken as the default training image's estimate",
    )


def run_starts(config: StackConfig) -> list[RunStart]:
    starts = []
    for run in config.runs:
        group = config.run_node_group(run)
        starts.append(
            RunStart(
                run=run.name,
                instance_type=group.instance_type,
                nodes=run.nodes,
                image=run.image,
                image_bytes=_image_bytes(run.image),
                datasets=len(run.datasets) + (1 if run.preset is not None else 0),
                # Only the preset's archive has a known size (48 GB); a run's own data sets have none.
                staging=FIGURES["dataset_staging"] if run.preset is not None else None,
                workers_per_node=group.instance.processes_per_node,
                precompile=run.precompile is not None,
                fast_image_pull=FAST_IMAGE_PULL,
                root_volume_mib_per_second=ROOT_VOLUME_THROUGHPUT_MIB_PER_SECOND,
                prepull=PREPULL,
                compile_key_reuse=COMPILE_KEY_REUSE,
            )
        )
    return starts


def _minutes(seconds: float) -> str:
    return f"{seconds:7.0f} s {seconds / 60:5.1f} min"


def render(start: RunStart, out: TextIO) -> bool:
    """Print one run's timeline; True when its warm-cache total meets the goal."""
    cold, warm, before = timeline(start, COLD), timeline(start, WARM), timeline(before_the_cuts(start), WARM)
    out.write(f"run {start.run}: {start.nodes} x {start.instance_type}, image {start.image}\n")
    width = max(len(stage.stage.id) for stage in warm)
    out.write(
        f"  {'stage':<{width}}  {'cold caches':>9}  {'warm caches':>9}  {'warm, before':>12}  what happens\n"
    )
    out.writelines(
        f"  {w.stage.id:<{width}}  {c.seconds:9.0f} s  {w.seconds:9.0f} s  {b.seconds:10.0f} s  "
        f"{w.stage.title}{f' ({w.detail})' if w.detail else ''}\n"
        for c, w, b in zip(cold, warm, before, strict=True)
    )
    totals = [total_seconds(t) for t in (cold, warm, before)]
    out.write(f"  {'total':<{width}}  {totals[0]:9.0f} s  {totals[1]:9.0f} s  {totals[2]:10.0f} s\n")
    met = totals[1] <= GOAL_SECONDS
    out.write(
        f"  goal: a warm run's first step within {GOAL_SECONDS // 60} minutes of kubectl apply on zero nodes: "
        f"{'met' if met else 'not met'} ({totals[1] / 60:.1f} min; before the cuts {totals[2] / 60:.1f} min; "
        f"cold {totals[0] / 60:.1f} min)\n"
    )
    out.write("  sources:\n")
    for c, w in zip(cold, warm, strict=True):
        out.write(f"    {w.stage.id}: {w.source}\n")
        if c.source != w.source:
            out.write(f"    {c.stage.id} (cold): {c.source}\n")
    return met


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--run", help="only this run")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print("\n".join(error.lines()), file=sys.stderr)
        return 1
    starts = [start for start in run_starts(config) if args.run in (None, start.run)]
    if not starts:
        print(
            f"{args.config}: no run {args.run!r}" if args.run else f"{args.config}: no runs", file=sys.stderr
        )
        return 1
    for index, start in enumerate(starts):
        if index:
            out.write("\n")
        render(start, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
