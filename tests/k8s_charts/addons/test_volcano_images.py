"""Where Volcano's images come from and how often a node asks for them.

Volcano v1.15.1 publishes its images on Docker Hub and ghcr.io only (cluster_facts/versions.py), both
of which ECR caches only with a credential: the release pulls them through the account's Docker Hub
rule when ``ecr.upstream_credentials`` names a secret, from Docker Hub otherwise, and in both cases
``IfNotPresent``, so a pod's restart asks no registry again. The chart's own templates are read to
show that one value sets every container's policy.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_facts.image_sources import DIRECT_PULLS
from cluster_facts.kubernetes_plan import HelmRelease
from cluster_facts.vendored_charts import VOLCANO_CHART
from config import StackConfig, load_config, parse_config
from k8s_charts.addons.volcano_scheduler import VOLCANO_POLICY_EXCEPTIONS, volcano_values
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG, REPO_ROOT
from tests.plans import shared_review_plan
from tests.yaml_edits import with_change

SECRET = "arn:aws:secretsmanager:us-west-2:111122223333:secret:ecr-pullthroughcache/dockerhub-AbCdEf"


def volcano_release(config: StackConfig) -> HelmRelease:
    step = shared_review_plan(config).step("volcano")
    assert isinstance(step, HelmRelease)
    return step


@pytest.mark.parametrize("path", [DEFAULT_CONFIG, EXAMPLE_CONFIG])
def test_volcano_pulls_its_pinned_images_if_not_present(path: Path) -> None:
    release = volcano_release(load_config(path))
    values: dict[str, Any] = dict(release.values)
    assert values["basic"]["image_pull_policy"] == "IfNotPresent"
    assert values["basic"]["image_tag_version"] == "v1.15.1"
    assert all(image.endswith(":v1.15.1") for image in release.images)


def test_one_value_sets_the_pull_policy_of_every_container_the_release_runs() -> None:
    """Each template that runs a Volcano image takes basic.image_pull_policy, as often as it names an
    image; the templates with other images (prometheus, grafana, kube-state-metrics, the colocation
    agent) render nothing with the values here."""
    templates = REPO_ROOT / VOLCANO_CHART.directory / "templates"
    values = volcano_values()
    off = {
        "prometheus.yaml": "custom.metrics_enable",
        "grafana.yaml": "custom.metrics_enable",
        "kubestatemetrics.yaml": "custom.metrics_enable",
        "agent.yaml": "custom.colocation_enable",
        "agent_scheduler.yaml": "custom.agent_scheduler_enable",
    }
    running = 0
    for template in sorted(templates.glob("*.yaml")):
        text = template.read_text()
        images = re.findall(r"^\s*-?\s*image:\s*(.+)$", text, re.MULTILINE)
        if not images:
            continue
        if template.name in off:
            assert text.startswith("{{- if .Values." + off[template.name] + " }}"), template.name
            assert not values["custom"].get(off[template.name].split(".")[1]), template.name
            continue
        policies = re.findall(r"^\s*imagePullPolicy:\s*(.+)$", text, re.MULTILINE)
        assert policies == ["{{ .Values.basic.image_pull_policy }}"] * len(images), template.name
        running += len(images)
    assert running == 4  # admission, its init Job, controllers, scheduler


def test_the_pull_policy_exception_says_why() -> None:
    """As every checkov exception of the project: a sentence of at least 40 characters without '='."""
    [(check, reason)] = VOLCANO_POLICY_EXCEPTIONS.items()
    assert check == "CKV_K8S_15"
    assert len(reason) >= 40 and "=" not in reason
    assert "pinned" in reason and "immutable tags" in reason


def test_without_a_docker_hub_secret_volcano_pulls_the_stacks_copies() -> None:
    """No node pulls Docker Hub anonymously by default: the stack copies Volcano's images into the
    account at deploy (constructs_trn/image_mirror.py) and the chart's registry is that copy's."""
    config = load_config(DEFAULT_CONFIG)
    release = volcano_release(config)
    registry = "111122223333.dkr.ecr.us-west-2.amazonaws.com/trainium/mirror/docker.io"
    assert dict(release.values)["basic"]["image_registry"] == registry
    assert all(image.startswith(f"{registry}/volcanosh/") for image in release.images)
    assert config.ecr.mirrored_registries == {"docker.io"}


def test_with_the_cache_off_volcano_pulls_from_docker_hub_and_says_so() -> None:
    data = with_change(yaml.safe_load(DEFAULT_CONFIG.read_text()), "ecr.pull_through_cache", False)
    config = parse_config(data, source=str(DEFAULT_CONFIG))
    release = volcano_release(config)
    assert all(image.startswith("docker.io/volcanosh/") for image in release.images)
    assert config.ecr.mirrored_registries == frozenset()
    assert "100 per 6 hours per IPv4 address" in DIRECT_PULLS["docker.io/volcanosh/"]


def test_with_a_docker_hub_secret_volcano_comes_through_the_cache() -> None:
    data = with_change(
        yaml.safe_load(DEFAULT_CONFIG.read_text()), "ecr.upstream_credentials", {"docker.io": SECRET}
    )
    config = parse_config(data, source=str(DEFAULT_CONFIG))
    release = volcano_release(config)
    registry = "111122223333.dkr.ecr.us-west-2.amazonaws.com/upstream/docker.io"
    assert dict(release.values)["basic"]["image_registry"] == registry
    assert all(image.startswith(f"{registry}/volcanosh/") for image in release.images)
    assert dict(release.values)["basic"]["image_pull_policy"] == "IfNotPresent"
    assert config.ecr.mirrored_registries == frozenset()  # the cache serves it: nothing to copy
