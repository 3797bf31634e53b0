"""Capacity: Trainium nodes run only while work needs them, and capacity never breaks the deployment.

What TrainiumStack builds for it: node groups the cluster autoscaler sizes (a fixed DesiredSize in the
template that changing the bounds never touches, node-template tags from the catalog on their Auto Scaling groups, updates that need no
surge on reserved groups, node auto repair), the autoscaler's Helm release and least-privilege Pod
Identity role, Volcano's scheduler configuration without ``enqueue``, and a dependency graph in which
nothing waits for a Trainium node.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml

from cluster_facts.autoscaling import (
    AUTOSCALER_NAME,
    AUTOSCALER_NAMESPACE,
    scale_from_zero_resources,
    template_capacity,
)
from cluster_facts.instance_catalog import CATALOG
from cluster_facts.kubernetes_names import EFA_RESOURCE, NEURON_RESOURCE
from cluster_facts.neuron_stack import stack_driver, stacks_of_family
from cluster_facts.node_check import STARTUP_TAINT_PREFIX
from cluster_facts.versions import (
    CLUSTER_AUTOSCALER_CHART_VERSION,
    CLUSTER_AUTOSCALER_IMAGE_TAGS,
    KUBECTL_LAYERS,
)
from cluster_plan.kubernetes_values import review_plan
from config import load_config, parse_config
from k8s_charts.addons.volcano_scheduler import VOLCANO_SCHEDULER_CONFIG
from tests.conftest import DEFAULT_CONFIG, REPO_ROOT, Synthesized, synthesize
from tests.k8s_validation import assert_valid
from tests.stacks.test_trainium_stack import depends_on_transitively

CHART_SCHEMA = REPO_ROOT / "tests" / "schemas" / f"cluster-autoscaler-{CLUSTER_AUTOSCALER_CHART_VERSION}"


def trainium_groups(synthesized: Synthesized) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        name: (
            synthesized.logical_id(group.nodegroup),
            synthesized.json["Resources"][synthesized.logical_id(group.nodegroup)]["Properties"],
        )
        for name, group in synthesized.stack.trainium_node_groups.items()
    }


def helm_values(synthesized: Synthesized, chart: str) -> dict[str, Any]:
    [values] = [
        json.loads(resource["Properties"]["Values"])
        for resource in synthesized.resources("Custom::AWSCDK-EKS-HelmChart").values()
        if resource["Properties"]["Release"] == chart
    ]
    return dict(values)


def sdk_call(resource: dict[str, Any], event: str = "Create") -> dict[str, Any]:
    """An AwsCustomResource's call, its deploy-time values replaced by ``<token>``."""
    value = resource["Properties"][event]
    if isinstance(value, dict):
        separator, parts = value["Fn::Join"]
        value = separator.join(part if isinstance(part, str) else "<token>" for part in parts)
    return dict(json.loads(value))


def template_tags(synthesized: Synthesized, group_logical_id: str) -> dict[str, str]:
    """The tags the stack writes on one node group's Auto Scaling group, by the group's logical id."""
    found = {}
    for resource in synthesized.resources("Custom::TrainiumNodeTemplateTags").values():
        call = sdk_call(resource)
        describe_id = resource["Properties"]["Create"]["Fn::Join"][1][1]["Fn::GetAtt"][0]
        describe = synthesized.json["Resources"][describe_id]
        if describe["Properties"]["Create"]["Fn::Join"][1][3]["Fn::GetAtt"][0] == group_logical_id:
            assert call["action"] == "createOrUpdateTags" and sdk_call(resource, "Update") == call
            found = {tag["Key"]: tag["Value"] for tag in call["parameters"]["Tags"]}
            assert {tag["ResourceId"] for tag in call["parameters"]["Tags"]} == {"<token>"}
            assert not any(tag["PropagateAtLaunch"] for tag in call["parameters"]["Tags"])
    assert found, f"no node-template tags for {group_logical_id}"
    return found


@pytest.fixture(scope="module")
def every_instance_type_stack() -> Synthesized:
    """One node group per catalog entry, so scale-from-zero is checked for every instance type."""
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data["trainium"]["node_groups"] = [
        {
            "name": name.replace(".", "-"),
            "instance_type": name,
            "max_size": 2,
            **_native_only(name, data["cluster"]["kubernetes_version"]),
        }
        for name in CATALOG
    ]
    return synthesize(parse_config(data))


def _native_only(instance_type: str, version: str) -> dict[str, Any]:
    """A type only the native stack runs (trn2u) needs a driver no AMI release of the table brings:
    declared as config/native.example.yaml declares it."""
    if stacks_of_family(CATALOG[instance_type].family) != ("native",):
        return {}
    return {
        "ami_release": f"{version}.5-20261103",
        "ami_facts": {"neuron_driver": stack_driver("native"), "containerd": "2.2.5"},
    }


# --- Node groups the autoscaler sizes ----------------------------------------------------------


@pytest.mark.parametrize("fixture", ["default_stack", "example_stack"])
def test_every_trainium_group_has_a_full_scaling_configuration_with_the_count_it_runs(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    """All or none at creation (EKS API); DesiredSize is the count the group runs, whatever the bounds
    (tests/constructs_trn/test_node_group_size.py)."""
    synthesized: Synthesized = request.getfixturevalue(fixture)
    for name, (_, group) in trainium_groups(synthesized).items():
        configured = next(g for g in synthesized.config.trainium.node_groups if g.name == name)
        size = synthesized.logical_id(synthesized.stack.trainium_node_groups[name].size.resource)
        assert group["ScalingConfig"] == {
            "MinSize": configured.min_size,
            "DesiredSize": {"Fn::GetAtt": [size, "DesiredSize"]},
            "MaxSize": configured.max_size,
        }, name
        assert group["NodeRepairConfig"] == {"Enabled": True}, name


def test_reserved_groups_replace_nodes_without_surge(
    example_stack: Synthesized, default_stack: Synthesized
) -> None:
    for name, (_, group) in trainium_groups(example_stack).items():  # an ODCR and a Capacity Block
        assert group["UpdateConfig"] == {"MaxUnavailable": 1, "UpdateStrategy": "MINIMAL"}, name
    [(_, group)] = trainium_groups(default_stack).values()  # plain On-Demand: launch first, then stop
    assert group["UpdateConfig"] == {"MaxUnavailable": 1, "UpdateStrategy": "DEFAULT"}


def test_scale_from_zero_capacity_is_the_catalogs_for_every_instance_type(
    every_instance_type_stack: Synthesized,
) -> None:
    for name, (logical_id, _) in trainium_groups(every_instance_type_stack).items():
        instance = CATALOG[name.replace("-", ".")]
        tags = template_tags(every_instance_type_stack, logical_id)
        prefix = "k8s.io/cluster-autoscaler/node-template/resources/"
        resources = {key.removeprefix(prefix): value for key, value in tags.items() if key.startswith(prefix)}
        assert resources[NEURON_RESOURCE] == str(instance.chips) == "16"
        assert resources[EFA_RESOURCE] == str(instance.efa_network_cards)
        # The devices, and cpu, memory and hugepages as the kubelet allocates them (test_node_allocatable.py).
        assert resources == {
            **{key: str(value) for key, value in scale_from_zero_resources(instance).items()},
            **template_capacity(instance),
        }
        assert resources["hugepages-2Mi"] == "10256Mi"
    assert {CATALOG[n].efa_network_cards for n in CATALOG} == {8, 16}


def test_template_tags_carry_the_groups_labels_and_taint(example_stack: Synthesized) -> None:
    for name, (logical_id, group) in trainium_groups(example_stack).items():
        tags = template_tags(example_stack, logical_id)
        labels = {
            key.removeprefix("k8s.io/cluster-autoscaler/node-template/label/"): value
            for key, value in tags.items()
            if "/node-template/label/" in key
        }
        assert labels == group["Labels"], name  # what the nodes will carry, EKS puts them there
        # The startup taint is not a template taint: the autoscaler simulates a node without it.
        [taint] = [taint for taint in group["Taints"] if not taint["Key"].startswith(STARTUP_TAINT_PREFIX)]
        assert (
            tags[f"k8s.io/cluster-autoscaler/node-template/taint/{taint['Key']}"]
            == f"{taint['Value']}:NoSchedule"
        )
        assert not any(STARTUP_TAINT_PREFIX in key for key in tags), name


def test_the_tagging_may_write_only_template_tags_on_this_clusters_group(default_stack: Synthesized) -> None:
    policies = [
        statement
        for policy in default_stack.resources("AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "autoscaling:CreateOrUpdateTags"
    ]
    [statement] = policies
    cluster_id, _ = default_stack.only("AWS::EKS::Cluster")
    assert statement["Condition"] == {
        "StringEquals": {"aws:ResourceTag/eks:cluster-name": {"Ref": cluster_id}},
        "ForAllValues:StringLike": {"aws:TagKeys": ["k8s.io/cluster-autoscaler/node-template/*"]},
    }
    assert "autoScalingGroupName/eks-trn1-32xl-*" in json.dumps(statement["Resource"])


# --- The autoscaler ------------------------------------------------------------------------------


def test_autoscaler_values_validate_against_the_charts_values_schema(example_stack: Synthesized) -> None:
    values = helm_values(example_stack, "cluster-autoscaler")
    schema = json.loads((CHART_SCHEMA / "values.schema.json").read_text())
    jsonschema.validate(values, schema)
    # What the chart copies into its Deployment's pod, validated against Kubernetes's own schemas.
    assert_valid(
        [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": AUTOSCALER_NAME, "namespace": AUTOSCALER_NAMESPACE},
                "spec": {
                    "priorityClassName": values["priorityClassName"],
                    "securityContext": values["securityContext"],
                    "containers": [
                        {
                            "name": "aws-cluster-autoscaler",
                            "image": f"{values['image']['repository']}:{values['image']['tag']}",
                            "resources": values["resources"],
                            "securityContext": values["containerSecurityContext"],
                        }
                    ],
                },
            }
        ]
    )


def test_the_schema_refuses_what_the_chart_does_not_know() -> None:
    schema = json.loads((CHART_SCHEMA / "values.schema.json").read_text())
    for bad in (
        {"autoDiscovery": {"clusterName": "x", "tag": []}},
        {"extraArgs": {"scale-down-unneded-time": "5m"}},
        {"extraArgs": {"expander": "cheapest"}},
        {"image": {"repository": "registry.k8s.io/autoscaling/cluster-autoscaler", "tag": "latest"}},
        {"serviceAccount": {"name": "x"}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_autoscaler_discovers_the_trainium_groups_of_this_cluster_with_configured_timings(
    example_stack: Synthesized,
) -> None:
    values = helm_values(example_stack, "cluster-autoscaler")
    assert values["autoDiscovery"] == {
        "clusterName": "trainium-prod",
        "tags": [
            "k8s.io/cluster-autoscaler/enabled",
            "k8s.io/cluster-autoscaler/trainium-prod",
            "k8s.io/cluster-autoscaler/node-template/label/trainium/node-group",
        ],
    }
    assert values["awsRegion"] == "us-east-1"
    assert values["image"]["tag"] == CLUSTER_AUTOSCALER_IMAGE_TAGS["1.36"] == "v1.36.1"
    arguments = values["extraArgs"]
    assert (
        arguments["scale-down-unneeded-time"],
        arguments["scale-down-delay-after-add"],
        arguments["max-node-provision-time"],
        arguments["expander"],
    ) == ("5m", "5m", "15m", "least-waste")
    assert arguments["skip-nodes-with-system-pods"] is True
    assert arguments["ignore-daemonsets-utilization"] is True


def test_autoscaler_settings_reach_the_release() -> None:
    data = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data["autoscaler"] = {
        "scale_down_unneeded_minutes": 12,
        "max_node_provision_minutes": 25,
        "expander": "random",
    }
    step = review_plan(parse_config(data)).step("cluster-autoscaler")
    arguments = step.values["extraArgs"]  # type: ignore[union-attr]
    assert (
        arguments["scale-down-unneeded-time"],
        arguments["max-node-provision-time"],
        arguments["expander"],
    ) == (
        "12m",
        "25m",
        "random",
    )


def test_every_supported_kubernetes_version_has_its_autoscaler() -> None:
    assert set(CLUSTER_AUTOSCALER_IMAGE_TAGS) == set(KUBECTL_LAYERS)
    for minor, tag in CLUSTER_AUTOSCALER_IMAGE_TAGS.items():
        assert tag.startswith(f"v{minor}."), minor  # the autoscaler's minor version is the cluster's


def test_autoscaler_role_writes_only_to_this_clusters_trainium_groups(default_stack: Synthesized) -> None:
    [(association_id, association)] = [
        (logical_id, resource)
        for logical_id, resource in default_stack.resources("AWS::EKS::PodIdentityAssociation").items()
        if resource["Properties"]["ServiceAccount"] == AUTOSCALER_NAME
    ]
    assert (association["Properties"]["Namespace"], association["Properties"]["ServiceAccount"]) == (
        AUTOSCALER_NAMESPACE,
        AUTOSCALER_NAME,
    )
    values = helm_values(default_stack, "cluster-autoscaler")
    assert values["rbac"]["serviceAccount"]["name"] == AUTOSCALER_NAME
    role_id = association["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    [policy] = [
        p["Properties"]["PolicyDocument"]
        for p in default_stack.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    by_action = {
        action: statement
        for statement in policy["Statement"]
        for action in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])
    }
    for write in ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"):
        assert by_action[write]["Condition"] == {
            "StringEquals": {"aws:ResourceTag/k8s.io/cluster-autoscaler/trainium": "owned"},
            "Null": {
                "aws:ResourceTag/k8s.io/cluster-autoscaler/node-template/label/trainium/node-group": "false"
            },
        }
    assert "nodegroup/trainium/*/*" in json.dumps(by_action["eks:DescribeNodegroup"]["Resource"])
    writes_or_reads = {action.split(":")[1] for action in by_action}
    assert all(
        action.startswith(("Describe", "Get"))
        for action in writes_or_reads - {"SetDesiredCapacity", "TerminateInstanceInAutoScalingGroup"}
    )
    trust = default_stack.json["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]
    assert {s["Principal"]["Service"] for s in trust["Statement"]} == {"pods.eks.amazonaws.com"}
    assert association_id


# --- Volcano lets the autoscaler see a queued gang -------------------------------------------


# The actions Volcano v1.15.1 registers (pkg/scheduler/actions/factory.go) and its plugins (plugins/factory.go).
VOLCANO_ACTIONS = {
    "enqueue",
    "allocate",
    "backfill",
    "preempt",
    "reclaim",
    "shuffle",
    "gangpreempt",
    "gangreclaim",
}


def test_volcano_scheduler_configuration_has_no_action_that_hides_a_gang(default_stack: Synthesized) -> None:
    override = helm_values(default_stack, "volcano")["custom"]["scheduler_config_override"]
    assert override == VOLCANO_SCHEDULER_CONFIG
    configuration = yaml.safe_load(override)
    # Volcano splits the actions on "," and trims each (pkg/scheduler/util.go, UnmarshalSchedulerConf).
    actions = [action.strip() for action in configuration["actions"].split(",")]
    assert set(actions) <= VOLCANO_ACTIONS
    # enqueue keeps a PodGroup that does not fit Pending, and Pending PodGroups get no pods.
    assert "enqueue" not in actions
    assert actions[0] == "allocate"
    plugins = [plugin["name"] for tier in configuration["tiers"] for plugin in tier["plugins"]]
    # gang: nothing of a job starts before minAvailable of its pods fit; capacity: the queues' shares
    # (tests/k8s_charts/addons/test_queue_sharing.py).
    assert "gang" in plugins and "predicates" in plugins and "capacity" in plugins
    assert len(plugins) == len(set(plugins))


# --- Nothing in the stack waits for Trainium capacity ---------------------------------------


def _refs(node: Any, resources: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        if "Ref" in node and node["Ref"] in resources:
            found.add(node["Ref"])
        if "Fn::GetAtt" in node:
            found.add(node["Fn::GetAtt"][0])
        for value in node.values():
            found |= _refs(value, resources)
    elif isinstance(node, list):
        for value in node:
            found |= _refs(value, resources)
    return found


@pytest.mark.parametrize("fixture", ["default_stack", "example_stack"])
def test_no_path_leads_from_the_kubernetes_layer_or_the_outputs_to_a_trainium_node_group(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    synthesized: Synthesized = request.getfixturevalue(fixture)
    resources = synthesized.json["Resources"]
    trainium = {logical_id for logical_id, _ in trainium_groups(synthesized).values()}
    assert trainium
    layer = {
        synthesized.stack.resolve(synthesized.stack.get_logical_id(child))
        for child in synthesized.stack.kubernetes.node.find_all()
        if hasattr(child, "cfn_resource_type")
    }
    assert len(layer) >= len(synthesized.stack.kubernetes.applied)
    for logical_id in layer:
        assert not trainium & depends_on_transitively(synthesized, logical_id), logical_id
    for name, output in synthesized.json["Outputs"].items():
        reached = set()
        for start in _refs(output, resources):
            reached |= {start} | depends_on_transitively(synthesized, start)
        assert not trainium & reached, name


def test_the_walk_would_find_a_wait_for_a_trainium_group(default_stack: Synthesized) -> None:
    # The node-template tags do wait for their group: the walk sees such a path where one exists.
    [(group_id, _)] = trainium_groups(default_stack).values()
    [tags_id] = default_stack.resources("Custom::TrainiumNodeTemplateTags")
    assert group_id in depends_on_transitively(default_stack, tags_id)


def test_shipped_configurations_synthesize_with_no_warm_trainium_node() -> None:
    for path in [DEFAULT_CONFIG, REPO_ROOT / "config" / "example.yaml"]:
        config = load_config(path)
        assert sum(group.min_size for group in config.trainium.node_groups) == 0, path


def test_docs_name_the_decision() -> None:
    text = (REPO_ROOT / "docs" / "capacity.md").read_text()
    for needle in (
        "Karpenter",
        "enqueue",
        "max_node_provision_minutes",
        "safe-to-evict",
        "MINIMAL",
        "Capacity Block",
    ):
        assert needle in text, needle


def test_training_pods_are_never_taken_by_scale_down(example_stack: Synthesized) -> None:
    step = example_stack.stack.kubernetes_plan.step("run-bert-large")
    [job] = step.manifests  # type: ignore[union-attr]
    for task in job["spec"]["tasks"]:
        assert (
            task["template"]["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"]
            == "false"
        )
    # And a finished pod pins nothing: the autoscaler's terminal-pod rule comes before the annotation's.
    values = helm_values(example_stack, "cluster-autoscaler")
    assert values["extraArgs"]["skip-nodes-with-local-storage"] is False
