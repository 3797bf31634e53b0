"""What the AWS account answered, as frozen data: the checks read these and never call AWS."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

__all__ = [
    "AccountFacts",
    "AmiReleaseFacts",
    "InstancesInUse",
    "KubernetesVersion",
    "LambdaLimits",
    "NetworkFacts",
    "NoPrice",
    "Price",
    "Reservation",
    "SubnetFacts",
    "Unavailable",
    "Zone",
]


@dataclass(frozen=True)
class Unavailable:
    """A fact AWS did not give (the call was denied or failed); the check that needs it fails."""

    call: str
    """The IAM action of the call, such as ``ec2:DescribeAvailabilityZones``."""
    reason: str
    """The error code and message, such as ``UnauthorizedOperation: You are not authorized ...``."""


@dataclass(frozen=True)
class Zone:
    name: str
    """This account's name for the zone, such as us-west-2d."""
    zone_id: str
    """The physical zone, the same in every account, such as usw2-az4."""
    state: str
    """available, information, impaired, unavailable or constrained."""


@dataclass(frozen=True)
class Reservation:
    """One On-Demand Capacity Reservation or Capacity Block (``DescribeCapacityReservations``)."""

    reservation_id: str
    instance_type: str
    zone_name: str
    zone_id: str
    total_instances: int
    available_instances: int
    state: str
    reservation_type: str
    """``default`` for an On-Demand Capacity Reservation, ``capacity-block`` for a Capacity Block."""
    start: datetime | None = None
    end: datetime | None = None
    """None for a reservation without an end date."""


@dataclass(frozen=True)
class KubernetesVersion:
    version: str
    status: str
    """STANDARD_SUPPORT, EXTENDED_SUPPORT or UNSUPPORTED (EKS ``versionStatus``)."""
    end_of_standard_support: datetime | None = None
    end_of_extended_support: datetime | None = None


@dataclass(frozen=True)
class LambdaLimits:
    """The Region's Lambda concurrency (``lambda:GetAccountSettings``, ``AccountLimit``)."""

    concurrent_executions: int
    """``ConcurrentExecutions``: the most executions the account runs at once in the Region (Service
    Quotas L-B99A9384 "Concurrent executions")."""
    unreserved: int
    """``UnreservedConcurrentExecutions``: what is left of it for functions without reserved concurrency."""


@dataclass(frozen=True)
class InstancesInUse:
    """Pending and running Trn instances outside this stack's cluster that draw on one quota."""

    instances: int = 0
    vcpus: int = 0


@dataclass(frozen=True)
class Price:
    """One On-Demand price from the AWS Price List (``pricing:GetProducts``), in US dollars."""

    usd: float
    """Dollars per ``unit``."""
    unit: str
    """The Price List's unit: ``Hrs`` (per hour) or ``GB-Mo`` (per GB-month)."""
    sku: str
    published: str
    """The Price List's ``publicationDate`` of the product, such as 2026-11-01T00:00:00Z."""


@dataclass(frozen=True)
class NoPrice:
    """The Price List answered, but not with exactly one price: the cost is shown as unknown."""

    reason: str
    """Such as ``no product matches`` or ``2 products with different prices: $0.10, $0.60``."""


@dataclass(frozen=True)
class AmiReleaseFacts:
    """What SSM's public parameters say of the EKS Neuron AMI releases of the configured Kubernetes
    version (preflight/live_versions.py reads them against cluster_facts/ami_releases.py)."""

    recommended: str | Unavailable | None
    """``.../x86_64/neuron/recommended/release_version``; None: no such parameter in the region."""
    published: Mapping[str, bool | Unavailable] = field(default_factory=dict)
    """Each node group's release -> whether its ``.../amazon-eks-node-al2023-x86_64-neuron-<minor>-v<date>/image_id``
    parameter exists (EKS published an AMI of that release in the region)."""


@dataclass(frozen=True)
class SubnetFacts:
    """One subnet of an existing VPC (``DescribeSubnets``) and its route table's default route."""

    subnet_id: str
    vpc_id: str
    zone_name: str
    zone_id: str
    cidr: str
    available_addresses: int
    """``AvailableIpAddressCount``: the subnet's free IPv4 addresses."""
    tags: Mapping[str, str] = field(default_factory=dict)
    default_route: str | None = None
    """The target of its route table's 0.0.0.0/0 route (``nat-...``, ``tgw-...``, ``igw-...``), None
    without one; its explicit route table, else the VPC's main one."""


@dataclass(frozen=True)
class NetworkFacts:
    """The existing VPC ``vpc.vpc_id`` names, read when the configuration has one."""

    vpc_cidrs: tuple[str, ...] | None
    """The VPC's IPv4 CIDR blocks; None: the VPC does not exist in the account and region."""
    subnets: Mapping[str, SubnetFacts | None]
    """Subnet id -> what the account says of it; None: no such subnet."""
    endpoints: tuple[str, ...] = ()
    """The service names of the VPC's endpoints (``com.amazonaws.<region>.ecr.api``, ...)."""


@dataclass(frozen=True)
class AccountFacts:
    """Everything the checks need, read once per run."""

    account_id: str
    """The account the credentials belong to (``sts:GetCallerIdentity``)."""
    region: str
    zones: tuple[Zone, ...] | Unavailable
    offerings: Mapping[str, tuple[str, ...]] | Unavailable
    """Instance type -> the zone ids of the region that offer it (none: not offered in the region)."""
    reservations: Mapping[str, Reservation | Unavailable | None] = field(default_factory=dict)
    """Reservation id -> the reservation; None when the account has no reservation with that id."""
    quotas: Mapping[str, float | Unavailable | None] = field(default_factory=dict)
    """Service Quotas code -> value; None when the region has no such quota."""
    in_use: Mapping[str, InstancesInUse] | Unavailable = field(default_factory=dict)
    """Service Quotas code -> the Trn instances other than this cluster's that already use it."""
    kubernetes_versions: tuple[KubernetesVersion, ...] | Unavailable = ()
    lambda_limits: LambdaLimits | Unavailable | None = None
    """None: not asked."""
    prices: Mapping[str, Price | NoPrice | Unavailable] = field(default_factory=dict)
    """``costs.PriceQuery.key`` -> the price; the queries come from ``costs.price_queries``."""
    deployed_version: str | Unavailable | None = None
    """The Kubernetes version of the cluster deployed under the configuration's name; None: none yet."""
    ami_releases: AmiReleaseFacts | None = None
    """None: not asked."""
    network: NetworkFacts | Unavailable | None = None
    """The existing VPC and its subnets; None: the configuration creates its own VPC."""
    checked_at: datetime | None = None
    """When the facts were read (the clock of the machine running preflight); None: unknown, and
    the checks that compare dates (a Capacity Block's window) rely on the reservation's state alone."""
