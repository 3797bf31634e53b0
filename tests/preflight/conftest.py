"""A fake AWS account for the preflight tests: real boto3 clients answered by botocore's Stubber.

The clients are made by ``preflight.aws.make_clients`` (so with the production retry settings) from
a session with fake credentials; every environment variable that could reach a real account, a
profile or instance metadata is replaced, and a ``before-send`` guard fails any request that
would leave the process. ``FakeAccount`` describes the account; ``stub_clients`` queues its
answers in the order ``gather_facts`` asks.
"""

from __future__ import annotations

import atexit
import copy
import dataclasses
import functools
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber

from cluster_facts.ami_releases import DEFAULT_AMI_RELEASES, neuron_ami_parameter
from cluster_facts.images import split_image
from config import StackConfig, load_config, parse_config
from preflight.aws import Clients, make_clients
from preflight.costs import price_queries
from preflight.image_inventory import PulledImage, Source, pulled_images
from preflight.lambda_concurrency import LambdaDemand, lambda_demand
from preflight.quotas import ON_DEMAND, SPOT, quota_demands
from preflight.registries import MANIFEST_MEDIA_TYPES
from tests.preflight import price_list
from tests.preflight.fake_registries import FakeRegistries, digest_of

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = REPO_ROOT / "config" / "default.yaml"
EXAMPLE_CONFIG = REPO_ROOT / "config" / "example.yaml"
DEFAULT_TEMPLATE = REPO_ROOT / "tests" / "snapshots" / "TrainiumStack.default.json"
"""The reviewed template of config/default.yaml (asset hashes masked; the dependency graph is whole)."""

ODCR_ID = "cr-0123456789abcdef0"  # example.yaml: trn1n-32xl, on_demand, max_size 4
BLOCK_ID = "cr-0fedcba9876543210"  # example.yaml: trn1-32xl-block, capacity_block, max_size 8
# The fake account's reservations leave room for a node group update's surge (checks.UPDATE_SURGE):
# a reservation sized exactly to max_size is a WARN (test_reservations.py).
ODCR_COUNT = 6
BLOCK_COUNT = 10
BLOCK_START = datetime(2026, 6, 1, 11, 30, tzinfo=UTC)
BLOCK_END = datetime(2026, 6, 15, 11, 30, tzinfo=UTC)
NOW = datetime(2026, 6, 5, 12, 0, tzinfo=UTC)
"""The clock of every test client: inside the example's Capacity Block window."""
TRN_IN_USE_FILTERS = [
    {"Name": "instance-type", "Values": ["trn*"]},
    {"Name": "instance-state-name", "Values": ["pending", "running"]},
]


@pytest.fixture(autouse=True)
def isolated_aws(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Fake credentials, empty AWS config files, no instance metadata: never the developer's ~/.aws."""
    for name in list(os.environ):
        if name.startswith("AWS_") or name == "BOTO_CONFIG":
            monkeypatch.delenv(name)
    empty = tmp_path_factory.mktemp("aws") / "empty"
    empty.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(empty))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(empty))
    monkeypatch.setenv("BOTO_CONFIG", str(empty))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """botocore's retry back-off delays, recorded instead of slept."""
    recorded: list[float] = []
    monkeypatch.setattr("botocore.endpoint.time.sleep", recorded.append)
    return recorded


def config_from(path: Path, edit: Callable[[dict[str, Any]], None] | None = None) -> StackConfig:
    """A configuration file, optionally edited as data first (then validated like a file)."""
    data = copy.deepcopy(_file_data(path))
    if edit is not None:
        edit(data)
    return parse_config(data, source=str(path))


def resize(group: dict[str, Any], *, min_size: int | None = None, max_size: int | None = None) -> None:
    """Set a node group's min_size/max_size in file data. The checks never read desired_size (the
    count at creation; the autoscaler owns it after): it is kept between the two (default 0) so that
    the file stays valid."""
    if min_size is not None:
        group["min_size"] = min_size
    if max_size is not None:
        group["max_size"] = max_size
    desired = group.get("desired_size", 0)
    clamped = min(max(desired, group.get("min_size", 0)), group["max_size"])
    if clamped != desired or "desired_size" in group:
        group["desired_size"] = clamped


@functools.cache
def _file_data(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


# Loaded once per process: configurations are frozen models.
@functools.cache
def example_config() -> StackConfig:
    return load_config(EXAMPLE_CONFIG)


@functools.cache
def default_config() -> StackConfig:
    return load_config(DEFAULT_CONFIG)


@functools.cache
def default_template() -> dict[str, Any]:
    return dict(json.loads(DEFAULT_TEMPLATE.read_text()))


@functools.cache
def template_of(name: str) -> Path:
    """A template file for ``python -m preflight --template`` with a configuration named ``name``:
    the default template under that cluster name. The CLI checks only that the names agree; the
    Lambda check's numbers come from the real templates (test_lambda_concurrency.py)."""
    template = copy.deepcopy(default_template())
    [cluster] = [r for r in template["Resources"].values() if r["Type"] == "AWS::EKS::Cluster"]
    cluster["Properties"]["Name"] = name
    directory = Path(tempfile.mkdtemp(prefix="preflight-template-"))
    # Made at import (EXAMPLE_TEMPLATE below), before any pytest fixture could own it.
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    path = directory / "TrainiumStack.template.json"
    path.write_text(json.dumps(template))
    return path


EXAMPLE_TEMPLATE = ("--template", str(template_of("trainium-prod")))
"""``--template`` for config/example.yaml (name: trainium-prod)."""


@functools.cache
def default_demand() -> LambdaDemand:
    """What a deploy of config/default.yaml runs at once (test_lambda_concurrency.py)."""
    return lambda_demand(default_template())


def _reservation(
    reservation_id: str,
    *,
    instance_type: str,
    count: int,
    reservation_type: str,
    zone: tuple[str, str] = ("us-east-1c", "use1-az6"),
    state: str = "active",
    start: datetime | None = None,
    end: datetime | None = None,
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "CapacityReservationId": reservation_id,
        "InstanceType": instance_type,
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": zone[0],
        "AvailabilityZoneId": zone[1],
        "Tenancy": "default",
        "TotalInstanceCount": count,
        "AvailableInstanceCount": count,
        "State": state,
        "ReservationType": reservation_type,
        "InstanceMatchCriteria": "targeted",
        "StartDate": start or datetime(2026, 1, 5, 9, 0, tzinfo=UTC),
    }
    if end is not None:
        item["EndDate"] = end
    return item


def trn_instance(
    instance_type: str = "trn1.32xlarge",
    *,
    cluster: str | None = None,
    lifecycle: str | None = None,
    state: str = "running",
    cores: int = 64,
) -> dict[str, Any]:
    """One ``DescribeInstances`` instance; ``cluster`` sets the EKS node group tag."""
    instance: dict[str, Any] = {
        "InstanceId": "i-0123456789abcdef0",
        "InstanceType": instance_type,
        "State": {"Code": 16, "Name": state},
        "CpuOptions": {"CoreCount": cores, "ThreadsPerCore": 2},
        "Tags": [{"Key": "Name", "Value": "trn"}],
    }
    if cluster is not None:
        instance["Tags"].append({"Key": "eks:cluster-name", "Value": cluster})
    if lifecycle is not None:
        instance["InstanceLifecycle"] = lifecycle
    return instance


@dataclass
class FakeAccount:
    """An account in which config/example.yaml (us-east-1) and config/default.yaml (us-west-2) pass."""

    account_id: str = "444455556666"
    zones: dict[str, dict[str, str]] = field(
        default_factory=lambda: {
            "us-east-1": {
                "us-east-1a": "use1-az1",
                "us-east-1b": "use1-az2",
                "us-east-1c": "use1-az6",
                "us-east-1d": "use1-az4",
                "us-east-1e": "use1-az3",
                "us-east-1f": "use1-az5",
            },
            "us-west-2": {
                "us-west-2a": "usw2-az2",
                "us-west-2b": "usw2-az1",
                "us-west-2c": "usw2-az3",
                "us-west-2d": "usw2-az4",
            },
        }
    )
    zone_states: dict[str, str] = field(default_factory=dict)
    """Zone name -> state, for the zones that are not 'available'."""
    offerings: dict[str, list[str]] = field(
        default_factory=lambda: {
            "trn1.32xlarge": ["use1-az6", "use1-az5", "usw2-az4", "usw2-az3"],
            "trn1n.32xlarge": ["use1-az6", "usw2-az4"],
            "trn2.48xlarge": ["usw2-az4"],
        }
    )
    reservations: dict[str, dict[str, Any] | None] = field(
        default_factory=lambda: {
            ODCR_ID: _reservation(
                ODCR_ID, instance_type="trn1n.32xlarge", count=ODCR_COUNT, reservation_type="default"
            ),
            BLOCK_ID: _reservation(
                BLOCK_ID,
                instance_type="trn1.32xlarge",
                count=BLOCK_COUNT,
                reservation_type="capacity-block",
                start=BLOCK_START,
                end=BLOCK_END,
            ),
        }
    )
    quotas: dict[str, float | None] = field(default_factory=lambda: {ON_DEMAND.code: 768.0, SPOT.code: 512.0})
    """Applied values; None: no applied value (NoSuchResourceException), see ``default_quotas``."""
    default_quotas: dict[str, float] = field(default_factory=dict)
    """AWS default values, asked for when a quota has no applied value; missing: none either."""
    instances: list[dict[str, Any]] = field(default_factory=list)
    """Pending and running Trn instances (``trn_instance``); the account has none by default."""
    versions: list[dict[str, Any]] = field(
        default_factory=lambda: [
            {
                "clusterVersion": "1.36",
                "versionStatus": "STANDARD_SUPPORT",
                "status": "standard-support",
                "endOfStandardSupportDate": datetime(2027, 8, 2, tzinfo=UTC),
                "endOfExtendedSupportDate": datetime(2028, 8, 2, tzinfo=UTC),
            },
            {"clusterVersion": "1.35", "versionStatus": "STANDARD_SUPPORT", "status": "standard-support"},
            {
                "clusterVersion": "1.34",
                "versionStatus": "STANDARD_SUPPORT",
                "status": "standard-support",
                "endOfStandardSupportDate": datetime(2026, 12, 2, tzinfo=UTC),
            },
            {"clusterVersion": "1.33", "versionStatus": "STANDARD_SUPPORT", "status": "standard-support"},
            {"clusterVersion": "1.32", "versionStatus": "EXTENDED_SUPPORT", "status": "extended-support"},
        ]
    )
    price_lists: dict[str, dict[str, list[dict[str, Any]]]] = field(
        default_factory=lambda: {region: price_list.answers(region) for region in ("us-east-1", "us-west-2")}
    )
    """Region -> ``PriceQuery.key`` -> the Price List items ``GetProducts`` answers (price_list.py)."""
    lambda_limits: tuple[int, int] = (1000, 1000)
    """``GetAccountSettings``' AccountLimit: (ConcurrentExecutions, UnreservedConcurrentExecutions)."""
    cluster_version: str | None = None
    """The version of a cluster already deployed under the configuration's name; None: none yet."""
    ami_recommended: str | None = "1.36.2-20260714"
    """SSM's recommended Neuron AMI release of the configured version; None: no such parameter."""
    ami_unpublished: set[str] = field(default_factory=set)
    """AMI releases whose image parameter SSM does not have (ParameterNotFound); every other is published."""
    errors: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Operation name -> (error code, message) that AWS answers instead, e.g. AccessDenied."""
    registries: FakeRegistries = field(default_factory=FakeRegistries)
    """The public registries the image rows ask (fake_registries.py); every image exists by default."""
    ecr_missing: set[str] = field(default_factory=set)
    """Images (as pulled) that ECR does not have: the EFA plugin's tag, a run's image in this account."""

    def copy(self) -> FakeAccount:
        return copy.deepcopy(self)

    def zone_list(self, region: str) -> list[dict[str, Any]]:
        return [
            {
                "ZoneName": name,
                "ZoneId": zone_id,
                "State": self.zone_states.get(name, "available"),
                "ZoneType": "availability-zone",
                "RegionName": region,
                "OptInStatus": "opt-in-not-required",
            }
            for name, zone_id in self.zones[region].items()
        ]

    def quota_answer(self, code: str) -> dict[str, Any] | None:
        value = self.quotas.get(code)
        if value is None:
            return None
        return {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "Value": value, "Unit": "None"}}


@dataclass
class Stubbed:
    clients: Clients
    stubbers: list[Stubber]

    def assert_all_asked(self) -> None:
        for stubber in self.stubbers:
            stubber.assert_no_pending_responses()


@functools.cache
def fake_session() -> boto3.session.Session:
    """One session for every test: it caches the service models it loads, so a test's five clients
    take milliseconds instead of about a second. Its credentials are explicit (never the
    environment's), and each test still gets new clients, stubbers and event handlers."""
    return boto3.session.Session(aws_access_key_id="AKIAIOSFODNN7EXAMPLE", aws_secret_access_key="fake")


def no_network(request: Any, **_: Any) -> None:
    raise AssertionError(f"a test request tried to leave the process: {request.method} {request.url}")


def real_clients(region: str, *, max_attempts: int = 8, now: datetime = NOW) -> Clients:
    """Production clients (same retry settings), fake credentials, a fixed clock, the network guard."""
    clients = make_clients(region, session=fake_session(), max_attempts=max_attempts, clock=lambda: now)
    for client in (
        clients.sts,
        clients.ec2,
        clients.service_quotas,
        clients.eks,
        clients.pricing,
        clients.lambda_,
        clients.ecr,
        clients.ssm,
    ):
        client.meta.events.register_last("before-send", no_network)
    # The public registries are a model (fake_registries.py): nothing leaves the process.
    return dataclasses.replace(clients, registry_http=FakeRegistries())


def stub_clients(
    account: FakeAccount,
    config: StackConfig,
    *,
    max_attempts: int = 8,
    unstubbed: frozenset[str] = frozenset(),
    now: datetime = NOW,
    images: bool = False,
) -> Stubbed:
    """Clients whose answers come from ``account``, queued in the order ``gather_facts`` asks.

    The services named in ``unstubbed`` (``ec2``, ``service-quotas``, ``pricing``) get no Stubber
    and no network guard: the test answers them at the HTTP layer with its own ``before-send`` handler.
    """
    clients = dataclasses.replace(
        real_clients(config.region, max_attempts=max_attempts, now=now), registry_http=account.registries
    )
    sts, ec2, quotas, eks, pricing, lambda_, ecr, ssm = (
        Stubber(clients.sts),
        Stubber(clients.ec2),
        Stubber(clients.service_quotas),
        Stubber(clients.eks),
        Stubber(clients.pricing),
        Stubber(clients.lambda_),
        Stubber(clients.ecr),
        Stubber(clients.ssm),
    )
    stubbers = [sts, eks, lambda_, ecr, ssm]
    for name, client, stubber in (
        ("ec2", clients.ec2, ec2),
        ("service-quotas", clients.service_quotas, quotas),
        ("pricing", clients.pricing, pricing),
    ):
        if name in unstubbed:
            client.meta.events.unregister("before-send", no_network)
        else:
            stubbers.append(stubber)

    identity = {
        "UserId": "AIDAEXAMPLE",
        "Account": account.account_id,
        "Arn": f"arn:aws:iam::{account.account_id}:user/ci",
    }
    _queue(account, sts, "get_caller_identity", identity, {})
    if "get_caller_identity" not in account.errors:  # otherwise nothing else is asked
        _queue_ec2(account, config, ec2)
        _queue_quotas(account, config, quotas)
        _queue(account, eks, "describe_cluster_versions", {"clusterVersions": account.versions}, {})
        _queue_deployed_cluster(account, config, eks)
        concurrent, unreserved = account.lambda_limits
        limits = {"ConcurrentExecutions": concurrent, "UnreservedConcurrentExecutions": unreserved}
        _queue(account, lambda_, "get_account_settings", {"AccountLimit": limits}, {})
        _queue_prices(account, config, pricing)
        _queue_ami_releases(account, config, ssm)
        if images:  # the CLI asks them after gather_facts (preflight/cli.py, _image_rows)
            _queue_ecr(account, config, ecr)
    for stubber in stubbers:
        stubber.activate()
    return Stubbed(clients, stubbers)


def _queue(
    account: FakeAccount, stubber: Stubber, operation: str, response: dict[str, Any], params: dict[str, Any]
) -> None:
    """The answer to one call: ``response``, or the error ``account.errors`` names for it."""
    if operation in account.errors:
        code, message = account.errors[operation]
        stubber.add_client_error(
            operation,
            service_error_code=code,
            service_message=message,
            http_status_code=403,
            expected_params=params,
        )
    else:
        stubber.add_response(operation, response, params)


def _queue_deployed_cluster(account: FakeAccount, config: StackConfig, eks: Stubber) -> None:
    params = {"name": config.name}
    if account.cluster_version is None and "describe_cluster" not in account.errors:
        eks.add_client_error(
            "describe_cluster",
            service_error_code="ResourceNotFoundException",
            http_status_code=404,
            expected_params=params,
        )
    else:
        answer = {
            "cluster": {"name": config.name, "version": account.cluster_version or "", "status": "ACTIVE"}
        }
        _queue(account, eks, "describe_cluster", answer, params)


def _queue_ami_releases(account: FakeAccount, config: StackConfig, ssm: Stubber) -> None:
    """SSM's public parameters, as preflight.aws._ami_releases asks: the recommended release, then
    each node group's release once (a missing one answers ParameterNotFound, as SSM does)."""
    minor = config.cluster.kubernetes_version

    def parameter(name: str, value: str | None) -> None:
        if "get_parameter" in account.errors:
            _queue(account, ssm, "get_parameter", {}, {"Name": name})
        elif value is None:
            ssm.add_client_error(
                "get_parameter",
                service_error_code="ParameterNotFound",
                http_status_code=400,
                expected_params={"Name": name},
            )
        else:
            answer = {"Parameter": {"Name": name, "Type": "String", "Value": value, "Version": 1}}
            ssm.add_response("get_parameter", answer, {"Name": name})

    parameter(neuron_ami_parameter(minor), account.ami_recommended)
    asked: set[str] = set()
    for group in config.trainium.node_groups:
        release = group.ami_release or DEFAULT_AMI_RELEASES[minor]
        if release not in asked:
            asked.add(release)
            image = None if release in account.ami_unpublished else "ami-0123456789abcdef0"
            parameter(neuron_ami_parameter(minor, release=release), image)


def _queue_ec2(account: FakeAccount, config: StackConfig, ec2: Stubber) -> None:
    region = config.region
    _queue(account, ec2, "describe_availability_zones", {"AvailabilityZones": account.zone_list(region)}, {})
    instance_types = sorted({group.instance_type for group in config.trainium.node_groups})
    region_zone_ids = set(account.zones[region].values())
    offerings = [
        {"InstanceType": instance_type, "LocationType": "availability-zone-id", "Location": zone_id}
        for instance_type in instance_types
        for zone_id in account.offerings.get(instance_type, [])
        if zone_id in region_zone_ids
    ]
    _queue(
        account,
        ec2,
        "describe_instance_type_offerings",
        {"InstanceTypeOfferings": offerings},
        {
            "LocationType": "availability-zone-id",
            "Filters": [{"Name": "instance-type", "Values": instance_types}],
        },
    )
    reservation_ids = dict.fromkeys(
        group.capacity_reservation_id
        for group in config.trainium.node_groups
        if group.capacity_reservation_id
    )
    for reservation_id in reservation_ids:
        params = {"CapacityReservationIds": [reservation_id]}
        item = account.reservations.get(reservation_id)
        if item is None and "describe_capacity_reservations" not in account.errors:
            ec2.add_client_error(
                "describe_capacity_reservations",
                service_error_code="InvalidCapacityReservationId.NotFound",
                service_message=f"The capacity reservation ID '{reservation_id}' does not exist",
                http_status_code=400,
                expected_params=params,
            )
        else:
            if item is not None:
                # AWS names the reservation's zone as this account does.
                names = {zone_id: name for name, zone_id in account.zones[region].items()}
                item = {
                    **item,
                    "AvailabilityZone": names.get(item["AvailabilityZoneId"], item["AvailabilityZone"]),
                }
            _queue(account, ec2, "describe_capacity_reservations", {"CapacityReservations": [item]}, params)
    if quota_demands(config):
        _queue(
            account,
            ec2,
            "describe_instances",
            {"Reservations": [{"ReservationId": "r-0123456789abcdef0", "Instances": account.instances}]},
            {"Filters": TRN_IN_USE_FILTERS},
        )


def _queue_quotas(account: FakeAccount, config: StackConfig, quotas: Stubber) -> None:
    for demand in quota_demands(config):
        params = {"ServiceCode": "ec2", "QuotaCode": demand.quota.code}
        response = account.quota_answer(demand.quota.code)
        if response is None and "get_service_quota" not in account.errors:
            no_such = {
                "service_error_code": "NoSuchResourceException",
                "service_message": "The request failed because the specified resource does not exist.",
                "http_status_code": 400,
                "expected_params": params,
            }
            quotas.add_client_error("get_service_quota", **no_such)
            default = account.default_quotas.get(demand.quota.code)
            if default is None:
                quotas.add_client_error("get_aws_default_service_quota", **no_such)
            else:
                answer = {"Quota": {"ServiceCode": "ec2", "QuotaCode": demand.quota.code, "Value": default}}
                quotas.add_response("get_aws_default_service_quota", answer, params)
        else:
            _queue(account, quotas, "get_service_quota", response or {}, params)


def ecr_params(image: PulledImage) -> tuple[str, dict[str, Any]]:
    """The ECR call preflight makes for ``image`` and its parameters (preflight/registries.py)."""
    host, path, tag, digest = split_image(image.upstream)
    params: dict[str, Any] = {
        "registryId": host.split(".", 1)[0],
        "repositoryName": path,
        "imageIds": [{"imageDigest": digest} if digest else {"imageTag": tag}],
    }
    if image.source is Source.OTHER_ECR:
        return "batch_get_image", {**params, "acceptedMediaTypes": list(MANIFEST_MEDIA_TYPES)}
    return "describe_images", params


def _queue_ecr(account: FakeAccount, config: StackConfig, ecr: Stubber) -> None:
    """ECR's answers for the images pulled from an ECR registry, in the order preflight asks."""
    for image in pulled_images(config):
        if image.source is Source.UPSTREAM:
            continue
        operation, params = ecr_params(image)
        if operation in account.errors:
            _queue(account, ecr, operation, {}, params)
            continue
        image_id = params["imageIds"][0]
        missing = image.reference in account.ecr_missing
        if operation == "batch_get_image":
            answer: dict[str, Any] = (
                {
                    "images": [],
                    "failures": [
                        {
                            "imageId": image_id,
                            "failureCode": "ImageNotFound",
                            "failureReason": "Requested image not found",
                        }
                    ],
                }
                if missing
                else {
                    "images": [
                        {
                            "registryId": params["registryId"],
                            "repositoryName": params["repositoryName"],
                            "imageId": {**image_id, "imageDigest": digest_of(image.reference)},
                            "imageManifest": "{}",
                        }
                    ],
                    "failures": [],
                }
            )
            ecr.add_response(operation, answer, params)
        elif missing:
            ecr.add_client_error(
                operation,
                service_error_code="ImageNotFoundException",
                service_message=f"The image with imageId {image_id} does not exist within the repository "
                f"with name '{params['repositoryName']}' in the registry with id '{params['registryId']}'",
                http_status_code=400,
                expected_params=params,
            )
        else:
            details = {
                "registryId": params["registryId"],
                "repositoryName": params["repositoryName"],
                "imageDigest": digest_of(image.reference),
            }
            ecr.add_response(operation, {"imageDetails": [details]}, params)


# Answers after which preflight asks the Price List nothing more (preflight.aws._PRICE_LIST_REFUSALS).
_PRICE_LIST_REFUSALS = ("AccessDenied", "UnauthorizedOperation")


def price_params(query: Any) -> dict[str, Any]:
    """What preflight sends for one ``PriceQuery`` (the paginator's PageSize becomes MaxResults)."""
    return {
        "ServiceCode": query.service_code,
        "Filters": [{"Type": kind, "Field": name, "Value": value} for kind, name, value in query.filters],
        "FormatVersion": "aws_v1",
        "MaxResults": 100,
    }


def _queue_prices(account: FakeAccount, config: StackConfig, pricing: Stubber) -> None:
    answers = account.price_lists.get(config.region, {})
    for query in price_queries(config):
        params = price_params(query)
        if "get_products" in account.errors:
            code, message = account.errors["get_products"]
            pricing.add_client_error(
                "get_products",
                service_error_code=code,
                service_message=message,
                http_status_code=400,
                expected_params=params,
            )
            if code.startswith(_PRICE_LIST_REFUSALS):
                return  # the first refusal answers for every price
            continue
        items = price_list.encoded(answers.get(query.key, []))
        pricing.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": items}, params)


@pytest.fixture
def account() -> FakeAccount:
    return FakeAccount()


@pytest.fixture
def stubbed_factory() -> Iterator[Callable[..., Callable[[str, int], Clients]]]:
    """A ``clients_factory`` for ``preflight.cli.main`` that answers from a fake account."""
    made: list[Stubbed] = []

    def factory_for(
        account: FakeAccount,
        config: StackConfig,
        unstubbed: frozenset[str] = frozenset(),
        now: datetime = NOW,
    ) -> Callable[[str, int], Clients]:
        def factory(region: str, max_attempts: int) -> Clients:
            assert region == config.region
            stubbed = stub_clients(
                account, config, max_attempts=max_attempts, unstubbed=unstubbed, now=now, images=True
            )
            made.append(stubbed)
            return stubbed.clients

        return factory

    yield factory_for
    for stubbed in made:
        stubbed.assert_all_asked()


# --- throttling through the real retry handler -------------------------------------------------


class _Body:
    def __init__(self, content: bytes) -> None:
        self._content = content

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._content


def http_response(request: Any, status: int, body: bytes, content_type: str) -> AWSResponse:
    headers = {"Content-Type": content_type, "x-amzn-RequestId": "11111111-2222-3333-4444-555555555555"}
    return AWSResponse(request.url, status, headers, _Body(body))


def throttling_service_quotas(account: FakeAccount, *, throttles: int) -> Callable[..., AWSResponse]:
    """A ``before-send`` handler: each GetServiceQuota is throttled ``throttles`` times, then answered.

    It answers at the HTTP layer, below botocore's retry handler, exactly where a real response
    would arrive; ``handler.calls`` counts the HTTP requests botocore sent.
    """
    attempts: dict[str, int] = {}

    def handler(request: Any, **_: Any) -> AWSResponse:
        handler.calls += 1  # type: ignore[attr-defined]
        code = json.loads(request.body)["QuotaCode"]
        attempts[code] = attempts.get(code, 0) + 1
        if attempts[code] <= throttles:
            body = {"__type": "TooManyRequestsException", "message": "Rate exceeded"}
            return http_response(request, 400, json.dumps(body).encode(), "application/x-amz-json-1.1")
        answer = account.quota_answer(code)
        assert answer is not None
        return http_response(request, 200, json.dumps(answer).encode(), "application/x-amz-json-1.1")

    handler.calls = 0  # type: ignore[attr-defined]
    return handler
