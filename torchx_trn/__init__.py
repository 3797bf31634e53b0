"""A TorchX component of this cluster (docs/torchx.md); imports only cluster_facts and torchx. Also
`make put` (put_file.py), which needs only the standard library and kubectl."""
