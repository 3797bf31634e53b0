"""On-Demand list prices the offline review uses for a cost figure (the summary page, ``make review``).

Source: AWS's public pricing pages (EC2 On-Demand, Amazon EKS, Amazon VPC, Amazon FSx for Lustre),
us-east-1, as collected on 2026-11-23 (the same figures tests/preflight/price_list.py stubs the Price
List with). Known to be wrong or missing:

- approximate list prices of one region, used for every region: a region whose prices differ is
  shown at us-east-1's (the summary says so); trn2.48xlarge, SCRATCH_2 and every instance type not
  listed have no price here, so their cost is shown as unknown, never guessed;
- not a live answer: ``make preflight`` asks the AWS Price List for the configuration's region and
  is what to trust before a deployment (docs/costs.md);
- no Savings Plans, Spot, Capacity Block or reservation discounts; no EBS, traffic, logs or IPv4.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "EKS_CLUSTER_HOUR",
    "HOURS_PER_MONTH",
    "INSTANCE_HOUR",
    "LUSTRE_PERSISTENT_2_GB_MONTH",
    "NAT_GATEWAY_HOUR",
    "PRICES_AS_OF",
    "PRICES_REGION",
]

PRICES_AS_OF = "2026-11-23"
PRICES_REGION = "us-east-1"
HOURS_PER_MONTH = 730
"""365 x 24 / 12: the average month (preflight/costs.py uses the same)."""

INSTANCE_HOUR: Mapping[str, float] = {
    "trn1.32xlarge": 21.50,
    "trn1n.32xlarge": 24.78,
    "m6i.2xlarge": 0.384,
}
"""USD per instance-hour, On-Demand Linux, shared tenancy."""

EKS_CLUSTER_HOUR = 0.10
"""USD per cluster-hour in standard support (extended support costs more)."""

NAT_GATEWAY_HOUR = 0.045
"""USD per NAT gateway-hour (plus a per-GB processing charge, which is traffic and not counted)."""

LUSTRE_PERSISTENT_2_GB_MONTH: Mapping[int, float] = {125: 0.145, 250: 0.21, 500: 0.34, 1000: 0.60}
"""USD per GB-month of PERSISTENT_2 SSD storage, by throughput tier (MB/s/TiB)."""
