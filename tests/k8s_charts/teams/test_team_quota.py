"""PriorityClassChart and TeamQuotaChart: the classes, each team namespace's quotas and defaults.

How the API server applies a ResourceQuota with a PriorityClass scope is modelled below
(``counted_by``: pkg/quota/v1/evaluator/core/pods.go ``podMatchesScopeFunc``, ``PriorityClass``
scope with operator In: the pod's ``priorityClassName`` among the values); a quota's ``pods: 0``
then refuses every pod it counts. A model, for the fast tier: the real API server refuses a team's
etcd pod at a critical class with the quota (tests/cluster/test_tenant_admission.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from cluster_facts.kubernetes_names import (
    ETCD_REPLICAS,
    NEURON_RESOURCE,
    PLATFORM_PRIORITY_CLASS,
    TRAINING_PRIORITY_CLASS,
)
from config import load_config, parse_config
from k8s_charts.addons.priority_classes import PLATFORM_VALUE, TRAINING_VALUE, PriorityClassChart
from k8s_charts.teams.team_quota import (
    CRITICAL_PRIORITY_CLASSES,
    DEFAULT_CONTAINER_REQUESTS,
    NO_CRITICAL_QUOTA,
    OBJECTS_QUOTA,
    QUOTA_NAME,
    TeamQuota,
)
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG
from tests.k8s_charts.manifests import synth
from tests.k8s_validation import assert_valid
from tests.plans import shared_review_plan
from tests.tenant_cases import blocker_terms, volcano_pod


def _cross_namespace_affinity(pod: dict[str, Any]) -> bool:
    """pods.go ``usesCrossNamespacePodAffinity``: a pod (anti-)affinity term, required or preferred,
    with namespaces or a namespace selector (``crossNamespacePodAffinityTerm``)."""
    affinity = pod["spec"].get("affinity") or {}
    terms = [
        term
        for kind in ("podAffinity", "podAntiAffinity")
        for term in [
            *(affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution", []),
            *(
                weighted["podAffinityTerm"]
                for weighted in (affinity.get(kind) or {}).get(
                    "preferredDuringSchedulingIgnoredDuringExecution", []
                )
            ),
        ]
    ]
    return any(term.get("namespaces") or term.get("namespaceSelector") is not None for term in terms)


def counted_by(quota: dict[str, Any], pod: dict[str, Any]) -> bool:
    """Whether ``quota`` counts ``pod`` (only the scope selectors used here: PriorityClass In,
    CrossNamespacePodAffinity Exists)."""
    selector = quota["spec"].get("scopeSelector")
    if selector is None:
        return True
    for expression in selector["matchExpressions"]:
        if expression["scopeName"] == "CrossNamespacePodAffinity":
            assert expression["operator"] == "Exists", expression
            if not _cross_namespace_affinity(pod):
                return False
            continue
        assert expression["scopeName"] == "PriorityClass" and expression["operator"] == "In", expression
        if pod["spec"].get("priorityClassName", "") not in expression["values"]:
            return False
    return True


def quota_refuses(quotas: list[dict[str, Any]], pod: dict[str, Any]) -> bool:
    """A pod counted by a quota that admits no pod is refused (pods: 0)."""
    return any(counted_by(quota, pod) and quota["spec"]["hard"].get("pods") == "0" for quota in quotas)


def team_objects(config: Any, namespace: str = "training") -> list[dict[str, Any]]:
    plan = shared_review_plan(load_config(config))
    return [
        dict(m)
        for step in plan.manifest_sets()
        for m in step.manifests
        if m.get("metadata", {}).get("namespace") == namespace
    ]


def quotas(config: Any, namespace: str = "training") -> list[dict[str, Any]]:
    return [m for m in team_objects(config, namespace) if m["kind"] == "ResourceQuota"]


def test_the_priority_classes() -> None:
    manifests = synth(lambda app: PriorityClassChart(app, "p"))
    assert_valid(manifests)
    by_name = {m["metadata"]["name"]: m for m in manifests}
    platform, training = by_name[PLATFORM_PRIORITY_CLASS], by_name[TRAINING_PRIORITY_CLASS]
    assert (platform["value"], platform["preemptionPolicy"]) == (PLATFORM_VALUE, "PreemptLowerPriority")
    assert (training["value"], training["preemptionPolicy"]) == (TRAINING_VALUE, "Never")
    # Both under the system classes (system-cluster-critical is 2000000000), training under platform.
    assert TRAINING_VALUE < PLATFORM_VALUE < 1_000_000_000
    assert not platform["globalDefault"] and not training["globalDefault"]


@pytest.mark.parametrize("critical", CRITICAL_PRIORITY_CLASSES)
def test_a_critical_pod_is_refused_by_the_quota_in_every_team_namespace(critical: str) -> None:
    plan = shared_review_plan(load_config(EXAMPLE_CONFIG))
    for namespace in ("training", "research"):
        [job] = [
            dict(m)
            for step in plan.manifest_sets()
            if step.name.startswith("run-")
            for m in step.manifests
            if m["metadata"]["namespace"] == namespace
        ]
        pod = volcano_pod(job)
        assert not quota_refuses(quotas(EXAMPLE_CONFIG, namespace), pod)
        pod["spec"]["priorityClassName"] = critical
        assert quota_refuses(quotas(EXAMPLE_CONFIG, namespace), pod), namespace


def test_the_platform_pods_of_a_team_namespace_are_not_refused_by_the_quota() -> None:
    for deployment in (m for m in team_objects(DEFAULT_CONFIG) if m["kind"] == "Deployment"):
        pod = {"spec": deployment["spec"]["template"]["spec"]}
        assert pod["spec"]["priorityClassName"] == PLATFORM_PRIORITY_CLASS
        assert not quota_refuses(quotas(DEFAULT_CONFIG), pod)


def test_the_default_quota_counts_pods_and_leaves_the_share_to_the_queue() -> None:
    """No amount of cpu, memory, chips or interfaces: the team's queue holds its share and keeps a
    queued gang's pods Pending (tests/cluster/test_queues.py); an amount the running gangs fill would
    refuse the queued gang's pods, and Volcano ends a Job whose pods are refused (k8s_charts/teams/team_quota.py)."""
    for config in (DEFAULT_CONFIG, EXAMPLE_CONFIG):
        for team in load_config(config).teams:
            [quota] = [q for q in quotas(config, team.name) if q["metadata"]["name"] == QUOTA_NAME]
            assert quota["spec"]["hard"] == {"pods": "64"}, (config, team.name)


def test_the_largest_run_of_each_team_fits_its_quota_beside_its_etcd() -> None:
    config = load_config(EXAMPLE_CONFIG)
    plan = shared_review_plan(config)
    for team in config.teams:
        [quota] = [q for q in quotas(EXAMPLE_CONFIG, team.name) if q["metadata"]["name"] == QUOTA_NAME]
        hard = quota["spec"]["hard"]
        used: dict[str, float] = {}
        pods = [
            volcano_pod(dict(m), index=i)
            for step in plan.manifest_sets()
            if step.name.startswith("run-")
            for m in step.manifests
            if m["metadata"]["namespace"] == team.name
            for i in range(m["spec"]["tasks"][0]["replicas"])
        ]
        platform = [
            {"spec": m["spec"]["template"]["spec"]}
            for m in team_objects(EXAMPLE_CONFIG, team.name)
            if m["kind"] == "StatefulSet"
            for _ in range(m["spec"]["replicas"])
        ]
        assert len(platform) == ETCD_REPLICAS  # the team's etcd members
        pods += platform
        for pod in pods:
            for container in pod["spec"]["containers"]:
                resources = container["resources"]
                for name, value in {**resources.get("limits", {}), **resources.get("requests", {})}.items():
                    amount = float(str(value).removesuffix("Gi").removesuffix("Mi").removesuffix("m"))
                    amount = amount / 1024 if str(value).endswith("Mi") else amount
                    amount = amount / 1000 if str(value).endswith("m") else amount
                    used[name] = used.get(name, 0) + amount
        assert len(pods) <= int(hard["pods"])
        for name, amount in used.items():
            if f"requests.{name}" in hard:  # only the amounts configured
                assert amount <= float(hard[f"requests.{name}"].removesuffix("Gi")), (team.name, name)


def test_the_critical_quota_admits_no_pod_of_the_critical_classes() -> None:
    [quota] = [q for q in quotas(DEFAULT_CONFIG) if q["metadata"]["name"] == NO_CRITICAL_QUOTA]
    assert quota["spec"] == {
        "hard": {"pods": "0"},
        "scopeSelector": {
            "matchExpressions": [
                {"operator": "In", "scopeName": "PriorityClass", "values": list(CRITICAL_PRIORITY_CLASSES)}
            ]
        },
    }


def test_a_container_without_requests_gets_the_defaults() -> None:
    [limits] = [m for m in team_objects(DEFAULT_CONFIG) if m["kind"] == "LimitRange"]
    assert limits["spec"]["limits"] == [{"type": "Container", "defaultRequest": DEFAULT_CONTAINER_REQUESTS}]


def test_a_configured_quota_replaces_the_defaults() -> None:
    data = load_config(EXAMPLE_CONFIG).model_dump(mode="json", exclude_none=True)
    data["teams"][0]["quota"] = {"pods": 10, "neuron_devices": 64, "cpu": 300, "memory_gib": 1100}
    config = parse_config(data)
    [quota] = [
        q
        for step in shared_review_plan(config).manifest_sets()
        for q in step.manifests
        if q["kind"] == "ResourceQuota" and q["metadata"] == {"name": QUOTA_NAME, "namespace": "training"}
    ]
    assert quota["spec"]["hard"] == {
        "pods": "10",
        f"requests.{NEURON_RESOURCE}": "64",
        "requests.cpu": "300",
        "requests.memory": "1100Gi",
    }


def test_a_quota_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="pods must be at least 1"):
        TeamQuota(pods=0)
    with pytest.raises(ValueError, match="neuron_devices must be at least 1"):
        TeamQuota(pods=2, neuron_devices=0)


def test_the_object_quota_counts_the_jobs_what_volcano_makes_for_each_and_the_platforms_objects() -> None:
    """``team-objects``: the team's Volcano Jobs (its applied runs among them) and for each a PodGroup,
    Service, ConfigMap and NetworkPolicy; on top, what the plan keeps in the namespace, the root CA
    ConfigMap and the canary's program; no claim or Secret beyond the platform's."""
    config = load_config(EXAMPLE_CONFIG)
    for team in config.teams:
        objects = team_objects(EXAMPLE_CONFIG, team.name)
        [quota] = [q for q in quotas(EXAMPLE_CONFIG, team.name) if q["metadata"]["name"] == OBJECTS_QUOTA]

        def kept(kind: str, objects: list[dict[str, Any]] = objects) -> int:
            return sum(1 for m in objects if m["kind"] == kind)

        jobs = team.quota.jobs
        assert quota["spec"]["hard"] == {
            "count/jobs.batch.volcano.sh": str(jobs),
            "count/podgroups.scheduling.volcano.sh": str(jobs),
            "services": str(jobs + 2 * kept("Service")),
            "configmaps": str(jobs + 2 * kept("ConfigMap") + 2),
            "secrets": "0",
            "persistentvolumeclaims": str(2 * kept("PersistentVolumeClaim")),  # room to rename each once
            "count/networkpolicies.networking.k8s.io": str(jobs + 2 * kept("NetworkPolicy")),
        }, team.name
        assert kept("PersistentVolumeClaim") == 2 and kept("Service") == 2  # etcd's client and peer Services


def test_a_pod_with_a_term_over_other_namespaces_is_refused_by_the_quota_in_every_team_namespace() -> None:
    """Whoever creates it (the team policy leaves the platform's own pods unjudged): a pod
    affinity or anti-affinity term with namespaces or a namespace selector is counted by
    ``no-cross-namespace-affinity``, which admits none; a term of the pod's own namespace is not."""
    plan = shared_review_plan(load_config(EXAMPLE_CONFIG))
    for namespace, other in (("training", "research"), ("research", "training")):
        [job] = [
            dict(m)
            for step in plan.manifest_sets()
            if step.name.startswith("run-")
            for m in step.manifests
            if m["metadata"]["namespace"] == namespace
        ]
        for variant, term in blocker_terms(other).items():
            for placement in ("requiredDuringSchedulingIgnoredDuringExecution", "preferred"):
                pod = volcano_pod(job)
                full = {"labelSelector": {}, **term}
                pod["spec"]["affinity"] = {
                    "podAntiAffinity": {placement: [full]}
                    if placement != "preferred"
                    else {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 1, "podAffinityTerm": full}
                        ]
                    }
                }
                across = "namespaces" in term or "namespaceSelector" in term
                assert quota_refuses(quotas(EXAMPLE_CONFIG, namespace), pod) is across, (namespace, variant)
