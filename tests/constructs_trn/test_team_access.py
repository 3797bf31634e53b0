"""Team members reach the cluster through EKS access entries that carry only their teams' groups."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

from cluster_facts.kubernetes_names import team_rbac_group
from cluster_facts.kubernetes_plan import ManifestSet
from constructs_trn.team_access import TeamAccess
from k8s_charts.plan import TEAMS_STEP
from tests.cluster_plan.test_kubernetes_layer import manifests
from tests.conftest import Synthesized, as_json

ML_TEAM = "arn:aws:iam::444455556666:role/MlTeam"


def access_entries(synthesized: Synthesized) -> dict[str, dict[str, Any]]:
    return {
        entry["Properties"]["PrincipalArn"]: entry["Properties"]
        for entry in synthesized.resources("AWS::EKS::AccessEntry").values()
        if isinstance(entry["Properties"]["PrincipalArn"], str)
    }


def test_a_member_gets_the_teams_group_and_no_access_policy(example_stack: Synthesized) -> None:
    entry = access_entries(example_stack)[ML_TEAM]
    assert entry["KubernetesGroups"] == [team_rbac_group("training")]
    assert entry["Type"] == "STANDARD"
    # No EKS access policy: the member holds only what RBAC in the cluster grants the group.
    assert "AccessPolicies" not in entry


def test_the_group_is_bound_only_in_the_teams_namespace(example_stack: Synthesized) -> None:
    every_manifest = [
        dict(m)
        for step in example_stack.stack.kubernetes_plan.steps
        if isinstance(step, ManifestSet)
        for m in step.manifests
    ]
    bindings = [
        m
        for m in every_manifest
        if m["kind"] in {"RoleBinding", "ClusterRoleBinding"}
        and any(s["name"] == team_rbac_group("training") for s in m["subjects"])
    ]
    assert [(b["kind"], b["metadata"]["namespace"]) for b in bindings] == [("RoleBinding", "training")]
    [role] = [
        m
        for m in manifests(example_stack, TEAMS_STEP)
        if m["kind"] == "Role"
        and (m["metadata"]["namespace"], m["metadata"]["name"])
        == ("training", bindings[0]["roleRef"]["name"])
    ]
    granted = {
        (group, resource)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert ("batch.volcano.sh", "jobs") in granted  # submit runs (TorchX, kubectl apply)
    assert not {("", "secrets"), ("", "pods/exec"), ("rbac.authorization.k8s.io", "roles")} & granted


def test_administrators_keep_cluster_admin(example_stack: Synthesized) -> None:
    admins = [entry for principal, entry in access_entries(example_stack).items() if principal != ML_TEAM]
    assert admins
    for entry in admins:
        [policy] = entry["AccessPolicies"]
        assert as_json(policy["PolicyArn"]).endswith(':cluster-access-policy/AmazonEKSClusterAdminPolicy"]]}')


def small_team_access(groups_by_role_arn: dict[str, list[str]]) -> dict[str, Any]:
    stack = cdk.Stack(cdk.App(), "Access", env=cdk.Environment(account="111122223333", region="us-west-2"))
    cluster = eks.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="trn")
    TeamAccess(stack, "TeamAccess", cluster=cluster, groups_by_role_arn=groups_by_role_arn)
    resources: dict[str, Any] = Template.from_stack(stack).find_resources("AWS::EKS::AccessEntry")
    return resources


def test_a_member_of_two_teams_has_one_entry_with_both_groups() -> None:
    # EKS keeps one access entry per principal and cluster: a second entry would fail the deploy.
    [entry] = small_team_access({"arn:aws:iam::111122223333:role/Ml": ["team-b", "team-a"]}).values()
    assert entry["Properties"]["KubernetesGroups"] == ["team-a", "team-b"]


def test_adding_a_member_keeps_every_other_members_entry() -> None:
    # A changed logical id would replace the entry: its member locked out mid-deploy, and
    # CloudFormation creating the new entry before deleting the old one for the same principal fails.
    before = small_team_access({"arn:aws:iam::111122223333:role/B": ["g"]})
    after = small_team_access(
        {"arn:aws:iam::111122223333:role/A": ["g"], "arn:aws:iam::111122223333:role/B": ["g"]}
    )
    assert set(before) < set(after)
