"""Read what a multi-node ``nccom-test`` all-reduce printed and say whether the fabric works.

Runs inside the fabric check's launcher pod (k8s_charts/scripts/fabric_check_launcher.sh passes
this file's text to ``python3 -c``), so it uses the standard library only and runs on Python 3.11+.

The verdict passes only when all of these hold:

- nccom-test exited 0 and printed none of its documented failure lines;
- its result table has a row for the judged message size (the largest one run, or ``--size``);
- the log names the network provider and it is EFA (the OFI plugin's INFO line, printed with
  ``NCCL_DEBUG=INFO``); any sign of a TCP/socket transport fails the check;
- the bus bandwidth at that size reaches ``threshold`` x the instance type's EFA bandwidth.

Units: nccom-test prints ``algbw(GB/s)`` and ``busbw(GB/s)`` in gibibytes per second (its user
guide: 1 GiB = 1,073,741,824 bytes); the instance catalog gives EFA bandwidth in decimal gigabits
per second (800 Gbps = 800e9 bit/s). 1 GiB/s = 1,073,741,824 x 8 / 1e9 = 8.589934592 Gbps.

Output: the parsed table, then ONE verdict line, ``FABRIC CHECK PASS: ...`` or
``FABRIC CHECK FAIL: <reason>; ...``, the last line printed. Exit status 0 for PASS, 1 for FAIL,
2 when the arguments themselves are refused (the line says which one and why).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "GBPS_PER_GIB_PER_S",
    "Provider",
    "Row",
    "Verdict",
    "argument_problem",
    "detect_provider",
    "error_lines",
    "gbps_to_gib_per_s",
    "gib_per_s_to_gbps",
    "judge",
    "main",
    "parse_table",
]

GIB = 1024**3
GBPS_PER_GIB_PER_S = GIB * 8 / 1e9
"""Decimal gigabits per second in one gibibyte per second (8.589934592)."""

PASS_PREFIX = "FABRIC CHECK PASS: "
FAIL_PREFIX = "FABRIC CHECK FAIL: "

# The data types nccom-test's --datatype takes (user guide, "Input/Output Data").
_DATA_TYPES = {"uint8", "int8", "uint16", "int16", "fp8", "fp8e4", "fp16", "bf16", "uint32", "int32", "fp32"}

# Lines nccom-test, the Neuron runtime or mpirun print when a run did not complete. The first four
# are documented (nccom-test user guide "Examples"; Neuron runtime troubleshooting guide); the
# last three are Open MPI's words when a rank or a node's daemon is lost.
_ERROR_PATTERNS = [
    re.compile(r"Failure running neuron-bench"),
    re.compile(r"^\s*\d+ errors? found - test failed", re.MULTILINE),
    re.compile(r"Neuron DKMS Driver is not running"),
    re.compile(r"Unable to run multi-instance workload"),
    re.compile(r"ORTE has lost communication with a remote daemon"),
    re.compile(r"ORTE was unable to reliably start one or more daemons"),
    re.compile(r"mpirun noticed that process rank \d+"),
]

# aws-ofi-nccl logs the provider it picked at INFO ("Selected Provider is efa (found 8 nics)" up
# to v1.13; "Selected provider is efa, fabric is efa-direct (found 8 nics)" since).
_SELECTED_PROVIDER = re.compile(r"Selected [Pp]rovider is ([^\s,(]+)")
# Signs that collectives fell back to the collectives library's own TCP sockets: the Neuron
# runtime's documented message when the OFI plugin cannot start, and NCCL's socket transport lines.
_SOCKET_FALLBACK = re.compile(r"OFI plugin initNet\(\) failed|Using network Socket|NET/Socket")


@dataclass(frozen=True)
class Row:
    """One line of nccom-test's result table."""

    size_bytes: int
    count: int
    data_type: str
    time_us: float
    algbw_gib_per_s: float
    busbw_gib_per_s: float
    line: str


@dataclass(frozen=True)
class Provider:
    name: str
    """``efa``, another libfabric provider's name (``tcp``, ``sockets``...), ``socket`` for the
    collectives library's own TCP transport, or ``unknown`` when the log names none."""
    evidence: str
    """The log line that says so (empty when unknown)."""

    @property
    def is_efa(self) -> bool:
        return self.name == "efa"


@dataclass(frozen=True)
class Verdict:
    passed: bool
    line: str

    @property
    def exit_status(self) -> int:
        return 0 if self.passed else 1


def gib_per_s_to_gbps(value: float) -> float:
    return value * GBPS_PER_GIB_PER_S


def gbps_to_gib_per_s(value: float) -> float:
    return value / GBPS_PER_GIB_PER_S


def _number(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def parse_table(text: str) -> list[Row]:
    """Every result row of the first table in ``text``, in order.

    The header names the columns; its form varies between releases and flags (``time(us)`` or
    ``time:avg(us)``, extra ``time:pNN(us)``, ``total_input_size(B)``, an ``algorithm`` column), so
    columns are found by name. A row is a line with one token per column whose size and count
    are integers, whose type is a data type and whose bandwidths are numbers: log lines that
    ``--debug`` interleaves with the table never match all of that.
    """
    columns: list[str] | None = None
    rows: list[Row] = []
    for line in text.splitlines():
        tokens = line.split()
        if "size(B)" in tokens and "busbw(GB/s)" in tokens:
            if columns is not None and rows:
                break  # a second table (one per stream); the first one is judged
            columns = tokens
            continue
        if columns is None or len(tokens) != len(columns):
            continue
        cells = dict(zip(columns, tokens, strict=True))
        time_column = next((name for name in columns if name.startswith("time")), None)
        if time_column is None or not cells["size(B)"].isdigit() or not cells["count(elems)"].isdigit():
            continue
        if cells["type"] not in _DATA_TYPES:
            continue
        time_us, algbw, busbw = (
            _number(cells[time_column]),
            _number(cells["algbw(GB/s)"]),
            _number(cells["busbw(GB/s)"]),
        )
        if time_us is None or algbw is None or busbw is None:
            continue
        rows.append(
            Row(
                size_bytes=int(cells["size(B)"]),
                count=int(cells["count(elems)"]),
                data_type=cells["type"],
                time_us=time_us,
                algbw_gib_per_s=algbw,
                busbw_gib_per_s=busbw,
                line=line.rstrip(),
            )
        )
    return rows


def table_lines(text: str) -> list[str]:
    """The table as printed (header, rows, average), without the log lines around it."""
    rows = {row.line for row in parse_table(text)}
    kept = []
    for line in text.splitlines():
        tokens = line.split()
        header = "size(B)" in tokens and "busbw(GB/s)" in tokens
        if header or line.rstrip() in rows or line.strip().startswith("Avg bus bandwidth"):
            kept.append(line.rstrip())
    return kept


def error_lines(text: str) -> list[str]:
    """The lines that report a failed run, in order."""
    found = []
    for line in text.splitlines():
        if any(pattern.search(line) for pattern in _ERROR_PATTERNS):
            found.append(line.strip())
    return found


def detect_provider(text: str) -> Provider:
    """Which transport the collectives used, from the log.

    Any sign of TCP wins over EFA: one rank that fell back slows every collective to its speed.
    """
    efa_evidence = ""
    for line in text.splitlines():
        if _SOCKET_FALLBACK.search(line):
            return Provider("socket", line.strip())
        match = _SELECTED_PROVIDER.search(line)
        if match is None:
            continue
        name = match.group(1).rstrip(";")
        if name != "efa":
            return Provider(name, line.strip())
        efa_evidence = efa_evidence or line.strip()
    if efa_evidence:
        return Provider("efa", efa_evidence)
    return Provider("unknown", "")


def argument_problem(*, threshold: float, nodes: int | None, network_gbps: float) -> str | None:
    """Why the check's own inputs are refused, or None."""
    if not 0 < threshold <= 1:
        return f"threshold must be a fraction in (0, 1], got {threshold:g}"
    if nodes is not None and nodes < 2:
        return f"a fabric check needs at least 2 nodes (EFA carries traffic between nodes), got {nodes}"
    if network_gbps <= 0:
        return f"network bandwidth must be positive, got {network_gbps:g} Gbps"
    return None


def _bandwidth(value_gib_per_s: float) -> str:
    return f"{value_gib_per_s:.2f} GiB/s ({gib_per_s_to_gbps(value_gib_per_s):.1f} Gbps)"


def _judged_row(text: str, *, size_bytes: int | None, exit_status: int) -> Row | str:
    """The table row to judge, or why there is none (the run failed or stopped short)."""
    errors = error_lines(text)
    if exit_status != 0 or errors:
        said = f': "{errors[0]}"' if errors else ""
        return f"nccom-test did not complete (exit status {exit_status}){said}"
    rows = parse_table(text)
    if not rows:
        return "nccom-test printed no result table"
    judged_size = size_bytes if size_bytes is not None else max(row.size_bytes for row in rows)
    row = next((row for row in rows if row.size_bytes == judged_size), None)
    if row is None:
        return f"no result for {judged_size} B (the table has {', '.join(str(r.size_bytes) for r in rows)})"
    return row


def _provider_problem(provider: Provider) -> str | None:
    if provider.name == "unknown":
        return (
            "the log names no network provider (no 'Selected provider is ...' line: is NCCL_DEBUG=INFO set?)"
        )
    if not provider.is_efa:
        return f'network provider is {provider.name}, not EFA ("{provider.evidence}")'
    return None


def judge(
    text: str,
    *,
    network_gbps: float,
    threshold: float,
    size_bytes: int | None = None,
    exit_status: int = 0,
    nodes: int | None = None,
) -> Verdict:
    """The verdict on one nccom-test log (``exit_status``: nccom-test's own)."""
    problem = argument_problem(threshold=threshold, nodes=nodes, network_gbps=network_gbps)
    if problem is not None:
        return Verdict(False, FAIL_PREFIX + problem)
    row = _judged_row(text, size_bytes=size_bytes, exit_status=exit_status)
    if isinstance(row, str):
        return Verdict(False, FAIL_PREFIX + row)
    required = threshold * gbps_to_gib_per_s(network_gbps)
    requirement = (
        f"required {required:.2f} GiB/s ({threshold:g} x {network_gbps:g} Gbps = "
        f"{threshold * network_gbps:.1f} Gbps)"
    )
    measured = f"all-reduce bus bandwidth {_bandwidth(row.busbw_gib_per_s)} at {row.size_bytes} B"
    problem = _provider_problem(detect_provider(text))
    if problem is not None:
        return Verdict(False, f"{FAIL_PREFIX}{problem}; {measured}, {requirement}")
    if row.busbw_gib_per_s < required:
        return Verdict(False, f"{FAIL_PREFIX}bandwidth below threshold over EFA: {measured} < {requirement}")
    return Verdict(True, f"{PASS_PREFIX}{measured} over EFA >= {requirement}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fabric_verdict", description="Judge a multi-node nccom-test all-reduce log."
    )
    parser.add_argument("--log", help="nccom-test's output; '-' or absent reads standard input")
    parser.add_argument("--network-gbps", type=float, required=True, help="the instance type's EFA bandwidth")
    parser.add_argument("--threshold", type=float, required=True, help="fraction of it to reach, in (0, 1]")
    parser.add_argument("--size", type=int, help="message size to judge, in bytes (default: the largest)")
    parser.add_argument("--exit-status", type=int, default=0, help="nccom-test's exit status")
    parser.add_argument("--nodes", type=int, help="nodes in the run (at least 2)")
    parser.add_argument("--termination-log", help="also write the verdict line to this file")
    parser.add_argument(
        "--validate-only", action="store_true", help="check the arguments, read no log, print nothing if fine"
    )
    return parser


def _write_termination_log(path: str | None, line: str) -> None:
    if not path:
        return
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(line + "\n")
    except OSError as error:  # the verdict still stands in the log and the exit status
        print(f"could not write {path}: {error}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    problem = argument_problem(
        threshold=arguments.threshold, nodes=arguments.nodes, network_gbps=arguments.network_gbps
    )
    if problem is not None:
        line = FAIL_PREFIX + problem
        print(line)
        _write_termination_log(arguments.termination_log, line)
        return 2
    if arguments.validate_only:
        return 0
    if arguments.log in (None, "-"):
        text = sys.stdin.read()
    else:
        with open(arguments.log, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    verdict = judge(
        text,
        network_gbps=arguments.network_gbps,
        threshold=arguments.threshold,
        size_bytes=arguments.size,
        exit_status=arguments.exit_status,
        nodes=arguments.nodes,
    )
    table = table_lines(text)
    if table:
        print("nccom-test result table:")
        print("\n".join(table))
    print(verdict.line)
    _write_termination_log(arguments.termination_log, verdict.line)
    return verdict.exit_status


if __name__ == "__main__":
    sys.exit(main())
