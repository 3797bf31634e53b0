"""The pull request's review comment (operator_tools/review_comment.py) on pairs of real synths of TrainiumStack:
a node group's max_size 4 -> 6, a new team, a Trainium group's instance type trn1 -> trn2, and the
system nodes' instance type (a replacement CloudFormation cannot make: the group keeps its name)."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from cluster_facts.list_prices import HOURS_PER_MONTH, INSTANCE_HOUR
from cluster_plan.cost_floor import usd
from cluster_plan.review_files import kubernetes_yaml, summary
from config.loader import parse_config, read_yaml
from constructs_trn.nag import add_aws_solutions_checks
from operator_tools.review_comment import MARKER, MAX_COMMENT_CHARS, Synth, review_comment, review_section
from stacks.trainium_stack import add_trainium_stack
from tests.conftest import DEFAULT_CONFIG, project_context
from tests.yaml_edits import with_change

GROUP = "trainium.node_groups.0"


def _synth(label: str, data: dict[str, Any]) -> Synth:
    """As ``cdk synth`` writes it: with each resource's construct path (the CLI turns that on)."""
    config = parse_config(data)
    app = cdk.App(context={**project_context(), "aws:cdk:enable-path-metadata": True})
    add_aws_solutions_checks(app)
    stack = add_trainium_stack(app, config)
    template = Template.from_stack(stack).to_json()
    plan = stack.review_plan
    return Synth(
        label=label,
        template=json.loads(json.dumps(template)),
        summary=summary(config, stack_name="TrainiumStack", template=template, plan=plan),
        kubernetes={f"{step.name}.yaml": kubernetes_yaml(step) for step in plan.manifest_sets()},
    )


@pytest.fixture(scope="module")
def base_data() -> dict[str, Any]:
    return dict(with_change(read_yaml(DEFAULT_CONFIG), f"{GROUP}.max_size", 4))


@pytest.fixture(scope="module")
def base(base_data: dict[str, Any]) -> Synth:
    return _synth("base", base_data)


def _section(base: Synth, data: dict[str, Any]) -> str:
    return review_section(base, _synth("head", data), config="config/default.yaml")


def test_max_size_4_to_6_is_an_update_in_place_and_raises_the_ceiling(
    base: Synth, base_data: dict[str, Any]
) -> None:
    text = _section(base, with_change(base_data, f"{GROUP}.max_size", 6))
    assert "### Resources: 3 updated" in text
    # The autoscaler's --ok-total-unready-count is the Trainium groups' max_size summed.
    assert (
        "| update | `Kubernetes/ClusterAutoscaler/Resource` | Custom::AWSCDK-EKS-HelmChart | Values |" in text
    )
    # The node-group size resource re-reads the running count, so the new bound resizes nothing.
    assert (
        "| update | `Trainium-trn1-32xl/Size/Resource` | Custom::TrainiumNodeGroupSize | MaxSize | re-reads"
        in text
    )
    assert (
        "| update | `Trainium-trn1-32xl/Nodegroup` | AWS::EKS::Nodegroup | ScalingConfig/MaxSize | "
        "in place (bounds, labels, taints): no node is replaced |" in text
    )
    assert "Running jobs are disrupted" not in text and "This deployment fails" not in text
    two_nodes = 2 * INSTANCE_HOUR["trn1.32xlarge"] * HOURS_PER_MONTH
    assert f"({'+'}$0/month); every node group at max_size" in text
    assert f"(+{usd(two_nodes)}/month)" in text
    # The summary's one line, and the Volcano queue's capability in the Kubernetes diff.
    assert "-| trn1-32xl | trn1.32xlarge | 0 | 4 | on_demand | 8 | yes | DEFAULT |" in text
    assert "+| trn1-32xl | trn1.32xlarge | 0 | 6 | on_demand | 8 | yes | DEFAULT |" in text
    assert "<summary>volcano-queue.yaml: changed" in text


def test_a_new_team_adds_its_access_entry_queue_and_namespace(base: Synth, base_data: dict[str, Any]) -> None:
    teams = [
        {"name": "training", "queue": "test"},
        {"name": "research", "member_role_arns": ["arn:aws:iam::111122223333:role/Research"]},
    ]
    text = _section(base, with_change(base_data, "teams", teams))
    assert (
        "- access entry **added**: `arn:aws:iam::111122223333:role/Research`: groups trainium-team-research"
        in text
    )
    assert "| add | `TeamAccess/role-Research` | AWS::EKS::AccessEntry | - | created |" in text
    assert "<summary>volcano-queue-research.yaml: added" in text
    assert "+| research | research | trn1-32xl | 1 |" in text


def test_a_new_trainium_instance_type_rolls_every_node_of_the_group(
    base: Synth, base_data: dict[str, Any]
) -> None:
    text = _section(base, with_change(base_data, f"{GROUP}.instance_type", "trn2.48xlarge"))
    assert (
        "> **Running jobs are disrupted** by `Trainium-trn1-32xl/Nodegroup`: EKS replaces every node of the "
        "group (LaunchTemplate): one at a time (UpdateConfig), each cordoned and drained with force, so every "
        "gang running on them stops" in text
    )
    assert "(follows `Trainium-trn1-32xl/EfaLaunchTemplate/LaunchTemplate`)" in text
    # No list price for trn2 here: named, never guessed.
    assert (
        "Not priced (no list price here; make preflight asks the Price List): trn1-32xl (trn2.48xlarge)"
        in text
    )


def test_a_replacement_of_a_named_node_group_is_shown_as_failing(
    base: Synth, base_data: dict[str, Any]
) -> None:
    text = _section(base, with_change(base_data, "system_nodes.instance_type", "m6i.4xlarge"))
    assert "### Resources: 1 replaced (1 of them fail)" in text
    assert (
        "> **This deployment fails** at `Cluster/SystemNodes`: **fails**: it keeps its name 'trainium-system', "
        "and CloudFormation cannot replace a resource that has a custom name" in text
    )
    assert "the cluster's services on them (CoreDNS, Volcano, etcd, controllers) move" in text
    assert "| replace | `Cluster/SystemNodes` | AWS::EKS::Nodegroup | InstanceTypes |" in text


def test_the_comment_starts_with_its_marker_and_fits_github(base: Synth) -> None:
    comment = review_comment([review_section(base, base, config="config/default.yaml")], note="a note")
    assert comment.splitlines()[:3] == [MARKER, "a note", ""]
    assert "### Resources: none" in comment
    huge = review_comment(["```diff\n" + "+x\n" * 40_000 + "```"])
    assert len(huge) <= MAX_COMMENT_CHARS and huge.rstrip().endswith("for all of it.")
    assert huge.count("```") % 2 == 0


def test_a_head_that_does_not_synthesize_says_so(base: Synth) -> None:
    text = review_section(base, Synth(label="head", error="bad.yaml: fsxx: unknown key"), config="bad.yaml")
    assert "The head does not synthesize:" in text and "bad.yaml: fsxx: unknown key" in text
