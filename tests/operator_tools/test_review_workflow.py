"""The pull request's review workflow (.github/workflows/review.yml): actionlint passes it (and fails a
broken copy), its comment script posts once and then updates, and ``make review`` prints the comment.

actionlint is built from the Go module proxy by ``make cluster-binaries`` (tools/cluster-binaries/
actionlint: pinned in go.mod, verified by go.sum) and runs shellcheck on every ``run:`` script (the
one in .venv/bin). GitHub itself is not reached: the comment script runs against a stand-in ``gh``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from operator_tools.review_comment import MARKER
from tests.conftest import REPO_ROOT
from tools.cluster_binaries import binary_path

pytestmark = pytest.mark.process

WORKFLOW = REPO_ROOT / ".github" / "workflows" / "review.yml"
POST = REPO_ROOT / "tools" / "scripts" / "post_review_comment.sh"


def _actionlint(path: Path) -> subprocess.CompletedProcess[str]:
    actionlint = binary_path("actionlint", "actionlint")
    if not actionlint.is_file():
        pytest.fail(f"actionlint is not built ({actionlint}): run make cluster-binaries")
    env = {**os.environ, "PATH": f"{REPO_ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    assert shutil.which("shellcheck", path=env["PATH"]), "actionlint checks run: scripts with shellcheck"
    return subprocess.run(
        [str(actionlint), "-no-color", str(path)], capture_output=True, text=True, env=env, check=False
    )


def test_actionlint_passes_the_workflow() -> None:
    done = _actionlint(WORKFLOW)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("breakage", "finding"),
    [
        # A permission scope GitHub does not have.
        ("pull-requests: write", "pull-request: write"),
        # A runner label GitHub does not offer.
        ("runs-on: ubuntu-24.04", "runs-on: ubuntu-24.4"),
        # An expression that does not parse.
        ("github.event.pull_request.number }}", "github.event.pull_request.number }"),
        # A run: script shellcheck refuses (an unquoted variable).
        ('"$GITHUB_STEP_SUMMARY"', "$GITHUB_STEP_SUMMARY"),
    ],
)
def test_actionlint_fails_a_broken_copy(tmp_path: Path, breakage: str, finding: str) -> None:
    text = WORKFLOW.read_text()
    assert breakage in text
    broken = tmp_path / ".github" / "workflows" / "review.yml"
    broken.parent.mkdir(parents=True)
    broken.write_text(text.replace(breakage, finding, 1))
    assert _actionlint(broken).returncode == 1


def _stand_in_gh(tmp_path: Path, existing: str) -> tuple[dict[str, str], Path]:
    calls = tmp_path / "calls"
    gh = tmp_path / "bin" / "gh"
    gh.parent.mkdir()
    # Records each call; answers the comment listing with the id of an earlier review comment, if any.
    gh.write_text(
        "#!/usr/bin/env bash\n"
        f'printf "%s\\n" "$*" >> {calls}\n'
        'if [[ "$*" == *--paginate* ]]; then printf "%s" "$EXISTING"; fi\n'
    )
    gh.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{gh.parent}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_REPOSITORY": "example/trainium",
        "EXISTING": existing,
    }
    return env, calls


@pytest.mark.parametrize("existing", ["", "4242\n"])
def test_the_comment_is_posted_once_then_updated(tmp_path: Path, existing: str) -> None:
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    body = tmp_path / "review.md"
    body.write_text(f"{MARKER}\nreview\n")
    env, calls = _stand_in_gh(tmp_path, existing)
    done = subprocess.run([str(POST), "17", str(body)], env=env, capture_output=True, text=True, check=True)
    listing, write = calls.read_text().splitlines()
    assert listing.startswith("api --paginate repos/example/trainium/issues/17/comments --jq ")
    assert MARKER in listing
    assert "github-actions[bot]" in listing
    if existing:
        assert write == f"api --method PATCH repos/example/trainium/issues/comments/4242 -F body=@{body}"
        assert "updated review comment 4242 on #17" in done.stdout
    else:
        assert write == f"api --method POST repos/example/trainium/issues/17/comments -F body=@{body}"


def _worktrees() -> list[str]:
    listing = subprocess.run(
        ["git", "worktree", "list", "--porcelain"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout
    return [line for line in listing.splitlines() if line.startswith("worktree ")]


def test_make_review_prints_the_comment_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """The whole path, base and head both HEAD: two real synths through the pinned CLI."""
    if shutil.which("make") is None or shutil.which("git") is None:
        pytest.skip("no make or git")
    worktrees = _worktrees()
    out = tmp_path / "review.md"
    done = subprocess.run(
        ["make", "--no-print-directory", "review", "BASE=HEAD", f"REVIEW_OUT={out}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    comment = out.read_text()
    assert comment.startswith(f"{MARKER}\n") and done.stdout.strip() == comment.strip()
    assert "## TrainiumStack review of `config/default.yaml`: `HEAD " in comment
    assert "**Cost**: idle $" in comment
    # The base's worktree and the synths are gone.
    assert _worktrees() == worktrees
    assert [path.name for path in tmp_path.iterdir()] == ["review.md"]


def test_make_review_without_a_base_says_what_to_set() -> None:
    if shutil.which("make") is None:
        pytest.skip("no make")
    done = subprocess.run(
        ["make", "--no-print-directory", "review"], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "make review: set BASE=<git ref>, for example BASE=main" in done.stderr
