#!/bin/bash
# The post-deployment check of one pipeline stage (stacks/deployment_check.py). It runs in CodeBuild
# in the tooling account after the stage's TrainiumStack deploys; the first failing command fails
# the CodeBuild action. No Trainium node has to run: the groups start at min_size (0 by default) and
# the cluster autoscaler brings nodes for queued jobs, so the check proves the autoscaler could.
#
# Environment (stacks.deployment_check.deployment_check_env, and the stack's outputs):
#   STAGE, TARGET_ACCOUNT, TARGET_REGION, EXPECTED_CLUSTER_NAME, CHECK_ROLE_ARN
#   CHECK_OUTPUT_VARIABLES   the variables that carry the stack's outputs; each must be set
#   TRAINIUM_NODE_GROUPS     "name:EFA interfaces per instance" for each Trainium node group
#   TRAINIUM_TEMPLATE_TAGS   "name key=value" lines: the tags each group's Auto Scaling group must carry
#   MIN_TRAINIUM_NODES       how many Trainium nodes must be Ready with their devices (the warm nodes)
#   CHECK_KUBERNETES         true when the API server is reachable from CodeBuild
#   DEVICE_WAIT_SECONDS      how long to wait for the device plugins on new nodes
#   AUTOSCALER_NAMESPACE, AUTOSCALER_DEPLOYMENT, AUTOSCALER_STATUS_CONFIGMAP   (cluster_facts.autoscaling)
#   NODE_GROUP_LABEL, NEURON_DEVICES_LABEL, EFA_INTERFACES_LABEL   node labels (cluster_facts)
#   NEURON_RESOURCE, EFA_RESOURCE                                  extended resources (cluster_facts)
set -euo pipefail
echo "Deployment check of ${STAGE}: ${EXPECTED_CLUSTER_NAME} in ${TARGET_ACCOUNT} ${TARGET_REGION}"

# 1. The stack's outputs reached the pipeline.
for output in ${CHECK_OUTPUT_VARIABLES}; do
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
auto_scaling_groups=()
for group in ${TRAINIUM_NODE_GROUPS}; do
  name="${group%%:*}"; interfaces="${group##*:}"
  # shellcheck disable=SC2016 # backticks are JMESPath literals, not command substitution.
  state=$(aws eks describe-nodegroup --cluster-name "${CLUSTER_NAME}" --nodegroup-name "${name}" \
    --query '[nodegroup.status, length(nodegroup.health.issues || `[]`), nodegroup.resources.autoScalingGroups[0].name]' \
    --output text)
  read -r status issues asg <<<"${state}"
  if [ "${status}" != ACTIVE ] || [ "${issues}" != 0 ]; then
    echo "FAIL: node group ${name} is ${status} with ${issues} health issues"; exit 1
  fi
  auto_scaling_groups+=("${asg}")
  # 4. The autoscaler can scale the group from zero: its Auto Scaling group carries the discovery
  # tags and the node-template tags (labels, taint, Neuron and EFA devices) the stack wrote.
  # shellcheck disable=SC2016 # backticks are JMESPath literals, not command substitution.
  tags=$(aws autoscaling describe-auto-scaling-groups --auto-scaling-group-names "${asg}" \
    --query 'AutoScalingGroups[0].Tags[?starts_with(Key, `k8s.io/cluster-autoscaler/`)].[Key, Value]' \
    --output text)
  while read -r tag_group expected; do
    if [ "${tag_group}" != "${name}" ]; then continue; fi
    key="${expected%%=*}"; value="${expected#*=}"
    if ! grep -qxF "${key}"$'\t'"${value}" <<<"${tags}"; then
      echo "FAIL: Auto Scaling group ${asg} (${name}) lacks the tag ${key}=${value}: the autoscaler cannot scale it from zero"
      exit 1
    fi
  done <<<"${TRAINIUM_TEMPLATE_TAGS}"
  resources=$(grep -F 'node-template/resources/' <<<"${tags}" | sed 's|.*node-template/resources/||' | tr '\t\n' '= ' || true)
  echo "ok: ${asg} (${name}) scales from zero to nodes with ${resources% }"
  # 5. Every running Trainium instance has one EFA interface per network card.
  # shellcheck disable=SC2016 # backticks are JMESPath literals, not command substitution.
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

# 6. The autoscaler runs, is healthy and knows every Trainium group; every Trainium node that runs
# is Ready and advertises its Neuron devices and EFA interfaces.
if [ "${CHECK_KUBERNETES}" != true ]; then
  echo "Autoscaler health and Neuron and EFA allocatable not checked: the API endpoint of ${CLUSTER_NAME} is private"
  exit 0
fi
cluster=$(aws eks describe-cluster --name "${CLUSTER_NAME}" \
  --query 'cluster.[endpoint, certificateAuthority.data]' --output text)
read -r endpoint authority <<<"${cluster}"
base64 -d <<<"${authority}" > cluster-ca.crt
get() {
  local token
  token=$(aws eks get-token --cluster-name "${CLUSTER_NAME}" --output json | jq -r .status.token)
  curl --silent --show-error --fail --max-time 30 --cacert cluster-ca.crt \
    -H "Authorization: Bearer ${token}" "${endpoint}$1"
}
namespace_path="/namespaces/${AUTOSCALER_NAMESPACE}"
if ! deployment=$(get "/apis/apps/v1${namespace_path}/deployments/${AUTOSCALER_DEPLOYMENT}"); then
  echo "FAIL: cannot read the autoscaler at ${endpoint}: cluster.endpoint_public_cidrs must admit the pipeline's DeploymentCheckEgressCidr output"
  exit 1
fi
if ! jq -e '(.status.availableReplicas // 0) >= 1' <<<"${deployment}" >/dev/null; then
  echo "FAIL: the cluster autoscaler (${AUTOSCALER_NAMESPACE}/${AUTOSCALER_DEPLOYMENT}) has no available replica"; exit 1
fi
autoscaler_status=$(get "/api/v1${namespace_path}/configmaps/${AUTOSCALER_STATUS_CONFIGMAP}" | jq -r '.data.status // ""')
# The status is YAML (clusterstate/api/types.go): the first status under clusterWide.health.
health=$(awk '/^clusterWide:/ {wide=1} wide && /^ +status:/ {print $2; exit}' <<<"${autoscaler_status}")
if [ "${health}" != Healthy ]; then
  echo "FAIL: the cluster autoscaler reports ${health:-no status}, not Healthy"; exit 1
fi
for asg in "${auto_scaling_groups[@]}"; do
  if ! grep -qE "^ *- name: ${asg}\$" <<<"${autoscaler_status}"; then
    echo "FAIL: the cluster autoscaler does not list ${asg}: it will not scale that group (discovery tags?)"; exit 1
  fi
done
echo "ok: the cluster autoscaler is Healthy and scales ${auto_scaling_groups[*]}"

selector="${NODE_GROUP_LABEL//\//%2F}"
labels=(--arg group "${NODE_GROUP_LABEL}" --arg neuron_label "${NEURON_DEVICES_LABEL}"
  --arg efa_label "${EFA_INTERFACES_LABEL}" --arg neuron "${NEURON_RESOURCE}" --arg efa "${EFA_RESOURCE}")
deadline=$((SECONDS + DEVICE_WAIT_SECONDS))
while true; do
  if ! nodes=$(get "/api/v1/nodes?labelSelector=${selector}"); then
    echo "FAIL: cannot list nodes at ${endpoint}"
    exit 1
  fi
  jq -r "${labels[@]}" '.items[] | [.metadata.name, .metadata.labels[$group],
    "neuron=\(.status.allocatable[$neuron] // "none")/\(.metadata.labels[$neuron_label])",
    "efa=\(.status.allocatable[$efa] // "none")/\(.metadata.labels[$efa_label])"] | @tsv' <<<"${nodes}"
  if jq -e "${labels[@]}" --argjson minimum "${MIN_TRAINIUM_NODES}" '[.items[] | {
      ready: any(.status.conditions[]?; .type == "Ready" and .status == "True"),
      neuron: .status.allocatable[$neuron], want_neuron: .metadata.labels[$neuron_label],
      efa: .status.allocatable[$efa], want_efa: .metadata.labels[$efa_label]}]
    | length >= $minimum and all(.[]; .ready and .neuron == .want_neuron and .efa == .want_efa)' \
    <<<"${nodes}" >/dev/null; then
    echo "ok: every running Trainium node ($(jq '.items | length' <<<"${nodes}"), at least ${MIN_TRAINIUM_NODES} warm) is Ready and advertises its Neuron devices and EFA interfaces"
    exit 0
  fi
  if [ "${SECONDS}" -ge "${deadline}" ]; then
    echo "FAIL: after ${DEVICE_WAIT_SECONDS}s fewer than ${MIN_TRAINIUM_NODES} Trainium nodes are Ready, or one lacks its devices"
    exit 1
  fi
  sleep 30
done
