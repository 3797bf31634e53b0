"""Taint the nodes of a failed fabric check out of training.

Runs inside the fabric check's launcher pod after the verdict (k8s_charts/scripts/fabric_check_launcher.sh
writes this file and kube_api.py, the platform programs' API client, into one directory and runs
it), with the standard library only, on Python 3.11+.

Only a verdict that implicates the nodes taints them: collectives over TCP, EFA below the
threshold, or an nccom-test run that did not complete (a rank or node never joined or died). An
all-reduce across N nodes cannot say which node is at fault, so every node the check ran on is
tainted. Anything else (the log names no provider, a worker that never started, a refused input)
says nothing about the nodes, so nothing is tainted.

The node of each worker pod is read from the Kubernetes API (``GET`` of the named pods), the
taint is added with a JSON patch that first tests the node's resourceVersion (a concurrent change
makes the patch fail rather than drop someone else's taint; it is read and tried again). The
launcher's service account may get those pods, get and patch nodes; an admission policy lets it
add this one taint to its group's nodes and change nothing else (k8s_charts/fabric_check.py).

Output: one line per node (``tainted``, ``already tainted``), or why nothing is tainted. Exit
status 0 when every implicated node carries the taint (or none is implicated), 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse
from collections.abc import Sequence

from kube_api import Api, ApiError, in_cluster

__all__ = ["NODE_FAULTS", "implicates_nodes", "main", "parse_taint"]

FAIL_PREFIX = "FABRIC CHECK FAIL: "
# The verdict's reasons (fabric_verdict.py) that point at the nodes or the fabric between them.
NODE_FAULTS = (
    "network provider is ",  # ... not EFA
    "bandwidth below threshold over EFA",
    "nccom-test did not complete",
)


def implicates_nodes(verdict_line: str) -> bool:
    """Whether a verdict line says the check's nodes (or the fabric between them) failed."""
    if not verdict_line.startswith(FAIL_PREFIX):
        return False
    reason = verdict_line.removeprefix(FAIL_PREFIX)
    return reason.startswith(NODE_FAULTS)


def parse_taint(text: str) -> dict[str, str]:
    """``key=value:Effect`` as a Node taint."""
    key_value, _, effect = text.rpartition(":")
    key, _, value = key_value.partition("=")
    if not key or not value or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise ValueError(f"{text!r} is not a taint key=value:Effect")
    return {"key": key, "value": value, "effect": effect}


def _taint_node(api: Api, node: str, taint: dict[str, str]) -> str:
    """Add ``taint`` to ``node``; what was done, in a few words."""
    path = f"/api/v1/nodes/{urllib.parse.quote(node)}"
    for _ in range(3):
        current = api.get(path)
        taints = current.get("spec", {}).get("taints") or []
        if any(existing.get("key") == taint["key"] for existing in taints):
            return "already tainted"
        patch = [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": current["metadata"]["resourceVersion"],
            },
            {"op": "add", "path": "/spec/taints/-", "value": taint}
            if taints
            else {"op": "add", "path": "/spec/taints", "value": [taint]},
        ]
        try:
            api.json_patch(path, patch)
        except ApiError as error:
            if error.status in (409, 422):  # the node changed since it was read: read it again
                continue
            raise
        return "tainted"
    raise RuntimeError(f"node {node} kept changing; gave up after 3 attempts")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fabric_taint", description="Taint the nodes of a failed fabric check."
    )
    parser.add_argument("--verdict", required=True, help="the verdict line of the check")
    parser.add_argument("--namespace", required=True, help="the namespace of the check's pods")
    parser.add_argument("--pods", required=True, help="comma-separated worker pod names")
    parser.add_argument("--taint", required=True, help="key=value:Effect")
    # Default: the pod's own (kube_api.in_cluster).
    parser.add_argument("--server", help="the API server")
    parser.add_argument("--token-file")
    parser.add_argument("--ca-file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    taint = parse_taint(arguments.taint)
    label = f"{taint['key']}={taint['value']}:{taint['effect']}"
    if not implicates_nodes(arguments.verdict):
        print("no node tainted: the verdict does not implicate the nodes")
        return 0
    own = in_cluster()
    api = Api(
        server=arguments.server or own.server,
        token_file=arguments.token_file or own.token_file,
        ca_file=arguments.ca_file or own.ca_file,
    )
    nodes: list[str] = []
    failed = False
    for pod in filter(None, arguments.pods.split(",")):
        try:
            node = api.get(f"/api/v1/namespaces/{arguments.namespace}/pods/{pod}")["spec"].get("nodeName")
        except (ApiError, KeyError) as error:
            print(f"cannot find the node of pod {pod}: {error}")
            failed = True
            continue
        if node and node not in nodes:
            nodes.append(node)
    tainted = []
    for node in nodes:
        try:
            print(f"node {node}: {_taint_node(api, node, taint)} {label}")
            tainted.append(node)
        except (ApiError, KeyError, RuntimeError) as error:
            print(f"node {node}: NOT tainted: {error}")
            failed = True
    # The launcher reads this line (the last) into the verdict it repeats.
    print(f"tainted nodes: {' '.join(tainted) if tainted else 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
