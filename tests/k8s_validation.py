"""Validate rendered Kubernetes objects against real schemas, in strict mode (unknown fields fail).

- Built-in kinds: the Kubernetes 1.36 OpenAPI schemas shipped by the `kubernetes-validate` package
  (its "-strict" variant forbids properties the API does not define): the default configuration's
  minor (tests/test_k8s_validation.py checks).
- Volcano kinds: the openAPIV3Schema of the CRDs of the Volcano chart the cluster installs, kept in
  cluster_facts.versions.VOLCANO_CRD_SCHEMAS (tests/schemas/volcano-<VOLCANO_CHART_VERSION>), made
  strict the same way (every object schema that lists properties admits no others). A chart
  version without its schema folder fails every Volcano check, naming the folder to add.

An object whose kind has no schema here fails: nothing is rendered unchecked.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from cluster_facts.versions import VOLCANO_CHART_VERSION, VOLCANO_CRD_SCHEMAS

__all__ = ["KUBERNETES_VERSION", "VOLCANO_CRDS", "VOLCANO_KINDS", "assert_valid", "schema_problems"]

KUBERNETES_VERSION = "1.36.0"
VOLCANO_CRDS = Path(__file__).resolve().parent.parent / VOLCANO_CRD_SCHEMAS
# What the project renders or may render; each must have a schema in VOLCANO_CRDS.
VOLCANO_KINDS = frozenset(
    {
        ("batch.volcano.sh/v1alpha1", "Job"),
        ("scheduling.volcano.sh/v1beta1", "Queue"),
        ("scheduling.volcano.sh/v1beta1", "PodGroup"),
    }
)


@functools.cache
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> strict JSON schema, from every CRD file in VOLCANO_CRDS."""
    files = sorted(VOLCANO_CRDS.glob("*.yaml"))
    if not files:
        raise FileNotFoundError(
            f"no CRD schemas for Volcano {VOLCANO_CHART_VERSION} (cluster_facts.versions): add the "
            f"chart's CRD files to {VOLCANO_CRD_SCHEMAS}/ and run `make crds`"
        )
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for path in files:
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd:
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
                schemas[(f"{group}/{version['name']}", kind)] = schema
    missing = VOLCANO_KINDS - schemas.keys()
    if missing:
        raise FileNotFoundError(f"{VOLCANO_CRD_SCHEMAS}/ has no CRD for {sorted(missing)}")
    return schemas


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        for value in schema.values():
            _strict(value)
    elif isinstance(schema, list):
        for value in schema:
            _strict(value)
    return schema


def schema_problems(manifest: Mapping[str, Any]) -> list[str]:
    """Every schema violation of one object, as 'Kind/name: path: message'."""
    obj = dict(manifest)
    name = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    crd_schema = _crd_schemas().get((obj.get("apiVersion", ""), obj.get("kind", "")))
    if crd_schema is not None:
        validator = jsonschema.Draft7Validator(crd_schema)
        return [
            f"{name}: {'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}"
            for error in sorted(
                validator.iter_errors(obj), key=lambda error: list(map(str, error.absolute_path))
            )
        ]
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{name}: {'.'.join(map(str, error.path)) or '<root>'}: {error.message}"]
    except kubernetes_validate.SchemaNotFoundError as error:
        return [f"{name}: no schema: {error.message}"]
    return []


def assert_valid(manifests: Iterable[Mapping[str, Any]]) -> None:
    problems = [problem for manifest in manifests for problem in schema_problems(manifest)]
    assert not problems, "\n".join(problems)
