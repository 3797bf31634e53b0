"""A failed deploy fails in minutes (cluster_facts/deploy_timeouts.py): every Kubernetes step's own
timeout leaves the kubectl handler time to answer CloudFormation, and every custom resource carries
a ServiceTimeout that fits its handler, read back from the synthesized templates."""

from __future__ import annotations

import re
from typing import Any

import pytest

from cluster_facts.deploy_timeouts import (
    ANSWER_SECONDS,
    AWS_CUSTOM_RESOURCE_SECONDS,
    CUSTOM_RESOURCE_PROVIDER_SECONDS,
    GATE_POLL_SECONDS,
    KUBECTL_HANDLER_SECONDS,
    REQUEST_SECONDS,
    WORK_SECONDS,
    handler_seconds,
    service_timeout_seconds,
    too_slow_to_answer,
)
from cluster_facts.kubernetes_plan import HelmRelease, ManifestSet, ReadinessGate
from cluster_facts.vendored_charts import VENDORED_CHARTS, VOLCANO_CHART, repository_path
from constructs_trn.node_group_size import NODE_GROUP_SIZE_SECONDS
from tests.cluster_plan.test_kubernetes_layer import applied
from tests.conftest import Synthesized

CUSTOM_TYPES = ("AWS::CloudFormation::CustomResource",)


def _release(**changes: Any) -> HelmRelease:
    values: dict[str, Any] = {
        "name": "volcano",
        "chart": "volcano",
        "version": "1.15.1",
        "release": "volcano",
        "namespace": "volcano-system",
        "chart_directory": "charts/volcano-1.15.1",
        **changes,
    }
    return HelmRelease(**values)


def test_a_release_waits_once_per_hook_and_once_for_its_pods() -> None:
    release = _release(timeout_minutes=6, hook_waits=1)
    assert handler_seconds(release) == WORK_SECONDS + 2 * 360
    assert handler_seconds(_release(timeout_minutes=6, hook_waits=1, wait=False)) == WORK_SECONDS + 360


def test_the_releases_that_hid_a_failed_deploy_for_an_hour_are_refused() -> None:
    """Volcano as it was: 15 minutes, one hook Job and --wait, in a 15-minute Lambda."""
    problem = too_slow_to_answer(_release(timeout_minutes=15, hook_waits=1))
    assert problem == (
        "step 'volcano' may wait 1920 s, and the kubectl handler has 900 s in all (60 s of them to "
        "answer CloudFormation): lower its timeout_minutes"
    )
    # Even a release without hooks: 15 minutes of waiting is all the Lambda has.
    assert too_slow_to_answer(_release(timeout_minutes=15, hook_waits=0)) is not None
    assert too_slow_to_answer(_release(timeout_minutes=6, hook_waits=1)) is None


def test_a_gate_counts_its_last_poll() -> None:
    gate = ReadinessGate(
        name="g", object_type="queue", object_name="q", json_path=".status", timeout_minutes=5
    )
    assert handler_seconds(gate) == WORK_SECONDS + 300 + GATE_POLL_SECONDS + REQUEST_SECONDS
    assert too_slow_to_answer(gate) is None
    assert too_slow_to_answer(ReadinessGate(**{**gate.__dict__, "timeout_minutes": 13})) is not None


def test_a_manifest_step_has_no_bound_of_its_own_and_gets_the_lambdas() -> None:
    step = ManifestSet(name="m", manifests=())
    assert handler_seconds(step) is None
    assert too_slow_to_answer(step) is None
    assert service_timeout_seconds(step) == KUBECTL_HANDLER_SECONDS + ANSWER_SECONDS


def _hook_waits_in(directory: str) -> int:
    """Hook Jobs and Pods of a chart directory (subcharts included), as Helm waits for them."""
    count = 0
    for template in sorted(repository_path(directory).rglob("templates/*.yaml")):
        # Strip template actions well enough to read kind and annotations (never executed).
        text = re.sub(r"{{.*?}}", "", template.read_text(), flags=re.DOTALL)
        for document in text.split("\n---"):
            kind = re.search(r"^kind:\s*(\w+)", document, flags=re.MULTILINE)
            if kind and kind.group(1) in ("Job", "Pod") and '"helm.sh/hook":' in document:
                count += 1
    return count


@pytest.mark.parametrize("chart", VENDORED_CHARTS, ids=lambda chart: chart.name)
def test_each_vendored_chart_declares_the_hooks_helm_waits_for(chart: Any) -> None:
    assert chart.hook_waits == _hook_waits_in(chart.directory)


def test_volcano_waits_for_its_admission_init_job() -> None:
    """templates/admission-init.yaml: the pre-install,pre-upgrade Job that writes the webhook's certificate."""
    assert VOLCANO_CHART.hook_waits == _hook_waits_in(VOLCANO_CHART.directory) == 1


# --- read back from the synthesized templates ---------------------------------------------------


@pytest.fixture(params=["default_stack", "example_stack"])
def synthesized(request: pytest.FixtureRequest) -> Synthesized:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


def _custom_resources(synthesized: Synthesized) -> dict[str, dict[str, Any]]:
    return {
        logical_id: resource
        for logical_id, resource in synthesized.json["Resources"].items()
        if resource["Type"].startswith("Custom::") or resource["Type"] in CUSTOM_TYPES
    }


def _function_timeouts(synthesized: Synthesized, resource: dict[str, Any]) -> list[int]:
    """The Lambda timeout of the function CloudFormation invokes and, behind a provider framework,
    of the function that does the work (its USER_ON_EVENT_FUNCTION_ARN)."""
    functions = synthesized.json["Resources"]
    token = resource["Properties"]["ServiceToken"]
    first = functions[token["Fn::GetAtt"][0]]
    timeouts = [int(first["Properties"]["Timeout"])]
    user = first["Properties"].get("Environment", {}).get("Variables", {}).get("USER_ON_EVENT_FUNCTION_ARN")
    if user is not None:
        timeouts.append(int(functions[user["Fn::GetAtt"][0]]["Properties"]["Timeout"]))
    return timeouts


def test_every_custom_resource_has_a_service_timeout_its_function_fits(synthesized: Synthesized) -> None:
    """CloudFormation's default is 3600 s; each here is its function's own limit plus the answer."""
    problems = []
    for logical_id, resource in _custom_resources(synthesized).items():
        service_timeout = resource["Properties"].get("ServiceTimeout")
        if service_timeout is None:
            problems.append(f"{logical_id}: no ServiceTimeout (CloudFormation waits 3600 s)")
            continue
        longest = min(_function_timeouts(synthesized, resource))
        if not 0 < int(service_timeout) <= longest + ANSWER_SECONDS:
            problems.append(
                f"{logical_id}: ServiceTimeout {service_timeout} above {longest} + {ANSWER_SECONDS}"
            )
    assert problems == []


def test_the_functions_are_as_long_as_the_facts_say(synthesized: Synthesized) -> None:
    """An aws-cdk-lib upgrade that changes a handler's timeout fails here, not in a deploy."""
    seen: set[int] = set()
    for resource in _custom_resources(synthesized).values():
        seen.update(_function_timeouts(synthesized, resource))
    assert seen == {
        KUBECTL_HANDLER_SECONDS,
        AWS_CUSTOM_RESOURCE_SECONDS,
        CUSTOM_RESOURCE_PROVIDER_SECONDS,
        NODE_GROUP_SIZE_SECONDS,
    }


def test_every_kubernetes_step_answers_before_its_handler_is_stopped(synthesized: Synthesized) -> None:
    """From the template: Helm's Timeout times its waits, a gate's TimeoutSeconds with its last poll,
    each plus the handler's work and the answer, within both Lambdas' timeouts; the ServiceTimeout
    covers it."""
    plan = synthesized.stack.kubernetes_plan
    resources = synthesized.json["Resources"]
    checked = 0
    for name, logical_id in applied(synthesized).items():
        resource = resources[logical_id]
        properties = resource["Properties"]
        step = plan.step(name)
        if resource["Type"] == "Custom::AWSCDK-EKS-HelmChart":
            assert isinstance(step, HelmRelease)
            timeout = int(properties["Timeout"].removesuffix("s"))
            waits = step.hook_waits + (1 if properties.get("Wait") else 0)
            busy = WORK_SECONDS + waits * timeout
        elif resource["Type"] == "Custom::AWSCDK-EKS-KubernetesObjectValue":
            busy = WORK_SECONDS + int(properties["TimeoutSeconds"]) + GATE_POLL_SECONDS + REQUEST_SECONDS
        else:
            assert properties["ServiceTimeout"] == KUBECTL_HANDLER_SECONDS + ANSWER_SECONDS
            continue
        checked += 1
        assert busy + ANSWER_SECONDS <= min(_function_timeouts(synthesized, resource)), name
        assert busy < properties["ServiceTimeout"] <= KUBECTL_HANDLER_SECONDS + ANSWER_SECONDS, name
    # Volcano and the autoscaler, the webhook gate and each queue's.
    assert checked >= 4


def test_volcanos_release_fails_within_a_quarter_hour(default_stack: Synthesized) -> None:
    """The case of the issue: the hung release's failure reaches CloudFormation before the Lambda ends."""
    logical_id = applied(default_stack)["volcano"]
    properties = default_stack.json["Resources"][logical_id]["Properties"]
    assert (properties["Timeout"], properties["Wait"], properties["ServiceTimeout"]) == ("360s", True, 900)
