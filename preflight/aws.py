"""The one module that calls AWS: read-only calls that turn the account's answers into ``AccountFacts``.

Every client retries in botocore's ``standard`` mode, which backs off and retries throttling
(``RequestLimitExceeded``, ``TooManyRequestsException``, ...) and transient network errors. What
cannot be answered at all (no credentials, credentials refused, no route to AWS, throttled on every
attempt) raises ``AwsUnavailable``: no check can run then. A call that is answered with an error
(access denied, say) becomes an ``Unavailable`` fact, and only the checks that needed it fail.

Prices are the exception: the Price List (``pricing:GetProducts``) only informs, so when it is
denied, throttled on every attempt or out of reach, its prices become ``Unavailable`` (a WARN row),
never ``AwsUnavailable``. Its endpoint is in us-east-1 whatever the configuration's region (the
Price List Query API also answers in eu-central-1 and ap-south-1; the prices are the same).

boto3 and botocore have no type information; clients are typed by the small protocols below, and
responses are read into typed facts right here.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import boto3  # type: ignore[import-untyped]
import botocore.exceptions  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]

from cluster_facts.ami_releases import DEFAULT_AMI_RELEASES, neuron_ami_parameter
from cluster_facts.instance_catalog import CATALOG
from config.model import StackConfig
from preflight.costs import PRICE_LIST_CALL, PriceQuery, price_queries
from preflight.facts import (
    AccountFacts,
    AmiReleaseFacts,
    InstancesInUse,
    KubernetesVersion,
    LambdaLimits,
    NetworkFacts,
    NoPrice,
    Price,
    Reservation,
    SubnetFacts,
    Unavailable,
    Zone,
)
from preflight.quotas import quota_demands, quota_of_instance
from preflight.registries import EcrClient, HttpTransport, UrllibTransport

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "PRICING_REGION",
    "AwsUnavailable",
    "Clients",
    "gather_facts",
    "make_clients",
]

DEFAULT_MAX_ATTEMPTS = 8
"""Attempts per call, the first included; standard mode backs off up to 20 s between them."""

PRICING_REGION = "us-east-1"
"""Where the Price List Query API is asked, whatever region the configuration deploys to."""

# Error codes that mean the credentials themselves were refused: nothing else can work either.
_CREDENTIAL_ERRORS = frozenset(
    {
        "AuthFailure",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidAccessKeyId",
        "InvalidClientTokenId",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
    }
)
# botocore's standard retry mode retries these; seeing one here means every attempt was throttled.
_THROTTLING_ERRORS = frozenset(
    {
        "EC2ThrottledException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
    }
)
_RESERVATION_NOT_FOUND = frozenset(
    {"InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"}
)


class AwsUnavailable(Exception):
    """AWS could not be asked at all; ``str(error)`` is the one line the user reads."""


class _Paginator(Protocol):
    def paginate(self, **kwargs: Any) -> Iterable[Mapping[str, Any]]: ...


class StsClient(Protocol):
    def get_caller_identity(self) -> Mapping[str, Any]: ...


class Ec2Client(Protocol):
    def describe_availability_zones(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def describe_vpcs(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def describe_subnets(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def describe_route_tables(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def describe_vpc_endpoints(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def describe_capacity_reservations(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def get_paginator(self, operation_name: str) -> _Paginator: ...


class ServiceQuotasClient(Protocol):
    def get_service_quota(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def get_aws_default_service_quota(self, **kwargs: Any) -> Mapping[str, Any]: ...


class EksClient(Protocol):
    def get_paginator(self, operation_name: str) -> _Paginator: ...
    def describe_cluster(self, **kwargs: Any) -> Mapping[str, Any]: ...


class LambdaClient(Protocol):
    def get_account_settings(self) -> Mapping[str, Any]: ...


class PricingClient(Protocol):
    def get_paginator(self, operation_name: str) -> _Paginator: ...


class SsmClient(Protocol):
    def get_parameter(self, **kwargs: Any) -> Mapping[str, Any]: ...


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Clients:
    region: str
    sts: StsClient
    ec2: Ec2Client
    service_quotas: ServiceQuotasClient
    eks: EksClient
    pricing: PricingClient
    """The Price List, in ``PRICING_REGION``."""
    lambda_: LambdaClient
    ssm: SsmClient
    """AWS's public parameters: the EKS AMI releases (preflight/live_versions.py)."""
    clock: Callable[[], datetime] = field(default=utc_now)
    """Now, for the checks that compare dates (a Capacity Block's window); tests fix it."""
    ecr: EcrClient | None = None
    """ECR in the configuration's region, for the image rows (preflight/registries.py); None: not asked."""
    registry_http: HttpTransport | None = None
    """HTTPS to the public registries, for the image rows; None: not asked."""


def client_config(max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> Any:
    """Standard retries (throttling and transient errors), and timeouts short enough to fail fast.

    ``total_max_attempts`` counts the first attempt; botocore's ``max_attempts`` key would count
    retries only (one more attempt than the number given).
    """
    return Config(
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        connect_timeout=10,
        read_timeout=30,
    )


def make_clients(
    region: str,
    *,
    session: Any = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    clock: Callable[[], datetime] = utc_now,
) -> Clients:
    """Clients for ``region`` from the usual credential chain (environment, profile, SSO, role)."""
    try:
        session = session if session is not None else boto3.session.Session()
        config = client_config(max_attempts)
        return Clients(
            region=region,
            sts=session.client("sts", region_name=region, config=config),
            ec2=session.client("ec2", region_name=region, config=config),
            service_quotas=session.client("service-quotas", region_name=region, config=config),
            eks=session.client("eks", region_name=region, config=config),
            pricing=session.client("pricing", region_name=PRICING_REGION, config=config),
            lambda_=session.client("lambda", region_name=region, config=config),
            ssm=session.client("ssm", region_name=region, config=config),
            clock=clock,
            ecr=session.client("ecr", region_name=region, config=config),
            registry_http=UrllibTransport(),
        )
    except botocore.exceptions.BotoCoreError as error:
        # A missing profile (AWS_PROFILE), an unreadable config file, an unknown region ...
        raise AwsUnavailable(f"cannot set up AWS clients: {error}") from None


def gather_facts(config: StackConfig, clients: Clients) -> AccountFacts:
    """Ask the account, read-only, everything the checks need; one call (or paginated series) each."""
    identity = _ask(clients.sts.get_caller_identity, call="sts:GetCallerIdentity")
    if identity is None or isinstance(identity, Unavailable):
        reason = identity.reason if identity is not None else "no answer"
        raise AwsUnavailable(f"cannot identify the AWS account ({reason})")
    groups = config.trainium.node_groups
    instance_types = sorted({group.instance_type for group in groups})
    reservation_ids = list(
        dict.fromkeys(g.capacity_reservation_id for g in groups if g.capacity_reservation_id)
    )
    quota_codes = [demand.quota.code for demand in quota_demands(config)]
    return AccountFacts(
        account_id=str(identity["Account"]),
        region=clients.region,
        zones=_zones(clients.ec2),
        offerings=_offerings(clients.ec2, instance_types),
        reservations={
            reservation_id: _reservation(clients.ec2, reservation_id) for reservation_id in reservation_ids
        },
        quotas={code: _quota(clients.service_quotas, code) for code in quota_codes},
        in_use=_trn_in_use(clients.ec2, cluster_name=config.name) if quota_codes else {},
        kubernetes_versions=_kubernetes_versions(clients.eks),
        deployed_version=_deployed_version(clients.eks, config.name),
        lambda_limits=_lambda_limits(clients.lambda_),
        prices=_prices(clients.pricing, price_queries(config)),
        ami_releases=_ami_releases(clients.ssm, config),
        network=_network(clients.ec2, config) if config.vpc.existing else None,
        checked_at=clients.clock(),
    )


_T = TypeVar("_T")


def _ask(
    request: Callable[[], _T],
    *,
    call: str,
    missing: frozenset[str] = frozenset(),
    optional: bool = False,
) -> _T | Unavailable | None:
    """Run one request; None when AWS answers with a ``missing`` code, Unavailable for other answers.

    Everything that means "AWS cannot be asked" is raised as ``AwsUnavailable`` instead; with
    ``optional``, throttling and network errors become Unavailable too (refused credentials do not:
    nothing else would work either).
    """
    try:
        return request()
    except botocore.exceptions.ClientError as error:
        details = error.response.get("Error", {})
        code = str(details.get("Code", "Unknown"))
        message = " ".join(str(details.get("Message", "")).split())
        if code in missing:
            return None
        if code in _CREDENTIAL_ERRORS:
            raise AwsUnavailable(
                f"AWS refused the credentials ({code}: {message}); renew them (aws sso login, or new keys) and retry"
            ) from None
        if code in _THROTTLING_ERRORS and optional:
            return Unavailable(call=call, reason=f"{code}: throttled on every attempt")
        if code in _THROTTLING_ERRORS:
            raise AwsUnavailable(
                f"AWS throttled {call} on every attempt ({code}); wait a minute and retry, or pass --max-attempts"
            ) from None
        return Unavailable(call=call, reason=f"{code}: {message}" if message else code)
    except (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError):
        raise AwsUnavailable(
            "no AWS credentials found: set AWS_PROFILE (and run aws sso login) or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
        ) from None
    except (
        botocore.exceptions.TokenRetrievalError,
        botocore.exceptions.CredentialRetrievalError,
        botocore.exceptions.SSOError,
    ) as error:
        raise AwsUnavailable(f"cannot get AWS credentials: {error}") from None
    except (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError) as error:
        if optional:
            return Unavailable(call=call, reason=f"cannot reach AWS ({error})")
        raise AwsUnavailable(f"cannot reach AWS ({error}); check the network, proxy and region") from None
    except botocore.exceptions.BotoCoreError as error:
        if optional:
            return Unavailable(call=call, reason=str(error))
        raise AwsUnavailable(f"AWS request {call} failed: {error}") from None


def _zones(ec2: Ec2Client) -> tuple[Zone, ...] | Unavailable:
    answer = _ask(ec2.describe_availability_zones, call="ec2:DescribeAvailabilityZones")
    if answer is None:
        return Unavailable("ec2:DescribeAvailabilityZones", "no answer")
    if isinstance(answer, Unavailable):
        return answer
    return tuple(
        Zone(
            name=str(zone["ZoneName"]), zone_id=str(zone["ZoneId"]), state=str(zone.get("State", "available"))
        )
        for zone in answer.get("AvailabilityZones", [])
        # Local and Wavelength zones can hold neither the VPC's subnets here nor Trainium nodes.
        if zone.get("ZoneType", "availability-zone") == "availability-zone"
    )


_VPC_NOT_FOUND = frozenset({"InvalidVpcID.NotFound"})
_SUBNET_NOT_FOUND = frozenset({"InvalidSubnetID.NotFound"})


def _network(ec2: Ec2Client, config: StackConfig) -> NetworkFacts | Unavailable:
    """The existing VPC's CIDRs, each named subnet with its default route, and the VPC's endpoints.

    A VPC or subnet that does not exist is a fact (None), not an error. One call per question;
    subnets one by one, so that one missing id does not hide the others (DescribeSubnets refuses the
    whole list for one unknown id)."""
    vpc_id = str(config.vpc.vpc_id)
    answer = _ask(
        functools.partial(ec2.describe_vpcs, VpcIds=[vpc_id]), call="ec2:DescribeVpcs", missing=_VPC_NOT_FOUND
    )
    if isinstance(answer, Unavailable):
        return answer
    vpcs = answer.get("Vpcs", []) if answer is not None else []
    cidrs = (
        tuple(str(block["CidrBlock"]) for block in vpcs[0].get("CidrBlockAssociationSet", []))
        if vpcs
        else None
    )
    tables = _ask(
        functools.partial(ec2.describe_route_tables, Filters=[{"Name": "vpc-id", "Values": [vpc_id]}]),
        call="ec2:DescribeRouteTables",
    )
    endpoints = _ask(
        functools.partial(ec2.describe_vpc_endpoints, Filters=[{"Name": "vpc-id", "Values": [vpc_id]}]),
        call="ec2:DescribeVpcEndpoints",
    )
    if isinstance(tables, Unavailable):
        return tables
    if isinstance(endpoints, Unavailable):
        return endpoints
    routes = _default_routes((tables or {}).get("RouteTables", []))
    subnets: dict[str, SubnetFacts | None] = {}
    for subnet_id in _named_subnets(config):
        found = _ask(
            functools.partial(ec2.describe_subnets, SubnetIds=[subnet_id]),
            call="ec2:DescribeSubnets",
            missing=_SUBNET_NOT_FOUND,
        )
        if isinstance(found, Unavailable):
            return found
        items = found.get("Subnets", []) if found is not None else []
        subnets[subnet_id] = _subnet(items[0], routes) if items else None
    return NetworkFacts(
        vpc_cidrs=cidrs,
        subnets=subnets,
        endpoints=tuple(
            sorted(str(endpoint["ServiceName"]) for endpoint in (endpoints or {}).get("VpcEndpoints", []))
        ),
    )


def _named_subnets(config: StackConfig) -> list[str]:
    named = [subnet.id for subnet in config.vpc.private_subnets or []]
    if config.vpc.trainium_subnet is not None:
        named.append(config.vpc.trainium_subnet.id)
    return named


def _default_routes(tables: Iterable[Mapping[str, Any]]) -> dict[str, str | None]:
    """Subnet id (or ``main``) -> the target of its table's 0.0.0.0/0 route, None without one."""
    routes: dict[str, str | None] = {}
    for table in tables:
        target = next(
            (
                str(
                    route.get("NatGatewayId")
                    or route.get("TransitGatewayId")
                    or route.get("GatewayId")
                    or route.get("NetworkInterfaceId")
                    or route.get("InstanceId")
                    or route.get("VpcPeeringConnectionId")
                )
                for route in table.get("Routes", [])
                if route.get("DestinationCidrBlock") == "0.0.0.0/0"
                and route.get("State", "active") == "active"
            ),
            None,
        )
        for association in table.get("Associations", []):
            if association.get("Main"):
                routes["main"] = target
            elif association.get("SubnetId"):
                routes[str(association["SubnetId"])] = target
    return routes


def _subnet(item: Mapping[str, Any], routes: Mapping[str, str | None]) -> SubnetFacts:
    subnet_id = str(item["SubnetId"])
    return SubnetFacts(
        subnet_id=subnet_id,
        vpc_id=str(item["VpcId"]),
        zone_name=str(item["AvailabilityZone"]),
        zone_id=str(item.get("AvailabilityZoneId", "")),
        cidr=str(item["CidrBlock"]),
        available_addresses=int(item.get("AvailableIpAddressCount", 0)),
        tags={str(tag["Key"]): str(tag.get("Value", "")) for tag in item.get("Tags", [])},
        default_route=routes[subnet_id] if subnet_id in routes else routes.get("main"),
    )


def _offerings(ec2: Ec2Client, instance_types: list[str]) -> Mapping[str, tuple[str, ...]] | Unavailable:
    def read() -> dict[str, tuple[str, ...]]:
        found: dict[str, set[str]] = {instance_type: set() for instance_type in instance_types}
        pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone-id",
            Filters=[{"Name": "instance-type", "Values": instance_types}],
        )
        for page in pages:
            for offering in page.get("InstanceTypeOfferings", []):
                found.setdefault(str(offering["InstanceType"]), set()).add(str(offering["Location"]))
        return {instance_type: tuple(sorted(zone_ids)) for instance_type, zone_ids in found.items()}

    answer = _ask(read, call="ec2:DescribeInstanceTypeOfferings")
    return answer if answer is not None else Unavailable("ec2:DescribeInstanceTypeOfferings", "no answer")


def _reservation(ec2: Ec2Client, reservation_id: str) -> Reservation | Unavailable | None:
    # One call per id: with several ids, one unknown id would fail the whole call.
    answer = _ask(
        lambda: ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id]),
        call="ec2:DescribeCapacityReservations",
        missing=_RESERVATION_NOT_FOUND,
    )
    if answer is None or isinstance(answer, Unavailable):
        return answer
    found = [
        item
        for item in answer.get("CapacityReservations", [])
        if item.get("CapacityReservationId") == reservation_id
    ]
    if not found:
        return None
    item = found[0]
    return Reservation(
        reservation_id=reservation_id,
        instance_type=str(item.get("InstanceType", "")),
        zone_name=str(item.get("AvailabilityZone", "")),
        zone_id=str(item.get("AvailabilityZoneId", "")),
        total_instances=int(item.get("TotalInstanceCount", 0)),
        available_instances=int(item.get("AvailableInstanceCount", 0)),
        state=str(item.get("State", "")),
        reservation_type=str(item.get("ReservationType", "default")),
        start=_datetime(item.get("StartDate")),
        end=_datetime(item.get("EndDate")),
    )


def _quota(service_quotas: ServiceQuotasClient, code: str) -> float | Unavailable | None:
    """The applied value; the AWS default when the account has no applied value for the quota."""
    applied = _ask(
        lambda: service_quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code),
        call="servicequotas:GetServiceQuota",
        missing=frozenset({"NoSuchResourceException"}),
    )
    if applied is None:
        applied = _ask(
            lambda: service_quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code),
            call="servicequotas:GetAWSDefaultServiceQuota",
            missing=frozenset({"NoSuchResourceException"}),
        )
    if applied is None or isinstance(applied, Unavailable):
        return applied
    value = applied.get("Quota", {}).get("Value")
    return float(value) if value is not None else None


# The EKS tag on every instance of a managed node group: the cluster's own nodes are already
# counted at their groups' max_size.
_CLUSTER_TAG = "eks:cluster-name"
_COUNTED_STATES = ["pending", "running"]


def _trn_in_use(ec2: Ec2Client, *, cluster_name: str) -> Mapping[str, InstancesInUse] | Unavailable:
    """Pending and running Trn instances of the region outside ``cluster_name``, by quota code."""

    def read() -> dict[str, InstancesInUse]:
        in_use: dict[str, InstancesInUse] = {}
        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": "instance-type", "Values": ["trn*"]},
                {"Name": "instance-state-name", "Values": _COUNTED_STATES},
            ]
        )
        for page in pages:
            for reservation in page.get("Reservations", []):
                for instance in reservation.get("Instances", []):
                    tags = {tag.get("Key"): tag.get("Value") for tag in instance.get("Tags", [])}
                    quota = quota_of_instance(instance.get("InstanceLifecycle"))
                    if tags.get(_CLUSTER_TAG) == cluster_name or quota is None:
                        continue
                    seen = in_use.get(quota.code, InstancesInUse())
                    in_use[quota.code] = InstancesInUse(
                        instances=seen.instances + 1, vcpus=seen.vcpus + _vcpus(instance)
                    )
        return in_use

    answer = _ask(read, call="ec2:DescribeInstances")
    return answer if answer is not None else Unavailable("ec2:DescribeInstances", "no answer")


def _vcpus(instance: Mapping[str, Any]) -> int:
    """The vCPUs the quota counts: the catalog's for the type; else the instance's CPU options
    (the type's vCPUs, unless it was launched with fewer)."""
    known = CATALOG.get(str(instance.get("InstanceType", "")))
    if known is not None:
        return known.vcpus
    cpu = instance.get("CpuOptions", {})
    return int(cpu.get("CoreCount", 0)) * int(cpu.get("ThreadsPerCore", 1))


def _kubernetes_versions(eks: EksClient) -> tuple[KubernetesVersion, ...] | Unavailable:
    def read() -> tuple[KubernetesVersion, ...]:
        versions = []
        for page in eks.get_paginator("describe_cluster_versions").paginate():
            for item in page.get("clusterVersions", []):
                versions.append(
                    KubernetesVersion(
                        version=str(item["clusterVersion"]),
                        status=str(item.get("versionStatus") or item.get("status") or "")
                        .upper()
                        .replace("-", "_"),
                        end_of_standard_support=_datetime(item.get("endOfStandardSupportDate")),
                        end_of_extended_support=_datetime(item.get("endOfExtendedSupportDate")),
                    )
                )
        return tuple(versions)

    answer = _ask(read, call="eks:DescribeClusterVersions")
    return answer if answer is not None else Unavailable("eks:DescribeClusterVersions", "no answer")


def _deployed_version(eks: EksClient, cluster_name: str) -> str | Unavailable | None:
    """The Kubernetes version of the cluster already deployed under the configuration's name
    (``eks:DescribeCluster``); None: no such cluster yet (ResourceNotFoundException)."""
    answer = _ask(
        lambda: eks.describe_cluster(name=cluster_name),
        call="eks:DescribeCluster",
        missing=frozenset({"ResourceNotFoundException"}),
    )
    if answer is None or isinstance(answer, Unavailable):
        return answer
    return str(answer["cluster"]["version"])


def _ami_releases(ssm: SsmClient, config: StackConfig) -> AmiReleaseFacts:
    """The recommended Neuron AMI release of the configured version and, for each node group's
    release, whether EKS publishes it in the region: SSM public parameters, one GetParameter each
    (ParameterNotFound: no such release here). Paths: the EKS user guide ("Retrieve recommended
    Amazon Linux AMI IDs", ``.../recommended/image_id``; ``release_version`` is its sibling) and
    Karpenter's AL2023 AMI family (``resolvePath``: ``.../amazon-eks-node-al2023-<arch>-<variant>-
    <minor>-<version>/image_id`` for a pinned release)."""
    minor = config.cluster.kubernetes_version
    missing = frozenset({"ParameterNotFound"})

    def value(name: str) -> str | Unavailable | None:
        answer = _ask(lambda: ssm.get_parameter(Name=name), call="ssm:GetParameter", missing=missing)
        if answer is None or isinstance(answer, Unavailable):
            return answer
        return str(answer["Parameter"]["Value"])

    recommended = value(neuron_ami_parameter(minor))
    published: dict[str, bool | Unavailable] = {}
    for group in config.trainium.node_groups:
        release = group.ami_release or DEFAULT_AMI_RELEASES.get(minor)
        if release is None or release in published:
            continue
        found = value(neuron_ami_parameter(minor, release=release))
        published[release] = found if isinstance(found, Unavailable) else found is not None
    return AmiReleaseFacts(recommended=recommended, published=published)


def _lambda_limits(client: LambdaClient) -> LambdaLimits | Unavailable:
    """The Region's Lambda concurrency (Lambda API reference, GetAccountSettings: ``AccountLimit``)."""
    answer = _ask(client.get_account_settings, call="lambda:GetAccountSettings")
    if answer is None:
        return Unavailable("lambda:GetAccountSettings", "no answer")
    if isinstance(answer, Unavailable):
        return answer
    limit = answer.get("AccountLimit", {})
    return LambdaLimits(
        concurrent_executions=int(limit.get("ConcurrentExecutions", 0)),
        unreserved=int(limit.get("UnreservedConcurrentExecutions", 0)),
    )


# An answer that says the Price List cannot be asked now: the other prices are not asked either.
_PRICE_LIST_REFUSALS = ("AccessDenied", "UnauthorizedOperation", "cannot reach AWS")


def _prices(
    pricing: PricingClient, queries: Sequence[PriceQuery]
) -> dict[str, Price | NoPrice | Unavailable]:
    """Each query's one price. Once the Price List refuses (denied, throttled on every attempt,
    unreachable), the remaining queries get the same answer without being sent."""
    prices: dict[str, Price | NoPrice | Unavailable] = {}
    refused: Unavailable | None = None
    for query in queries:
        if refused is not None:
            prices[query.key] = refused
            continue
        answer = _price(pricing, query)
        if isinstance(answer, Unavailable) and (
            answer.reason.startswith(_PRICE_LIST_REFUSALS) or "throttled on every attempt" in answer.reason
        ):
            refused = answer
        prices[query.key] = answer
    return prices


def _price(pricing: PricingClient, query: PriceQuery) -> Price | NoPrice | Unavailable:
    def read() -> list[str]:
        items: list[str] = []
        pages = pricing.get_paginator("get_products").paginate(
            ServiceCode=query.service_code,
            Filters=[{"Type": kind, "Field": name, "Value": value} for kind, name, value in query.filters],
            FormatVersion="aws_v1",
            PaginationConfig={"PageSize": 100},
        )
        for page in pages:
            items.extend(str(item) for item in page.get("PriceList", []))
        return items

    answer = _ask(read, call=PRICE_LIST_CALL, optional=True)
    if answer is None:
        return Unavailable(PRICE_LIST_CALL, "no answer")
    if isinstance(answer, Unavailable):
        return answer
    return pick_price(answer, query)


def pick_price(items: Sequence[str], query: PriceQuery) -> Price | NoPrice:
    """The one On-Demand price among Price List items (JSON strings), or why there is not one.

    An item is ``{"product": {"sku", "productFamily", "attributes": {...}}, "serviceCode", "terms":
    {"OnDemand": {"<sku>.<offerTermCode>": {"priceDimensions": {"<rateCode>": {"unit",
    "beginRange", "pricePerUnit": {"USD": "21.5000000000"}}}}}}, "publicationDate"}``.
    """
    usage = re.compile(rf"(?:[A-Z0-9]+-)?{query.usage_type}") if query.usage_type else None
    found: list[Price] = []
    for text in items:
        try:
            item = json.loads(text)
            product = item["product"]
            attributes = product.get("attributes", {})
            if usage is not None and not usage.fullmatch(str(attributes.get("usagetype", ""))):
                continue
            if any(name in attributes and attributes[name] != value for name, value in query.exclude):
                continue
            for term in item.get("terms", {}).get("OnDemand", {}).values():
                for dimension in term.get("priceDimensions", {}).values():
                    if str(dimension.get("unit", "")).lower() not in query.units:
                        continue
                    if str(dimension.get("beginRange", "0")) != "0":
                        continue  # a higher tier of a tiered price
                    usd = float(dimension["pricePerUnit"]["USD"])
                    if usd > 0:
                        found.append(
                            Price(
                                usd=usd,
                                unit=str(dimension["unit"]),
                                sku=str(product.get("sku", "")),
                                published=str(item.get("publicationDate", "")),
                            )
                        )
        except (ValueError, KeyError, TypeError, AttributeError):
            return NoPrice(f"an unreadable Price List item for {query.what}")
    distinct = sorted({round(price.usd, 10) for price in found})
    if not distinct:
        return NoPrice(f"no {query.what} price in the Price List for these filters")
    if len(distinct) > 1:
        listed = ", ".join(f"${usd:g}" for usd in distinct)
        return NoPrice(f"{len(found)} {query.what} prices, not one: {listed}")
    return found[0]


def _datetime(value: object) -> datetime | None:
    return value if isinstance(value, datetime) else None
