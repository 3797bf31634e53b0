"""One customer key for every log group of the stack, those it creates and those services create.

CloudWatch Logs encrypts a group with a KMS key when the key policy lets the Logs service of this
region use it for log groups of this account (the encryption-context condition); writers need no
KMS permission. Two kinds of groups:

- groups in the template (the Lambda functions', the VPC flow logs'): ``encrypt_template_log_groups``
  sets their ``KmsKeyId``;
- groups a service creates by name on first write: EKS's control-plane group
  ``/aws/eks/<cluster>/cluster`` and Container Insights' ``/aws/containerinsights/<cluster>/*``.
  A group in the template would fail ("already exists") on every stack deployed before, whose
  groups exist; ``encrypt_service_log_group`` creates the group if it is missing (an existing one is
  no error) and then associates the key, which works on new and existing groups alike. Such groups
  are not deleted with the stack, as before.

The key is retained: the service groups outlive a destroyed stack, and their events stay readable.
"""

from __future__ import annotations

from aws_cdk import Aws, CfnResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from cluster_facts.deploy_timeouts import AWS_CUSTOM_RESOURCE_SERVICE_TIMEOUT
from constructs_trn.nag import acknowledge_custom_resource_function

__all__ = ["LogEncryption"]


class LogEncryption(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, name: str) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            description=f"{name}: CloudWatch Logs encryption (Lambda, flow, EKS control-plane, Container Insights)",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchLogsOfThisAccountAndRegion",
                principals=[iam.ServicePrincipal(f"logs.{Aws.REGION}.amazonaws.com")],
                actions=[
                    "kms:Encrypt*",
                    "kms:Decrypt*",
                    "kms:ReEncrypt*",
                    "kms:GenerateDataKey*",
                    "kms:Describe*",
                ],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": (
                            f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:*"
                        )
                    }
                },
            )
        )
        self._service_groups: list[str] = []

    def encrypt_template_log_groups(self, stack: Stack) -> list[logs.CfnLogGroup]:
        """Set this key on every log group resource of ``stack``; call once every construct exists."""
        groups = [child for child in stack.node.find_all() if isinstance(child, logs.CfnLogGroup)]
        for group in groups:
            group.kms_key_id = self.key.key_arn
        return groups

    def encrypt_lambda_default_log_group(
        self, function: CfnResource, *, invoked_by: CfnResource
    ) -> logs.CfnLogGroup:
        """A function without a log group resource writes to ``/aws/lambda/<name>``, created on first
        write: create it here, encrypted, before ``invoked_by`` (the custom resource that runs it)."""
        group = logs.CfnLogGroup(
            function.node.scope,  # type: ignore[arg-type]
            "LogGroup",
            log_group_name=f"/aws/lambda/{function.ref}",
            kms_key_id=self.key.key_arn,
            retention_in_days=731,
        )
        invoked_by.node.add_dependency(group)
        return group

    def encrypt_service_log_group(self, construct_id: str, log_group_name: str) -> cr.AwsCustomResource:
        """Create ``log_group_name`` if it is missing, then associate this key with it (idempotent)."""
        arn = f"arn:{Aws.PARTITION}:logs:{Aws.REGION}:{Aws.ACCOUNT_ID}:log-group:{log_group_name}"
        create = cr.AwsCustomResource(
            self,
            f"{construct_id}Create",
            resource_type="Custom::ServiceLogGroup",
            install_latest_aws_sdk=False,
            service_timeout=Duration.seconds(AWS_CUSTOM_RESOURCE_SERVICE_TIMEOUT),
            on_create=cr.AwsSdkCall(
                service="CloudWatchLogs",
                action="createLogGroup",
                parameters={"logGroupName": log_group_name, "kmsKeyId": self.key.key_arn},
                physical_resource_id=cr.PhysicalResourceId.of(log_group_name),
                # A stack deployed before has the group already (the service made it): no error.
                ignore_error_codes_matching="ResourceAlreadyExistsException",
            ),
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [iam.PolicyStatement(actions=["logs:CreateLogGroup"], resources=[arn])]
            ),
        )
        associate_call = cr.AwsSdkCall(
            service="CloudWatchLogs",
            action="associateKmsKey",
            parameters={"logGroupName": log_group_name, "kmsKeyId": self.key.key_arn},
            physical_resource_id=cr.PhysicalResourceId.of(f"{log_group_name}-key"),
        )
        associate = cr.AwsCustomResource(
            self,
            f"{construct_id}Key",
            resource_type="Custom::ServiceLogGroupKey",
            install_latest_aws_sdk=False,
            service_timeout=Duration.seconds(AWS_CUSTOM_RESOURCE_SERVICE_TIMEOUT),
            on_create=associate_call,
            on_update=associate_call,
            policy=cr.AwsCustomResourcePolicy.from_statements(
                [iam.PolicyStatement(actions=["logs:AssociateKmsKey"], resources=[arn])]
            ),
        )
        associate.node.add_dependency(create)
        self._service_groups.append(log_group_name)
        acknowledge_custom_resource_function(Stack.of(self))
        return associate

    @property
    def service_log_groups(self) -> list[str]:
        return list(self._service_groups)
