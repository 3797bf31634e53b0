"""A model of the public registries' OCI distribution API, for the image rows of preflight.

A model, not the registries: the tests cannot reach public.ecr.aws, Docker Hub, quay.io or
registry.k8s.io. It answers as their API is specified and documented, and the tests pin that reading:

- a manifest is asked with ``HEAD /v2/<name>/manifests/<reference>``: 200 with
  ``Docker-Content-Digest`` when it exists, 404 with ``{"errors": [{"code": "MANIFEST_UNKNOWN"}]}``
  when it does not (OCI distribution spec, "Pulling manifests" and "Error codes");
- an anonymous request first gets 401 with ``WWW-Authenticate: Bearer realm="...",service="..."``,
  and the realm hands out a pull token for ``scope=repository:<name>:pull`` (Docker's token
  authentication spec, which all four registries follow; the realms are theirs);
- Docker Hub and quay.io answer 401, not 404, for a repository that does not exist, even with a token;
- registry.k8s.io redirects every request to a regional backend (307) that asks for its own token;
- a throttled registry answers 429 ``TOOMANYREQUESTS``.

``preflight.registries.UrllibTransport`` itself is tested against a local HTTP server
(tests/preflight/test_registries.py); this model stands in for the internet behind it.
"""

from __future__ import annotations

import hashlib
import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

from preflight.registries import HttpAnswer

__all__ = ["FakeRegistries", "digest_of"]

_K8S_BACKEND = "us-west2-docker.pkg.dev"
# Host of the API -> (realm, service) of its token challenge.
_REALMS = {
    "public.ecr.aws": ("https://public.ecr.aws/token/", "public.ecr.aws"),
    "registry-1.docker.io": ("https://auth.docker.io/token", "registry.docker.io"),
    "quay.io": ("https://quay.io/v2/auth", "quay.io"),
    "ghcr.io": ("https://ghcr.io/token", "ghcr.io"),
    _K8S_BACKEND: (f"https://{_K8S_BACKEND}/v2/token", _K8S_BACKEND),
}
# Registries that refuse (401) a repository they do not have instead of answering 404.
_REFUSE_UNKNOWN_REPOSITORY = frozenset({"registry-1.docker.io", "quay.io"})


def digest_of(image: str) -> str:
    return "sha256:" + hashlib.sha256(image.encode()).hexdigest()


def _error(status: int, code: str) -> HttpAnswer:
    body = json.dumps({"errors": [{"code": code, "message": code.lower()}]}).encode()
    return HttpAnswer(status, {"content-type": "application/json"}, body)


@dataclass
class FakeRegistries:
    missing: set[str] = field(default_factory=set)
    """``host/name:reference`` of manifests that do not exist (the name as the API names it)."""
    missing_repositories: set[str] = field(default_factory=set)
    """``host/name`` of repositories that do not exist."""
    throttled: set[str] = field(default_factory=set)
    """API hosts that answer 429 to every manifest request."""
    unreachable: set[str] = field(default_factory=set)
    """API hosts whose connections fail."""
    requests: list[tuple[str, str]] = field(default_factory=list)
    leaked_tokens: list[str] = field(default_factory=list)
    """URLs that were sent another host's token (must stay empty)."""

    def __call__(self, method: str, url: str, headers: Mapping[str, str]) -> HttpAnswer:
        self.requests.append((method, url))
        parts = urllib.parse.urlsplit(url)
        host = parts.netloc
        if host in self.unreachable:
            raise OSError(f"[Errno 111] Connection refused: {host}")
        for api_host, (realm, service) in _REALMS.items():
            if url.startswith(realm):
                return self._token(api_host, service, parts.query)
        if host == "registry.k8s.io":
            return HttpAnswer(
                307, {"location": f"https://{_K8S_BACKEND}/v2/k8s-artifacts-prod/images/{parts.path[4:]}"}
            )
        if method != "HEAD" or "/manifests/" not in parts.path:
            return _error(405, "UNSUPPORTED")
        return self._manifest(host, parts.path, url, headers)

    def _manifest(self, host: str, path: str, url: str, headers: Mapping[str, str]) -> HttpAnswer:
        name, _, reference = path.removeprefix("/v2/").partition("/manifests/")
        token = headers.get("Authorization", "")
        expected = f"Bearer token-for-{host}-{name}"
        if token and token != expected:
            self.leaked_tokens.append(url)
        if token != expected:
            realm, service = _REALMS[host]
            challenge = f'Bearer realm="{realm}",service="{service}",scope="repository:{name}:pull"'
            return HttpAnswer(401, {"www-authenticate": challenge}, b'{"errors":[{"code":"UNAUTHORIZED"}]}')
        if host in self.throttled:
            return _error(429, "TOOMANYREQUESTS")
        canonical = self._canonical(host, name)
        if canonical in self.missing_repositories:
            return (
                _error(401, "UNAUTHORIZED")
                if host in _REFUSE_UNKNOWN_REPOSITORY
                else _error(404, "NAME_UNKNOWN")
            )
        image = (
            f"{canonical}:{reference}" if not reference.startswith("sha256:") else f"{canonical}@{reference}"
        )
        if image in self.missing:
            return _error(404, "MANIFEST_UNKNOWN")
        return HttpAnswer(200, {"docker-content-digest": digest_of(image), "content-length": "1024"})

    def _token(self, api_host: str, service: str, query: str) -> HttpAnswer:
        values = dict(urllib.parse.parse_qsl(query))
        scope = values.get("scope", "")
        if (
            values.get("service") != service
            or not scope.startswith("repository:")
            or not scope.endswith(":pull")
        ):
            return _error(400, "INVALID_REQUEST")
        name = scope.removeprefix("repository:").removesuffix(":pull")
        return HttpAnswer(
            200,
            {"content-type": "application/json"},
            json.dumps({"token": f"token-for-{api_host}-{name}"}).encode(),
        )

    @staticmethod
    def _canonical(host: str, name: str) -> str:
        """The image's own registry host: docker.io for Docker Hub's API, registry.k8s.io for its backend."""
        if host == "registry-1.docker.io":
            return f"docker.io/{name}"
        if host == _K8S_BACKEND:
            return f"registry.k8s.io/{name.removeprefix('k8s-artifacts-prod/images/')}"
        return f"{host}/{name}"
