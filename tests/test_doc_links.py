"""Every documentation page (and heading anchor) the project names exists.

Pages move (docs/training.md and docs/day2.md became docs/runs.md) and the code's docstrings,
scripts and other pages kept pointing at the old ones. This reads every project file that can
name a page: plain mentions ``docs/<page>.md[#anchor]`` (from the repository root) and Markdown
links ``[text](<path>.md[#anchor])`` (from the linking file), and checks the page, and the anchor
against the page's headings as GitHub turns them into anchors. CHANGELOG.md is history: it may
name pages that are gone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

# What the project writes (not the installs, the output, the vendored charts or the snapshots).
_SKIPPED_DIRECTORIES = {
    ".git",
    ".venv",
    ".venv-checkov",
    ".venv-torchx",
    ".venv-torch",
    "node_modules",
    "cdk.out",
    "charts",
    "snapshots",
    "schemas",
    "imports",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
}
_SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".txt", ".cfg"}
# History may name pages that are gone; so does this file, as examples.
_NOT_SCANNED = {"CHANGELOG.md", "tests/test_doc_links.py"}

_PLAIN_MENTION = re.compile(r"(?<![\w./-])(docs/[A-Za-z0-9_.-]+\.md)(?:#([A-Za-z0-9_-]+))?")
_MARKDOWN_LINK = re.compile(r"\]\((?!https?:|mailto:)([^)#\s]+\.md)(?:#([^)\s]+))?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _project_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part in _SKIPPED_DIRECTORIES or part.startswith(".venv") for part in relative.parts[:-1]):
            continue
        if relative.as_posix() in _NOT_SCANNED:
            continue
        if path.is_file() and (path.suffix in _SUFFIXES or path.name == "Makefile"):
            yield path


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"`|\*\*|\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors of a Markdown page's headings (outside code fences), duplicates numbered as GitHub does."""
    found: list[str] = []
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        heading = None if fenced else _HEADING.match(line)
        if heading:
            anchor = github_anchor(heading.group(2))
            seen = found.count(anchor) + sum(1 for a in found if re.fullmatch(re.escape(anchor) + r"-\d+", a))
            found.append(anchor if seen == 0 else f"{anchor}-{seen}")
    return frozenset(found)


def references(root: Path = REPO_ROOT) -> Iterator[tuple[str, Path, str | None]]:
    """(where, the page named, its anchor or None) for every page the project under ``root`` names."""
    for path in _project_files(root):
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            where = f"{path.relative_to(root)}:{number}"
            for match in _PLAIN_MENTION.finditer(line):
                yield where, root / match.group(1), match.group(2)
            if path.suffix == ".md":
                for match in _MARKDOWN_LINK.finditer(line):
                    yield where, (path.parent / match.group(1)).resolve(), match.group(2)


def broken_references(root: Path = REPO_ROOT) -> list[str]:
    problems = []
    for where, page, anchor in references(root):
        shown = page.relative_to(root) if page.is_relative_to(root) else page
        if not page.is_file():
            problems.append(f"{where}: {shown} does not exist")
        elif anchor is not None and anchor not in anchors(page):
            problems.append(f"{where}: {shown} has no heading with the anchor #{anchor}")
    return problems


def test_every_page_and_anchor_the_project_names_exists() -> None:
    problems = broken_references()
    assert not problems, "\n".join(problems)


def test_the_scan_finds_the_readmes_links_and_the_codes_mentions() -> None:
    found = {
        (where.split(":")[0], page.relative_to(REPO_ROOT).as_posix(), anchor)
        for where, page, anchor in references()
    }
    assert ("README.md", "docs/runs.md", "lifecycle") in found
    assert ("docs/runs.md", "README.md", None) not in found  # only what is written
    assert any(where.endswith(".py") and page == "docs/runs.md" for where, page, _ in found)
    assert any(where.startswith("docs/") and page == "docs/supply-chain.md" for where, page, _ in found)


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("The review YAML (`cdk.out/k8s/`)", "the-review-yaml-cdkoutk8s"),
        ("A gang that only partly fits: the gang watchdog", "a-gang-that-only-partly-fits-the-gang-watchdog"),
        ("Deploying to a real account", "deploying-to-a-real-account"),
        ("2026-11-23: re-measured", "2026-11-23-re-measured"),
    ],
)
def test_anchors_are_made_as_github_makes_them(heading: str, anchor: str) -> None:
    assert github_anchor(heading) == anchor


def test_a_page_that_is_gone_and_a_wrong_anchor_are_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "runs.md").write_text("# Runs\n\n## Lifecycle\n\n```\n# not a heading\n```\n")
    (tmp_path / "docs" / "other.md").write_text(
        "[ok](runs.md#lifecycle) [gone](day2.md) [bad](runs.md#not-a-heading)\n"
    )
    (tmp_path / "code.py").write_text(
        '"""Lifecycle (docs/day2.md); docs/runs.md#lifecycle; docs/runs.md#teams."""\n'
    )
    assert broken_references(tmp_path) == [
        "code.py:1: docs/day2.md does not exist",
        "code.py:1: docs/runs.md has no heading with the anchor #teams",
        "docs/other.md:1: docs/day2.md does not exist",
        "docs/other.md:1: docs/runs.md has no heading with the anchor #not-a-heading",
    ]


_TEST_NAME = re.compile(r"\b(test_[a-z0-9_]+)\b")


def _test_names_defined() -> set[str]:
    """Every test function and test module of tests/ (a page may name either; a test may be written
    in a helper module that test modules import, as tests/cluster/torchx_jobs.py's)."""
    names: set[str] = set()
    for path in (REPO_ROOT / "tests").rglob("*.py"):
        if path.stem.startswith("test_"):
            names.add(path.stem)
        names.update(re.findall(r"^\s*def (test_[a-z0-9_]+)\(", path.read_text(), re.MULTILINE))
    return names


def test_every_test_a_page_names_exists() -> None:
    """docs/security.md, docs/health.md and the rest back their claims with test names: a renamed or
    removed test must not leave a claim pointing at nothing. The security pages name at least one."""
    defined = _test_names_defined()
    pages = [REPO_ROOT / "README.md", REPO_ROOT / "CONTRIBUTING.md", *(REPO_ROOT / "docs").glob("*.md")]
    named = {
        page.relative_to(REPO_ROOT).as_posix(): set(_TEST_NAME.findall(page.read_text())) for page in pages
    }
    missing = {f"{page}: {name}" for page, names in named.items() for name in names if name not in defined}
    assert not missing, sorted(missing)
    assert named["docs/security.md"] and named["docs/security-policies.md"]


# A module or script of the project named in a page's code span: `k8s_charts/runs/training_run.py`.
_CODE_PATH = re.compile(
    r"`((?:cluster_facts|config|constructs_trn|k8s_charts|preflight|stacks|tools|torchx_trn|docker)"
    r"/[A-Za-z0-9_./-]+\.(?:py|sh|yaml|yml|txt))`"
)


def _named_code_paths() -> list[tuple[str, str]]:
    found = []
    pages = {*REPO_ROOT.glob("docs/*.md"), *REPO_ROOT.glob("*.md"), *REPO_ROOT.glob("*/README.md")}
    for page in sorted(pages):
        relative = page.relative_to(REPO_ROOT).as_posix()
        if relative in _NOT_SCANNED or any(
            part in _SKIPPED_DIRECTORIES for part in page.relative_to(REPO_ROOT).parts
        ):
            continue
        found += [(relative, path) for path in _CODE_PATH.findall(page.read_text())]
    return found


def test_every_module_a_page_names_exists() -> None:
    """docker/README.md named k8s_charts/bert_jobs.py long after it became k8s_charts/runs/training_run.py
    (issue 33): a page's `path/to/module.py` of the project must exist."""
    missing = [f"{page}: {path}" for page, path in _named_code_paths() if not (REPO_ROOT / path).exists()]
    assert missing == []
