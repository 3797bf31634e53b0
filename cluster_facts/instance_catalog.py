"""The Trainium instance catalog: the one place that knows what each instance type carries.

The launch template (EFA interfaces), the node labels, the configuration checks and, in the
Kubernetes layer, the pods' resource limits and ``--nproc_per_node`` all read from here, so a new
instance type is one entry in ``CATALOG`` and nothing else.

Pure data: the configuration model uses it before any construct exists.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CATALOG", "TrainiumInstanceType", "instance_type"]


@dataclass(frozen=True, kw_only=True)
class TrainiumInstanceType:
    """What one Trainium instance type offers to a training job."""

    name: str
    family: str
    chips: int
    """Trainium chips; the Neuron device plugin advertises them as ``aws.amazon.com/neuron``."""
    neuron_cores: int
    """NeuronCores visible to workloads (``aws.amazon.com/neuroncore``); one training worker each."""
    accelerator_memory_gib: int
    vcpus: int
    memory_gib: int
    network_gbps: int
    efa_network_cards: int
    """Network cards; the launch template attaches one EFA interface to each."""
    max_enis: int
    ipv4_addresses_per_eni: int
    """EC2's default network interfaces and IPv4 addresses per interface, as the EKS AMI's nodeadm
    reads them to size the kubelet's maxPods and memory reservation (amazon-eks-ami v20260505,
    nodeadm/internal/kubelet/instance-info.jsonl; cluster_facts/node_allocatable.py)."""

    @property
    def efa_interfaces(self) -> int:
        """``vpc.amazonaws.com/efa`` resources a node advertises: one interface per network card."""
        return self.efa_network_cards

    @property
    def processes_per_node(self) -> int:
        """Training workers per node (``torchrun --nproc_per_node``): one per NeuronCore."""
        return self.neuron_cores


CATALOG: dict[str, TrainiumInstanceType] = {
    entry.name: entry
    for entry in (
        TrainiumInstanceType(
            name="trn1.32xlarge",
            family="trn1",
            chips=16,
            neuron_cores=32,
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
            neuron_cores=32,
            accelerator_memory_gib=512,
            vcpus=128,
            memory_gib=512,
            network_gbps=1600,
            efa_network_cards=16,
            max_enis=5,
            ipv4_addresses_per_eni=50,
        ),
        TrainiumInstanceType(
            name="trn2.48xlarge",
            family="trn2",
            chips=16,
            # 128 physical cores; at the default logical NeuronCore size (LNC=2) workloads see 64.
            neuron_cores=64,
            accelerator_memory_gib=1536,
            vcpus=192,
            memory_gib=2048,
            network_gbps=3200,
            efa_network_cards=16,
            max_enis=2,
            ipv4_addresses_per_eni=50,
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
