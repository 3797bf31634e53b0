"""The default training image is written once (cluster_facts/neuron_stack.py); the
configuration's default, the TorchX component's default and the project image's base take it
from there."""

from __future__ import annotations

import re

from cluster_facts import neuron_stack
from config import workloads
from tests.conftest import REPO_ROOT
from torchx_trn import trainium

_PACKAGES = ("cluster_facts", "config", "constructs_trn", "k8s_charts", "preflight", "stacks", "torchx_trn")
# A pinned reference of the Neuron training image, as code would write it.
_TRAINING_IMAGE = re.compile(r"pytorch-training-neuronx:[\w.-]+")


def test_the_default_training_image_is_written_in_one_module() -> None:
    writers = sorted(
        path.relative_to(REPO_ROOT).as_posix()
        for package in _PACKAGES
        for path in (REPO_ROOT / package).rglob("*.py")
        if _TRAINING_IMAGE.search(path.read_text(encoding="utf-8"))
    )
    assert writers == ["cluster_facts/neuron_stack.py"]


def test_the_configuration_and_the_torchx_component_take_it_from_there() -> None:
    assert workloads.DEFAULT_TRAINING_IMAGE is neuron_stack.TRAINING_IMAGE
    assert trainium.DEFAULT_IMAGE is neuron_stack.TRAINING_IMAGE


def test_the_project_image_is_built_from_it() -> None:
    dockerfile = (REPO_ROOT / "docker" / "Dockerfile").read_text(encoding="utf-8")
    bases = re.findall(r"^FROM\s+(\S+)", dockerfile, flags=re.MULTILINE)
    assert bases == [neuron_stack.TRAINING_IMAGE]
