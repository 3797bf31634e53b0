"""A TorchX component of this cluster (docs/torchx.md); imports only cluster_facts and torchx."""
