"""TorchX jobs on ``devices: dra`` node groups (issue 32): the team's settings ConfigMap says which of
its groups take devices through DRA and the LNC their ``trainium-node-<group>`` template configures
(rendered from the same ``NodeDevices`` as the template); the component, with ``--team``, renders
pods that claim their node through that template as the stack's runs do (no extended resource, the
Trainium and lost-node tolerations), and refuses an LNC the template does not configure in one line.
The real API server, Volcano and scheduler admit, place and complete such a job in
tests/cluster/test_dra.py (``test_a_torchx_job_claims_whole_dra_nodes_through_the_teams_template``).
"""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from cluster_facts.dra import node_claim_template
from cluster_facts.kubernetes_names import (
    EFA_RESOURCE,
    NEURON_RESOURCE,
    TEAM_SETTINGS_CONFIGMAP,
    team_rbac_group,
)
from config import parse_config
from k8s_charts.teams.tenant_admission import JOBS_POLICY, PODS_POLICY
from tests.admission import Decision
from tests.cluster.test_dra import DRA, TRAINING, TRN1, TRN2, TRN2U, ULTRA
from tests.config.test_team_settings import _kubeconfig, _SettingsApi
from tests.plans import shared_review_plan
from tests.tenant_cases import (
    CONTROLLER,
    MEMBER,
    AdmissionCase,
    decide,
    plan_namespace_labels,
    tenant_admission_manifests,
    volcano_pod,
)
from tests.torchx_dryrun import NATIVE_IMAGE, run_torchx, torchx_available
from tests.torchx_trn.test_torchx_admitted_job import rendered
from torchx_trn.team_settings import resolve_team
from torchx_trn.trainium import NodeClaim, TrainiumJob, trainium_job

PLUGIN_GROUP = "trn1-32xl"


def _team_objects(namespace: str) -> list[dict[str, Any]]:
    step = shared_review_plan(parse_config(DRA)).step("training-namespace")
    return [dict(m) for m in step.manifests if m["metadata"].get("namespace") == namespace]  # type: ignore[union-attr]


def _settings(namespace: str = TRAINING) -> dict[str, str]:
    [settings] = [
        o["data"]
        for o in _team_objects(namespace)
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == TEAM_SETTINGS_CONFIGMAP
    ]
    return dict(settings)


def test_the_settings_name_each_groups_devices_and_the_lnc_its_template_configures() -> None:
    groups = json.loads(_settings()["node_groups"])
    assert groups == [
        {
            "name": TRN1,
            "instance_type": "trn1.32xlarge",
            "devices": "dra",
            "logical_core_size": None,
            "claims": {"devices": node_claim_template(TRN1)},
        },
        {
            "name": TRN2,
            "instance_type": "trn2.48xlarge",
            "devices": "dra",
            "logical_core_size": 2,
            "claims": {"devices": node_claim_template(TRN2)},
        },
    ]
    templates = {
        o["metadata"]["name"]: o["spec"]["spec"]["devices"].get("config", [])
        for o in _team_objects(TRAINING)
        if o["kind"] == "ResourceClaimTemplate"
    }
    assert set(templates) == {node_claim_template(TRN1), node_claim_template(TRN2)}
    assert templates[node_claim_template(TRN1)] == []
    [config] = templates[node_claim_template(TRN2)]
    assert config["opaque"]["parameters"]["logicalNeuronCore"] == 2
    assert json.loads(_settings("vision")["node_groups"]) == [
        {"name": PLUGIN_GROUP, "instance_type": "trn1.32xlarge", "devices": "device-plugin"}
    ]


def test_the_settings_resolve_a_dra_group_to_its_claim_and_older_settings_to_the_plugins() -> None:
    resolved = resolve_team(TRAINING, _settings(), node_group=TRN2)
    assert resolved.node_claim == NodeClaim(template=node_claim_template(TRN2), logical_core_size=2)
    assert resolve_team(TRAINING, _settings()).node_claim == NodeClaim(
        template=node_claim_template(TRN1), logical_core_size=None
    )
    assert resolve_team("vision", _settings("vision")).node_claim is None
    # A ConfigMap of a stack from before DRA: its groups name no device path, and are the plugins'.
    older = {**_settings(), "node_groups": json.dumps([{"name": TRN1, "instance_type": "trn1.32xlarge"}])}
    assert resolve_team(TRAINING, older).node_claim is None
    wrong = {
        **_settings(),
        "node_groups": json.dumps([{"name": TRN1, "instance_type": "x", "devices": "cdi"}]),
    }
    with pytest.raises(ValueError, match=r"is not the stack's team settings .*devices not one of .*redeploy"):
        resolve_team(TRAINING, wrong)


def test_a_trn2u_group_is_two_templates_and_its_pods_name_both() -> None:
    """trn2u's 33 devices are two claims (cluster_facts/dra.py ``NodeDevices.claims``): the team's
    namespace holds ``trainium-node-trn2u-dra`` (16 Neuron devices, LNC 2, the ``neuron_node`` with its
    UltraServer mode) and ``trainium-node-trn2u-dra-efa`` (16 EFA interfaces); the settings name
    both, the component's pods claim both, and a ConfigMap written before names none (one template)."""
    settings = _settings(ULTRA)
    [group] = json.loads(settings["node_groups"])
    assert group["claims"] == {"devices": "trainium-node-trn2u-dra", "efa": "trainium-node-trn2u-dra-efa"}
    templates = {
        o["metadata"]["name"]: [r["exactly"]["count"] for r in o["spec"]["spec"]["devices"]["requests"]]
        for o in _team_objects(ULTRA)
        if o["kind"] == "ResourceClaimTemplate"
    }
    assert templates == {"trainium-node-trn2u-dra": [16, 1], "trainium-node-trn2u-dra-efa": [16]}
    claim = resolve_team(ULTRA, settings).node_claim
    assert claim == NodeClaim(
        template="trainium-node-trn2u-dra", logical_core_size=2, efa_template="trainium-node-trn2u-dra-efa"
    )
    job = _job(claim, node_group=TRN2U, instance_type="trn2u.48xlarge", image=NATIVE_IMAGE, stack="native")
    pod = job.admitted_job(rendered(job), priority_class=None)["spec"]["tasks"][0]["template"]["spec"]
    assert pod["resourceClaims"] == [
        {"name": "devices", "resourceClaimTemplateName": "trainium-node-trn2u-dra"},
        {"name": "efa", "resourceClaimTemplateName": "trainium-node-trn2u-dra-efa"},
    ]
    assert [c["resources"]["claims"] for c in pod["containers"]] == [[{"name": "devices"}, {"name": "efa"}]]
    older = dict(group)
    del older["claims"]
    resolved = resolve_team(ULTRA, {**settings, "node_groups": json.dumps([older])}).node_claim
    assert resolved == NodeClaim(template="trainium-node-trn2u-dra", logical_core_size=2)
    wrong = {**group, "claims": {"gpu": "x"}}
    with pytest.raises(
        ValueError, match=r"is not the stack's team settings .*claims other than devices, efa"
    ):
        resolve_team(ULTRA, {**settings, "node_groups": json.dumps([wrong])})


def _job(node_claim: NodeClaim | None, **changes: Any) -> TrainiumJob:
    arguments: dict[str, Any] = {
        "script": "train.py",
        "script_args": (),
        "claim": "fsx-abc123",
        "node_group": TRN1,
        "uid": 248061,
        "nnodes": 2,
        "instance_type": "trn1.32xlarge",
        "image": "public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.1-ubuntu24.04",
        "cacheset": None,
        "max_retries": 0,
        "environment": {},
        "node_claim": node_claim,
    }
    return trainium_job(**{**arguments, **changes})


def test_a_dra_pod_claims_its_node_through_the_template_and_tolerates_what_runs_do() -> None:
    job = _job(NodeClaim(template=node_claim_template(TRN1), logical_core_size=None))
    assert job.devices == {}, "no extended resource: no DRA node advertises one"
    pod = job.admitted_job(rendered(job), priority_class=None)["spec"]["tasks"][0]["template"]["spec"]
    assert pod["resourceClaims"] == [
        {"name": "devices", "resourceClaimTemplateName": "trainium-node-trn1-dra"}
    ]
    assert [c["resources"]["claims"] for c in pod["containers"]] == [[{"name": "devices"}]]
    assert all("resources" not in c or "claims" not in c["resources"] for c in pod["initContainers"])
    assert pod["tolerations"] == [
        {"key": NEURON_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
        {
            "key": "node.kubernetes.io/not-ready",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 60,
        },
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 60,
        },
    ]
    plugin = _job(None)
    assert plugin.devices == {NEURON_RESOURCE: 16, EFA_RESOURCE: 8}
    plugin_pod = plugin.admitted_job(rendered(plugin), priority_class=None)["spec"]["tasks"][0]["template"][
        "spec"
    ]
    assert "resourceClaims" not in plugin_pod and "tolerations" not in plugin_pod


def _native(node_claim: NodeClaim, **changes: Any) -> TrainiumJob:
    return _job(
        node_claim,
        node_group=TRN2,
        instance_type="trn2.48xlarge",
        image=NATIVE_IMAGE,
        stack="native",
        **changes,
    )


def test_an_lnc_the_template_does_not_configure_is_one_line() -> None:
    claim = NodeClaim(template=node_claim_template(TRN2), logical_core_size=2)
    assert _native(claim).processes_per_node == 64
    assert _native(claim, logical_core_size=2).processes_per_node == 64
    with pytest.raises(ValueError) as raised:
        _native(claim, logical_core_size=1)
    assert str(raised.value) == (
        "--lnc 1: node group 'trn2-dra' gives a pod its devices through the ResourceClaimTemplate "
        "trainium-node-trn2-dra, which configures LNC 2; leave --lnc out or give 2"
    )


DDP = (
    'torchx run --dryrun --workspace "" -s kubernetes -cfg queue=test,namespace=training '
    f"torchx_trn/components.py:trainium_ddp --team {TRAINING} --node_group {{group}} --script my_train.py --nnodes 2"
)


@pytest.mark.process
def test_the_cli_with_team_renders_the_claim_and_refuses_another_lnc(tmp_path: Path) -> None:
    """The real torchx CLI against a stand-in API server holding the rendered settings; the Job and
    each pod Volcano makes of it admitted by the team policies (the CEL model, tests/admission.py;
    the real API server's answer, and the scheduler's, are tests/cluster/test_dra.py's)."""
    assert torchx_available() is None, torchx_available()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SettingsApi)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    env = _kubeconfig(tmp_path / "kubeconfig", server.server_port)
    try:
        _SettingsApi.settings = {TRAINING: _settings()}
        dra = run_torchx(DDP.format(group=TRN2), env=env)
        native = run_torchx(
            f"{DDP.format(group=TRN2)} --lnc 1".replace(
                "trainium_ddp", f"trainium_native --image {NATIVE_IMAGE}"
            ),
            env=env,
        )
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert dra.returncode == 0, dra.stderr[-3000:]
    job = yaml.safe_load(dra.stdout.split("=== SCHEDULER REQUEST ===", 1)[1])
    assert len(job["spec"]["tasks"]) == 2, "TorchX renders a task per replica"
    for task in job["spec"]["tasks"]:
        pod = task["template"]["spec"]
        assert pod["resourceClaims"] == [
            {"name": "devices", "resourceClaimTemplateName": "trainium-node-trn2-dra"}
        ]
        [container] = pod["containers"]
        assert container["resources"]["claims"] == [{"name": "devices"}]
        assert NEURON_RESOURCE not in container["resources"].get("limits", {})
        assert EFA_RESOURCE not in container["resources"].get("limits", {})
        command = container["command"]
        assert command[command.index("--nproc_per_node") + 1] == "64"
    job["metadata"]["namespace"] = TRAINING
    plan = shared_review_plan(parse_config(DRA))
    policies, labels = tenant_admission_manifests(plan), plan_namespace_labels(plan)[TRAINING]
    member = AdmissionCase(
        id="torchx-dra",
        policy=JOBS_POLICY,
        obj=job,
        user=MEMBER,
        groups=(team_rbac_group(TRAINING),),
        allowed=True,
    )
    assert decide(policies, member, labels) == Decision(matched=True, allowed=True)
    for task in range(2):
        pod = volcano_pod(job, task=task)
        created = AdmissionCase(id=f"pod-{task}", policy=PODS_POLICY, obj=pod, user=CONTROLLER, allowed=True)
        assert decide(policies, created, labels) == Decision(matched=True, allowed=True)
    assert native.returncode != 0
    assert "--lnc 1: node group 'trn2-dra' gives a pod its devices through the ResourceClaimTemplate" in (
        native.stderr
    ), native.stderr[-3000:]
    assert "Traceback" not in native.stderr
