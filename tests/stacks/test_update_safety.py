"""A second deployment with a changed configuration: every update is one Kubernetes and Volcano accept.

Pairs of configurations (deployed, changed) go through the real plan; tests/update_rules.py replays
what CloudFormation and the kubectl handler do with each custom resource and object, under the
API's own rules. The file system's id follows its generation, as CloudFormation's replacement does.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_facts.kubernetes_plan import HelmRelease, KubernetesLayerPlan, ManifestSet
from cluster_plan.kubernetes_values import (
    applied_plan,
    file_system_generation,
    file_system_values,
    kubernetes_plan,
    review_plan,
)
from config import parse_config
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG, synthesize
from tests.update_rules import helm_release_updates, node_group_resizes, refused_update, update_problems
from tests.yaml_edits import with_change


def data(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def deployed_plan(config_data: dict[str, Any]) -> KubernetesLayerPlan:
    """The plan as the stack applies it; the file system's id changes only when it is replaced.

    Rendered once per configuration and process: a change and its reverse, and the many changes of
    the same base, render the same configurations (the plan is frozen data).
    """
    return _deployed_plan(json.dumps(config_data, sort_keys=True))


@functools.cache
def _deployed_plan(config_json: str) -> KubernetesLayerPlan:
    return render_plan(json.loads(config_json))


def render_plan(config_data: dict[str, Any]) -> KubernetesLayerPlan:
    """Render now, from scratch (the determinism test must not see a cached plan)."""
    config = parse_config(config_data)
    generation = file_system_generation(config)
    return kubernetes_plan(
        config,
        file_system=file_system_values(
            config,
            file_system_id=f"fs-{generation}",
            dns_name=f"fs-{generation}.fsx.us-west-2.amazonaws.com",
            mount_name=f"m{generation}",
        ),
    )


def run_change(config_data: dict[str, Any], path: str, value: Any, *, run: int = 0) -> dict[str, Any]:
    """A copy with ``runs[run].<path>`` set, creating the sections on the way."""
    changed = copy.deepcopy(config_data)
    *parents, last = path.split(".")
    target = changed["runs"][run]
    for part in parents:
        target = target.setdefault(part, {})
    target[last] = value
    return changed


def training_on(config_data: dict[str, Any]) -> dict[str, Any]:
    return run_change(config_data, "apply", True)


DEFAULT_ON = training_on(data(DEFAULT_CONFIG))
EXAMPLE = data(EXAMPLE_CONFIG)
SECOND_TEAM = with_change(DEFAULT_ON, "teams", [{"name": "training", "queue": "test"}, {"name": "research"}])
CHANGES = {
    "new training parameters": (DEFAULT_ON, run_change(DEFAULT_ON, "parameters.batch_size", 8)),
    "another image": (
        DEFAULT_ON,
        run_change(
            DEFAULT_ON,
            "image",
            "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.27.1-ubuntu24.04",
        ),
    ),
    "the gang watchdog switched off": (
        DEFAULT_ON,
        with_change(DEFAULT_ON, "autoscaler.gang_watchdog", False),
    ),
    "a longer provision time (the watchdog's threshold)": (
        DEFAULT_ON,
        with_change(DEFAULT_ON, "autoscaler.max_node_provision_minutes", 30),
    ),
    "more nodes": (run_change(EXAMPLE, "nodes", 2), EXAMPLE),
    "fewer nodes": (EXAMPLE, run_change(EXAMPLE, "nodes", 2)),
    "a larger file system": (DEFAULT_ON, with_change(DEFAULT_ON, "fsx.storage_capacity_gib", 2400)),
    "another file-system deployment type": (
        DEFAULT_ON,
        with_change(
            with_change(
                with_change(
                    with_change(DEFAULT_ON, "fsx.deployment_type", "SCRATCH_2"),
                    "fsx.throughput_mib_per_tib",
                    ...,
                ),
                "fsx.backups",
                "none",
            ),
            "fsx.backup_retention_days",
            ...,
        ),
    ),
    "training switched on": (data(DEFAULT_CONFIG), DEFAULT_ON),
    "training switched off": (DEFAULT_ON, data(DEFAULT_CONFIG)),
    "another cacheset and precompile length": (
        EXAMPLE,
        run_change(run_change(EXAMPLE, "cacheset", "bert-b"), "precompile.steps", 20),
    ),
    "a second team": (DEFAULT_ON, SECOND_TEAM),
    "a run moved to another team": (SECOND_TEAM, run_change(SECOND_TEAM, "team", "research")),
    "another run of the example": (EXAMPLE, run_change(EXAMPLE, "apply", True, run=1)),
    "a changed data set": (EXAMPLE, with_change(EXAMPLE, "datasets.0.archive_sha256", "1" * 64)),
    "a team's node groups": (
        EXAMPLE,
        with_change(EXAMPLE, "teams.1.node_groups", ["trn1-32xl-block", "trn1n-32xl"]),
    ),
    "a run removed": (EXAMPLE, with_change(EXAMPLE, "runs", EXAMPLE["runs"][:1])),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_changed_configuration_deploys(change: str) -> None:
    before, after = CHANGES[change]
    assert update_problems(deployed_plan(before), deployed_plan(after)) == []


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_and_so_does_changing_it_back(change: str) -> None:
    before, after = CHANGES[change]
    assert update_problems(deployed_plan(after), deployed_plan(before)) == []


def test_an_unchanged_configuration_changes_nothing() -> None:
    plan = render_plan(EXAMPLE)
    assert update_problems(plan, render_plan(copy.deepcopy(EXAMPLE))) == []
    assert [step.name for step in plan] == [step.name for step in render_plan(EXAMPLE)]


def test_a_changed_run_is_a_new_resource_and_a_new_job() -> None:
    before, after = CHANGES["new training parameters"]
    old, new = deployed_plan(before).step("run-bert-large"), deployed_plan(after).step("run-bert-large")
    assert isinstance(old, ManifestSet) and isinstance(new, ManifestSet)
    assert old.identity != new.identity
    assert old.manifests[0]["metadata"]["name"] != new.manifests[0]["metadata"]["name"]


def test_a_replaced_file_system_gets_a_new_volume_and_claim_and_its_runs_follow() -> None:
    before, after = CHANGES["another file-system deployment type"]
    old, new = deployed_plan(before), deployed_plan(after)
    old_storage, new_storage = old.step("fsx-storage"), new.step("fsx-storage")
    assert isinstance(old_storage, ManifestSet) and isinstance(new_storage, ManifestSet)
    assert {m["metadata"]["name"] for m in old_storage.manifests}.isdisjoint(
        m["metadata"]["name"] for m in new_storage.manifests
    )
    assert old.step("run-bert-large").identity != new.step("run-bert-large").identity  # type: ignore[union-attr]


# Where the charts came from before they were kept in charts/: a stack deployed then holds these.
REPOSITORY_CHARTS = {
    "volcano": "https://volcano-sh.github.io/helm-charts",
    "cluster-autoscaler": "https://kubernetes.github.io/autoscaler",
}


def with_repository_charts(plan: KubernetesLayerPlan) -> KubernetesLayerPlan:
    """``plan`` as the stack applied it when the kubectl handler downloaded the charts."""
    return KubernetesLayerPlan.of(
        [
            replace(step, chart_directory=None, repository=REPOSITORY_CHARTS[step.chart])
            if isinstance(step, HelmRelease)
            else step
            for step in plan
        ]
    )


@pytest.mark.parametrize("config_data", [DEFAULT_ON, EXAMPLE], ids=["default", "example"])
def test_the_vendored_charts_upgrade_the_releases_installed_from_the_repositories(
    config_data: dict[str, Any],
) -> None:
    vendored = deployed_plan(config_data)
    downloaded = with_repository_charts(vendored)
    assert update_problems(downloaded, vendored) == []
    # Same construct ids, so CloudFormation updates both custom resources in place: the handler
    # upgrades each release from the chart asset, and deletes nothing.
    assert helm_release_updates(downloaded, vendored) == {
        "ClusterAutoscaler": "helm upgrade --install cluster-autoscaler from charts/cluster-autoscaler-9.59.0/ "
        "(was https://kubernetes.github.io/autoscaler)",
        "Volcano": "helm upgrade --install volcano from charts/volcano-1.15.1/ "
        "(was https://volcano-sh.github.io/helm-charts)",
    }
    # Values, namespaces and order are the same either way; only the source differs.
    for old, new in zip(downloaded, vendored, strict=True):
        if isinstance(old, HelmRelease):
            assert replace(old, repository=None, chart_directory=new.chart_directory) == new  # type: ignore[union-attr]
        else:
            assert old == new


def test_a_release_under_a_new_id_or_name_is_caught() -> None:
    volcano = replace(deployed_plan(DEFAULT_ON).step("volcano"), after=())
    assert isinstance(volcano, HelmRelease)
    before = KubernetesLayerPlan.of([volcano])
    [uninstalled] = update_problems(
        before, KubernetesLayerPlan.of([replace(volcano, name="volcano-vendored")])
    )
    assert uninstalled == (
        "Volcano: deleting the old resource uninstalls release volcano-system/volcano, which "
        "VolcanoVendored has just upgraded"
    )
    [left] = update_problems(before, KubernetesLayerPlan.of([replace(volcano, release="volcano-vendored")]))
    assert left == "Volcano: installs volcano-system/volcano-vendored; volcano-system/volcano is left behind"


# --- The rules themselves, shown refusing what the previous design did --------------------------


def volcano_job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "bert-train", "namespace": "training"},
        "spec": {
            "minAvailable": 2,
            "queue": "test",
            "tasks": [{"name": "worker", "replicas": 2, "template": {}}],
            **spec,
        },
    }


def test_volcano_refuses_any_job_change_but_the_sizes() -> None:
    old = volcano_job()
    assert refused_update(old, volcano_job(queue="other")) != []
    resized = volcano_job(minAvailable=3, tasks=[{"name": "worker", "replicas": 3, "template": {}}])
    assert refused_update(old, resized) == []


def test_a_fixed_job_name_with_changed_parameters_is_caught() -> None:
    # The previous design: one step, one fixed name, parameters in the spec.
    def plan(batch: str) -> KubernetesLayerPlan:
        job = volcano_job(tasks=[{"name": "worker", "replicas": 2, "template": {"spec": {"args": [batch]}}}])
        return KubernetesLayerPlan.of([ManifestSet(name="bert-train", manifests=(job,))])

    [problem] = update_problems(plan("--batch_size 16"), plan("--batch_size 8"))
    assert "Volcano refuses a Job update" in problem


def test_a_claim_that_follows_the_file_system_size_is_caught() -> None:
    def claim(size: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "fsx-claim", "namespace": "training"},
            "spec": {"storageClassName": "", "resources": {"requests": {"storage": size}}},
        }

    assert refused_update(claim("1200Gi"), claim("2400Gi")) == [
        "spec.resources of a claim without an expandable StorageClass is immutable"
    ]


def test_a_volume_whose_source_changes_is_caught_and_its_capacity_is_not() -> None:
    def volume(handle: str, size: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "fsx-pv"},
            "spec": {
                "capacity": {"storage": size},
                "csi": {"driver": "fsx.csi.aws.com", "volumeHandle": handle},
            },
        }

    assert refused_update(volume("fs-1", "1200Gi"), volume("fs-1", "2400Gi")) == []
    assert refused_update(volume("fs-1", "1200Gi"), volume("fs-2", "1200Gi")) == [
        "spec.csi of a PersistentVolume is immutable"
    ]


def test_a_batch_job_template_change_is_caught() -> None:
    def job(image: str) -> dict[str, Any]:
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "bert-data-staging", "namespace": "training"},
            "spec": {"backoffLimit": 3, "template": {"spec": {"containers": [{"image": image}]}}},
        }

    assert refused_update(job("a.io/x:1"), job("a.io/x:2")) == ["spec.template of a Job is immutable"]


def test_a_statefulset_takes_a_new_template_and_size_but_not_a_new_service_or_policy() -> None:
    """The team's etcd (k8s_charts/teams/etcd.py): a new image or member count is a rolling update; its
    peer Service's name and its Parallel start are fixed once the StatefulSet exists."""
    etcd = deployed_plan(data(DEFAULT_CONFIG)).step("etcd")
    assert isinstance(etcd, ManifestSet)
    [old] = [dict(m) for m in etcd.manifests if m["kind"] == "StatefulSet"]
    updated = copy.deepcopy(old)
    updated["spec"]["replicas"] = 5
    updated["spec"]["template"]["spec"]["containers"][0]["image"] = "quay.io/coreos/etcd:v3.5.34"
    assert refused_update(old, updated) == []
    for field, value in (("serviceName", "etcd"), ("podManagementPolicy", "OrderedReady")):
        changed = copy.deepcopy(old)
        changed["spec"][field] = value
        assert refused_update(old, changed) == [f"spec.{field} of a StatefulSet is immutable"]


def test_objects_left_behind_or_deleted_by_a_replaced_resource_are_caught() -> None:
    policy = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "p", "namespace": "n"},
    }
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "n"}, "spec": {}}
    before = KubernetesLayerPlan.of([ManifestSet(name="s", manifests=(policy, job))])
    # Dropped from a kept resource: a Job is pruned, a NetworkPolicy is not.
    [left] = update_problems(before, KubernetesLayerPlan.of([ManifestSet(name="s", manifests=())]))
    assert "left behind" in left and "NetworkPolicy" in left
    # Moved to a new resource while the old one is deleted: the deletion removes it.
    moved = KubernetesLayerPlan.of([ManifestSet(name="s", identity="2", manifests=(job,))])
    assert any("deletes Job n/j" in problem for problem in update_problems(before, moved))


@pytest.mark.parametrize("config_data", [DEFAULT_ON, EXAMPLE], ids=["default", "example"])
def test_the_stacks_plan_is_the_review_plan_with_the_file_systems_values_filled_in(
    config_data: dict[str, Any],
) -> None:
    """The stack renders the charts once (for review) and fills in the file system's deploy-time
    values; that must be exactly what rendering with those values gives."""
    config = parse_config(config_data)
    values = {"file_system_id": "fs-0abc", "dns_name": "fs-0abc.fsx.example", "mount_name": "m0abc"}
    filled = applied_plan(review_plan(config), **values)
    rendered = kubernetes_plan(config, file_system=file_system_values(config, **values))
    assert json.dumps(filled, default=vars, sort_keys=True) == json.dumps(
        rendered, default=vars, sort_keys=True
    )
    assert "fs-0abc" in json.dumps(filled, default=vars)


# --- The node groups' size (CloudFormation) ---------------------------------------------------------


def _trainium_group_change(**group: Any) -> dict[str, Any]:
    config_data = data(DEFAULT_CONFIG)
    config_data["trainium"]["node_groups"][0].update(group)
    return config_data


def test_changing_min_size_or_max_size_never_resizes_a_node_group() -> None:
    """The template's DesiredSize is the count the group runs (a deploy-time attribute): new bounds,
    and a new desired_size, leave it as it is (tests/constructs_trn/test_node_group_size.py reads the count)."""
    base = _trainium_group_change(min_size=0, desired_size=1, max_size=2)
    templates = {
        name: synthesize(parse_config(config_data)).template.to_json()
        for name, config_data in {
            "base": base,
            "min": _trainium_group_change(min_size=1, desired_size=1, max_size=2),
            "max": _trainium_group_change(min_size=0, desired_size=1, max_size=6),
            "desired": _trainium_group_change(min_size=0, desired_size=2, max_size=2),
        }.items()
    }
    scaling = [
        resource["Properties"]["ScalingConfig"]
        for resource in templates["max"]["Resources"].values()
        if resource["Type"] == "AWS::EKS::Nodegroup" and resource["Properties"]["AmiType"].endswith("NEURON")
    ]
    assert [(config["MinSize"], config["MaxSize"]) for config in scaling] == [(0, 6)]
    assert "Fn::GetAtt" in scaling[0]["DesiredSize"]

    def size_properties(template: dict[str, Any]) -> dict[str, Any]:
        [size] = [r for r in template["Resources"].values() if r["Type"] == "Custom::TrainiumNodeGroupSize"]
        properties: dict[str, Any] = size["Properties"]
        return properties

    for change in ("min", "max", "desired"):
        assert node_group_resizes(templates["base"], templates[change]) == [], change
        assert node_group_resizes(templates[change], templates["base"]) == [], change
        # The size resource changes with them, so CloudFormation reads the count again before it
        # updates the group.
        assert size_properties(templates[change]) != size_properties(templates["base"]), change


def test_the_rule_sees_a_desired_size_that_appears_in_the_template() -> None:
    """This stack's templates before had no DesiredSize on Trainium groups: adding one resizes once."""
    before = {
        "Resources": {"G": {"Type": "AWS::EKS::Nodegroup", "Properties": {"ScalingConfig": {"MinSize": 0}}}}
    }
    after = copy.deepcopy(before)
    after["Resources"]["G"]["Properties"]["ScalingConfig"]["DesiredSize"] = 0
    assert node_group_resizes(before, after) == ["G: DesiredSize None -> 0 resizes the group"]
    assert node_group_resizes(after, before) == []  # removed: "no action occurs"
