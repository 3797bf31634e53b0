"""ValidatingAdmissionPolicies (GA in Kubernetes 1.30) and what their CEL is built from.

cdk8s-plus-27 knows only the v1alpha1 types, so a policy and its binding are plain ApiObjects whose
spec goes in as a JSON patch. Names and label keys are embedded in CEL string literals, never in
code: ``cel_string`` refuses any value that could end one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cdk8s
from constructs import Construct

__all__ = ["admission_policy", "cel_string", "service_account_username"]

_API_VERSION = "admissionregistration.k8s.io/v1"


def service_account_username(namespace: str, name: str) -> str:
    """The username Kubernetes gives a service account's tokens."""
    return f"system:serviceaccount:{namespace}:{name}"


def cel_string(value: str) -> str:
    """``value`` as a CEL string literal; a value that could end the literal is refused."""
    if not value or any(char in value for char in "'\"\\\n"):
        raise ValueError(f"{value!r} cannot be written as a CEL string literal here")
    return f"'{value}'"


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
    policy.add_json_patch(cdk8s.JsonPatch.add("/spec", dict(spec)))
    binding = cdk8s.ApiObject(
        scope,
        binding_id,
        api_version=_API_VERSION,
        kind="ValidatingAdmissionPolicyBinding",
        metadata=metadata,
    )
    binding.add_json_patch(cdk8s.JsonPatch.add("/spec", {"policyName": name, **binding_spec}))
