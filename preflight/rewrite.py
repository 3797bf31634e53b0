"""``--write``: put the zone names this account uses for the configured zone ids into the file.

Only the zone-name scalars change, byte for byte: ruamel.yaml's round-trip parser finds where each
value sits (line and column), and the edit replaces just those characters, so comments, key order,
flow-style lists, quoting and line endings stay exactly as written. The result is loaded with
``load_config`` before it replaces the file; a file that would not load is never written.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from config.loader import ConfigError, load_config
from config.model import StackConfig
from preflight.facts import AccountFacts, Unavailable

__all__ = ["RewriteError", "ZoneChange", "apply_zone_changes", "plan_zone_changes"]


class RewriteError(Exception):
    """The file cannot be rewritten; ``str(error)`` is the one line the user reads."""


@dataclass(frozen=True)
class ZoneChange:
    key: str
    """The key path, such as trainium.availability_zone or vpc.availability_zones[1]."""
    old: str
    new: str


def plan_zone_changes(config: StackConfig, facts: AccountFacts) -> list[ZoneChange]:
    """The edits that make the zone names match ``trainium.availability_zone_id`` in this account.

    The Trainium zone must be one of the VPC's zones: its old name is replaced there too, unless
    the new name is already the VPC's other zone (then the old one simply stays a VPC zone).
    """
    zone_id = config.trainium.availability_zone_id
    if facts.account_id != config.account:
        # Zone names are per account: another account's names would be wrong for this file.
        raise RewriteError(
            f"the credentials are for account {facts.account_id}, the file is for {config.account}; "
            "zone names differ between accounts"
        )
    if isinstance(facts.zones, Unavailable):
        raise RewriteError(f"cannot resolve {zone_id}: {facts.zones.reason}")
    resolved = next((zone.name for zone in facts.zones if zone.zone_id == zone_id), None)
    if resolved is None:
        raise RewriteError(
            f"trainium.availability_zone_id {zone_id} is not a zone of {facts.region}; nothing to write"
        )
    old = config.trainium.availability_zone
    if resolved == old:
        return []
    changes = [ZoneChange("trainium.availability_zone", old, resolved)]
    vpc_zones = config.vpc.availability_zones
    if resolved not in vpc_zones:
        index = vpc_zones.index(old)
        changes.append(ZoneChange(f"vpc.availability_zones[{index}]", old, resolved))
    return changes


def apply_zone_changes(path: Path, changes: list[ZoneChange]) -> None:
    """Edit ``path`` in place; raise ``RewriteError`` (file untouched) if anything is not as expected."""
    try:
        # Bytes, not read_text(): universal newlines would turn CRLF files into LF ones.
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise RewriteError(f"{path}: cannot read: {getattr(error, 'strerror', None) or error}") from None
    new_text = edit_zone_names(text, changes, source=str(path))
    _replace_checked(path, new_text)


def edit_zone_names(text: str, changes: list[ZoneChange], *, source: str = "<config>") -> str:
    """``text`` with each change's scalar replaced where the YAML parser found it."""
    try:
        document = YAML(typ="rt").load(text)
    except YAMLError as error:
        raise RewriteError(f"{source}: not valid YAML: {error}") from None
    # Split on "\n" only, as the parser counts lines; a CRLF line keeps its "\r" at the end.
    lines = text.split("\n")
    edits = sorted(((*_position(document, change.key), change) for change in changes), reverse=True)
    for line, column, change in edits:
        current = lines[line]
        for quote in ("", "'", '"'):
            token = f"{quote}{change.old}{quote}"
            if current.startswith(token, column):
                lines[line] = (
                    current[:column] + f"{quote}{change.new}{quote}" + current[column + len(token) :]
                )
                break
        else:
            raise RewriteError(
                f"{source}: line {line + 1}: expected {change.key}: {change.old}; edit it by hand"
            )
    return "\n".join(lines)


def _position(document: Any, key: str) -> tuple[int, int]:
    """(line, column), both 0-based, of the value at ``key`` (a.b or a.b[i])."""
    path, _, index = key.partition("[")
    *parents, last = path.split(".")
    node = document
    for part in parents:
        node = node[part]
    if index:
        sequence = node[last]
        line, column = sequence.lc.item(int(index.rstrip("]")))
    else:
        line, column = node.lc.value(last)
    return int(line), int(column)


def _replace_checked(path: Path, new_text: str) -> None:
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(new_text)
        try:
            load_config(temporary)
        except ConfigError as error:
            raise RewriteError(
                f"{path}: not written, the result would not load: {'; '.join(error.lines())}"
            ) from None
        shutil.copymode(path, temporary)
        os.replace(temporary, path)
    except OSError as error:
        raise RewriteError(f"{path}: cannot write: {error.strerror or error}") from None
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
