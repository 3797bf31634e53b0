"""CONTRIBUTING's drawing is the tree, and the tree keeps its rules (tools/architecture.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tools.architecture import CHART_ROOMS, main, problems, shape

_DRAWING = re.compile(r"<!-- architecture:begin -->\n```\n(.*?)```\n<!-- architecture:end -->", re.DOTALL)


def drawn_paths() -> list[str]:
    """Every folder and file the drawing names, as paths from the repository root."""
    match = _DRAWING.search((REPO_ROOT / "CONTRIBUTING.md").read_text())
    assert match is not None, "CONTRIBUTING.md has no architecture drawing between its markers"
    paths: list[str] = []
    parent = ""
    for line in match.group(1).splitlines():
        name = line.split()[0] if line.strip() and not line.startswith(" " * 6) else ""
        if not name or not re.fullmatch(r"[a-z_0-9]+(/|\.py)", name):
            continue
        if line.startswith("  "):
            paths.append(parent + name)
        else:
            parent = name if name.endswith("/") else ""
            paths.append(name)
    return paths


def test_every_folder_the_drawing_names_exists() -> None:
    paths = drawn_paths()
    assert "k8s_charts/checks/" in paths and "cluster_programs/" in paths
    assert [path for path in paths if not (REPO_ROOT / path).exists()] == []


def test_every_room_of_the_tree_is_drawn() -> None:
    drawn = {path.rstrip("/") for path in drawn_paths()}
    assert sorted(set(shape().lines) - drawn) == []
    assert sorted(f"k8s_charts/{room}" for room in CHART_ROOMS if f"k8s_charts/{room}" not in drawn) == []


def test_the_tree_keeps_its_rules() -> None:
    """No function over the limit, no room over a third, no chart room importing upwards."""
    assert problems(shape()) == []


def test_the_rules_catch_an_upward_import_and_a_long_function(tmp_path: Path) -> None:
    for room in ("shared", "teams"):
        (tmp_path / "k8s_charts" / room).mkdir(parents=True)
    (tmp_path / "k8s_charts" / "shared" / "a.py").write_text(
        "from k8s_charts.teams.b import X\n\n\ndef long() -> None:\n" + "    pass\n" * 90
    )
    (tmp_path / "k8s_charts" / "teams" / "b.py").write_text("X = 1\n" * 400)
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "c.py").write_text("Y = 1\n" * 2000)
    found = problems(shape(tmp_path))
    assert found == [
        "k8s_charts/shared/a.py: long is 91 lines (at most 80): split it into named steps",
        "config holds 80% of the product's code (under a third): give part of it a room",
        "k8s_charts/shared imports k8s_charts/teams (1x): a chart room imports only the rooms below it",
    ]


def test_the_report_prints_the_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert "rooms: " in out and "largest room: " in out and "imports between rooms: " in out
