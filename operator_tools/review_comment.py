"""The pull request's review comment: what a change to the code or a configuration does to TrainiumStack.

Built from two synths of one configuration, the base's and the head's (``make review`` makes them,
tools/review.py): the resources CloudFormation would add, replace, update and remove with what each
means for the cluster and its running jobs (operator_tools/template_changes.py), the IAM and Kubernetes
access changes, the monthly cost (cluster_plan/cost_floor.py), the summary page's diff and the diff of
each Kubernetes step's YAML (cdk.out/k8s). Plain Markdown, within GitHub's 65,536 characters.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster_plan.cost_floor import PRICE_BASIS, monthly_cost, usd
from cluster_plan.review_files import KUBERNETES_DIR, SUMMARY_DIR
from operator_tools.template_changes import Change, render, template_changes

__all__ = ["MARKER", "MAX_COMMENT_CHARS", "Synth", "meaning", "review_comment", "review_section"]

MARKER = "<!-- trainium-review -->"
"""The comment's first line: the workflow finds its earlier comment by it and updates that one."""
MAX_COMMENT_CHARS = 65_000
"""GitHub refuses an issue comment over 65,536 characters."""
_DIFF_LINES = 150
"""Lines of one file's diff shown; the rest is counted (``make review`` prints all of it)."""

# Types whose changes the Kubernetes section shows (each step is one custom resource).
_KUBERNETES_TYPES = ("Custom::AWSCDK-EKS-KubernetesResource", "Custom::AWSCDK-EKS-KubernetesObjectValue")
# What a node group's in-place update does to its nodes: EKS User Guide, "Understand each phase of
# node updates" (https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html):
# a new launch template version, AMI release or Kubernetes version replaces every node, maxUnavailable
# at a time, cordoning and draining each (ForceUpdateEnabled: also against a PodDisruptionBudget).
_NODE_ROLLING_PATHS = ("LaunchTemplate", "ReleaseVersion", "Version", "AmiType")


@dataclass(frozen=True)
class Synth:
    """One side's synth of one configuration: its template and review files, or why there is none."""

    label: str
    """What was synthesized, for the heading (``main 1a2b3c4``)."""
    template: Mapping[str, Any] = field(default_factory=dict)
    summary: str = ""
    kubernetes: Mapping[str, str] = field(default_factory=dict)
    """cdk.out/k8s/<file>: its text, by file name."""
    error: str | None = None
    """The synth failed (or the configuration did not exist on this side): its last lines."""

    @staticmethod
    def read(label: str, outdir: Path, stack: str = "TrainiumStack") -> Synth:
        """The synth in ``outdir`` (a cloud assembly with the review files)."""
        summary = outdir / SUMMARY_DIR / f"{stack}.md"
        return Synth(
            label=label,
            template=json.loads((outdir / f"{stack}.template.json").read_text()),
            summary=summary.read_text() if summary.is_file() else "",
            kubernetes={
                path.name: path.read_text() for path in sorted((outdir / KUBERNETES_DIR).glob("*.yaml"))
            },
        )


def _node_group_meaning(change: Change) -> str:
    trainium = change.path.startswith("TrainiumStack/Trainium-")
    runs = (
        "every gang running on them stops (Volcano restarts it, from its last checkpoint, once the new "
        "nodes are there)"
        if trainium
        else "the cluster's services on them (CoreDNS, Volcano, etcd, controllers) move, and stop until they do"
    )
    if change.action in ("replace", "may replace"):
        return f"a new node group, then this one deleted: its nodes are drained and terminated, so {runs}"
    if change.action == "remove":
        return f"deleted: its nodes are drained and terminated, so {runs}"
    rolling = [path for path in change.paths if path.split("/")[0] in _NODE_ROLLING_PATHS]
    if rolling:
        return (
            f"EKS replaces every node of the group ({', '.join(rolling)}): one at a time (UpdateConfig), "
            f"each cordoned and drained with force, so {runs}"
        )
    if "ScalingConfig/DesiredSize" in change.paths:
        return "DesiredSize changed: EKS resizes the group to it now, whatever the autoscaler chose"
    return "in place (bounds, labels, taints): no node is replaced"


_MEANINGS: Mapping[tuple[str, str], str] = {
    (
        "AWS::EKS::Cluster",
        "replace",
    ): "a new EKS cluster: every workload, the Kubernetes layer and all access start over",
    ("AWS::FSx::FileSystem", "replace"): (
        "a new, empty file system: the teams' directories, data sets and checkpoints stay on the old one, "
        "which CloudFormation deletes (removal policy destroy) or leaves detached (retain)"
    ),
    ("AWS::EC2::Subnet", "replace"): "a new subnet: the node groups, file system and cluster in it follow",
    ("AWS::EC2::VPC", "replace"): "a new VPC: everything in it is replaced",
    (
        "AWS::EC2::LaunchTemplate",
        "update",
    ): "a new launch template version: the node groups using it roll their nodes",
    ("AWS::IAM::Role", "replace"): "a new role (new ARN): what trusts or names the old one must follow",
    ("Custom::AWSCDK-EKS-HelmChart", "update"): "helm upgrade of the release with the new chart or values",
    ("Custom::AWSCDK-EKS-HelmChart", "add"): "helm install of a new release",
    ("Custom::AWSCDK-EKS-HelmChart", "remove"): "helm uninstall of the release",
    ("Custom::TrainiumNodeGroupSize", "update"): (
        "re-reads the group's running node count before the group is updated: its DesiredSize stays what "
        "the autoscaler set, clamped into the new bounds (docs/capacity.md)"
    ),
}
_DEFAULTS: Mapping[str, str] = {
    "add": "created",
    "remove": "deleted",
    "update": "updated in place",
    "replace": "CloudFormation creates the new resource, moves its dependents to it, then deletes the old one",
    "may replace": "replaced if the resource it refers to gets a new id or ARN, as it will",
}


def meaning(change: Change) -> str:
    """What the change does, for people deciding whether to merge it."""
    if change.resource_type == "AWS::EKS::Nodegroup" and change.action != "add":
        text = _node_group_meaning(change)
    else:
        key = (change.resource_type, "replace" if change.action == "may replace" else change.action)
        text = _MEANINGS.get(key, _DEFAULTS[change.action])
    if change.fails:
        text = (
            f"**fails**: it keeps its name {change.name!r}, and CloudFormation cannot replace a resource "
            "that has a custom name (rename it, or undo the change). " + text
        )
    return text


def _counts(changes: Sequence[Change]) -> str:
    counted: Counter[str] = Counter("replace" if c.action == "may replace" else c.action for c in changes)
    parts = [f"{counted[action]} {word}" for action, word in _ACTION_WORDS.items() if counted[action]]
    failing = sum(change.fails for change in changes)
    return ", ".join(parts) + (f" ({failing} of them fail)" if failing else "") if parts else "none"


_ACTION_WORDS = {"add": "added", "replace": "replaced", "update": "updated", "remove": "removed"}


def _where(change: Change) -> str:
    return change.path.removeprefix("TrainiumStack/") or change.logical_id


def _resources_section(changes: Sequence[Change]) -> list[str]:
    shown = [c for c in changes if c.resource_type not in _KUBERNETES_TYPES]
    steps = len(changes) - len(shown)
    lines = [f"### Resources: {_counts(shown)}", ""]
    where = {change.logical_id: _where(change) for change in changes}
    if shown:
        lines += ["| change | resource | type | properties | what it means |", "|---|---|---|---|---|"]
        for change in shown:
            properties = ", ".join(change.replacing or change.paths) or "-"
            if change.because_of:
                followed = ", ".join(
                    f"`{where.get(logical_id, logical_id)}`" for logical_id in change.because_of
                )
                properties += f" (follows {followed})"
            lines.append(
                f"| {change.action} | `{where[change.logical_id]}` | {change.resource_type} | {properties} | "
                f"{meaning(change)} |"
            )
        lines.append("")
    if steps:
        lines += [f"{steps} Kubernetes step(s) change: see the manifests below.", ""]
    return lines


def _statements(document: Mapping[str, Any]) -> list[str]:
    statements = document.get("Statement", [])
    rendered = []
    for statement in statements if isinstance(statements, list) else [statements]:
        actions = statement.get("Action", [])
        resources = statement.get("Resource", statement.get("Principal", ""))
        condition = (
            f" if {json.dumps(statement['Condition'], sort_keys=True)}" if "Condition" in statement else ""
        )
        rendered.append(
            f"{statement.get('Effect', 'Allow')} {render(actions)} on {render(resources)}{condition}"
        )
    return sorted(rendered)


def _role_names(template: Mapping[str, Any]) -> dict[str, str]:
    """Each role's logical id -> its construct path, the name people read."""
    return {
        logical_id: str(resource.get("Metadata", {}).get("aws:cdk:path", logical_id))
        .removeprefix("TrainiumStack/")
        .removesuffix("/Resource")
        for logical_id, resource in template.get("Resources", {}).items()
        if resource["Type"] == "AWS::IAM::Role"
    }


def _grants(template: Mapping[str, Any]) -> dict[str, set[str]]:
    """Per role (construct path): its trust, managed policies and policy statements, one line each."""
    names = _role_names(template)
    grants: dict[str, set[str]] = {name: set() for name in names.values()}
    for logical_id, resource in template.get("Resources", {}).items():
        properties = resource.get("Properties", {})
        if resource["Type"] == "AWS::IAM::Role":
            role = names[logical_id]
            grants[role] |= {
                f"trusts: {s}" for s in _statements(properties.get("AssumeRolePolicyDocument", {}))
            }
            grants[role] |= {
                f"managed policy {render(arn)}" for arn in properties.get("ManagedPolicyArns", [])
            }
            for policy in properties.get("Policies", []):
                grants[role] |= set(_statements(policy.get("PolicyDocument", {})))
        elif resource["Type"] == "AWS::IAM::Policy":
            for reference in properties.get("Roles", []):
                role = names.get(
                    reference.get("Ref", "") if isinstance(reference, Mapping) else "", render(reference)
                )
                grants.setdefault(role, set()).update(_statements(properties.get("PolicyDocument", {})))
    return grants


def _access_entries(template: Mapping[str, Any]) -> dict[str, str]:
    entries = {}
    for resource in template.get("Resources", {}).values():
        if resource["Type"] == "AWS::EKS::AccessEntry":
            properties = resource.get("Properties", {})
            groups = ", ".join(properties.get("KubernetesGroups", [])) or "no group"
            policies = ", ".join(
                render(policy.get("PolicyArn", "")).rsplit("/", 1)[-1]
                for policy in properties.get("AccessPolicies", [])
            )
            entries[render(properties.get("PrincipalArn", ""))] = f"groups {groups}" + (
                f"; access policies {policies}" if policies else ""
            )
    return entries


def _access_section(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    before, after = _access_entries(base), _access_entries(head)
    for principal in sorted(set(before) | set(after)):
        if principal not in before:
            lines.append(f"- access entry **added**: `{principal}`: {after[principal]}")
        elif principal not in after:
            lines.append(f"- access entry **removed**: `{principal}` ({before[principal]})")
        elif before[principal] != after[principal]:
            lines.append(f"- access entry `{principal}`: {before[principal]} -> {after[principal]}")
    old, new = _grants(base), _grants(head)
    for role in sorted(set(old) | set(new)):
        if role not in old:
            lines.append(f"- role **added** `{role}`")
        elif role not in new:
            lines.append(f"- role **removed** `{role}`")
            continue
        lines += [f"  - `{role}` + {grant}" for grant in sorted(new[role] - old.get(role, set()))]
        lines += [f"  - `{role}` - {grant}" for grant in sorted(old.get(role, set()) - new[role])]
    return ["### IAM and Kubernetes access", "", *(lines or ["No change."]), ""]


def _cost_line(base: Synth, head: Synth) -> str:
    old, new = monthly_cost(base.template), monthly_cost(head.template)

    def delta(a: float, b: float) -> str:
        return f"{'+' if b >= a else '-'}{usd(abs(b - a))}/month"

    unknown = sorted(set(old.unknown) | set(new.unknown))
    text = (
        f"**Cost**: idle {usd(old.floor)} -> {usd(new.floor)} ({delta(old.floor, new.floor)}); "
        f"every node group at max_size {usd(old.ceiling)} -> {usd(new.ceiling)} "
        f"({delta(old.ceiling, new.ceiling)})."
    )
    if unknown:
        text += f" Not priced (no list price here; make preflight asks the Price List): {', '.join(unknown)}."
    return f"{text} At {PRICE_BASIS}."


def _diff(before: str, after: str, name: str) -> list[str]:
    lines = list(
        difflib.unified_diff(
            before.splitlines(), after.splitlines(), f"base/{name}", f"head/{name}", lineterm="", n=2
        )
    )
    if len(lines) > _DIFF_LINES:
        lines = [*lines[:_DIFF_LINES], f"... {len(lines) - _DIFF_LINES} more lines (make review prints all)"]
    return lines


def _fenced(lines: Iterable[str]) -> list[str]:
    return ["```diff", *lines, "```"]


def _kubernetes_section(base: Synth, head: Synth) -> list[str]:
    lines = ["### Kubernetes manifests (cdk.out/k8s)", ""]
    changed = 0
    for name in sorted(set(base.kubernetes) | set(head.kubernetes)):
        before, after = base.kubernetes.get(name), head.kubernetes.get(name)
        if before == after:
            continue
        changed += 1
        state = "added" if before is None else "removed" if after is None else "changed"
        diff = _diff(before or "", after or "", name)
        count = sum(1 for line in diff if line[:1] in "+-" and line[:3] not in ("+++", "---"))
        lines += [
            f"<details><summary>{name}: {state}, {count} lines</summary>",
            "",
            *_fenced(diff),
            "</details>",
            "",
        ]
    return lines if changed else [*lines, "No change.", ""]


def review_comment(sections: Sequence[str], *, note: str = "") -> str:
    """The whole comment: the marker line the workflow finds it by, a note, one section per configuration."""
    return _within_limit("\n".join([MARKER, *([note, ""] if note else []), "\n\n".join(sections)]))


def review_section(base: Synth, head: Synth, *, config: str) -> str:
    """What changes for one configuration (see the module docstring)."""
    lines = [f"## TrainiumStack review of `{config}`: `{base.label}` -> `{head.label}`", ""]
    if head.error is not None:
        return "\n".join([*lines, "The head does not synthesize:", "", "```", head.error, "```", ""])
    if base.error is not None:
        lines += [
            f"The base did not synthesize ({base.error.splitlines()[-1] if base.error else ''}): everything is new.",
            "",
        ]
    changes = template_changes(base.template, head.template)
    failing = [c for c in changes if c.fails]
    rolling = [
        c
        for c in changes
        if c.resource_type == "AWS::EKS::Nodegroup" and c.action != "add" and "drain" in meaning(c)
    ]
    lines += [_cost_line(base, head), ""]
    for change in failing:
        lines.append(f"> **This deployment fails** at `{_where(change)}`: {meaning(change)}")
    for change in rolling:
        if change not in failing:
            lines.append(f"> **Running jobs are disrupted** by `{_where(change)}`: {meaning(change)}")
    if failing or rolling:
        lines.append("")
    lines += _resources_section(changes)
    lines += _access_section(base.template, head.template)
    summary_diff = _diff(base.summary, head.summary, "summary/TrainiumStack.md")
    lines += [
        "### Summary page (cdk.out/summary)",
        "",
        *(_fenced(summary_diff) if summary_diff else ["No change."]),
        "",
    ]
    lines += _kubernetes_section(base, head)
    return "\n".join(lines)


def _within_limit(text: str) -> str:
    if len(text) <= MAX_COMMENT_CHARS:
        return text
    note = "\n\n... cut at GitHub's comment size: run `make review BASE=<base>` for all of it.\n"
    cut = text[: MAX_COMMENT_CHARS - len(note) - len("\n```")]
    # Close a code block left open by the cut.
    if cut.count("```") % 2:
        cut += "\n```"
    return cut + note
