"""Throttling is retried by botocore's standard retry mode, with the production client settings.

Why not botocore's Stubber here: the Stubber answers in the ``before-call`` event, before the
request reaches the endpoint, so its error responses never pass through the retry handler (the
first test proves it). These tests answer one level lower instead, in ``before-send``, which is
where a real HTTP response arrives: a real throttling status and body, parsed by botocore, judged
by its retry handler, backed off (the sleeps are recorded, not slept), and sent again.
"""

from __future__ import annotations

import io
from typing import Any
from urllib.parse import parse_qs

import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from preflight.aws import gather_facts
from preflight.cli import EXIT_AWS_UNAVAILABLE, EXIT_OK, main
from tests.preflight.conftest import (
    EXAMPLE_CONFIG,
    FakeAccount,
    default_config,
    example_config,
    http_response,
    real_clients,
    stub_clients,
    throttling_service_quotas,
)


def test_stubber_errors_bypass_the_retry_handler(sleeps: list[float]) -> None:
    """The reason for the before-send tests below: a stubbed throttle is raised at once."""
    clients = real_clients("us-east-1", max_attempts=5)
    stubber = Stubber(clients.service_quotas)
    stubber.add_client_error("get_service_quota", "TooManyRequestsException", http_status_code=400)
    stubber.add_response("get_service_quota", {"Quota": {"Value": 768.0}})
    with stubber, pytest.raises(ClientError, match="TooManyRequestsException"):
        clients.service_quotas.get_service_quota(ServiceCode="ec2", QuotaCode="L-2C3B7624")
    assert sleeps == []


def run_with_throttled_quotas(
    account: FakeAccount, *, throttles: int, argv: list[str]
) -> tuple[int, str, str, Any]:
    config = example_config()
    handler = throttling_service_quotas(account, throttles=throttles)

    def factory(region: str, max_attempts: int) -> Any:
        stubbed = stub_clients(
            account, config, max_attempts=max_attempts, unstubbed=frozenset({"service-quotas"})
        )
        stubbed.clients.service_quotas.meta.events.register(
            "before-send.service-quotas.GetServiceQuota", handler
        )
        return stubbed.clients

    out, err = io.StringIO(), io.StringIO()
    code = main(argv, clients_factory=factory, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue(), handler


def test_throttled_service_quotas_call_is_retried_and_then_succeeds(sleeps: list[float]) -> None:
    account = FakeAccount()
    code, out, err, handler = run_with_throttled_quotas(
        account, throttles=2, argv=["--config", str(EXAMPLE_CONFIG), "--width", "400"]
    )

    assert (code, err) == (EXIT_OK, "")
    assert handler.calls == 3  # throttled, throttled, answered
    assert len(sleeps) == 2 and all(0 <= delay <= 20 for delay in sleeps)
    assert "L-2C3B7624 Running On-Demand Trn instances = 768" in out


def test_throttled_on_every_attempt_exits_2_after_max_attempts(sleeps: list[float]) -> None:
    account = FakeAccount()
    code, out, err, handler = run_with_throttled_quotas(
        account, throttles=100, argv=["--config", str(EXAMPLE_CONFIG), "--max-attempts", "4"]
    )

    assert (code, out) == (EXIT_AWS_UNAVAILABLE, "")
    assert handler.calls == 4 and len(sleeps) == 3
    assert err == (
        "preflight: AWS throttled servicequotas:GetServiceQuota on every attempt (TooManyRequestsException); "
        "wait a minute and retry, or pass --max-attempts\n"
    )


_EC2_XMLNS = "http://ec2.amazonaws.com/doc/2016-11-15/"


def ec2_throttled_once(account: FakeAccount, region: str) -> Any:
    """EC2 answered over "HTTP": every operation gets RequestLimitExceeded (503) once, then its answer."""
    seen: dict[str, int] = {}

    def handler(request: Any, **_: Any) -> AWSResponse:
        body = request.body.decode() if isinstance(request.body, bytes) else request.body
        form = parse_qs(body)
        action = form["Action"][0]
        seen[action] = seen.get(action, 0) + 1
        handler.calls += 1  # type: ignore[attr-defined]
        if seen[action] == 1:
            error = (
                "<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded."
                "</Message></Error></Errors><RequestID>r-1</RequestID></Response>"
            )
            return http_response(request, 503, error.encode(), "text/xml")
        if action == "DescribeAvailabilityZones":
            items = "".join(
                f"<item><zoneName>{name}</zoneName><zoneId>{zone_id}</zoneId><zoneState>available</zoneState>"
                f"<zoneType>availability-zone</zoneType></item>"
                for name, zone_id in account.zones[region].items()
            )
            inner = f"<availabilityZoneInfo>{items}</availabilityZoneInfo>"
        elif action == "DescribeInstanceTypeOfferings":
            assert form["LocationType"] == ["availability-zone-id"]
            instance_type = form["Filter.1.Value.1"][0]
            items = "".join(
                f"<item><instanceType>{instance_type}</instanceType><locationType>availability-zone-id</locationType>"
                f"<location>{zone_id}</location></item>"
                for zone_id in account.offerings[instance_type]
                if zone_id in account.zones[region].values()
            )
            inner = f"<instanceTypeOfferingSet>{items}</instanceTypeOfferingSet>"
        elif action == "DescribeInstances":
            assert form["Filter.1.Value.1"] == ["trn*"]
            inner = "<reservationSet/>"
        else:
            raise AssertionError(f"unexpected EC2 action {action}")
        xml = f'<{action}Response xmlns="{_EC2_XMLNS}"><requestId>r-2</requestId>{inner}</{action}Response>'
        return http_response(request, 200, xml.encode(), "text/xml")

    handler.calls = 0  # type: ignore[attr-defined]
    return handler


def test_ec2_request_limit_exceeded_is_retried_and_then_succeeds(sleeps: list[float]) -> None:
    account = FakeAccount()
    config = default_config()  # no reservations: EC2 is asked for zones, offerings and Trn instances
    stubbed = stub_clients(account, config, unstubbed=frozenset({"ec2"}))
    handler = ec2_throttled_once(account, config.region)
    stubbed.clients.ec2.meta.events.register("before-send.ec2", handler)

    facts = gather_facts(config, stubbed.clients)

    stubbed.assert_all_asked()
    assert handler.calls == 6 and len(sleeps) == 3
    assert isinstance(facts.zones, tuple)
    assert ("us-west-2d", "usw2-az4") in {(zone.name, zone.zone_id) for zone in facts.zones}
    assert facts.offerings == {"trn1.32xlarge": ("usw2-az3", "usw2-az4")}
    assert facts.in_use == {}
