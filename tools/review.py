"""``make review BASE=<ref>``: synthesize the base and the head offline and print the review comment.

    python -m tools.review --base main [--head <ref>] [--config config/default.yaml ...] [--output FILE]

The base is checked out with ``git worktree add --detach`` into a temporary directory (removed
afterwards, whatever happens), the head is the working tree (or ``--head``'s ref, checked out the
same way). Both synthesize with the clone's environments (.venv/, node_modules/: nothing is
installed) through the pinned CDK CLI into temporary output directories, so ``cdk.out/`` is left
alone. The comment (operator_tools/review_comment.py), one section per configuration, goes to standard
output and, with ``--output``, to a file; .github/workflows/review.yml posts it on the pull request.

Both sides run on the head's environments: a pull request that changes a pin synthesizes its base
with the new pins too (the comment says so when a lock file differs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from operator_tools.review_comment import Synth, review_comment, review_section  # noqa: E402

__all__ = ["main", "synthesize"]

_SHARED = (".venv", "node_modules")
_LOCKS = ("requirements-dev.lock", "requirements.lock", "package-lock.json")


def _git(*args: str, cwd: Path = REPO_ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@contextmanager
def checkout(ref: str, into: Path) -> Iterator[Path]:
    """``ref`` checked out at ``into`` with the clone's environments linked in; removed on exit."""
    _git("worktree", "add", "--detach", "--quiet", str(into), ref)
    try:
        for name in _SHARED:
            (into / name).symlink_to((REPO_ROOT / name).resolve())
        yield into
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(into)], cwd=REPO_ROOT, check=False)
        shutil.rmtree(into, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=REPO_ROOT, check=False)


def synthesize(tree: Path, config: str, outdir: Path, *, label: str) -> Synth:
    """``cdk synth`` of ``config`` in ``tree`` into ``outdir``: its template and review files, or its error."""
    if not (tree / config).is_file():
        return Synth(label=label, error=f"{config} does not exist here")
    env = dict(os.environ)
    env["PATH"] = f"{(REPO_ROOT / '.venv' / 'bin').resolve()}{os.pathsep}{env.get('PATH', '')}"
    env.update(CDK_DISABLE_VERSION_CHECK="1", CDK_DISABLE_CLI_TELEMETRY="1")
    cli = (REPO_ROOT / "node_modules" / ".bin" / "cdk").resolve()
    done = subprocess.run(
        [str(cli), "synth", "--quiet", "--output", str(outdir), "-c", f"config={config}"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        return Synth(label=label, error=tail or f"cdk synth exited {done.returncode}")
    return Synth.read(label, outdir)


def _label(ref: str | None) -> str:
    if ref is not None:
        return f"{ref} {_git('rev-parse', '--short', ref)}"
    dirty = " + uncommitted changes" if _git("status", "--porcelain", "--untracked-files=no") else ""
    return f"working tree at {_git('rev-parse', '--short', 'HEAD')}{dirty}"


def _lock_note(base: Path, head: Path) -> str:
    changed = [name for name in _LOCKS if (base / name).read_bytes() != (head / name).read_bytes()]
    if not changed:
        return ""
    return (
        f"Note: {', '.join(changed)} differ between base and head; both sides were synthesized with the "
        "head's environments."
    )


def build(base_ref: str, head_ref: str | None, configs: Sequence[str], work: Path) -> str:
    with checkout(base_ref, work / "base") as base_tree:
        if head_ref is None:
            return _compare(
                base_tree, REPO_ROOT, base_ref=base_ref, head_ref=None, configs=configs, work=work
            )
        with checkout(head_ref, work / "head") as head_tree:
            return _compare(
                base_tree, head_tree, base_ref=base_ref, head_ref=head_ref, configs=configs, work=work
            )


def _compare(
    base_tree: Path,
    head_tree: Path,
    *,
    base_ref: str,
    head_ref: str | None,
    configs: Sequence[str],
    work: Path,
) -> str:
    base_label, head_label = _label(base_ref), _label(head_ref)
    sections = []
    for index, config in enumerate(configs):
        base = synthesize(base_tree, config, work / f"base-{index}.out", label=base_label)
        head = synthesize(head_tree, config, work / f"head-{index}.out", label=head_label)
        sections.append(review_section(base, head, config=config))
    return review_comment(sections, note=_lock_note(base_tree, head_tree))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--base", required=True, help="the git ref to compare against (main, origin/main, a sha)"
    )
    parser.add_argument("--head", help="a git ref for the head; default: the working tree")
    parser.add_argument(
        "--config", action="append", help="a configuration file (repeatable; default config/default.yaml)"
    )
    parser.add_argument("--output", type=Path, help="also write the comment to this file")
    args = parser.parse_args(argv)
    configs = args.config or ["config/default.yaml"]
    try:
        _git("rev-parse", "--verify", "--quiet", f"{args.base}^{{commit}}")
    except subprocess.CalledProcessError:
        print(
            f"make review: BASE={args.base} is not a commit of this clone (git fetch it first)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="trainium-review-") as temporary:
        comment = build(args.base, args.head, configs, Path(temporary))
    if args.output is not None:
        args.output.write_text(comment + "\n")
    print(comment)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
