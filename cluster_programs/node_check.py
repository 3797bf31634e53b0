"""Prove a new Trainium node before any training lands on it; lift its startup taint, or have it replaced.

Runs in the node check's DaemonSet pod on every Trainium node (k8s_charts/node_check.py), with the
standard library only, beside kube_api.py (the platform's API client), node_check_verdict.py and
fabric_verdict.py (the parsers). On a node that still carries the startup taint it runs, each with
a time limit: ``neuron-ls``, a local ``nccom-test`` all-reduce across every NeuronCore, ``fi_info``
and an ``fi_pingpong`` loopback per EFA device, and a TCP connection to the file system. Then:

- PASS: the node condition ``TrainiumNodeCheck=True`` (reason ``NodeCheckPassed``), then the
  startup taint removed; training pods may now be scheduled there;
- FAIL: the condition ``False`` with the failing check as reason and what it found as message
  (``kubectl describe node``), a Warning event on the node; then, with ``REPAIR=replace`` and when
  the group's replacement record allows it (node_check_budget.py: a budget per group and window,
  and none once a node launched after a replacement failed the same way), the node's instance is
  marked ``Unhealthy`` in its Auto Scaling group (``aws autoscaling set-instance-health``, with the
  pod's own AWS role), which terminates it and launches a replacement that is checked in turn.
  Otherwise the replacement is *withheld*: the startup taint gives way to ``FAILED_TAINT_KEY=<reason>``
  (still NoSchedule), so the cluster autoscaler sees a Ready node, never an unready one, and removes
  it once unneeded; a Warning event ``ReplacementWithheld`` says why. When it is a repeat, the
  group's Auto Scaling group also gets its ``Launch`` process suspended (``NodeGroupLaunchesSuspended``):
  no node of the group starts again until a person resumes it (docs/health.md).

A node without the taint (checked before; the pod restarted) is left alone: the check never runs
next to a training pod.

Afterwards the pod stays and, every ``WATCH_SECONDS``, watches (``Watch``):

- **this node's EFA counters** (``/sys/class/infiniband/*/ports/*/hw_counters``): when an error
  counter of one device grows by more than ``EFA_ERROR_LIMIT`` within ``EFA_ERROR_WINDOW_SECONDS``,
  the node gets the taint ``EFA_SUSPECT_TAINT`` (no new pod lands; running pods are never touched)
  and the condition ``False`` (reason ``EfaErrors``). Once no process uses its Neuron devices, the
  EFA part of the check runs again (``fi_info``, a loopback per device): a pass lifts the taint, a
  failure keeps it and has the node replaced (``REPAIR=replace``). A peer that died moves the same
  counters; the loopback on the idle node tells the two apart;
- **its own node while held** (the startup taint or the EFA taint on): one line per pass.

The other Trainium nodes' kubelets are watched by one process for the cluster, not by each node:
node_fence.py, run by the Deployment ``node-check-fence`` (issue #36: each node reading the nodes
each pass cost a request per node per minute).

Every verdict and action is one line ``TRAINIUM_NODE_CHECK node=<node> state=<state> reason=<reason>
<detail>`` (states in ``STATES``), which the cluster's dashboard reads from the application log
group (cluster_facts/log_lines.py holds its pattern).

Writes go through the API server's admission policy ``node-check`` (k8s_charts/node_check.py): this
service account may remove the startup taint, put on or remove the EFA taint, put on the failed
taint, and set only this condition, on its own node; RBAC lets it read and update only its groups'
replacement records.
"""

from __future__ import annotations

import argparse
import glob
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from kube_api import Api, ApiError, in_cluster
from node_check_budget import (
    Budget,
    Decision,
    Replacement,
    claim_suspension,
    record_pass,
    record_suspension,
    reserve,
)
from node_check_budget import configmap_path as record_path
from node_check_devices import DeviceFence, fence_devices, fenceable, missing_devices
from node_check_verdict import (
    PASSED,
    CounterKey,
    Expected,
    Outputs,
    Verdict,
    busy_devices,
    counter_increases,
    efa_domains,
    judge,
    judge_efa,
    neuron_devices,
)

__all__ = [
    "COMPONENT",
    "STATES",
    "Repair",
    "Watch",
    "WatchSettings",
    "check_node",
    "efa_counters",
    "expected_from_labels",
    "instance_id",
    "lift_taint",
    "main",
    "node_condition",
    "repair_from_env",
    "replace_or_withhold",
    "run_checks",
    "set_condition",
    "status_line",
    "transition_time",
    "withheld",
]

COMPONENT = "node-check"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
STATES = ("passed", "failed", "held", "suspect", "cleared", "fenced", "withheld", "stopped")
"""passed/failed: a new node's verdict (a pass may name the Neuron devices it fenced: node_check_devices.py); held: a pass that found the node still tainted by the check;
suspect: EFA errors on a node in use (tainted); cleared: a suspect node passed the loopback again;
fenced: another node's unresponsive instance was marked Unhealthy; withheld: a replacement the
group's budget did not allow (the node stays tainted); stopped: the group's launches suspended."""
# The EFA vendor id in PCI config space (the node monitoring agent's efa.go checks the same).
_EFA_VENDOR = "0x1d0f"
# Ports for fi_pingpong's control socket (its default is 47592), one per device, on loopback.
_PINGPONG_PORT = 47600


def _run(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None) -> tuple[str, int]:
    """The command's output (stdout and stderr) and exit status; 124 when it timed out, 127 when missing."""
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired as expired:
        partial = expired.stdout if isinstance(expired.stdout, str) else ""
        return partial + f"\n{argv[0]} timed out after {timeout:.0f}s", 124
    except OSError as error:
        return f"{argv[0]}: {error}", 127
    return done.stdout + done.stderr, done.returncode


def _pingpong(domain: str, port: int, timeout: float) -> tuple[str, int]:
    """Server and client of ``fi_pingpong`` on one EFA device of this node."""
    # Through the device, not libfabric's shared-memory shortcut for peers on one host.
    env = {"FI_EFA_ENABLE_SHM_TRANSFER": "0"}
    common = ["-p", "efa", "-e", "rdm", "-d", domain, "-I", "100", "-S", "4096"]
    with tempfile.TemporaryFile(mode="w+") as server_log:
        server = subprocess.Popen(
            ["fi_pingpong", *common, "-B", str(port)],
            stdout=server_log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )
        try:
            time.sleep(0.5)  # the server binds its control socket
            return _run(["fi_pingpong", *common, "-P", str(port), "127.0.0.1"], timeout, env)
        finally:
            server.kill()
            server.wait()


def _lustre_problem(host: str, port: int, timeout: float) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as error:
        return f"no TCP connection to the file system at {host}:{port} within {timeout:.0f}s: {error}"


def run_checks(expected: Expected, *, lustre_host: str, lustre_port: int, step_timeout: float) -> Outputs:
    neuron_ls, neuron_ls_status = _run(["neuron-ls", "--json-output"], step_timeout)
    nccom, nccom_status = _run(
        ["nccom-test", "-r", str(expected.cores), "-d", "fp32", "-b", "32M", "-e", "32M", "--check", "allr"],
        step_timeout * 4,
    )
    fi_info, fi_info_status = _run(["fi_info", "-p", "efa", "-t", "FI_EP_RDM"], step_timeout)
    domains = efa_domains(fi_info) if fi_info_status == 0 else []
    pingpongs = {
        domain: _pingpong(domain, _PINGPONG_PORT + index, step_timeout)
        for index, domain in enumerate(domains)
    }
    return Outputs(
        neuron_ls=neuron_ls,
        neuron_ls_status=neuron_ls_status,
        nccom=nccom,
        nccom_status=nccom_status,
        fi_info=fi_info,
        fi_info_status=fi_info_status,
        pingpongs=pingpongs,
        lustre_problem=_lustre_problem(lustre_host, lustre_port, min(step_timeout, 10.0)),
    )


def status_line(node: str, state: str, reason: str, detail: str) -> str:
    """The one line per verdict or action that the dashboard reads (cluster_facts/log_lines.py)."""
    assert state in STATES and reason.isalnum(), (state, reason)
    return f"TRAINIUM_NODE_CHECK node={node} state={state} reason={reason} {detail}".rstrip()


def _say(node: str, state: str, reason: str, detail: str) -> None:
    print(status_line(node, state, reason, detail), flush=True)


def efa_counters(names: Sequence[str], sysfs: str = "/sys") -> dict[CounterKey, int]:
    """Every watched EFA port counter of this node: (device, port, name) -> value.

    The pod is privileged, so its /sys shows the host's devices; RDMA devices are visible in every
    network namespace unless the kernel's RDMA subsystem is switched to exclusive mode (``rdma system
    show``: "netns shared" is the default)."""
    found: dict[CounterKey, int] = {}
    for counters in sorted(glob.glob(os.path.join(sysfs, "class/infiniband/*/ports/*/hw_counters"))):
        port_dir = os.path.dirname(counters)
        device_dir = os.path.dirname(os.path.dirname(port_dir))
        device, port = os.path.basename(device_dir), os.path.basename(port_dir)
        try:
            with open(os.path.join(device_dir, "device", "vendor"), encoding="ascii") as handle:
                if handle.read().strip() != _EFA_VENDOR:
                    continue
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(counters, name), encoding="ascii") as handle:
                    found[(device, port, name)] = int(handle.read().strip())
            except (OSError, ValueError):
                continue  # an older driver without this counter
    return found


def run_efa_checks(step_timeout: float) -> Outputs:
    """The EFA part of the check alone: ``fi_info`` and a loopback per device."""
    fi_info, fi_info_status = _run(["fi_info", "-p", "efa", "-t", "FI_EP_RDM"], step_timeout)
    domains = efa_domains(fi_info) if fi_info_status == 0 else []
    pingpongs = {
        domain: _pingpong(domain, _PINGPONG_PORT + index, step_timeout)
        for index, domain in enumerate(domains)
    }
    return Outputs(neuron_ls="", fi_info=fi_info, fi_info_status=fi_info_status, pingpongs=pingpongs)


def _node_path(name: str) -> str:
    return f"/api/v1/nodes/{urllib.parse.quote(name)}"


def has_taint(node: Mapping[str, Any], key: str) -> bool:
    return any(taint.get("key") == key for taint in (node.get("spec") or {}).get("taints") or [])


def set_condition(api: Api, node: str, condition_type: str, verdict: Verdict) -> None:
    """This check's condition on the node's status (a strategic merge: the other conditions stay)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": condition_type,
        "status": "True" if verdict.passed else "False",
        "reason": verdict.reason,
        "message": verdict.message[:1024],
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    api.call("PATCH", _node_path(node) + "/status", {"status": {"conditions": [condition]}}, STRATEGIC_MERGE)


def lift_taint(api: Api, node: str, key: str) -> str:
    """Remove the taint ``key``; what was done. The patch tests the node's version first, so a
    concurrent change of its taints is read again rather than overwritten."""
    path = _node_path(node)
    for _ in range(3):
        current = api.get(path)
        taints = (current.get("spec") or {}).get("taints") or []
        kept = [taint for taint in taints if taint.get("key") != key]
        if len(kept) == len(taints):
            return f"no {key} taint"
        patch = [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": current["metadata"]["resourceVersion"],
            },
            {"op": "replace", "path": "/spec/taints", "value": kept},
        ]
        try:
            api.json_patch(path, patch)
        except ApiError as error:
            if error.status in (409, 422):
                continue
            raise
        return f"{key} removed"
    raise RuntimeError(f"node {node} kept changing; gave up after 3 attempts")


def add_taint(api: Api, node: str, taint: Mapping[str, str]) -> str:
    """Put ``taint`` on the node (once); what was done. Conditional on the node's version, as lift_taint."""
    path = _node_path(node)
    for _ in range(3):
        current = api.get(path)
        taints = (current.get("spec") or {}).get("taints") or []
        if any(t.get("key") == taint["key"] for t in taints):
            return f"{taint['key']} already on"
        patch = [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": current["metadata"]["resourceVersion"],
            },
            {"op": "add", "path": "/spec/taints", "value": [*taints, dict(taint)]},
        ]
        try:
            api.json_patch(path, patch)
        except ApiError as error:
            if error.status in (409, 422):
                continue
            raise
        return f"{taint['key']}={taint['value']}:{taint['effect']} put on"
    raise RuntimeError(f"node {node} kept changing; gave up after 3 attempts")


def instance_id(node: Mapping[str, Any]) -> str | None:
    """The EC2 instance of a node, from ``spec.providerID`` (``aws:///<zone>/<instance id>``)."""
    provider = (node.get("spec") or {}).get("providerID") or ""
    last = provider.rsplit("/", 1)[-1]
    return last if provider.startswith("aws://") and last.startswith("i-") else None


def replace_instance(node: Mapping[str, Any], timeout: float) -> str:
    """Mark the node's instance Unhealthy in its Auto Scaling group, which replaces it."""
    instance = instance_id(node)
    if instance is None:
        return f"not replaced: no EC2 instance in providerID {(node.get('spec') or {}).get('providerID')!r}"
    output, status = _run(
        [
            "aws", "autoscaling", "set-instance-health",
            "--instance-id", instance,
            "--health-status", "Unhealthy",
            "--no-should-respect-grace-period",
        ],
        timeout,
    )  # fmt: skip
    if status != 0:
        return f"not replaced: aws autoscaling set-instance-health exited {status}: {output.strip()[:300]}"
    return f"instance {instance} marked Unhealthy in its Auto Scaling group: it is replaced"


def suspend_launches(instance: str, timeout: float) -> tuple[str | None, str]:
    """Suspend the ``Launch`` process of the instance's Auto Scaling group: the group starts no
    instance (for the cluster autoscaler, an AZ rebalance or a replacement) until a person resumes
    it (EC2 Auto Scaling User Guide, "Suspend and resume Amazon EC2 Auto Scaling processes"; Auto
    Scaling suspends ``Launch`` itself, "administrative suspension", for a group that has failed to
    launch for a day). Its name, or None, and what was done."""
    output, status = _run(
        [
            "aws", "autoscaling", "describe-auto-scaling-instances", "--instance-ids", instance,
            "--query", "AutoScalingInstances[0].AutoScalingGroupName", "--output", "text",
        ],
        timeout,
    )  # fmt: skip
    group = output.strip().splitlines()[-1].strip() if status == 0 and output.strip() else ""
    if not group or group == "None":
        return (
            None,
            f"launches not suspended: no Auto Scaling group found for {instance} ({status}: {output.strip()[:300]})",
        )
    output, status = _run(
        [
            "aws",
            "autoscaling",
            "suspend-processes",
            "--auto-scaling-group-name",
            group,
            "--scaling-processes",
            "Launch",
        ],
        timeout,
    )
    if status != 0:
        return (
            None,
            f"launches not suspended: aws autoscaling suspend-processes exited {status}: {output.strip()[:300]}",
        )
    return group, (
        f"Auto Scaling group {group}: Launch suspended, no node of the group starts until "
        f"aws autoscaling resume-processes --auto-scaling-group-name {group} --scaling-processes Launch"
    )


def swap_taint(api: Api, node: str, remove: str, taint: Mapping[str, str]) -> str:
    """Replace the taint ``remove`` by ``taint`` in one write (conditional on the node's version, as
    lift_taint); what was done."""
    path = _node_path(node)
    for _ in range(3):
        current = api.get(path)
        taints = (current.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if t.get("key") != remove]
        if not any(t.get("key") == taint["key"] for t in kept):
            kept.append(dict(taint))
        patch = [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": current["metadata"]["resourceVersion"],
            },
            {"op": "replace", "path": "/spec/taints", "value": kept},
        ]
        try:
            api.json_patch(path, patch)
        except ApiError as error:
            if error.status in (409, 422):
                continue
            raise
        return f"{remove} replaced by {taint['key']}={taint['value']}:{taint['effect']}"
    raise RuntimeError(f"node {node} kept changing; gave up after 3 attempts")


@dataclass(frozen=True, kw_only=True)
class Repair:
    """What the check may do about a failed node: ``REPAIR`` and the group's replacement budget."""

    replace: bool
    """REPAIR=replace: a failed node's instance is marked Unhealthy (within the budget)."""
    namespace: str
    group_label: str
    """The node label naming a node's group: which record (ConfigMap) counts its replacements."""
    record_prefix: str
    budget: Budget
    failed_taint_key: str
    """The taint a failed node keeps when it is not replaced (its value: the failure's reason)."""
    timeout: float

    def record(self, node: Mapping[str, Any]) -> str | None:
        group = ((node.get("metadata") or {}).get("labels") or {}).get(self.group_label)
        return record_path(self.namespace, f"{self.record_prefix}{group}") if group else None

    def failed_taint(self, reason: str) -> dict[str, str]:
        return {"key": self.failed_taint_key, "value": reason, "effect": "NoSchedule"}


@dataclass(frozen=True)
class Outcome:
    replaced: bool
    action: str
    stop: bool = False
    """Replacing does not help: the group's launches are to be suspended."""


def _launched_at(node: Mapping[str, Any], now: datetime) -> datetime:
    created = (node.get("metadata") or {}).get("creationTimestamp")
    return datetime.fromisoformat(created) if created else now


def replace_or_withhold(api: Api, node: Mapping[str, Any], reason: str, repair: Repair) -> Outcome:
    """Ask for the node's replacement if the group's record allows it (node_check_budget.py), and
    record it before the instance is marked; otherwise say why not."""
    if not repair.replace:
        return Outcome(False, "not replaced: left for a person (REPAIR=none)")
    name = str(node["metadata"]["name"])
    instance = instance_id(node)
    if instance is None:
        return Outcome(
            False,
            f"not replaced: no EC2 instance in providerID {(node.get('spec') or {}).get('providerID')!r}",
        )
    path = repair.record(node)
    if path is None:
        return Outcome(False, f"not replaced: the node has no {repair.group_label} label, so no group record")
    now = datetime.now(UTC)
    decision: Decision = reserve(
        api,
        path,
        replacement=Replacement(now, name, instance, reason),
        launched_at=_launched_at(node, now),
        budget=repair.budget,
    )
    if decision.replace:
        return Outcome(True, f"{decision.why}: {replace_instance(node, repair.timeout)}")
    return Outcome(False, f"replacement withheld: {decision.why}", stop=decision.stop)


def stop_launches(api: Api, node: Mapping[str, Any], reason: str, repair: Repair) -> str:
    """Suspend the launches of the node's group, once (its record says whether it was done)."""
    path = repair.record(node)
    instance = instance_id(node)
    assert path is not None and instance is not None  # a stop comes only from the group's record
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    after = f"after {node['metadata']['name']} failed {reason}"
    taken = claim_suspension(api, path, text=f"{now} {after}")
    if taken is not None:
        return f"launches already suspended: {taken}"
    group, action = suspend_launches(instance, repair.timeout)
    # The group's name once AWS named it; a failed call gives the claim back, so a later node tries.
    record_suspension(api, path, text=f"{now} {group} {after}" if group is not None else "")
    return action


def expected_from_labels(node: Mapping[str, Any], labels: Mapping[str, str]) -> Expected:
    """What the node's instance type promises, from the labels its node group gives it (the catalog's
    counts, cluster_facts/kubernetes_names.py ``trainium_node_labels``); ``labels`` names the keys."""
    values = (node.get("metadata") or {}).get("labels") or {}
    try:
        return Expected(
            devices=int(values[labels["devices"]]),
            cores=int(values[labels["cores"]]),
            efa_interfaces=int(values[labels["efa_interfaces"]]),
        )
    except (KeyError, ValueError) as error:
        raise RuntimeError(f"the node lacks its node group's device labels ({error})") from None


def check_node(
    api: Api,
    *,
    node_name: str,
    taint_key: str,
    condition_type: str,
    labels: Mapping[str, str],
    lustre_host: str,
    lustre_port: int,
    step_timeout: float,
    repair: Repair,
    fence: DeviceFence | None = None,
) -> int:
    """One pass on this node; 0 when the node passed (or had been checked), 1 when it failed.
    With ``fence`` (a DRA node where the cluster serves DeviceTaintRule), Neuron devices missing from
    one connected half are fenced and the rest judged (node_check_devices.py)."""
    node = api.get(_node_path(node_name))
    if not has_taint(node, taint_key):
        print(f"node {node_name} carries no {taint_key} taint: checked before, nothing to do")
        return 0
    expected = expected_from_labels(node, labels)
    # A node whose devices a process already uses (a taint put back on a node in use, say by a
    # change of its node group's taints) is in use, not new: no collective next to a training run.
    listing, listing_status = _run(["neuron-ls", "--json-output"], step_timeout)
    busy = busy_devices(neuron_devices(listing) or []) if listing_status == 0 else []
    if busy:
        print(
            f"node {node_name}: Neuron devices {busy} are in use: not checked; {lift_taint(api, node_name, taint_key)}"
        )
        return 0
    started = time.monotonic()
    fenced: list[str] = []
    if fence is not None and listing_status == 0 and fence.applies_to(node):
        expected, fenced = fence_missing(
            api, node, neuron_devices(listing) or [], expected, fence=fence, namespace=repair.namespace
        )
    verdict = judge(
        run_checks(expected, lustre_host=lustre_host, lustre_port=lustre_port, step_timeout=step_timeout),
        expected,
    )
    seconds = time.monotonic() - started
    print(f"{verdict.line} (in {seconds:.0f}s)")
    set_condition(api, node_name, condition_type, verdict)
    if verdict.passed:
        _say(
            node_name,
            "passed",
            verdict.reason,
            f"seconds={seconds:.0f} {'fenced=' + ','.join(fenced) + ' ' if fenced else ''}"
            f"{lift_taint(api, node_name, taint_key)}",
        )
        _end_streak(api, node, repair)
        return 0
    api.event(
        namespace=repair.namespace,
        involved={**node, "kind": "Node", "apiVersion": "v1"},
        reason=verdict.reason,
        message=f"node check failed: {verdict.message}",
        component=COMPONENT,
    )
    _failed(api, node, verdict.reason, repair, swap=taint_key, detail=f"seconds={seconds:.0f} ")
    return 1


def fence_missing(
    api: Api,
    node: Mapping[str, Any],
    devices: Sequence[Mapping[str, object]],
    expected: Expected,
    *,
    fence: DeviceFence,
    namespace: str,
) -> tuple[Expected, list[str]]:
    """Fence the devices ``neuron-ls`` misses when a connected half stays whole; what the rest of the
    node must then show, and the rules' names. Otherwise ``expected`` unchanged (the node fails)."""
    missing = missing_devices(devices, expected.devices)
    if not fenceable(missing, expected.devices):
        return expected, []
    names = fence_devices(api, node, missing, "NeuronDeviceMissing", fence)
    api.event(
        namespace=namespace,
        involved={**node, "kind": "Node", "apiVersion": "v1"},
        reason="NeuronDevicesFenced",
        message=f"Neuron devices {missing} are missing: fenced by DeviceTaintRules {names}; "
        "the node serves claims that fit the rest",
        component=COMPONENT,
    )
    cores_per_device = expected.cores // expected.devices
    return (
        replace(
            expected,
            devices=expected.devices - len(missing),
            cores=expected.cores - cores_per_device * len(missing),
        ),
        names,
    )


def _end_streak(api: Api, node: Mapping[str, Any], repair: Repair) -> None:
    """A pass ends the group's streak of replacements (node_check_budget.py); never fails the pass."""
    path = repair.record(node) if repair.replace else None
    if path is None:
        return
    try:
        if record_pass(api, path, node=str(node["metadata"]["name"]), now=datetime.now(UTC)):
            print(f"the replacement streak of {path} ends: a node of the group passed", flush=True)
    except (ApiError, RuntimeError) as error:
        print(f"could not end the replacement streak of {path}: {error}", file=sys.stderr, flush=True)


def _failed(
    api: Api,
    node: Mapping[str, Any],
    reason: str,
    repair: Repair,
    *,
    swap: str | None,
    kept: str = "",
    detail: str = "",
) -> bool:
    """A failed node: replaced within the group's budget, or withheld (``withheld``). True when a
    replacement was asked for."""
    outcome = replace_or_withhold(api, node, reason, repair)
    if outcome.replaced:
        _say(str(node["metadata"]["name"]), "failed", reason, f"{detail}{outcome.action}")
        return True
    withheld(api, node, reason, repair, outcome, swap=swap, kept=kept, detail=detail)
    return False


TEMPLATE_READY_SECONDS = 70
"""How long a withheld node must have been Ready before it trades the startup taint for the failed one.
The cluster autoscaler builds its picture of a new node of the group only from a node Ready for a
minute (``stabilizationDelay``, ``isNodeGoodTemplateCandidate`` in
processors/nodeinfosprovider/mixed_nodeinfos_processor.go, 1.33.0 to 1.34.5), else from the group's
template: a node withheld sooner would, for that minute, leave the waiting gang looking placeable on
a new node, and the autoscaler would add one. Still starting meanwhile (the startup taint on), the
node counts as an upcoming node the gang is expected to land on. 60 s and one of its 10 s loops."""


def _wait_until_ready_long_enough(api: Api, name: str) -> None:
    ready = node_condition(api.get(_node_path(name)), "Ready") or {}
    since = transition_time(ready) if ready.get("status") == "True" else None
    if since is None:
        return  # not Ready at all: the autoscaler builds nothing from it either way
    wait = TEMPLATE_READY_SECONDS - (datetime.now(UTC) - since).total_seconds()
    if wait > 0:
        print(
            f"node {name}: Ready {TEMPLATE_READY_SECONDS - wait:.0f}s ago; the failed taint waits {wait:.0f}s",
            flush=True,
        )
        time.sleep(wait)


def withheld(
    api: Api,
    node: Mapping[str, Any],
    reason: str,
    repair: Repair,
    outcome: Outcome,
    *,
    swap: str | None = None,
    kept: str = "",
    detail: str = "",
) -> None:
    """A replacement not asked for: a new node trades ``swap`` (the startup taint) for the failed
    taint, so the cluster autoscaler sees a Ready node that it removes once unneeded, not a starting
    one (``kept`` says what happens to other nodes); a Warning Event and a line say why; a repeat
    also stops the group's launches."""
    name = str(node["metadata"]["name"])
    if swap is not None:
        _wait_until_ready_long_enough(api, name)
        taint = repair.failed_taint(reason)
        done = swap_taint(api, name, swap, taint)
        kept = f"the node keeps {taint['key']}={reason}:NoSchedule ({done}); the cluster autoscaler removes it once unneeded"
    message = f"{reason}: {outcome.action}; {kept}"
    involved = {**node, "kind": "Node", "apiVersion": "v1"}
    api.event(
        namespace=repair.namespace,
        involved=involved,
        reason="ReplacementWithheld",
        message=message,
        component=COMPONENT,
    )
    _say(name, "withheld", reason, f"{detail}{message}")
    if outcome.stop:
        action = stop_launches(api, node, reason, repair)
        api.event(
            namespace=repair.namespace,
            involved=involved,
            reason="NodeGroupLaunchesSuspended",
            message=f"new nodes of the group fail the same way after a replacement ({reason}): {action}",
            component=COMPONENT,
        )
        _say(name, "stopped", reason, action)


@dataclass(frozen=True, kw_only=True)
class WatchSettings:
    node_name: str
    taint_key: str
    """The startup taint."""
    efa_taint: Mapping[str, str]
    condition_type: str
    labels: Mapping[str, str]
    efa_counters: tuple[str, ...]
    efa_limit: int
    efa_window_seconds: float
    watch_seconds: float
    node_read_seconds: float
    """Read the node at least this often; every pass while a taint of the check is on it or the
    EFA counters grew."""
    step_timeout: float
    repair: Repair
    sysfs: str = "/sys"


def node_condition(node: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    conditions = (node.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), None)


def transition_time(condition: Mapping[str, Any] | None) -> datetime | None:
    text = (condition or {}).get("lastTransitionTime")
    return datetime.fromisoformat(text) if text else None


class Watch:
    """What the check does on its node after the first verdict, one ``run_pass`` per ``watch_seconds``."""

    def __init__(self, api: Api, settings: WatchSettings) -> None:
        self.api = api
        self.settings = settings
        window = max(1, round(settings.efa_window_seconds / settings.watch_seconds))
        self.samples: deque[dict[CounterKey, int]] = deque(maxlen=window + 1)
        self.judged = False
        """The EFA re-check failed and its replacement was asked for or withheld: not asked again."""
        self.node: Mapping[str, Any] | None = None
        """The node as last read; None: read it on the next pass (after a write of the check's own)."""
        self.read_every = max(1, round(settings.node_read_seconds / settings.watch_seconds))
        self.since_read = 0

    def run_pass(self) -> None:
        """One pass; an API error ends it (the next pass reads the node again).

        The node is read when the pass may act on it: while a taint of the check is on it, when the
        EFA counters grew, and otherwise every ``node_read_seconds`` (a read on every pass was one
        request per node per minute); only the check itself puts its taints on."""
        settings = self.settings
        self.samples.append(efa_counters(settings.efa_counters, settings.sysfs))
        if self._must_read():
            self.node = None
            self.node = self.api.get(_node_path(settings.node_name))
            self.since_read = 0
        self.since_read += 1
        assert self.node is not None
        self._held(self.node)
        self._efa(self.node)

    def _must_read(self) -> bool:
        settings = self.settings
        if self.node is None or self.since_read >= self.read_every:
            return True
        keys = (settings.taint_key, settings.repair.failed_taint_key, settings.efa_taint["key"])
        return any(has_taint(self.node, key) for key in keys) or bool(self._grown())

    def _grown(self) -> list[tuple[CounterKey, int]]:
        if len(self.samples) < 2:
            return []  # a full window is not yet read
        return counter_increases(self.samples[0], self.samples[-1], self.settings.efa_limit)

    # --- a held node --------------------------------------------------------------------------

    def _held(self, node: Mapping[str, Any]) -> None:
        """One line while the check keeps its node out of work: the startup taint, or the failed
        taint of a node whose replacement was withheld (until the autoscaler removes it)."""
        settings = self.settings
        for key in (settings.taint_key, settings.repair.failed_taint_key):
            if has_taint(node, key):
                condition = node_condition(node, settings.condition_type) or {}
                _say(
                    settings.node_name,
                    "held",
                    str(condition.get("reason") or "NodeCheckPending"),
                    f"taint={key} {str(condition.get('message') or '')[:200]}",
                )
                return

    # --- EFA errors on a node in use ----------------------------------------------------------

    def _efa(self, node: Mapping[str, Any]) -> None:
        settings = self.settings
        name = settings.node_name
        if has_taint(node, settings.efa_taint["key"]):
            self._recheck(node)
            return
        if has_taint(node, settings.taint_key) or has_taint(node, settings.repair.failed_taint_key):
            return  # not yet judged, or never taken into use
        grown = self._grown()
        if not grown:
            return
        seconds = (len(self.samples) - 1) * settings.watch_seconds
        listing = "; ".join(
            f"{device}:{port} {counter} +{rise}" for (device, port, counter), rise in grown[:4]
        )
        message = (
            f"EFA error counters grew past {settings.efa_limit} in {seconds:.0f}s ({listing}); no new work "
            f"until the node is idle and its EFA loopback passes again"
        )
        verdict = Verdict("EfaErrors", message)
        set_condition(self.api, name, settings.condition_type, verdict)
        action = add_taint(self.api, name, settings.efa_taint)
        self.node = None
        self.api.event(
            namespace=settings.repair.namespace,
            involved={**node, "kind": "Node", "apiVersion": "v1"},
            reason=verdict.reason,
            message=message,
            component=COMPONENT,
        )
        _say(name, "suspect", verdict.reason, f"{action}: {listing}")

    def _recheck(self, node: Mapping[str, Any]) -> None:
        """A suspect node: once idle, the EFA loopback decides."""
        settings = self.settings
        name = settings.node_name
        listing, status = _run(["neuron-ls", "--json-output"], settings.step_timeout)
        devices = neuron_devices(listing) if status == 0 else None
        busy = busy_devices(devices or [])
        if devices is None or busy:
            why = f"Neuron devices {busy} in use" if busy else "neuron-ls gave no device list"
            _say(name, "held", "EfaErrors", f"taint={settings.efa_taint['key']} {why}: the loopback waits")
            return
        if self.judged:
            _say(name, "held", "EfaLoopbackFailed", f"taint={settings.efa_taint['key']} failed its loopback")
            return
        expected = expected_from_labels(node, settings.labels)
        verdict = judge_efa(run_efa_checks(settings.step_timeout), expected)
        if verdict is None:
            passed = Verdict(
                PASSED,
                f"EFA errors seen in use; idle, its {expected.efa_interfaces} EFA devices pass loopback again",
            )
            set_condition(self.api, name, settings.condition_type, passed)
            action = lift_taint(self.api, name, settings.efa_taint["key"])
            self.node = None
            self.samples.clear()
            _say(name, "cleared", passed.reason, action)
            return
        set_condition(self.api, name, settings.condition_type, verdict)
        self.api.event(
            namespace=settings.repair.namespace,
            involved={**node, "kind": "Node", "apiVersion": "v1"},
            reason=verdict.reason,
            message=f"EFA re-check failed, {settings.efa_taint['key']} kept: {verdict.message}",
            component=COMPONENT,
        )
        self.judged = True
        kept = f"the node keeps {settings.efa_taint['key']}; idle, the cluster autoscaler removes it once unneeded"
        _failed(self.api, node, verdict.reason, settings.repair, swap=None, kept=kept)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="node_check", description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="exit after the pass instead of idling")
    return parser


def repair_from_env(env: Mapping[str, str], step_timeout: float) -> Repair:
    return Repair(
        replace=env.get("REPAIR", "replace") == "replace",
        namespace=env["POD_NAMESPACE"],
        group_label=env["NODE_GROUP_LABEL"],
        record_prefix=env["REPLACEMENT_RECORD_PREFIX"],
        budget=Budget(
            per_window=int(env["REPLACEMENTS_PER_WINDOW"]),
            window_seconds=float(env["REPLACEMENT_WINDOW_SECONDS"]),
        ),
        failed_taint_key=env["FAILED_TAINT_KEY"],
        timeout=step_timeout,
    )


def _device_fence(env: Mapping[str, str]) -> DeviceFence | None:
    """Set only where the cluster serves DeviceTaintRule and has DRA groups (k8s_charts/node_check.py)."""
    if not env.get("DEVICE_TAINT_RULE_API"):
        return None
    return DeviceFence(
        api_version=env["DEVICE_TAINT_RULE_API"],
        taint_key=env["FAULTY_DEVICE_TAINT_KEY"],
        driver=env["NEURON_DRA_DRIVER"],
        devices_label=env["DEVICES_LABEL"],
    )


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    env = os.environ
    try:
        api = in_cluster()
        labels = {
            "devices": env["NEURON_DEVICES_LABEL"],
            "cores": env["NEURON_CORES_LABEL"],
            "efa_interfaces": env["EFA_INTERFACES_LABEL"],
        }
        step_timeout = float(env.get("STEP_TIMEOUT_SECONDS", "30"))
        repair = repair_from_env(env, step_timeout)
        fence = _device_fence(env)
        status = check_node(
            api,
            node_name=env["NODE_NAME"],
            taint_key=env["TAINT_KEY"],
            condition_type=env["CONDITION_TYPE"],
            labels=labels,
            lustre_host=env["LUSTRE_HOST"],
            lustre_port=int(env.get("LUSTRE_PORT", "988")),
            step_timeout=step_timeout,
            repair=repair,
            fence=fence,
        )
        key, value, effect = env["EFA_TAINT"].split(":")
        settings = WatchSettings(
            node_name=env["NODE_NAME"],
            taint_key=env["TAINT_KEY"],
            efa_taint={"key": key, "value": value, "effect": effect},
            condition_type=env["CONDITION_TYPE"],
            labels=labels,
            efa_counters=tuple(env["EFA_ERROR_COUNTERS"].split()),
            efa_limit=int(env["EFA_ERROR_LIMIT"]),
            efa_window_seconds=float(env["EFA_ERROR_WINDOW_SECONDS"]),
            watch_seconds=float(env["WATCH_SECONDS"]),
            node_read_seconds=float(env["NODE_READ_SECONDS"]),
            step_timeout=step_timeout,
            repair=repair,
        )
    except (ApiError, KeyError, RuntimeError, ValueError) as error:
        # The pod restarts (DaemonSet) and the check runs again while the taint is on.
        print(f"node check could not finish: {error}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    if arguments.once:
        return status
    watch = Watch(api, settings)
    while True:  # a DaemonSet's pod cannot end without being restarted
        time.sleep(settings.watch_seconds)
        try:
            watch.run_pass()
        except (ApiError, RuntimeError, KeyError, ValueError) as error:
            print(f"node watch pass failed (the next one reads again): {error}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
