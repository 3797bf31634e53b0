"""The node count a Trainium node group's template carries: the count it runs now.

A CloudFormation custom resource (constructs_trn/node_group_size.py) whose ``DesiredSize``
attribute is the group's ``ScalingConfig.DesiredSize``. EKS resizes a group "whenever this parameter
changes", terminating nodes when it is lower (EKS API, NodegroupScalingConfig), and the cluster
autoscaler sets the count between deploys: a fixed value in the template would resize the group
to it whenever CloudFormation sends it. This function reads the count the group runs
(``eks:DescribeNodegroup``) each time the group's template changes, so what CloudFormation sends is
the running count:

- new bounds: the running count, raised to a new ``MinSize`` (warm nodes, as asked) and lowered to a
  new ``MaxSize`` (EKS keeps the count within the bounds; lowering ``max_size`` below what runs ends
  nodes, which docs/capacity.md says to do between jobs);
- a Capacity Block group whose nodes the deploy replaces (a release or launch template version
  other than the group's): EKS upgrades such a group only at desired size 0 ("When upgrading
  managed node groups with Capacity Blocks, make sure that the desired size of the node group is
  set to 0", EKS user guide): 0 when it runs none, refused while it runs nodes (their job would
  end). Compared with what the group runs, not with the previous request, so a rollback (the old
  versions, which the group still runs) is never refused;
- a group that does not exist yet (the first deploy): ``InitialSize``.

Runs in Lambda's Python runtime with its boto3 only, and answers CloudFormation itself (no
provider framework): the response is a PUT of JSON to the request's pre-signed ``ResponseURL``
(CloudFormation user guide, "Custom resource response objects"). Tested with botocore's Stubber
(tests/test_node_group_size.py).
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import boto3  # type: ignore[import-untyped]


class Refused(Exception):
    """The update would move a running group's node count: the message says why and what to do."""


def _int(properties: dict[str, Any], key: str) -> int:
    return int(properties[key])


def described(eks: Any, cluster: str, nodegroup: str) -> dict[str, Any] | None:
    """The group as EKS describes it, or None when the cluster has no such group.

    Listed first: IAM authorizes DescribeNodegroup on the group's ARN, which a group that does not
    exist yet has not (nodegroup/<cluster>/<name>/<uuid>), while ListNodegroups is authorized on the
    cluster's."""
    names = [
        name
        for page in eks.get_paginator("list_nodegroups").paginate(clusterName=cluster)
        for name in page["nodegroups"]
    ]
    if nodegroup not in names:
        return None
    answer = eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup)
    group: dict[str, Any] = answer["nodegroup"]
    return group


def _replaces_nodes(properties: dict[str, Any], group: dict[str, Any]) -> bool:
    """The template asks for another AMI release or launch template version than the group runs."""
    running_template = str((group.get("launchTemplate") or {}).get("version", ""))
    running_release = str(group.get("releaseVersion", ""))
    return bool(
        properties["ReleaseVersion"] != running_release
        or properties["LaunchTemplateVersion"] != running_template
    )


def desired_size(event: dict[str, Any], eks: Any) -> int:
    """The DesiredSize the group's template should carry for this request (raises Refused)."""
    properties = event["ResourceProperties"]
    name = properties["NodegroupName"]
    minimum, maximum = _int(properties, "MinSize"), _int(properties, "MaxSize")
    group = described(eks, properties["ClusterName"], name)
    if group is None:
        return min(max(_int(properties, "InitialSize"), minimum), maximum)
    running = int(group["scalingConfig"]["desiredSize"])
    if properties.get("CapacityBlock") == "true" and _replaces_nodes(properties, group):
        if running > 0:
            raise Refused(
                f"node group {name} runs {running} node(s) of its Capacity Block, and this deploy replaces "
                "them (another AMI release or launch template); EKS upgrades a Capacity Block group only at "
                "desired size 0, and a job on them would end: deploy again once no job runs and the "
                f"autoscaler has removed the nodes (kubectl get nodes -l {properties['NodeSelector']} shows none)"
            )
        return 0
    return min(max(running, minimum), maximum)


def _respond(event: dict[str, Any], status: str, *, reason: str = "", size: int | None = None) -> None:
    body = {
        "Status": status,
        "Reason": reason[:3000],
        "PhysicalResourceId": f"{event['ResourceProperties']['ClusterName']}/"
        f"{event['ResourceProperties']['NodegroupName']}/size",
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
        "Data": {} if size is None else {"DesiredSize": size},
    }
    data = json.dumps(body).encode()
    # The pre-signed URL is signed for an empty content type.
    request = urllib.request.Request(
        event["ResponseURL"],
        data=data,
        method="PUT",
        headers={"Content-Type": "", "Content-Length": str(len(data))},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


def handler(event: dict[str, Any], context: object, eks: Any = None) -> None:
    """Answer CloudFormation: SUCCESS with ``DesiredSize``, or FAILED with the reason."""
    print(json.dumps({key: value for key, value in event.items() if key != "ResponseURL"}))
    if event["RequestType"] == "Delete":
        _respond(event, "SUCCESS")
        return
    try:
        size = desired_size(event, eks if eks is not None else boto3.client("eks"))
    except Refused as refusal:
        _respond(event, "FAILED", reason=str(refusal))
        return
    except Exception as error:  # noqa: BLE001 (CloudFormation must hear of any failure)
        _respond(event, "FAILED", reason=f"{type(error).__name__}: {error}")
        return
    _respond(event, "SUCCESS", size=size)
