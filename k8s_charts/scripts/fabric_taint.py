"""Taint the nodes of a failed fabric check out of training.

Runs inside the fabric check's launcher pod after the verdict (k8s_charts/scripts/fabric_check_launcher.sh
passes this file's text to ``python3 -c``), with the standard library only, on Python 3.11+.

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
import json
import os
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

__all__ = ["NODE_FAULTS", "implicates_nodes", "main", "parse_taint"]

FAIL_PREFIX = "FABRIC CHECK FAIL: "
# The verdict's reasons (fabric_verdict.py) that point at the nodes or the fabric between them.
NODE_FAULTS = (
    "network provider is ",  # ... not EFA
    "bandwidth below threshold over EFA",
    "nccom-test did not complete",
)
# In the pod: the API server's in-cluster name and the mounted token. Tests point both elsewhere.
_SERVER = os.environ.get("KUBERNETES_API_URL", "https://kubernetes.default.svc")
_SERVICE_ACCOUNT = os.environ.get("SERVICE_ACCOUNT_DIR", "/var/run/secrets/kubernetes.io/serviceaccount")
_TIMEOUT_SECONDS = 30


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


class _Api:
    def __init__(self, *, server: str, token: str, ca_file: str | None) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.context = ssl.create_default_context(cafile=ca_file) if server.startswith("https:") else None

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        with urllib.request.urlopen(request, timeout=_TIMEOUT_SECONDS, context=self.context) as response:
            return json.load(response)


def _taint_node(api: _Api, node: str, taint: dict[str, str]) -> str:
    """Add ``taint`` to ``node``; what was done, in a few words."""
    for _ in range(3):
        current = api.call("GET", f"/api/v1/nodes/{node}")
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
            api.call("PATCH", f"/api/v1/nodes/{node}", patch, content_type="application/json-patch+json")
        except urllib.error.HTTPError as error:
            if error.code in (409, 422):  # the node changed since it was read: read it again
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
    parser.add_argument("--server", default=_SERVER, help="the API server")
    parser.add_argument("--token-file", default=f"{_SERVICE_ACCOUNT}/token")
    parser.add_argument("--ca-file", default=f"{_SERVICE_ACCOUNT}/ca.crt")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    taint = parse_taint(arguments.taint)
    label = f"{taint['key']}={taint['value']}:{taint['effect']}"
    if not implicates_nodes(arguments.verdict):
        print("no node tainted: the verdict does not implicate the nodes")
        return 0
    try:
        with open(arguments.token_file, encoding="utf-8") as handle:
            token = handle.read().strip()
    except OSError as error:
        print(f"no node tainted: no service-account token ({error})")
        return 1
    api = _Api(server=arguments.server, token=token, ca_file=arguments.ca_file)
    nodes: list[str] = []
    failed = False
    for pod in filter(None, arguments.pods.split(",")):
        try:
            node = api.call("GET", f"/api/v1/namespaces/{arguments.namespace}/pods/{pod}")["spec"].get(
                "nodeName"
            )
        except (OSError, ValueError, KeyError) as error:
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
        except (OSError, ValueError, KeyError, RuntimeError) as error:
            print(f"node {node}: NOT tainted: {error}")
            failed = True
    # The launcher reads this line (the last) into the verdict it repeats.
    print(f"tainted nodes: {' '.join(tainted) if tainted else 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
