"""The plan a configuration deploys, with the file system's deploy-time values filled in as the stack
fills them; the file system's id changes exactly when CloudFormation would replace it (its
generation), as in tests/stacks/test_update_safety.py. Rendered once per configuration and session."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import yaml

from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from cluster_plan.kubernetes_values import file_system_generation, file_system_values, kubernetes_plan
from config import StackConfig, parse_config

__all__ = ["config_data", "deployed_plan", "plan_of"]


def config_data(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def deployed_plan(config: StackConfig) -> KubernetesLayerPlan:
    return plan_of(config.model_dump(mode="json", exclude_unset=True))


def plan_of(data: dict[str, Any], *, device_taints: bool | None = None) -> KubernetesLayerPlan:
    """The plan of ``data``; ``device_taints``: render as if DeviceTaintRule were served (the tier turns
    its gate on), else what EKS serves at the configuration's version."""
    return _plan(json.dumps(data, sort_keys=True), device_taints)


@functools.cache
def _plan(data_json: str, device_taints: bool | None) -> KubernetesLayerPlan:
    config = parse_config(json.loads(data_json))
    generation = file_system_generation(config)
    return kubernetes_plan(
        config,
        file_system=file_system_values(
            config,
            file_system_id=f"fs-{generation}",
            dns_name=f"fs-{generation}.fsx.{config.region}.amazonaws.com",
            mount_name=f"m{generation}",
        ),
        device_taints=device_taints,
    )
