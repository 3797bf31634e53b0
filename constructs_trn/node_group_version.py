"""A managed node group's Kubernetes version, written into its template and moved with the cluster's."""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks

__all__ = ["follow_cluster_version"]


def follow_cluster_version(nodegroup: eks.Nodegroup, kubernetes_version: str) -> None:
    """Write the node group's Kubernetes version into its template (``AWS::EKS::Nodegroup``
    ``Version``), the cluster's: a version bump then moves the group right after the control plane.

    Without it the group stays at the version EKS created it with: EKS refuses the next control
    plane update ("all of your node groups' Kubernetes versions must match the cluster's Kubernetes
    version", EKS API UpdateClusterVersion), and a ``ReleaseVersion`` of the new minor alone is
    refused too ("Requested release version 1.31.3-20250103 is not valid for kubernetes version
    1.30", eksctl-io/eksctl#7976). aws-cdk-lib 2.273's ``Nodegroup`` has no prop for it.
    """
    cfn = nodegroup.node.default_child
    assert isinstance(cfn, eks.CfnNodegroup)
    cfn.add_property_override("Version", kubernetes_version)
