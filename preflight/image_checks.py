"""The image rows of the report: one per image the nodes pull, found, missing or not known.

Pure: the inventory (preflight/image_inventory.py) and the registries' answers
(preflight/registries.py) in, ``CheckResult`` rows out. A missing image is one FAIL row naming the
image, where it was looked for and the configuration key or pin it comes from; an answer that says
nothing about the image is a WARN (the deploy may still work), never a FAIL.

What no registry API can tell: whether the account's pull-through cache rules exist and may reach
the upstream (the stack creates them; ``ecr:ValidatePullThroughCacheRule`` checks only a rule's
credential), and whether the nodes' network reaches the registry. The rows say so for cached images.
"""

from __future__ import annotations

from collections.abc import Mapping

from cluster_facts.images import split_image
from preflight.checks import CheckResult
from preflight.image_inventory import PulledImage, Source
from preflight.registries import ImageAnswer

__all__ = ["ECR_PERMISSIONS", "check_images"]

ECR_PERMISSIONS = ("ecr:BatchGetImage", "ecr:DescribeImages")
"""What the image rows need of the credentials: BatchGetImage in EKS's registry, DescribeImages in
this account's (docs/preflight.md, IAM permissions)."""


def check_images(
    images: tuple[PulledImage, ...], answers: Mapping[str, ImageAnswer | None]
) -> list[CheckResult]:
    """One row per image, in the inventory's order; an image without an answer was not asked."""
    return [_row(image, answers.get(image.reference)) for image in images]


def _name(image: PulledImage) -> str:
    return f"image {split_image(image.upstream)[1].rsplit('/', 1)[-1]}"


def _origins(image: PulledImage) -> str:
    return "; ".join(f"{origin.used_by}: {origin.what}" for origin in image.origins)


def _where(image: PulledImage) -> str:
    if image.via == "cache":
        return f"pulled through the account's cache, which fetches it from {image.registry}"
    if image.via == "copy":
        return f"copied at deploy into the account's ECR from {image.registry}"
    if image.source is Source.OTHER_ECR:
        return f"pulled from {image.registry}"
    if image.source is Source.OWN_ECR:
        return "pulled from this account's ECR"
    return f"pulled from {image.registry} directly"


def _fix(image: PulledImage) -> str:
    keys = [origin.what for origin in image.origins if origin.configured]
    pins = [origin.what for origin in image.origins if not origin.configured]
    ways = []
    if keys:
        ways.append(f"set {', '.join(keys)} to an image the registry has")
    if pins:
        ways.append(f"change the pin {', '.join(dict.fromkeys(pins))} to an image {image.registry} has")
    if image.source is Source.OWN_ECR:
        ways.append("push the image to the repository first")
    return "; ".join(ways)


def _row(image: PulledImage, answer: ImageAnswer | None) -> CheckResult:
    check = _name(image)
    what = f"{image.upstream}, {_where(image)} ({_origins(image)})"
    if answer is None:
        return CheckResult(check, "WARN", f"{what}: not asked", "run preflight with AWS credentials")
    if answer.status == "found":
        return CheckResult(check, "PASS", f"{image.upstream} found ({answer.detail}), asked {answer.asked}")
    if answer.status == "missing":
        return CheckResult(
            check, "FAIL", f"{what}: not found, asked {answer.asked}: {answer.detail}", _fix(image)
        )
    permission = next((action for action in ECR_PERMISSIONS if action in answer.detail), None)
    action = (
        f"allow {permission} (read-only) for these credentials"
        if permission is not None and "AccessDenied" in answer.detail
        else f"run preflight again; the nodes pull it from {image.registry} the same way"
    )
    return CheckResult(check, "WARN", f"{what}: not known, asked {answer.asked}: {answer.detail}", action)
