#!/bin/bash
# One worker pod of a training run (the Volcano Job of k8s_charts/training_run.py): wait for the
# run's data sets, check its code, take this replica's compile cache, precompile once per run,
# then exec the launcher it is given as arguments, resuming from the run's newest checkpoint.
#
# Arguments: the launcher's argv (python3 -m torch.distributed.run ... --rdzv_id <id> ... script ...).
# Environment (the run's Job sets every one; Kubernetes has expanded $(VAR) references in them):
#   VC_TASK_INDEX          this replica's index, from Volcano's env plugin
#   NODES                  replicas of the run
#   RUN_ID                 the run's name and hash; OUTPUT_DIR is the run's own directory
#   REQUIRED_MARKERS       the data sets this run needs, one "MARKER VERSION" line each: the .staged
#                          file and what the staging job wrote in it (the version's identity and
#                          the archive's SHA-256, k8s_charts/dataset_staging.py)
#   STAGING_ATTEMPTS       failed staging attempts after which a data set has failed for good
#   HEARTBEAT_STALE_SECONDS  a staging heartbeat older than this with no attempt alive means failure
#   WAIT_TIMEOUT_SECONDS   the longest this pod waits for a data set at all
#   VERIFY_FILES           "sha256  path" lines (sha256sum -c format) checked before anything runs
#   RUN_SCRIPT             the script the launcher runs; its directory may hold no importable file
#                          that VERIFY_FILES does not check (Python imports from there first). When
#                          VERIFY_FILES checks it, the launcher runs a copy on the pod's own disk
#                          (LOCAL_CODE_DIR, default /tmp/run-code), checked there
#   LOCAL_CODE_DIR         where that copy goes: the container's own file system, which no other pod writes
#   PYTHON_REQUIREMENTS    pip requirement lines with --hash, installed under PYTHON_TARGET
#   PYTHON_TARGET          a directory local to the pod; the packages go to <hash of the list>/site,
#                          put first on PYTHONPATH, with a manifest of every installed file's SHA-256
#   VC_JOB_GROUP, VC_JOB_VERSION  the job's identity and attempt, from Volcano's pod annotations
#                          (downward API; empty when the annotation is missing)
#   NODE_NAME              the pod's node (downward API): recorded per attempt under $OUTPUT_DIR/attempts
#   RDZV_ID                this attempt's rendezvous id (recorded as the cache's holder)
#   NEURON_CACHE_ROOT, CACHESET   this replica's cache is $NEURON_CACHE_ROOT/${CACHESET}_$VC_TASK_INDEX
#   CACHE_LOCK_TIMEOUT_SECONDS    how long to wait for that cache's lock: longer than Lustre takes to
#                          evict a dead client (and so release a lost node's lock). Past it, a lock
#                          this run's own earlier attempt holds (a lost node) is left behind and
#                          this attempt compiles into a cache of its own; another run's is refused
#   PRECOMPILE_ARGS        empty: no precompile phase; else appended to the launcher, which runs
#                          under neuron_parallel_compile until every replica's cache holds COMPILE_KEY
#   COMPILE_KEY            what the run's graphs depend on (k8s_charts/training_run.compile_key): a
#                          run whose key every replica's cache has precompiled skips the precompile
#   RESUME_GLOB, RESUME_ARGS      when $OUTPUT_DIR holds a file matching RESUME_GLOB, RESUME_ARGS
#                          are appended to the launcher: a retry resumes from its checkpoints
#   CANNOT_PROCEED_EXIT_CODE      exit code for "nothing a retry can fix"; the Job's policy ends
#                          the job on it instead of restarting it
#   TERMINATION_LOG        unset in pods (the kubelet's /dev/termination-log); tests point it elsewhere
#   HEARTBEAT_SECONDS      (optional, 60) how often a line says that the Neuron compiler is at work
#                          during precompile: the gang watchdog ends a run whose log stays silent
#                          (k8s_charts/scripts/stuck_runs.py), and a long compile prints little
set -euo pipefail

# cannot_proceed REASON: say why (also in the pod's termination message) and end the job.
cannot_proceed() {
  echo "cannot proceed: $1" >&2
  echo "$1" > "${TERMINATION_LOG:-/dev/termination-log}" 2>/dev/null || true
  exit "$CANNOT_PROCEED_EXIT_CODE"
}

# Volcano's env plugin sets VC_TASK_INDEX; its controller writes the job's identity and attempt on
# every pod. Without them every attempt would fail the same way: no retry can fix the Job.
if [ -z "${VC_TASK_INDEX:-}" ]; then
  cannot_proceed "VC_TASK_INDEX is not set: the Job needs Volcano's env plugin (spec.plugins.env)"
fi
if [ -z "${VC_JOB_GROUP:-}" ]; then
  cannot_proceed "VC_JOB_GROUP is empty: the pod lacks Volcano's scheduling.k8s.io/group-name annotation"
fi
if [ -z "${VC_JOB_VERSION:-}" ]; then
  cannot_proceed "VC_JOB_VERSION is empty: the pod lacks Volcano's volcano.sh/job-version annotation"
fi

# wait_for_dataset MARKER: until the data set is staged; give up at once when staging failed.
wait_for_dataset() {
  local marker=$1 failures="$1.failures" heartbeat="$1.heartbeat" deadline=$((SECONDS + WAIT_TIMEOUT_SECONDS))
  local failed age
  until [ -e "$marker" ]; do
    failed=$(wc -l < "$failures" 2>/dev/null || echo 0)
    if [ "$failed" -ge "$STAGING_ATTEMPTS" ]; then
      cannot_proceed "staging failed $failed times: $(tail -n 1 "$failures")"
    fi
    if [ -e "$heartbeat" ]; then
      age=$(( $(date +%s) - $(stat -c %Y "$heartbeat") ))
      if [ "$age" -gt "$HEARTBEAT_STALE_SECONDS" ] && [ "$failed" -gt 0 ]; then
        cannot_proceed "staging stopped ${age}s ago after $failed failed attempt(s): $(tail -n 1 "$failures")"
      fi
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      cannot_proceed "gave up after ${WAIT_TIMEOUT_SECONDS}s waiting for $marker"
    fi
    echo "waiting for $marker"
    sleep 15
  done
}

# tree_manifest DIR: every entry under DIR, sorted: "<sha256>  ./path" for a file, "<type>  ./path"
# for anything else (d directory, l symbolic link, ...). Any change, addition or removal shows.
tree_manifest() {
  (
    cd "$1"
    find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
    find . ! -type f -printf '%y  %p\n' | LC_ALL=C sort
  )
}

# install_packages: the run's packages, installed by pip with --require-hashes (every wheel is the
# one the configuration names), into a directory named after the list, with a manifest of what pip
# wrote. Returns the tree in $site. The manifest is written last: a directory without one is an
# interrupted install, redone from scratch. Every attempt checks the tree against its manifest
# before anything imports from it, so a tree changed after it was checked is refused, not used.
install_packages() {
  local key dir manifest
  key=$(sha256sum <<<"$PYTHON_REQUIREMENTS" | cut -c 1-16)
  dir="$PYTHON_TARGET/$key"
  site="$dir/site"
  manifest="$dir/manifest.sha256"
  if [ ! -e "$manifest" ]; then
    if [ -e "$dir" ]; then chmod -R u+w "$dir" && rm -rf "$dir"; fi
    mkdir -p "$site"
    if ! python3 -m pip install --quiet --no-deps --require-hashes --no-cache-dir --target "$site" \
        -r /dev/stdin <<<"$PYTHON_REQUIREMENTS"; then
      cannot_proceed "the run's Python packages do not install with their hashes"
    fi
    # Read-only from here: Python cannot drop new bytecode into it, nothing writes it by accident.
    chmod -R a-w "$site"
    tree_manifest "$site" > "$manifest.partial"
    mv "$manifest.partial" "$manifest"
  fi
  local changed
  if ! changed=$(diff "$manifest" <(tree_manifest "$site")); then
    changed=$(grep -m 1 '^[<>]' <<<"$changed" | sed 's/^[<>] [^ ]*  //')
    cannot_proceed "installed Python package file $site/${changed#./} does not match the manifest written at install"
  fi
}

while read -r marker version; do
  [ -n "$marker" ] || continue
  wait_for_dataset "$marker"
  # The staging job writes the version it staged into the marker. A full re-hash of the data set
  # per attempt is not done: it is tens of GB on every node of every attempt, read from the
  # shared file system, and the archive's checksum covers the stream, not the unpacked files. The
  # data sets are mounted read-only here and, under root squash, writable only by the platform.
  staged=$(head -n 1 "$marker")
  if [ "$staged" != "$version" ]; then
    cannot_proceed "data set marker $marker records '$staged', the configuration expects '$version'"
  fi
done <<<"$REQUIRED_MARKERS"
if [ -n "$VERIFY_FILES" ] && ! failed=$(sha256sum --check --strict --quiet <<<"$VERIFY_FILES" 2>&1); then
  cannot_proceed "checksum mismatch: $(head -n 1 <<<"$failed")"
fi
# sys.path[0] is the script's directory: an unchecked module or bytecode beside the script would be
# imported before the image's or the run's packages.
if [ -n "${RUN_SCRIPT:-}" ] && [ -d "$(dirname "$RUN_SCRIPT")" ]; then
  while IFS= read -r -d '' candidate; do
    if ! grep -qxF -- "$candidate" <<<"$(cut -d ' ' -f 3- <<<"$VERIFY_FILES")"; then
      cannot_proceed "unchecked importable file $candidate beside the script"
    fi
  done < <(find "$(dirname "$RUN_SCRIPT")" -mindepth 1 -maxdepth 1 \
             \( -name '*.py' -o -name '*.pyc' -o -name '*.so' -o -name '*.pth' -o -name __pycache__ \) -print0)
fi
# A checked script on the shared file system runs from a copy on this pod's own disk, checked again
# there: the shared copy could change between the check above and its use (minutes apart with a
# precompile phase). Its checked neighbours (modules it imports) are copied with it.
if [ -n "${RUN_SCRIPT:-}" ] && cut -d ' ' -f 3- <<<"$VERIFY_FILES" | grep -qxF -- "$RUN_SCRIPT"; then
  local_code=${LOCAL_CODE_DIR:-/tmp/run-code}
  rm -rf "$local_code" && mkdir -p "$local_code"
  copies=""
  while read -r sum path; do
    if [ -n "$path" ] && [ "$(dirname "$path")" = "$(dirname "$RUN_SCRIPT")" ]; then
      cp -- "$path" "$local_code/"
      copies+="$sum  $local_code/$(basename "$path")"$'\n'
    fi
  done <<<"$VERIFY_FILES"
  if ! failed=$(sha256sum --check --strict --quiet <<<"$copies" 2>&1); then
    cannot_proceed "checksum mismatch of the local copy: $(head -n 1 <<<"$failed")"
  fi
  launcher=()
  for argument in "$@"; do
    if [ "$argument" = "$RUN_SCRIPT" ]; then argument="$local_code/$(basename "$RUN_SCRIPT")"; fi
    launcher+=("$argument")
  done
  set -- "${launcher[@]}"
  echo "running the checked copy $local_code/$(basename "$RUN_SCRIPT") of $RUN_SCRIPT"
fi
if [ -n "$PYTHON_REQUIREMENTS" ]; then
  install_packages
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi

# This replica's compile cache, held for the pod's whole life: two runs never write one cache.
# The lock is a Lustre flock: a holder that dies with its node keeps it until the file system
# evicts that client. The holder's record says whose it is.
cache_dir="$NEURON_CACHE_ROOT/${CACHESET}_${VC_TASK_INDEX}"
mkdir -p "$cache_dir" "$OUTPUT_DIR"
exec {cache_lock}>"$cache_dir.lock"
# The wait is announced, so that the stuck-run guard (k8s_charts/scripts/stuck_runs.py) hears from
# a pod that waits in silence.
if flock --nonblock "$cache_lock" || {
  echo "waiting up to ${CACHE_LOCK_TIMEOUT_SECONDS}s for another holder to release the compile cache $cache_dir"
  flock --wait "$CACHE_LOCK_TIMEOUT_SECONDS" "$cache_lock"
}; then
  printf '%s %s %s\n' "$RUN_ID" "$RDZV_ID" "${HOSTNAME:-}" > "$cache_dir.holder"
else
  read -r holder_run holder_attempt holder_host < "$cache_dir.holder" 2>/dev/null || true
  if [ "${holder_run:-}" != "$RUN_ID" ]; then
    cannot_proceed "another run (${holder_run:-unknown}) holds the compile cache $cache_dir"
  fi
  # This run's own earlier attempt: a lost node whose lock outlived it. Training goes on with a
  # cache of this attempt's own (compiled again), never with two writers on one cache.
  exec {cache_lock}>&-
  echo "the compile cache $cache_dir is still locked by ${holder_attempt:-an earlier attempt} on ${holder_host:-a lost node} after ${CACHE_LOCK_TIMEOUT_SECONDS}s: compiling into a cache of this attempt's own" >&2
  cache_dir="$cache_dir.unshared/$RDZV_ID"
  mkdir -p "$cache_dir"
fi
export NEURON_CC_FLAGS="--cache_dir=$cache_dir"

# Precompile once per graph key and cache: skipped only when every replica's cache of this
# cacheset records this COMPILE_KEY (a retry, or a new run of the same graphs), so that all
# replicas take the same decision and meet in the same rendezvous. A marker is written only after
# a replica's precompile succeeded, which is after every replica has decided.
if [ -n "$PRECOMPILE_ARGS" ]; then
  done_count=0
  for ((replica = 0; replica < NODES; replica++)); do
    if [ -e "$NEURON_CACHE_ROOT/${CACHESET}_${replica}.precompiled/$COMPILE_KEY" ]; then
      done_count=$((done_count + 1))
    fi
  done
  if [ "$done_count" -lt "$NODES" ]; then
    # torchrun closes a rendezvous when it exits: the precompile run takes an id of its own.
    precompile=()
    previous=""
    for argument in "$@"; do
      if [ "$previous" = --rdzv_id ]; then argument="$argument-precompile"; fi
      precompile+=("$argument")
      previous=$argument
    done
    read -r -a extra <<<"$PRECOMPILE_ARGS"
    # A line a minute while the compiler works (a compile can be quiet for longer than the
    # watchdog's limit); nothing while no compiler runs, so a hung trial run still shows as silent.
    # The loop must not hold the cache lock: its sleep outlives a kill of the subshell, and a
    # lock still held after the pod's work ends would stall the next attempt or run.
    (
      exec {cache_lock}>&-
      while sleep "${HEARTBEAT_SECONDS:-60}"; do
        # The bracket keeps the pattern from matching this script's own command line.
        compilers=$(pgrep -c -f '[n]euronx-cc' || true)
        if [ "${compilers:-0}" -gt 0 ]; then echo "precompile: $compilers Neuron compiler processes at work"; fi
      done
    ) &
    heartbeat=$!
    status=0
    neuron_parallel_compile "${precompile[@]}" "${extra[@]}" || status=$?
    kill "$heartbeat" 2>/dev/null || true
    if [ "$status" -ne 0 ]; then exit "$status"; fi
    mkdir -p "$cache_dir.precompiled"
    touch "$cache_dir.precompiled/$COMPILE_KEY"
  else
    echo "every replica's compile cache holds graph key $COMPILE_KEY: skipping neuron_parallel_compile"
  fi
fi

# One line per attempt and replica, as the launcher starts, for the cluster's dashboard
# (cluster_facts/log_lines.py holds its pattern): the attempt (Volcano's job version: the number of
# restarts before it), whether this replica's node ran none of the previous attempt's replicas (a
# replaced node), the checkpoint it resumes from, and what the restart cost: the time since that
# checkpoint was written, or since the run's first attempt started when there is none.
attempts="$OUTPUT_DIR/attempts"
mkdir -p "$attempts"
printf '%s\n' "${NODE_NAME:-unknown}" > "$attempts/v$VC_JOB_VERSION-replica-$VC_TASK_INDEX"
node_changed=0
lost_seconds=0
resume_step=none
if [[ "$VC_JOB_VERSION" =~ ^[1-9][0-9]*$ ]]; then
  previous=("$attempts"/v$((VC_JOB_VERSION - 1))-replica-*)
  if [ -e "${previous[0]}" ] && ! grep -qxF -- "${NODE_NAME:-unknown}" "${previous[@]}"; then
    node_changed=1
  fi
  since=$(find "$attempts" -maxdepth 1 -name 'v0-replica-*' -printf '%T@\n' | sort -n | sed -n 1p)
  if [ -n "$RESUME_GLOB" ]; then
    newest=$(find "$OUTPUT_DIR" -maxdepth 1 -name "$RESUME_GLOB" -printf '%T@ %f\n' | sort -n | tail -n 1)
    if [ -n "$newest" ]; then
      since=${newest%% *}
      digits=${newest#* }
      digits=${digits//[^0-9]/}
      resume_step=${digits:-none}
    fi
  fi
  if [ -n "$since" ]; then lost_seconds=$(( $(date +%s) - ${since%.*} )); fi
fi
echo "TRAINIUM_ATTEMPT run=$RUN_ID attempt=$VC_JOB_VERSION replica=$VC_TASK_INDEX node_changed=$node_changed resume_step=$resume_step lost_seconds=$lost_seconds"

launcher=("$@")
if [ -n "$RESUME_GLOB" ] && compgen -G "$OUTPUT_DIR/$RESUME_GLOB" >/dev/null; then
  read -r -a resume <<<"$RESUME_ARGS"
  echo "resuming $RUN_ID from $OUTPUT_DIR"
  launcher+=("${resume[@]}")
fi
exec "${launcher[@]}"
