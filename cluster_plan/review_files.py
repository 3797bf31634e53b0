"""What ``cdk synth`` writes beside the cloud assembly for people to read.

- ``cdk.out/k8s/<step>.yaml``: every manifest set of the Kubernetes layer, as ``kubectl apply``
  takes it, with the file system's deploy-time values as ``${StackOutput}`` placeholders. A header
  says whether this configuration applies it at deploy and after which steps.
- ``cdk.out/fabric-check/<stage>/fabric-check-<group>.json`` (pipeline synth, stages with
  ``fabric_check.pipeline``): each group's fabric-check Job as the pipeline's deployment check
  creates it through the API (JSON: the check has curl and jq, no kubectl).
- ``cdk.out/summary/<stack>.md``: one page per environment: Trainium capacity, what the Kubernetes
  layer applies, and the template's resources by type. The snapshot tests keep one per shipped
  configuration, so a pull request shows each environment's change in a few lines.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from cluster_facts.kubernetes_plan import HelmRelease, KubernetesLayerPlan, ManifestSet, ReadinessGate
from cluster_plan.cost_floor import monthly_cost
from cluster_plan.fabric_check_commands import pipeline_fabric_check_manifests, pipeline_fabric_checks
from cluster_plan.kubernetes_values import review_plan, team_member_groups
from config.model import StackConfig
from k8s_charts.checks.fabric_check import job_name

if TYPE_CHECKING:
    from aws_cdk import cx_api

__all__ = [
    "FABRIC_CHECK_DIR",
    "KUBERNETES_DIR",
    "SUMMARY_DIR",
    "fabric_check_job_file",
    "kubernetes_yaml",
    "summary",
    "write_fabric_check_jobs",
    "write_kubernetes_yaml",
    "write_review_files",
    "write_summary",
]

KUBERNETES_DIR = "k8s"
FABRIC_CHECK_DIR = "fabric-check"
SUMMARY_DIR = "summary"


# libyaml's emitter writes the same text as PyYAML's, about seven times faster (0.35 s -> 0.05 s for
# the review files of both shipped configurations; tests/cluster_plan/test_review_yaml.py compares the two).
class _ReadableDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Multi-line strings (the jobs' scripts) as literal blocks, readable in a review."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ReadableDumper.add_representer(str, _represent_str)


def _header(step: ManifestSet) -> str:
    after = f" after {', '.join(step.after)}" if step.after else ""
    note = "".join(f"# {line}\n" for line in (step.note or "").splitlines())
    if step.applied:
        return f"# {step.name}: applied by TrainiumStack at deploy{after}.\n" + note
    return (
        f"# {step.name}: NOT applied by this configuration (rendered for review and kubectl apply);\n"
        f"# when applied, it goes{after or ' first'}.\n"
    ) + note


def kubernetes_yaml(step: ManifestSet) -> str:
    """One manifest set as a YAML stream (one document per object), with its header."""
    documents = yaml.dump_all(
        [dict(manifest) for manifest in step.manifests],
        Dumper=_ReadableDumper,
        sort_keys=False,
        default_flow_style=False,
    )
    return _header(step) + documents


def write_kubernetes_yaml(plan: KubernetesLayerPlan, directory: Path) -> list[Path]:
    """Write each manifest set of ``plan`` as ``<name>.yaml``; return the files."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for step in plan.manifest_sets():
        path = directory / f"{step.name}.yaml"
        path.write_text(kubernetes_yaml(step))
        written.append(path)
    return written


def summary(
    config: StackConfig,
    *,
    stack_name: str,
    template: Mapping[str, Any],
    plan: KubernetesLayerPlan | None = None,
) -> str:
    """A page a reviewer reads instead of the template: what this environment runs and creates.

    ``plan``: the configuration's review plan when the caller has rendered it already.
    """
    plan = plan if plan is not None else review_plan(config)
    lines = [
        *_cluster_lines(config, stack_name),
        *_capacity_lines(config),
        *_layer_lines(plan),
        *_access_lines(config),
        *_team_lines(config),
        *_run_lines(config),
        *_cost_and_resource_lines(template),
    ]
    return "\n".join(lines)


def _cluster_lines(config: StackConfig, stack_name: str) -> list[str]:
    return [
        f"# {stack_name}: {config.name} in {config.account} {config.region}",
        "",
        f"EKS {config.cluster.kubernetes_version}; API endpoint "
        + (
            f"public to {', '.join(config.cluster.endpoint_public_cidrs)} and private"
            if config.cluster.endpoint_public_cidrs
            else "private only"
        )
        + f"; {len(config.cluster.admin_role_arns)} admin role(s).",
        (
            f"System nodes: {config.system_nodes.instance_type}, "
            f"{config.system_nodes.min_size}/{config.system_nodes.desired_size}/{config.system_nodes.max_size} "
            "(min/desired/max)."
        ),
        (
            f"FSx for Lustre: {config.fsx.deployment_type}, {config.fsx.storage_capacity_gib} GiB, "
            f"removal policy {config.fsx.removal_policy}."
        ),
        _network_line(config),
        "",
    ]


def _capacity_lines(config: StackConfig) -> list[str]:
    lines = [
        f"## Trainium capacity in {config.trainium.availability_zone} ({config.trainium.availability_zone_id})",
        "",
        (
            "The cluster autoscaler runs each group between min (warm nodes, billed idle) and max "
            f"(idle nodes go after {config.autoscaler.scale_down_unneeded_minutes} minutes; docs/capacity.md)."
        ),
        "",
        (
            f"Not checked offline: whether {config.trainium.availability_zone_id} offers "
            f"{', '.join(sorted({g.instance_type for g in config.trainium.node_groups}))} (EC2 publishes no "
            "list to read here; `make preflight` asks DescribeInstanceTypeOfferings before a deploy, "
            "docs/preflight.md). A zone without them deploys, and its nodes never launch."
        ),
        "",
        "| node group | instance type | min | max | capacity | EFA per node | placement group | updates |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for group in config.trainium.node_groups:
        capacity = group.capacity_type + (
            f" ({group.capacity_reservation_id})" if group.capacity_reservation_id else ""
        )
        lines.append(
            f"| {group.name} | {group.instance_type} | {group.min_size} | "
            f"{group.max_size} | {capacity} | {group.instance.efa_interfaces} | "
            f"{'yes' if group.uses_placement_group else 'no'} | {group.update_strategy} |"
        )
    return lines


def _layer_lines(plan: KubernetesLayerPlan) -> list[str]:
    lines = ["", "## Kubernetes layer, in deploy order", ""]
    for step in plan:
        if isinstance(step, HelmRelease):
            what = f"Helm chart {step.chart} {step.version} from {step.source} into {step.namespace}"
        elif isinstance(step, ReadinessGate):
            what = f"waits for {step.object_type}/{step.object_name} {{{step.json_path}}}"
        else:
            kinds = Counter(str(manifest["kind"]) for manifest in step.manifests)
            what = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
        state = "applied" if step.applied else "rendered only"
        lines.append(f"- {step.name} ({state}): {what}")
    return lines


def _cost_and_resource_lines(template: Mapping[str, Any]) -> list[str]:
    lines = ["", "## Monthly cost", "", f"{monthly_cost(template).describe()}.", ""]
    cost = monthly_cost(template)
    lines += [f"- {item}" for item in cost.items]
    lines += [f"- not priced: {item}" for item in cost.unknown]
    lines += [f"- {note}" for note in cost.notes]
    lines.append("- not counted: EBS volumes, traffic, logs, public IPv4 addresses, KMS keys (docs/costs.md)")
    resources = Counter(str(resource["Type"]) for resource in template.get("Resources", {}).values())
    lines += [
        "",
        f"## Resources ({sum(resources.values())})",
        "",
        *(f"- {resource_type}: {count}" for resource_type, count in sorted(resources.items())),
        "",
    ]
    return lines


def _network_line(config: StackConfig) -> str:
    vpc = config.vpc
    if vpc.vpc_id is None:
        return f"Network: a new VPC {vpc.cidr} over {', '.join(vpc.availability_zones)}, {vpc.nat_gateways} NAT gateway(s)."
    subnets = ", ".join(
        f"{s.id} ({zone})" for s, zone in zip(vpc.private_subnets or [], vpc.availability_zones, strict=True)
    )
    trainium = f"; Trainium subnet {vpc.trainium_subnet.id}" if vpc.trainium_subnet is not None else ""
    return f"Network: existing VPC {vpc.vpc_id} ({vpc.cidr}), private subnets {subnets}{trainium}; the stack creates no network."


def _access_lines(config: StackConfig) -> list[str]:
    """Who may use the cluster, as the template's access entries grant it."""
    lines = ["", "## Access", "", "| IAM role | Kubernetes access |", "|---|---|"]
    for role_arn in config.cluster.admin_role_arns:
        lines.append(f"| {role_arn} | cluster-admin (AmazonEKSClusterAdminPolicy, whole cluster) |")
    for role_arn, groups in team_member_groups(config).items():
        lines.append(f"| {role_arn} | group {', '.join(groups)}: its team's namespace only |")
    if config.cluster.keep_creator_admin:
        lines.append("| whoever created the cluster | cluster-admin (keep_creator_admin: true) |")
    if len(lines) == 5:
        lines.append(
            "| none | no IAM role can use kubectl (cluster.admin_role_arns is empty; docs/access.md) |"
        )
    return lines


def _team_lines(config: StackConfig) -> list[str]:
    lines = [
        "",
        "## Teams",
        "",
        "| team (namespace) | queue | node groups | weight | uid | quota |",
        "|---|---|---|---|---|---|",
    ]
    for team in config.teams:
        quota = team.quota
        limits = [f"{quota.pods} pods"] + [
            f"{amount} {unit}"
            for amount, unit in (
                (quota.neuron_devices, "chips"),
                (quota.cpu, "cores"),
                (quota.memory_gib, "GiB"),
            )
            if amount is not None
        ]
        groups = ", ".join(group.name for group in config.team_node_groups(team))
        lines.append(
            f"| {team.name} | {team.queue_name} | {groups} | {team.weight} | {team.owner_id} | {', '.join(limits)} |"
        )
    return lines


def _run_lines(config: StackConfig) -> list[str]:
    lines = ["", "## Runs", ""]
    if not config.runs:
        return [*lines, "None configured (TorchX or kubectl apply start runs by hand; docs/runs.md)."]
    lines += ["| run | team | node group | nodes | applied at deploy | image |", "|---|---|---|---|---|---|"]
    for run in config.runs:
        group = config.run_node_group(run)
        lines.append(
            f"| {run.name} | {config.team(run.team).name} | {group.name} ({group.instance_type}) | "
            f"{run.nodes} | {'yes' if run.apply else 'no (rendered only)'} | {run.image} |"
        )
    return lines


def write_summary(
    config: StackConfig,
    *,
    stack_name: str,
    template: Mapping[str, Any],
    directory: Path,
    plan: KubernetesLayerPlan | None = None,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stack_name}.md"
    path.write_text(summary(config, stack_name=stack_name, template=template, plan=plan))
    return path


class ReviewedStack(Protocol):
    """What the review files read of a synthesized TrainiumStack (stacks/ sits above this package)."""

    @property
    def artifact_id(self) -> str: ...

    config: StackConfig
    review_plan: KubernetesLayerPlan


def write_review_files(
    assembly: cx_api.CloudAssembly,
    stacks: Sequence[ReviewedStack],
    outdir: Path,
    *,
    kubernetes: bool = True,
) -> None:
    """After ``app.synth()``: a summary per TrainiumStack and, unless told not to, the review YAML."""
    for stack in stacks:
        artifact = assembly.get_stack_artifact(stack.artifact_id)
        # The stack's own review plan: the charts are not rendered again for these files.
        plan = stack.review_plan
        write_summary(
            stack.config,
            # The deployed stack's name: TrainiumStack, or Dev-TrainiumStack in a pipeline stage
            # (display_name would give "Dev/TrainiumStack (Dev-TrainiumStack)").
            stack_name=artifact.stack_name,
            template=artifact.template,
            directory=outdir / SUMMARY_DIR,
            plan=plan,
        )
        if kubernetes:
            write_kubernetes_yaml(plan, outdir / KUBERNETES_DIR)


def fabric_check_job_file(stage_id: str, node_group: str) -> str:
    """Where the pipeline synth writes a stage's check of ``node_group``, relative to cdk.out."""
    return f"{FABRIC_CHECK_DIR}/{stage_id}/{job_name(node_group)}.json"


def write_fabric_check_jobs(config: StackConfig, *, stage_id: str, outdir: Path) -> list[Path]:
    """The Jobs the stage's deployment check runs (none unless fabric_check.pipeline is on)."""
    written = []
    jobs = pipeline_fabric_check_manifests(config, review_plan(config))
    for check, job in zip(pipeline_fabric_checks(config), jobs, strict=True):
        path = outdir / fabric_check_job_file(stage_id, check.node_group)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(job, indent=1) + "\n")
        written.append(path)
    return written
