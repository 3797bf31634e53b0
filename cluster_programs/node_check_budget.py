"""The node check's replacement budget: how often a node group's instances may be replaced.

Every replacement the node check asks for (a new node that failed its check, a node in use whose
EFA devices failed their loopback, an unresponsive node fenced by another node's check) launches a
Trainium instance, and a failure that hits every new node would otherwise repeat the cycle for as
long as the cause lasts. So each node group has a record, one ConfigMap per group in the check's
namespace (``<prefix><group>``, created empty by the chart), which every node-check pod of the
group reads and writes, and a replacement is asked for only when the record allows it:

- **the budget**: fewer than ``per_window`` replacements of the group in the last ``window_seconds``;
- **no repeat**: no node launched after a replacement of the *streak* (the replacements asked for
  since a node of the group last passed its check) has failed for that replacement's reason. A
  repeat means replacing does not help: the caller also stops the group's launches.

A write carries the ConfigMap's ``resourceVersion`` (the API server answers 409 Conflict when
another pod wrote first), so two pods never both spend the last replacement of a window: the loser
reads the record again and decides again. Standard library only, beside node_check.py in its pod.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from kube_api import Api, ApiError

__all__ = [
    "Budget",
    "Decision",
    "GroupRecord",
    "Replacement",
    "configmap_path",
    "decide",
    "record_pass",
    "record_suspension",
    "reserve",
]

REPLACEMENTS_KEY = "replacements"
"""The ConfigMap key holding the replacements: a JSON list, oldest first."""
PASSED_KEY = "last-pass"
"""When (and on which node) a node of the group last passed its check after a replacement."""
SUSPENDED_KEY = "launches-suspended"
"""When the group's launches were suspended, and its Auto Scaling group."""
_KEPT = 50
"""At most this many replacements are kept (the newest): enough for any window the configuration allows."""
_ATTEMPTS = 5


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _text(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Replacement:
    at: datetime
    node: str
    instance: str
    reason: str

    def as_json(self) -> dict[str, str]:
        return {"at": _text(self.at), "node": self.node, "instance": self.instance, "reason": self.reason}


@dataclass(frozen=True)
class Budget:
    per_window: int
    window_seconds: float

    def window(self) -> timedelta:
        return timedelta(seconds=self.window_seconds)

    def minutes(self) -> str:
        return f"{self.window_seconds / 60:g} min"


@dataclass(frozen=True)
class GroupRecord:
    """What the group's ConfigMap holds."""

    replacements: tuple[Replacement, ...] = ()
    passed_at: datetime | None = None
    suspended: str = ""

    @classmethod
    def read(cls, configmap: Mapping[str, Any]) -> GroupRecord:
        data = configmap.get("data") or {}
        replacements = tuple(
            Replacement(_time(item["at"]), item["node"], item["instance"], item["reason"])
            for item in json.loads(data.get(REPLACEMENTS_KEY) or "[]")
        )
        passed = (data.get(PASSED_KEY) or "").split(" ", 1)[0]
        return cls(replacements, _time(passed) if passed else None, data.get(SUSPENDED_KEY) or "")

    def data(self) -> dict[str, str]:
        items = [r.as_json() for r in self.replacements[-_KEPT:]]
        return {REPLACEMENTS_KEY: json.dumps(items, separators=(",", ":"))}

    def streak(self) -> tuple[Replacement, ...]:
        """The replacements asked for since a node of the group last passed its check."""
        return tuple(r for r in self.replacements if self.passed_at is None or r.at > self.passed_at)

    def within(self, window: timedelta, now: datetime) -> tuple[Replacement, ...]:
        return tuple(r for r in self.replacements if now - r.at < window)


@dataclass(frozen=True)
class Decision:
    replace: bool
    stop: bool
    """Replacing does not help (a repeat): the caller suspends the group's launches."""
    why: str


def decide(
    record: GroupRecord, *, reason: str, launched_at: datetime, now: datetime, budget: Budget
) -> Decision:
    """Whether a node of the group that failed for ``reason``, launched (its Node created) at
    ``launched_at``, may be replaced now."""
    repeats = [r for r in record.streak() if r.reason == reason and launched_at > r.at]
    if repeats:
        first = repeats[0]
        return Decision(
            False,
            True,
            f"a node launched after {first.node} was replaced for {reason} at {_text(first.at)} failed the "
            "same way, and no node of the group has passed since: replacing does not help",
        )
    recent = record.within(budget.window(), now)
    if len(recent) >= budget.per_window:
        reopens = recent[len(recent) - budget.per_window].at + budget.window()
        return Decision(
            False,
            False,
            f"the group's replacement budget is spent: {len(recent)} in the last {budget.minutes()} "
            f"(allowed {budget.per_window}); the next one from {_text(reopens)}",
        )
    return Decision(
        True, False, f"replacement {len(recent) + 1} of {budget.per_window} in {budget.minutes()}"
    )


def configmap_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/configmaps/{urllib.parse.quote(name)}"


def _update(api: Api, path: str, configmap: Mapping[str, Any], data: Mapping[str, str]) -> bool:
    """Write ``data`` into the ConfigMap as read (its resourceVersion); False when another pod wrote first."""
    body = {**configmap, "data": {**(configmap.get("data") or {}), **data}}
    try:
        api.call("PUT", path, body)
    except ApiError as error:
        if error.status == 409:
            return False
        raise
    return True


def reserve(
    api: Api, path: str, *, replacement: Replacement, launched_at: datetime, budget: Budget
) -> Decision:
    """Decide for ``replacement`` and, when it is allowed, record it before anything is replaced.
    A record that cannot be read (no ConfigMap, no right to it) allows nothing."""
    for _ in range(_ATTEMPTS):
        try:
            configmap = api.get(path)
        except ApiError as error:
            return Decision(False, False, f"the group's replacement record {path} cannot be read ({error})")
        record = GroupRecord.read(configmap)
        decision = decide(
            record, reason=replacement.reason, launched_at=launched_at, now=replacement.at, budget=budget
        )
        if not decision.replace:
            return decision
        # Only the window and the streak matter; older replacements go.
        keep = [
            r
            for r in record.replacements
            if r in record.streak() or r in record.within(budget.window(), replacement.at)
        ]
        kept = replace(record, replacements=(*keep, replacement))
        if _update(api, path, configmap, kept.data()):
            return decision
    raise RuntimeError(f"{path} kept changing; gave up after {_ATTEMPTS} attempts")


def record_pass(api: Api, path: str, *, node: str, now: datetime) -> bool:
    """A node of the group passed: the streak ends, and a suspension noted earlier is over (someone
    resumed the launches, or this node would not exist). Written only when there is something to
    end; True when written."""
    for _ in range(_ATTEMPTS):
        configmap = api.get(path)
        record = GroupRecord.read(configmap)
        if not record.streak() and not record.suspended:
            return False
        if _update(api, path, configmap, {PASSED_KEY: f"{_text(now)} {node}", SUSPENDED_KEY: ""}):
            return True
    raise RuntimeError(f"{path} kept changing; gave up after {_ATTEMPTS} attempts")


def claim_suspension(api: Api, path: str, *, text: str) -> str | None:
    """Record, before the call to AWS, that this pod suspends the group's launches, unless another
    pod's note is there already: that note, or None when the claim is this pod's. Two nodes failing
    at once both read "not suspended"; the optimistic write lets one of them act (the tier saw both
    suspend before this)."""
    for _ in range(_ATTEMPTS):
        configmap = api.get(path)
        suspended = GroupRecord.read(configmap).suspended
        if suspended:
            return suspended
        if _update(api, path, configmap, {SUSPENDED_KEY: text}):
            return None
    raise RuntimeError(f"{path} kept changing; gave up after {_ATTEMPTS} attempts")


def record_suspension(api: Api, path: str, *, text: str) -> None:
    """Note that the group's launches were suspended (what and since when, for a person)."""
    for _ in range(_ATTEMPTS):
        if _update(api, path, api.get(path), {SUSPENDED_KEY: text}):
            return
    raise RuntimeError(f"{path} kept changing; gave up after {_ATTEMPTS} attempts")
