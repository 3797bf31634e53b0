"""The report: a plain-text table (CHECK, STATUS, DETAIL, WHAT TO DO) and a one-line summary."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import zip_longest

from preflight.checks import CheckResult

__all__ = ["DEFAULT_WIDTH", "render", "summary"]

DEFAULT_WIDTH = 100
_HEADERS = ("CHECK", "STATUS", "DETAIL", "WHAT TO DO")
_GAP = "  "
_STATUS_WIDTH = 6
_MAX_CHECK_WIDTH = 24
_MIN_TEXT_WIDTH = 16
# Where a word too long for its column may break, best first: after a key path's dot, then the others.
_BREAK_AFTER = (".", ",", "/", "_", "-")


def render(results: Sequence[CheckResult], *, width: int = DEFAULT_WIDTH) -> str:
    """The table, each row's DETAIL and WHAT TO DO wrapped to fit ``width`` columns."""
    check_width = min(max([len(_HEADERS[0]), *(len(result.check) for result in results)]), _MAX_CHECK_WIDTH)
    text_width = max(width - check_width - _STATUS_WIDTH - 3 * len(_GAP), 2 * _MIN_TEXT_WIDTH)
    detail_width = text_width * 11 // 20
    action_width = text_width - detail_width
    widths = (check_width, _STATUS_WIDTH, detail_width, action_width)

    lines = [_line(_HEADERS, widths), _line(tuple("-" * w for w in widths), widths)]
    for number, result in enumerate(results):
        if number:
            lines.append("")  # rows wrap over several lines; a blank line keeps them apart
        cells = (
            _wrap(result.check, check_width),
            [result.status],
            _wrap(result.detail, detail_width),
            _wrap(result.action or "-", action_width),
        )
        for parts in zip_longest(*cells, fillvalue=""):
            lines.append(_line(parts, widths))
    return "\n".join(lines)


def summary(results: Sequence[CheckResult]) -> str:
    counts = Counter(result.status for result in results)
    tally = (
        f"{len(results)} checks: {counts['PASS']} passed, {counts['WARN']} warned, {counts['FAIL']} failed"
    )
    if counts["FAIL"]:
        return f"{tally}; fix the FAIL rows and run preflight again"
    if counts["WARN"]:
        return f"{tally}; deployable, but read the WARN rows first"
    return f"{tally}; ready for make deploy"


def _wrap(text: str, width: int) -> list[str]:
    """Word-wrap; a word longer than the column (a key path, say) breaks after a dot or similar."""
    pieces: list[tuple[str, bool]] = []  # (piece, whether the next piece continues the same word)
    for word in text.split():
        rest = word
        while len(rest) > width:
            cut = next(
                (rest.rfind(mark, 0, width) + 1 for mark in _BREAK_AFTER if mark in rest[:width]), width
            )
            pieces.append((rest[:cut], True))
            rest = rest[cut:]
        pieces.append((rest, False))
    lines: list[str] = []
    current = ""
    continues = False
    for piece, next_continues in pieces:
        candidate = current + piece if continues else f"{current} {piece}" if current else piece
        if current and len(candidate) > width:
            lines.append(current)
            candidate = piece
        current = candidate
        continues = next_continues
    if current:
        lines.append(current)
    return lines


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return _GAP.join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()
