"""Preflight's image inventory is exactly what the rendered stack pulls, each image with its origin."""

from __future__ import annotations

from typing import Any

import pytest

from cluster_facts.image_sources import ecr_registry
from cluster_plan.kubernetes_values import image_source, review_plan
from config import StackConfig
from config.workloads import DEFAULT_TRAINING_IMAGE
from preflight.image_inventory import Origin, Source, pulled_images
from tests.preflight.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG, config_from

OWN_IMAGE = f"{ecr_registry(account='444455556666', region='us-east-1')}/trainium-prod/training:v7"
DOCKER_SECRET = "arn:aws:secretsmanager:us-east-1:444455556666:secret:ecr-pullthroughcache/hub-AbCdEf"


def _cache_off(data: dict[str, Any]) -> None:
    data.setdefault("ecr", {})["pull_through_cache"] = False


def _docker_credential(data: dict[str, Any]) -> None:
    data.setdefault("ecr", {})["upstream_credentials"] = {"docker.io": DOCKER_SECRET}


def _no_watchdog(data: dict[str, Any]) -> None:
    data.setdefault("autoscaler", {})["gang_watchdog"] = False


def _own_image(data: dict[str, Any]) -> None:
    data["runs"][1]["image"] = OWN_IMAGE


VARIANTS = {
    "default": (DEFAULT_CONFIG, None),
    "example": (EXAMPLE_CONFIG, None),
    "cache off": (EXAMPLE_CONFIG, _cache_off),
    "docker credential": (EXAMPLE_CONFIG, _docker_credential),
    "no watchdog": (DEFAULT_CONFIG, _no_watchdog),
    "own image": (EXAMPLE_CONFIG, _own_image),
}


def variant(name: str) -> StackConfig:
    path, edit = VARIANTS[name]
    return config_from(path, edit)


@pytest.mark.parametrize("name", VARIANTS)
def test_the_inventory_is_every_image_the_rendered_stack_pulls(name: str) -> None:
    """The plan's images (applied or not) and the TorchX default, as cluster_plan/kubernetes_values.py's
    cached_repository_arns counts them: a new image in a chart without an inventory entry fails here."""
    config = variant(name)
    rendered = {*review_plan(config).images(), image_source(config).resolve(DEFAULT_TRAINING_IMAGE)}
    inventory = pulled_images(config)
    assert {image.reference for image in inventory} == rendered
    assert len({image.reference for image in inventory}) == len(inventory)


def test_each_image_says_where_its_bytes_come_from() -> None:
    by_name = {
        image.upstream.rsplit("/", 1)[-1].split(":")[0]: image
        for image in pulled_images(variant("own image"))
    }
    efa = by_name["aws-efa-k8s-device-plugin"]
    assert (efa.source, efa.registry, efa.through_cache) == (
        Source.OTHER_ECR,
        "602401143452.dkr.ecr.us-east-1.amazonaws.com",
        False,
    )
    plugin = by_name["neuron-device-plugin"]
    assert plugin.through_cache and plugin.registry == "public.ecr.aws" and plugin.source is Source.UPSTREAM
    assert plugin.reference.startswith(
        "444455556666.dkr.ecr.us-east-1.amazonaws.com/upstream/public.ecr.aws/"
    )
    assert (by_name["cluster-autoscaler"].registry, by_name["etcd"].registry) == (
        "registry.k8s.io",
        "quay.io",
    )
    own = by_name["training"]
    assert (own.source, own.reference, own.upstream, own.through_cache) == (
        Source.OWN_ECR,
        OWN_IMAGE,
        OWN_IMAGE,
        False,
    )
    # Without a Docker Hub credential Volcano comes from the stack's copy (made from Docker Hub at
    # deploy, so Docker Hub is asked); with one, through the cache; with the cache off, Docker Hub.
    volcano = by_name["vc-scheduler"]
    assert (volcano.via, volcano.registry, volcano.source) == ("copy", "docker.io", Source.UPSTREAM)
    assert "/trainium-prod/mirror/docker.io/volcanosh/" in volcano.reference
    direct = {i.upstream: i for i in pulled_images(variant("cache off"))}
    assert direct["docker.io/volcanosh/vc-scheduler:v1.15.1"].via == "direct"
    cached = {i.upstream: i for i in pulled_images(variant("docker credential"))}
    assert cached["docker.io/volcanosh/vc-scheduler:v1.15.1"].through_cache


def test_each_image_names_the_key_or_pin_it_comes_from() -> None:
    images = {image.upstream.rsplit("/", 1)[-1]: image for image in pulled_images(variant("own image"))}
    assert images["neuron-device-plugin:2.29.149.0"].origins == (
        Origin("DEVICE_PLUGIN_VERSION (cluster_facts/neuron_stack.py)", "the Neuron device plugin"),
    )
    assert images["training:v7"].origins == (Origin("runs[1].image", "run llm", configured=True),)
    # The BERT run takes the default image: the pin, not a key of the file.
    training = images["pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.1-ubuntu24.04"]
    assert [origin.configured for origin in training.origins] == [False, False]
    assert "run bert-large" in [origin.used_by for origin in training.origins]
    autoscaler = images["cluster-autoscaler:v1.36.1"]
    assert autoscaler.origins[0].what.startswith("CLUSTER_AUTOSCALER_IMAGE_TAGS['1.36']")
    assert "gang watchdog" not in str(pulled_images(variant("no watchdog")))
