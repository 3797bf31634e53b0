"""ValidatingAdmissionPolicies (GA in Kubernetes 1.30) and what their CEL is built from.

cdk8s-plus-27 knows only the v1alpha1 types, so a policy and its binding are plain ApiObjects whose
spec goes in as a JSON patch. Names and label keys are embedded in CEL string literals, never in
code: ``cel_string`` refuses any value that could end one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import cdk8s
from constructs import Construct

__all__ = [
    "admission_policy",
    "cel_list",
    "cel_string",
    "core_match_constraints",
    "refuse",
    "same_except",
    "service_account_policy_spec",
    "service_account_username",
    "with_default_scope",
]

_API_VERSION = "admissionregistration.k8s.io/v1"


def service_account_username(namespace: str, name: str) -> str:
    """The username Kubernetes gives a service account's tokens."""
    return f"system:serviceaccount:{namespace}:{name}"


def cel_string(value: str) -> str:
    """``value`` as a CEL string literal; a value that could end the literal is refused."""
    if not value or any(char in value for char in "'\"\\\n"):
        raise ValueError(f"{value!r} cannot be written as a CEL string literal here")
    return f"'{value}'"


def cel_list(values: Sequence[str]) -> str:
    """``values`` as a CEL list of string literals."""
    return "[" + ", ".join(cel_string(value) for value in values) + "]"


def same_except(new: str, old: str, ignored: Sequence[str]) -> str:
    """CEL: the maps ``new`` and ``old`` have the same keys and values, keys in ``ignored`` aside.

    CEL cannot delete a key from a map, so both directions are checked key by key; ``object`` and
    ``oldObject`` are plain maps at admission (the API server converts them to unstructured).
    """
    keys = cel_list(ignored)
    return (
        f"{new}.all(k, k in {keys} || (k in {old} && {new}[k] == {old}[k])) && "
        f"{old}.all(k, k in {keys} || k in {new})"
    )


def refuse(expression: str, message: str) -> dict[str, str]:
    """A validation: the request is refused (403 Forbidden, ``message``) unless ``expression`` holds."""
    return {"expression": expression, "message": message, "reason": "Forbidden"}


def core_match_constraints(operations: Sequence[str], resources: Sequence[str]) -> dict[str, Any]:
    """A policy's ``matchConstraints`` for ``operations`` on the core API group's ``resources``."""
    return {
        "resourceRules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": list(operations),
                "resources": list(resources),
            }
        ]
    }


def service_account_policy_spec(
    *,
    username: str,
    resources: Sequence[str],
    variables: Sequence[Mapping[str, str]],
    validations: Sequence[Mapping[str, str]],
    operations: Sequence[str] = ("CREATE", "UPDATE", "DELETE"),
) -> dict[str, Any]:
    """A policy's spec that judges only ``username``'s ``operations`` (by default CREATE, UPDATE and
    DELETE; CONNECT, for exec, attach, port-forward and node proxy, is left to RBAC unless named) of
    the core ``resources``, and refuses the request when an expression fails (failurePolicy Fail)."""
    return {
        "failurePolicy": "Fail",
        "matchConstraints": core_match_constraints(operations, resources),
        "matchConditions": [
            {
                # Only this account's own requests are judged; nobody else's is touched.
                "name": "this-service-account-only",
                "expression": f"has(request.userInfo.username) && request.userInfo.username == {cel_string(username)}",
            }
        ],
        "variables": list(variables),
        "validations": list(validations),
    }


def with_default_scope(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` with each resource rule's ``scope`` written out where it names none, as ``"*"``: the
    API server stores that default, and a rule rendered without it is patched by every apply
    (tests/cluster/test_deploy.py found each policy that lacked it 'configured' on every deploy)."""
    written = copy.deepcopy(dict(spec))
    for rule in (written.get("matchConstraints") or {}).get("resourceRules") or []:
        rule.setdefault("scope", "*")
    return written


def admission_policy(
    scope: Construct,
    *,
    name: str,
    labels: Mapping[str, str],
    spec: Mapping[str, Any],
    binding_spec: Mapping[str, Any],
    binding_id: str = "Binding",
) -> None:
    """The ValidatingAdmissionPolicy ``name`` with ``spec``, and its binding (``policyName`` added)."""
    metadata = cdk8s.ApiObjectMetadata(name=name, labels=dict(labels))
    policy = cdk8s.ApiObject(
        scope, "Policy", api_version=_API_VERSION, kind="ValidatingAdmissionPolicy", metadata=metadata
    )
    policy.add_json_patch(cdk8s.JsonPatch.add("/spec", with_default_scope(spec)))
    binding = cdk8s.ApiObject(
        scope,
        binding_id,
        api_version=_API_VERSION,
        kind="ValidatingAdmissionPolicyBinding",
        metadata=metadata,
    )
    binding.add_json_patch(cdk8s.JsonPatch.add("/spec", {"policyName": name, **binding_spec}))
