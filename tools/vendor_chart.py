"""Copy a Helm chart directory from its upstream release tag into charts/ (``make vendor-charts``).

    python -m tools.vendor_chart                       every chart of cluster_facts.vendored_charts
    python -m tools.vendor_chart volcano               one chart
    python -m tools.vendor_chart volcano --git-dir D   from a local clone or mirror D (no network)

For each chart (cluster_facts.vendored_charts: repository, tag, path, what to leave out) it clones
the tag (``git clone --bare --depth 1 --filter=blob:none``, so only the chart's files are fetched)
unless ``--git-dir`` names a git directory that has the tag, then writes every file of the chart's
directory at that commit, byte for byte, to ``charts/<name>-<version>/`` and the provenance record
``charts/<name>-<version>.provenance.json`` (source, commit, sha256 and git blob id of each file,
the paths left out and why). An earlier version of the same chart (its directory and record) is
removed. It refuses a symbolic link or submodule that is not listed as dropped, a dropped path the
tag does not have, and a Chart.yaml whose name or version is not the expected one.

To upgrade a chart: change its version in cluster_facts/versions.py, run ``make vendor-charts``,
read the diff of the chart (``git diff --stat``; values.yaml and templates/ in full), then run the
tests (tests/cluster_facts/test_vendored_charts.py and the chart's own tests; docs/supply-chain.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from cluster_facts.vendored_charts import CHARTS_DIRECTORY, VENDORED_CHARTS, VendoredChart

ROOT = Path(__file__).resolve().parent.parent

_REGULAR_FILES = ("100644", "100755")


@dataclass(frozen=True)
class _Entry:
    mode: str
    kind: str
    blob: str
    path: str
    """Relative to the chart's directory."""


def _git(git_dir: Path, *args: str) -> bytes:
    result = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {git_dir}: {result.stderr.decode().strip()}")
    return result.stdout


def file_digests(directory: Path) -> dict[str, str]:
    """Path (POSIX, relative to ``directory``) -> sha256 of every file below it, links not followed."""
    return {
        path.relative_to(directory).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file() or path.is_symlink()
    }


def provenance_problems(chart: VendoredChart, *, root: Path = ROOT) -> list[str]:
    """How the files of ``chart`` under ``root`` differ from its provenance record (none: they match)."""
    record_path = root / chart.provenance
    if not record_path.is_file():
        return [f"{chart.provenance} is missing: run `make vendor-charts`"]
    record = json.loads(record_path.read_text())
    recorded = {path: entry["sha256"] for path, entry in record["files"].items()}
    found = file_digests(root / chart.directory)
    problems = [
        f"{chart.directory}/{path}: not in the provenance record"
        for path in sorted(found.keys() - recorded.keys())
    ]
    problems += [f"{chart.directory}/{path}: missing" for path in sorted(recorded.keys() - found.keys())]
    problems += [
        f"{chart.directory}/{path}: sha256 {found[path]}, recorded {recorded[path]}"
        for path in sorted(found.keys() & recorded.keys())
        if found[path] != recorded[path]
    ]
    return problems


def _entries(git_dir: Path, commit: str, path: str) -> list[_Entry]:
    listing = _git(git_dir, "ls-tree", "-r", "-z", "--full-tree", commit, "--", f"{path}/")
    entries = []
    for record in listing.decode().split("\0"):
        if not record:
            continue
        meta, full_path = record.split("\t", 1)
        mode, kind, blob = meta.split(" ")
        entries.append(_Entry(mode, kind, blob, PurePosixPath(full_path).relative_to(path).as_posix()))
    if not entries:
        raise RuntimeError(f"{path}/ is empty or missing at {commit}")
    return entries


def _dropped(relative: str, dropped: Mapping[str, str]) -> str | None:
    return next((key for key in dropped if relative == key or relative.startswith(f"{key}/")), None)


def vendor(chart: VendoredChart, git_dir: Path, *, root: Path = ROOT) -> dict[str, Any]:
    """Write ``chart`` from ``git_dir`` at its tag into ``root``; return the provenance record."""
    commit = _git(git_dir, "rev-parse", "--verify", f"refs/tags/{chart.tag}^{{commit}}").decode().strip()
    entries = _entries(git_dir, commit, chart.path)
    unused = set(chart.dropped) - {key for entry in entries if (key := _dropped(entry.path, chart.dropped))}
    if unused:
        raise RuntimeError(
            f"{chart.name}: dropped paths not in {chart.path} at {chart.tag}: {sorted(unused)}"
        )
    kept = [entry for entry in entries if _dropped(entry.path, chart.dropped) is None]
    refused = [entry.path for entry in kept if entry.kind != "blob" or entry.mode not in _REGULAR_FILES]
    if refused:
        raise RuntimeError(
            f"{chart.name}: {refused} are links or submodules: copy what they point to or list them "
            "in the chart's dropped paths with the reason (cluster_facts/vendored_charts.py)"
        )

    target = root / chart.directory
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{chart.name}-", dir=target.parent))
    try:
        files: dict[str, dict[str, str]] = {}
        for entry in kept:
            content = _git(git_dir, "cat-file", "blob", entry.blob)
            destination = staging / entry.path
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(content)
            files[entry.path] = {"sha256": hashlib.sha256(content).hexdigest(), "git_blob": entry.blob}
        metadata = yaml.safe_load((staging / "Chart.yaml").read_text())
        if (metadata.get("name"), str(metadata.get("version"))) != (chart.name, chart.version):
            raise RuntimeError(
                f"{chart.tag}:{chart.path}/Chart.yaml is {metadata.get('name')} {metadata.get('version')}, "
                f"not {chart.name} {chart.version}"
            )
        _remove_other_versions(chart, root)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)

    record = {
        "chart": chart.name,
        "version": chart.version,
        "source": {"repository": chart.repository, "tag": chart.tag, "commit": commit, "path": chart.path},
        "dropped": dict(sorted(chart.dropped.items())),
        "files": dict(sorted(files.items())),
    }
    (root / chart.provenance).write_text(json.dumps(record, indent=1) + "\n")
    return record


def _remove_other_versions(chart: VendoredChart, root: Path) -> None:
    """The directory and record of any other version of ``chart`` (an upgrade leaves no stale copy)."""
    for record_path in (root / CHARTS_DIRECTORY).glob("*.provenance.json"):
        if json.loads(record_path.read_text()).get("chart") != chart.name:
            continue
        if record_path == root / chart.provenance:
            continue
        shutil.rmtree(
            record_path.with_name(record_path.name.removesuffix(".provenance.json")), ignore_errors=True
        )
        record_path.unlink()


def _clone(chart: VendoredChart, into: Path) -> Path:
    git_dir = into / "repo.git"
    subprocess.run(
        [
            "git",
            "clone",
            "--quiet",
            "--bare",
            "--depth=1",
            "--filter=blob:none",
            f"--branch={chart.tag}",
            chart.repository,
            str(git_dir),
        ],
        check=True,
    )
    return git_dir


def main(argv: Sequence[str] | None = None) -> int:
    names = [chart.name for chart in VENDORED_CHARTS]
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "charts", nargs="*", metavar="CHART", help=f"one of {', '.join(names)} (default: all)"
    )
    parser.add_argument("--git-dir", type=Path, help="a local git directory with the tag (one chart only)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.charts) - set(names))
    if unknown:
        parser.error(f"no vendored chart {', '.join(unknown)}; charts: {', '.join(names)}")
    chosen = [chart for chart in VENDORED_CHARTS if not args.charts or chart.name in args.charts]
    if args.git_dir is not None and len(chosen) != 1:
        parser.error("--git-dir takes exactly one chart")
    for chart in chosen:
        with tempfile.TemporaryDirectory() as scratch:
            git_dir = args.git_dir or _clone(chart, Path(scratch))
            try:
                record = vendor(chart, git_dir)
            except RuntimeError as error:
                print(f"vendor_chart: {error}", file=sys.stderr)
                return 1
        print(
            f"{chart.directory}: {len(record['files'])} files from {chart.repository} "
            f"{chart.tag} ({record['source']['commit']}), {len(chart.dropped)} dropped"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
