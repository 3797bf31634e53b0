"""The Kubernetes layer inside TrainiumStack: what is applied, in which order, and how big."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_s3_assets as s3_assets

from cluster_facts.autoscaling import AUTOSCALER_NAME
from cluster_facts.images import is_pinned_image
from cluster_facts.kubernetes_plan import ManifestSet
from cluster_facts.vendored_charts import VENDORED_CHARTS, VOLCANO_CHART, VendoredChart, repository_path
from cluster_plan.kubernetes_values import review_plan
from cluster_plan.review_files import write_kubernetes_yaml
from k8s_charts.plan import VOLCANO
from tests.conftest import Synthesized
from tests.k8s_charts.manifests import containers
from tests.k8s_validation import assert_valid
from tools.vendor_chart import file_digests

LAMBDA_PAYLOAD_LIMIT = 262_144


def custom_resource_id(synthesized: Synthesized, construct: Any) -> str:
    [resource] = [child for child in construct.node.find_all() if isinstance(child, cdk.CfnResource)]
    return synthesized.logical_id(resource)


def applied(synthesized: Synthesized) -> dict[str, str]:
    """Step name -> logical id of the custom resource that applies it."""
    layer = synthesized.stack.kubernetes
    return {name: custom_resource_id(synthesized, construct) for name, construct in layer.applied.items()}


def manifests(synthesized: Synthesized, step_name: str) -> list[dict[str, Any]]:
    step = synthesized.stack.kubernetes_plan.step(step_name)
    assert isinstance(step, ManifestSet)
    return [dict(manifest) for manifest in step.manifests]


TRAINING_STEPS = ("run-bert-large",)


def depends_on(synthesized: Synthesized, logical_id: str) -> set[str]:
    return set(synthesized.json["Resources"][logical_id].get("DependsOn", []))


def test_default_configuration_applies_everything_but_the_training_jobs(default_stack: Synthesized) -> None:
    plan = default_stack.stack.kubernetes_plan
    # Each group's fabric check is run on demand (its access, step fabric-checks, is applied).
    assert set(applied(default_stack)) == set(plan.names) - set(TRAINING_STEPS) - {"fabric-check-trn1-32xl"}
    assert "fabric-checks" in applied(default_stack)
    # Rendered all the same, for review.
    assert set(TRAINING_STEPS) <= set(plan.names)


def test_a_run_with_apply_is_applied_and_one_without_is_rendered_only(example_stack: Synthesized) -> None:
    # config/example.yaml: bert-large has apply: true, llm does not.
    names = example_stack.stack.kubernetes_plan.names
    fabric_checks = {name for name in names if name.startswith("fabric-check-")}
    assert fabric_checks == {
        f"fabric-check-{group.name}" for group in example_stack.config.trainium.node_groups
    }
    assert set(applied(example_stack)) == set(names) - {"run-llm"} - fabric_checks
    assert "run-llm" in example_stack.stack.kubernetes_plan.names


def test_each_chart_waits_for_its_prerequisites(example_stack: Synthesized) -> None:
    ids = applied(example_stack)
    for step in example_stack.stack.kubernetes_plan.applied():
        name = step.name
        for prerequisite in step.after:
            assert ids[prerequisite] in depends_on(example_stack, ids[name]), (
                f"{name} must wait for {prerequisite}"
            )
    # The orders that matter, spelled out: Volcano serves its webhook before the queue is applied,
    # the queue is open before the run is, and the data set's Job follows the claim and the directory layout.
    assert ids[VOLCANO] in depends_on(example_stack, ids["volcano-webhook-ready"])
    assert ids["volcano-webhook-ready"] in depends_on(example_stack, ids["volcano-queue"])
    assert ids["volcano-queue"] in depends_on(example_stack, ids["queue-test-open"])
    assert ids["queue-test-open"] in depends_on(example_stack, ids["run-bert-large"])
    assert ids["fsx-storage"] in depends_on(example_stack, ids["fsx-layout"])
    assert ids["fsx-layout"] in depends_on(example_stack, ids["data-bert-wikicorpus-128"])
    assert ids["data-bert-wikicorpus-128"] in depends_on(example_stack, ids["run-bert-large"])


def test_gates_wait_for_the_webhook_to_serve_and_the_queue_to_open(example_stack: Synthesized) -> None:
    ids = applied(example_stack)
    webhook = example_stack.json["Resources"][ids["volcano-webhook-ready"]]
    assert webhook["Type"] == "Custom::AWSCDK-EKS-KubernetesObjectValue"
    assert webhook["Properties"]["ObjectType"] == "validatingwebhookconfiguration"
    assert webhook["Properties"]["ObjectName"] == "volcano-admission-service-jobs-validate"
    # Empty until the webhook manager has written its CA, which it does right before it serves.
    assert webhook["Properties"]["JsonPath"] == ".webhooks[?(@.clientConfig.caBundle)].name"
    queue = example_stack.json["Resources"][ids["queue-test-open"]]
    assert (queue["Properties"]["ObjectType"], queue["Properties"]["ObjectName"]) == (
        "queue.scheduling.volcano.sh",
        "test",
    )
    assert queue["Properties"]["JsonPath"] == ".status.state"


def test_a_run_is_applied_by_a_resource_of_its_own_identity(example_stack: Synthesized) -> None:
    # A changed run is a new logical id: CloudFormation creates the new Job, then deletes the old.
    run = example_stack.stack.kubernetes_plan.step("run-bert-large")
    [job] = manifests(example_stack, "run-bert-large")
    assert job["metadata"]["name"] == f"bert-large-{run.identity}"
    assert applied(example_stack)["run-bert-large"].startswith("Kubernetesrunbertlarge" + str(run.identity))


def test_no_step_waits_for_a_trainium_node_group(example_stack: Synthesized) -> None:
    # What each step does wait for, by what it uses: tests/operator_tools/test_deploy_path.py.
    trainium = {
        example_stack.logical_id(group.nodegroup)
        for group in example_stack.stack.trainium_node_groups.values()
    }
    for name, logical_id in applied(example_stack).items():
        assert not trainium & depends_on(example_stack, logical_id), name


def helm_release(synthesized: Synthesized, chart: str) -> dict[str, Any]:
    [properties] = [
        resource["Properties"]
        for resource in synthesized.resources("Custom::AWSCDK-EKS-HelmChart").values()
        if resource["Properties"]["Release"] == chart
    ]
    return dict(properties)


# The logical ids the releases were deployed under when their charts came from Helm repositories:
# a new one would make CloudFormation create a second resource and delete this one (helm uninstall).
DEPLOYED_RELEASE_IDS = {
    "volcano": "KubernetesVolcano22147BC2",
    "cluster-autoscaler": "KubernetesClusterAutoscaler0770F736",
}


def chart_asset(synthesized: Synthesized, release: str) -> tuple[str, Path]:
    """The release's ChartAssetURL and the directory the cloud assembly stages for it."""
    url = helm_release(synthesized, release)["ChartAssetURL"]
    manifest = json.loads((synthesized.assembly_dir / "TrainiumStack.assets.json").read_text())
    [asset] = [
        asset
        for asset in manifest["files"].values()
        if any(url.endswith(f"/{destination['objectKey']}") for destination in asset["destinations"].values())
    ]
    assert asset["source"]["packaging"] == "zip"
    return url, synthesized.assembly_dir / asset["source"]["path"]


@pytest.mark.parametrize("chart", VENDORED_CHARTS, ids=lambda chart: chart.name)
def test_the_charts_come_from_the_stacks_assets_under_their_deployed_ids(
    default_stack: Synthesized, chart: VendoredChart
) -> None:
    releases = {
        resource["Properties"]["Release"]: logical_id
        for logical_id, resource in default_stack.resources("Custom::AWSCDK-EKS-HelmChart").items()
    }
    release = {"volcano": VOLCANO, "cluster-autoscaler": AUTOSCALER_NAME}[chart.name]
    assert releases[release] == DEPLOYED_RELEASE_IDS[chart.name]
    properties = helm_release(default_stack, release)
    # The kubectl handler refuses Chart, Repository or Version beside ChartAssetURL.
    assert not {"Chart", "Repository", "Version"} & set(properties)
    url, staged = chart_asset(default_stack, release)
    assert re.fullmatch(r"s3://cdk-hnb659fds-assets-111122223333-us-west-2/[0-9a-f]{64}\.zip", url)
    # What is uploaded is the vendored directory, every file of it, with Chart.yaml at the zip's root.
    assert file_digests(staged) == file_digests(repository_path(chart.directory))
    assert (staged / "Chart.yaml").is_file()


def test_volcano_installs_into_its_namespace_and_waits(default_stack: Synthesized) -> None:
    properties = helm_release(default_stack, VOLCANO)
    assert (properties["Namespace"], properties["CreateNamespace"], properties["Wait"]) == (
        "volcano-system",
        True,
        True,
    )


def asset_hash(directory: Path) -> str:
    stack = cdk.Stack(cdk.App(), "Charts")
    return s3_assets.Asset(stack, "Chart", path=str(directory)).asset_hash


def test_a_chart_assets_hash_is_its_content_and_nothing_else(
    default_stack: Synthesized, tmp_path: Path
) -> None:
    directory = repository_path(VOLCANO_CHART.directory)
    deployed_hash = chart_asset(default_stack, VOLCANO)[0].rsplit("/", 1)[1].removesuffix(".zip")
    # Two synths, and a copy with new timestamps elsewhere (another checkout): the same hash, so an
    # unchanged chart is no update of the release.
    copy = shutil.copytree(directory, tmp_path / "elsewhere", copy_function=shutil.copy)
    assert asset_hash(directory) == asset_hash(directory) == asset_hash(copy) == deployed_hash
    values = copy / "values.yaml"
    values.write_bytes(values.read_bytes() + b"\n")
    assert asset_hash(copy) != deployed_hash


def manifest_resources(synthesized: Synthesized) -> dict[str, dict[str, Any]]:
    return synthesized.resources("Custom::AWSCDK-EKS-KubernetesResource")


def test_manifests_overwrite_and_fit_the_lambda_payload(example_stack: Synthesized) -> None:
    for logical_id, resource in manifest_resources(example_stack).items():
        assert resource["Properties"]["Overwrite"] is True, logical_id
        assert len(json.dumps(resource["Properties"]["Manifest"])) < LAMBDA_PAYLOAD_LIMIT, logical_id


def test_file_system_tokens_resolve_into_the_persistent_volume(default_stack: Synthesized) -> None:
    ids = applied(default_stack)
    manifest = json.dumps(default_stack.json["Resources"][ids["fsx-storage"]]["Properties"]["Manifest"])
    file_system_id, _ = default_stack.only("AWS::FSx::FileSystem")
    assert f'{{"Ref": "{file_system_id}"}}' in manifest
    assert "LustreMountName" in manifest
    assert "${Token" not in manifest


def test_queue_is_the_one_the_jobs_use_and_admits_them(example_stack: Synthesized) -> None:
    [queue] = manifests(example_stack, "volcano-queue")
    for job in TRAINING_STEPS:
        [volcano_job] = manifests(example_stack, job)
        assert volcano_job["spec"]["queue"] == queue["metadata"]["name"] == "test"
    capability = queue["spec"]["capability"]
    # Every Trainium node the autoscaler may run for this team: its one group, 4 x trn1n.32xlarge
    # at max_size. The capability never holds back a gang that the team's groups can hold, and
    # never counts the research team's Capacity Block nodes.
    assert capability["aws.amazon.com/neuron"] == "64"  # 4 nodes, 16 chips each
    assert capability["vpc.amazonaws.com/efa"] == "64"  # 4 x 16 EFA interfaces
    assert capability["cpu"] == "512" and capability["memory"] == "2048Gi"
    [research] = manifests(example_stack, "volcano-queue-research")
    assert research["spec"]["capability"]["aws.amazon.com/neuron"] == "128"  # 8 x trn1.32xlarge


def test_configuration_reaches_the_training_job(example_stack: Synthesized) -> None:
    [job] = manifests(example_stack, "run-bert-large")
    [container] = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    launcher = " ".join(container["args"])
    assert "--nnodes 4" in launcher and "--nproc_per_node 32" in launcher
    assert job["spec"]["tasks"][0]["template"]["spec"]["nodeSelector"] == {
        "trainium/node-group": "trn1n-32xl"
    }
    assert "--grad_accum_usteps 16" in launcher  # 4 nodes keep the tutorial's global batch
    assert container["resources"]["limits"] == {"aws.amazon.com/neuron": "16", "vpc.amazonaws.com/efa": "16"}


@pytest.mark.parametrize("fixture", ["default_stack", "example_stack"])
def test_every_rendered_object_is_valid_and_pinned(fixture: str, request: pytest.FixtureRequest) -> None:
    synthesized: Synthesized = request.getfixturevalue(fixture)
    for step in synthesized.stack.kubernetes_plan.manifest_sets():
        objects = manifests(synthesized, step.name)
        assert_valid(objects)
        for container in (c for obj in objects for c in containers(obj)):
            assert is_pinned_image(container["image"]), f"{step.name}: {container['image']}"


def test_system_containers_request_cpu_and_memory(default_stack: Synthesized) -> None:
    for name in ("neuron-device-plugin", "efa-device-plugin", "etcd", "data-bert-wikicorpus-128"):
        for obj in manifests(default_stack, name):
            for container in containers(obj):
                assert {"cpu", "memory"} <= set(container["resources"]["requests"]), (
                    f"{name}/{container['name']}"
                )


def test_yaml_for_review_has_placeholders_instead_of_tokens(
    default_stack: Synthesized, tmp_path: Path
) -> None:
    plan = review_plan(default_stack.config)
    files = write_kubernetes_yaml(plan, tmp_path)
    assert sorted(path.name for path in files) == sorted(f"{step.name}.yaml" for step in plan.manifest_sets())
    volume = next(yaml.safe_load_all((tmp_path / "fsx-storage.yaml").read_text()))
    assert volume["spec"]["csi"]["volumeHandle"] == "${FsxFileSystemId}"
    assert volume["spec"]["csi"]["volumeAttributes"]["mountname"] == "${FsxMountName}"
    # Scripts stay readable: literal blocks, not escaped one-liners.
    assert "- |" in (tmp_path / "run-bert-large.yaml").read_text()
    # What this configuration does not apply says so.
    assert (
        "NOT applied by this configuration" in (tmp_path / "run-bert-large.yaml").read_text().splitlines()[0]
    )
