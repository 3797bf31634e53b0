"""The node check's program, whole, on a node the cluster autoscaler's kwok provider created.

``python node_check_kwok.py PROGRAM_DIR`` runs ``node_check.main(["--once"])`` from the directory its
ConfigMap was written to, as the pod does, with one stand-in: EC2's instance id. A real node's
``spec.providerID`` is ``aws:///<zone>/<instance id>``; the kwok provider writes ``kwok:<node name>``
(its Nodes() and NodeGroupForNode need exactly that form, so the harness cannot write EC2's). Here
``instance_id`` reads such a node as the instance ``kwok_instance(<node name>)``, which the stand-in
``aws`` then records, and the test plays the Auto Scaling group for. Everything else (the checks
against the stand-in tools, the replacement budget in the group's ConfigMap, the taints, the events)
is the program's own, judged by the real API server, its RBAC and the ``node-check`` policy.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["kwok_instance"]


def kwok_instance(node: str) -> str:
    """The instance id a kwok node stands for (as tests/cluster/test_node_check.py names its nodes')."""
    return "i-0" + hashlib.sha1(node.encode()).hexdigest()[:16]


def _instance_id(node: Mapping[str, Any]) -> str | None:
    provider = (node.get("spec") or {}).get("providerID") or ""
    return kwok_instance(provider.removeprefix("kwok:")) if provider.startswith("kwok:") else None


if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])
    import node_check  # from the ConfigMap's directory (argv[1])

    node_check.instance_id = _instance_id  # type: ignore[attr-defined]
    sys.exit(node_check.main(["--once"]))
