"""The proxy setting that makes a training pod's instance-metadata calls fail at once, and only those.

The pinned BERT script's root rank calls ``requests.put("http://169.254.169.254/latest/api/token")``
with no timeout; with the nodes' IMDS hop limit of 1 the reply never reaches a pod, so the call
would hang (FACTS: "IMDS"). Plain-HTTP requests of libraries that honour ``http_proxy`` (requests,
urllib) go to a closed local port instead and fail at once. Everything else a training pod may
legitimately reach over plain HTTP is exempt through ``no_proxy``:

- the team's etcd by its short Service name (``etcd-server``: python-etcd itself uses urllib3's
  PoolManager, which reads no proxy variable, but any requests- or urllib-based client would not);
- the run's own pods by the names Volcano's svc plugin gives them (``<job>-<task>-<i>.<job>``);
- in-cluster names (``.svc``, ``.cluster.local``), loopback and the private address ranges.

Nothing else is reachable over plain HTTP anyway: a team's pods may send only to DNS, its etcd, its
job's pods and 443 outside (k8s_charts/network/tenant_network.py); HTTPS is never proxied (``https_proxy``
is not set). The instance-metadata address stays outside every exemption (tests/torchx_trn/test_metadata_proxy.py
asks requests' ``should_bypass_proxies`` and urllib's ``proxy_bypass_environment``).
"""

from __future__ import annotations

from cluster_facts.kubernetes_names import ETCD_SERVICE_NAME

__all__ = ["CLOSED_PROXY", "INSTANCE_METADATA_ADDRESS", "proxy_environment"]

CLOSED_PROXY = "http://127.0.0.1:9"
"""The discard port, which nothing in a pod listens on: a connection is refused at once."""
INSTANCE_METADATA_ADDRESS = "169.254.169.254"
_IN_CLUSTER = (
    "localhost",
    "127.0.0.1",
    ".svc",
    ".cluster.local",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    ETCD_SERVICE_NAME,
)


def proxy_environment(*, job: str | None = None) -> dict[str, str]:
    """``http_proxy`` to the closed port and the ``no_proxy`` exemptions (both spellings: libraries
    read one or the other); ``job``: the Volcano Job's name, whose pods' names are exempt too."""
    exempt = [*_IN_CLUSTER, *((job, f".{job}") if job else ())]
    no_proxy = ",".join(exempt)
    return {
        "http_proxy": CLOSED_PROXY,
        "HTTP_PROXY": CLOSED_PROXY,
        "no_proxy": no_proxy,
        "NO_PROXY": no_proxy,
    }
