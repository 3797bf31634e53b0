#!/bin/bash
# The post-deployment check of one pipeline stage (cluster_plan/deployment_check.py). It runs in CodeBuild
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
#   FABRIC_CHECK             true: run each group's fabric check after the node checks
#   FABRIC_CHECK_JOBS        the checks' Volcano Job files (JSON), relative to the synth output
#   FABRIC_CHECK_NAMESPACE   where the checks run; FABRIC_CHECK_SKIPPED "job: reason" lines
#   FABRIC_CHECK_WAIT_SECONDS   how long one check may take to end (nodes, then the pods' deadline)
#   FABRIC_CHECK_POLL_SECONDS   (optional) how often to look, 30 by default
#   CANARY                   true: run the canary (make canary) before the fabric checks
#   CANARY_SOURCE            the pipeline's checkout (a folder beside the synth output)
#   CANARY_CONFIG            the stage's environment file, relative to the checkout
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
# send METHOD PATH DATA: a write; DATA is JSON, or @file.
send() {
  local token
  token=$(aws eks get-token --cluster-name "${CLUSTER_NAME}" --output json | jq -r .status.token)
  curl --silent --show-error --fail --max-time 30 --cacert cluster-ca.crt -X "$1" \
    -H "Authorization: Bearer ${token}" -H "Content-Type: application/json" --data-binary "$3" "${endpoint}$2"
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
    break
  fi
  if [ "${SECONDS}" -ge "${deadline}" ]; then
    echo "FAIL: after ${DEVICE_WAIT_SECONDS}s fewer than ${MIN_TRAINIUM_NODES} Trainium nodes are Ready, or one lacks its devices"
    exit 1
  fi
  sleep 30
done

# 7. The canary (the pipeline file's waves[].environments[].canary): a run of the first team through
# every stage, from scale-up to scale-down (docs/health.md). make installs the project's Python
# environment from the hashed lock, then runs the canary with the stage's environment file. Its
# kubeconfig signs each token by assuming the check role afresh with CodeBuild's own credentials:
# the session assumed above is a role chain, which lasts at most an hour, and the canary may run
# longer; so the exported session is left out of the canary's environment.
if [ "${CANARY:-false}" = true ]; then
  kubeconfig="${PWD}/canary-kubeconfig"
  aws eks update-kubeconfig --name "${CLUSTER_NAME}" --role-arn "${CHECK_ROLE_ARN}" \
    --kubeconfig "${kubeconfig}" >/dev/null
  echo "Canary of ${STAGE}: make canary CONFIG=${CANARY_CONFIG}"
  status=0
  env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN KUBECONFIG="${kubeconfig}" \
    make -C "${CANARY_SOURCE}" canary CONFIG="${CANARY_CONFIG}" 2>&1 | tee canary.log || status=$?
  if [ "${status}" -ne 0 ]; then
    echo "FAIL: $(grep -m 1 '^CANARY FAIL at ' canary.log || echo "the canary did not run: $(tail -n 1 canary.log)")"
    exit 1
  fi
  echo "ok: the canary passed every stage"
else
  echo "Canary not run (waves[].environments[].canary is false for ${STAGE})"
fi

# 8. The fabric check of each group (fabric_check.pipeline): collectives over EFA at EFA speed. Its
# pending pods make the autoscaler bring the group's nodes; once the job ends they go again.
if [ "${FABRIC_CHECK:-false}" != true ]; then
  echo "Fabric check not run (fabric_check.pipeline is false; make fabric-check prints how to run it)"
  exit 0
fi
while IFS= read -r skipped; do
  if [ -n "${skipped}" ]; then echo "Fabric check skipped: ${skipped}"; fi
done <<<"${FABRIC_CHECK_SKIPPED:-}"
jobs_path="/apis/batch.volcano.sh/v1alpha1/namespaces/${FABRIC_CHECK_NAMESPACE}/jobs"
pods_path="/api/v1/namespaces/${FABRIC_CHECK_NAMESPACE}/pods"
poll="${FABRIC_CHECK_POLL_SECONDS:-30}"
for file in ${FABRIC_CHECK_JOBS}; do
  job=$(jq -r .metadata.name "${file}")
  # A Volcano Job's spec cannot change: the last run goes first, with its pods (same names).
  send DELETE "${jobs_path}/${job}" '{"propagationPolicy": "Foreground"}' >/dev/null 2>&1 || true
  deadline=$((SECONDS + 300))
  while get "${jobs_path}/${job}" >/dev/null 2>&1; do
    if [ "${SECONDS}" -ge "${deadline}" ]; then echo "FAIL: the last run of ${job} was not deleted within 300s"; exit 1; fi
    sleep "${poll}"
  done
  if ! send POST "${jobs_path}" "@${file}" >/dev/null; then echo "FAIL: cannot create ${job} in ${FABRIC_CHECK_NAMESPACE}"; exit 1; fi
  echo "${job}: created; waiting up to ${FABRIC_CHECK_WAIT_SECONDS}s for nodes and the verdict"
  deadline=$((SECONDS + FABRIC_CHECK_WAIT_SECONDS))
  while :; do
    phase=$(get "${jobs_path}/${job}" | jq -r '.status.state.phase // "Pending"') || phase=unknown
    case "${phase}" in Completed | Terminated | Failed | Aborted) break ;; esac
    if [ "${SECONDS}" -ge "${deadline}" ]; then
      echo "FAIL: ${job} did not end within ${FABRIC_CHECK_WAIT_SECONDS}s (phase ${phase}): nodes not brought up, or the check hung"
      exit 1
    fi
    sleep "${poll}"
  done
  launcher="${job}-launcher-0"
  # The table and the verdict: the end of the launcher's log.
  get "${pods_path}/${launcher}/log?tailLines=60" | sed -n '/^nccom-test result table:/,$p' || true
  verdict=$(get "${pods_path}/${launcher}" | jq -r '.status.containerStatuses[0].state.terminated.message // ""' | tail -n 1) || verdict=""
  case "${verdict}" in
    "FABRIC CHECK PASS: "*) echo "ok: ${job}: ${verdict}" ;;
    *) echo "FAIL: ${job} ended ${phase}: ${verdict:-no verdict (kubectl -n ${FABRIC_CHECK_NAMESPACE} logs ${launcher})}"; exit 1 ;;
  esac
done
