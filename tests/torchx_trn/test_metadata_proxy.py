"""The closed proxy catches the instance-metadata call and nothing a training pod may reach; and a
training pod's user, which has no passwd entry, still has a name and a home.

Asked of the real proxy logic of the libraries a training script uses: requests'
``should_bypass_proxies`` (requests 2.34.2, as in .venv; the Neuron image installs its own release,
whose function is the same since 2.x) and the standard library's ``proxy_bypass_environment``
(urllib, CPython 3.11 here, 3.12 in the image), each given the environment the pods render.
"""

from __future__ import annotations

import getpass
import os
import pwd
import urllib.request
from typing import Any

import pytest
import requests.utils

from cluster_facts.kubernetes_names import ETCD_CLIENT_PORT, ETCD_SERVICE_NAME
from cluster_facts.metadata_proxy import CLOSED_PROXY, INSTANCE_METADATA_ADDRESS
from tests.k8s_charts.runs.test_training_run import environment, job
from torchx_trn.trainium import trainium_job


def _run_environment() -> tuple[str, dict[str, str]]:
    manifest = job()
    return manifest["metadata"]["name"], environment(manifest)


def _torchx_environment() -> tuple[str, dict[str, str]]:
    trainium = trainium_job(
        script="train.py",
        script_args=(),
        claim="fsx-abc123",
        node_group="trn1-32xl",
        uid=248061,
        nnodes=2,
        instance_type="trn1.32xlarge",
        image="public.ecr.aws/neuron/pytorch-training-neuronx:2.9.0-neuronx-py312-sdk2.29.1-ubuntu24.04",
        cacheset=None,
        max_retries=0,
        environment={},
    )
    # TorchX fills the app id in for the macro; a name as TorchX makes one stands for it here.
    name = "trainium-ddp-x7k2p9"
    return name, trainium.pod_environment(job_id=name, replica="0")


ENVIRONMENTS = [pytest.param(_run_environment, id="run"), pytest.param(_torchx_environment, id="torchx")]


def _bypassed(url: str, env: dict[str, str]) -> dict[str, bool]:
    """Whether each library would send ``url`` directly (True) or through ``http_proxy``."""
    host = url.split("://", 1)[1].split("/", 1)[0]
    return {
        "requests": bool(requests.utils.should_bypass_proxies(url, no_proxy=env["no_proxy"])),
        "urllib": bool(urllib.request.proxy_bypass_environment(host, proxies={"no": env["no_proxy"]})),
    }


@pytest.mark.parametrize("rendered", ENVIRONMENTS)
def test_the_instance_metadata_call_goes_to_the_closed_port(rendered: Any) -> None:
    _, env = rendered()
    assert env["http_proxy"] == env["HTTP_PROXY"] == CLOSED_PROXY
    assert env["no_proxy"] == env["NO_PROXY"]
    for url in (
        f"http://{INSTANCE_METADATA_ADDRESS}/latest/api/token",
        f"http://{INSTANCE_METADATA_ADDRESS}:80/latest/meta-data/instance-type",
    ):
        assert _bypassed(url, env) == {"requests": False, "urllib": False}, url


@pytest.mark.parametrize("rendered", ENVIRONMENTS)
def test_what_a_pod_may_reach_over_plain_http_is_sent_directly(rendered: Any) -> None:
    name, env = rendered()
    for url in (
        f"http://{ETCD_SERVICE_NAME}:{ETCD_CLIENT_PORT}/v2/keys/torchelastic",
        f"http://{ETCD_SERVICE_NAME}.training.svc.cluster.local:{ETCD_CLIENT_PORT}/v2/keys",
        # A member's own client URL, as /v2/machines lists it (k8s_charts/teams/etcd.py).
        f"http://{ETCD_SERVICE_NAME}-1.{ETCD_SERVICE_NAME}-peers.training.svc:{ETCD_CLIENT_PORT}/v2/keys",
        f"http://{name}-worker-1.{name}:29500/",
        "http://10.0.3.17:8080/metrics",
        "http://localhost:6006/",
        "http://127.0.0.1:8000/",
    ):
        assert _bypassed(url, env)["requests"], url
        if not url.startswith("http://10."):  # urllib matches names, not address ranges
            assert _bypassed(url, env)["urllib"], url


@pytest.mark.parametrize("rendered", ENVIRONMENTS)
def test_https_is_never_proxied(rendered: Any) -> None:
    _, env = rendered()
    assert not {"https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"} & set(env)


# --- No passwd entry for the team's uid ----------------------------------------------------------


@pytest.mark.parametrize("rendered", ENVIRONMENTS)
def test_tools_that_ask_for_the_users_name_get_one_without_a_passwd_entry(
    rendered: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The team's uid has no entry in the image's /etc/passwd: getpass.getuser() (which torch's
    compile cache calls for its directory name) and ~ must not need one."""
    _, env = rendered()

    def no_entry(uid: int) -> Any:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME", "HOME"):
        monkeypatch.delenv(name, raising=False)
    for name in ("LOGNAME", "USER", "HOME"):
        if name in env:
            monkeypatch.setenv(name, env[name])
    assert getpass.getuser() == "trainium"
    assert os.path.expanduser("~") == "/tmp"
