"""The images the platform pins that no other table holds, each with its source: one home per image.

The charts render these (k8s_charts), the stack grants the nodes their registries (stacks), and
preflight asks each registry that the pinned tag exists (preflight/image_inventory.py). The other
pins live with the facts they belong to: the training image and the Neuron device plugin in
cluster_facts/neuron_stack.py, Volcano's and the cluster autoscaler's images in
cluster_facts/versions.py.

Pure data and string functions (no AWS, no cdk8s), like the rest of cluster_facts.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "EFA_DEVICE_PLUGIN_TAG",
    "EKS_IMAGE_ACCOUNTS",
    "ETCD_IMAGE",
    "GANG_WATCHDOG_IMAGE",
    "PLATFORM_JOB_IMAGE",
    "efa_plugin_image",
]

ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.33"
"""Each team's rendezvous etcd. The newest 3.5 release (etcd-io/etcd tag v3.5.33, 2026-07-23); the
release script publishes it as quay.io/coreos/etcd:v3.5.33. Its image is distroless-static: no shell,
any uid works."""

PLATFORM_JOB_IMAGE = "public.ecr.aws/docker/library/alpine:3.24.1"
"""The data staging and FSx layout Jobs. Docker Official Image (docker-library/official-images,
library/alpine: 3.24.1), mirrored on ECR Public so pulls need no Docker Hub quota. Its busybox has sh,
wget (HTTPS via ssl_client), tar, mkfifo, tee and sha256sum: everything the platform's scripts use."""

GANG_WATCHDOG_IMAGE = "public.ecr.aws/docker/library/python:3.12.12-slim-trixie"
"""The gang watchdog. Docker Official Image python:3.12.12-slim-trixie on ECR Public."""

EFA_DEVICE_PLUGIN_TAG = "v0.5.20"
"""The EFA device plugin: aws/eks-charts stable/aws-efa-k8s-device-plugin appVersion."""

_STANDARD_ACCOUNT = "602401143452"
_REGIONS_ON_STANDARD_ACCOUNT = [
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-south-1",
    "ap-southeast-1",
    "ap-southeast-2",
    "ca-central-1",
    "eu-central-1",
    "eu-north-1",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "sa-east-1",
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
]
EKS_IMAGE_ACCOUNTS: Mapping[str, str] = {
    **dict.fromkeys(_REGIONS_ON_STANDARD_ACCOUNT, _STANDARD_ACCOUNT),
    # Opt-in and partitioned regions replicate the EKS images into their own accounts.
    "af-south-1": "877085696533",
    "ap-east-1": "800184023465",
    "ap-south-2": "900889452093",
    "ap-southeast-3": "296578399912",
    "ap-southeast-4": "491585149902",
    "ap-southeast-5": "151610086707",
    "ap-southeast-6": "333609536671",
    "ap-southeast-7": "121268973566",
    "ca-west-1": "761377655185",
    "cn-north-1": "918309763551",
    "cn-northwest-1": "961992271922",
    "eu-central-2": "900612956339",
    "eu-south-1": "590381155156",
    "eu-south-2": "455263428931",
    "il-central-1": "066635153087",
    "me-central-1": "759879836304",
    "me-south-1": "558608220178",
    "us-gov-east-1": "151742754352",
    "us-gov-west-1": "013241004608",
}
"""Region -> account of the EKS image registry (EKS user guide, "View Amazon container image
registries for Amazon EKS add-ons")."""


def efa_plugin_image(region: str, tag: str = EFA_DEVICE_PLUGIN_TAG) -> str:
    """The EFA plugin image in the EKS registry of ``region``; ValueError for a region not in the table."""
    try:
        account = EKS_IMAGE_ACCOUNTS[region]
    except KeyError:
        raise ValueError(
            f"no EKS image registry known for region {region!r} (it must be a concrete region name, "
            f"not a token); known: {', '.join(sorted(EKS_IMAGE_ACCOUNTS))}. Add the account from the EKS "
            "user guide page 'View Amazon container image registries for Amazon EKS add-ons'."
        ) from None
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{domain}/eks/aws-efa-k8s-device-plugin:{tag}"
