"""The typed, validated configuration of one environment (one YAML file).

Every key of the YAML file is a field here; unknown keys are errors. Checks that concern one
section live on that section's model; checks that relate two sections live in config/consistency.py.
Constructs receive these frozen objects, never the raw file.

Defaults live on the fields (none on StackConfig), so an omitted section, an empty (null) one, {}
and one with some keys omitted all mean the same values.

No aws-cdk-lib import: the configuration is validated before any construct is built.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
)

from cluster_facts.cluster_scale import STANDARD_TIER, ControlPlaneTier
from cluster_facts.dra import AUTOSCALER_FROM_ZERO_ISSUE, DEVICE_PATHS, DevicePath
from cluster_facts.image_sources import UPSTREAM_REGISTRIES
from cluster_facts.instance_catalog import CATALOG, TrainiumInstanceType
from cluster_facts.kubernetes_versions import support_problem, synth_date
from cluster_facts.node_check import DEFAULT_REPLACEMENT_WINDOW_MINUTES, DEFAULT_REPLACEMENTS_PER_WINDOW
from cluster_facts.versions import ADDON_NAMES, KUBECTL_LAYERS, VPC_CNI, VPC_CNI_EFA_ONLY_MINIMUM, version_key
from config.fields import (
    AccountId,
    AzId,
    AzName,
    Cidr,
    Ec2InstanceType,
    Name,
    OptionalSection,
    Region,
    RemovalPolicy,
    ReservationId,
    RoleArn,
    _matching,
    _problem,
    _quoted_string,
    _Section,
)
from config.workloads import (
    DEFAULT_STUCK_RUN_MINUTES,
    DEFAULT_TEAMS,
    DatasetSettings,
    MovedSection,
    RunSettings,
    TeamSettings,
    stuck_minutes_in_range,
)

__all__ = [
    "AmiFacts",
    "AutoscalerSettings",
    "ClusterSettings",
    "EcrSettings",
    "ExistingSubnet",
    "FabricCheckSettings",
    "FsxSettings",
    "NodeCheckSettings",
    "ObservabilitySettings",
    "StackConfig",
    "SystemNodesSettings",
    "TrainiumNodeGroupSettings",
    "TrainiumSettings",
    "VpcSettings",
]


class _Scaling(_Section):
    # Field validators (not one model validator) so that each error names the key to change.
    min_size: int = Field(ge=0)
    desired_size: int = Field(ge=0)
    max_size: int = Field(ge=1)

    @field_validator("desired_size")
    @classmethod
    def _not_below_min(cls, desired: int, info: ValidationInfo) -> int:
        minimum = info.data.get("min_size")
        if minimum is not None and desired < minimum:
            raise _problem(f"desired_size ({desired}) must be at least min_size ({minimum})")
        return desired

    @field_validator("max_size")
    @classmethod
    def _not_below_desired(cls, maximum: int, info: ValidationInfo) -> int:
        desired = info.data.get("desired_size")
        if desired is not None and maximum < desired:
            raise _problem(f"max_size ({maximum}) must be at least desired_size ({desired})")
        return maximum


VpcId = Annotated[str, _matching(r"vpc-[0-9a-f]{8,17}", "a VPC id such as vpc-0123456789abcdef0")]
SubnetId = Annotated[str, _matching(r"subnet-[0-9a-f]{8,17}", "a subnet id such as subnet-0123456789abcdef0")]


class ExistingSubnet(_Section):
    """A subnet of an existing VPC, as the stack needs it offline (preflight checks it in the account)."""

    id: SubnetId
    cidr: Cidr
    """Its IPv4 CIDR: root squash exempts the system subnets by it (constructs_trn/lustre_storage.py)."""


class VpcSettings(_Section):
    # vpc_id first: the checks of the keys below read it.
    vpc_id: VpcId | None = None
    """An existing VPC: the stack creates no VPC, subnet, route, NAT gateway or flow log, and tags
    nothing of it (docs/existing-vpc.md); ``private_subnets`` name where everything goes."""
    private_subnets: list[ExistingSubnet] | None = Field(default=None, validate_default=True)
    """With ``vpc_id``: one private subnet per zone of ``availability_zones``, in that order."""
    trainium_subnet: ExistingSubnet | None = Field(default=None, validate_default=True)
    """With ``vpc_id``: the subnet of the Trainium nodes and the file system, in
    ``trainium.availability_zone``; default: that zone's private subnet."""
    cidr: Cidr
    """The VPC's CIDR: of the VPC the stack creates, or the existing VPC's (its network policies
    admit the API server's addresses in it)."""
    availability_zones: list[AzName]
    """Names in this account; EKS needs subnets in at least two."""
    nat_gateways: int | None = Field(default=None, ge=1, validate_default=True)
    """One NAT gateway is enough for image pulls; one per AZ survives the loss of an AZ. Default 1;
    none with ``vpc_id`` (the existing VPC's routes are its owner's)."""
    flow_log_retention_days: Literal[7, 14, 30, 60, 90, 180, 365] | None = Field(
        default=None, validate_default=True
    )
    """Default 30; none with ``vpc_id`` (the existing VPC's flow logs are its owner's)."""

    @field_validator("private_subnets")
    @classmethod
    def _with_an_existing_vpc(
        cls, subnets: list[ExistingSubnet] | None, info: ValidationInfo
    ) -> list[ExistingSubnet] | None:
        existing = info.data.get("vpc_id") is not None
        if existing and subnets is None:
            raise _problem(
                "required with vpc_id: the existing VPC's private subnets, one per availability zone "
                "({id: subnet-..., cidr: ...} each), where the nodes, the cluster and the file system go"
            )
        if not existing and subnets is not None and "vpc_id" in info.data:
            raise _problem("belongs to an existing VPC: set vpc.vpc_id, or leave it out for a new VPC")
        if subnets is not None:
            ids = [subnet.id for subnet in subnets]
            if len(set(ids)) != len(ids):
                raise _problem(f"subnets must be distinct, got {', '.join(ids)}")
        return subnets

    @field_validator("trainium_subnet")
    @classmethod
    def _only_with_an_existing_vpc(
        cls, subnet: ExistingSubnet | None, info: ValidationInfo
    ) -> ExistingSubnet | None:
        if subnet is not None and info.data.get("vpc_id") is None and "vpc_id" in info.data:
            raise _problem("belongs to an existing VPC: set vpc.vpc_id, or leave it out for a new VPC")
        others = info.data.get("private_subnets") or []
        if subnet is not None and subnet.id in [other.id for other in others]:
            raise _problem(f"{subnet.id} is already a private subnet: leave trainium_subnet out to use it")
        return subnet

    @field_validator("cidr")
    @classmethod
    def _room_for_subnets(cls, cidr: str, info: ValidationInfo) -> str:
        network = ipaddress.IPv4Network(cidr)
        if info.data.get("vpc_id") is not None:
            return _subnets_inside(
                network, info.data.get("private_subnets") or [], info.data.get("trainium_subnet")
            )
        prefix = network.prefixlen
        if not 16 <= prefix <= 22:
            raise _problem(
                f"{cidr} is too {'large' if prefix < 16 else 'small'}; allowed prefixes: /16 to /22"
            )
        return cidr

    @field_validator("availability_zones")
    @classmethod
    def _two_or_more_distinct(cls, zones: list[str], info: ValidationInfo) -> list[str]:
        if len(zones) < 2:
            raise _problem(f"EKS needs at least two availability zones, got {len(zones)}")
        if len(set(zones)) != len(zones):
            raise _problem(f"zones must be distinct, got {', '.join(zones)}")
        subnets = info.data.get("private_subnets")
        if subnets is not None and len(subnets) != len(zones):
            raise _problem(
                f"{len(zones)} zones for {len(subnets)} vpc.private_subnets; give one private subnet per "
                "zone, in the same order"
            )
        return zones

    @field_validator("nat_gateways")
    @classmethod
    def _one_per_zone_at_most(cls, count: int | None, info: ValidationInfo) -> int | None:
        if info.data.get("vpc_id") is not None:
            if count is not None:
                raise _problem(
                    "the stack creates no NAT gateway in an existing VPC (vpc_id): its routes are its "
                    "owner's; leave nat_gateways out"
                )
            return None
        count = 1 if count is None else count
        zones = info.data.get("availability_zones")
        if zones is not None and count > len(zones):
            raise _problem(
                f"{count} NAT gateways for {len(zones)} availability zones; allowed: 1 to {len(zones)}"
            )
        return count

    @field_validator("flow_log_retention_days")
    @classmethod
    def _flow_logs_of_a_new_vpc(cls, days: int | None, info: ValidationInfo) -> int | None:
        if info.data.get("vpc_id") is not None:
            if days is not None:
                raise _problem(
                    "the stack creates no flow log for an existing VPC (vpc_id): its flow logs are its "
                    "owner's; leave flow_log_retention_days out"
                )
            return None
        return 30 if days is None else days

    @property
    def existing(self) -> bool:
        """The stack uses an existing VPC (``vpc_id``) and creates no network."""
        return self.vpc_id is not None


def _subnets_inside(
    network: ipaddress.IPv4Network, subnets: list[ExistingSubnet], trainium: ExistingSubnet | None
) -> str:
    """An existing VPC's CIDR: every named subnet inside it, none overlapping another."""
    named = [*subnets, *([trainium] if trainium is not None else [])]
    blocks = [(subnet.id, ipaddress.IPv4Network(subnet.cidr)) for subnet in named]
    outside = [subnet_id for subnet_id, block in blocks if not block.subnet_of(network)]
    if outside:
        raise _problem(
            f"{network} does not hold subnet {', '.join(outside)}: give the VPC's CIDR that holds its "
            "private subnets (the network policies admit the API server's addresses in it)"
        )
    for index, (subnet_id, block) in enumerate(blocks):
        for other_id, other in blocks[index + 1 :]:
            if block.overlaps(other):
                raise _problem(f"subnets {subnet_id} ({block}) and {other_id} ({other}) overlap")
    return str(network)


def _kubernetes_version(value: str) -> str:
    if value not in KUBECTL_LAYERS:
        raise _problem(
            f"{value!r} has no kubectl layer in this project; supported: {', '.join(KUBECTL_LAYERS)}"
        )
    # A version EKS no longer runs (its dates: cluster_facts/kubernetes_versions.py); one whose
    # standard support ends soon is only warned about, at synth (config/notices.py).
    problem = support_problem(value, synth_date())
    if problem is not None:
        raise _problem(problem)
    return value


# The widest range the public endpoint admits: a /16 (65,536 addresses) is already an organisation's
# whole egress. Anything wider, 0.0.0.0/0 above all, opens the API server to networks nobody here
# controls (shared cloud and CI ranges included); the private endpoint serves everything in the VPC.
WIDEST_PUBLIC_ENDPOINT_PREFIX = 16


def _not_over_broad(cidr: str) -> str:
    prefix = ipaddress.IPv4Network(cidr).prefixlen
    if prefix == 0:
        raise _problem(
            f"{cidr} admits the whole internet to the API server; allowed: your own egress ranges of "
            f"/{WIDEST_PUBLIC_ENDPOINT_PREFIX} or narrower, or [] for a private endpoint only"
        )
    if prefix < WIDEST_PUBLIC_ENDPOINT_PREFIX:
        raise _problem(
            f"{cidr} is too broad for the public API endpoint (/{prefix}); allowed: "
            f"/{WIDEST_PUBLIC_ENDPOINT_PREFIX} or narrower, or [] for a private endpoint only"
        )
    return cidr


class ClusterSettings(_Section):
    kubernetes_version: Annotated[str, _quoted_string("1.36"), AfterValidator(_kubernetes_version)]
    endpoint_public_cidrs: list[Annotated[Cidr, AfterValidator(_not_over_broad)]] = Field(
        default_factory=list
    )
    """CIDRs that may reach the public API endpoint, each /16 or narrower; empty means a private endpoint only."""
    # Before admin_role_arns, whose check reads it.
    keep_creator_admin: bool = False
    """Only for a cluster created before this key existed: keep EKS's hidden cluster-admin entry of the
    principal that created it (docs/access.md). Switching it replaces the cluster, which CloudFormation
    refuses for this named cluster: an update that changes it fails before anything changes."""
    # A key whose entries are all commented out reads as null: the same as [] (refused below).
    admin_role_arns: Annotated[
        list[RoleArn], BeforeValidator(lambda value: [] if value is None else value)
    ] = Field(default_factory=list, validate_default=True)
    """IAM roles of the stack's account with cluster-admin access entries: at least one, since no
    other principal can use kubectl on the cluster (docs/access.md, "The first admin")."""
    addon_versions: dict[
        str,
        Annotated[
            str, _matching(r"v\d+\.\d+\.\d+-eksbuild\.\d+", "an add-on version such as v1.20.4-eksbuild.1")
        ],
    ] = Field(default_factory=dict)
    """Pins by add-on name; an add-on left out gets EKS's default version for the cluster version."""
    control_plane_tier: ControlPlaneTier = STANDARD_TIER
    """EKS's control plane scaling tier (cluster_facts/cluster_scale.py): ``standard`` (EKS's default,
    no extra charge) or a provisioned tier billed by the hour, with a guaranteed API concurrency and
    scheduling rate. Changed in place, no interruption, in several minutes; the synth warns when the
    Trainium groups' size asks for a plan (docs/performance.md, "What the figures mean for a real
    cluster")."""

    @field_validator("admin_role_arns")
    @classmethod
    def _someone_can_use_kubectl(cls, role_arns: list[str], info: ValidationInfo) -> list[str]:
        # The cluster has no hidden creator admin (BootstrapClusterCreatorAdminPermissions false), and
        # the kubectl handler's role is the stack's own: without a role here, nobody could use kubectl
        # after the deploy, and the first fix would be a second deploy. keep_creator_admin is the one
        # exception (a cluster created before, whose creator entry stays).
        if not role_arns and not info.data.get("keep_creator_admin"):
            raise _problem(
                "empty, so nobody could use kubectl after the deploy; allowed: one or more IAM roles of the "
                "stack's account, e.g. the one you deploy with (aws sts get-caller-identity names it, "
                "assumed-role/<Role>/...; aws iam get-role --role-name <Role> --query Role.Arn prints its ARN), "
                "docs/access.md"
            )
        return role_arns

    @field_validator("addon_versions")
    @classmethod
    def _known_addons(cls, versions: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(versions) - set(ADDON_NAMES))
        if unknown:
            raise _problem(f"unknown add-on {', '.join(unknown)}; allowed: {', '.join(ADDON_NAMES)}")
        cni = versions.get(VPC_CNI)
        if cni is not None and version_key(cni) < version_key(VPC_CNI_EFA_ONLY_MINIMUM):
            raise _problem(
                f"{VPC_CNI} {cni} cannot attach efa-only interfaces; use v{VPC_CNI_EFA_ONLY_MINIMUM} or later"
            )
        return versions


class SystemNodesSettings(_Scaling):
    # validate_default: a default desired_size is checked against a configured min_size (and so on).
    min_size: int = Field(default=2, ge=0, validate_default=True)
    desired_size: int = Field(default=2, ge=0, validate_default=True)
    max_size: int = Field(default=4, ge=1, validate_default=True)
    instance_type: Ec2InstanceType = "m6i.2xlarge"
    disk_size_gib: int = Field(default=100, ge=20, le=16384)


class AmiFacts(_Section):
    """What an AMI release brings that the checks read, declared when cluster_facts/ami_releases.py
    does not know the release (its AMI release notes: awslabs/amazon-eks-ami CHANGELOG.md, the
    AL2023_x86_64_NEURON column). Synth warns that it rests on this declaration; preflight asks AWS
    that the release exists."""

    neuron_driver: Annotated[
        str, _matching(r"\d+\.\d+\.\d+\.\d+", "a Neuron driver version (aws-neuronx-dkms) such as 2.31.7.0")
    ]
    containerd: Annotated[
        str, _matching(r"\d+\.\d+\.\d+(-\S+)?", "a containerd package version such as 2.2.4-1.amzn2023.0.3")
    ]


def _trainium_type(value: str) -> str:
    if value not in CATALOG:
        raise _problem(f"{value!r} is not in the Trainium instance catalog; allowed: {', '.join(CATALOG)}")
    return value


class TrainiumNodeGroupSettings(_Section):
    """One Trainium node group. The cluster autoscaler sets its node count between min_size and max_size."""

    name: Name
    instance_type: Annotated[str, AfterValidator(_trainium_type)]
    capacity_type: Literal["on_demand", "spot", "capacity_block"] = "on_demand"
    capacity_reservation_id: ReservationId | None = Field(default=None, validate_default=True)
    """For capacity_block, the Capacity Block; for on_demand, an On-Demand Capacity Reservation to target."""
    placement_group: bool | None = Field(default=None, validate_default=True)
    """A cluster placement group; defaults to on, and to off (the only choice) when a reservation is targeted."""
    root_volume_gib: int = Field(default=500, ge=100, le=16384)
    ami_release: (
        Annotated[
            str, _matching(r"\d+\.\d+\.\d+-\d{8}", "an EKS AMI release version such as 1.36.2-20260714")
        ]
        | None
    ) = None
    """The EKS Neuron AMI release the group boots (its Neuron driver and containerd); default: the
    newest release of cluster_facts/ami_releases.py without a known fault that serves the training
    image, for the cluster's Kubernetes version. Changing it replaces the nodes (docs/upgrades.md)."""
    ami_facts: AmiFacts | None = Field(default=None, validate_default=True)
    """What ``ami_release`` brings, declared for a release the table does not know (docs/upgrades.md)."""
    neuron_stack: Literal["xla", "native"] | None = None
    """The training path the group serves (cluster_facts/neuron_stack.py): ``xla`` (PyTorch/XLA, SDK up
    to 2.29) or ``native`` (TorchNeuron, SDK 2.33). Default: the only one its instance type runs, else
    the one of the runs placed on it, else ``xla``."""

    @field_validator("ami_facts")
    @classmethod
    def _facts_of_a_named_release(cls, facts: AmiFacts | None, info: ValidationInfo) -> AmiFacts | None:
        if facts is not None and info.data.get("ami_release", "") is None:
            raise _problem(
                "declares the facts of ami_release, which is not set; name the release these facts "
                "describe, or remove ami_facts"
            )
        return facts

    # After capacity_type: the checks of min_size read it. validate_default: a default min_size is
    # checked against a configured max_size.
    min_size: int = Field(default=0, ge=0, validate_default=True)
    """Warm nodes that run with no job queued (and bill around the clock); 0 by default."""
    max_size: int = Field(ge=1)
    """The most nodes the autoscaler may run; a job's gang must fit."""

    @field_validator("min_size")
    @classmethod
    def _no_warm_nodes_on_a_capacity_block(cls, minimum: int, info: ValidationInfo) -> int:
        # EKS scales a Capacity Block group to 0 before the block ends and launches nothing outside
        # its window; a warm pool would be a desired size the group cannot keep (and blocks updates).
        if minimum > 0 and info.data.get("capacity_type") == "capacity_block":
            raise _problem(
                f"{minimum} warm nodes cannot go with capacity_type capacity_block: nodes run only inside "
                "the block's window and the autoscaler brings them up for queued jobs; allowed: 0"
            )
        return minimum

    @field_validator("max_size")
    @classmethod
    def _not_below_min(cls, maximum: int, info: ValidationInfo) -> int:
        minimum = info.data.get("min_size")
        if minimum is not None and maximum < minimum:
            raise _problem(f"max_size ({maximum}) must be at least min_size ({minimum})")
        return maximum

    desired_size: int = Field(default=0, ge=0, validate_default=True)
    """The node count a new group starts with (at least min_size; default 0). Only at creation: after
    that the template carries the count the group runs, read at every deploy that changes the group
    (constructs_trn/node_group_size.py), so neither this key nor min_size or max_size ever resizes a
    running group, except that a higher min_size starts warm nodes and a lower max_size ends the nodes
    above it (docs/capacity.md, "CloudFormation and the autoscaler")."""

    @field_validator("desired_size")
    @classmethod
    def _at_most_max(cls, desired: int, info: ValidationInfo) -> int:
        maximum = info.data.get("max_size")
        if maximum is not None and desired > maximum:
            raise _problem(f"{desired} is above max_size ({maximum}); allowed: 0 to max_size")
        return desired

    @field_validator("capacity_reservation_id")
    @classmethod
    def _fits_capacity_type(cls, reservation: str | None, info: ValidationInfo) -> str | None:
        capacity_type = info.data.get("capacity_type")
        if capacity_type == "capacity_block" and reservation is None:
            raise _problem("required for capacity_type capacity_block: the Capacity Block's cr-... id")
        if capacity_type == "spot" and reservation is not None:
            raise _problem(
                "spot capacity cannot target a reservation; use capacity_type on_demand or capacity_block"
            )
        return reservation

    @field_validator("placement_group")
    @classmethod
    def _off_with_a_reservation(cls, placement: bool | None, info: ValidationInfo) -> bool | None:
        # The reserved instances sit where the reservation put them, never in the placement group this
        # stack creates: the pair can only make launches fail with insufficient capacity.
        if "capacity_reservation_id" not in info.data:
            return placement  # the reservation is invalid and reported; nothing to decide against
        reserved = info.data["capacity_reservation_id"] is not None
        if placement is None:
            return not reserved
        if placement and reserved:
            raise _problem(
                "true cannot go with capacity_reservation_id: the reserved instances are not in the "
                "stack's new placement group, so launches would fail; allowed: false, or leave it out"
            )
        return placement

    devices: DevicePath = "device-plugin"
    """How the group's Neuron devices and EFA interfaces reach pods: ``device-plugin`` (counted
    extended resources) or ``dra`` (the Neuron and EFA DRA drivers; each run asks for one connected
    set of devices per node through a ResourceClaimTemplate). docs/capacity.md, "DRA node groups"."""

    @field_validator("devices")
    @classmethod
    def _dra_needs_a_node_to_copy(cls, devices: str, info: ValidationInfo) -> str:
        # The cluster autoscaler's AWS provider pictures a group with no node without its DRA devices
        # (cluster_facts/dra.py AUTOSCALER_FROM_ZERO_ISSUE): a run on zero nodes would never start.
        if devices not in DEVICE_PATHS:
            return devices
        minimum = info.data.get("min_size")
        if devices == "dra" and info.data.get("capacity_type") == "capacity_block":
            raise _problem(
                "dra cannot go with capacity_type capacity_block: a Capacity Block group scales to 0, and "
                f"the cluster autoscaler cannot scale a DRA group up from 0 ({AUTOSCALER_FROM_ZERO_ISSUE}); "
                "allowed: device-plugin"
            )
        if devices == "dra" and minimum == 0:
            raise _problem(
                "dra needs min_size 1 or more: the cluster autoscaler pictures a group with no node without "
                f"its DRA devices and never scales it up for a claim ({AUTOSCALER_FROM_ZERO_ISSUE}); "
                "allowed: device-plugin, or dra with min_size >= 1"
            )
        return devices

    @property
    def instance(self) -> TrainiumInstanceType:
        return CATALOG[self.instance_type]

    @property
    def uses_dra(self) -> bool:
        return self.devices == "dra"

    @property
    def uses_placement_group(self) -> bool:
        return bool(self.placement_group)

    @property
    def reserved(self) -> bool:
        """Launches go into an On-Demand Capacity Reservation or a Capacity Block."""
        return self.capacity_reservation_id is not None

    @property
    def update_strategy(self) -> Literal["DEFAULT", "MINIMAL"]:
        """How EKS replaces this group's nodes on an update (a new launch template or AMI).

        DEFAULT starts replacements before it stops old nodes (a surge above max_size); a reservation
        holds no room for that, so reserved groups stop a node first (MINIMAL), one at a time.
        """
        return "MINIMAL" if self.reserved else "DEFAULT"


class TrainiumSettings(_Section):
    availability_zone: AzName
    """The one zone holding every Trainium node and the file system (must offer the instance types)."""
    availability_zone_id: AzId
    node_groups: list[TrainiumNodeGroupSettings] = Field(min_length=1)

    @field_validator("node_groups")
    @classmethod
    def _names_unique(cls, groups: list[TrainiumNodeGroupSettings]) -> list[TrainiumNodeGroupSettings]:
        names = [group.name for group in groups]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise _problem(f"node group names must be unique; repeated: {', '.join(repeated)}")
        return groups


PERSISTENT_2_THROUGHPUTS = (125, 250, 500, 1000)
DEFAULT_PERSISTENT_2_THROUGHPUT = 250
LUSTRE_SMALLEST_GIB = 1200
LUSTRE_INCREMENT_GIB = 2400


def _nearest_lustre_sizes(capacity: int) -> list[int]:
    """The valid SSD sizes (1200, 2400, 4800, ...) next to ``capacity``: one below and one above it."""
    if capacity <= LUSTRE_SMALLEST_GIB:
        return [LUSTRE_SMALLEST_GIB]
    below = max(capacity // LUSTRE_INCREMENT_GIB * LUSTRE_INCREMENT_GIB, LUSTRE_SMALLEST_GIB)
    above = (capacity // LUSTRE_INCREMENT_GIB + 1) * LUSTRE_INCREMENT_GIB
    return [below, above]


S3Uri = Annotated[
    str,
    _matching(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?", "an S3 URI such as s3://bucket/prefix"),
]
DEFAULT_BACKUP_RETENTION_DAYS = 7


def _s3_prefix(uri: str) -> str:
    """An S3 URI as FSx compares data repository paths: with one trailing slash."""
    return uri.rstrip("/") + "/"


def _overlapping(one: str, other: str) -> bool:
    """Two data repository paths overlap when one is the other or lies under it (FSx refuses both)."""
    first, second = _s3_prefix(one), _s3_prefix(other)
    return first.startswith(second) or second.startswith(first)


class FsxSettings(_Section):
    deployment_type: Literal["SCRATCH_2", "PERSISTENT_2"] = "PERSISTENT_2"
    storage_capacity_gib: int = LUSTRE_SMALLEST_GIB
    throughput_mib_per_tib: int | None = Field(default=None, validate_default=True)
    """MB/s per TiB. PERSISTENT_2: 125, 250, 500 or 1000 (default 250). SCRATCH_2: none (a fixed 200)."""
    s3_import_path: S3Uri | None = None
    s3_bucket_owner: AccountId | None = None
    """The account that owns the s3_import_path bucket, when it is not this configuration's account.
    Auto-import brings every new, changed or deleted object of the bucket onto the file system that
    the training pods read and run code from: a bucket of another account is allowed only when it is
    named here, and the deployment checks the owner (S3 HeadBucket with ExpectedBucketOwner) before
    the file system links the bucket."""
    removal_policy: RemovalPolicy = "retain"
    # After deployment_type and s3_import_path: their checks read both.
    backups: Literal["daily", "s3", "none"] | None = Field(default=None, validate_default=True)
    """What keeps the teams' checkpoints and outputs beyond the file system itself (docs/costs.md,
    "Backups"): ``daily`` FSx automatic backups (PERSISTENT_2 not linked to S3 only; the default
    there), ``s3`` each team's directory exported to ``backup_s3_path`` as files are written, or
    ``none``, written down: nothing does. Anything else must be chosen in the file."""
    backup_retention_days: int | None = Field(default=None, validate_default=True)
    """``daily``: how long FSx keeps each automatic backup, 1 to 90 days (default 7)."""
    backup_start_time_utc: (
        Annotated[str, _matching(r"([01]\d|2[0-3]):[0-5]\d", "a time of day HH:MM such as 03:00")] | None
    ) = None
    """``daily``: when the daily backup starts (UTC); default: FSx picks the window."""
    backup_s3_path: S3Uri | None = Field(default=None, validate_default=True)
    """``s3``: where ``/teams/<team>`` is exported, as ``<backup_s3_path>/<team>/``; a bucket of this
    account (checked at deploy), not overlapping ``s3_import_path``."""

    @field_validator("backups")
    @classmethod
    def _backups_the_file_system_takes(cls, backups: str | None, info: ValidationInfo) -> str | None:
        # FSx for Lustre user guide, "Protecting your data with backups": "Backups are supported only
        # on FSx for Lustre persistent file systems that are not linked to an Amazon S3 data repository."
        deployment_type, imported = info.data.get("deployment_type"), info.data.get("s3_import_path")
        if deployment_type is None or "s3_import_path" not in info.data:
            return backups  # the deployment type or the import path has its own line already
        if deployment_type == "SCRATCH_2" and backups != "none":
            raise _problem(
                f"{'the default (daily)' if backups is None else repr(backups)} is not offered by SCRATCH_2: FSx "
                "backs up persistent file systems only, and this stack links S3 to SCRATCH_2 by its import "
                "path alone; allowed: none (docs/costs.md says what is then lost with a file server), or "
                "deployment_type PERSISTENT_2"
            )
        if imported is not None and backups in (None, "daily"):
            raise _problem(
                "daily backups are not offered for a file system linked to S3 (s3_import_path): FSx backs up "
                "no such file system; allowed: s3 (each team's directory exported to backup_s3_path) or "
                "none (docs/costs.md)"
            )
        return "daily" if backups is None else backups

    @field_validator("backup_retention_days")
    @classmethod
    def _retention_of_daily_backups(cls, days: int | None, info: ValidationInfo) -> int | None:
        backups = info.data.get("backups")
        if backups != "daily":
            if days is not None and backups is not None:
                raise _problem(
                    f"{days} days keep nothing with backups: {backups}; allowed: only with backups: daily"
                )
            return None
        if days is None:
            return DEFAULT_BACKUP_RETENTION_DAYS
        if not 1 <= days <= 90:
            raise _problem(
                f"{days} days is out of range; allowed: 1 to 90 (FSx keeps automatic backups 90 days at most)"
            )
        return days

    @field_validator("backup_start_time_utc")
    @classmethod
    def _start_of_daily_backups(cls, start: str | None, info: ValidationInfo) -> str | None:
        backups = info.data.get("backups")
        if start is not None and backups not in ("daily", None):
            raise _problem(
                f"{start} starts nothing with backups: {backups}; allowed: only with backups: daily"
            )
        return start

    @field_validator("backup_s3_path")
    @classmethod
    def _export_destination(cls, path: str | None, info: ValidationInfo) -> str | None:
        backups, imported = info.data.get("backups"), info.data.get("s3_import_path")
        if backups == "s3" and path is None:
            raise _problem(
                "required with backups: s3: the S3 prefix each team's directory is exported to, such as "
                "s3://my-checkpoints/trainium (a bucket of this account)"
            )
        if backups not in ("s3", None) and path is not None:
            raise _problem(f"{path} receives nothing with backups: {backups}; allowed: only with backups: s3")
        if path is not None and imported is not None and _overlapping(path, imported):
            raise _problem(
                f"{path} overlaps s3_import_path ({imported}): FSx links each S3 prefix to one directory "
                "only; allowed: a prefix outside the imported one"
            )
        return path

    @property
    def exported(self) -> bool:
        """Each team's directory goes to S3 (a data repository association per team)."""
        return self.backups == "s3"

    @field_validator("s3_bucket_owner")
    @classmethod
    def _owner_of_a_bucket(cls, owner: str | None, info: ValidationInfo) -> str | None:
        if owner is not None and "s3_import_path" in info.data and info.data["s3_import_path"] is None:
            raise _problem(
                f"{owner} owns no bucket here: s3_import_path is null; set it, or remove s3_bucket_owner"
            )
        return owner

    @field_validator("storage_capacity_gib")
    @classmethod
    def _lustre_increment(cls, capacity: int) -> int:
        # CreateFileSystem: SCRATCH_2 and PERSISTENT_2 (SSD) take 1200 GiB, 2400 GiB or multiples of 2400.
        if capacity != LUSTRE_SMALLEST_GIB and (capacity <= 0 or capacity % LUSTRE_INCREMENT_GIB):
            nearest = " or ".join(map(str, _nearest_lustre_sizes(capacity)))
            raise _problem(
                f"{capacity} GiB is not a Lustre size; nearest: {nearest} "
                f"(allowed: {LUSTRE_SMALLEST_GIB} or a multiple of {LUSTRE_INCREMENT_GIB})"
            )
        return capacity

    @field_validator("throughput_mib_per_tib")
    @classmethod
    def _offered_by_deployment_type(cls, throughput: int | None, info: ValidationInfo) -> int | None:
        deployment_type = info.data.get("deployment_type")
        if deployment_type == "PERSISTENT_2" and throughput is None:
            return DEFAULT_PERSISTENT_2_THROUGHPUT
        if deployment_type == "PERSISTENT_2" and throughput not in PERSISTENT_2_THROUGHPUTS:
            allowed = ", ".join(map(str, PERSISTENT_2_THROUGHPUTS))
            raise _problem(f"{throughput} is not offered by PERSISTENT_2; allowed: {allowed}")
        if deployment_type == "SCRATCH_2" and throughput is not None:
            raise _problem(f"{throughput} is not offered by SCRATCH_2; leave it null (fixed at 200 MB/s/TiB)")
        return throughput


# AWS::ECR::PullThroughCacheRule CredentialArn: a Secrets Manager secret whose name starts with
# ecr-pullthroughcache/ (ECR reads only those).
PullThroughCredentialArn = Annotated[
    str,
    _matching(
        r"arn:aws(-cn|-us-gov)?:secretsmanager:[a-z0-9-]+:\d{12}:secret:ecr-pullthroughcache/[A-Za-z0-9/_+=.@-]+",
        "a Secrets Manager secret ARN whose name starts with ecr-pullthroughcache/",
    ),
]


EcrRepositoryArn = Annotated[
    str,
    _matching(
        r"arn:aws(-cn|-us-gov)?:ecr:[a-z0-9-]+:\d{12}:repository/[a-z0-9]+([._/-][a-z0-9]+)*",
        "an ECR repository ARN such as arn:aws:ecr:us-west-2:777788889999:repository/team/train",
    ),
]


class EcrSettings(_Section):
    repository_name: (
        Annotated[str, _matching(r"[a-z0-9]+([._/-][a-z0-9]+)*", "an ECR repository name")] | None
    ) = None
    """Defaults to <name>/training."""
    removal_policy: RemovalPolicy = "retain"
    keep_images: int = Field(default=30, ge=1, le=1000)
    pull_through_cache: bool = True
    """Pull every third-party image through the account's ECR (docs/supply-chain.md); false: from upstream."""
    pull_through_cache_rules: Literal["create", "existing"] = "create"
    """``existing``: the rules (prefix upstream/<registry>) already exist in this account and region, for
    example made by another cluster's stack; this stack then creates none and relies on them."""
    upstream_credentials: dict[Literal["docker.io", "ghcr.io"], PullThroughCredentialArn] = Field(
        default_factory=dict
    )
    """Registry -> Secrets Manager secret ECR signs in with; a rule for Docker Hub or ghcr.io needs one."""
    cross_account_repositories: list[EcrRepositoryArn] = Field(default_factory=list)
    """ECR repositories of other accounts whose repository policy lets this account pull
    (``ecr:BatchGetImage``, ``ecr:GetDownloadUrlForLayer``); a run's image in one of them is pulled
    with the Trainium node role's grant on exactly that repository (docs/supply-chain.md)."""

    @property
    def mirrored_registries(self) -> frozenset[str]:
        """The upstream registries whose images the stack copies into the account at deploy: Docker Hub
        (Volcano's images) while the cache is on but has no Docker Hub credential, so that no node
        pulls Docker Hub anonymously (docs/supply-chain.md)."""
        if not self.pull_through_cache or "docker.io" in self.upstream_credentials:
            return frozenset()
        return frozenset({"docker.io"})

    @property
    def cached_registries(self) -> frozenset[str]:
        """The upstream registries whose images come through the cache (none when it is off)."""
        if not self.pull_through_cache:
            return frozenset()
        return frozenset(
            host
            for host, registry in UPSTREAM_REGISTRIES.items()
            if not registry.needs_credential or host in self.upstream_credentials
        )


# CloudWatch PutDashboard: "A dashboard name can contain only alphanumerics, dash (-), and underscore (_)".
DashboardName = Annotated[
    str,
    _matching(r"[A-Za-z0-9_-]{1,255}", "a dashboard name of at most 255 letters, digits, '-' and '_'"),
]


class ObservabilitySettings(_Section):
    """The CloudWatch dashboard and TensorBoard (docs/health.md)."""

    dashboard: bool = True
    """A CloudWatch dashboard of the cluster; its address is the stack output DashboardUrl."""
    dashboard_name: DashboardName | None = None
    """Defaults to <name>-<region>."""
    dashboard_period_seconds: Literal[60, 300, 900, 3600] = 300
    """The period of every graph; Container Insights publishes every 60 s."""
    tensorboard: bool = True
    """Serve TensorBoard over the runs' output (kubectl port-forward); it is rendered either way."""
    tensorboard_memory_gib: int = Field(default=2, ge=1, le=64)
    """TensorBoard's memory request and limit; it holds the loaded event data of every run."""


DEFAULT_FABRIC_CHECK_THRESHOLD = 0.25
"""The fraction of the instance type's EFA bandwidth the fabric check's all-reduce must reach.

The Neuron nccom-test user guide's two-node trn1.32xlarge all-reduce reaches 47.09 GiB/s at 1 GiB
(404.5 Gbps, 0.51 of 800 Gbps): 0.25 leaves it a 2x margin. A TCP fallback leaves through one
network card of 8 (trn1) or 16 (trn1n, trn2) and stays below 0.25 even at that card's line rate.
docs/fabric-check.md has the derivation (and how to raise it once a healthy run is measured).
"""
DEFAULT_FABRIC_CHECK_MESSAGE_BYTES = 1024**3
_MESSAGE_BYTES_RANGE = (2**20, 2**33)


def _fraction(value: float) -> float:
    # `not a < b <= c` also refuses NaN, which every comparison fails.
    if not 0 < value <= 1:
        raise _problem(
            f"{value!r} is not a fraction in (0, 1]; the default is {DEFAULT_FABRIC_CHECK_THRESHOLD}"
        )
    return value


def _message_bytes(value: int) -> int:
    low, high = _MESSAGE_BYTES_RANGE
    if not low <= value <= high:
        raise _problem(
            f"{value} bytes is out of range; allowed: {low} (1 MiB) to {high} (8 GiB), "
            f"default {DEFAULT_FABRIC_CHECK_MESSAGE_BYTES} (1 GiB)"
        )
    return value


class FabricCheckSettings(_Section):
    """The fabric check of each Trainium node group (docs/fabric-check.md, docs/health.md)."""

    threshold: Annotated[float, AfterValidator(_fraction)] = DEFAULT_FABRIC_CHECK_THRESHOLD
    """Fraction of the instance type's EFA bandwidth the all-reduce bus bandwidth must reach, in (0, 1]."""
    message_bytes: Annotated[int, AfterValidator(_message_bytes)] = DEFAULT_FABRIC_CHECK_MESSAGE_BYTES
    """The largest all-reduce, which is judged: large enough to be bandwidth-bound (1 GiB, as the
    user guide's example), small enough for the devices' memory."""
    pipeline: bool = False
    """Run the check in the pipeline's deployment check: the autoscaler brings up max_size nodes of
    every group (max_size >= 2) for the check's minutes and lets them go; off, since that bills
    Trainium node-hours on every deployment."""
    taint_failed_nodes: bool = True
    """On a verdict that implicates the nodes, the check taints them (trainium/fabric-check=failed:NoSchedule)
    so that no training pod lands there; off: it only reports."""


def _minutes(low: int, high: int) -> AfterValidator:
    def check(value: int) -> int:
        if not low <= value <= high:
            raise _problem(f"{value} minutes is out of range; allowed: {low} to {high}")
        return value

    return AfterValidator(check)


def _replacements(value: int) -> int:
    if not 1 <= value <= 10:
        raise _problem(f"{value} replacements is out of range; allowed: 1 to 10 per window")
    return value


class NodeCheckSettings(_Section):
    """The node check of every Trainium node and what it may do to a bad one (docs/health.md)."""

    replace_failed_nodes: bool = True
    """A node that fails the check (a new node, or a node whose EFA devices reported errors and then
    fail the loopback) has its instance marked Unhealthy in its Auto Scaling group, which replaces
    it; false: the node keeps its taint and waits for a person."""
    replace_unresponsive_after_minutes: Annotated[int, _minutes(3, 29)] | None = 5
    """A Trainium node whose kubelet has been silent (``Ready`` Unknown) this long is terminated
    through its Auto Scaling group by the node check of another Trainium node, so that its pods go
    and the gang can start again; null: wait for EKS node auto repair (30 minutes)."""
    replacements_per_window: Annotated[int, AfterValidator(_replacements)] = DEFAULT_REPLACEMENTS_PER_WINDOW
    """The most replacements the check asks for in one node group within ``replacement_window_minutes``
    (failed new nodes, failed EFA re-checks, unresponsive nodes together); past it a failed node is
    not replaced: it keeps a taint with its reason and the autoscaler removes it (docs/health.md)."""
    replacement_window_minutes: Annotated[int, _minutes(15, 1440)] = DEFAULT_REPLACEMENT_WINDOW_MINUTES
    """The window of ``replacements_per_window``: at least the 15 minutes a replacement takes to launch,
    pull and be checked, so that a replacement's own failure falls in the window that allowed it."""


class AutoscalerSettings(_Section):
    """The Kubernetes Cluster Autoscaler that brings Trainium nodes up for queued jobs and lets them go."""

    scale_down_unneeded_minutes: Annotated[int, _minutes(1, 60)] = 5
    """How long a Trainium node runs no training pod before the autoscaler removes it."""
    scale_down_delay_after_add_minutes: Annotated[int, _minutes(0, 60)] = 5
    """After a scale-up, how long before any scale-down is considered (lets a gang's pods start)."""
    max_node_provision_minutes: Annotated[int, _minutes(5, 60)] = 15
    """How long a requested node may take to join; past it the autoscaler gives the launch up, lowers
    the group's desired size and backs off (a partial scale-up is bounded by this)."""
    expander: Literal["least-waste", "most-pods", "random"] = "least-waste"
    """Which group grows when several could host the pending pods."""
    gang_watchdog: bool = True
    """Cordon the idle Trainium nodes that keep a partly placeable gang from scaling up, after
    ``max_node_provision_minutes`` (docs/capacity.md, "A gang that only partly fits")."""
    stuck_run_minutes: Annotated[int, AfterValidator(stuck_minutes_in_range)] | None = (
        DEFAULT_STUCK_RUN_MINUTES
    )
    """The gang watchdog ends a run whose pods hold Trainium nodes without progressing (a container
    waiting, or no log output) for this long (docs/capacity.md, "A run that does not progress");
    ``runs[].stuck_minutes`` overrides it per run; null: never (also off with ``gang_watchdog: false``)."""
    stuck_run_max_minutes: Annotated[int, AfterValidator(stuck_minutes_in_range)] | None = None
    """The longest a run's own limit may be: ``runs[].stuck_minutes`` and the annotation
    ``trainium/stuck-minutes`` a team member may put on a Job (the team admission policy refuses a
    larger one, and the guard uses no more than this). Default: the largest limit this file sets
    (``stuck_run_minutes`` and every ``runs[].stuck_minutes``), so no annotation takes a run past
    what the configuration allows anywhere."""


class StackConfig(_Section):
    name: Name
    account: AccountId
    region: Region
    vpc: VpcSettings
    cluster: ClusterSettings
    system_nodes: Annotated[SystemNodesSettings, OptionalSection] = Field(default_factory=SystemNodesSettings)
    trainium: TrainiumSettings
    fsx: Annotated[FsxSettings, OptionalSection] = Field(default_factory=FsxSettings)
    ecr: Annotated[EcrSettings, OptionalSection] = Field(default_factory=EcrSettings)
    autoscaler: Annotated[AutoscalerSettings, OptionalSection] = Field(default_factory=AutoscalerSettings)
    observability: Annotated[ObservabilitySettings, OptionalSection] = Field(
        default_factory=ObservabilitySettings
    )
    fabric_check: Annotated[FabricCheckSettings, OptionalSection] = Field(default_factory=FabricCheckSettings)
    node_check: Annotated[NodeCheckSettings, OptionalSection] = Field(default_factory=NodeCheckSettings)
    teams: list[TeamSettings] = Field(default_factory=lambda: list(DEFAULT_TEAMS), min_length=1)
    datasets: list[DatasetSettings] = Field(default_factory=list)
    runs: list[RunSettings] = Field(default_factory=list)
    training: Annotated[None, MovedSection] = None
    """Replaced by runs; a file that still has it gets one line saying how to write it."""

    @property
    def stuck_run_ceiling_minutes(self) -> int | None:
        """The longest stuck-run limit any run may have (``autoscaler.stuck_run_max_minutes``, by
        default the largest this file sets); None when no guard runs."""
        settings = self.autoscaler
        if not settings.gang_watchdog or settings.stuck_run_minutes is None:
            return None
        if settings.stuck_run_max_minutes is not None:
            return settings.stuck_run_max_minutes
        return max(
            [settings.stuck_run_minutes, *(run.stuck_minutes for run in self.runs if run.stuck_minutes)]
        )

    def team(self, name: str | None) -> TeamSettings:
        """The team ``name``, or the first team."""
        return next((team for team in self.teams if team.name == name), self.teams[0])

    def node_group(self, name: str) -> TrainiumNodeGroupSettings:
        return next(group for group in self.trainium.node_groups if group.name == name)

    def team_node_groups(self, team: TeamSettings) -> list[TrainiumNodeGroupSettings]:
        """The groups a team's runs may use: in the team's order, or all of them in the cluster's."""
        if not team.node_groups:
            return list(self.trainium.node_groups)
        return [self.node_group(name) for name in team.node_groups]

    def run_node_group(self, run: RunSettings) -> TrainiumNodeGroupSettings:
        """The run's group: as configured, or the first its team may use."""
        if run.node_group is not None:
            return self.node_group(run.node_group)
        return self.team_node_groups(self.team(run.team))[0]

    @property
    def ecr_repository_name(self) -> str:
        return self.ecr.repository_name or f"{self.name}/training"

    @property
    def dashboard_name(self) -> str:
        # Dashboards are named per account, and one cluster name may exist in several regions.
        return self.observability.dashboard_name or f"{self.name}-{self.region}"
