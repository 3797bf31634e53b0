"""The default training image: the one place it is written.

The configuration's default for a run's ``image`` (config.workloads), the TorchX component's
default (torchx_trn.trainium, which may import only cluster_facts) and the project image's base
(docker/Dockerfile, kept equal by a test) all name this reference.
"""

from __future__ import annotations

__all__ = ["DEFAULT_TRAINING_IMAGE"]

# AWS's Neuron PyTorch training container (Neuron SDK 2.27.1, torch-neuronx 2.9, the last line with
# PyTorch/XLA training), pinned by tag: the default needs no Docker build. docker/Dockerfile builds
# the project image FROM the same reference (a test keeps them equal).
DEFAULT_TRAINING_IMAGE = (
    "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.27.1-ubuntu24.04"
)
