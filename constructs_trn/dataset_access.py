"""The AWS identity of a data set's staging Job: read exactly the data set's s3:// objects.

One role per data set with s3:// sources (``s3:GetObject`` on those objects and no other, no list,
no write), handed by EKS Pod Identity to the staging Job's ServiceAccount
(``trainium-system/stage-<data set>``, k8s_charts/runs/dataset_staging.py) and to nothing else. The Job's
fetch containers copy the objects with ``aws s3 cp``; the staging script checks each by SHA-256
before anything reaches the shared file system (docs/runs.md). An object encrypted with a KMS key
of its own (SSE-KMS) needs kms:Decrypt on that key, which this role does not have.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from constructs_trn.iam_roles import pod_identity_role

__all__ = ["DatasetStagingAccess", "s3_object_arn"]


def s3_object_arn(url: str) -> str:
    """``s3://bucket/key`` -> ``arn:<partition>:s3:::bucket/key``."""
    bucket, _, key = url.removeprefix("s3://").partition("/")
    if not bucket or not key:
        raise ValueError(f"{url!r} is not an S3 object (s3://bucket/key)")
    return f"arn:{Aws.PARTITION}:s3:::{bucket}/{key}"


class DatasetStagingAccess(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        cluster_name: str,
        dataset: str,
        namespace: str,
        service_account: str,
        urls: Sequence[str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = pod_identity_role(
            self,
            "Role",
            description=f"Staging of data set {dataset} in {cluster_name}: read its s3:// objects",
            cluster_name=cluster_name,
            namespace=namespace,
            service_account=service_account,
            statements=[
                iam.PolicyStatement(
                    actions=["s3:GetObject"], resources=sorted({s3_object_arn(u) for u in urls})
                )
            ],
        )
        self.association = eks_l1.CfnPodIdentityAssociation(
            self,
            "PodIdentity",
            cluster_name=cluster.cluster_name,
            namespace=namespace,
            service_account=service_account,
            role_arn=self.role.role_arn,
        )
