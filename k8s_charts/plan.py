"""The whole Kubernetes layer as one plan: every chart rendered, in deploy order, from plain values.

The stack builds the plan with CDK tokens for the file system's deploy-time values and applies each
step as one custom resource (constructs_trn.kubernetes_layer); ``make synth`` builds it again with
readable placeholders and writes it as YAML under ``cdk.out/k8s/`` (cluster_plan.review_files).

Deploy-time order (``after``):
- Volcano's admission webhook rejects Queues and Jobs until it serves, and its Deployment has no
  readiness probe, so Helm's wait is not enough: a gate waits until the webhook manager has put its
  CA into its webhook configuration, which it does right before it starts serving.
- Volcano admits Jobs only into an Open queue: a second gate waits for the controller to open each queue.
- Data sets need their claim; runs need the queues, etcd, the claim and their data sets' Jobs.

Runtime order inside the cluster (a data set staged before a run works) is kept by the pods.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import cdk8s

from cluster_facts.autoscaling import AUTOSCALER_NAME, AUTOSCALER_NAMESPACE
from cluster_facts.cluster_scale import VOLCANO_LOG_LEVEL
from cluster_facts.dra import EFA_DEVICE_CLASS, NEURON_DEVICE_CLASS, NodeDevices
from cluster_facts.image_sources import ImageSource
from cluster_facts.images import split_image
from cluster_facts.kubernetes_names import (
    NEURON_RESOURCE,
    PLATFORM_NAMESPACE,
    datasets_claim,
    file_system_claim,
)
from cluster_facts.kubernetes_plan import (
    HelmRelease,
    KubernetesLayerPlan,
    KubernetesStep,
    ManifestSet,
    ReadinessGate,
)
from cluster_facts.vendored_charts import CLUSTER_AUTOSCALER_CHART, VOLCANO_CHART
from cluster_facts.versions import VOLCANO_IMAGE_REGISTRY
from k8s_charts.addons.api_fairness import ApiFairnessChart
from k8s_charts.addons.cluster_autoscaler import AutoscalerValues, cluster_autoscaler_values
from k8s_charts.addons.fsx_storage import FsxStorageChart
from k8s_charts.addons.pod_security import PLATFORM_POD_SECURITY, TEAM_POD_SECURITY, VOLCANO_POD_SECURITY
from k8s_charts.addons.priority_classes import PriorityClassChart
from k8s_charts.addons.volcano_controller_admission import VolcanoControllerAdmissionChart
from k8s_charts.addons.volcano_scheduler import volcano_images, volcano_values
from k8s_charts.checks.fabric_check import FabricCheckValues, fabric_check_steps
from k8s_charts.checks.gang_watchdog import GangWatchdogValues, gang_watchdog_steps
from k8s_charts.checks.node_check import ADMISSION_STEP as NODE_CHECK_ADMISSION
from k8s_charts.checks.node_check import STEP as NODE_CHECK
from k8s_charts.checks.node_check import NodeCheckAdmissionChart, NodeCheckChart, NodeCheckValues
from k8s_charts.devices.device_claims import NodeClaimTemplatesChart
from k8s_charts.devices.device_plugin_admission import DevicePluginAdmissionChart
from k8s_charts.devices.dra_admission import DraAdmissionChart, TeamClaimsAdmissionChart
from k8s_charts.devices.efa_device_plugin import EfaDevicePluginChart
from k8s_charts.devices.efa_dra_driver import EfaDraDriverChart
from k8s_charts.devices.neuron_device_plugin import DEFAULT_IMAGE as NEURON_DEVICE_PLUGIN_IMAGE
from k8s_charts.devices.neuron_device_plugin import NeuronDevicePluginChart
from k8s_charts.devices.neuron_dra_driver import DEFAULT_IMAGE as NEURON_DRA_DRIVER_IMAGE
from k8s_charts.devices.neuron_dra_driver import NeuronDraDriverChart
from k8s_charts.network.system_network import AutoscalerNetworkChart, VolcanoNetworkChart
from k8s_charts.network.tenant_network import NamespaceIsolationChart, TeamNetworkChart
from k8s_charts.runs.dataset_staging import S3_FETCH_IMAGE, Dataset, DatasetStagingChart, staging_job_name
from k8s_charts.runs.fsx_layout import FsxLayoutChart, layout_job_name
from k8s_charts.runs.tensorboard import DEFAULT_IMAGE as TENSORBOARD_IMAGE
from k8s_charts.runs.tensorboard import TensorBoardChart, TensorBoardValues
from k8s_charts.runs.training_run import TrainingRun, TrainingRunChart, run_id
from k8s_charts.runs.worker_script import WorkerScriptChart
from k8s_charts.shared.platform_jobs import DEFAULT_IMAGE as PLATFORM_JOB_IMAGE
from k8s_charts.shared.resources import ContainerDefaultsChart
from k8s_charts.stored_form import as_stored
from k8s_charts.teams.etcd import DEFAULT_IMAGE as ETCD_IMAGE
from k8s_charts.teams.etcd import MEMBER_IMAGE as ETCD_MEMBER_IMAGE
from k8s_charts.teams.etcd import EtcdChart
from k8s_charts.teams.job_pod_admission import (
    JobPodAdmissionChart,
    volcano_controller,
    volcano_controller_account,
)
from k8s_charts.teams.namespaces import NamespaceChart
from k8s_charts.teams.team_quota import OBJECTS_QUOTA, TeamQuota, TeamQuotaChart, counted_kind
from k8s_charts.teams.team_settings import TeamSettingsChart, team_settings_data
from k8s_charts.teams.tenant_admission import PlatformPod, TeamPlacement, TenantAdmissionChart
from k8s_charts.teams.volcano_queue import VolcanoQueueChart

__all__ = [
    "CLUSTER_AUTOSCALER",
    "DRA_ADMISSION",
    "VOLCANO",
    "DraValues",
    "FileSystemValues",
    "KubernetesLayerValues",
    "PlannedRun",
    "QueueValues",
    "TeamValues",
    "plan_kubernetes_layer",
    "queue_step",
    "quota_gate",
    "render",
]

VOLCANO = "volcano"
"""The step that installs Volcano (the Helm release)."""
PLATFORM_STEP = "platform-namespace"
VOLCANO_NAMESPACE = "volcano-system"
VOLCANO_NAMESPACE_STEP = "volcano-namespace"
VOLCANO_NETWORK_STEP = "volcano-network"
AUTOSCALER_NETWORK_STEP = "cluster-autoscaler-network"
JOB_POD_ADMISSION = "volcano-job-pod-admission"
VOLCANO_CONTROLLER_ADMISSION = "volcano-controller-admission"
API_FAIRNESS = "api-fairness"
DEVICE_PLUGIN_ADMISSION = "neuron-device-plugin-admission"
TEAMS_STEP = "training-namespace"
PRIORITY_STEP = "priority-classes"
TENANT_ADMISSION = "team-admission"
CLUSTER_AUTOSCALER = "cluster-autoscaler"
"""The step that installs the cluster autoscaler (the Helm release)."""
DRA_ADMISSION = "dra-admission"
"""The fences of the DRA drivers and objects (k8s_charts/devices/dra_admission.py), before the drivers run."""
DRA_DEVICE_CLASSES = (NEURON_DEVICE_CLASS, EFA_DEVICE_CLASS)
# The webhook configuration the webhook manager patches with its CA just before it serves
# (volcano v1.15.1 cmd/webhook-manager/app/server.go: addCaCertForWebhook, then ListenAndServeTLS).
_VOLCANO_WEBHOOK = "volcano-admission-service-jobs-validate"


@dataclass(frozen=True, kw_only=True)
class FileSystemValues:
    """The FSx for Lustre file system the PersistentVolumes name (tokens in the stack)."""

    file_system_id: str
    dns_name: str
    mount_name: str
    storage_capacity_gib: int
    generation: str
    """Changes exactly when CloudFormation replaces the file system: every claim is named after it."""
    root_zones: tuple[str, ...]
    """The zones whose system nodes keep root on the file system (its root squash exemptions): the
    platform's Jobs run there, and only there can they create the layout."""

    @property
    def claim_name(self) -> str:
        """The claim of the whole file system (platform namespace) or of a team's directory (its namespace)."""
        return file_system_claim(self.generation)

    @property
    def datasets_claim_name(self) -> str:
        return datasets_claim(self.generation)


@dataclass(frozen=True, kw_only=True)
class QueueValues:
    name: str
    capability: Mapping[str, str]
    weight: int = 1
    deserved: Mapping[str, str] | None = None
    """The team's share of its node groups (k8s_charts/teams/volcano_queue.py, ``deserved_share``)."""


@dataclass(frozen=True, kw_only=True)
class TeamValues:
    """A team: its namespace, its queue and the Kubernetes group of its members."""

    name: str
    queue: QueueValues
    member_group: str
    uid: int
    """Owner (uid = gid) of the team's directory; its training pods run as it."""
    node_groups: tuple[str, ...]
    """The Trainium node groups its pods may run on (an admission policy holds them there)."""
    quota: TeamQuota
    instance_types: Mapping[str, str] = field(default_factory=dict)
    """Each of ``node_groups``' instance type, for the team's settings (k8s_charts/teams/team_settings.py)."""
    device_claims: Mapping[str, NodeDevices] = field(default_factory=dict)
    """Its ``devices: dra`` node groups -> what a pod claims of one node there (its namespace gets a
    ``trainium-node-<group>`` ResourceClaimTemplate of each, and may claim their DeviceClasses)."""


@dataclass(frozen=True, kw_only=True)
class DraValues:
    """The cluster's ``devices: dra`` node groups: the drivers that serve them."""

    instance_types: tuple[str, ...]
    """The instance types of those groups (the drivers' node affinity, besides the group label)."""
    device_taints: bool = False
    """Device taints are served (cluster_facts/dra.py ``DEVICE_TAINTS``): Volcano honours them."""


@dataclass(frozen=True, kw_only=True)
class PlannedRun:
    run: TrainingRun
    applied: bool
    """Apply the run at deploy (it is rendered either way)."""


@dataclass(frozen=True, kw_only=True)
class KubernetesLayerValues:
    region: str
    vpc_cidr: str
    """The cluster's VPC: never "outside the cluster" for the pods' HTTPS egress."""
    file_system: FileSystemValues
    teams: tuple[TeamValues, ...]
    datasets: tuple[Dataset, ...]
    runs: tuple[PlannedRun, ...]
    tensorboard: TensorBoardValues = field(default_factory=TensorBoardValues)
    autoscaler: AutoscalerValues | None = None
    """The cluster autoscaler of the Trainium node groups; None: the plan installs none."""
    gang_watchdog: GangWatchdogValues | None = None
    """The watchdog that ends Volcano's partial-gang stall (k8s_charts/checks/gang_watchdog.py); None: none."""
    fabric_checks: tuple[FabricCheckValues, ...] = ()
    """One per Trainium node group: its fabric check, rendered and not applied (k8s_charts/checks/fabric_check.py)."""
    node_check: NodeCheckValues | None = None
    """The check every new Trainium node passes before its startup taint goes (k8s_charts/checks/node_check.py)."""
    images: ImageSource = field(default_factory=ImageSource)
    """Where every upstream image is pulled from (the account's pull-through cache, or upstream).
    A run's image comes resolved already (``TrainingRun.image``)."""
    dra: DraValues | None = None
    """The DRA drivers, their fences and the teams' claim templates; None: no ``devices: dra`` group."""
    volcano_log_level: int = VOLCANO_LOG_LEVEL
    """Volcano's scheduler's klog verbosity: lower on large clusters (config/scale.py
    ``volcano_log_level``)."""


ChartBuilder = Callable[[cdk8s.App, str], cdk8s.Chart]
# Stacks deployed before teams existed apply the one queue, `test`, as the step "volcano-queue": a
# new name would make CloudFormation delete that resource, and with it the queue, after the update.
_LEGACY_QUEUE_STEPS = {"test": "volcano-queue"}


def queue_step(queue: str) -> str:
    """The step (custom resource) that applies the Volcano queue ``queue``."""
    return _LEGACY_QUEUE_STEPS.get(queue, f"volcano-queue-{queue}")


def render(build: ChartBuilder, name: str = "chart") -> tuple[Mapping[str, Any], ...]:
    """The objects of one chart, built under a cdk8s App of its own (one chart per app), as the API
    server stores them (k8s_charts/stored_form.py: a second apply then changes nothing)."""
    return tuple(as_stored(manifest) for manifest in build(cdk8s.App(), name).to_json())


def _volcano(images: ImageSource, *, device_taints: bool = False, log_level: int) -> HelmRelease:
    values = volcano_values(
        image_registry=images.registry(VOLCANO_IMAGE_REGISTRY),
        device_taints=device_taints,
        log_level=log_level,
    )
    return HelmRelease(
        name=VOLCANO,
        chart=VOLCANO_CHART.name,
        version=VOLCANO_CHART.version,
        # Kept in the repository and shipped as an asset of the stack (cluster_facts/vendored_charts.py).
        chart_directory=VOLCANO_CHART.directory,
        release="volcano",
        namespace=VOLCANO_NAMESPACE,
        # Into the namespace the plan creates with its Pod Security labels (Helm's own would have none),
        # under the namespace's NetworkPolicies, its controller fenced from its first request.
        after=(VOLCANO_NAMESPACE_STEP, VOLCANO_NETWORK_STEP, VOLCANO_CONTROLLER_ADMISSION),
        # The scheduler configuration without enqueue (k8s_charts/addons/volcano_scheduler.py): queued gangs
        # get their pods, which the cluster autoscaler sees.
        values=values,
        wait=True,
        # Helm waits up to this for the admission-init hook Job, then again for the release's pods:
        # 2 x 6 minutes leaves the kubectl handler time to report a hang (cluster_facts/deploy_timeouts.py).
        timeout_minutes=6,
        hook_waits=VOLCANO_CHART.hook_waits,
        images=volcano_images(values),
    )


def _cluster_autoscaler(values: AutoscalerValues, images: ImageSource) -> HelmRelease:
    host, path, tag, digest = split_image(images.resolve(values.image))
    if digest is not None or tag is None:
        # The chart composes repository:tag; a digest would need a chart that takes one.
        raise ValueError(f"the cluster-autoscaler chart takes repository and tag only, not {values.image!r}")
    values = replace(values, image_repository=f"{host}/{path}", image_tag=tag)
    return HelmRelease(
        name=CLUSTER_AUTOSCALER,
        chart=CLUSTER_AUTOSCALER_CHART.name,
        version=CLUSTER_AUTOSCALER_CHART.version,
        chart_directory=CLUSTER_AUTOSCALER_CHART.directory,
        release=AUTOSCALER_NAME,
        namespace=AUTOSCALER_NAMESPACE,
        values=cluster_autoscaler_values(values),
        # Waits for the autoscaler's pod on the system nodes, never for a Trainium node.
        wait=True,
        timeout_minutes=5,
        images=(values.image,),
        after=(AUTOSCALER_NETWORK_STEP,),
    )


def _identity(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:8]


def plan_kubernetes_layer(values: KubernetesLayerValues) -> KubernetesLayerPlan:
    """Every step, in deploy order; each chart rendered in its own cdk8s App. Each room's steps come
    from its own function, which reads only its part of ``values``."""
    volcano = _volcano(
        values.images,
        device_taints=values.dra is not None and values.dra.device_taints,
        log_level=values.volcano_log_level,
    )
    queue_gates = {team.queue.name: f"queue-{team.queue.name}-open" for team in values.teams}
    steps: list[KubernetesStep] = [
        *_device_steps(values),
        *_node_check_steps(values),
        *_addon_steps(values, volcano),
        *_queue_steps([team.queue for team in values.teams]),
        *_team_steps(values),
        *_storage_steps(values),
        *_watchdog_steps(values),
        *_run_steps(values.runs, queue_gates),
        _tensorboard_step(values),
        # The fabric checks: their access applied, each group's job rendered for kubectl (not applied).
        *fabric_check_steps(
            values.fabric_checks,
            namespace=PLATFORM_NAMESPACE,
            vpc_cidr=values.vpc_cidr,
            after=(PLATFORM_STEP,),
            queue_gates=queue_gates,
            render=render,
        ),
    ]
    return KubernetesLayerPlan.of(_with_team_admission(steps, values))


def _chart(
    name: str,
    build: ChartBuilder,
    *,
    after: tuple[str, ...] = (),
    applied: bool = True,
    identity: str | None = None,
) -> ManifestSet:
    return ManifestSet(
        name=name, manifests=render(build, name), after=after, applied=applied, identity=identity
    )


def _device_steps(values: KubernetesLayerValues) -> list[KubernetesStep]:
    """The device plugins (or, beside them, the DRA drivers) and the fence that confines them."""
    images = values.images
    beside_dra = values.dra is not None
    chart = _chart
    return [
        # The API server confines the plugin's service account to its own node before the plugin
        # runs (k8s_charts/devices/device_plugin_admission.py).
        chart(DEVICE_PLUGIN_ADMISSION, DevicePluginAdmissionChart),
        chart(
            "neuron-device-plugin",
            partial(
                NeuronDevicePluginChart,
                image=images.resolve(NEURON_DEVICE_PLUGIN_IMAGE),
                vpc_cidr=values.vpc_cidr,
                beside_dra=beside_dra,
            ),
            after=(DEVICE_PLUGIN_ADMISSION,),
        ),
        # EKS's regional registry: not cached (cluster_facts.image_sources.DIRECT_PULLS).
        chart(
            "efa-device-plugin",
            lambda app, name: EfaDevicePluginChart(app, name, region=values.region, beside_dra=beside_dra),
        ),
        *_dra_steps(values, chart),
    ]


def _node_check_steps(values: KubernetesLayerValues) -> list[KubernetesStep]:
    """The node check's fence first, then the check (k8s_charts/checks/node_check.py)."""
    if values.node_check is None:
        return []
    images = values.images
    chart = _chart
    return [
        chart(NODE_CHECK_ADMISSION, NodeCheckAdmissionChart),
        chart(
            NODE_CHECK,
            partial(
                NodeCheckChart,
                values=replace(values.node_check, image=images.resolve(values.node_check.image)),
            ),
            after=(NODE_CHECK_ADMISSION,),
        ),
    ]


def _addon_steps(values: KubernetesLayerValues, volcano: HelmRelease) -> list[KubernetesStep]:
    """The cluster autoscaler, priority classes and Volcano with the fences around it."""
    images = values.images
    team_names = [team.name for team in values.teams]
    chart = _chart
    autoscaler: list[KubernetesStep] = (
        [
            chart(AUTOSCALER_NETWORK_STEP, partial(AutoscalerNetworkChart, vpc_cidr=values.vpc_cidr)),
            _cluster_autoscaler(values.autoscaler, images),
        ]
        if values.autoscaler is not None
        else []
    )
    return [
        # The autoscaler's NetworkPolicy before the release that creates its pod (k8s_charts/network/system_network.py).
        *autoscaler,
        # Before anything that names them: a pod naming a class that does not exist is refused.
        chart(PRIORITY_STEP, PriorityClassChart),
        ManifestSet(
            name=VOLCANO_NAMESPACE_STEP,
            manifests=(
                *render(partial(NamespaceChart, name=VOLCANO_NAMESPACE, pod_security=VOLCANO_POD_SECURITY)),
                # Requests and limits for a container of Volcano's that declares none (a chart upgrade).
                *render(partial(ContainerDefaultsChart, namespace=VOLCANO_NAMESPACE)),
            ),
        ),
        # Default-deny in Volcano's namespace and what each of its pods needs, before the release
        # (its pre-install hook Job already runs under them).
        chart(
            VOLCANO_NETWORK_STEP,
            partial(VolcanoNetworkChart, namespace=VOLCANO_NAMESPACE, vpc_cidr=values.vpc_cidr),
            after=(VOLCANO_NAMESPACE_STEP,),
        ),
        # Volcano's controller writes only its Jobs' objects, where Volcano Jobs run, from its first
        # request (k8s_charts/addons/volcano_controller_admission.py).
        chart(
            VOLCANO_CONTROLLER_ADMISSION,
            partial(
                VolcanoControllerAdmissionChart,
                controller_username=volcano_controller(namespace=volcano.namespace, release=volcano.release),
                namespaces=(*team_names, PLATFORM_NAMESPACE),
            ),
        ),
        # A team's requests, and Volcano's controller's for each namespace, queue apart (k8s_charts/addons/api_fairness.py).
        chart(
            API_FAIRNESS,
            partial(
                ApiFairnessChart,
                teams=team_names,
                volcano_controller=(volcano.namespace, volcano_controller_account(volcano.release)),
            ),
        ),
        volcano,
        # Only Volcano's job controller may label pods as a job's in the teams' namespaces.
        chart(
            JOB_POD_ADMISSION,
            partial(
                JobPodAdmissionChart,
                controller_username=volcano_controller(namespace=volcano.namespace, release=volcano.release),
            ),
        ),
        ReadinessGate(
            name="volcano-webhook-ready",
            object_type="validatingwebhookconfiguration",
            object_name=_VOLCANO_WEBHOOK,
            # Prints the webhook's name once its CA bundle is set, nothing before.
            json_path=".webhooks[?(@.clientConfig.caBundle)].name",
            after=(VOLCANO,),
            # Waits again after every change of the release (an upgrade restarts the webhook).
            identity=_identity([volcano.chart, volcano.version, dict(volcano.values)]),
        ),
    ]


def _queue_steps(queues: Sequence[QueueValues]) -> list[KubernetesStep]:
    """A Volcano queue per team, and a gate that waits for it to open."""
    return [
        # A queue per custom resource: kubectl does not prune custom resources, so a dropped team's
        # queue goes only with a resource of its own.
        *(
            ManifestSet(
                name=queue_step(queue.name),
                manifests=render(
                    partial(
                        VolcanoQueueChart,
                        name=queue.name,
                        weight=queue.weight,
                        capability=queue.capability,
                        deserved=queue.deserved,
                    )
                ),
                after=("volcano-webhook-ready",),
            )
            for queue in queues
        ),
        *(
            ReadinessGate(
                name=f"queue-{queue.name}-open",
                object_type="queue.scheduling.volcano.sh",
                object_name=queue.name,
                json_path=".status.state",
                after=(queue_step(queue.name),),
            )
            for queue in queues
        ),
    ]


def _teams_namespaces(values: KubernetesLayerValues) -> ManifestSet:
    """Each team's namespace with its network policy, device claim templates, settings and worker
    script (its quotas are added once every step exists: they count its objects)."""
    return (
        # The teams' namespaces (the step keeps the name it had with one team: renaming it would
        # delete the namespace `training` with the old custom resource).
        ManifestSet(
            name=TEAMS_STEP,
            manifests=tuple(
                manifest
                for team in values.teams
                for manifest in (
                    *render(
                        partial(
                            NamespaceChart,
                            name=team.name,
                            member_group=team.member_group,
                            pod_security=TEAM_POD_SECURITY,
                        )
                    ),
                    *render(partial(TeamNetworkChart, namespace=team.name, vpc_cidr=values.vpc_cidr)),
                    *(
                        render(
                            partial(NodeClaimTemplatesChart, namespace=team.name, groups=team.device_claims)
                        )
                        if team.device_claims
                        else ()
                    ),
                    *render(
                        partial(
                            TeamSettingsChart,
                            namespace=team.name,
                            data=team_settings_data(
                                team=team.name,
                                queue=team.queue.name,
                                claim=values.file_system.claim_name,
                                datasets_claim=values.file_system.datasets_claim_name,
                                uid=team.uid,
                                node_groups={
                                    group: team.instance_types.get(group, "") for group in team.node_groups
                                },
                                device_claims=team.device_claims,
                            ),
                        )
                    ),
                    # The script every run's pod mounts, once per namespace instead of in each pod.
                    *render(partial(WorkerScriptChart, namespace=team.name)),
                    # The team's quotas are added once every step exists: they count its objects.
                )
            ),
            # The team's members act in the namespace only once its admission policy holds.
            after=(PRIORITY_STEP, TENANT_ADMISSION),
        )
    )


def _team_steps(values: KubernetesLayerValues) -> list[KubernetesStep]:
    """The platform's and the teams' namespaces, each team's quota gate and its etcd."""
    images = values.images
    quota_gates = tuple(quota_gate(team.name) for team in values.teams)
    return [
        ManifestSet(
            name=PLATFORM_STEP,
            manifests=(
                *render(partial(NamespaceChart, name=PLATFORM_NAMESPACE, pod_security=PLATFORM_POD_SECURITY)),
                *render(partial(NamespaceIsolationChart, namespace=PLATFORM_NAMESPACE)),
                *render(partial(ContainerDefaultsChart, namespace=PLATFORM_NAMESPACE)),
            ),
            after=(PRIORITY_STEP,),
        ),
        _teams_namespaces(values),
        # The object quotas count from their first moment: until the quota controller has counted
        # every resource of one, the API server refuses every object it counts ("status unknown for
        # quota"). The controller finds Volcano's resources by discovery, every 30 s
        # (kube-controller-manager's resource quota controller): the gate waits for the count of its
        # Jobs, which comes last. On a first deploy the quota is made before that discovery, and the
        # controller queues it once when made and not again when the monitor starts (kubernetes
        # v1.36.3 pkg/controller/resourcequota: addQuota, Sync), so the count comes at its full
        # resync, every 5 minutes by default: the tier's first plan waits 297 s here
        # (docs/performance.md). A deploy that adds a team to a running cluster waits seconds.
        *(
            ReadinessGate(
                name=quota_gate(team.name),
                object_type="resourcequota",
                object_name=OBJECTS_QUOTA,
                namespace=team.name,
                json_path=r".status.used.count/jobs\.batch\.volcano\.sh",
                after=(TEAMS_STEP,),
            )
            for team in values.teams
        ),
        # One etcd per team: a team's runs rendezvous where no other team's pods can reach.
        ManifestSet(
            name="etcd",
            manifests=tuple(
                manifest
                for team in values.teams
                for manifest in render(
                    partial(
                        EtcdChart,
                        namespace=team.name,
                        image=images.resolve(ETCD_IMAGE),
                        member_image=images.resolve(ETCD_MEMBER_IMAGE),
                    ),
                    f"etcd-{team.name}",
                )
            ),
            after=(TEAMS_STEP, *quota_gates),
        ),
    ]


def _storage_steps(values: KubernetesLayerValues) -> list[KubernetesStep]:
    """The file system's volumes, its directory layout and the staged data sets."""
    file_system = values.file_system
    team_names = [team.name for team in values.teams]
    owners = {team.name: team.uid for team in values.teams}
    quota_gates = tuple(quota_gate(team.name) for team in values.teams)
    platform_image = values.images.resolve(PLATFORM_JOB_IMAGE)
    fetch_image = values.images.resolve(S3_FETCH_IMAGE)
    chart = _chart
    return [
        chart(
            "fsx-storage",
            partial(
                FsxStorageChart,
                file_system_id=file_system.file_system_id,
                dns_name=file_system.dns_name,
                mount_name=file_system.mount_name,
                storage_capacity_gib=file_system.storage_capacity_gib,
                generation=file_system.generation,
                platform_namespace=PLATFORM_NAMESPACE,
                team_namespaces=team_names,
            ),
            after=(PLATFORM_STEP, TEAMS_STEP, *quota_gates),
        ),
        chart(
            "fsx-layout",
            partial(
                FsxLayoutChart,
                namespace=PLATFORM_NAMESPACE,
                claim_name=file_system.claim_name,
                teams=owners,
                root_zones=file_system.root_zones,
                image=platform_image,
            ),
            after=("fsx-storage",),
            identity=layout_job_name(
                namespace=PLATFORM_NAMESPACE,
                claim_name=file_system.claim_name,
                teams=owners,
                root_zones=file_system.root_zones,
                image=platform_image,
            ).removeprefix("fsx-layout-"),
        ),
        *(
            chart(
                f"data-{dataset.name}",
                partial(
                    DatasetStagingChart,
                    dataset=dataset,
                    namespace=PLATFORM_NAMESPACE,
                    claim_name=file_system.claim_name,
                    root_zones=file_system.root_zones,
                    vpc_cidr=values.vpc_cidr,
                    image=platform_image,
                    fetch_image=fetch_image,
                    region=values.region,
                ),
                after=("fsx-layout",),
                identity=staging_job_name(
                    dataset,
                    namespace=PLATFORM_NAMESPACE,
                    claim_name=file_system.claim_name,
                    root_zones=file_system.root_zones,
                    image=platform_image,
                    fetch_image=fetch_image,
                    region=values.region,
                ).removeprefix(f"stage-{dataset.name}-"),
            )
            for dataset in values.datasets
        ),
    ]


def _watchdog_steps(values: KubernetesLayerValues) -> list[KubernetesStep]:
    """The gang watchdog: its Roles go into the team namespaces; it runs on the system nodes (no
    Trainium node waited on)."""
    if values.gang_watchdog is None:
        return []
    watchdog = replace(values.gang_watchdog, image=values.images.resolve(values.gang_watchdog.image))
    return list(
        gang_watchdog_steps(
            watchdog,
            namespace=PLATFORM_NAMESPACE,
            vpc_cidr=values.vpc_cidr,
            after=(PLATFORM_STEP, TEAMS_STEP),
            render=render,
        )
    )


def _run_steps(runs: Sequence[PlannedRun], queue_gates: Mapping[str, str]) -> list[KubernetesStep]:
    """Each run of the configuration, after its queue, its fences, etcd, the layout and its data."""
    steps: list[KubernetesStep] = []
    chart = _chart
    for planned in runs:
        run = planned.run
        steps.append(
            chart(
                f"run-{run.name}",
                partial(TrainingRunChart, run=run),
                after=(
                    queue_gates[run.queue],
                    JOB_POD_ADMISSION,
                    TENANT_ADMISSION,
                    "etcd",
                    "fsx-layout",
                    *(f"data-{dataset.name}" for dataset in run.datasets),
                ),
                applied=planned.applied,
                identity=run_id(run).removeprefix(f"{run.name}-"),
            )
        )
    return steps


def _tensorboard_step(values: KubernetesLayerValues) -> KubernetesStep:
    file_system = values.file_system
    owners = {team.name: team.uid for team in values.teams}
    chart = _chart
    return chart(
        "tensorboard",
        partial(
            TensorBoardChart,
            image=values.images.resolve(TENSORBOARD_IMAGE),
            namespace=PLATFORM_NAMESPACE,
            claim_name=file_system.claim_name,
            memory_gib=values.tensorboard.memory_gib,
            # Team directories are 2750: TensorBoard reads them as a member of every team's group.
            team_groups=tuple(sorted(owners.values())),
            # The API server's service proxy (make canary) connects from the control plane's
            # interfaces in the VPC.
            api_server_cidr=values.vpc_cidr,
        ),
        after=("fsx-storage",),
        applied=values.tensorboard.applied,
    )


def _with_team_admission(steps: list[KubernetesStep], values: KubernetesLayerValues) -> list[KubernetesStep]:
    """Each team's quotas, counting what the plan keeps in its namespace, and the team namespaces'
    admission policy, from what the plan puts there, before the namespaces."""
    teams_index = next(index for index, step in enumerate(steps) if step.name == TEAMS_STEP)
    # Each team's quotas, counting what the plan keeps in its namespace.
    teams_step = steps[teams_index]
    assert isinstance(teams_step, ManifestSet)
    steps[teams_index] = replace(
        teams_step,
        manifests=(
            *teams_step.manifests,
            *(
                manifest
                for team in values.teams
                for manifest in render(
                    partial(
                        TeamQuotaChart,
                        namespace=team.name,
                        quota=replace(team.quota, platform_objects=_platform_objects(steps, team.name)),
                    )
                )
            ),
        ),
    )
    # The team namespaces' admission policy, from what the plan puts there, before the namespaces.
    claims_policy = (
        render(
            partial(
                TeamClaimsAdmissionChart,
                classes={
                    team.name: DRA_DEVICE_CLASSES if team.device_claims else () for team in values.teams
                },
            )
        )
        if values.dra is not None
        else ()
    )
    steps.insert(
        teams_index,
        ManifestSet(
            name=TENANT_ADMISSION,
            manifests=(
                *render(
                    partial(
                        TenantAdmissionChart,
                        **_tenant_admission_values(
                            steps, values.teams, runs=values.runs, watchdog=values.gang_watchdog
                        ),
                    )
                ),
                *claims_policy,
            ),
        ),
    )
    return steps


def _dra_steps(values: KubernetesLayerValues, chart: Callable[..., ManifestSet]) -> list[KubernetesStep]:
    """The DRA drivers of the ``devices: dra`` groups, after the fences that confine them."""
    if values.dra is None:
        return []
    instance_types = values.dra.instance_types
    return [
        chart(DRA_ADMISSION, DraAdmissionChart),
        chart(
            "neuron-dra-driver",
            partial(
                NeuronDraDriverChart,
                instance_types=instance_types,
                image=values.images.resolve(NEURON_DRA_DRIVER_IMAGE),
            ),
            after=(DRA_ADMISSION,),
        ),
        # EKS's regional registry, as the EFA device plugin's (cluster_facts.image_sources.DIRECT_PULLS).
        chart(
            "efa-dra-driver",
            partial(EfaDraDriverChart, region=values.region, instance_types=instance_types),
            after=(DRA_ADMISSION,),
        ),
    ]


def quota_gate(team: str) -> str:
    """The readiness gate that waits for the team's object quota to be counted."""
    return f"quota-{team}-counted"


def _platform_objects(steps: list[KubernetesStep], namespace: str) -> dict[str, int]:
    """What the applied steps keep in ``namespace``, by ``team-objects`` resource; the stack's runs
    (Volcano Jobs) are counted by ``teams[].quota.jobs`` itself."""
    counts: dict[str, int] = {}
    for step in steps:
        if not isinstance(step, ManifestSet) or not step.applied:
            continue
        for manifest in step.manifests:
            resource = counted_kind(manifest["apiVersion"], manifest["kind"])
            if manifest.get("metadata", {}).get("namespace") != namespace or resource is None:
                continue
            if resource != "count/jobs.batch.volcano.sh":
                counts[resource] = counts.get(resource, 0) + 1
    return counts


# A workload the platform keeps in team namespaces -> who creates its pods: the owner the pods name
# and kube-controller-manager's users for that controller (with per-controller credentials, or its own).
_PLATFORM_POD_OWNERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Deployment": (
        "ReplicaSet",
        ("system:serviceaccount:kube-system:replicaset-controller", "system:kube-controller-manager"),
    ),
    "StatefulSet": (
        "StatefulSet",
        ("system:serviceaccount:kube-system:statefulset-controller", "system:kube-controller-manager"),
    ),
}


def _tenant_admission_values(
    steps: list[KubernetesStep],
    teams: tuple[TeamValues, ...],
    *,
    runs: tuple[PlannedRun, ...] = (),
    watchdog: GangWatchdogValues | None = None,
) -> dict[str, Any]:
    """What the team policy needs to know of the plan: every object the platform keeps in a team
    namespace (their names are reserved), the claims there (which are read-only), the platform's
    pods there (and so how many pods a Job may have beside them), the runs the stack applies there,
    and the ceiling of a run's stuck-run limit.

    A workload kind the policy does not know how to exempt is refused here, at synth, rather than
    left for the API server to refuse at deploy time."""
    namespaces = {team.name for team in teams}
    objects = [
        manifest
        for step in steps
        if isinstance(step, ManifestSet)
        for manifest in step.manifests
        if manifest.get("metadata", {}).get("namespace") in namespaces
        # The stack's runs: Volcano Jobs, judged by the policy like any team's.
        and not manifest["apiVersion"].startswith("batch.volcano.sh/")
    ]
    platform_pods = []
    for manifest in objects:
        if manifest["kind"] in _PLATFORM_POD_OWNERS:
            owner, creators = _PLATFORM_POD_OWNERS[manifest["kind"]]
            labels = manifest["spec"]["template"]["metadata"]["labels"]
            platform_pods.append(PlatformPod(labels=labels, owner_kind=owner, creators=creators))
        elif "template" in manifest.get("spec", {}) or manifest["kind"] == "Pod":
            raise ValueError(
                f"{manifest['kind']} {manifest['metadata']['name']} in a team namespace: the team admission "
                "policy (k8s_charts/teams/tenant_admission.py) knows how to admit only the pods of "
                f"{' and '.join(sorted(_PLATFORM_POD_OWNERS))} there"
            )
    claims = [manifest for manifest in objects if manifest["kind"] == "PersistentVolumeClaim"]
    read_only = {m["metadata"]["name"] for m in claims if m["spec"]["accessModes"] == ["ReadOnlyMany"]}
    return {
        "teams": [
            TeamPlacement(
                namespace=team.name,
                queue=team.queue.name,
                node_groups=team.node_groups,
                claims=tuple(
                    sorted(
                        m["metadata"]["name"]
                        for m in claims
                        if m["metadata"]["namespace"] == team.name and m["metadata"]["name"] not in read_only
                    )
                ),
                pod_budget=team.quota.pods
                - sum(
                    int(m["spec"].get("replicas", 1))
                    for m in objects
                    if m["kind"] in _PLATFORM_POD_OWNERS and m["metadata"]["namespace"] == team.name
                ),
                neuron_devices=int(team.queue.capability.get(NEURON_RESOURCE, "0")),
                applied_runs=tuple(
                    sorted(
                        planned.run.name
                        for planned in runs
                        if planned.applied and planned.run.namespace == team.name
                    )
                ),
            )
            for team in teams
        ],
        "read_only_claims": sorted(read_only),
        "stuck_minutes_ceiling": None
        if watchdog is None or watchdog.stuck_run_minutes is None
        else watchdog.stuck_run_max_minutes or watchdog.stuck_run_minutes,
        "platform_object_names": sorted({manifest["metadata"]["name"] for manifest in objects}),
        "platform_pods": list(
            {json.dumps(pod.labels, sort_keys=True): pod for pod in platform_pods}.values()
        ),
    }
