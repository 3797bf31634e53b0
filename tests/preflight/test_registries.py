"""Asking the registries: the OCI API flow (token challenge, redirects, HEAD only), ECR's answers.

The HTTP client itself (``UrllibTransport``) runs against a real HTTP server on 127.0.0.1 (real
sockets, real urllib); the internet's registries are the model in fake_registries.py; ECR is
botocore's Stubber, with the answers and error texts of its API reference.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from botocore.stub import Stubber

from cluster_facts.neuron_stack import DEVICE_PLUGIN_IMAGE
from preflight.image_inventory import PulledImage, Source, pulled_images
from preflight.registries import (
    MANIFEST_MEDIA_TYPES,
    HttpAnswer,
    UrllibTransport,
    ask_registries,
    head_manifest,
)
from tests.preflight.conftest import example_config, real_clients
from tests.preflight.fake_registries import FakeRegistries, digest_of

# --- the HTTP client, against a real local server ------------------------------------------------


class _Registry(http.server.BaseHTTPRequestHandler):
    """A registry of one repository, ``team/app``, with tag ``v1``; tokens from /token; /moved
    redirects to the same server's /v2/... (a registry.k8s.io-like hop)."""

    seen: ClassVar[list[tuple[str, str, str]]] = []

    def log_message(self, *_: Any) -> None:
        pass

    def _reply(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        self.seen.append(("GET", self.path, self.headers.get("Authorization", "")))
        if self.path.startswith("/token?"):
            self._reply(200, {"Content-Type": "application/json"}, json.dumps({"token": "t0k"}).encode())
        else:
            self._reply(405, {})

    def do_HEAD(self) -> None:
        self.seen.append(("HEAD", self.path, self.headers.get("Authorization", "")))
        if self.path.startswith("/moved/"):
            self._reply(307, {"Location": self.path.replace("/moved/", "/v2/", 1)})
            return
        if self.headers.get("Authorization") != "Bearer t0k":
            host = f"http://127.0.0.1:{self.server.server_port}"
            self._reply(401, {"WWW-Authenticate": f'Bearer realm="{host}/token",service="local"'})
            return
        if self.path == "/v2/team/app/manifests/v1":
            self._reply(200, {"Docker-Content-Digest": "sha256:" + "ab" * 32})
        else:
            self._reply(
                404, {"Content-Type": "application/json"}, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}'
            )


@pytest.fixture
def local_registry() -> Iterator[str]:
    _Registry.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_http_client_does_a_token_challenge_and_a_head(local_registry: str) -> None:
    found = head_manifest(
        f"{local_registry}/v2/team/app/manifests/v1", "team/app", UrllibTransport(timeout=5)
    )
    assert found.status == 200 and found.headers["docker-content-digest"] == "sha256:" + "ab" * 32
    missing = head_manifest(
        f"{local_registry}/v2/team/app/manifests/v2", "team/app", UrllibTransport(timeout=5)
    )
    assert missing.status == 404
    assert [(method, path.split("?")[0]) for method, path, _ in _Registry.seen] == [
        ("HEAD", "/v2/team/app/manifests/v1"),
        ("GET", "/token"),
        ("HEAD", "/v2/team/app/manifests/v1"),
        ("HEAD", "/v2/team/app/manifests/v2"),
        ("GET", "/token"),
        ("HEAD", "/v2/team/app/manifests/v2"),
    ]
    token_request = _Registry.seen[1][1]
    assert "scope=repository%3Ateam%2Fapp%3Apull" in token_request and "service=local" in token_request


def test_the_http_client_follows_a_redirect_with_head_itself(local_registry: str) -> None:
    """urllib would turn a redirected HEAD into a GET (a counted pull on Docker Hub); the transport
    returns the 3xx and head_manifest follows it with HEAD."""
    transport = UrllibTransport(timeout=5)
    hop = transport("HEAD", f"{local_registry}/moved/team/app/manifests/v1", {})
    assert (hop.status, hop.headers["location"]) == (307, "/v2/team/app/manifests/v1")
    answer = head_manifest(f"{local_registry}/moved/team/app/manifests/v1", "team/app", transport)
    assert answer.status == 200
    assert {method for method, path, _ in _Registry.seen if "/manifests/" in path} == {"HEAD"}


def test_an_unreachable_registry_is_an_os_error() -> None:
    with pytest.raises(OSError):
        UrllibTransport(timeout=2)("HEAD", "http://127.0.0.1:9/v2/x/manifests/y", {})


# --- the public registries' answers (the model) ---------------------------------------------------


def upstream(image: str) -> PulledImage:
    [found] = [i for i in pulled_images(example_config()) if i.upstream == image]
    return found


def ask(image: PulledImage, registries: FakeRegistries) -> Any:
    return ask_registries((image,), ecr=real_clients("us-east-1").ecr, http=registries)[image.reference]


@pytest.mark.parametrize(
    "image",
    [
        DEVICE_PLUGIN_IMAGE,
        "docker.io/volcanosh/vc-scheduler:v1.15.1",
        "quay.io/coreos/etcd:v3.5.33",
        "registry.k8s.io/autoscaling/cluster-autoscaler:v1.36.1",
    ],
)
def test_an_existing_image_is_found_with_head_requests_only(image: str) -> None:
    registries = FakeRegistries()
    answer = ask(upstream(image), registries)
    assert answer.status == "found", answer
    assert answer.detail == digest_of(image)[: len("sha256:") + 12]
    manifests = [(method, url) for method, url in registries.requests if "/manifests/" in url]
    assert manifests and {method for method, _ in manifests} == {"HEAD"}
    assert registries.leaked_tokens == []


def test_registry_k8s_io_is_asked_through_its_redirect_without_leaking_a_token() -> None:
    registries = FakeRegistries()
    answer = ask(upstream("registry.k8s.io/autoscaling/cluster-autoscaler:v1.36.1"), registries)
    assert answer.status == "found"
    hosts = [url.split("/")[2] for _, url in registries.requests]
    assert hosts == [
        "registry.k8s.io",
        "us-west2-docker.pkg.dev",
        "us-west2-docker.pkg.dev",
        "us-west2-docker.pkg.dev",
    ]
    assert registries.leaked_tokens == []


def test_a_missing_tag_is_missing_and_says_what_the_registry_answered() -> None:
    registries = FakeRegistries(missing={DEVICE_PLUGIN_IMAGE})
    answer = ask(upstream(DEVICE_PLUGIN_IMAGE), registries)
    assert (answer.status, answer.asked) == ("missing", "public.ecr.aws's API")
    assert answer.detail == "404 MANIFEST_UNKNOWN: no manifest 2.29.149.0 in neuron/neuron-device-plugin"


def test_a_repository_docker_hub_does_not_have_is_refused_and_counted_missing() -> None:
    registries = FakeRegistries(missing_repositories={"docker.io/volcanosh/vc-scheduler"})
    answer = ask(upstream("docker.io/volcanosh/vc-scheduler:v1.15.1"), registries)
    assert answer.status == "missing"
    assert answer.detail.startswith(
        "401 UNAUTHORIZED: docker.io refuses an anonymous pull of volcanosh/vc-scheduler"
    )


def test_throttled_or_unreachable_registries_are_unknown_not_missing() -> None:
    throttled = ask(
        upstream("docker.io/volcanosh/vc-scheduler:v1.15.1"),
        FakeRegistries(throttled={"registry-1.docker.io"}),
    )
    assert (throttled.status, throttled.detail) == ("unknown", "429 TOOMANYREQUESTS from docker.io")
    unreachable = ask(upstream("quay.io/coreos/etcd:v3.5.33"), FakeRegistries(unreachable={"quay.io"}))
    assert unreachable.status == "unknown"
    assert unreachable.detail.startswith("could not ask quay.io: [Errno 111] Connection refused")


def test_a_redirect_loop_is_bounded() -> None:
    calls: list[str] = []

    def loop(method: str, url: str, headers: Any) -> HttpAnswer:
        calls.append(url)
        return HttpAnswer(302, {"location": url})

    answer = ask(upstream("quay.io/coreos/etcd:v3.5.33"), loop)  # type: ignore[arg-type]
    assert (answer.status, answer.detail) == ("unknown", "could not ask quay.io: more than 5 redirects")
    assert len(calls) == 6


# --- ECR: another account's registry (EKS's) and this account's ------------------------------------


def efa() -> PulledImage:
    [image] = [i for i in pulled_images(example_config()) if i.source is Source.OTHER_ECR]
    return image


def batch_get_params() -> dict[str, Any]:
    return {
        "registryId": "602401143452",
        "repositoryName": "eks/aws-efa-k8s-device-plugin",
        "imageIds": [{"imageTag": "v0.5.20"}],
        "acceptedMediaTypes": list(MANIFEST_MEDIA_TYPES),
    }


def ask_ecr(image: PulledImage, queue: Any) -> Any:
    ecr = real_clients("us-east-1").ecr
    with Stubber(ecr) as stubber:
        queue(stubber)
        answer = ask_registries((image,), ecr=ecr, http=FakeRegistries())[image.reference]
        stubber.assert_no_pending_responses()
    return answer


def test_the_efa_plugin_is_asked_with_batch_get_image_in_eks_registry() -> None:
    found = ask_ecr(
        efa(),
        lambda s: s.add_response(
            "batch_get_image",
            {
                "images": [{"imageId": {"imageTag": "v0.5.20", "imageDigest": "sha256:" + "cd" * 32}}],
                "failures": [],
            },
            batch_get_params(),
        ),
    )
    assert (found.status, found.detail, found.asked) == (
        "found",
        "sha256:cdcdcdcdcdcd",
        "ecr:BatchGetImage in 602401143452",
    )
    missing = ask_ecr(
        efa(),
        lambda s: s.add_response(
            "batch_get_image",
            {
                "images": [],
                "failures": [
                    {
                        "imageId": {"imageTag": "v0.5.20"},
                        "failureCode": "ImageNotFound",
                        "failureReason": "Requested image not found",
                    }
                ],
            },
            batch_get_params(),
        ),
    )
    assert (missing.status, missing.detail) == ("missing", "ImageNotFound: Requested image not found")


def test_without_the_permission_the_efa_answer_is_unknown_and_names_it() -> None:
    message = (
        "User: arn:aws:iam::444455556666:user/ci is not authorized to perform: ecr:BatchGetImage on resource: "
        "arn:aws:ecr:us-east-1:602401143452:repository/eks/aws-efa-k8s-device-plugin because no "
        "identity-based policy allows the ecr:BatchGetImage action"
    )
    answer = ask_ecr(
        efa(),
        lambda s: s.add_client_error(
            "batch_get_image",
            service_error_code="AccessDeniedException",
            service_message=message,
            http_status_code=400,
            expected_params=batch_get_params(),
        ),
    )
    assert (answer.status, answer.detail) == ("unknown", f"AccessDeniedException: {message}")


def test_an_image_of_this_account_is_asked_with_describe_images() -> None:
    image = PulledImage(
        reference="444455556666.dkr.ecr.us-east-1.amazonaws.com/trainium-prod/training:v7",
        upstream="444455556666.dkr.ecr.us-east-1.amazonaws.com/trainium-prod/training:v7",
        source=Source.OWN_ECR,
        registry="444455556666.dkr.ecr.us-east-1.amazonaws.com",
        origins=(),
    )
    params = {
        "registryId": "444455556666",
        "repositoryName": "trainium-prod/training",
        "imageIds": [{"imageTag": "v7"}],
    }
    found = ask_ecr(
        image,
        lambda s: s.add_response(
            "describe_images", {"imageDetails": [{"imageDigest": "sha256:" + "ef" * 32}]}, params
        ),
    )
    assert (found.status, found.asked) == ("found", "ecr:DescribeImages in 444455556666")
    for code in ("ImageNotFoundException", "RepositoryNotFoundException"):
        missing = ask_ecr(
            image,
            lambda s, code=code: s.add_client_error(
                "describe_images",
                service_error_code=code,
                service_message="not there",
                expected_params=params,
            ),
        )
        assert (missing.status, missing.detail) == ("missing", f"{code}: not there")
