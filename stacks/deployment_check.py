"""The post-deployment check of each pipeline stage: a bash script and the values it reads.

It runs in CodeBuild in the tooling account after a stage's TrainiumStack deploys, with the
stack's outputs as variables, assumes the stage's read-only check role
(constructs_trn/deployment_check_role.py) and checks the cluster, its Trainium node groups and
EFA interfaces and, where the API server is reachable, that every Trainium node advertises its
Neuron and EFA devices.
"""

from __future__ import annotations

from config.model import StackConfig
from constructs_trn.instance_catalog import EFA_RESOURCE, NEURON_RESOURCE

__all__ = [
    "CHECK_OUTPUTS",
    "EFA_INTERFACES_LABEL",
    "NEURON_DEVICES_LABEL",
    "NODE_GROUP_LABEL",
    "deployment_check_env",
    "deployment_check_script",
]

# Where a stack's outputs come from, by the variable the deployment check reads them as.
CHECK_OUTPUTS = {
    "CLUSTER_NAME": "ClusterName",
    "ECR_REPOSITORY_URI": "EcrRepositoryUri",
    "FSX_FILE_SYSTEM_ID": "FsxFileSystemId",
    "FSX_DNS_NAME": "FsxDnsName",
    "FSX_MOUNT_NAME": "FsxMountName",
    "TRAINIUM_SUBNET_ID": "TrainiumSubnetId",
}
# Node labels every Trainium node carries (constructs_trn.trainium_node_group.trainium_node_labels):
# what its instance type offers, which the device plugins must advertise as allocatable.
NEURON_DEVICES_LABEL = "trainium/neuron-devices"
EFA_INTERFACES_LABEL = "trainium/efa-interfaces"
NODE_GROUP_LABEL = "trainium/node-group"
# How long the check waits for the device plugins to advertise the devices of new nodes.
DEVICE_WAIT_SECONDS = 900


def deployment_check_env(config: StackConfig, *, stage_id: str, check_role_arn: str) -> dict[str, str]:
    """What the check knows from the configuration (the stack's outputs arrive as variables)."""
    return {
        "STAGE": stage_id,
        "TARGET_ACCOUNT": config.account,
        "TARGET_REGION": config.region,
        "EXPECTED_CLUSTER_NAME": config.name,
        "CHECK_ROLE_ARN": check_role_arn,
        # name:EFA interfaces per instance, for each Trainium node group
        "TRAINIUM_NODE_GROUPS": " ".join(
            f"{group.name}:{group.instance.efa_interfaces}" for group in config.trainium.node_groups
        ),
        "MIN_TRAINIUM_NODES": str(sum(group.min_size for group in config.trainium.node_groups)),
        # CodeBuild has no route to a private-only API server (it runs in the tooling account).
        "CHECK_KUBERNETES": "true" if config.cluster.endpoint_public_cidrs else "false",
        "DEVICE_WAIT_SECONDS": str(DEVICE_WAIT_SECONDS),
    }


# The post-deployment check. Runs in a subshell with bash's strict mode: the first failing command
# fails the CodeBuild action. @NAME@ placeholders are filled from the constants above.
_DEPLOYMENT_CHECK = r"""(
set -euo pipefail
echo "Deployment check of ${STAGE}: ${EXPECTED_CLUSTER_NAME} in ${TARGET_ACCOUNT} ${TARGET_REGION}"

# 1. The stack's outputs reached the pipeline.
for output in @OUTPUTS@; do
  if [ -z "${!output:-}" ]; then echo "FAIL: the stack output behind ${output} is empty"; exit 1; fi
done
if [ "${CLUSTER_NAME}" != "${EXPECTED_CLUSTER_NAME}" ]; then
  echo "FAIL: ClusterName is ${CLUSTER_NAME}, the configuration says ${EXPECTED_CLUSTER_NAME}"; exit 1
fi

# 2. The stage's read-only check role (constructs_trn/deployment_check_role.py).
credentials=$(aws sts assume-role --role-arn "${CHECK_ROLE_ARN}" \
  --role-session-name "${STAGE}-deployment-check" --query Credentials --output json)
AWS_ACCESS_KEY_ID=$(jq -r .AccessKeyId <<<"${credentials}")
AWS_SECRET_ACCESS_KEY=$(jq -r .SecretAccessKey <<<"${credentials}")
AWS_SESSION_TOKEN=$(jq -r .SessionToken <<<"${credentials}")
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN
export AWS_REGION="${TARGET_REGION}" AWS_DEFAULT_REGION="${TARGET_REGION}"

# 3. The cluster and each Trainium node group are active and healthy.
status=$(aws eks describe-cluster --name "${CLUSTER_NAME}" --query cluster.status --output text)
if [ "${status}" != ACTIVE ]; then echo "FAIL: cluster ${CLUSTER_NAME} is ${status}"; exit 1; fi
for group in ${TRAINIUM_NODE_GROUPS}; do
  name="${group%%:*}"; interfaces="${group##*:}"
  state=$(aws eks describe-nodegroup --cluster-name "${CLUSTER_NAME}" --nodegroup-name "${name}" \
    --query '[nodegroup.status, length(nodegroup.health.issues || `[]`)]' --output text)
  read -r status issues <<<"${state}"
  if [ "${status}" != ACTIVE ] || [ "${issues}" != 0 ]; then
    echo "FAIL: node group ${name} is ${status} with ${issues} health issues"; exit 1
  fi
  # 4. Every running Trainium instance has one EFA interface per network card.
  instances=$(aws ec2 describe-instances \
    --filters "Name=tag:eks:cluster-name,Values=${CLUSTER_NAME}" "Name=tag:eks:nodegroup-name,Values=${name}" \
    Name=instance-state-name,Values=running \
    --query 'Reservations[].Instances[].[InstanceId, length(NetworkInterfaces[?InterfaceType==`efa` || InterfaceType==`efa-only`])]' \
    --output text)
  while read -r instance count; do
    if [ -z "${instance}" ]; then continue; fi
    if [ "${count}" != "${interfaces}" ]; then
      echo "FAIL: ${instance} (${name}) has ${count} EFA interfaces, expected ${interfaces}"; exit 1
    fi
    echo "ok: ${instance} (${name}) has ${count} EFA interfaces"
  done <<<"${instances}"
done

# 5. Every Trainium node is Ready and advertises its Neuron devices and EFA interfaces.
if [ "${CHECK_KUBERNETES}" != true ]; then
  echo "Neuron and EFA allocatable not checked: the API endpoint of ${CLUSTER_NAME} is private"
  exit 0
fi
cluster=$(aws eks describe-cluster --name "${CLUSTER_NAME}" \
  --query 'cluster.[endpoint, certificateAuthority.data]' --output text)
read -r endpoint authority <<<"${cluster}"
base64 -d <<<"${authority}" > cluster-ca.crt
deadline=$((SECONDS + DEVICE_WAIT_SECONDS))
while true; do
  token=$(aws eks get-token --cluster-name "${CLUSTER_NAME}" --output json | jq -r .status.token)
  if ! nodes=$(curl --silent --show-error --fail --max-time 30 --cacert cluster-ca.crt \
      -H "Authorization: Bearer ${token}" "${endpoint}/api/v1/nodes?labelSelector=@SELECTOR@"); then
    echo "FAIL: cannot list nodes at ${endpoint}: cluster.endpoint_public_cidrs must admit the tooling region's CodeBuild"
    exit 1
  fi
  jq -r '.items[] | [.metadata.name, .metadata.labels["@GROUP_LABEL@"],
    "neuron=\(.status.allocatable["@NEURON@"] // "none")/\(.metadata.labels["@NEURON_LABEL@"])",
    "efa=\(.status.allocatable["@EFA@"] // "none")/\(.metadata.labels["@EFA_LABEL@"])"] | @tsv' <<<"${nodes}"
  if jq -e --argjson minimum "${MIN_TRAINIUM_NODES}" '[.items[] | {
      ready: any(.status.conditions[]?; .type == "Ready" and .status == "True"),
      neuron: .status.allocatable["@NEURON@"], want_neuron: .metadata.labels["@NEURON_LABEL@"],
      efa: .status.allocatable["@EFA@"], want_efa: .metadata.labels["@EFA_LABEL@"]}]
    | length >= $minimum and all(.[]; .ready and .neuron == .want_neuron and .efa == .want_efa)' \
    <<<"${nodes}" >/dev/null; then
    echo "ok: every Trainium node is Ready and advertises its Neuron devices and EFA interfaces"; exit 0
  fi
  if [ "${SECONDS}" -ge "${deadline}" ]; then
    echo "FAIL: after ${DEVICE_WAIT_SECONDS}s fewer than ${MIN_TRAINIUM_NODES} Trainium nodes are Ready, or one lacks its devices"
    exit 1
  fi
  sleep 30
done
)"""


def deployment_check_script() -> str:
    """The post-deployment check as one CodeBuild command (a multi-line bash subshell)."""
    script = _DEPLOYMENT_CHECK
    for placeholder, value in {
        "@OUTPUTS@": " ".join(CHECK_OUTPUTS),
        "@SELECTOR@": NODE_GROUP_LABEL.replace("/", "%2F"),
        "@GROUP_LABEL@": NODE_GROUP_LABEL,
        "@NEURON_LABEL@": NEURON_DEVICES_LABEL,
        "@EFA_LABEL@": EFA_INTERFACES_LABEL,
        "@NEURON@": NEURON_RESOURCE,
        "@EFA@": EFA_RESOURCE,
    }.items():
        script = script.replace(placeholder, value)
    return script
