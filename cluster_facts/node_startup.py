"""How a new Trainium node is set up to start runs quickly: facts the launch template applies
(constructs_trn/efa_launch_template.py) and the time-to-first-step model reads (operator_tools/timeline.py)."""

from __future__ import annotations

__all__ = [
    "FAST_IMAGE_PULL",
    "FAST_IMAGE_PULL_FEATURE",
    "FEATURES_TURNED_ON",
    "ROOT_VOLUME_THROUGHPUT_MIB_PER_SECOND",
]

# The training image is many gigabytes and every new Trainium node pulls it before a run's first
# step (operator_tools/first_step_model.py). nodeadm's FastImagePull feature gate turns on the SOCI
# snapshotter's parallel pull and unpack on the EKS AL2023 AMIs (awslabs/amazon-eks-ami:
# nodeadm/internal/api features.go, "FastImagePull enables a parallel image pull", default off,
# ignored below 4 vCPUs and 7 GiB; nodeadm/internal/containerd/config.go; the AMIs' rootfs ships
# soci-snapshotter.service). aws-samples/karpenter-blueprints (blueprints/soci-snapshotter) measured
# a 10.8 GB image from ECR in 112 s with containerd's default pull and 60 s in parallel mode on
# AL2023, with the root volume at 1,000 MiB/s.
FAST_IMAGE_PULL = True
FAST_IMAGE_PULL_FEATURE = "FastImagePull"
"""nodeadm's name of the feature gate (NodeConfig ``spec.featureGates``)."""
FEATURES_TURNED_ON: frozenset[str] = frozenset({FAST_IMAGE_PULL_FEATURE} if FAST_IMAGE_PULL else ())
"""The nodeadm features every Trainium node turns on: an AMI release with a known fault for one of
them is refused (cluster_facts/ami_releases.py)."""
# A parallel pull buffers and unpacks layers on the root volume: at gp3's 125 MiB/s baseline it
# would write no faster than the default pull. The blueprint names 600 MiB/s with the base 3,000
# IOPS as "a good starting point"; the extra throughput costs about $19 a month per volume, billed
# only while a node exists (cents per node-hour against about $21.50 for a trn1.32xlarge).
ROOT_VOLUME_THROUGHPUT_MIB_PER_SECOND = 600
