"""The review plan of a configuration, rendered once per test process.

Rendering a plan takes most of a second (every chart through cdk8s); many tests read the plan of
the same configuration. Each test gets its own copy. A test of rendering itself
(that two renderings agree) calls ``cluster_plan.kubernetes_values.review_plan`` instead.
"""

from __future__ import annotations

import copy

from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from cluster_plan.kubernetes_values import review_plan
from config import StackConfig

__all__ = ["shared_review_plan"]


_PLANS: dict[str, KubernetesLayerPlan] = {}


def shared_review_plan(config: StackConfig) -> KubernetesLayerPlan:
    """``review_plan(config)``, shared by every test that asks for an equal configuration."""
    # Keyed by the configuration's JSON: models that hold lists do not hash.
    key = config.model_dump_json()
    if key not in _PLANS:
        _PLANS[key] = review_plan(config)
    # A copy: a test that edits an object it was given must not change the next test's plan.
    return copy.deepcopy(_PLANS[key])
