#!/bin/bash
# The launcher pod of the fabric check (k8s_charts/fabric_check.py): wait until every worker pod
# answers on the SSH port, run nccom-test's all-reduce across the workers' nodes (nccom-test starts
# the ranks on the workers through mpirun over SSH), then judge its output with fabric_verdict.py.
# The last line of the log is the verdict; it is also the container's termination message, and
# the exit status (0 PASS, non-zero FAIL) becomes the pod's and so the Volcano Job's result.
#
# Arguments: $1 the text of k8s_charts/scripts/fabric_verdict.py (run with python3 -c), $2 that
#            of fabric_taint.py and $3 that of kube_api.py (the API client it imports), written
#            into one temporary directory and run from there.
# Environment:
#   NODES, CORES_PER_NODE      nodes in the check and NeuronCores (ranks) per node.
#   VC_WORKER_HOSTS            comma-separated worker host names, from Volcano's svc plugin.
#   NETWORK_GBPS, THRESHOLD    the instance type's EFA bandwidth and the fraction to reach.
#   MIN_MESSAGE_BYTES, MAX_MESSAGE_BYTES   the sizes swept (x2 steps); the largest is judged.
#   ROOT_COMM_PORT             port of NEURON_RT_ROOT_COMM_ID on the first worker.
#   DATA_COLLECTOR_PORT, POD_IP   where nccom-test collects the workers' latencies (this pod).
#   SSH_PORT                   the port mpirun's ssh uses on the workers (22).
#   WAIT_TIMEOUT_SECONDS       how long to wait for the workers.
#   RUN_TIMEOUT_SECONDS        how long nccom-test may run.
#   TERMINATION_LOG            file for the verdict line (the kubelet reads /dev/termination-log).
#   TAINT                      key=value:Effect to put on the nodes of a failed check; unset: none.
#   POD_NAMESPACE, WORKER_PODS the check's namespace and its worker pods (comma-separated), whose
#                              nodes the taint goes on.
set -u
verdict_program=$1
taint_program=${2:-}
api_client=${3:-}
termination_log=${TERMINATION_LOG:-/dev/termination-log}

fail() {
  echo "FABRIC CHECK FAIL: $1"
  echo "FABRIC CHECK FAIL: $1" >"$termination_log" 2>/dev/null || true
  exit 1
}

verdict() {
  python3 -c "$verdict_program" --network-gbps "$NETWORK_GBPS" --threshold "$THRESHOLD" \
    --nodes "$NODES" --termination-log "$termination_log" "$@"
}

# Refuse bad inputs (fewer than 2 nodes, a threshold outside (0, 1]) before waiting for anything.
verdict --validate-only || exit $?

IFS=, read -r -a hosts <<<"${VC_WORKER_HOSTS:-}"
if [ "${#hosts[@]}" -ne "$NODES" ]; then
  fail "expected $NODES worker hosts from Volcano's svc plugin (VC_WORKER_HOSTS), got ${#hosts[@]}: '${VC_WORKER_HOSTS:-}'"
fi

# Workers start sshd once their image is pulled; Volcano publishes their DNS names before they
# are ready (--publish-not-ready-addresses), so wait for the name and then for the port.
deadline=$((SECONDS + WAIT_TIMEOUT_SECONDS))
addresses=()
for host in "${hosts[@]}"; do
  while :; do
    address=$(getent hosts "$host" | awk '{ print $1; exit }')
    # shellcheck disable=SC2016 # $0 and $1 belong to the inner bash.
    if [ -n "$address" ] && timeout 5 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$address" "$SSH_PORT" 2>/dev/null; then
      break
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      fail "worker $host (${address:-unresolved}) did not answer on port $SSH_PORT within ${WAIT_TIMEOUT_SECONDS}s"
    fi
    sleep 2
  done
  echo "worker $host is up at $address"
  addresses+=("$address")
done

log=${TMPDIR:-/tmp}/nccom-test.log
ranks=$((NODES * CORES_PER_NODE))
# The Neuron runtime's root communicator listens on the first worker (as in the nccom-test user
# guide's MPI example); this pod collects the latencies. --debug shows the ranks' logs, which hold
# the network provider each rank selected.
export NEURON_RT_ROOT_COMM_ID="${addresses[0]}:$ROOT_COMM_PORT"
echo "running nccom-test all-reduce: $ranks ranks on $NODES nodes (${addresses[*]}), $MIN_MESSAGE_BYTES to $MAX_MESSAGE_BYTES bytes"
timeout --kill-after=30 "$RUN_TIMEOUT_SECONDS" \
  nccom-test -r "$ranks" -N "$NODES" -b "$MIN_MESSAGE_BYTES" -e "$MAX_MESSAGE_BYTES" -f 2 -n 20 -w 5 -d fp32 \
  allr --hosts "${addresses[@]}" --data-collector-host "$POD_IP" --data-collector-port "$DATA_COLLECTOR_PORT" \
  --non-interactive --debug 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  fail "nccom-test did not finish within ${RUN_TIMEOUT_SECONDS}s"
fi
output=$(verdict --log "$log" --size "$MAX_MESSAGE_BYTES" --exit-status "$status")
result=$?
printf '%s\n' "$output"
if [ "$result" -ne 1 ] || [ -z "${TAINT:-}" ]; then
  exit "$result"
fi
# A failed check whose verdict implicates the nodes takes them out of training (fabric_taint.py
# decides, and prints "tainted nodes: ..." last); the verdict, with what was tainted, stays last.
line=${output##*$'\n'}
programs=$(mktemp -d)
printf '%s\n' "$taint_program" >"$programs/fabric_taint.py"
printf '%s\n' "$api_client" >"$programs/kube_api.py"
taint_output=$(python3 "$programs/fabric_taint.py" --verdict "$line" --namespace "$POD_NAMESPACE" \
  --pods "$WORKER_PODS" --taint "$TAINT" 2>&1)
printf '%s\n' "$taint_output"
tainted=${taint_output##*tainted nodes: }
if [ "$tainted" != "$taint_output" ] && [ "$tainted" != none ]; then
  line="$line; tainted $tainted with $TAINT"
fi
echo "$line"
echo "$line" >"$termination_log" 2>/dev/null || true
exit "$result"
