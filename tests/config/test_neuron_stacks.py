"""Two Neuron stacks side by side (cluster_facts/neuron_stack.py): the xla path of the BERT preset and
the native path of TorchNeuron, each node group serving one. What the tables say, the one line with
its fix for each mix synth refuses, and the native example configuration's cluster.

The facts are readings of Neuron's and EC2's documents (their sources are at the top of the modules);
these tests hold the tables to those readings and the checks to the tables.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_facts.instance_catalog import CATALOG
from cluster_facts.neuron_stack import (
    NEURON_RELEASES,
    STACKS,
    TRAINING_IMAGE,
    driver_problem,
    image_stack,
    release_problem,
    stack_driver,
    stack_releases,
    stacks_of_family,
)
from cluster_plan.kubernetes_values import review_plan
from config import ConfigError, load_config, parse_config
from config.consistency import node_group_stacks
from tests.conftest import REPO_ROOT, Synthesized, synthesize
from tests.yaml_edits import with_change

NATIVE_EXAMPLE = REPO_ROOT / "config" / "native.example.yaml"
NATIVE_IMAGE = "444455556666.dkr.ecr.us-east-2.amazonaws.com/trainium-native/training:torchneuron-sdk2.33.0-1"


def native_data() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(NATIVE_EXAMPLE.read_text())
    return data


def problems_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as raised:
        parse_config(data, source="env.yaml")
    return raised.value.lines()


# --- the tables ------------------------------------------------------------------------------------


def test_each_release_has_its_driver_and_path() -> None:
    table = {v: (r.driver, r.training_path) for v, r in NEURON_RELEASES.items()}
    assert table == {
        "2.27.1": ("2.25.4.0", "xla"),
        "2.29.1": ("2.27.4.0", "xla"),
        "2.30.0": ("2.28.0.0", None),
        "2.31.0": ("2.29.0.0", None),
        "2.31.1": ("2.29.0.0", None),
        "2.32.0": ("2.30.2.0", None),
        "2.33.0": ("2.31.7.0", "native"),
    }
    assert stack_releases("xla") == ("2.27.1", "2.29.1")
    assert stack_releases("native") == ("2.33.0",)
    assert (stack_driver("xla"), stack_driver("native")) == ("2.25.4.0", "2.31.7.0")
    # The cluster's training image is the newest xla release's; the native one names no image of
    # Neuron's, whose tag no readable source gives.
    assert image_stack(TRAINING_IMAGE) == "xla"
    assert NEURON_RELEASES["2.33.0"].training_images == ()


def test_each_stack_runs_on_its_instance_families() -> None:
    assert STACKS["xla"].instance_families == ("trn1", "trn1n", "trn2")
    assert STACKS["native"].instance_families == ("trn2", "trn2u", "trn3")
    assert {name: stacks_of_family(entry.family) for name, entry in CATALOG.items()} == {
        "trn1.32xlarge": ("xla",),
        "trn1n.32xlarge": ("xla",),
        "trn2.48xlarge": ("xla", "native"),
        "trn2u.48xlarge": ("native",),
    }


def test_an_image_is_judged_by_the_release_its_tag_names() -> None:
    assert image_stack(NATIVE_IMAGE) == "native"
    assert release_problem(NATIVE_IMAGE) is None
    assert image_stack("registry.example.com/team/train:v7") is None  # no SDK in the tag: not judged
    assert release_problem("registry.example.com/team/train:v7") is None
    problem = release_problem("registry.example.com/team/train:sdk2.32.0")
    assert problem is not None and "supports neither training path" in problem
    assert driver_problem(NATIVE_IMAGE, driver="2.31.7.0") is None
    assert driver_problem(NATIVE_IMAGE, driver="2.29.0.0") == (
        f"{NATIVE_IMAGE!r} is Neuron SDK 2.33.0, which needs Neuron driver 2.31.7.0 or later"
    )


def test_the_catalog_knows_the_logical_neuroncores() -> None:
    trn1, trn2, trn2u = CATALOG["trn1.32xlarge"], CATALOG["trn2.48xlarge"], CATALOG["trn2u.48xlarge"]
    # logical-neuroncore-config.rst: a trn2.48xlarge presents 64 NeuronCores at LNC 2 (default), 128 at 1.
    assert (trn2.physical_neuron_cores, trn2.neuron_cores, trn2.logical_cores(1)) == (128, 64, 128)
    assert trn2.processes_per_node == 64
    # "LNC applies only to Trn2 and Trn3".
    assert (trn1.logical_core_sizes, trn1.neuron_cores) == ((1,), 32)
    with pytest.raises(ValueError, match="takes a Logical NeuronCore size of 1, not 2"):
        trn1.logical_cores(2)
    # The UltraServer node: a trn2.48xlarge's chips and network; four of them make 64 chips.
    assert trn2u.ultraserver is not None and trn2.ultraserver is None
    assert (trn2u.ultraserver.nodes, trn2u.ultraserver.chips) == (4, 64)
    assert trn2u.ultraserver.nodes * trn2u.chips == trn2u.ultraserver.chips
    same = ("chips", "physical_neuron_cores", "vcpus", "memory_gib", "efa_network_cards", "max_enis")
    assert [getattr(trn2u, key) for key in same] == [getattr(trn2, key) for key in same]


# --- the native example ---------------------------------------------------------------------------


def test_the_native_example_puts_each_group_on_its_stack() -> None:
    config = load_config(NATIVE_EXAMPLE)
    stacks = node_group_stacks(config.trainium.node_groups, list(config.runs), config.teams)
    assert stacks == {
        "trn1-xla": ("xla", "the only stack trn1.32xlarge runs"),
        "trn2-native": ("native", "its neuron_stack"),
    }
    assert [(run.preset, config.run_node_group(run).name) for run in config.runs] == [
        ("bert-large", "trn1-xla"),
        ("native-fsdp2", "trn2-native"),
    ]


def test_without_neuron_stack_a_trn2_group_follows_its_runs() -> None:
    data = with_change(native_data(), "trainium.node_groups.1.neuron_stack", ...)
    config = parse_config(data)
    stacks = node_group_stacks(config.trainium.node_groups, list(config.runs), config.teams)
    assert stacks["trn2-native"] == ("native", "from runs[1]")


# --- what synth refuses, one line each with the fix ---------------------------------------------


def test_a_native_preset_with_the_xla_image_is_refused() -> None:
    data = with_change(native_data(), "runs.1.image", ...)
    assert problems_of(data) == [
        (
            f"env.yaml: runs[1].image: {TRAINING_IMAGE!r} is Neuron SDK 2.29.1 (xla stack); preset native-fsdp2 "
            "trains on the native stack: set image to an image of SDK 2.33.0 (docs/neuron.md)"
        )
    ]


def test_a_native_run_on_an_xla_group_is_refused() -> None:
    data = with_change(native_data(), "runs.1.node_group", "trn1-xla")
    assert problems_of(data) == [
        (
            f"env.yaml: runs[1].image: {NATIVE_IMAGE!r} is Neuron SDK 2.33.0 (native stack); node group 'trn1-xla' "
            "serves the xla stack (the only stack trn1.32xlarge runs): put the run on a node group of the native "
            "stack (runs[].node_group), or use an image of SDK 2.27.1, 2.29.1"
        )
    ]


def test_an_xla_run_on_a_native_group_is_refused() -> None:
    data = with_change(native_data(), "runs.0.node_group", "trn2-native")
    assert problems_of(data) == [
        (
            f"env.yaml: runs[0].image: {TRAINING_IMAGE!r} is Neuron SDK 2.29.1 (xla stack); node group "
            "'trn2-native' serves the native stack (its neuron_stack): put the run on a node group of the xla "
            "stack (runs[].node_group), or use an image of SDK 2.33.0"
        )
    ]


def test_a_stack_on_an_instance_type_it_does_not_run_is_refused() -> None:
    data = with_change(native_data(), "trainium.node_groups.0.neuron_stack", "native")
    data = with_change(data, "runs", [])
    assert problems_of(data) == [
        (
            "env.yaml: trainium.node_groups[0].instance_type: 'trn1.32xlarge' does not run the native stack "
            "(TorchNeuron (native PyTorch on the neuron device; SDK 2.33.x, public beta)); allowed: trn2.48xlarge, "
            "trn2u.48xlarge, or set neuron_stack: xla"
        )
    ]
    data = with_change(native_data(), "trainium.node_groups.1.instance_type", "trn2u.48xlarge")
    data = with_change(data, "trainium.node_groups.1.neuron_stack", "xla")
    data = with_change(data, "runs", [])
    assert problems_of(data) == [
        (
            "env.yaml: trainium.node_groups[1].instance_type: 'trn2u.48xlarge' does not run the xla stack "
            "(PyTorch/XLA (torch-neuronx 2.9, neuron_parallel_compile; SDK up to 2.29.x)); allowed: "
            "trn1.32xlarge, trn1n.32xlarge, trn2.48xlarge, or set neuron_stack: native"
        )
    ]


def test_an_ami_driver_too_old_for_the_stack_is_refused() -> None:
    # The table's default release for 1.36 brings driver 2.29.0.0: too old for TorchNeuron.
    data = with_change(native_data(), "trainium.node_groups.1.ami_release", ...)
    data = with_change(data, "trainium.node_groups.1.ami_facts", ...)
    assert problems_of(data) == [
        (
            "env.yaml: trainium.node_groups[1].ami_release: '1.36.2-20260714' brings Neuron driver 2.29.0.0; the "
            "native stack (its neuron_stack; SDK 2.33.0) needs 2.31.7.0 or later: no AMI release the table knows "
            "brings it: set ami_release to one that does, with its ami_facts (docs/neuron.md)"
        )
    ]
    # A declared driver is judged the same way.
    data = with_change(native_data(), "trainium.node_groups.1.ami_facts.neuron_driver", "2.30.2.0")
    assert problems_of(data) == [
        (
            "env.yaml: trainium.node_groups[1].ami_release: '1.36.5-20261103' brings Neuron driver 2.30.2.0; the "
            "native stack (its neuron_stack; SDK 2.33.0) needs 2.31.7.0 or later: no AMI release the table knows "
            "brings it: set ami_release to one that does, with its ami_facts (docs/neuron.md)"
        )
    ]


def test_a_trn2u_group_is_native_without_saying_so() -> None:
    data = with_change(native_data(), "trainium.node_groups.1.instance_type", "trn2u.48xlarge")
    data = with_change(data, "trainium.node_groups.1.neuron_stack", ...)
    config = parse_config(data)
    stacks = node_group_stacks(config.trainium.node_groups, list(config.runs), config.teams)
    assert stacks["trn2-native"] == ("native", "the only stack trn2u.48xlarge runs")


def test_declared_ami_facts_need_their_release() -> None:
    data = with_change(native_data(), "trainium.node_groups.1.ami_release", ...)
    assert problems_of(data) == [
        (
            "env.yaml: trainium.node_groups[1].ami_facts: declares the facts of ami_release, which is not set; "
            "name the release these facts describe, or remove ami_facts"
        )
    ]


def test_a_logical_core_size_the_instance_type_does_not_take_is_refused() -> None:
    data = with_change(native_data(), "runs.0.logical_core_size", 2)
    assert problems_of(data) == [
        (
            "env.yaml: runs[0].logical_core_size: 2 is not a Logical NeuronCore size of trn1.32xlarge (node group "
            "'trn1-xla'); allowed: 1, or leave it out"
        )
    ]


def test_the_native_recipe_takes_only_its_own_keys() -> None:
    data = with_change(native_data(), "runs.1.parameters.grad_accum_usteps", 4)
    [line] = problems_of(data)
    assert line.startswith(
        "env.yaml: runs[1].parameters.grad_accum_usteps: unknown key; allowed here: steps, "
    )


# --- the native run as rendered ---------------------------------------------------------------------


def _native_job(data: dict[str, Any]) -> dict[str, Any]:
    plan = review_plan(parse_config(data))
    [job] = [
        manifest
        for step in plan.manifest_sets()
        for manifest in step.manifests
        if manifest["kind"] == "Job" and manifest["metadata"]["name"].startswith("llama-fsdp2-")
    ]
    return dict(job)


def _container(job: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    [task] = job["spec"]["tasks"]
    [container] = task["template"]["spec"]["containers"]
    return container["args"], {env["name"]: env.get("value", "") for env in container["env"]}


def test_the_native_run_ships_its_program_and_resumes_from_checkpoints() -> None:
    args, env = _container(_native_job(native_data()))
    script = args.index("/opt/run/program/native_fsdp2_train.py")
    assert args[args.index("--nproc_per_node") + 1] == "64"  # one worker per logical core, LNC 2
    assert args[script + 1 :][-4:] == ["--device", "neuron", "--backend", "neuron"]
    program = (REPO_ROOT / "cluster_programs" / "native_fsdp2_train.py").read_bytes()
    verified = dict(reversed(line.split("  ", 1)) for line in env["VERIFY_FILES"].splitlines())
    assert verified["/opt/run/program/native_fsdp2_train.py"] == hashlib.sha256(program).hexdigest()
    assert env["DATASET_TINYSHAKESPEARE"] + "/input.txt" in verified
    assert (env["RESUME_GLOB"], env["RESUME_ARGS"], env["PRECOMPILE_ARGS"]) == ("step-*", "--resume", "")
    assert "NEURON_LOGICAL_NC_CONFIG" not in env  # the default: the runtime's own 2


def test_a_logical_core_size_sets_the_runtime_and_the_workers() -> None:
    args, env = _container(_native_job(with_change(native_data(), "runs.1.logical_core_size", 1)))
    assert args[args.index("--nproc_per_node") + 1] == "128"
    assert env["NEURON_LOGICAL_NC_CONFIG"] == "1"


@pytest.fixture(scope="module")
def native_stack() -> Synthesized:
    return synthesize(load_config(NATIVE_EXAMPLE))


@pytest.mark.slow
def test_the_native_example_synthesizes_with_the_declared_release(native_stack: Synthesized) -> None:
    releases = {
        resource["Properties"].get("NodegroupName", logical): resource["Properties"].get("ReleaseVersion")
        for logical, resource in native_stack.resources("AWS::EKS::Nodegroup").items()
    }
    assert sorted(release for release in releases.values() if release) == [
        "1.36.2-20260714",
        "1.36.5-20261103",
    ]
    assert Path(native_stack.assembly_dir, "TrainiumStack.template.json").is_file()
