"""DRA node groups (issue 32) under the real API server, controller manager, scheduler, Volcano 1.15.1
and cluster autoscaler: the drivers' objects as rendered, their slices as the drivers would publish
them (tests/cluster/dra.py, the stand-in, and what it stands in for), and what the real components
decide about claims of connected Neuron devices with their EFA interfaces.

The configuration (``DRA``): beside the default's device-plugin group ``trn1-32xl``, two ``devices:
dra`` groups, ``trn1-dra`` (trn1.32xlarge) and ``trn2-dra`` (trn2.48xlarge, LNC 2), each with one
warm node (``min_size`` 1: cluster_facts/dra.py ``AUTOSCALER_FROM_ZERO_ISSUE``). Teams: ``training``
(queue ``test``) on both DRA groups with a quota of 32 Neuron devices; ``research`` on ``trn1-dra``
alone (no quota: its queue's capability, 2 nodes' worth of devices, decides); ``vision`` on the
device-plugin group only; ``ultra`` on ``trn2u-dra`` (trn2u.48xlarge, the UltraServer node: its
nodes are added by the test that uses them), whose pods take their node in two claims. A tainted
device is tests/cluster/test_dra_device_taints.py's.

The API server serves ``resource.k8s.io/v1beta1`` for the module (``API_VERSIONS``): the tier's
autoscaler, release 1.33.0, reads DRA objects only at v1beta1 (simulator/dynamicresources at that
release); EKS serves that version (its 1.33 release enabled "the Dynamic Resource Allocation beta
Kubernetes API", and EKS keeps the beta APIs it served). No feature gate is changed.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

import pytest
import yaml

from cluster_facts.dra import (
    CLAIM_DEVICE_LIMIT,
    DEVICES_LABEL,
    EFA_DEVICE_CLASS,
    NEURON_DEVICE_CLASS,
    POD_DEVICE_CLAIM,
    POD_EFA_CLAIM,
    ULTRASERVER_MODE,
    device_group_attribute,
    device_quota_resource,
    queue_device_resource,
)
from cluster_facts.kubernetes_names import (
    INSTANCE_FAMILY_LABEL,
    INSTANCE_TYPE_LABEL,
    NEURON_RESOURCE,
    team_rbac_group,
)
from cluster_facts.kubernetes_plan import ManifestSet
from config import StackConfig, parse_config
from k8s_charts.checks.fabric_check import job_name as fabric_job_name
from k8s_charts.devices import efa_device_plugin, efa_dra_driver, neuron_device_plugin, neuron_dra_driver
from k8s_charts.devices.dra_admission import DRIVER_POLICIES, OBJECTS_POLICY, TEAM_CLAIMS_POLICY
from tests.cluster.autoscaler import MIN_COUNT_ANNOTATION, TEST_TIMINGS, kwok_templates, start_autoscaler
from tests.cluster.control_plane import ControlPlane, shortened_watchdog_args
from tests.cluster.dra import (
    DriverStandIn,
    UltraServerNode,
    claims_of,
    device_group_id,
    efa_slice,
    kubelet_refusals,
    neuron_slice,
)
from tests.cluster.nodes import group_nodes
from tests.cluster.plans import config_data, plan_of
from tests.cluster.processes import StartupError
from tests.cluster.runs import RunHandle, end_runs, run_handle
from tests.cluster.scheduler_log import SchedulerLog
from tests.conftest import DEFAULT_CONFIG
from tests.torchx_dryrun import NATIVE_IMAGE, run_torchx, torchx_available
from tests.yaml_edits import with_change

TRAINING, RESEARCH, VISION, ULTRA = "training", "research", "vision", "ultra"
TRN1, TRN2, TRN2U, PLUGIN_GROUP = "trn1-dra", "trn2-dra", "trn2u-dra", "trn1-32xl"
NATIVE_AMI = {
    "ami_release": "1.36.5-20261103",
    "ami_facts": {"neuron_driver": "2.31.7.0", "containerd": "2.2.5"},
}
"""trn2u runs only the native stack, whose driver no AMI release of the offline table brings: declared
as config/native.example.yaml declares it."""
NATIVE_RUN_IMAGE = "111122223333.dkr.ecr.us-west-2.amazonaws.com/trainium/training:torchneuron-sdk2.33.0-1"


def _group(name: str, instance_type: str, max_size: int) -> dict[str, Any]:
    return {
        "name": name,
        "instance_type": instance_type,
        "devices": "dra",
        "min_size": 1,
        "desired_size": 1,
        "max_size": max_size,
        "capacity_type": "on_demand",
        "capacity_reservation_id": None,
        "placement_group": True,
    }


DRA = with_change(
    with_change(
        with_change(
            config_data(DEFAULT_CONFIG),
            "trainium.node_groups",
            [
                config_data(DEFAULT_CONFIG)["trainium"]["node_groups"][0],
                _group(TRN1, "trn1.32xlarge", 2),
                _group(TRN2, "trn2.48xlarge", 3),
                {**_group(TRN2U, "trn2u.48xlarge", 2), **NATIVE_AMI},
            ],
        ),
        "teams",
        [
            {"name": TRAINING, "queue": "test", "node_groups": [TRN1, TRN2], "quota": {"neuron_devices": 32}},
            {"name": RESEARCH, "node_groups": [TRN1]},
            {"name": VISION, "node_groups": [PLUGIN_GROUP]},
            {"name": ULTRA, "node_groups": [TRN2U]},
        ],
    ),
    "runs",
    [
        {"name": "bert-large", "preset": "bert-large", "team": TRAINING, "node_group": TRN1, "nodes": 2},
        {"name": "trn2-run", "preset": "bert-large", "team": TRAINING, "node_group": TRN2, "nodes": 1},
        {"name": "trn2-gang", "preset": "bert-large", "team": TRAINING, "node_group": TRN2, "nodes": 2},
        {"name": "research-1", "preset": "bert-large", "team": RESEARCH, "node_group": TRN1, "nodes": 2},
        {"name": "research-2", "preset": "bert-large", "team": RESEARCH, "node_group": TRN1, "nodes": 1},
        {
            "name": "trn2u-gang",
            "preset": "native-fsdp2",
            "team": ULTRA,
            "node_group": TRN2U,
            "nodes": 2,
            "image": NATIVE_RUN_IMAGE,
        },
    ],
)
CONFIG = parse_config(DRA)
API_VERSIONS = ("resource.k8s.io/v1beta1=true",)
TRN1_NODES = [f"{TRN1}-{index}" for index in range(3)]
"""The group at max_size, and one beyond (a manual scale-up)."""
TRN2_NODES = [f"{TRN2}-{index}" for index in range(2)]
TRN2U_NODES = [f"{TRN2U}-{index}" for index in range(2)]
PLUGIN_NODE = f"{PLUGIN_GROUP}-dra-0"


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """``DRA`` deployed, with the module's API versions served."""
    with control_plane.reconfigured(feature_gates={}, runtime_config=API_VERSIONS):
        control_plane.apply_plan(plan_of(DRA))
        try:
            yield control_plane
        finally:
            end_runs(control_plane, [team.name for team in CONFIG.teams])
            control_plane.remove_nodes([*TRN1_NODES, *TRN2_NODES, *TRN2U_NODES, PLUGIN_NODE])


@pytest.fixture(scope="module")
def stand_in(cluster: ControlPlane) -> DriverStandIn:
    return DriverStandIn(cluster)


@pytest.fixture(scope="module")
def nodes(cluster: ControlPlane, stand_in: DriverStandIn) -> dict[str, list[str]]:
    """The DRA groups' nodes, checked, each with its two slices published by its drivers' stand-in;
    one node of the device-plugin group."""
    cluster.add_nodes(group_nodes(CONFIG, TRN1, TRN1_NODES[:2]))
    cluster.add_nodes(group_nodes(CONFIG, TRN2, TRN2_NODES[:1]))
    cluster.add_nodes(group_nodes(CONFIG, PLUGIN_GROUP, [PLUGIN_NODE]))
    for name in TRN1_NODES[:2]:
        stand_in.publish(name, instance_type="trn1.32xlarge", family="trn1")
    stand_in.publish(TRN2_NODES[0], instance_type="trn2.48xlarge", family="trn2")
    return {TRN1: TRN1_NODES[:2], TRN2: TRN2_NODES[:1]}


@pytest.fixture(autouse=True)
def _runs_ended(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test on the cluster, the runs it left ended, also when it failed: a Job left would
    hold the next test's nodes, quota or name."""
    yield
    if "cluster" not in request.fixturenames:
        return
    plane: ControlPlane = request.getfixturevalue("cluster")
    teams = [team.name for team in CONFIG.teams]
    jobs = plane.kubectl.json("get", "jobs.batch.volcano.sh", "-A")["items"]
    if any(job["metadata"]["namespace"] in teams for job in jobs):
        end_runs(plane, teams)


def _runs(plane: ControlPlane) -> dict[str, RunHandle]:
    plan = plan_of(DRA)
    return {run.name: run_handle(plane, plan, run.name) for run in CONFIG.runs}


def _fresh(plane: ControlPlane, run: str, name: str) -> RunHandle:
    """``run`` of the plan as a Job named ``name``, with the claim template it renders. A Job applied
    again under the name of one Volcano's controller is still dropping can lose its place in the
    controller's cache and never get a pod (``RunHandle.delete``); only the rerun tests mean to
    apply a name again."""
    handle = _runs(plane)[run]
    job = handle.copy_as(name).job
    others = tuple(m for m in handle.step.manifests if m["kind"] != "Job")
    return RunHandle(plane, ManifestSet(name=name, manifests=(*others, job)))


def _daemon_set_nodes(plane: ControlPlane, namespace: str, name: str) -> set[str]:
    pods = plane.kubectl.json("get", "pods", "-n", namespace)["items"]
    return {
        p["spec"].get("nodeName", "")
        for p in pods
        if p["metadata"].get("ownerReferences", [{}])[0].get("name") == name and p["spec"].get("nodeName")
    }


def test_the_stand_in_computes_the_device_groups_a_real_driver_published() -> None:
    # trn1.32xlarge EFA 0000:10:19.0 (DRANET's captured slice) serves Neuron devices 12 and 13;
    # trn2.48xlarge Neuron devices 0-3 (the Neuron driver's captured slice).
    assert device_group_id("trn1", 12, 4) == "178a9e264a26793e"
    assert device_group_id("trn1", 12, 8) == "aa86c05423d6e8cd"
    assert device_group_id("trn1", 12, 16) == "fb838249c99a6341"
    assert device_group_id("trn2", 0, 4) == "13713e551cd37c19"


WATCHDOG_THRESHOLD_MINUTES = 0.2
WATCHDOG_INTERVAL_SECONDS = 2.0
TEMPLATE_STABILIZATION_SECONDS = 70
"""The minute of mixed_nodeinfos_processor.go ``stabilizationDelay``, and a few of the autoscaler's 2 s loops."""
FROM_ZERO_LOOPS_SECONDS = 20
"""How long the test watches the autoscaler decline a group with no node: ten of its 2 s loops."""


def _ready_since(plane: ControlPlane, name: str) -> float:
    """When the node's Ready condition last turned (seconds since the epoch)."""
    node = plane.kubectl.json("get", "node", name)
    [ready] = [c for c in node["status"]["conditions"] if c["type"] == "Ready" and c["status"] == "True"]
    return datetime.fromisoformat(ready["lastTransitionTime"]).timestamp()


def _publish_on_register(stand_in: DriverStandIn) -> Callable[[Mapping[str, Any]], None]:
    def publish(node: Mapping[str, Any]) -> None:
        labels = node["metadata"]["labels"]
        if labels.get(DEVICES_LABEL) == "dra":
            stand_in.publish(
                node["metadata"]["name"],
                instance_type=labels[INSTANCE_TYPE_LABEL],
                family=labels[INSTANCE_FAMILY_LABEL],
            )

    return publish


def _from_zero_templates(config: StackConfig) -> dict[str, Any]:
    """The kwok provider's groups at the minimum 0: it refuses at start a group whose nodes are fewer
    than its minimum (kwok_provider.go: "desired-count '0' cannot be lesser than min-count '1'"),
    where EKS would have launched the ``min_size`` node; the test adds that node itself."""
    templates = kwok_templates(config)
    for template in templates["items"]:
        template["metadata"]["annotations"][MIN_COUNT_ANNOTATION] = "0"
    return templates


def test_the_autoscaler_never_scales_a_dra_group_up_from_zero_and_does_from_a_node_it_copies(
    cluster: ControlPlane, stand_in: DriverStandIn
) -> None:
    """The real autoscaler (1.33.0, its kwok provider for AWS's), ``--enable-dynamic-resource-allocation``
    from the Helm release: a gang of two on trn2-dra with no node is declined, loop after loop, its
    template node holding no device ("cannot allocate all claims": cluster_facts/dra.py
    ``AUTOSCALER_FROM_ZERO_ISSUE``); with one node of the group (the ``min_size`` 1 the configuration
    requires) the template is that node's copy, slices included, and once the gang watchdog has
    cordoned the idle node (volcano-sh/volcano#3976, as in test_scale_from_zero.py) the autoscaler
    adds the whole gang, whose claims Volcano allocates on the new nodes' devices."""
    run = _runs(cluster)["trn2-gang"]
    autoscaler = start_autoscaler(
        cluster,
        CONFIG,
        # The warm node is the group's minimum on EKS; the kwok provider's minimum is 0 here
        # (_from_zero_templates), so scale-down is held off for the scenario's few minutes.
        overrides={**TEST_TIMINGS, "scale-down-unneeded-time": "30m"},
        templates=_from_zero_templates,
        on_register=_publish_on_register(stand_in),
    )
    idle = f"{TRN2}-idle-0"
    try:
        assert "--enable-dynamic-resource-allocation=true" in autoscaler.args
        run.apply()
        cluster.wait_for(
            lambda: (
                'predicate "DynamicResources" didn\'t pass (predicateReasons=[cannot allocate all claims]'
                in autoscaler.log()
            ),
            timeout=60,
            what="the autoscaler's simulation finding no device on the group's template node",
        )
        time.sleep(FROM_ZERO_LOOPS_SECONDS)
        assert autoscaler.nodes(TRN2) == [], "a node added for claims the template could not hold"
        assert any(
            "cannot allocate all claims" in message
            for message in _events(cluster, TRAINING, "NotTriggerScaleUp")
        )
        run.delete()

        (node,) = group_nodes(CONFIG, TRN2, [idle])
        node["spec"]["providerID"] = f"kwok:{idle}"  # the provider's own, as test_scale_from_zero.py says
        cluster.add_nodes([node])
        stand_in.publish(idle, instance_type="trn2.48xlarge", family="trn2")
        cluster.watchdog_args_override = lambda args: shortened_watchdog_args(
            args,
            threshold_minutes=WATCHDOG_THRESHOLD_MINUTES,
            interval_seconds=WATCHDOG_INTERVAL_SECONDS,
            # The configuration's ceiling (--stuck-max-minutes, 10): the watchdog refuses more.
            stuck_minutes=CONFIG.stuck_run_ceiling_minutes or 10,
        )
        cluster.start_watchdog()
        # The autoscaler copies a node into its group's template only once it has been Ready for a
        # minute ("stable", mixed_nodeinfos_processor.go isNodeGoodTemplateCandidate), and keeps the
        # copy in its cache after the node is cordoned: a warm node is older than that.
        time.sleep(max(0.0, _ready_since(cluster, idle) + TEMPLATE_STABILIZATION_SECONDS - time.time()))
        run.apply()

        def placed() -> list[dict[str, Any]] | None:
            return run.running()

        pods = cluster.wait_for(
            placed, timeout=180, what="the gang running on the nodes the autoscaler added"
        )
        added = {n["metadata"]["name"] for n in autoscaler.nodes(TRN2)} - {idle}
        assert len(added) >= 1 and {p["spec"]["nodeName"] for p in pods} <= added | {idle}
        assert f"Scale-up: setting group {TRN2} size to" in autoscaler.log()
        assert kubelet_refusals(cluster, pods) == []
        assert autoscaler.agent.errors == []
    finally:
        cluster.watchdog_args_override = None
        cluster.start_watchdog()
        end_runs(cluster, [TRAINING])
        autoscaler.stop()
        cluster.remove_nodes([idle])


def test_the_drivers_run_only_on_dra_nodes_and_the_device_plugins_never_there(
    cluster: ControlPlane, nodes: dict[str, list[str]]
) -> None:
    dra_nodes = {*nodes[TRN1], *nodes[TRN2]}
    classes = {c["metadata"]["name"] for c in cluster.kubectl.json("get", "deviceclasses")["items"]}
    assert classes == {NEURON_DEVICE_CLASS, EFA_DEVICE_CLASS}
    namespace = neuron_dra_driver.NAMESPACE

    def placed() -> bool:
        # The pods of nodes an earlier test deleted (the autoscaler's) linger until the pod garbage
        # collector's orphan pass (its quarantine: about a minute); only live nodes' pods count.
        live = {n["metadata"]["name"] for n in cluster.kubectl.json("get", "nodes")["items"]}
        return (
            _daemon_set_nodes(cluster, namespace, neuron_dra_driver.NAME) & live == dra_nodes
            and _daemon_set_nodes(cluster, namespace, efa_dra_driver.NAME) & live == dra_nodes
            and _daemon_set_nodes(cluster, namespace, neuron_device_plugin.NAME) & live == {PLUGIN_NODE}
            and _daemon_set_nodes(cluster, namespace, efa_device_plugin.NAME) & live == {PLUGIN_NODE}
        )

    cluster.wait_for(
        placed, timeout=60, what="the DRA drivers on the DRA nodes, the device plugins elsewhere"
    )
    slices = cluster.kubectl.json("get", "resourceslices")["items"]
    published = {(s["spec"]["nodeName"], s["spec"]["driver"]) for s in slices}
    assert published == {(node, driver) for node in dra_nodes for driver in ("neuron.aws.com", "dra.net")}


def test_a_driver_writes_only_its_own_drivers_slices_of_its_own_node(
    cluster: ControlPlane, nodes: dict[str, list[str]], stand_in: DriverStandIn
) -> None:
    mine, other = nodes[TRN1]
    node = cluster.kubectl.json("get", "node", other)

    neuron = stand_in.as_driver(neuron_dra_driver.NAME, mine)
    foreign = neuron_slice(node, instance_type="trn1.32xlarge", family="trn1")
    refused = neuron("create", "-f", "-", input=json.dumps(foreign), check=False)
    assert refused.returncode != 0 and DRIVER_POLICIES["neuron.aws.com"] in refused.stderr, refused.stderr
    own = cluster.kubectl.json("get", "node", mine)
    wrong_driver = efa_slice(own, family="trn1")
    refused = neuron("create", "-f", "-", input=json.dumps(wrong_driver), check=False)
    assert refused.returncode != 0 and "only ResourceSlices of driver neuron.aws.com" in refused.stderr
    # Another node's labels, through the driver's nodes grant.
    refused = neuron("label", "node", other, "neuron.amazonaws.com/probe=1", check=False)
    assert refused.returncode != 0 and "only its own node" in refused.stderr, refused.stderr
    # Volcano's scheduler holds `create` on resourceslices and deviceclasses (its chart's RBAC).
    scheduler = cluster.as_service_account("volcano-system", "volcano-scheduler")
    refused = scheduler("create", "-f", "-", input=json.dumps(foreign), check=False)
    assert refused.returncode != 0 and OBJECTS_POLICY in refused.stderr, refused.stderr
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "every-device"},
        "spec": {},
    }
    refused = scheduler("create", "-f", "-", input=json.dumps(device_class), check=False)
    assert refused.returncode != 0 and OBJECTS_POLICY in refused.stderr, refused.stderr


def _connected(plane: ControlPlane, claim: dict[str, Any], size: int) -> set[str]:
    """The ``devicegroup<size>_id`` values of the claim's allocated devices (one value: connected)."""
    attribute = device_group_attribute(size)
    values = set()
    for result in claim["status"]["allocation"]["devices"]["results"]:
        slices = plane.kubectl.json("get", "resourceslices")["items"]
        for published in slices:
            if (
                published["spec"]["driver"] != result["driver"]
                or published["spec"]["pool"]["name"] != result["pool"]
            ):
                continue
            for device in published["spec"]["devices"]:
                if device["name"] == result["device"] and attribute in device.get("attributes", {}):
                    values.add(device["attributes"][attribute]["string"])
    return values


def _results(claim: dict[str, Any]) -> dict[str, list[str]]:
    by_request: dict[str, list[str]] = {}
    for result in claim["status"]["allocation"]["devices"]["results"]:
        by_request.setdefault(result["request"], []).append(result["device"])
    return by_request


def test_a_gang_of_connected_claims_is_allocated_whole_nodes_and_reserved_for_its_pods(
    cluster: ControlPlane, nodes: dict[str, list[str]]
) -> None:
    run = _runs(cluster)["bert-large"]
    run.apply()
    pods = _running(cluster, run, timeout=90, what="bert-large's gang running on the trn1 DRA nodes")
    assert {p["spec"]["nodeName"] for p in pods} == set(nodes[TRN1])
    assert kubelet_refusals(cluster, pods) == []
    for pod in pods:
        [claim] = claims_of(cluster, pod)
        results = _results(claim)
        assert len(results["neurons"]) == 16 and len(results["efa"]) == 8
        assert len(_connected(cluster, claim, 16)) == 1, (
            "the node's 16 devices and its EFA, one connected set"
        )
        assert claim["status"]["allocation"]["devices"]["results"][0]["pool"] == pod["spec"]["nodeName"]
    run.finish()
    cluster.wait_for(
        lambda: run.job_status().get("state", {}).get("phase") == "Completed", timeout=60, what="done"
    )
    end_runs(cluster, [TRAINING])


def _state(plane: ControlPlane, namespace: str) -> str:
    """The namespace's runs, claims, quota and events: what a wait that gave up saw."""
    objects = plane.kubectl(
        "get", "vcjob,podgroup,pods,resourceclaims,resourcequota", "-n", namespace, "-o", "wide", check=False
    )
    quota = plane.kubectl("describe", "resourcequota", "-n", namespace, check=False)
    events = plane.kubectl("get", "events", "-n", namespace, "--sort-by=.lastTimestamp", check=False)
    return f"{objects.stdout}{objects.stderr}\n{quota.stdout}\n{events.stdout[-6000:]}"


def _running(plane: ControlPlane, run: RunHandle, *, timeout: float, what: str) -> list[dict[str, Any]]:
    """``run``'s pods once all run; if they do not within ``timeout``, an error with ``_state``."""
    try:
        pods: list[dict[str, Any]] = plane.wait_for(run.running, timeout=timeout, what=what)
    except StartupError as error:
        raise AssertionError(f"{error}\n{_state(plane, run.namespace)}") from error
    return pods


def test_a_dra_groups_fabric_check_claims_its_nodes_whole_in_the_platform_namespace(
    cluster: ControlPlane, nodes: dict[str, list[str]]
) -> None:
    """The fabric check of trn1-dra as `make fabric-check` applies it (its rendered Job; the access
    step with the group's claim templates in the platform namespace is the plan's): Volcano's
    controller makes its pods and their claims from those templates, the scheduler allocates each
    worker a whole node's connected devices, and the gang (two workers, the launcher) runs. With the
    device plugins' limits it rendered before, the workers never scheduled: no DRA node has them."""
    [step] = [step for step in plan_of(DRA).manifest_sets() if step.name == fabric_job_name(TRN1)]
    [job] = step.manifests
    run = RunHandle.of_job(cluster, job)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(job))
    try:
        pods = _running(cluster, run, timeout=90, what="trn1-dra's fabric check running")
        workers = [p for p in pods if p["spec"].get("resourceClaims")]
        assert len(workers) == 2 and len(pods) == 3
        assert {p["spec"]["nodeName"] for p in workers} == set(nodes[TRN1])
        assert kubelet_refusals(cluster, workers) == []
        for pod in workers:
            [claim] = claims_of(cluster, pod)
            results = _results(claim)
            assert len(results["neurons"]) == 16 and len(results["efa"]) == 8
            assert len(_connected(cluster, claim, 16)) == 1
    finally:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=true", input=json.dumps(job))


def _events(plane: ControlPlane, namespace: str, reason: str) -> list[str]:
    found = plane.kubectl.json("get", "events", "-n", namespace, f"--field-selector=reason={reason}")
    return [str(event["message"]) for event in found["items"]]


def _phase(run: RunHandle) -> str:
    return str(run.job_status().get("state", {}).get("phase", ""))


def test_a_claim_over_the_teams_device_quota_waits_and_the_job_lives_then_runs_with_its_lnc(
    cluster: ControlPlane, nodes: dict[str, list[str]]
) -> None:
    """training's quota of 32 Neuron devices: bert-large's two claims take it all; trn2-run's claim is
    refused by the API server's quota, its pod waits without a claim, and its Job is not ended (a
    refused *pod* ends a Volcano Job: k8s_charts/teams/team_quota.py); once bert-large ends the
    resourceclaim controller's retry makes the claim, and the trn2 run gets its node with LNC 2."""
    first, waiting = _fresh(cluster, "bert-large", "bert-large-quota"), _runs(cluster)["trn2-run"]
    first.apply()
    _running(cluster, first, timeout=90, what="bert-large running")
    waiting.apply()
    refusal = f"exceeded quota: team-quota, requested: {device_quota_resource(NEURON_DEVICE_CLASS)}=16"
    cluster.wait_for(
        lambda: any(
            refusal in message for message in _events(cluster, TRAINING, "FailedResourceClaimCreation")
        ),
        timeout=60,
        what="the quota refusing trn2-run's claim",
    )
    time.sleep(15)  # Volcano's job controller retries a failed pod creation for about 3 minutes, not this
    [pod] = waiting.pods()
    assert not pod["spec"].get("nodeName") and claims_of(cluster, pod) == []
    assert _phase(waiting) not in ("Failed", "Terminated", "Aborted"), waiting.job_status()
    first.finish()
    end_runs_of(cluster, first)
    pods = _running(cluster, waiting, timeout=120, what="trn2-run running once the quota frees")
    assert {p["spec"]["nodeName"] for p in pods} == set(nodes[TRN2])
    assert kubelet_refusals(cluster, pods) == []
    [claim] = claims_of(cluster, pods[0])
    [config] = claim["status"]["allocation"]["devices"]["config"]
    assert config["source"] == "FromClaim" and config["requests"] == ["neurons"]
    assert config["opaque"]["parameters"] == {
        "apiVersion": "neuron.aws.com/v1",
        "kind": "NeuronConfig",
        "logicalNeuronCore": 2,
    }
    results = _results(claim)
    assert len(results["neurons"]) == 16 and len(results["efa"]) == 16
    assert len(_connected(cluster, claim, 16)) == 1
    end_runs(cluster, [TRAINING])


def end_runs_of(plane: ControlPlane, run: RunHandle) -> None:
    plane.wait_for(lambda: _phase(run) == "Completed", timeout=60, what=f"{run.name} completed")
    run.delete()


def test_a_queue_counts_devices_and_holds_a_gang_beside_a_free_node(
    cluster: ControlPlane, nodes: dict[str, list[str]], stand_in: DriverStandIn
) -> None:
    """research's queue holds trn1-dra at max_size, 2 nodes: 32 Neuron devices and 16 EFA interfaces,
    counted by DeviceClass. research-1 takes them; research-2 waits although a third node (beyond
    max_size, a manual scale-up) is free: Volcano's capacity plugin finds the queue's DRA devices
    insufficient before anything else (capacity.go ``queueAllocatableWithReserved``)."""
    queue = cluster.kubectl.json("get", "queues.scheduling.volcano.sh", RESEARCH)["spec"]["capability"]
    assert queue[queue_device_resource(NEURON_DEVICE_CLASS)] == "32"
    assert queue[queue_device_resource(EFA_DEVICE_CLASS)] == "16"
    extra = TRN1_NODES[2]
    cluster.add_nodes(group_nodes(CONFIG, TRN1, [extra]))
    stand_in.publish(extra, instance_type="trn1.32xlarge", family="trn1")
    runs = _runs(cluster)
    first, held = runs["research-1"], runs["research-2"]
    try:
        first.apply()
        _running(cluster, first, timeout=90, what="research-1 running")
        log = SchedulerLog(cluster)
        held.apply()
        cluster.wait_for(
            lambda: f"Queue <{RESEARCH}> DRA resource insufficient for candidate" in log.text(),
            timeout=60,
            what="the capacity plugin refusing research-2 by its queue's devices",
        )
        log.wait_sessions(5)
        [pod] = held.pods()
        assert not pod["spec"].get("nodeName"), "held by the queue beside a free node"
        first.finish()
        end_runs_of(cluster, first)
        pods = _running(cluster, held, timeout=90, what="research-2 running once its queue frees")
        assert kubelet_refusals(cluster, pods) == []
    finally:
        end_runs(cluster, [RESEARCH])
        cluster.remove_nodes([extra])


def test_a_retry_and_a_rerun_get_new_claims_allocated_again(
    cluster: ControlPlane, nodes: dict[str, list[str]]
) -> None:
    """A worker fails: Volcano's RestartJob deletes the gang, the resourceclaim controller deletes its
    claims with the pods and makes new ones for the new pods, which the scheduler allocates and
    reserves for them. A rerun (the Job deleted and applied again, docs/runs.md) does the same."""
    run = _fresh(cluster, "bert-large", "bert-large-retry")
    run.apply()
    first = _running(cluster, run, timeout=90, what="bert-large running")
    before = {c["metadata"]["uid"] for pod in first for c in claims_of(cluster, pod)}
    cluster.kubectl(
        "annotate",
        "pod",
        first[0]["metadata"]["name"],
        "-n",
        TRAINING,
        "cluster-test/exit-code=1",
        "--overwrite",
    )

    def restarted() -> list[dict[str, Any]] | None:
        pods = run.running()
        if pods and {p["metadata"]["uid"] for p in pods}.isdisjoint(p["metadata"]["uid"] for p in first):
            return pods
        return None

    second = cluster.wait_for(restarted, timeout=120, what="the gang restarted by Volcano (RestartJob)")
    assert int(run.job_status().get("version", 0)) >= 1
    after = {c["metadata"]["uid"] for pod in second for c in claims_of(cluster, pod)}
    assert len(after) == 2 and after.isdisjoint(before)
    assert kubelet_refusals(cluster, second) == []
    cluster.wait_for(
        lambda: (
            not before
            & {
                c["metadata"]["uid"]
                for c in cluster.kubectl.json("get", "resourceclaims", "-n", TRAINING)["items"]
            }
        ),
        timeout=60,
        what="the first attempt's claims deleted with its pods",
    )
    run.delete()
    run.apply()
    third = _running(cluster, run, timeout=120, what="the rerun running")
    rerun = {c["metadata"]["uid"] for pod in third for c in claims_of(cluster, pod)}
    assert len(rerun) == 2 and rerun.isdisjoint(after)
    assert kubelet_refusals(cluster, third) == []
    end_runs(cluster, [TRAINING])


def _vision_member(plane: ControlPlane) -> Any:
    return plane.impersonate("vera", [team_rbac_group(VISION)])


def test_a_team_uses_neither_another_teams_claims_nor_device_classes_it_has_no_group_for(
    cluster: ControlPlane, nodes: dict[str, list[str]]
) -> None:
    run = _fresh(cluster, "bert-large", "bert-large-team")
    run.apply()
    pods = _running(cluster, run, timeout=90, what="bert-large running")
    claim = claims_of(cluster, pods[0])[0]["metadata"]["name"]
    member = _vision_member(cluster)
    assert not member.can_i("get", "resourceclaims", namespace=TRAINING)
    assert not member.can_i("get", "resourceclaimtemplates", namespace=TRAINING)
    # vision has no dra group: its namespace may name no DeviceClass (admission), and its quota holds
    # none of either class.
    template: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "borrowed", "namespace": VISION},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "n", "exactly": {"deviceClassName": NEURON_DEVICE_CLASS}}]}
            }
        },
    }
    refused = member("create", "-f", "-", input=json.dumps(template), check=False)
    assert refused.returncode != 0 and TEAM_CLAIMS_POLICY in refused.stderr, refused.stderr
    quota = cluster.kubectl.json("get", "resourcequota", "team-quota", "-n", VISION)["spec"]["hard"]
    assert quota[device_quota_resource(NEURON_DEVICE_CLASS)] == "0"
    assert quota[device_quota_resource(EFA_DEVICE_CLASS)] == "0"
    # Admin access (every device of a class, in use or not), even in a team with DRA groups: the API
    # server's own validation refuses it first, in a namespace without the admin-access label, which
    # no team namespace carries and no member may set (the team policy refuses it as well).
    admin = copy.deepcopy(template)
    admin["metadata"]["namespace"] = TRAINING
    admin["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
    refused = cluster.kubectl("create", "-f", "-", input=json.dumps(admin), check=False)
    assert refused.returncode != 0 and "admin access to devices requires" in refused.stderr, refused.stderr
    labels = cluster.kubectl.json("get", "namespace", TRAINING)["metadata"]["labels"]
    assert "resource.kubernetes.io/admin-access" not in labels
    assert not cluster.impersonate("tom", [team_rbac_group(TRAINING)]).can_i("patch", "namespaces")
    # A Job of vision's naming training's claim: a pod's claim is looked up in its own namespace.
    job: dict[str, Any] = copy.deepcopy(dict(run.job))
    job["metadata"] = {"name": "borrow-claim", "namespace": VISION}
    job["spec"]["queue"] = VISION
    task = job["spec"]["tasks"][0]
    task["replicas"] = task["minAvailable"] = job["spec"]["minAvailable"] = 1
    task["template"]["spec"]["nodeSelector"] = {"trainium/node-group": PLUGIN_GROUP}
    task["template"]["spec"]["resourceClaims"] = [{"name": "devices", "resourceClaimName": claim}]
    cluster.kubectl("apply", "-f", "-", input=json.dumps(job))
    borrower = RunHandle.of_job(cluster, job)
    cluster.wait_for(borrower.pods, timeout=60, what="vision's pod made")
    SchedulerLog(cluster).wait_sessions(5)
    [pod] = borrower.pods()
    assert not pod["spec"].get("nodeName"), "bound with another namespace's claim"
    owners = [
        r["uid"]
        for r in cluster.kubectl.json("get", "resourceclaim", claim, "-n", TRAINING)["status"]["reservedFor"]
    ]
    assert owners == [pods[0]["metadata"]["uid"]]
    end_runs(cluster, [TRAINING, VISION])


TORCHX_DRA = (
    'torchx run --dryrun --workspace "" -s kubernetes -cfg queue=test,namespace=training '
    f"torchx_trn/components.py:trainium_ddp --team {TRAINING} --node_group {TRN1} --script my_train.py --nnodes 2"
)
TORCHX_OTHER_LNC = (
    'torchx run --dryrun --workspace "" -s kubernetes -cfg queue=test,namespace=training '
    f"torchx_trn/components.py:trainium_native --team {TRAINING} --node_group {TRN2} --image {NATIVE_IMAGE} "
    "--script /data/code/train.py --lnc 1"
)


def test_a_torchx_job_claims_whole_dra_nodes_through_the_teams_template(
    cluster: ControlPlane, nodes: dict[str, list[str]]
) -> None:
    """The real component (the torchx CLI, ``--team``) reads the team's settings from this API server
    with a team member's credentials and renders a gang for trn1-dra: pods that claim their node
    through the namespace's ``trainium-node-trn1-dra`` template and request no extended resource. A
    member creates it; the team policies admit it, Volcano's controller makes the pods and claims,
    the scheduler allocates each a whole node's connected devices, and the Job completes. An LNC the
    trn2-dra template does not configure is refused in one line before anything is built."""
    assert torchx_available() is None, torchx_available()
    groups = [team_rbac_group(TRAINING)]
    env = {"KUBECONFIG": str(cluster.user_kubeconfig("tess", groups))}
    refused = run_torchx(TORCHX_OTHER_LNC, env=env)
    assert refused.returncode != 0
    assert (
        f"--lnc 1: node group '{TRN2}' gives a pod its devices through the ResourceClaimTemplate "
        f"trainium-node-{TRN2}, which configures LNC 2; leave --lnc out or give 2"
    ) in refused.stderr, refused.stderr
    rendered = run_torchx(TORCHX_DRA, env=env)
    assert rendered.returncode == 0, rendered.stderr[-3000:]
    job: dict[str, Any] = yaml.safe_load(rendered.stdout.split("=== SCHEDULER REQUEST ===", 1)[1])
    job["metadata"]["namespace"] = TRAINING
    for task in job["spec"]["tasks"]:
        assert task["template"]["spec"]["resourceClaims"] == [
            {"name": "devices", "resourceClaimTemplateName": f"trainium-node-{TRN1}"}
        ]
        [container] = task["template"]["spec"]["containers"]
        assert container["resources"]["claims"] == [{"name": "devices"}]
        assert NEURON_RESOURCE not in json.dumps(container["resources"]), "a resource no DRA node has"
    run = RunHandle.of_job(cluster, job)
    cluster.impersonate("tess", groups)("create", "-f", "-", input=json.dumps(job))
    try:
        pods = _running(cluster, run, timeout=90, what="the TorchX gang running on the trn1 DRA nodes")
        assert {p["spec"]["nodeName"] for p in pods} == set(nodes[TRN1])
        assert kubelet_refusals(cluster, pods) == []
        for pod in pods:
            [claim] = claims_of(cluster, pod)
            results = _results(claim)
            assert len(results["neurons"]) == 16 and len(results["efa"]) == 8
            assert len(_connected(cluster, claim, 16)) == 1
        run.finish()
        cluster.wait_for(lambda: _phase(run) == "Completed", timeout=60, what="the TorchX job Completed")
    finally:
        end_runs(cluster, [TRAINING])


def _claims_by_name(plane: ControlPlane, pod: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The pod's claims by its name for each (``status.resourceClaimStatuses``)."""
    namespace = pod["metadata"]["namespace"]
    return {
        status["name"]: plane.kubectl.json(
            "get", "resourceclaim", status["resourceClaimName"], "-n", namespace
        )
        for status in pod["status"].get("resourceClaimStatuses", [])
        if "resourceClaimName" in status
    }


def _node_devices(plane: ControlPlane, node: str) -> set[tuple[str, str]]:
    """Every (driver, device) the node's slices publish."""
    slices = plane.kubectl.json("get", "resourceslices")["items"]
    return {
        (published["spec"]["driver"], device["name"])
        for published in slices
        if published["spec"].get("nodeName") == node
        for device in published["spec"]["devices"]
    }


def test_a_trn2u_gang_takes_each_node_whole_in_two_claims(
    cluster: ControlPlane, stand_in: DriverStandIn
) -> None:
    """A trn2u.48xlarge's drivers publish 33 devices (16 Neuron devices, its UltraServer's
    ``neuron_node``, 16 EFA interfaces), one more than a claim may hold: synth refused ``devices:
    dra`` there until each pod took its node in two claims (cluster_facts/dra.py ``NodeDevices.claims``;
    the one-claim refusal by the real scheduler is test_dra_device_taints.py's). Two trn2u nodes of
    one UltraServer, slices published by the drivers' stand-in; the run trn2u-gang (2 nodes, team
    ultra, whose queue counts 17 Neuron-class devices a node): Volcano 1.15.1 binds the gang, and
    each pod's ``devices`` claim holds its node's 16 Neuron devices (connected, LNC 2) and the
    ``neuron_node`` (``UltraServerConfig``), its ``efa`` claim the node's 16 EFA interfaces: all 33
    of the node, each claim within the limit, both reserved for the pod."""
    queue = cluster.kubectl.json("get", "queues.scheduling.volcano.sh", ULTRA)["spec"]["capability"]
    assert queue[queue_device_resource(NEURON_DEVICE_CLASS)] == "34"
    assert queue[queue_device_resource(EFA_DEVICE_CLASS)] == "32"
    cluster.add_nodes(group_nodes(CONFIG, TRN2U, TRN2U_NODES))
    for index, name in enumerate(TRN2U_NODES):
        place = UltraServerNode(server_id="us-0", node_id=index, capacity_block="cr-0123456789abcdef0")
        stand_in.publish(name, instance_type="trn2u.48xlarge", family="trn2u", ultraserver=place)
    run = _runs(cluster)["trn2u-gang"]
    try:
        run.apply()
        pods = _running(cluster, run, timeout=90, what="trn2u-gang running on the trn2u DRA nodes")
        assert {p["spec"]["nodeName"] for p in pods} == set(TRN2U_NODES)
        assert kubelet_refusals(cluster, pods) == []
        for pod in pods:
            node = pod["spec"]["nodeName"]
            claims = _claims_by_name(cluster, pod)
            assert set(claims) == {POD_DEVICE_CLAIM, POD_EFA_CLAIM}
            devices, efa = _results(claims[POD_DEVICE_CLAIM]), _results(claims[POD_EFA_CLAIM])
            assert len(devices["neurons"]) == 16 and devices["ultraserver"] == ["neuron-node"]
            assert len(efa["efa"]) == 16 and set(efa) == {"efa"}
            assert len(_connected(cluster, claims[POD_DEVICE_CLAIM], 16)) == 1
            allocated = [
                (result["driver"], result["device"], result["pool"])
                for claim in claims.values()
                for result in claim["status"]["allocation"]["devices"]["results"]
            ]
            assert all(
                len(claim["status"]["allocation"]["devices"]["results"]) <= CLAIM_DEVICE_LIMIT
                for claim in claims.values()
            )
            assert {pool for _, _, pool in allocated} == {node}
            assert len(allocated) == 33
            assert {(driver, device) for driver, device, _ in allocated} == _node_devices(cluster, node)
            parameters = [
                c["opaque"]["parameters"]
                for c in claims[POD_DEVICE_CLAIM]["status"]["allocation"]["devices"]["config"]
            ]
            assert {p["kind"]: p for p in parameters} == {
                "NeuronConfig": {
                    "apiVersion": "neuron.aws.com/v1",
                    "kind": "NeuronConfig",
                    "logicalNeuronCore": 2,
                },
                "UltraServerConfig": {
                    "apiVersion": "neuron.aws.com/v1",
                    "kind": "UltraServerConfig",
                    "ultraserverMode": ULTRASERVER_MODE,
                },
            }
        run.finish()
        cluster.wait_for(lambda: _phase(run) == "Completed", timeout=60, what="trn2u-gang Completed")
    finally:
        end_runs(cluster, [ULTRA])
        cluster.remove_nodes(TRN2U_NODES)
