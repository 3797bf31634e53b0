"""A stubbed AWS Price List: the items ``pricing:GetProducts`` answers for the preflight's queries.

The item shape is the Price List Query API's (``GetProducts`` returns each product as a JSON
string: ``product`` with ``sku``, ``productFamily`` and ``attributes``; ``terms.OnDemand`` with
``priceDimensions`` holding ``unit``, ``beginRange`` and ``pricePerUnit.USD``; ``publicationDate``).

The prices are NOT a recording of a live API answer (no AWS account was reachable when this was
written, 2026-11-23). They are On-Demand list prices as published on AWS's pricing pages and
collected in the project's reference facts, approximate, and the same in both regions where no
regional figure was at hand:

- trn1.32xlarge $21.50/h, trn1n.32xlarge $24.78/h (us-east-1; FACTS.md "Costs"); trn1.32xlarge in
  us-west-2 assumed equal to us-east-1;
- m6i.2xlarge $0.384/h (EC2 On-Demand pricing page, us-east-1 and us-west-2);
- EKS $0.10 per cluster-hour in standard support (EKS pricing page);
- NAT gateway $0.045 per hour, plus $0.045 per GB processed (VPC pricing page, us-east-1/us-west-2);
- FSx for Lustre SSD per GB-month: PERSISTENT_1 50/100/200 MB/s/TiB $0.14/$0.19/$0.29,
  PERSISTENT_2 125/250/500/1000 MB/s/TiB $0.145/$0.21/$0.34/$0.60 (FSx for Lustre pricing page,
  us-east-1; us-west-2 assumed equal).

docs/costs.md quotes what ``preflight.costs`` computes from these items; a test keeps them equal.
"""

from __future__ import annotations

import json
from typing import Any

from cluster_facts import list_prices

PUBLISHED = "2026-11-23T00:00:00Z"
"""The publicationDate the stub items carry: the day they were written, not an AWS publication."""

# us-east-1 usage types often carry no region prefix (BoxUsage:...); the others do.
_PREFIX = {"us-east-1": "", "us-west-2": "USW2-"}
_PREFIX_ALWAYS = {"us-east-1": "USE1-", "us-west-2": "USW2-"}
_LOCATION = {"us-east-1": "US East (N. Virginia)", "us-west-2": "US West (Oregon)"}

# The figures' one home is cluster_facts/list_prices.py (the offline review's prices); PERSISTENT_1's
# tiers and the per-GB NAT charge only the stub needs.
INSTANCE_PRICES = dict(list_prices.INSTANCE_HOUR)
EKS_CLUSTER_HOUR = list_prices.EKS_CLUSTER_HOUR
NAT_GATEWAY_HOUR = list_prices.NAT_GATEWAY_HOUR
NAT_GATEWAY_GB = 0.045
LUSTRE_SSD_GB_MONTH = {50: 0.14, 100: 0.19, 200: 0.29, **list_prices.LUSTRE_PERSISTENT_2_GB_MONTH}


def item(
    *,
    sku: str,
    service_code: str,
    product_family: str,
    attributes: dict[str, str],
    unit: str,
    usd: float,
    published: str = PUBLISHED,
) -> dict[str, Any]:
    """One Price List item with one On-Demand term and one price dimension."""
    term = f"{sku}.JRTCKXETXF"
    return {
        "product": {
            "productFamily": product_family,
            "attributes": {"servicecode": service_code, **attributes},
            "sku": sku,
        },
        "serviceCode": service_code,
        "terms": {
            "OnDemand": {
                term: {
                    "offerTermCode": "JRTCKXETXF",
                    "sku": sku,
                    "effectiveDate": published,
                    "termAttributes": {},
                    "priceDimensions": {
                        f"{term}.6YS6EN2CT7": {
                            "unit": unit,
                            "endRange": "Inf",
                            "description": f"${usd} per {unit}",
                            "appliesTo": [],
                            "rateCode": f"{term}.6YS6EN2CT7",
                            "beginRange": "0",
                            "pricePerUnit": {"USD": f"{usd:.10f}"},
                        }
                    },
                }
            }
        },
        "version": "20261123000000",
        "publicationDate": published,
    }


def ec2_instance(region: str, instance_type: str, usd: float, *, market: str = "OnDemand") -> dict[str, Any]:
    return item(
        sku=f"{region}-{instance_type}-{market}".upper().replace(".", ""),
        service_code="AmazonEC2",
        product_family="Compute Instance",
        attributes={
            "instanceType": instance_type,
            "regionCode": region,
            "location": _LOCATION[region],
            "locationType": "AWS Region",
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
            "licenseModel": "No License required",
            "marketoption": market,
            "operation": "RunInstances",
            "usagetype": f"{_PREFIX[region]}BoxUsage:{instance_type}",
        },
        unit="Hrs",
        usd=usd,
    )


def eks_cluster(region: str, usd: float = EKS_CLUSTER_HOUR) -> dict[str, Any]:
    return item(
        sku=f"{region}-EKS-PERCLUSTER".upper(),
        service_code="AmazonEKS",
        product_family="Compute",
        attributes={
            "regionCode": region,
            "location": _LOCATION[region],
            "locationType": "AWS Region",
            "operation": "CreateOperation",
            "usagetype": f"{_PREFIX_ALWAYS[region]}AmazonEKS-Hours:perCluster",
        },
        unit="Hrs",
        usd=usd,
    )


def nat_gateway(region: str) -> list[dict[str, Any]]:
    """The NAT Gateway product family: the hourly charge and the per-GB charge."""
    common = {"regionCode": region, "location": _LOCATION[region], "locationType": "AWS Region"}
    return [
        item(
            sku=f"{region}-NAT-HOURS".upper(),
            service_code="AmazonEC2",
            product_family="NAT Gateway",
            attributes={
                **common,
                "group": "NGW:NatGateway",
                "usagetype": f"{_PREFIX[region]}NatGateway-Hours",
            },
            unit="Hrs",
            usd=NAT_GATEWAY_HOUR,
        ),
        item(
            sku=f"{region}-NAT-BYTES".upper(),
            service_code="AmazonEC2",
            product_family="NAT Gateway",
            attributes={
                **common,
                "group": "NGW:NatGateway",
                "usagetype": f"{_PREFIX[region]}NatGateway-Bytes",
            },
            unit="GB",
            usd=NAT_GATEWAY_GB,
        ),
    ]


def lustre_storage(region: str) -> list[dict[str, Any]]:
    """FSx for Lustre SSD storage, one product per throughput tier (usage type Storage.SSD.<tier>)."""
    return [
        item(
            sku=f"{region}-LUSTRE-SSD-{tier}".upper(),
            service_code="AmazonFSx",
            product_family="Storage",
            attributes={
                "regionCode": region,
                "location": _LOCATION[region],
                "locationType": "AWS Region",
                "fileSystemType": "Lustre",
                "storageType": "SSD",
                "throughputCapacity": str(tier),
                "operation": "CreateFileSystem:Lustre",
                "usagetype": f"{_PREFIX_ALWAYS[region]}Storage.SSD.{tier}",
            },
            unit="GB-Mo",
            usd=usd,
        )
        for tier, usd in LUSTRE_SSD_GB_MONTH.items()
    ]


def answers(region: str) -> dict[str, list[dict[str, Any]]]:
    """``PriceQuery.key`` -> the items the Price List answers for that query in ``region``."""
    found: dict[str, list[dict[str, Any]]] = {
        f"ec2 {instance_type}": [ec2_instance(region, instance_type, usd)]
        for instance_type, usd in INSTANCE_PRICES.items()
    }
    found["eks cluster"] = [eks_cluster(region)]
    found["nat gateway"] = nat_gateway(region)
    for tier in (125, 250, 500, 1000):
        found[f"fsx lustre ssd {tier}"] = lustre_storage(region)
    return found


def encoded(items: list[dict[str, Any]]) -> list[str]:
    """As GetProducts returns them: one JSON string per product."""
    return [json.dumps(entry) for entry in items]
