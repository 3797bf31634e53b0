"""Judge what a new Trainium node's tools printed: does the node have what its instance type promises?

Runs inside the node check's pod (k8s_charts/scripts/node_check.py imports it), standard library
only, Python 3.11+. It reads the outputs of the tools the Neuron training image ships (the
``aws-neuronx-tools`` package for ``neuron-ls`` and ``nccom-test``; the EFA installer's libfabric
for ``fi_info`` and ``fi_pingpong``, under /opt/amazon/efa/bin: aws-neuron/deep-learning-containers,
pytorch/training/2.9.0/Dockerfile.neuronx) and says PASS, or FAIL with the first reason, in the
order the checks run:

1. ``neuron-ls --json-output``: one entry per Neuron device (``neuron_device``, ``nc_count``,
   ``memory_size``; Neuron docs, "Neuron LS User Guide"). The device count must equal the instance
   type's chips and the NeuronCores (the sum of ``nc_count``) its cores visible to workloads.
2. ``nccom-test -r <cores> ... --check allr`` on this node alone: a local all-reduce across every
   NeuronCore with its result checked (Neuron docs, "NCCOM-TEST User Guide": the table, ``Avg bus
   bandwidth:``, the failure lines). The table is read with the fabric check's parser
   (fabric_verdict.py, shipped beside this file).
3. ``fi_info -p efa -t FI_EP_RDM``: one ``domain: <device>-rdm`` per EFA device (libfabric
   fi_info(1); the EFA user guide's "Test your EFA" step); their count must equal the instance
   type's EFA interfaces.
4. ``fi_pingpong -p efa -e rdm -d <domain>`` as server and client on this node, per domain: the
   row of its statistics (libfabric util/pingpong.c ``show_perf``: ``bytes #sent #ack total time
   MB/sec usec/xfer Mxfers/sec``, the ack column ``=<n>`` when every message was acknowledged).
5. The file system answers: a TCP connection to its Lustre port (988) from this node.

The reason names (``NeuronDevicesMissing``...) are the node condition's reason; the message is
what ``kubectl describe node`` shows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fabric_verdict import error_lines, parse_table

__all__ = [
    "PASSED",
    "CounterKey",
    "Expected",
    "Outputs",
    "Verdict",
    "busy_devices",
    "counter_increases",
    "efa_domains",
    "judge",
    "judge_efa",
    "neuron_devices",
    "pingpong_ok",
]

PASSED = "NodeCheckPassed"


@dataclass(frozen=True, kw_only=True)
class Expected:
    """What the instance type promises (the instance catalog)."""

    devices: int
    cores: int
    efa_interfaces: int


@dataclass(frozen=True, kw_only=True)
class Outputs:
    """What each tool printed and its exit status; None when the step did not run."""

    neuron_ls: str
    neuron_ls_status: int = 0
    nccom: str = ""
    nccom_status: int = 0
    fi_info: str = ""
    fi_info_status: int = 0
    pingpongs: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    """domain -> (the client's output, its exit status)."""
    lustre_problem: str | None = None
    """None when the file system answered; else what went wrong."""


@dataclass(frozen=True)
class Verdict:
    reason: str
    message: str

    @property
    def passed(self) -> bool:
        return self.reason == PASSED

    @property
    def line(self) -> str:
        return f"NODE CHECK {'PASS' if self.passed else 'FAIL'}: {self.reason}: {self.message}"


def neuron_devices(text: str) -> list[dict[str, object]] | None:
    """The devices of ``neuron-ls --json-output``; None when the text is not that JSON."""
    try:
        devices = json.loads(text)
    except ValueError:
        return None
    if not isinstance(devices, list) or not all(
        isinstance(device, dict) and isinstance(device.get("nc_count"), int) for device in devices
    ):
        return None
    return devices


def busy_devices(devices: Sequence[Mapping[str, object]]) -> list[int]:
    """The devices a process is using (``neuron_processes``): a node in use is never checked."""
    return [int(str(device.get("neuron_device"))) for device in devices if device.get("neuron_processes")]


_DOMAIN = re.compile(r"^\s*domain:\s*(\S+)\s*$", re.MULTILINE)
_PROVIDER = re.compile(r"^\s*provider:\s*(\S+)\s*$", re.MULTILINE)


def efa_domains(text: str) -> list[str]:
    """The EFA devices ``fi_info -p efa -t FI_EP_RDM`` lists (its RDM domains), in order, once each."""
    found: list[str] = []
    for block in re.split(r"(?=^provider:)", text, flags=re.MULTILINE):
        provider = _PROVIDER.search(block)
        domain = _DOMAIN.search(block)
        if provider and domain and provider.group(1) == "efa" and domain.group(1) not in found:
            found.append(domain.group(1))
    return found


# A statistics row: size, #sent, =#ack (all acknowledged) or -#ack, total, time, MB/sec, usec, Mxfers.
_PINGPONG_ROW = re.compile(
    r"^\s*(\d+[kmgKMG]?)\s+(\d+[kmgKMG]?)\s+([=-])(\d+[kmgKMG]?)\s+\S+\s+[\d.]+s\s+[\d.]+\s+[\d.]+"
)


def pingpong_ok(text: str, status: int) -> bool:
    """Whether an ``fi_pingpong`` client exited 0 and every row shows every message acknowledged."""
    rows = [_PINGPONG_ROW.match(line) for line in text.splitlines()]
    matched = [row for row in rows if row]
    return status == 0 and bool(matched) and all(row.group(3) == "=" for row in matched)


def _summary(names: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def judge(outputs: Outputs, expected: Expected) -> Verdict:  # noqa: PLR0911 - one return per check, in order
    """PASS, or FAIL with the first problem, in the order the checks run."""
    devices = neuron_devices(outputs.neuron_ls) if outputs.neuron_ls_status == 0 else None
    if devices is None:
        first = (outputs.neuron_ls.strip().splitlines() or ["no output"])[0][:200]
        return Verdict(
            "NeuronToolsFailed", f"neuron-ls exited {outputs.neuron_ls_status} without a device list: {first}"
        )
    if len(devices) != expected.devices:
        return Verdict(
            "NeuronDevicesMissing",
            f"neuron-ls lists {len(devices)} Neuron devices; the instance type has {expected.devices}",
        )
    cores = sum(int(str(device["nc_count"])) for device in devices)
    if cores != expected.cores:
        return Verdict(
            "NeuronCoresMissing",
            f"neuron-ls lists {cores} NeuronCores; the instance type has {expected.cores}",
        )
    errors = error_lines(outputs.nccom)
    rows = parse_table(outputs.nccom)
    if outputs.nccom_status != 0 or errors or not rows:
        detail = errors[0] if errors else ("no result table" if not rows else "")
        return Verdict(
            "NeuronCollectiveFailed",
            f"nccom-test all-reduce across the node's {expected.cores} NeuronCores exited "
            f"{outputs.nccom_status}" + (f": {detail}" if detail else ""),
        )
    efa = judge_efa(outputs, expected)
    if efa is not None:
        return efa
    domains = efa_domains(outputs.fi_info)
    if outputs.lustre_problem is not None:
        return Verdict("LustreUnreachable", outputs.lustre_problem)
    busbw = rows[-1].busbw_gib_per_s
    return Verdict(
        PASSED,
        f"{len(devices)} Neuron devices, {cores} NeuronCores, all-reduce {busbw:.2f} GB/s bus bandwidth; "
        f"{len(domains)} EFA devices pass loopback; the file system answers",
    )


def judge_efa(outputs: Outputs, expected: Expected) -> Verdict | None:
    """The EFA part of the check (``fi_info``, then the loopback of each device): None when it passes.
    Also the whole re-check of a node in use whose EFA counters made it suspect."""
    domains = efa_domains(outputs.fi_info) if outputs.fi_info_status == 0 else []
    if len(domains) != expected.efa_interfaces:
        return Verdict(
            "EfaDevicesMissing",
            f"fi_info lists {len(domains)} EFA devices ({_summary(domains) or 'none'}); "
            f"the instance type has {expected.efa_interfaces}",
        )
    failed = [domain for domain in domains if not pingpong_ok(*outputs.pingpongs.get(domain, ("", -1)))]
    if failed:
        return Verdict(
            "EfaLoopbackFailed",
            f"fi_pingpong over EFA failed on {len(failed)} of {len(domains)} devices: {_summary(failed)}",
        )
    return None


CounterKey = tuple[str, str, str]
"""(EFA device, port, counter name), as the counter's path names them."""


def counter_increases(
    oldest: Mapping[CounterKey, int], newest: Mapping[CounterKey, int], limit: int
) -> list[tuple[CounterKey, int]]:
    """The counters that grew by more than ``limit`` from ``oldest`` to ``newest``, largest first.

    A counter that went down (the driver reloaded) or appeared only now counts from zero growth:
    nothing is blamed on a reset."""
    grown = [
        (key, value - oldest[key])
        for key, value in newest.items()
        if key in oldest and value - oldest[key] > limit
    ]
    return sorted(grown, key=lambda item: (-item[1], item[0]))
