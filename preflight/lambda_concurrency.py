"""How many Lambda executions a deploy of the synthesized template holds at once, read from its graph.

Every custom resource of the template is a Lambda invocation that CloudFormation makes while it
creates, updates or deletes the resource, and Lambda counts each invocation in flight against the
Region's concurrency (``lambda:GetAccountSettings``: ``AccountLimit.ConcurrentExecutions``, and
``UnreservedConcurrentExecutions``, the pool of every function without reserved concurrency; Lambda
API reference, GetAccountSettings / AccountLimit). The default quota is 1,000, but "New AWS accounts
have reduced concurrency and memory quotas. AWS raises these quotas automatically based on your
usage" (Lambda developer guide, "Lambda quotas"); AWS gives no number for the reduced quota.
Accounts have reported starting at 10 (``ConcurrentExecutions`` 10: awslabs/fhir-works-on-aws-
deployment#691, 2022; aws-samples/one-observability-demo#278, 2024; architect/arc.codes#674, 2023)
and at 50 (aws-samples/s3-to-lambda-patterns#36, 2021). The kubectl custom resources of this stack
each hold executions for minutes (a Helm release with ``wait`` up to its timeout, the handler's own
limit is 15 minutes).

How the number is derived, not guessed:

1. **Which resources run Lambda.** A resource with a ``ServiceToken`` that is ``Fn::GetAtt`` of an
   ``AWS::Lambda::Function`` in the template. An ARN the template does not define counts as one
   execution of an unknown function (conservative); an SNS topic counts as none.
2. **Executions per invocation.** The function itself holds one. When it is the aws-cdk-lib
   provider framework's ``onEvent`` (handler ``framework.onEvent``, with the environment variable
   ``USER_ON_EVENT_FUNCTION_ARN``), it invokes the user's handler synchronously and waits for it
   (aws-cdk-lib 2.273.0, ``custom-resources/lib/provider-framework/runtime/framework.js``
   ``invokeUserFunction`` -> ``outbound.js`` ``lambda.invoke``): two executions in flight. With an
   ``isComplete`` handler (``WAITER_STATE_MACHINE_ARN``), ``onEvent`` returns once the user's
   onEvent has, and a Step Functions waiter then calls the framework's ``isComplete`` function,
   which invokes the user's isComplete synchronously: two again, never the four together. The
   aws-eks-v2 kubectl provider is such a framework with ``onEvent`` only (``kubectl-provider.js``:
   ``new cr.Provider(this, "Provider", {onEventHandler: handler, ...})``): each kubectl resource
   (manifest, Helm chart, object value) holds the framework's onEvent and the kubectl handler.
   ``AwsCustomResource`` (one singleton function) and CDK's ``CustomResourceProvider`` hold one.
3. **Which may run together.** CloudFormation starts a resource once every resource it depends on
   (``DependsOn``, and ``Ref``, ``Fn::GetAtt`` and ``Fn::Sub`` references) is done, and documents no
   cap on how many it runs in parallel. Resources of which neither depends on the other, even
   transitively, may therefore all be in flight at the same moment (let every resource before them
   finish first); resources on one dependency chain never are. The most executions at once is the
   heaviest *antichain* of the custom resources under "depends on" (each weighted by its executions
   from step 2): computed exactly with the weighted form of Dilworth's theorem, as ``total weight -
   maximum flow`` through the comparability graph (``_heaviest_antichain``). The same graph orders
   updates, and deletes in reverse, so the bound holds for every deploy, not only the first.
4. **Reserved concurrency.** A function with ``ReservedConcurrentExecutions`` draws on its own
   reservation, which the account takes out of the unreserved pool when the function is created
   (and Lambda refuses a reservation that leaves less than 100 unreserved: Lambda developer guide,
   "Configuring reserved concurrency"; in an account whose quota is below 100, the whole quota:
   ``minimum_unreserved``). Its peak is computed the same way, on its own.

Pure: a template (the JSON ``cdk synth`` writes) in, a ``LambdaDemand`` out.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MINIMUM_UNRESERVED",
    "UNKNOWN_FUNCTION",
    "LambdaDemand",
    "TemplateError",
    "lambda_demand",
    "minimum_unreserved",
]

MINIMUM_UNRESERVED = 100
"""What Lambda keeps unreserved: "You can reserve up to the Unreserved account concurrency value
minus 100" (Lambda developer guide, "Configuring reserved concurrency")."""


def minimum_unreserved(concurrent_executions: int) -> int:
    """What Lambda keeps unreserved in an account of this quota: 100 (``MINIMUM_UNRESERVED``), or the
    whole quota when it is lower. AWS documents only the 100; reduced accounts report Lambda's refusal
    as "Specified ReservedConcurrentExecutions for function decreases account's
    UnreservedConcurrentExecution below its minimum value of [10]" with a quota of 10
    (awslabs/fhir-works-on-aws-deployment#691) and "... of [50]" with a quota of 50
    (aws-samples/s3-to-lambda-patterns#36): no reservation at all is possible there."""
    return min(MINIMUM_UNRESERVED, concurrent_executions)


UNKNOWN_FUNCTION = "(a function outside the template)"
"""Stands for a ServiceToken ARN the template does not define."""

_FRAMEWORK_ON_EVENT = "framework.onEvent"
_FRAMEWORK_IS_COMPLETE = "framework.isComplete"
_USER_ON_EVENT = "USER_ON_EVENT_FUNCTION_ARN"
_USER_IS_COMPLETE = "USER_IS_COMPLETE_FUNCTION_ARN"
_WAITER = "WAITER_STATE_MACHINE_ARN"
_SUB_NAME = re.compile(r"\$\{([^!}][^}]*)\}")


class TemplateError(ValueError):
    """The template cannot be read as this module needs (``str(error)`` is one line)."""


@dataclass(frozen=True)
class LambdaDemand:
    """The Lambda executions a deploy of one template may hold at the same moment."""

    peak: int
    """Executions from the unreserved pool at the heaviest moment."""
    peak_resources: tuple[str, ...]
    """The custom resources (logical ids) that may all be in flight at that moment."""
    custom_resources: int
    """Lambda-backed custom resources in the template."""
    executions: Mapping[str, int]
    """Custom resource -> executions it holds from the unreserved pool while CloudFormation waits on it."""
    reserved: Mapping[str, int] = field(default_factory=dict)
    """Function (logical id) -> the ``ReservedConcurrentExecutions`` the template sets."""
    reserved_peaks: Mapping[str, int] = field(default_factory=dict)
    """Function with a reservation -> its own executions at its heaviest moment."""
    cluster_name: str | None = None
    """The ``Name`` of the template's EKS cluster (which configuration it was synthesized from)."""

    @property
    def reserved_total(self) -> int:
        return sum(self.reserved.values())


def lambda_demand(template: Mapping[str, Any]) -> LambdaDemand:
    resources = template.get("Resources")
    if not isinstance(resources, Mapping) or not resources:
        raise TemplateError("no Resources: not a CloudFormation template")
    nested = sorted(name for name, r in resources.items() if _type(r) == "AWS::CloudFormation::Stack")
    if nested:
        # Their resources and dependencies are in other templates this reading does not follow.
        raise TemplateError(
            f"nested stacks ({', '.join(nested)}) are not read; their custom resources would be missed"
        )
    functions = {name: r for name, r in resources.items() if _type(r) == "AWS::Lambda::Function"}
    reserved = {
        name: int(value)
        for name, r in functions.items()
        if (value := _properties(r).get("ReservedConcurrentExecutions")) is not None
    }
    phases = {
        name: _phases(_properties(r).get("ServiceToken"), resources, functions)
        for name, r in resources.items()
        if _is_custom_resource(r)
    }
    phases = {name: found for name, found in phases.items() if found}
    ancestors = _ancestors(resources)
    order = sorted(phases)
    below = {name: ancestors[name] & set(order) for name in order}

    def pool(weigh: Mapping[str, int]) -> tuple[int, tuple[str, ...]]:
        weights = {name: weight for name in order if (weight := weigh[name]) > 0}
        return _heaviest_antichain(weights, below)

    unreserved = {
        name: max(sum(n for fn, n in phase.items() if fn not in reserved) for phase in phases[name])
        for name in order
    }
    peak, members = pool(unreserved)
    reserved_peaks = {
        function: pool({name: max(phase.get(function, 0) for phase in phases[name]) for name in order})[0]
        for function in sorted(reserved)
    }
    clusters = [_properties(r).get("Name") for r in resources.values() if _type(r) == "AWS::EKS::Cluster"]
    return LambdaDemand(
        peak=peak,
        peak_resources=members,
        custom_resources=len(order),
        executions=unreserved,
        reserved=reserved,
        reserved_peaks=reserved_peaks,
        cluster_name=clusters[0] if len(clusters) == 1 and isinstance(clusters[0], str) else None,
    )


def _type(resource: object) -> str:
    return str(resource.get("Type", "")) if isinstance(resource, Mapping) else ""


def _properties(resource: Mapping[str, Any]) -> Mapping[str, Any]:
    properties = resource.get("Properties")
    return properties if isinstance(properties, Mapping) else {}


def _is_custom_resource(resource: Mapping[str, Any]) -> bool:
    kind = _type(resource)
    return kind.startswith("Custom::") or kind in {"AWS::CloudFormation::CustomResource"}


def _function_of(value: object, resources: Mapping[str, Any]) -> str | None:
    """The logical id of the template's Lambda function an ARN names (``Fn::GetAtt [F, Arn]``)."""
    if isinstance(value, Mapping) and set(value) == {"Fn::GetAtt"}:
        target = value["Fn::GetAtt"]
        name = target[0] if isinstance(target, list) else str(target).split(".")[0]
        if _type(resources.get(name)) == "AWS::Lambda::Function":
            return str(name)
    return None


def _environment(function: Mapping[str, Any]) -> Mapping[str, Any]:
    variables = _properties(function).get("Environment", {}).get("Variables", {})
    return variables if isinstance(variables, Mapping) else {}


def _phases(
    token: object, resources: Mapping[str, Any], functions: Mapping[str, Any]
) -> list[dict[str, int]]:
    """The functions one invocation holds at once, per phase (function -> executions)."""
    function = _function_of(token, resources)
    if function is None:
        targets = [name for name in _references(token) if name in resources]
        if any(_type(resources[name]) == "AWS::SNS::Topic" for name in targets):
            return []
        return [{UNKNOWN_FUNCTION: 1}]
    definition = functions[function]
    environment = _environment(definition)
    if _properties(definition).get("Handler") != _FRAMEWORK_ON_EVENT or _USER_ON_EVENT not in environment:
        return [{function: 1}]
    user_on_event = _function_of(environment[_USER_ON_EVENT], resources) or UNKNOWN_FUNCTION
    phases = [_holding(function, user_on_event)]
    if _WAITER in environment and _USER_IS_COMPLETE in environment:
        user_is_complete = _function_of(environment[_USER_IS_COMPLETE], resources) or UNKNOWN_FUNCTION
        poller = next(
            (
                name
                for name, other in functions.items()
                if _properties(other).get("Handler") == _FRAMEWORK_IS_COMPLETE
                and _environment(other).get(_USER_IS_COMPLETE) == environment[_USER_IS_COMPLETE]
            ),
            UNKNOWN_FUNCTION,
        )
        phases.append(_holding(poller, user_is_complete))
    return phases


def _holding(*functions: str) -> dict[str, int]:
    held: dict[str, int] = {}
    for function in functions:
        held[function] = held.get(function, 0) + 1
    return held


def _references(value: object) -> set[str]:
    """Logical ids that ``value`` references through Ref, Fn::GetAtt and Fn::Sub."""
    found: set[str] = set()
    if isinstance(value, Mapping):
        if set(value) == {"Ref"} and isinstance(value["Ref"], str):
            found.add(value["Ref"])
        elif set(value) == {"Fn::GetAtt"}:
            target = value["Fn::GetAtt"]
            found.add(str(target[0]) if isinstance(target, list) else str(target).split(".")[0])
        elif set(value) == {"Fn::Sub"}:
            body = value["Fn::Sub"]
            text, variables = (body[0], body[1]) if isinstance(body, list) else (body, {})
            names = {name.split(".")[0] for name in _SUB_NAME.findall(str(text))}
            found |= names - set(variables if isinstance(variables, Mapping) else {})
            found |= _references(variables)
        else:
            for item in value.values():
                found |= _references(item)
    elif isinstance(value, list):
        for item in value:
            found |= _references(item)
    return found


def _ancestors(resources: Mapping[str, Any]) -> dict[str, set[str]]:
    """Resource -> every resource it depends on, directly or through others."""
    direct: dict[str, set[str]] = {}
    for name, resource in resources.items():
        depends = resource.get("DependsOn", []) if isinstance(resource, Mapping) else []
        named = {depends} if isinstance(depends, str) else set(depends)
        direct[name] = (named | _references(_properties(resource))) & set(resources) - {name}
    ancestors: dict[str, set[str]] = {}

    def visit(name: str, path: tuple[str, ...]) -> set[str]:
        if name in ancestors:
            return ancestors[name]
        if name in path:
            raise TemplateError(f"circular dependency through {name}")
        found: set[str] = set()
        for parent in direct[name]:
            found |= {parent} | visit(parent, (*path, name))
        ancestors[name] = found
        return found

    for name in resources:
        visit(name, ())
    return ancestors


def _heaviest_antichain(
    weights: Mapping[str, int], below: Mapping[str, set[str]]
) -> tuple[int, tuple[str, ...]]:
    """The heaviest set of ``weights``' keys of which none is in another's ``below``, and its weight.

    Weighted Dilworth: the heaviest antichain of a partial order weighs the total weight minus the
    maximum flow from a source through ``x_out -> y_in`` (x below y, unbounded) to a sink, with each
    ``x_out`` fed and each ``x_in`` drained at x's weight. The antichain is read off a minimum cut:
    the elements whose ``x_out`` the source still reaches and whose ``x_in`` it does not.
    """
    names = sorted(weights)
    source, sink = ("source",), ("sink",)
    capacity: dict[tuple[Any, ...], dict[tuple[Any, ...], int]] = {source: {}, sink: {}}
    for name in names:
        capacity.setdefault(("out", name), {})
        capacity.setdefault(("in", name), {})
    unbounded = sum(weights.values()) + 1

    def edge(a: tuple[Any, ...], b: tuple[Any, ...], amount: int) -> None:
        capacity[a][b] = capacity[a].get(b, 0) + amount
        capacity[b].setdefault(a, 0)

    for name in names:
        edge(source, ("out", name), weights[name])
        edge(("in", name), sink, weights[name])
        for higher in names:
            if name in below.get(higher, set()):
                edge(("out", name), ("in", higher), unbounded)
    flow = 0
    while True:
        parents = _augmenting_path(capacity, source, sink)
        if parents is None:
            break
        path: list[tuple[tuple[Any, ...], tuple[Any, ...]]] = []
        node = sink
        while node != source:
            path.append((parents[node], node))
            node = parents[node]
        pushed = min(capacity[a][b] for a, b in path)
        for a, b in path:
            capacity[a][b] -= pushed
            capacity[b][a] += pushed
        flow += pushed
    reached = _reachable(capacity, source)
    members = tuple(name for name in names if ("out", name) in reached and ("in", name) not in reached)
    return sum(weights.values()) - flow, members


def _augmenting_path(
    capacity: Mapping[tuple[Any, ...], Mapping[tuple[Any, ...], int]],
    source: tuple[Any, ...],
    sink: tuple[Any, ...],
) -> dict[tuple[Any, ...], tuple[Any, ...]] | None:
    parents: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    queue = deque([source])
    seen = {source}
    while queue:
        node = queue.popleft()
        for following, left in sorted(capacity[node].items()):
            if left > 0 and following not in seen:
                seen.add(following)
                parents[following] = node
                if following == sink:
                    return parents
                queue.append(following)
    return None


def _reachable(
    capacity: Mapping[tuple[Any, ...], Mapping[tuple[Any, ...], int]], source: tuple[Any, ...]
) -> set[tuple[Any, ...]]:
    seen = {source}
    stack = [source]
    while stack:
        node = stack.pop()
        for following, left in capacity[node].items():
            if left > 0 and following not in seen:
                seen.add(following)
                stack.append(following)
    return seen
