"""How the API server applies one ValidatingAdmissionPolicy and its binding, for tests.

The rendered policy's CEL runs here on real requests, as the API server would run it: object and
oldObject are plain maps, request is an AdmissionRequest whose empty optional fields
(subResource, namespace, userInfo.extra) are absent, params and namespaceObject are null. The
evaluator is cel-expr-python, the CEL project's Python binding of its C++ runtime (the API server
uses cel-go; both implement the CEL specification and the policies use only its standard macros
and functions). Matching (resource rules, the binding's namespace selector, match conditions),
lazy variables and failurePolicy are reproduced by the small interpreter below.

A model written here. It stays for the fast tier (`make check` starts no API server) and for the
many request shapes its tests try cheaply. The real API server now decides the same policies with
the plan applied (tests/cluster/test_security.py, tests/cluster/test_watchdog.py); where the two
disagree, the real one is right.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_strings

__all__ = ["CelError", "Decision", "admission_request", "admit", "evaluate"]

Manifest = dict[str, Any]

# What the API server's CEL environment adds to standard CEL that the policies use: cel-go's strings
# extension (``join``) and Kubernetes' list library's ``sum`` (k8s.io/apiserver pkg/cel/library/lists.go:
# the sum of a list of numbers, 0 for an empty one), here in Python.
_SUM = cel.FunctionDecl(
    "sum",
    [
        cel.Overload(
            "list_sum",
            return_type=cel.Type.DYN,
            parameters=[cel.Type.List(cel.Type.DYN)],
            is_member=True,
            impl=sum,
        )
    ],
)
_ENV = cel.NewEnv(
    variables={
        name: cel.Type.DYN
        for name in ("object", "oldObject", "request", "params", "namespaceObject", "variables")
    },
    extensions=[ext_strings.ExtStrings()],
    functions=[_SUM],
)


class CelError(Exception):
    """An expression failed at run time (for the API server: the policy's failurePolicy applies)."""


@functools.cache
def _compiled(expression: str) -> Any:
    return _ENV.compile(expression)


def evaluate(expression: str, activation: Mapping[str, Any]) -> Any:
    result = _compiled(expression).eval(data=dict(activation))
    if result.type() == cel.Type.ERROR:
        raise CelError(f"{expression}: {result.value()}")
    return result.plain_value()


@dataclass(frozen=True)
class Decision:
    matched: bool
    allowed: bool
    messages: tuple[str, ...] = ()


def _rule_matches(rule: Mapping[str, Any], request: Mapping[str, Any]) -> bool:
    resource = request["resource"]
    sub = request.get("subResource", "")
    name = f"{resource['resource']}/{sub}" if sub else resource["resource"]
    wanted = rule["resources"]
    return (
        ("*" in rule["apiGroups"] or resource["group"] in rule["apiGroups"])
        and ("*" in rule["apiVersions"] or resource["version"] in rule["apiVersions"])
        and ("*" in rule["operations"] or request["operation"] in rule["operations"])
        and (name in wanted or (sub != "" and f"{resource['resource']}/*" in wanted))
    )


def _selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector on ``labels``; the empty selector matches everything."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _only(manifests: list[Manifest], kind: str) -> Manifest:
    found = [manifest for manifest in manifests if manifest["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def admit(
    manifests: list[Manifest],
    request: Mapping[str, Any],
    *,
    obj: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
    namespace_labels: Mapping[str, str] | None = None,
) -> Decision:
    """The decision of the rendered policy and binding on one admission request.

    ``namespace_labels`` are the labels of the request's namespace (the API server adds
    ``kubernetes.io/metadata.name``); a binding with a namespace selector needs them for a
    namespaced request, and never matches a cluster-scoped one unless the selector is empty.
    """
    policy = _only(manifests, "ValidatingAdmissionPolicy")
    binding = _only(manifests, "ValidatingAdmissionPolicyBinding")
    spec = policy["spec"]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"], "only an enforcing binding is modelled here"
    assert spec["failurePolicy"] == "Fail"
    if not any(_rule_matches(rule, request) for rule in spec["matchConstraints"]["resourceRules"]):
        return Decision(matched=False, allowed=True)
    selector = binding["spec"].get("matchResources", {}).get("namespaceSelector")
    if selector:
        if "namespace" not in request:
            return Decision(matched=False, allowed=True)
        assert namespace_labels is not None, "the binding selects namespaces: give the namespace's labels"
        labels = {**namespace_labels, "kubernetes.io/metadata.name": request["namespace"]}
        if not _selector_matches(selector, labels):
            return Decision(matched=False, allowed=True)
    activation: dict[str, Any] = {
        "object": copy.deepcopy(obj),
        "oldObject": copy.deepcopy(old),
        "request": copy.deepcopy(dict(request)),
        "params": None,
        "namespaceObject": None,
        "variables": {},
    }
    for condition in spec.get("matchConditions", []):
        try:
            if not evaluate(condition["expression"], activation):
                return Decision(matched=False, allowed=True)
        except CelError as error:  # failurePolicy Fail
            return Decision(matched=True, allowed=False, messages=(str(error),))
    # The API server evaluates variables lazily; these policies' are written never to fail, so they
    # are evaluated eagerly here and any failure is a bug in the policy.
    for variable in spec.get("variables", []):
        activation["variables"][variable["name"]] = evaluate(variable["expression"], activation)
    messages = []
    for validation in spec["validations"]:
        try:
            passed = evaluate(validation["expression"], activation)
        except CelError as error:  # failurePolicy Fail
            messages.append(str(error))
            continue
        assert isinstance(passed, bool), validation
        if not passed:
            messages.append(_message(validation, activation))
    return Decision(matched=True, allowed=not messages, messages=tuple(messages))


def _message(validation: Mapping[str, Any], activation: Mapping[str, Any]) -> str:
    """A failed validation's message: its ``messageExpression``'s value when it evaluates to a
    non-empty string, else ``message`` (what the API server does)."""
    if "messageExpression" in validation:
        try:
            said = evaluate(validation["messageExpression"], activation)
        except CelError:
            said = None
        if isinstance(said, str) and said.strip():
            return said
    return str(validation["message"])


def admission_request(
    *,
    user: str,
    operation: str,
    resource: str,
    name: str,
    namespace: str = "",
    sub_resource: str = "",
    extra: Mapping[str, list[str]] | None = None,
    kind: str = "Pod",
    group: str = "",
    version: str = "v1",
    groups: tuple[str, ...] = (),
) -> dict[str, Any]:
    """An AdmissionRequest as CEL sees it: omitempty fields are absent when empty. ``group`` and
    ``version`` are the resource's API group and version; ``groups`` the user's, beside
    ``system:authenticated``."""
    gvr = {"group": group, "version": version, "resource": resource}
    gvk = {"group": group, "version": version, "kind": kind}
    user_info: dict[str, Any] = {"username": user, "groups": [*groups, "system:authenticated"]}
    if extra:
        user_info["extra"] = {key: list(values) for key, values in extra.items()}
    request: dict[str, Any] = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": name,
        "operation": operation,
        "userInfo": user_info,
    }
    if sub_resource:
        request["subResource"] = request["requestSubResource"] = sub_resource
    if namespace:
        request["namespace"] = namespace
    return request
