"""The shape of the product in numbers, and the rules it keeps (``make lint`` runs ``--check``).

A *room* is a top-level package of the product, except the Kubernetes layer, whose rooms are the
sub-packages of ``k8s_charts/`` (its plan, ``k8s_charts/*.py``, is a room of its own on top). Not
counted: tests, these tools, and generated code (``k8s_charts/imports/``, written by ``make crds``).

    python -m tools.architecture            # rooms, lines, the largest room's share, imports between
                                            # rooms, the longest functions
    python -m tools.architecture --check    # exit 1, a line per problem, when a rule is broken

The rules: no product function over ``FUNCTION_LIMIT`` lines; no room over a third of the code;
inside ``k8s_charts/`` a room imports only the rooms listed below it in ``CHART_ROOMS`` (the
packages' own order is tests/test_layering.py's).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CHART_ROOMS", "FUNCTION_LIMIT", "Shape", "main", "problems", "shape"]

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "cluster_facts",
    "cluster_plan",
    "cluster_programs",
    "config",
    "constructs_trn",
    "k8s_charts",
    "operator_tools",
    "preflight",
    "stacks",
    "torchx_trn",
)
GENERATED = ("k8s_charts/imports/",)
FUNCTION_LIMIT = 80
LARGEST_SHARE = 1 / 3
CHART_ROOMS: dict[str, frozenset[str]] = {
    # room: the rooms it may import (besides itself), bottom first.
    "shared": frozenset(),
    "network": frozenset({"shared"}),
    "devices": frozenset({"shared", "network"}),
    "addons": frozenset({"shared"}),
    "teams": frozenset({"shared", "network", "addons"}),
    "runs": frozenset({"shared", "network", "devices"}),
    "checks": frozenset({"shared", "network", "devices"}),
}
PLAN_ROOM = "k8s_charts"
"""The plan on top of the chart rooms (``k8s_charts/*.py``): it may import every room."""


@dataclass(frozen=True)
class Function:
    path: str
    name: str
    lines: int


@dataclass(frozen=True)
class Shape:
    lines: dict[str, int]
    """Room -> lines of code (physical lines of its Python files)."""
    edges: Counter[tuple[str, str]]
    """(importing room, imported room) -> import statements."""
    functions: list[Function]
    """Every product function, longest first."""

    @property
    def total(self) -> int:
        return sum(self.lines.values())

    def largest(self) -> tuple[str, float]:
        room = max(self.lines, key=lambda name: self.lines[name])
        return room, self.lines[room] / self.total


def room_of(relative: str) -> str | None:
    """The room of a file path relative to the repository (None: not product code)."""
    parts = relative.split("/")
    if parts[0] not in PACKAGES or relative.startswith(GENERATED):
        return None
    if parts[0] == "k8s_charts" and len(parts) > 2:
        return f"k8s_charts/{parts[1]}"
    return parts[0]


def module_room(module: str) -> str | None:
    """The room of an imported module's dotted name (None: not the product's)."""
    parts = module.split(".")
    if parts[0] not in PACKAGES:
        return None
    if parts[0] == "k8s_charts" and len(parts) > 1 and parts[1] in CHART_ROOMS:
        return f"k8s_charts/{parts[1]}"
    if parts[0] == "k8s_charts" and len(parts) > 1 and parts[1] == "imports":
        return None
    return parts[0]


def _product_files(root: Path) -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            room = room_of(relative)
            if room is not None:
                yield room, path


def _imports(tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in ("k8s_charts",):
                yield from (f"k8s_charts.{alias.name}" for alias in node.names)
            else:
                yield node.module


def shape(root: Path = REPO_ROOT) -> Shape:
    lines: Counter[str] = Counter()
    edges: Counter[tuple[str, str]] = Counter()
    functions: list[Function] = []
    for room, path in _product_files(root):
        text = path.read_text(encoding="utf-8")
        lines[room] += len(text.splitlines())
        tree = ast.parse(text, filename=str(path))
        for module in _imports(tree):
            target = module_room(module)
            if target is not None and target != room:
                edges[(room, target)] += 1
        relative = path.relative_to(root).as_posix()
        functions += [
            Function(relative, node.name, node.end_lineno - node.lineno + 1)
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None
        ]
    functions.sort(key=lambda function: (-function.lines, function.path, function.name))
    return Shape(dict(sorted(lines.items())), edges, functions)


def problems(found: Shape) -> list[str]:
    """One line per broken rule."""
    lines = [
        f"{function.path}: {function.name} is {function.lines} lines (at most {FUNCTION_LIMIT}): split it into named steps"
        for function in found.functions
        if function.lines > FUNCTION_LIMIT
    ]
    room, share = found.largest()
    if share >= LARGEST_SHARE:
        lines.append(
            f"{room} holds {share:.0%} of the product's code (under a third): give part of it a room"
        )
    for (importer, imported), count in sorted(found.edges.items()):
        if not importer.startswith("k8s_charts/"):
            continue  # the packages' order: tests/test_layering.py
        below = {f"k8s_charts/{name}" for name in CHART_ROOMS.get(importer.split("/")[1], frozenset())}
        if imported not in below | {"cluster_facts"}:
            lines.append(
                f"{importer} imports {imported} ({count}x): a chart room imports only the rooms below it"
            )
    for room in found.lines:
        if room.startswith("k8s_charts/") and room.split("/")[1] not in CHART_ROOMS:
            lines.append(
                f"{room}: not a room of tools/architecture.py CHART_ROOMS: add it there and to CONTRIBUTING"
            )
    return lines


def report(found: Shape) -> str:
    room, share = found.largest()
    between = sum(found.edges.values())
    out = [f"rooms: {len(found.lines)}; code: {found.total:,} lines (generated code not counted)"]
    out += [
        f"  {name:28s} {count:6,} lines  {count / found.total:5.1%}" for name, count in found.lines.items()
    ]
    out.append(f"largest room: {room}, {share:.1%} of the code")
    out.append(f"imports between rooms: {between} statements over {len(found.edges)} room pairs")
    out.append("longest functions:")
    out += [f"  {f.lines:4d}  {f.path}: {f.name}" for f in found.functions[:5]]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.architecture", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a rule is broken")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    found = shape(arguments.root)
    if not arguments.check:
        print(report(found))
        return 0
    broken = problems(found)
    for line in broken:
        print(line, file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
