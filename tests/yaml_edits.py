"""Editing parsed YAML data by key path, for tests that break one key at a time."""

from __future__ import annotations

import copy
from typing import Any


def with_change(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``data`` with one key (dotted, list items as integers) set or, for ``...``, removed."""
    changed = copy.deepcopy(data)
    *parents, last = [int(part) if part.isdigit() else part for part in path.split(".")]
    target: Any = changed
    for part in parents:
        # A missing mapping on the way is created (a run's parameters, say).
        target = target.setdefault(part, {}) if isinstance(target, dict) else target[part]
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return changed
