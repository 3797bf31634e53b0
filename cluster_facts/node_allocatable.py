"""What the kubelet of a Trainium node allocates to pods, and the part of it the autoscaler can be told.

The cluster autoscaler builds a node of a group at zero from the instance type and the group's
``node-template/resources/<name>`` tags, and sets allocatable = capacity (cluster-autoscaler
v1.34.5, and v1.36.1 the same but for its AWS SDK v2 types, ``cloudprovider/aws/aws_manager.go``
``buildNodeFromTemplate``: memory from its instance list, 524,288 MiB for trn1.32xlarge, cpu the vCPUs, then each resource tag overrides the value of
its name, then "TODO: use proper allocatable!!" ``Allocatable = Capacity``). A real node allocates
less (kubelet, ``pkg/kubelet/nodestatus/setters.go`` ``MachineInfo``):

    allocatable = capacity - kube-reserved - system-reserved - eviction-hard (memory only)
    allocatable memory -= every pre-allocated hugepages size's capacity

On the EKS AL2023 Neuron AMI (release v20260505, nodeadm ``internal/kubelet/config.go``):

- kube-reserved memory = 11 MiB x maxPods + 255 MiB, with maxPods = the instance's ENIs x (IPv4
  addresses per ENI - 1) + 2 (``eni_max_pods.go`` ``CalcMaxPods``; the counts per type in
  ``instance-info.jsonl``, held in the catalog); kube-reserved cpu = 6% of the first core, 1% of the
  second, 0.5% of the next two and 0.25% of the rest (``getCPUMillicoresToReserve``); no
  system-reserved; eviction-hard ``memory.available`` 100Mi.
- hugepages: the AMI installs the EFA software (``templates/al2023/provisioners/install-efa.sh``:
  ``efa_installer.sh --minimal``), and "Amazon EC2 instances with the EFA driver installed
  pre-allocate 5128 2MiB Huge Pages" (EKS user guide, ``ml/node-efa.adoc``): 10,256 MiB, the same on
  every type, which the kubelet reports as ``hugepages-2Mi`` and takes out of allocatable memory.
- capacity memory is the kernel's MemTotal, which is below the instance's nominal memory by an
  amount EC2 does not publish per type. Karpenter estimates it with ``vmMemoryOverheadPercent``,
  default 7.5% (karpenter-provider-aws issue 5161 asks for something better); the template uses that
  estimate, so what it tells the autoscaler errs low: it never promises memory a node lacks.

Written here, not run: the autoscaler and the kubelet cannot run against a Trainium node offline;
tests/cluster_facts/test_node_allocatable.py applies the formulas above to every catalog entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster_facts.instance_catalog import TrainiumInstanceType

__all__ = [
    "EFA_HUGEPAGES_2MI",
    "EVICTION_HARD_MEMORY_MIB",
    "HUGEPAGES_2MI_RESOURCE",
    "MEMTOTAL_OVERHEAD",
    "Allocatable",
    "kube_reserved",
    "kubelet_allocatable",
    "max_pods",
    "template_allocatable",
]

EFA_HUGEPAGES_2MI = 5128
"""2 MiB pages the EFA driver's installation pre-allocates (EKS user guide, node-efa)."""
HUGEPAGES_2MI_RESOURCE = "hugepages-2Mi"
EVICTION_HARD_MEMORY_MIB = 100
"""nodeadm's ``evictionHard`` ``memory.available``."""
MEMTOTAL_OVERHEAD = 0.075
"""How far below nominal memory the kernel's MemTotal may fall (Karpenter's default estimate)."""


@dataclass(frozen=True)
class Allocatable:
    cpu_millicores: int
    memory_mib: int
    hugepages_2mi_mib: int


def max_pods(instance: TrainiumInstanceType) -> int:
    """nodeadm's default: ENIs x (IPv4 addresses per ENI - 1) + 2."""
    return instance.max_enis * (instance.ipv4_addresses_per_eni - 1) + 2


def kube_reserved(instance: TrainiumInstanceType) -> tuple[int, int]:
    """(cpu millicores, memory MiB) nodeadm reserves for the kubelet and the container runtime."""
    total = instance.vcpus * 1000
    cpu = 0
    for start, end, basis_points in ((0, 1000, 600), (1000, 2000, 100), (2000, 4000, 50), (4000, total, 25)):
        if total > start:
            cpu += (min(total, end) - start) * basis_points // 10000
    return cpu, 11 * max_pods(instance) + 255


def kubelet_allocatable(instance: TrainiumInstanceType, *, memtotal_mib: int) -> Allocatable:
    """What a node of ``instance`` whose kernel reports ``memtotal_mib`` allocates to pods."""
    cpu_reserved, memory_reserved = kube_reserved(instance)
    hugepages = EFA_HUGEPAGES_2MI * 2
    return Allocatable(
        cpu_millicores=instance.vcpus * 1000 - cpu_reserved,
        memory_mib=memtotal_mib - memory_reserved - EVICTION_HARD_MEMORY_MIB - hugepages,
        hugepages_2mi_mib=hugepages,
    )


def template_allocatable(instance: TrainiumInstanceType) -> Allocatable:
    """What the node template tells the autoscaler: the allocatable of a node whose MemTotal is
    ``MEMTOTAL_OVERHEAD`` below the instance's nominal memory (the lowest the estimate allows)."""
    nominal_mib = instance.memory_gib * 1024
    return kubelet_allocatable(instance, memtotal_mib=int(nominal_mib * (1 - MEMTOTAL_OVERHEAD)))
