"""Acknowledging cdk-nag AwsSolutions findings next to the construct that causes them.

app.py registers ``AwsSolutionsChecks`` as a validation plugin, so every unacknowledged finding
fails ``cdk synth``. An acknowledgment names one finding exactly (cdk-nag 3 has no prefix
matching) and gives the reason it is acceptable for that construct; it covers the construct and
everything under it. A finding that disappears leaves its acknowledgment unused, and a finding
whose id changes fails the synth again, so ``tests/guardrails`` catch both directions.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

__all__ = [
    "ACKNOWLEDGMENT_METADATA",
    "AWS_CUSTOM_RESOURCE_FUNCTION_ID",
    "acknowledge",
    "acknowledge_custom_resource_function",
    "add_aws_solutions_checks",
    "aws_managed_policy",
    "nag_rendering",
]

# The id CDK's validation report prints after "Acknowledge with": plugin name, then the rule.
_PLUGIN = "AwsSolutions"
# Each acknowledgment is also recorded as construct metadata, so a test can list the ones the code
# makes and compare them with the ones the validation report used.
ACKNOWLEDGMENT_METADATA = "trainium:nag-acknowledgment"
# The id aws-cdk-lib gives the one Lambda function behind every AwsCustomResource of a stack.
AWS_CUSTOM_RESOURCE_FUNCTION_ID = "AWS679f53fac002430cb0da5b7982bd2287"


def add_aws_solutions_checks(scope: IConstruct) -> None:
    """Run cdk-nag's AwsSolutions pack over every template under ``scope`` (an App or a Stage)."""
    Validations.of(scope).add_plugins(AwsSolutionsChecks(scope))


def acknowledge(scope: IConstruct, finding: str, *, reason: str) -> None:
    """Accept ``finding`` (e.g. ``"L1"`` or ``"IAM5[Resource::*]"``) on ``scope`` and its children."""
    if not reason.strip():
        raise ValueError(f"acknowledging {finding} needs a reason specific to this construct")
    finding_id = f"{_PLUGIN}::AwsSolutions-{finding}"
    Validations.of(scope).acknowledge(Acknowledgment(id=finding_id, reason=reason))
    scope.node.add_metadata(ACKNOWLEDGMENT_METADATA, finding_id)


def aws_managed_policy(name: str) -> str:
    """The IAM4 finding for one AWS managed policy attached to a role, as cdk-nag reports it."""
    return f"IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{name}]"


def acknowledge_custom_resource_function(stack: Stack) -> None:
    """The findings of aws-cdk-lib's shared AwsCustomResource function, once per stack."""
    function = stack.node.try_find_child(AWS_CUSTOM_RESOURCE_FUNCTION_ID)
    if function is None or any(entry.type == ACKNOWLEDGMENT_METADATA for entry in function.node.metadata):
        return
    acknowledge(
        function,
        aws_managed_policy("service-role/AWSLambdaBasicExecutionRole"),
        reason="aws-cdk-lib's AwsCustomResource function writes only its own CloudWatch logs with this AWS "
        "managed policy; its API calls are granted per resource by each caller's own policy",
    )


def nag_rendering(stack: Stack, value: str) -> str:
    """``value`` as cdk-nag prints it in a finding: tokens resolved, references as ``<Name>``."""

    def render(node: Any) -> str:
        if isinstance(node, str):
            return node
        if isinstance(node, dict) and "Ref" in node:
            return f"<{node['Ref']}>"
        if isinstance(node, dict) and "Fn::Join" in node:
            separator, parts = node["Fn::Join"]
            return str(separator).join(render(part) for part in parts)
        raise ValueError(f"cannot render {node!r} as a cdk-nag finding")

    return render(stack.resolve(value))
