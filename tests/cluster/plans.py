"""The plan a configuration deploys, with the file system's deploy-time values filled in as the stack
fills them (``stacks.kubernetes_values.applied_plan``), rendered once per session and configuration."""

from __future__ import annotations

from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from config import StackConfig
from stacks.kubernetes_values import applied_plan
from tests.plans import shared_review_plan

__all__ = ["FILE_SYSTEM_ID", "deployed_plan"]

FILE_SYSTEM_ID = "fs-0123456789abcdef0"


def deployed_plan(config: StackConfig) -> KubernetesLayerPlan:
    return applied_plan(
        shared_review_plan(config),
        file_system_id=FILE_SYSTEM_ID,
        dns_name=f"{FILE_SYSTEM_ID}.fsx.{config.region}.amazonaws.com",
        mount_name="abcdefgh",
    )
