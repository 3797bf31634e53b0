"""A reviewed snapshot of TrainiumStack (default configuration).

The snapshot makes every template change visible in the pull request's diff; the other tests say
which properties matter. After an intended change: `make snapshot`, then review and commit
tests/snapshots/TrainiumStack.default.json.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from tests.conftest import Synthesized

SNAPSHOT = Path(__file__).parent / "snapshots" / "TrainiumStack.default.json"
_ASSET_HASH = re.compile(r"\b[0-9a-f]{64}\b")


def masked(template: dict[str, Any]) -> str:
    """The template as stable, reviewable text: asset hashes (they change with library bundles) masked."""
    text = json.dumps(template, indent=1, sort_keys=True) + "\n"
    return _ASSET_HASH.sub("<asset-hash>", text)


def test_template_matches_the_reviewed_snapshot(default_stack: Synthesized) -> None:
    current = masked(default_stack.json)
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        SNAPSHOT.write_text(current)
    assert SNAPSHOT.exists(), "no snapshot yet: run `make snapshot` and commit it"
    assert current == SNAPSHOT.read_text(), (
        "TrainiumStack changed: if intended, run `make snapshot` and review the diff of "
        f"{SNAPSHOT.relative_to(Path.cwd()) if SNAPSHOT.is_relative_to(Path.cwd()) else SNAPSHOT}"
    )


def test_masking_keeps_everything_but_asset_hashes() -> None:
    template = {"Code": {"S3Key": "0" * 64 + ".zip"}, "Name": "trainium", "Short": "abc123"}
    assert json.loads(masked(template)) == {
        "Code": {"S3Key": "<asset-hash>.zip"},
        "Name": "trainium",
        "Short": "abc123",
    }
