"""The value types and helpers every configuration section shares (environment and pipeline files).

A type here validates one value and, when it is wrong, says in one sentence what is allowed: the
loader turns that into ``file: key.path: message``.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError

from cluster_facts.images import pinned_image_problem

__all__ = [
    "AccountId",
    "AzId",
    "AzName",
    "Cidr",
    "Ec2InstanceType",
    "Name",
    "OptionalSection",
    "PinnedImage",
    "Region",
    "RemovalPolicy",
    "ReservationId",
    "RoleArn",
]


def _problem(message: str) -> PydanticCustomError:
    # A custom error keeps the message as written (no "Value error, " prefix).
    return PydanticCustomError("config", message)


def _matching(pattern: str, what: str) -> AfterValidator:
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise _problem(f"{value!r} is not {what}")
        return value

    return AfterValidator(check)


def _quoted_string(example: str) -> BeforeValidator:
    """YAML turns unquoted 111122223333 or 1.30 into numbers; say so instead of a type error."""

    def check(value: object) -> object:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise _problem(f'YAML read the number {value}; write it in quotes, for example "{example}"')
        return value

    return BeforeValidator(check)


def _ipv4_network(value: str) -> str:
    try:
        ipaddress.IPv4Network(value, strict=True)
    except ValueError:
        raise _problem(f"{value!r} is not an IPv4 CIDR block such as 10.0.0.0/16") from None
    return value


Name = Annotated[
    str,
    _matching(
        r"[a-z][a-z0-9-]{0,31}", "a name of 1-32 lowercase letters, digits and '-', starting with a letter"
    ),
]
AccountId = Annotated[str, _quoted_string("111122223333"), _matching(r"\d{12}", "a 12-digit AWS account id")]
Region = Annotated[
    str, _matching(r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d", "an AWS region name such as us-west-2")
]
AzName = Annotated[
    str, _matching(r"[a-z]{2}(-gov)?-[a-z]+-\d[a-z]", "an availability-zone name such as us-west-2a")
]
AzId = Annotated[str, _matching(r"[a-z]{2,5}\d-az\d+", "an availability-zone id such as usw2-az4")]
Cidr = Annotated[str, AfterValidator(_ipv4_network)]
RoleArn = Annotated[str, _matching(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+", "an IAM role ARN")]
Ec2InstanceType = Annotated[
    str, _matching(r"[a-z][a-z0-9-]*\.[a-z0-9]+", "an EC2 instance type such as m6i.2xlarge")
]
ReservationId = Annotated[
    str, _matching(r"cr-[0-9a-f]{8,17}", "a capacity reservation id such as cr-0123456789abcdef0")
]
RemovalPolicy = Literal["retain", "destroy"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _pinned_image(value: str) -> str:
    problem = pinned_image_problem(value)
    if problem is not None:
        raise _problem(problem)
    return value


PinnedImage = Annotated[str, AfterValidator(_pinned_image)]


def _null_is_empty(value: Any) -> Any:
    """A section whose keys are all commented out reads as null: it means the section's defaults."""
    return {} if value is None else value


# An optional section: omitted, null or {} give its model's defaults (tests/config/test_config.py checks each).
OptionalSection = BeforeValidator(_null_is_empty)
