"""Ask each image's registry, read-only, whether the pinned tag (or digest) exists: one answer per image.

Which API, per source (preflight/image_inventory.py):

- **Upstream registries** (public.ecr.aws, registry.k8s.io, quay.io, Docker Hub, ghcr.io): their
  OCI distribution API, anonymously, the way a node or the account's pull-through cache pulls:
  ``HEAD /v2/<name>/manifests/<tag or digest>`` (OCI distribution spec, "Checking if content exists
  in the registry": 200 when it exists, 404 when it does not), after the anonymous bearer-token
  challenge the registry answers with (``WWW-Authenticate: Bearer realm=...,service=...,scope=...``;
  the token is fetched from the realm with ``scope=repository:<name>:pull``). Redirects are followed
  with HEAD (registry.k8s.io redirects to its regional backends), at most ``MAX_REDIRECTS``. A HEAD
  does not count as a pull on Docker Hub ("Using GET emulates a real pull and counts towards the
  limit. Using HEAD won't", Docker docs, "Docker Hub pull usage and limits").

  Not ``ecr-public describe-images``: ECR Public's API names a repository by ``registryId``, the
  12-digit account of the registry ("If you do not specify a registry, the default public registry
  is assumed": the caller's own), while an image names the registry's alias
  (``public.ecr.aws/neuron/...``); no ECR Public call maps an alias to its account
  (``DescribeRegistries`` lists only the caller's own), and the API answers only about the caller's
  registry (aws-controllers-k8s/test-infra#1105: "ecr-public describe-image-tags can only see
  repositories in the caller's own registry, so the lookup failed with RepositoryNotFoundException").
  The OCI API is the one ECR Public serves pulls through, to anyone (ECR Public user guide: "The image
  pull permissions can't be changed because Amazon ECR Public repositories are public accessible").

- **This account's ECR** (a run's image in the stack's repository): ``ecr:DescribeImages`` with the
  image's tag or digest (ECR API reference: ``ImageNotFoundException``, ``RepositoryNotFoundException``).

- **Another account's ECR** (EKS's registry, for the EFA device plugin): ``ecr:BatchGetImage``, the
  call a pull makes ("When an image is pulled, the BatchGetImage API is called once to retrieve the
  image manifest", ECR API reference, BatchGetImage), in that account: a missing tag is a
  ``failures`` entry with ``failureCode`` ``ImageNotFound`` (ImageFailure). ``ecr:DescribeImages`` is
  not allowed there: EKS's repository policy lets every account pull, not describe ("is not authorized
  to perform: ecr:DescribeImages on resource: arn:aws:ecr:us-east-1:602401143452:repository/eks/...
  because no resource-based policy allows the ecr:DescribeImages action", jetstack/version-checker#167).
  Without ``ecr:BatchGetImage`` in the credentials' own policy the answer is ``AccessDeniedException``
  ("... because no identity-based policy allows the ecr:BatchGetImage action"): the row says which
  permission to add.

An answer that says nothing about the image (throttled, denied, unreachable) is ``unknown``, never
``missing``: only a registry's "not found" fails a row.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import botocore.exceptions  # type: ignore[import-untyped]

from cluster_facts.images import split_image
from preflight.image_inventory import PulledImage, Source

__all__ = [
    "MANIFEST_MEDIA_TYPES",
    "MAX_REDIRECTS",
    "HttpAnswer",
    "HttpTransport",
    "ImageAnswer",
    "UrllibTransport",
    "ask_registries",
    "head_manifest",
    "registry_endpoint",
]

MAX_REDIRECTS = 5
"""Redirects followed per request; registry.k8s.io needs one."""
TIMEOUT_SECONDS = 15
MANIFEST_MEDIA_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
"""What a pull accepts: a multi-architecture index or a single manifest, OCI or Docker."""

# Docker Hub's API is not served on docker.io itself.
_ENDPOINTS = {"docker.io": "https://registry-1.docker.io"}
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
_ECR_MISSING = frozenset({"ImageNotFoundException", "RepositoryNotFoundException"})


def registry_endpoint(host: str) -> str:
    """The base URL of a registry's API."""
    return _ENDPOINTS.get(host, f"https://{host}")


@dataclass(frozen=True)
class ImageAnswer:
    status: Literal["found", "missing", "unknown"]
    detail: str
    """What the registry said: ``sha256:... (HEAD manifests/v1.2)``, ``404 MANIFEST_UNKNOWN``, ..."""
    asked: str
    """Which API was asked, as the report names it."""


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    """Lower-case names."""
    body: bytes = b""


class HttpTransport(Protocol):
    def __call__(self, method: str, url: str, headers: Mapping[str, str]) -> HttpAnswer:
        """One request, no redirect followed; OSError when the network fails."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_: Any, **__: Any) -> None:
        return None  # urllib then raises HTTPError with the 3xx, which is the answer


class UrllibTransport:
    """HTTPS through urllib (proxies from the environment, as urllib reads them), redirects not followed."""

    def __init__(self, timeout: float = TIMEOUT_SECONDS) -> None:
        self._opener = urllib.request.build_opener(_NoRedirect)
        self._timeout = timeout

    def __call__(self, method: str, url: str, headers: Mapping[str, str]) -> HttpAnswer:
        request = urllib.request.Request(url, method=method, headers=dict(headers))
        try:
            with self._opener.open(request, timeout=self._timeout) as response:
                return HttpAnswer(
                    response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
                )
        except urllib.error.HTTPError as error:
            body = error.read() if error.fp is not None else b""
            return HttpAnswer(error.code, {k.lower(): v for k, v in error.headers.items()}, body)


class EcrClient(Protocol):
    def describe_images(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def batch_get_image(self, **kwargs: Any) -> Mapping[str, Any]: ...


def ask_registries(
    images: tuple[PulledImage, ...], *, ecr: EcrClient, http: HttpTransport
) -> dict[str, ImageAnswer]:
    """Each image's answer, by ``PulledImage.reference``."""
    answers: dict[str, ImageAnswer] = {}
    for image in images:
        if image.source is Source.UPSTREAM:
            answers[image.reference] = _ask_upstream(image, http)
        elif image.source is Source.OWN_ECR:
            answers[image.reference] = _describe_own(image, ecr)
        else:
            answers[image.reference] = _batch_get_other(image, ecr)
    return answers


def _manifest_reference(image: str) -> tuple[str, str, str]:
    """(host, repository path as the registry names it, tag or digest); a digest wins over a tag."""
    host, path, tag, digest = split_image(image)
    if host == "docker.io" and "/" not in path:
        path = f"library/{path}"
    reference = digest or tag
    assert reference is not None  # a pinned image has one
    return host, path, reference


def _ask_upstream(image: PulledImage, http: HttpTransport) -> ImageAnswer:
    host, path, reference = _manifest_reference(image.upstream)
    asked = f"{host}'s API"
    url = f"{registry_endpoint(host)}/v2/{path}/manifests/{reference}"
    try:
        answer = head_manifest(url, path, http)
    except (OSError, ValueError) as error:
        return ImageAnswer("unknown", f"could not ask {host}: {error}", asked)
    if answer.status == 200:
        return ImageAnswer("found", _short(answer.headers.get("docker-content-digest", "")), asked)
    code = _error_code(answer.body)
    said = f"{answer.status} {code}".strip()
    if answer.status == 404:
        return ImageAnswer("missing", f"{said}: no manifest {reference} in {path}", asked)
    if answer.status in (401, 403):
        # A repository that does not exist is refused, not "not found", by Docker Hub and quay.io.
        return ImageAnswer(
            "missing",
            f"{said}: {host} refuses an anonymous pull of {path} (no such public repository)",
            asked,
        )
    return ImageAnswer("unknown", f"{said} from {host}", asked)


def head_manifest(url: str, path: str, http: HttpTransport) -> HttpAnswer:
    """The registry's last answer to ``HEAD url``, after its anonymous token challenge and redirects.

    A token is sent only to the host that challenged for it; a redirect to another host is asked
    without it (and challenges anew). ``path`` names the repository for the token's scope when the
    URL does not.
    """
    headers = {"Accept": ", ".join(MANIFEST_MEDIA_TYPES), "User-Agent": "trainium-preflight"}
    token_host: str | None = None
    for _ in range(MAX_REDIRECTS + 1):
        host = urllib.parse.urlsplit(url).netloc
        sent = dict(headers)
        if token_host is not None and token_host != host:
            sent.pop("Authorization", None)  # a token goes only to the host that asked for it
        answer = http("HEAD", url, sent)
        if answer.status == 401 and token_host != host:
            # The name as this host knows it: a redirect may move the repository under another path.
            name = urllib.parse.urlsplit(url).path.removeprefix("/v2/").partition("/manifests/")[0] or path
            token = _anonymous_token(answer.headers.get("www-authenticate", ""), name, http)
            if token is None:
                return answer
            headers["Authorization"] = f"Bearer {token}"
            token_host = host
            answer = http("HEAD", url, headers)
        if answer.status in (301, 302, 303, 307, 308) and "location" in answer.headers:
            url = urllib.parse.urljoin(url, answer.headers["location"])
            continue
        return answer
    raise ValueError(f"more than {MAX_REDIRECTS} redirects")


def _anonymous_token(challenge: str, path: str, http: HttpTransport) -> str | None:
    scheme, _, parameters = challenge.partition(" ")
    if scheme.lower() != "bearer":
        return None
    values = dict(_CHALLENGE.findall(parameters))
    realm = values.pop("realm", None)
    if not realm:
        return None
    query = {
        "scope": f"repository:{path}:pull",
        **({"service": values["service"]} if "service" in values else {}),
    }
    answer = http("GET", f"{realm}?{urllib.parse.urlencode(query)}", {"User-Agent": "trainium-preflight"})
    if answer.status != 200:
        return None
    try:
        body = json.loads(answer.body)
    except ValueError:
        return None
    token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
    return str(token) if token else None


def _short(digest: str) -> str:
    """``sha256:`` and the first 12 hex digits, as ``docker images`` shows an id."""
    return digest[: len("sha256:") + 12] if digest.startswith("sha256:") else "no digest given"


def _error_code(body: bytes) -> str:
    """The first error code of an OCI error body (``{"errors": [{"code": "MANIFEST_UNKNOWN"}]}``)."""
    try:
        errors = json.loads(body).get("errors") or []
        return str(errors[0].get("code", "")) if errors else ""
    except (ValueError, AttributeError, TypeError):
        return ""


def _ecr_target(image: PulledImage) -> tuple[str, str, dict[str, str]]:
    host, path, tag, digest = split_image(image.upstream)
    registry_id = host.split(".", 1)[0]
    return registry_id, path, ({"imageDigest": digest} if digest else {"imageTag": str(tag)})


def _client_error(error: botocore.exceptions.ClientError) -> tuple[str, str]:
    details = error.response.get("Error", {})
    return str(details.get("Code", "Unknown")), " ".join(str(details.get("Message", "")).split())


def _describe_own(image: PulledImage, ecr: EcrClient) -> ImageAnswer:
    registry_id, path, image_id = _ecr_target(image)
    asked = f"ecr:DescribeImages in {registry_id}"
    try:
        answer = ecr.describe_images(registryId=registry_id, repositoryName=path, imageIds=[image_id])
    except botocore.exceptions.ClientError as error:
        code, message = _client_error(error)
        status: Literal["missing", "unknown"] = "missing" if code in _ECR_MISSING else "unknown"
        return ImageAnswer(status, f"{code}: {message}" if message else code, asked)
    except botocore.exceptions.BotoCoreError as error:
        return ImageAnswer("unknown", str(error), asked)
    details = answer.get("imageDetails", [])
    if not details:
        return ImageAnswer("missing", f"no image {image_id} in {path}", asked)
    return ImageAnswer("found", _short(str(details[0].get("imageDigest", ""))), asked)


def _batch_get_other(image: PulledImage, ecr: EcrClient) -> ImageAnswer:
    registry_id, path, image_id = _ecr_target(image)
    asked = f"ecr:BatchGetImage in {registry_id}"
    try:
        answer = ecr.batch_get_image(
            registryId=registry_id,
            repositoryName=path,
            imageIds=[image_id],
            acceptedMediaTypes=list(MANIFEST_MEDIA_TYPES),
        )
    except botocore.exceptions.ClientError as error:
        code, message = _client_error(error)
        status: Literal["missing", "unknown"] = (
            "missing" if code == "RepositoryNotFoundException" else "unknown"
        )
        return ImageAnswer(status, f"{code}: {message}" if message else code, asked)
    except botocore.exceptions.BotoCoreError as error:
        return ImageAnswer("unknown", str(error), asked)
    for failure in answer.get("failures", []):
        code = str(failure.get("failureCode", ""))
        reason = str(failure.get("failureReason", ""))
        status = "missing" if code in ("ImageNotFound", "ImageTagDoesNotMatchDigest") else "unknown"
        return ImageAnswer(status, f"{code}: {reason}" if reason else code, asked)
    images = answer.get("images", [])
    if not images:
        return ImageAnswer("missing", f"no image {image_id} in {path}", asked)
    return ImageAnswer("found", _short(str(images[0].get("imageId", {}).get("imageDigest", ""))), asked)
