#!/usr/bin/env python3
"""Time ``cdk synth`` of this app against an empty CDK app (tools/empty_app.py).

    python tools/bench.py --cdk node_modules/.bin/cdk --config config/default.yaml

Both are synthesized by the same CLI with the same interpreter (``sys.executable``), each
run into a fresh temporary output directory, interleaved (app, empty, app, empty, ...)
after the warm-up runs. Times are wall-clock seconds of the whole ``cdk synth`` command.
Relative paths are taken from the repository root (the parent of tools/).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 1.5


def synth_commands(cdk: Path, config: str) -> dict[str, list[str]]:
    """The two commands to time, by label, without their ``--output`` directory."""
    empty_app = shlex.join([sys.executable, "tools/empty_app.py"])
    return {
        "app": [str(cdk), "synth", "--quiet", "-c", f"config={config}"],
        "empty": [str(cdk), "synth", "--quiet", "--app", empty_app],
    }


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CDK_DISABLE_VERSION_CHECK"] = "1"
    env["CDK_DISABLE_CLI_TELEMETRY"] = "1"
    # cdk.json runs the app as `python3 app.py`: put this interpreter's directory first on
    # PATH so that `python3` is the interpreter the empty app runs on, too.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def time_once(command: list[str], env: dict[str, str]) -> float:
    """Run ``command`` into a fresh output directory; return wall-clock seconds, or exit on failure."""
    with tempfile.TemporaryDirectory(prefix="cdk-bench-") as output:
        start = time.perf_counter()
        result = subprocess.run(
            [*command, "--output", output], cwd=ROOT, env=env, capture_output=True, text=True, check=False
        )
        elapsed = time.perf_counter() - start
    if result.returncode != 0:
        print(f"failed (exit {result.returncode}): {shlex.join(command)}", file=sys.stderr)
        print(result.stderr, end="", file=sys.stderr)
        sys.exit(1)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cdk", type=Path, required=True, help="the CDK CLI, e.g. node_modules/.bin/cdk")
    parser.add_argument(
        "--config", required=True, help="the app's configuration file, e.g. config/default.yaml"
    )
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each (default: 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs of each first (default: 1)")
    args = parser.parse_args()
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be at least 1 and --warmup at least 0")

    cdk = ROOT / args.cdk  # an absolute --cdk stays as it is
    commands = synth_commands(cdk, args.config)
    env = bench_env()
    times: dict[str, list[float]] = {label: [] for label in commands}

    for _ in range(args.warmup):
        for command in commands.values():
            time_once(command, env)
    for _ in range(args.runs):
        for label, command in commands.items():
            times[label].append(time_once(command, env))

    medians = {label: statistics.median(samples) for label, samples in times.items()}
    print(f"cdk synth, {args.runs} runs each after {args.warmup} warm-up, wall-clock seconds")
    print(f"{'':8}{'median':>8}{'min':>8}{'max':>8}")
    for label, samples in times.items():
        print(f"{label:8}{medians[label]:8.2f}{min(samples):8.2f}{max(samples):8.2f}")
    ratio = medians["app"] / medians["empty"]
    print(f"ratio app/empty (medians): {ratio:.2f}")
    print(f"target: ratio at most {TARGET_RATIO} ({'met' if ratio <= TARGET_RATIO else 'not met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
