"""How long each custom resource of the stack may take, so that a failed deploy fails in minutes.

Every step of the Kubernetes layer is a custom resource run by aws-eks-v2's kubectl handler, a
Lambda function behind the custom-resource provider framework (aws-cdk-lib 2.273,
``aws-eks-v2/lib/kubectl-provider.js``: the handler ``timeout: Duration.minutes(15)``;
``custom-resources/lib/provider-framework/provider.js``: ``FRAMEWORK_HANDLER_TIMEOUT =
Duration.minutes(15)`` for the framework's onEvent function, which invokes the handler and waits).
When the handler is still busy at 900 s, Lambda ends both functions, nobody answers CloudFormation,
and CloudFormation waits out the custom resource's ``ServiceTimeout``, 3600 s when the template
sets none ("The maximum time, in seconds, that can elapse before a custom resource operation times
out. The value must be an integer from 1 to 3600. The default value is 3600 seconds (1 hour).":
AWS::CloudFormation::CustomResource, CloudFormation template reference). So:

1. every step bounds its own waiting (a Helm release's ``--timeout``, a readiness gate's
   ``TimeoutSeconds``) so that the handler fails the step and answers, with the reason, while it
   still runs: ``handler_seconds(step) + ANSWER_SECONDS <= KUBECTL_HANDLER_SECONDS``;
2. every custom resource carries a ``ServiceTimeout`` just above what its handler may take, so that
   a handler that dies anyway (killed, out of memory) costs minutes, not the hour.

What the handler runs (aws-cdk-lib 2.273 ``custom-resource-handlers/dist/aws-eks-v2/kubectl-handler``):
``aws eks update-kubeconfig`` first; for a Helm release ``aws s3 cp`` of the chart asset, then
``helm upgrade --install [--wait] --timeout <Timeout>`` (and ``helm uninstall --wait --timeout`` on
delete); for manifests ``kubectl apply``/``delete`` with no timeout of its own (retried up to three
times on "i/o timeout"); for a readiness gate ``kubectl get`` every 10 s until ``TimeoutSeconds``.

Helm's ``--timeout`` is not a deadline for the whole command but for each operation it waits on
("time to wait for any individual Kubernetes operation (like Jobs for hooks)", helm ``pkg/cmd/upgrade.go``):
each hook Job is watched up to the timeout (``pkg/action/hooks.go`` ``WatchUntilReady(resources,
timeout)``), then the release's resources once more with ``--wait`` (``pkg/action/install.go``,
``upgrade.go``: ``waiter.Wait(resources, Timeout)``). Helm 3 and Helm 4 (the kubectl layers of
Kubernetes 1.35 and later ship Helm 4; ``--wait`` alone is its ``watcher`` strategy, its default
without the flag ``hookOnly``, which still waits for hooks) count it the same way, read in
helm/helm ``main`` of 2026-08-20 (after v4.2.4). A release therefore waits up to
``(hook waits + 1) x timeout``; ``HelmRelease.hook_waits`` says how many hooks its chart has.
Deleting hook objects also waits up to the timeout each (``deleteHookByPolicy``); objects without
finalizers go at once, which ``WORK_SECONDS`` covers; one that hangs there is what the
``ServiceTimeout`` is for.

The numbers below are budgets, not measurements: ``WORK_SECONDS`` is generous for the handler's
own commands (the AWS CLI's start, the kubeconfig, the chart's download and Helm's API calls:
seconds each on a healthy cluster), and each API request ends within the API server's request
timeout (kube-apiserver ``--request-timeout``, 60 s by default) or an admission webhook's (at most
30 s, admissionregistration.k8s.io/v1 ``timeoutSeconds``).
"""

from __future__ import annotations

from cluster_facts.kubernetes_plan import HelmRelease, KubernetesStep, ReadinessGate

__all__ = [
    "ANSWER_SECONDS",
    "AWS_CUSTOM_RESOURCE_SECONDS",
    "AWS_CUSTOM_RESOURCE_SERVICE_TIMEOUT",
    "CUSTOM_RESOURCE_PROVIDER_SECONDS",
    "CUSTOM_RESOURCE_PROVIDER_SERVICE_TIMEOUT",
    "GATE_POLL_SECONDS",
    "KUBECTL_HANDLER_SECONDS",
    "KUBECTL_HANDLER_SERVICE_TIMEOUT",
    "REQUEST_SECONDS",
    "WORK_SECONDS",
    "handler_seconds",
    "service_timeout_seconds",
    "too_slow_to_answer",
]

KUBECTL_HANDLER_SECONDS = 900
"""The kubectl handler's and the provider framework's Lambda timeout (aws-cdk-lib 2.273, above)."""
AWS_CUSTOM_RESOURCE_SECONDS = 120
"""The Lambda timeout of aws-cdk-lib's AwsCustomResource function (``timeout`` default
``Duration.minutes(2)``, custom-resources ``aws-custom-resource.d.ts``): one AWS API call each."""
ANSWER_SECONDS = 60
"""Left to a handler after its step's own bound: the framework's response to CloudFormation (one
HTTPS PUT to the pre-signed URL) and the Lambda's start."""
CUSTOM_RESOURCE_PROVIDER_SECONDS = 900
"""The Lambda timeout of a core ``CustomResourceProvider`` (``custom-resource-provider-base.js``:
``props.timeout ?? Duration.minutes(15)``), such as ec2.Vpc's default-security-group restriction."""
AWS_CUSTOM_RESOURCE_SERVICE_TIMEOUT = AWS_CUSTOM_RESOURCE_SECONDS + ANSWER_SECONDS
"""The ServiceTimeout of every AwsCustomResource of the stack: its function's timeout and the answer."""
CUSTOM_RESOURCE_PROVIDER_SERVICE_TIMEOUT = CUSTOM_RESOURCE_PROVIDER_SECONDS + ANSWER_SECONDS
KUBECTL_HANDLER_SERVICE_TIMEOUT = KUBECTL_HANDLER_SECONDS + ANSWER_SECONDS
"""The ServiceTimeout of a kubectl-handler step without a bound of its own (``kubectl apply``)."""
WORK_SECONDS = 120
"""The handler's own commands around the step's waiting: kubeconfig, the chart's download, Helm's
and kubectl's API calls (see above)."""
GATE_POLL_SECONDS = 10
"""A readiness gate sleeps this long between two ``kubectl get`` (kubectl-handler ``get/__init__.py``)."""
REQUEST_SECONDS = 60
"""The longest one API request takes before the API server ends it (its ``--request-timeout``)."""


def handler_seconds(step: KubernetesStep) -> int | None:
    """The longest the kubectl handler works on ``step`` before it answers, or None when the step
    has no bound of its own (``kubectl apply``: the Lambda's timeout and the ServiceTimeout bound it)."""
    if isinstance(step, HelmRelease):
        waits = step.hook_waits + (1 if step.wait else 0)
        return WORK_SECONDS + waits * step.timeout_minutes * 60
    if isinstance(step, ReadinessGate):
        # The last poll may start just before the deadline: one more request and one more sleep.
        return WORK_SECONDS + step.timeout_minutes * 60 + GATE_POLL_SECONDS + REQUEST_SECONDS
    return None


def too_slow_to_answer(step: KubernetesStep) -> str | None:
    """Why ``step``'s own timeout leaves the handler no time to answer CloudFormation, or None."""
    seconds = handler_seconds(step)
    if seconds is None or seconds + ANSWER_SECONDS <= KUBECTL_HANDLER_SECONDS:
        return None
    return (
        f"step {step.name!r} may wait {seconds} s, and the kubectl handler has "
        f"{KUBECTL_HANDLER_SECONDS} s in all ({ANSWER_SECONDS} s of them to answer CloudFormation): "
        "lower its timeout_minutes"
    )


def service_timeout_seconds(step: KubernetesStep) -> int:
    """The ``ServiceTimeout`` of ``step``'s custom resource: what its handler may take, plus the answer."""
    seconds = handler_seconds(step)
    if seconds is None:
        return KUBECTL_HANDLER_SERVICE_TIMEOUT
    return min(seconds, KUBECTL_HANDLER_SECONDS) + ANSWER_SECONDS
