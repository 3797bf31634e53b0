"""Validate rendered Kubernetes objects against real schemas, in strict mode (unknown fields fail).

- Built-in kinds: the Kubernetes 1.34 OpenAPI schemas shipped by the `kubernetes-validate` package
  (its "-strict" variant forbids properties the API does not define).
- Volcano kinds: the openAPIV3Schema of the Volcano 1.15.1 CRDs kept in tests/schemas/, made
  strict the same way (every object schema that lists properties admits no others).

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

__all__ = ["KUBERNETES_VERSION", "assert_valid", "schema_problems"]

KUBERNETES_VERSION = "1.34.0"
VOLCANO_CRDS = Path(__file__).parent / "schemas" / "volcano-1.15.1"


@functools.cache
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> strict JSON schema, from every CRD file in VOLCANO_CRDS."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(VOLCANO_CRDS.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd:
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
                schemas[(f"{group}/{version['name']}", kind)] = schema
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
