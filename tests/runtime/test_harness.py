"""The harness changes only what one machine forces (fast: no process starts here)."""

from __future__ import annotations

from pathlib import Path

from cluster_facts.kubernetes_plan import KubernetesLayerPlan
from tests.runtime.conftest import etcd_statefulset
from tests.runtime.etcd_cluster import local_member_args
from tests.runtime.harness import (
    STANDIN,
    launcher_script_index,
    local_launcher,
    option_value,
    training_job,
    with_option,
)


def test_the_launcher_keeps_every_rendered_option_but_endpoint_workers_and_script(
    plan: KubernetesLayerPlan,
) -> None:
    rendered = list(training_job(plan).args)
    local = local_launcher(rendered, endpoint="127.0.0.1:4001", nproc_per_node=1, script_args=["--x", "1"])

    script = launcher_script_index(rendered)
    assert rendered[script].endswith("/dp_bert_large_hf_pretrain_hdf5.py")
    options = with_option(rendered[:script], "--rdzv_endpoint", "127.0.0.1:4001")
    assert local == [
        *with_option(options, "--nproc_per_node", "1"),
        "--local_addr",
        "127.0.0.1",
        str(STANDIN),
        "--x",
        "1",
    ]
    assert option_value(local, "--rdzv_backend") == "etcd"
    assert option_value(local, "--rdzv_id") == "$(RDZV_ID)"


def test_etcd_members_keep_the_rendered_flags_on_loopback(plan: KubernetesLayerPlan) -> None:
    [init] = etcd_statefulset(plan)["spec"]["template"]["spec"]["initContainers"]
    rendered = [arg.replace("$(POD_NAME)", "etcd-server-1") for arg in init["args"]]
    ports = {
        f"etcd-server-{i}": {2379: 4000 + 10 * i, 2380: 4001 + 10 * i, 2381: 4002 + 10 * i} for i in range(3)
    }
    local = local_member_args(
        rendered, member="etcd-server-1", ports=ports, mount="/var/lib/etcd", directory=Path("/tmp/x")
    )

    assert "--enable-v2=true" in local
    assert option_value(local, "--listen-client-urls") == "http://127.0.0.1:4010"
    assert option_value(local, "--advertise-client-urls") == "http://127.0.0.1:4010"
    assert option_value(local, "--listen-peer-urls") == "http://127.0.0.1:4011"
    assert option_value(local, "--listen-metrics-urls") == "http://127.0.0.1:4012"
    assert option_value(local, "--initial-cluster") == (
        "etcd-server-0=http://127.0.0.1:4001,etcd-server-1=http://127.0.0.1:4011,etcd-server-2=http://127.0.0.1:4021"
    )
    assert option_value(local, "--members") == (
        "etcd-server-0=http://127.0.0.1:4000,etcd-server-1=http://127.0.0.1:4010,etcd-server-2=http://127.0.0.1:4020"
    )
    assert option_value(local, "--data-dir") == "/tmp/x/data"
    assert [arg.split("=")[0] for arg in local] == [arg.split("=")[0] for arg in rendered]
