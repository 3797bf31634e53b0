"""The Trainium instance catalog: the one place that knows what each instance type carries.

The launch template (EFA interfaces), the node labels, the configuration checks and, in the
Kubernetes layer, the pods' resource limits and ``--nproc_per_node`` all read from here, so a new
instance type is one entry in ``CATALOG`` and nothing else.

Sources, per fact (read 2026-11-28):

- Chips, vCPUs, memory, accelerator memory, network bandwidth, EFA network cards, network interfaces
  and IPv4 addresses per interface: the EC2 user guide, "Specifications for Amazon EC2 accelerated
  computing instances" (performance and network tables; trn2u.48xlarge: 16x 200 Gigabit, EFA, 16
  network cards, 32 network interfaces, 50 addresses per interface, the same row as trn2.48xlarge),
  and the Neuron architecture pages (about-neuron/arch/neuron-hardware/trn1-arch.rst, trn2-arch.rst).
- Physical NeuronCores per chip: two NeuronCore-v2 per Trainium (trainium.rst), eight NeuronCore-v3
  per Trainium2 (trainium2.rst).
- Logical NeuronCore (LNC): about-neuron/arch/neuron-features/logical-neuroncore-config.rst: "LNC can
  only be set to 1 or 2 ... With LNC=2 (default), these are grouped into 4 Logical NeuronCores ...
  LNC applies only to Trn2 and Trn3 instances"; a trn2.48xlarge presents 64 NeuronCores at LNC=2 and
  128 at LNC=1. Set by the runtime's ``NEURON_LOGICAL_NC_CONFIG`` (and the compiler's ``-lnc``, which
  must agree). Training runs one process per logical NeuronCore (training/best-practices.rst: "64
  ranks per instance" at LNC2).
- Default network interfaces and IPv4 addresses per interface as the EKS AMI's nodeadm reads them
  (amazon-eks-ami v20260714, nodeadm/internal/kubelet/instance-info.jsonl). trn2u.48xlarge is not in
  that file; nodeadm then asks EC2 DescribeInstanceTypes for the default network card's
  MaximumNetworkInterfaces (nodeadm/internal/util/ec2.go). The user guide gives trn2u.48xlarge the
  network row of trn2.48xlarge, whose default card holds 2 in instance-info.jsonl: 2 is taken for it
  (a reading, not a figure EC2 prints; preflight's DescribeInstanceTypes check compares it).
- UltraServer: trn2-arch.rst, "A Trn2 UltraServer comprises four trn2u.48xlarge instances ... a total
  of 64 Trainium2 chips"; deploy/eks/ultraserver.rst: a job uses 4, 2 or 1 of its nodes (the node
  config) and the device plugin labels them ``neuron.amazonaws.com/ultraserver-server-id-<n>``
  (device plugin 2.30.0.0 or later).

Not in the catalog: trn2.3xlarge (one chip, one network card and no EFA between instances worth a
gang) and Trn3. Neuron documents Trn3 only as UltraServers (trn3-arch.rst: Gen1, 4 servers of 16
Trainium3; Gen2, 36 servers of 4), and no source readable here gives an EC2 instance type name with
its vCPUs, memory, network cards and interfaces (the EC2 specification page lists no Trn3 family;
nodeadm's instance-info.jsonl has no trn3 entry): the launch template and the kubelet's reservation
cannot be derived without them. The native stack lists the trn3 family (cluster_facts/neuron_stack.py)
so that the entry, once sourced, is the only change.

Pure data: the configuration model uses it before any construct exists.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CATALOG", "TrainiumInstanceType", "UltraServer", "instance_type"]


@dataclass(frozen=True, kw_only=True)
class UltraServer:
    """Instances joined by NeuronLink into one scale-up domain, placed as one unit."""

    nodes: int
    """Instances per UltraServer."""
    chips: int
    node_configs: tuple[int, ...]
    """How many of its nodes one job may take (NEURON_ULTRASERVER_NODE_CONFIG)."""


@dataclass(frozen=True, kw_only=True)
class TrainiumInstanceType:
    """What one Trainium instance type offers to a training job."""

    name: str
    family: str
    chips: int
    """Trainium chips (Neuron devices); the Neuron device plugin advertises them as ``aws.amazon.com/neuron``."""
    physical_neuron_cores: int
    logical_core_sizes: tuple[int, ...] = (1,)
    """The Logical NeuronCore configurations the type takes (physical cores per logical core)."""
    default_logical_core_size: int = 1
    """The LNC the runtime uses unless ``NEURON_LOGICAL_NC_CONFIG`` says otherwise."""
    accelerator_memory_gib: int
    vcpus: int
    memory_gib: int
    network_gbps: int
    efa_network_cards: int
    """Network cards; the launch template attaches one EFA interface to each."""
    max_enis: int
    ipv4_addresses_per_eni: int
    """EC2's default network interfaces and IPv4 addresses per interface, as the EKS AMI's nodeadm
    reads them to size the kubelet's maxPods and memory reservation (cluster_facts/node_allocatable.py)."""
    ultraserver: UltraServer | None = None

    def __post_init__(self) -> None:
        if self.default_logical_core_size not in self.logical_core_sizes:
            raise ValueError(
                f"{self.name}: default LNC {self.default_logical_core_size} not in {self.logical_core_sizes}"
            )
        if any(self.physical_neuron_cores % size for size in self.logical_core_sizes):
            raise ValueError(
                f"{self.name}: {self.physical_neuron_cores} cores do not split into {self.logical_core_sizes}"
            )

    @property
    def neuron_cores(self) -> int:
        """NeuronCores visible to workloads at the default LNC (``aws.amazon.com/neuroncore``)."""
        return self.logical_cores()

    def logical_cores(self, size: int | None = None) -> int:
        """Logical NeuronCores at LNC ``size`` (default: the type's default); ValueError if it takes none such."""
        lnc = self.default_logical_core_size if size is None else size
        if lnc not in self.logical_core_sizes:
            allowed = ", ".join(map(str, self.logical_core_sizes))
            raise ValueError(f"{self.name} takes a Logical NeuronCore size of {allowed}, not {lnc}")
        return self.physical_neuron_cores // lnc

    @property
    def efa_interfaces(self) -> int:
        """``vpc.amazonaws.com/efa`` resources a node advertises: one interface per network card."""
        return self.efa_network_cards

    @property
    def processes_per_node(self) -> int:
        """Training workers per node (``torchrun --nproc_per_node``) at the default LNC: one per
        logical NeuronCore."""
        return self.neuron_cores


def _trainium2(name: str, family: str, *, ultraserver: UltraServer | None = None) -> TrainiumInstanceType:
    """trn2.48xlarge and trn2u.48xlarge: the same chips, host and network (EC2 and trn2-arch.rst)."""
    return TrainiumInstanceType(
        name=name,
        family=family,
        chips=16,
        # 8 NeuronCore-v3 per Trainium2: 128 physical; at the default LNC=2 workloads see 64.
        physical_neuron_cores=128,
        logical_core_sizes=(1, 2),
        default_logical_core_size=2,
        accelerator_memory_gib=1536,
        vcpus=192,
        memory_gib=2048,
        network_gbps=3200,
        efa_network_cards=16,
        max_enis=2,
        ipv4_addresses_per_eni=50,
        ultraserver=ultraserver,
    )


CATALOG: dict[str, TrainiumInstanceType] = {
    entry.name: entry
    for entry in (
        TrainiumInstanceType(
            name="trn1.32xlarge",
            family="trn1",
            chips=16,
            physical_neuron_cores=32,  # 2 NeuronCore-v2 per Trainium; no LNC on trn1
            accelerator_memory_gib=512,
            vcpus=128,
            memory_gib=512,
            network_gbps=800,
            efa_network_cards=8,
            max_enis=5,
            ipv4_addresses_per_eni=50,
        ),
        TrainiumInstanceType(
            name="trn1n.32xlarge",
            family="trn1n",
            chips=16,
            physical_neuron_cores=32,
            accelerator_memory_gib=512,
            vcpus=128,
            memory_gib=512,
            network_gbps=1600,
            efa_network_cards=16,
            max_enis=5,
            ipv4_addresses_per_eni=50,
        ),
        _trainium2("trn2.48xlarge", "trn2"),
        # The node of a Trn2 UltraServer: a trn2.48xlarge's chips and network, NeuronLink to 3 more.
        _trainium2(
            "trn2u.48xlarge", "trn2u", ultraserver=UltraServer(nodes=4, chips=64, node_configs=(1, 2, 4))
        ),
    )
}


def instance_type(name: str) -> TrainiumInstanceType:
    """The catalog entry for ``name``; a KeyError names the types that exist."""
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(
            f"{name!r} is not in the Trainium instance catalog; known: {', '.join(CATALOG)}"
        ) from None
