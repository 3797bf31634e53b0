"""From the configuration (and the stack's file system) to the plan of the Kubernetes layer."""

from __future__ import annotations

import hashlib
import json
from fractions import Fraction

from cluster_facts.dra import DEVICE_TAINTS, NodeDevices, device_taints_usable, node_devices
from cluster_facts.image_sources import (
    ImageSource,
    cached_repository_arn,
    ecr_repository_arn,
    is_ecr_private_registry,
    mirror_prefix,
    upstream_repository,
)
from cluster_facts.images import split_image
from cluster_facts.kubernetes_names import (
    ETCD_CLIENT_PORT,
    ETCD_SERVICE_NAME,
    TEAMS_DIR,
    TRAINING_POD_LABELS,
    team_rbac_group,
)
from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from cluster_facts.script_files import program_text
from cluster_facts.stack_outputs import StackOutput
from cluster_facts.versions import CLUSTER_AUTOSCALER_IMAGE_TAGS
from config.model import StackConfig
from config.presets import (
    BERT_LARGE,
    NATIVE_FSDP2,
    PRESETS,
    DatasetPreset,
    bert_large_arguments,
    native_fsdp2_arguments,
)
from config.scale import trainium_max_capacity, trainium_max_nodes, volcano_log_level
from config.workloads import (
    DEFAULT_TRAINING_IMAGE,
    BertParameters,
    NativeParameters,
    RunSettings,
    TeamSettings,
)
from k8s_charts.addons.cluster_autoscaler import AutoscalerValues
from k8s_charts.checks.fabric_check import FabricCheckValues
from k8s_charts.checks.gang_watchdog import GangWatchdogValues
from k8s_charts.checks.node_check import NodeCheckValues
from k8s_charts.plan import (
    DRA_DEVICE_CLASSES,
    DraValues,
    FileSystemValues,
    KubernetesLayerValues,
    PlannedRun,
    QueueValues,
    TeamValues,
    plan_kubernetes_layer,
)
from k8s_charts.runs.dataset_staging import Dataset, RemoteFile
from k8s_charts.runs.tensorboard import TensorBoardValues
from k8s_charts.runs.training_run import PROGRAM_DIR, TrainingRun
from k8s_charts.teams.team_quota import TeamQuota
from k8s_charts.teams.volcano_queue import deserved_share, trainium_capability

__all__ = [
    "applied_plan",
    "autoscaler_values",
    "cached_repository_arns",
    "datasets",
    "dra_values",
    "fabric_checks",
    "file_system_generation",
    "file_system_values",
    "gang_watchdog_values",
    "image_source",
    "kubernetes_plan",
    "kubernetes_values",
    "mirrored_images",
    "placeholder_file_system",
    "review_plan",
    "root_zones",
    "run_image_repository_arns",
    "team_capability",
    "team_deserved",
    "team_device_claims",
    "team_exports",
    "team_member_groups",
    "team_quota",
    "training_run",
]


def file_system_generation(config: StackConfig) -> str:
    """Six hex digits that change exactly when CloudFormation replaces the file system.

    FSx for Lustre replaces a file system for a new deployment type, subnet (the Trainium zone) or,
    on SCRATCH_2, import path; a size or throughput change is made in place.
    """
    fsx = config.fsx
    replaced_by = [
        # The layout of the volumes (a team's directory and the data sets as volumes of their own):
        # when it changes, every claim is new rather than an update Kubernetes would refuse.
        "per-team volumes",
        fsx.deployment_type,
        config.trainium.availability_zone,
        fsx.s3_import_path if fsx.deployment_type == "SCRATCH_2" else None,
    ]
    return hashlib.sha256(json.dumps(replaced_by).encode()).hexdigest()[:6]


def team_exports(config: StackConfig) -> dict[str, str]:
    """With ``fsx.backups: s3``, each team's directory on the file system -> the S3 prefix it is
    exported to, ``<backup_s3_path>/<team>/``; otherwise none."""
    fsx = config.fsx
    if not fsx.exported or fsx.backup_s3_path is None:
        return {}
    prefix = fsx.backup_s3_path.rstrip("/")
    return {f"/{TEAMS_DIR}/{team.name}": f"{prefix}/{team.name}/" for team in config.teams}


def run_image_repository_arns(config: StackConfig) -> list[str]:
    """The private ECR repositories the runs' images are in (this account's, or the declared
    ``ecr.cross_account_repositories``; config/consistency.py refuses any other): the Trainium node
    role may pull from each, and from no other repository of those accounts."""
    return sorted({arn for run in config.runs if (arn := ecr_repository_arn(run.image)) is not None})


def team_member_groups(config: StackConfig) -> dict[str, list[str]]:
    """Each member role and the Kubernetes groups of the teams it belongs to (one access entry per role)."""
    groups: dict[str, list[str]] = {}
    for team in config.teams:
        for role_arn in team.member_role_arns:
            groups.setdefault(role_arn, []).append(team_rbac_group(team.name))
    return groups


def root_zones(config: StackConfig) -> tuple[str, ...]:
    """The zones whose nodes keep root on the file system: every zone of the VPC but the Trainium one.

    Root squash exempts the private subnets of these zones (constructs_trn/lustre_storage.py), where
    only system nodes run; the Trainium subnet, system nodes in it included, is squashed. The
    platform's Jobs, which create the layout as root, are scheduled into these zones."""
    return tuple(zone for zone in config.vpc.availability_zones if zone != config.trainium.availability_zone)


def file_system_values(
    config: StackConfig, *, file_system_id: str, dns_name: str, mount_name: str
) -> FileSystemValues:
    return FileSystemValues(
        file_system_id=file_system_id,
        dns_name=dns_name,
        mount_name=mount_name,
        storage_capacity_gib=config.fsx.storage_capacity_gib,
        generation=file_system_generation(config),
        root_zones=root_zones(config),
    )


def placeholder_file_system(config: StackConfig) -> FileSystemValues:
    """The file system as the review YAML shows it: its deploy-time values as ``${StackOutput}``."""
    return file_system_values(
        config,
        file_system_id=StackOutput.FSX_FILE_SYSTEM_ID.placeholder,
        dns_name=StackOutput.FSX_DNS_NAME.placeholder,
        mount_name=StackOutput.FSX_MOUNT_NAME.placeholder,
    )


def _preset_dataset(preset: DatasetPreset, *, archive_sha256: str | None) -> Dataset:
    return Dataset(
        name=preset.name,
        archive_url=preset.archive_url,
        archive_sha256=preset.archive_sha256 or archive_sha256,
        files=tuple(RemoteFile(url=file.url, sha256=file.sha256, name=file.name) for file in preset.files),
    )


def datasets(config: StackConfig) -> dict[str, Dataset]:
    """Every data set to stage, by name: the configured ones and those a preset run brings."""
    found = {
        dataset.name: Dataset(
            name=dataset.name,
            archive_url=dataset.archive_url,
            archive_sha256=dataset.archive_sha256,
            files=tuple(
                RemoteFile(url=file.url, sha256=file.sha256, name=file.name) for file in dataset.files
            ),
        )
        for dataset in config.datasets
    }
    preset_runs = [run for run in config.runs if run.preset == BERT_LARGE.name]
    if preset_runs:
        # One pin at most (config/consistency.py): the runs of the preset share its data set.
        pins = [
            run.parameters.dataset_archive_sha256
            for run in preset_runs
            if isinstance(run.parameters, BertParameters)
        ]
        found[BERT_LARGE.dataset.name] = _preset_dataset(
            BERT_LARGE.dataset, archive_sha256=next((pin for pin in pins if pin), None)
        )
    if any(run.preset == NATIVE_FSDP2.name for run in config.runs):
        found[NATIVE_FSDP2.dataset.name] = _preset_dataset(NATIVE_FSDP2.dataset, archive_sha256=None)
    return found


def image_source(config: StackConfig) -> ImageSource:
    """Where the cluster pulls upstream images from: the account's pull-through cache, for every
    registry it has a rule for (none when ``ecr.pull_through_cache`` is off)."""
    return ImageSource(
        account=config.account,
        region=config.region,
        cached=config.ecr.cached_registries,
        mirrored=config.ecr.mirrored_registries,
        mirror=mirror_prefix(config.name),
    )


def team_capability(config: StackConfig, team: TeamSettings) -> dict[str, str]:
    """What the team's node groups hold at max_size: the queue lets a run use any of it, and never
    less than the autoscaler can bring (a capped task would idle the nodes added for it)."""
    return trainium_capability(
        [(group.instance, group.max_size, group.uses_dra) for group in config.team_node_groups(team)]
    )


def team_deserved(config: StackConfig, team: TeamSettings) -> dict[str, str]:
    """The team's share of its node groups at max_size: of each group, its weight over the weights
    of every team that uses the group (the whole group when no other team does)."""
    shares = []
    for group in config.team_node_groups(team):
        sharing = [
            other
            for other in config.teams
            if group.name in {mine.name for mine in config.team_node_groups(other)}
        ]
        share = Fraction(team.weight, sum(o.weight for o in sharing))
        shares.append((group.instance, group.max_size, share, group.uses_dra))
    return deserved_share(shares)


def cached_repository_arns(config: StackConfig, plan: KubernetesLayerPlan) -> list[str]:
    """The pull-through cache repositories of every image the stack names: the plan's (applied or
    not: a rendered run may be applied by hand) and the training image the TorchX component submits
    by default. The node roles may import into these and no others."""
    images = [*plan.images(), image_source(config).resolve(DEFAULT_TRAINING_IMAGE)]
    arns = {cached_repository_arn(image, account=config.account, region=config.region) for image in images}
    return sorted(arn for arn in arns if arn is not None)


def mirrored_images(config: StackConfig, plan: KubernetesLayerPlan) -> list[tuple[str, str]]:
    """The images the stack copies into the account at deploy, as (upstream, repository name): every
    image of the plan that resolves to the mirror (constructs_trn/image_mirror.py copies them)."""
    prefix = f"{mirror_prefix(config.name)}/"
    copies = []
    for image in plan.images():
        host, path, tag, digest = split_image(image)
        if is_ecr_private_registry(host) and path.startswith(prefix):
            upstream = (
                upstream_repository(image) + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
            )
            copies.append((upstream, path))
    return copies


def team_quota(config: StackConfig, team: TeamSettings) -> TeamQuota:
    """The team's ``quota``: its pod count and the amounts it sets, no others. The team's share of
    Trainium is its queue's capability (``team_capability``), which keeps a queued gang's pods
    Pending; a quota amount would refuse them, and Volcano ends a Job whose pods are refused
    (k8s_charts/teams/team_quota.py)."""
    configured = team.quota
    return TeamQuota(
        pods=configured.pods,
        jobs=configured.jobs,
        cpu=configured.cpu,
        memory_gib=configured.memory_gib,
        neuron_devices=configured.neuron_devices,
        device_classes=(
            TeamQuota.device_limits(
                DRA_DEVICE_CLASSES,
                uses_dra=bool(team_device_claims(config, team)),
                neuron_devices=configured.neuron_devices,
            )
            if dra_values(config) is not None
            else {}
        ),
    )


def team_device_claims(config: StackConfig, team: TeamSettings) -> dict[str, NodeDevices]:
    """The team's ``devices: dra`` groups -> what a pod claims of one of their nodes."""
    return {
        group.name: node_devices(group.instance) for group in config.team_node_groups(team) if group.uses_dra
    }


def dra_values(config: StackConfig, *, device_taints: bool | None = None) -> DraValues | None:
    """The DRA drivers of the ``devices: dra`` groups; None without one. ``device_taints``: whether
    device taints are served and Volcano reads them; by default whether that holds on EKS at the
    cluster's version (cluster_facts/dra.py ``device_taints_usable``: never, with Volcano 1.15.1);
    tests/cluster turns it on with the feature gates and the API version Volcano reads."""
    groups = [group for group in config.trainium.node_groups if group.uses_dra]
    if not groups:
        return None
    usable = device_taints_usable(config.cluster.kubernetes_version)
    return DraValues(
        instance_types=tuple(dict.fromkeys(group.instance_type for group in groups)),
        device_taints=usable if device_taints is None else device_taints,
    )


def device_taint_rule_api(config: StackConfig, dra: DraValues | None) -> str | None:
    """The DeviceTaintRule API version the node check writes, where device taints are served."""
    if dra is None or not dra.device_taints:
        return None
    support = DEVICE_TAINTS.get(config.cluster.kubernetes_version)
    return support.rule_api if support is not None else None


def training_run(
    config: StackConfig, run: RunSettings, *, file_system: FileSystemValues, staged: dict[str, Dataset]
) -> TrainingRun:
    """The run as the chart takes it: a preset filled in, the team, group and claims resolved."""
    team = config.team(run.team)
    group = config.run_node_group(run)
    program_files: dict[str, str] = {}
    if isinstance(run.parameters, BertParameters):
        parameters = run.parameters
        script, arguments = (
            BERT_LARGE.script or "",
            bert_large_arguments(
                batch_size=parameters.batch_size,
                grad_accum_usteps=run.grad_accum_usteps,
                bf16=parameters.bf16,
                shards_per_ckpt=parameters.shards_per_ckpt,
            ),
        )
        # Set either way: the script turns stochastic rounding on for BF16 whenever it is absent.
        environment = {"NEURON_RT_STOCHASTIC_ROUNDING_EN": "1" if parameters.stochastic_rounding else "0"}
    elif isinstance(run.parameters, NativeParameters):
        recipe, program = run.parameters, NATIVE_FSDP2.program or ""
        # The project's own program, in the run's ConfigMap: checked by its SHA-256 like any code.
        program_files = {program: program_text(program)}
        script = f"{PROGRAM_DIR}/{program}"
        arguments = native_fsdp2_arguments(**recipe.model_dump())
        environment = {"PYTHONUNBUFFERED": "1"}
    else:
        assert run.script is not None  # the model requires it without a preset
        script, arguments, environment = run.script, tuple(run.args), {}
    preset = PRESETS.get(run.preset or "")
    if preset is not None:
        needs = [preset.dataset.name]
        packages, resume_glob, resume_args = (
            preset.python_requirements,
            preset.resume_glob,
            preset.resume_args,
        )
    else:
        needs = list(run.datasets)
        packages = tuple(run.python_packages)
        resume_glob, resume_args = (run.resume.when, tuple(run.resume.args)) if run.resume else ("", ())
    precompile = run.precompile
    return TrainingRun(
        name=run.name,
        instance=group.instance,
        node_group=group.name,
        nodes=run.nodes,
        image=image_source(config).resolve(run.image),
        namespace=team.name,
        queue=team.queue_name,
        claim_name=file_system.claim_name,
        datasets_claim_name=file_system.datasets_claim_name,
        script=script,
        script_args=arguments,
        environment={**environment, **run.env},
        datasets=tuple(staged[name] for name in needs),
        python_requirements=packages,
        precompile_args=(precompile.steps_arg, str(precompile.steps)) if precompile else None,
        resume_glob=resume_glob,
        resume_args=resume_args,
        cacheset=run.cacheset_name,
        retries=run.retries,
        rendezvous_endpoint=f"{ETCD_SERVICE_NAME}:{ETCD_CLIENT_PORT}",
        pod_labels=TRAINING_POD_LABELS,
        run_as=team.owner_id,
        stuck_minutes=run.stuck_minutes,
        devices=(
            node_devices(group.instance, logical_core_size=run.logical_core_size) if group.uses_dra else None
        ),
        program_files=program_files,
        logical_core_size=run.logical_core_size,
    )


def kubernetes_values(
    config: StackConfig, *, file_system: FileSystemValues, device_taints: bool | None = None
) -> KubernetesLayerValues:
    staged = datasets(config)
    dra = dra_values(config, device_taints=device_taints)
    return KubernetesLayerValues(
        region=config.region,
        vpc_cidr=config.vpc.cidr,
        file_system=file_system,
        teams=tuple(
            TeamValues(
                name=team.name,
                queue=QueueValues(
                    name=team.queue_name,
                    capability=team_capability(config, team),
                    weight=team.weight,
                    deserved=team_deserved(config, team),
                ),
                member_group=team_rbac_group(team.name),
                uid=team.owner_id,
                node_groups=tuple(group.name for group in config.team_node_groups(team)),
                quota=team_quota(config, team),
                device_claims=team_device_claims(config, team),
                instance_types={group.name: group.instance_type for group in config.team_node_groups(team)},
            )
            for team in config.teams
        ),
        datasets=tuple(staged.values()),
        runs=tuple(
            PlannedRun(
                run=training_run(config, run, file_system=file_system, staged=staged), applied=run.apply
            )
            for run in config.runs
        ),
        tensorboard=TensorBoardValues(
            applied=config.observability.tensorboard,
            memory_gib=config.observability.tensorboard_memory_gib,
        ),
        autoscaler=autoscaler_values(config),
        volcano_log_level=volcano_log_level(config),
        gang_watchdog=gang_watchdog_values(config),
        fabric_checks=fabric_checks(config),
        node_check=NodeCheckValues(
            # The cluster's training image: it ships the Neuron and EFA tools and the AWS CLI, and its
            # pull on a new node also serves that node's first training pod.
            image=DEFAULT_TRAINING_IMAGE,
            lustre_host=file_system.dns_name,
            region=config.region,
            vpc_cidr=config.vpc.cidr,
            replace_failed_nodes=config.node_check.replace_failed_nodes,
            replace_unresponsive_after_seconds=(
                None
                if config.node_check.replace_unresponsive_after_minutes is None
                else config.node_check.replace_unresponsive_after_minutes * 60
            ),
            node_groups=tuple(group.name for group in config.trainium.node_groups),
            replacements_per_window=config.node_check.replacements_per_window,
            replacement_window_seconds=config.node_check.replacement_window_minutes * 60,
            device_taint_rule_api=device_taint_rule_api(config, dra),
        ),
        images=image_source(config),
        dra=dra,
    )


def gang_watchdog_values(config: StackConfig) -> GangWatchdogValues | None:
    """With the autoscaler (``autoscaler.gang_watchdog``): every team's gangs, every Trainium group."""
    if not config.autoscaler.gang_watchdog:
        return None
    return GangWatchdogValues(
        namespaces=tuple(team.name for team in config.teams),
        node_groups=tuple(group.name for group in config.trainium.node_groups),
        # A gang is cordoned for only on its own team's groups.
        team_node_groups={
            team.name: tuple(group.name for group in config.team_node_groups(team)) for team in config.teams
        },
        # A scale-up still under way is given as long as the autoscaler gives it.
        threshold_minutes=config.autoscaler.max_node_provision_minutes,
        stuck_run_minutes=config.autoscaler.stuck_run_minutes,
        stuck_run_max_minutes=config.stuck_run_ceiling_minutes,
    )


def fabric_checks(config: StackConfig) -> tuple[FabricCheckValues, ...]:
    """Every Trainium group's check, on the queue of the first team that may use the group."""
    settings = config.fabric_check
    return tuple(
        FabricCheckValues(
            node_group=group.name,
            instance=group.instance,
            nodes=group.max_size,
            # The training image: it ships nccom-test, Open MPI and sshd (docs/fabric-check.md); pulled
            # like every other image (through the account's cache when it is on).
            image=image_source(config).resolve(DEFAULT_TRAINING_IMAGE),
            queue=next(
                (team.queue_name for team in config.teams if group in config.team_node_groups(team)), None
            ),
            threshold=settings.threshold,
            message_bytes=settings.message_bytes,
            taint=settings.taint_failed_nodes,
            # A worker takes its node as a training pod does: by claim on a DRA group.
            devices=node_devices(group.instance) if group.uses_dra else None,
        )
        for group in config.trainium.node_groups
    )


def autoscaler_values(config: StackConfig) -> AutoscalerValues:
    settings = config.autoscaler
    cores, memory_gib = trainium_max_capacity(config)
    return AutoscalerValues(
        cluster_name=config.name,
        region=config.region,
        image_tag=CLUSTER_AUTOSCALER_IMAGE_TAGS[config.cluster.kubernetes_version],
        scale_down_unneeded_minutes=settings.scale_down_unneeded_minutes,
        scale_down_delay_after_add_minutes=settings.scale_down_delay_after_add_minutes,
        max_node_provision_minutes=settings.max_node_provision_minutes,
        expander=settings.expander,
        dra=any(group.uses_dra for group in config.trainium.node_groups),
        trainium_max_nodes=trainium_max_nodes(config),
        trainium_max_cores=cores,
        trainium_max_memory_gib=memory_gib,
    )


def kubernetes_plan(
    config: StackConfig, *, file_system: FileSystemValues, device_taints: bool | None = None
) -> KubernetesLayerPlan:
    return plan_kubernetes_layer(
        kubernetes_values(config, file_system=file_system, device_taints=device_taints)
    )


def review_plan(config: StackConfig) -> KubernetesLayerPlan:
    """The plan as ``make synth`` writes it for review, with placeholders for deploy-time values."""
    return kubernetes_plan(config, file_system=placeholder_file_system(config))


def applied_plan(
    review: KubernetesLayerPlan, *, file_system_id: str, dns_name: str, mount_name: str
) -> KubernetesLayerPlan:
    """The review plan with the file system's placeholders replaced by its deploy-time values (the
    stack's tokens): what ``kubernetes_plan`` renders with those values, without a second rendering.
    The charts only embed these values (a renamed or hashed one would differ; tests compare both)."""
    return review.with_strings_replaced(
        {
            StackOutput.FSX_FILE_SYSTEM_ID.placeholder: file_system_id,
            StackOutput.FSX_DNS_NAME.placeholder: dns_name,
            StackOutput.FSX_MOUNT_NAME.placeholder: mount_name,
        }
    )
