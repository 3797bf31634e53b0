"""The EKS add-ons the cluster runs (pure data: the configuration validates version pins against it)."""

ADDON_NAMES = (
    "vpc-cni",
    "kube-proxy",
    "eks-pod-identity-agent",
    "coredns",
    "aws-fsx-csi-driver",
    "amazon-cloudwatch-observability",
)
