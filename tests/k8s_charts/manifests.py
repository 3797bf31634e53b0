"""Helpers for reading synthesized cdk8s charts in tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import cdk8s

Manifest = dict[str, Any]


def synth(build: Callable[[cdk8s.App], cdk8s.Chart]) -> list[Manifest]:
    """The manifests of one chart, built in a fresh app (one chart per app, as the stack does).

    A plain ``cdk8s.App``: ``cdk8s.Testing.app()`` makes a directory under /tmp for every call and
    never removes it (thousands per test run), and nothing here writes to the app's outdir."""
    return list(cdk8s.Testing.synth(build(cdk8s.App())))


def only(manifests: list[Manifest], kind: str) -> Manifest:
    found = [manifest for manifest in manifests if manifest["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def pod_spec(manifest: Manifest) -> dict[str, Any]:
    return manifest["spec"]["template"]["spec"]


def containers(manifest: Manifest) -> Iterator[dict[str, Any]]:
    """Every container (init containers included) of a workload object, a Volcano Job's tasks
    included; none for other kinds."""
    spec = manifest.get("spec", {})
    templates = (
        [spec["template"]] if "template" in spec else [task["template"] for task in spec.get("tasks", [])]
    )
    for template in templates:
        yield from template["spec"].get("initContainers", [])
        yield from template["spec"]["containers"]


def node_affinity_values(manifest: Manifest, key: str) -> list[str]:
    """The values of the single required node-affinity expression on ``key``."""
    terms = pod_spec(manifest)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    [term] = terms
    [expression] = [expr for expr in term["matchExpressions"] if expr["key"] == key]
    assert expression["operator"] == "In"
    return expression["values"]


def host_paths(manifest: Manifest) -> dict[str, str]:
    """mountPath -> host path, for every hostPath volume the container mounts."""
    spec = pod_spec(manifest)
    volumes = {
        volume["name"]: volume["hostPath"]["path"] for volume in spec["volumes"] if "hostPath" in volume
    }
    [container] = spec["containers"]
    return {
        mount["mountPath"]: volumes[mount["name"]]
        for mount in container["volumeMounts"]
        if mount["name"] in volumes
    }
