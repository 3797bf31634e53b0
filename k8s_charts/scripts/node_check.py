"""Prove a new Trainium node before any training lands on it; lift its startup taint, or have it replaced.

Runs in the node check's DaemonSet pod on every Trainium node (k8s_charts/node_check.py), with the
standard library only, beside kube_api.py (the platform's API client), node_check_verdict.py and
fabric_verdict.py (the parsers). On a node that still carries the startup taint it runs, each with
a time limit: ``neuron-ls``, a local ``nccom-test`` all-reduce across every NeuronCore, ``fi_info``
and an ``fi_pingpong`` loopback per EFA device, and a TCP connection to the file system. Then:

- PASS: the node condition ``TrainiumNodeCheck=True`` (reason ``NodeCheckPassed``), then the
  startup taint removed; training pods may now be scheduled there;
- FAIL: the condition ``False`` with the failing check as reason and what it found as message
  (``kubectl describe node``), a Warning event on the node, the taint kept; then, with
  ``REPAIR=replace``, the node's instance is marked ``Unhealthy`` in its Auto Scaling group
  (``aws autoscaling set-instance-health``, with the pod's own AWS role), which terminates it and
  launches a replacement that is checked in turn.

A node without the taint (checked before; the pod restarted) is left alone: the check never runs
next to a training pod. Afterwards the pod idles, holding nothing: a DaemonSet's pod cannot end.

Writes go through the API server's admission policy ``node-check`` (k8s_charts/node_check.py): this
service account may remove only the startup taint, and set only this condition, on its own node.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from kube_api import Api, ApiError, in_cluster
from node_check_verdict import Expected, Outputs, Verdict, busy_devices, efa_domains, judge, neuron_devices

__all__ = [
    "check_node",
    "expected_from_labels",
    "instance_id",
    "lift_taint",
    "main",
    "run_checks",
    "set_condition",
]

COMPONENT = "node-check"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
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
            return "no startup taint"
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
        return "startup taint removed"
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
    repair: str,
    namespace: str,
) -> int:
    """One pass on this node; 0 when the node passed (or had been checked), 1 when it failed."""
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
    verdict = judge(
        run_checks(expected, lustre_host=lustre_host, lustre_port=lustre_port, step_timeout=step_timeout),
        expected,
    )
    print(f"{verdict.line} (in {time.monotonic() - started:.0f}s)")
    set_condition(api, node_name, condition_type, verdict)
    if verdict.passed:
        print(f"node {node_name}: {lift_taint(api, node_name, taint_key)}")
        return 0
    api.event(
        namespace=namespace,
        involved={**node, "kind": "Node", "apiVersion": "v1"},
        reason=verdict.reason,
        message=f"node check failed, {taint_key} kept: {verdict.message}",
        component=COMPONENT,
    )
    if repair == "replace":
        print(f"node {node_name}: {replace_instance(node, step_timeout)}")
    else:
        print(f"node {node_name}: left tainted for a person (REPAIR={repair})")
    return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="node_check", description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="exit after the pass instead of idling")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    env = os.environ
    try:
        status = check_node(
            in_cluster(),
            node_name=env["NODE_NAME"],
            taint_key=env["TAINT_KEY"],
            condition_type=env["CONDITION_TYPE"],
            labels={
                "devices": env["NEURON_DEVICES_LABEL"],
                "cores": env["NEURON_CORES_LABEL"],
                "efa_interfaces": env["EFA_INTERFACES_LABEL"],
            },
            lustre_host=env["LUSTRE_HOST"],
            lustre_port=int(env.get("LUSTRE_PORT", "988")),
            step_timeout=float(env.get("STEP_TIMEOUT_SECONDS", "30")),
            repair=env.get("REPAIR", "replace"),
            namespace=env["POD_NAMESPACE"],
        )
    except (ApiError, KeyError, RuntimeError) as error:
        # The pod restarts (DaemonSet) and the check runs again while the taint is on.
        print(f"node check could not finish: {error}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    if arguments.once:
        return status
    while True:  # a DaemonSet's pod cannot end without being restarted
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
