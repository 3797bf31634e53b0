"""The cluster autoscaler's cluster-wide limits (issue 36): ``--cores-total`` and ``--memory-total``
leave room for every Trainium node the groups may hold.

The 2,048-node bench found the fault: its autoscaler phase found no expansion option. The default
limit is 320,000 cores counted over every node (cluster-autoscaler config/const.go
``DefaultMaxClusterCores``; core/scaleup/resource/manager.go sums each node's cpu capacity), and
2,048 trn2.48xlarge hold 393,216. ``_limit_reached`` restates the check the autoscaler makes before
a scale-up (a model, read in the source: reaching 320,000 cores takes 1,667 simulated trn2 nodes,
which the tier cannot hold beside its other scenarios); the tier's autoscaler is started with the
rendered flags in every scale-up scenario (tests/cluster/autoscaler.py ``autoscaler_args``), so a
value it could not parse would stop those.
"""

from __future__ import annotations

from typing import Any

import yaml

from cluster_facts.autoscaling import DEFAULT_MAX_CLUSTER_CORES, DEFAULT_MAX_CLUSTER_MEMORY_GIB
from cluster_facts.instance_catalog import CATALOG
from cluster_plan.kubernetes_values import review_plan
from config import StackConfig, load_config, parse_config
from config.scale import trainium_max_capacity
from tests.conftest import DEFAULT_CONFIG, EXAMPLE_CONFIG
from tests.yaml_edits import with_change

SYSTEM_NODE_VCPUS = 8
"""m6i.2xlarge, the default configuration's system nodes (EC2's instance type page)."""
SYSTEM_NODE_MEMORY_GIB = 32


def _flags(config: StackConfig) -> dict[str, Any]:
    arguments: dict[str, Any] = review_plan(config).step("cluster-autoscaler").values["extraArgs"]  # type: ignore[union-attr]
    return arguments


def _range(flag: str) -> tuple[int, int]:
    """``parseMinMaxFlag`` (config/flags/flags.go): ``<min>:<max>``, both integers, 0 <= min <= max."""
    low, high = (int(part) for part in flag.split(":"))
    assert 0 <= low <= high
    return low, high


def _trn2_cluster(nodes: int) -> StackConfig:
    data: dict[str, Any] = yaml.safe_load(DEFAULT_CONFIG.read_text())
    data = with_change(data, "trainium.node_groups.0.instance_type", "trn2.48xlarge")
    data = with_change(data, "trainium.node_groups.0.max_size", nodes)
    data = with_change(data, "cluster.control_plane_tier", "tier-4xl")
    return parse_config(data)


def _limit_reached(cores: int, memory_gib: int, flags: dict[str, Any]) -> bool:
    """The scale-up is refused ("max cluster cpu limit reached", or memory) when the cluster's total
    after it would pass a maximum: cores as counted, memory in bytes against the flag's GiB * 2^30."""
    return cores > _range(flags["cores-total"])[1] or memory_gib > _range(flags["memory-total"])[1]


def test_a_2048_node_trn2_cluster_at_full_size_is_inside_the_limits_the_defaults_refuse() -> None:
    config = _trn2_cluster(2048)
    flags = _flags(config)
    instance = CATALOG["trn2.48xlarge"]
    cores = 2048 * instance.vcpus + config.system_nodes.max_size * SYSTEM_NODE_VCPUS
    memory = 2048 * instance.memory_gib + config.system_nodes.max_size * SYSTEM_NODE_MEMORY_GIB
    assert cores == 393_248 > DEFAULT_MAX_CLUSTER_CORES
    defaults = {
        "cores-total": f"0:{DEFAULT_MAX_CLUSTER_CORES}",
        "memory-total": f"0:{DEFAULT_MAX_CLUSTER_MEMORY_GIB}",
    }
    assert _limit_reached(cores, memory, defaults)
    assert not _limit_reached(cores, memory, flags)


def test_the_limits_are_the_defaults_plus_the_groups_whole_capacity() -> None:
    for path in (DEFAULT_CONFIG, EXAMPLE_CONFIG):
        config = load_config(path)
        cores, memory = trainium_max_capacity(config)
        assert cores == sum(group.max_size * group.instance.vcpus for group in config.trainium.node_groups)
        flags = _flags(config)
        assert _range(flags["cores-total"]) == (0, DEFAULT_MAX_CLUSTER_CORES + cores)
        assert _range(flags["memory-total"]) == (0, DEFAULT_MAX_CLUSTER_MEMORY_GIB + memory)
    # Two trn1.32xlarge (128 vCPUs, 512 GiB each): the default configuration.
    assert _flags(load_config(DEFAULT_CONFIG))["cores-total"] == f"0:{DEFAULT_MAX_CLUSTER_CORES + 256}"


def test_the_limits_grow_with_the_groups_so_max_size_stays_the_only_bound() -> None:
    """Whatever the groups' size, the groups at max_size plus the default's room for the rest fit: the
    cluster-wide limit never becomes the binding one a configuration cannot see."""
    for nodes in (2, 64, 1024, 2048, 4096):
        config = _trn2_cluster(nodes)
        cores, memory = trainium_max_capacity(config)
        rest_cores = DEFAULT_MAX_CLUSTER_CORES  # every non-Trainium node, as much as the default allowed
        assert not _limit_reached(cores + rest_cores, memory, _flags(config))
        assert _limit_reached(cores + rest_cores + 1, memory, _flags(config))
