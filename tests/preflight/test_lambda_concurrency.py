"""The Lambda concurrency check: what a deploy runs at once, read from the template's graph, against
``lambda:GetAccountSettings`` (preflight/lambda_concurrency.py, checks.check_lambda_concurrency).

The templates are real: config/default.yaml's reviewed snapshot, config/example.yaml's synthesized
stack (slow tier), and small stacks aws-cdk-lib synthesizes here for the provider shapes the stack
does not use today (an ``isComplete`` waiter, reserved concurrency). The antichain arithmetic is
checked against exhaustive enumeration on random partial orders.
"""

from __future__ import annotations

import copy
import io
import itertools
import json
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_lambda as lambda_
from aws_cdk import custom_resources as cr

from preflight.aws import gather_facts
from preflight.checks import check_lambda_concurrency
from preflight.cli import EXIT_CHECK_FAILED, EXIT_LOCAL_PROBLEM, EXIT_OK, main
from preflight.lambda_concurrency import (
    UNKNOWN_FUNCTION,
    TemplateError,
    _heaviest_antichain,
    lambda_demand,
    minimum_unreserved,
)
from tests.conftest import Synthesized
from tests.preflight.conftest import (
    DEFAULT_CONFIG,
    DEFAULT_TEMPLATE,
    FakeAccount,
    default_config,
    default_demand,
    default_template,
    stub_clients,
)
from tests.preflight.test_cli import parse_table, squeezed

KUBECTL_TYPES = (
    "Custom::AWSCDK-EKS-KubernetesResource",
    "Custom::AWSCDK-EKS-HelmChart",
    "Custom::AWSCDK-EKS-KubernetesObjectValue",
)


def resources_of(template: Mapping[str, Any], resource_type: str) -> dict[str, Any]:
    return {name: r for name, r in template["Resources"].items() if r["Type"] == resource_type}


def depends_on(template: Mapping[str, Any], low: str, high: str) -> bool:
    """Whether ``high`` waits for ``low`` in CloudFormation, followed edge by edge (DependsOn and
    references), written apart from the module's own reading."""
    resources = template["Resources"]
    text = {name: json.dumps(r.get("Properties", {})) for name, r in resources.items()}

    def parents(name: str) -> set[str]:
        named = resources[name].get("DependsOn", [])
        found = {named} if isinstance(named, str) else set(named)
        body = text[name]
        found |= {
            other
            for other in resources
            if f'"Ref": "{other}"' in body or f'"Fn::GetAtt": ["{other}"' in body or "${" + other in body
        }
        return found - {name}

    seen, stack = set(), [high]
    while stack:
        for parent in parents(stack.pop()):
            if parent == low:
                return True
            if parent not in seen:
                seen.add(parent)
                stack.append(parent)
    return False


# --- the stack's own templates ------------------------------------------------------------------


def test_the_default_deploy_runs_more_lambda_executions_at_once_than_a_new_account_has() -> None:
    """config/default.yaml: every kubectl resource holds 2 executions (the provider framework's
    onEvent waits on the kubectl handler), every other custom resource 1; the widest set that
    CloudFormation may run together holds well over a new account's 10 (29 when this was written:
    11 kubectl and 7 others of the template's 38 custom resources)."""
    template = default_template()
    demand = default_demand()

    kubectl = {name for kind in KUBECTL_TYPES for name in resources_of(template, kind)}
    assert len(kubectl) >= 20 and demand.custom_resources > len(kubectl)
    assert {name: n for name, n in demand.executions.items() if name in kubectl} == dict.fromkeys(kubectl, 2)
    assert set(demand.executions.values()) == {1, 2}
    assert demand.peak == sum(demand.executions[name] for name in demand.peak_resources)
    assert demand.peak >= 2 * 10
    assert len(kubectl & set(demand.peak_resources)) >= 10
    # No member of the peak waits on another, so CloudFormation may run them all at once.
    for low, high in itertools.permutations(demand.peak_resources, 2):
        assert not depends_on(template, low, high), (low, high)
    assert demand.reserved == {} and demand.cluster_name == "trainium"


def test_the_kubectl_resources_hold_the_framework_and_the_handler_without_a_waiter() -> None:
    """What the weight of 2 rests on (aws-cdk-lib 2.273.0 kubectl-provider.js: a Provider with an
    onEvent handler only): every kubectl resource's ServiceToken is the framework's onEvent, which
    names the kubectl handler as the user function and has no waiter state machine."""
    template = default_template()
    functions = resources_of(template, "AWS::Lambda::Function")
    tokens = {
        json.dumps(r["Properties"]["ServiceToken"])
        for kind in KUBECTL_TYPES
        for r in resources_of(template, kind).values()
    }
    [token] = tokens
    framework = functions[json.loads(token)["Fn::GetAtt"][0]]["Properties"]
    assert framework["Handler"] == "framework.onEvent"
    variables = framework["Environment"]["Variables"]
    assert "WAITER_STATE_MACHINE_ARN" not in variables and "USER_IS_COMPLETE_FUNCTION_ARN" not in variables
    handler = functions[variables["USER_ON_EVENT_FUNCTION_ARN"]["Fn::GetAtt"][0]]["Properties"]
    assert handler["Description"] == "onEvent handler for EKS kubectl resource provider"
    # No function of the stack reserves concurrency (it would come out of the unreserved pool).
    assert not any("ReservedConcurrentExecutions" in f["Properties"] for f in functions.values())


def test_the_example_deploy_is_read_from_its_own_template(example_stack: Synthesized) -> None:
    demand = lambda_demand(example_stack.json)
    assert demand.cluster_name == example_stack.config.name
    assert demand.peak > 10
    for low, high in itertools.permutations(demand.peak_resources, 2):
        assert not depends_on(example_stack.json, low, high), (low, high)


# --- provider shapes the stack does not use today, as aws-cdk-lib synthesizes them -------------------


def small_stack(build: Callable[[cdk.Stack], None]) -> dict[str, Any]:
    app = cdk.App()
    stack = cdk.Stack(app, "Small")
    build(stack)
    return dict(app.synth().get_stack_by_name("Small").template)


def function(stack: cdk.Stack, name: str, **options: Any) -> lambda_.Function:
    return lambda_.Function(
        stack,
        name,
        runtime=lambda_.Runtime.PYTHON_3_13,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context): return {}"),
        **options,
    )


def test_a_provider_with_an_is_complete_waiter_holds_two_executions_in_either_phase() -> None:
    """onEvent phase: the framework's onEvent and the user's onEvent; polling phase: the framework's
    isComplete and the user's isComplete. Three resources, the third after the first."""

    def build(stack: cdk.Stack) -> None:
        provider = cr.Provider(
            stack,
            "Provider",
            on_event_handler=function(stack, "OnEvent"),
            is_complete_handler=function(stack, "IsComplete"),
        )
        first = cdk.CustomResource(stack, "First", service_token=provider.service_token)
        cdk.CustomResource(stack, "Second", service_token=provider.service_token)
        cdk.CustomResource(stack, "Third", service_token=provider.service_token).node.add_dependency(first)

    demand = lambda_demand(small_stack(build))
    assert demand.custom_resources == 3
    assert set(demand.executions.values()) == {2}
    assert demand.peak == 4 and len(demand.peak_resources) == 2
    assert UNKNOWN_FUNCTION not in json.dumps(demand.executions)


def test_reserved_concurrency_is_its_own_pool_and_comes_out_of_the_unreserved_one() -> None:
    """A provider whose user handler reserves 1 while two resources may call it at once."""

    def build(stack: cdk.Stack) -> None:
        handler = function(stack, "Handler", reserved_concurrent_executions=1)
        provider = cr.Provider(stack, "Provider", on_event_handler=handler)
        cdk.CustomResource(stack, "First", service_token=provider.service_token)
        cdk.CustomResource(stack, "Second", service_token=provider.service_token)

    demand = lambda_demand(small_stack(build))
    [handler] = demand.reserved
    assert demand.reserved == {handler: 1} and demand.reserved_peaks == {handler: 2}
    assert demand.peak == 2  # the framework's onEvent twice; the handler draws on its reservation
    result = check_lambda_concurrency(facts(1000, 1000), demand)
    assert result.status == "FAIL"
    assert f"{handler} runs up to 2 at once on a reservation of 1" in result.detail


def test_a_reservation_that_leaves_less_than_100_unreserved_fails() -> None:
    template = copy.deepcopy(default_template())
    [handler] = [
        name
        for name, r in resources_of(template, "AWS::Lambda::Function").items()
        if r["Properties"].get("Description") == "onEvent handler for EKS kubectl resource provider"
    ]
    unreserved = default_demand()
    kubectl = {name for kind in KUBECTL_TYPES for name in resources_of(template, kind)}
    handlers_in_peak = len(kubectl & set(unreserved.peak_resources))
    # Exactly what the handler needs at the peak: enough for the deploy, but it leaves Lambda's
    # 100 unreserved only in an account of at least 100 + that.
    template["Resources"][handler]["Properties"]["ReservedConcurrentExecutions"] = handlers_in_peak
    demand = lambda_demand(template)
    assert demand.reserved_peaks == {handler: handlers_in_peak}
    # The kubectl handlers of the peak are on their reservation now; their onEvent stays unreserved.
    assert demand.peak == unreserved.peak - handlers_in_peak

    result = check_lambda_concurrency(facts(100, 100), demand)
    assert result.status == "FAIL"
    assert (
        f"Lambda keeps 100 unreserved, the stack's reservations leave {100 - handlers_in_peak}"
        in result.detail
    )
    assert result.action.startswith(f"request L-B99A9384 Concurrent executions >= {100 + handlers_in_peak} ")
    assert (
        check_lambda_concurrency(facts(100 + handlers_in_peak, 100 + handlers_in_peak), demand).status
        == "PASS"
    )


def test_in_a_reduced_account_lambda_keeps_the_whole_quota_unreserved() -> None:
    """Below 100, the account's whole quota is the minimum (reported refusals "below its minimum value
    of [10]" and "[50]", preflight/lambda_concurrency.py): a reservation of 1 fails there, and the row
    names that minimum, not 100."""
    assert [minimum_unreserved(limit) for limit in (10, 50, 100, 1000)] == [10, 50, 100, 100]
    template = copy.deepcopy(default_template())
    [handler] = [
        name
        for name, r in resources_of(template, "AWS::Lambda::Function").items()
        if r["Properties"].get("Description") == "onEvent handler for EKS kubectl resource provider"
    ]
    template["Resources"][handler]["Properties"]["ReservedConcurrentExecutions"] = 1
    result = check_lambda_concurrency(facts(50, 50), lambda_demand(template))
    assert result.status == "FAIL"
    assert "Lambda keeps 50 unreserved, the stack's reservations leave 49" in result.detail


def test_nested_stacks_are_refused_rather_than_undercounted() -> None:
    template = copy.deepcopy(default_template())
    template["Resources"]["Nested"] = {"Type": "AWS::CloudFormation::Stack", "Properties": {}}
    with pytest.raises(TemplateError, match=r"^nested stacks \(Nested\) are not read"):
        lambda_demand(template)


# --- the antichain arithmetic ---------------------------------------------------------------------


def brute_force(weights: Mapping[str, int], below: Mapping[str, set[str]]) -> int:
    names = list(weights)
    best = 0
    for size in range(len(names) + 1):
        for chosen in itertools.combinations(names, size):
            if all(a not in below[b] for a, b in itertools.permutations(chosen, 2)):
                best = max(best, sum(weights[name] for name in chosen))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_the_heaviest_antichain_is_the_one_exhaustive_search_finds(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"r{i}" for i in range(rng.randint(1, 9))]
    # A random partial order: edges only forward in a random order, then closed transitively.
    below: dict[str, set[str]] = {name: set() for name in names}
    for i, j in itertools.combinations(range(len(names)), 2):
        if rng.random() < 0.35:
            below[names[j]].add(names[i])
    for name in names:  # names are in topological order: one pass closes the relation
        for parent in list(below[name]):
            below[name] |= below[parent]
    weights = {name: rng.randint(1, 4) for name in names}

    weight, members = _heaviest_antichain(weights, below)
    assert weight == brute_force(weights, below)
    assert sum(weights[name] for name in members) == weight
    assert all(a not in below[b] for a, b in itertools.permutations(members, 2))


# --- the check ---------------------------------------------------------------------------------------


def facts(limit: int, unreserved: int) -> Any:
    stubbed = stub_clients(
        FakeAccount(account_id="111122223333", lambda_limits=(limit, unreserved)), default_config()
    )
    return gather_facts(default_config(), stubbed.clients)


def test_a_new_account_of_10_fails_with_the_quota_to_raise() -> None:
    result = check_lambda_concurrency(facts(10, 10), default_demand())
    assert result.status == "FAIL"
    demand = default_demand()
    assert result.detail == (
        f"a deploy runs up to {demand.peak} Lambda executions at once ({len(demand.peak_resources)} of the "
        f"template's {demand.custom_resources} custom resources may run together; a kubectl one holds 2); "
        "L-B99A9384 Concurrent executions = 10 (10 unreserved): 10 left for them"
    )
    assert result.action == (
        f"request L-B99A9384 Concurrent executions >= {demand.peak} in Service Quotas (lambda, us-west-2); "
        "a new account's quota is reduced (reported as low as 10) until AWS raises it with use"
    )


def test_the_default_quota_passes_and_functions_reserved_elsewhere_count() -> None:
    assert check_lambda_concurrency(facts(1000, 1000), default_demand()).status == "PASS"
    peak = default_demand().peak
    assert check_lambda_concurrency(facts(1000, peak), default_demand()).status == "PASS"
    short = check_lambda_concurrency(facts(1000, peak - 1), default_demand())
    assert short.status == "FAIL"
    # What other functions of the account have reserved (1000 - (peak - 1)), plus the peak.
    assert short.action.startswith(f"request L-B99A9384 Concurrent executions >= {1000 - (peak - 1) + peak} ")


def test_without_the_permission_the_row_names_it() -> None:
    account = FakeAccount(account_id="111122223333")
    account.errors["get_account_settings"] = ("AccessDeniedException", "not authorized")
    stubbed = stub_clients(account, default_config())
    result = check_lambda_concurrency(gather_facts(default_config(), stubbed.clients), default_demand())
    assert (result.status, result.action) == (
        "FAIL",
        "allow lambda:GetAccountSettings (read-only) for these credentials",
    )


def test_without_a_template_the_row_warns_and_says_how_to_get_one() -> None:
    result = check_lambda_concurrency(facts(10, 10), None)
    assert result.status == "WARN"
    assert "make preflight (it synthesizes first)" in result.action
    assert result.detail.startswith("L-B99A9384 Concurrent executions = 10 (10 unreserved); ")


# --- the command line ------------------------------------------------------------------------------


def run(argv: list[str], account: FakeAccount, stubbed_factory: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, clients_factory=stubbed_factory(account, default_config()), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_preflight_of_a_new_account_fails_on_lambda_concurrency(stubbed_factory: Any) -> None:
    """The issue's fault: with a quota of 10, `make preflight` must fail before the deploy does."""
    account = FakeAccount(account_id="111122223333", lambda_limits=(10, 10))
    argv = ["--config", str(DEFAULT_CONFIG), "--template", str(DEFAULT_TEMPLATE), "--width", "300"]
    code, out, err = run(argv, account, stubbed_factory)

    assert (code, err) == (EXIT_CHECK_FAILED, "")
    status, detail, action = parse_table(out)["lambdaconcurrency"]
    assert status == "FAIL"
    peak = default_demand().peak
    assert squeezed(f"a deploy runs up to {peak} Lambda executions at once") in detail
    assert action.startswith(
        squeezed(f"request L-B99A9384 Concurrent executions >= {peak} in Service Quotas")
    )
    assert {row[0] for name, row in parse_table(out).items() if name != "lambdaconcurrency"} <= {"PASS"}


def test_preflight_passes_with_the_usual_quota(stubbed_factory: Any) -> None:
    account = FakeAccount(account_id="111122223333")
    code, out, _ = run(
        ["--config", str(DEFAULT_CONFIG), "--template", str(DEFAULT_TEMPLATE)], account, stubbed_factory
    )
    assert code == EXIT_OK
    assert parse_table(out)["lambdaconcurrency"][0] == "PASS"


def never_called(region: str, max_attempts: int) -> Any:
    raise AssertionError("AWS must not be asked")


@pytest.mark.parametrize(
    ("template", "says"),
    [
        (
            "missing",
            "--template: {path}: No such file or directory; run make synth CONFIG={config}",
        ),
        (
            "other",
            (
                "--template: {path} is the template of cluster 'trainium', not of {config} (name: trainium-prod); "
                "run make synth CONFIG={config}"
            ),
        ),
    ],
)
def test_a_missing_or_foreign_template_is_one_line_and_nothing_is_asked(
    template: str, says: str, tmp_path: Path
) -> None:
    config = Path(__file__).resolve().parents[2] / "config" / "example.yaml"
    path = tmp_path / "TrainiumStack.template.json" if template == "missing" else DEFAULT_TEMPLATE
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["--config", str(config), "--template", str(path)],
        clients_factory=never_called,
        stdout=out,
        stderr=err,
    )
    assert code == EXIT_LOCAL_PROBLEM
    assert err.getvalue() == says.format(path=path, config=config) + "\n"
    assert out.getvalue() == ""
