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
#                          that VERIFY_FILES does not check (Python imports from there first)
#   PYTHON_REQUIREMENTS    pip requirement lines with --hash, installed under PYTHON_TARGET
#   PYTHON_TARGET          a directory local to the pod; the packages go to <hash of the list>/site,
#                          put first on PYTHONPATH, with a manifest of every installed file's SHA-256
#   NEURON_CACHE_ROOT, CACHESET   this replica's cache is $NEURON_CACHE_ROOT/${CACHESET}_$VC_TASK_INDEX
#   CACHE_LOCK_TIMEOUT_SECONDS    how long to wait for another run to release that cache
#   PRECOMPILE_ARGS        empty: no precompile phase; else appended to the launcher, which runs
#                          under neuron_parallel_compile until every replica's cache holds COMPILE_KEY
#   COMPILE_KEY            what the run's graphs depend on (k8s_charts/training_run.compile_key): a
#                          run whose key every replica's cache has precompiled skips the precompile
#   RESUME_GLOB, RESUME_ARGS      when $OUTPUT_DIR holds a file matching RESUME_GLOB, RESUME_ARGS
#                          are appended to the launcher: a retry resumes from its checkpoints
#   CANNOT_PROCEED_EXIT_CODE      exit code for "nothing a retry can fix"; the Job's policy ends
#                          the job on it instead of restarting it
#   TERMINATION_LOG        unset in pods (the kubelet's /dev/termination-log); tests point it elsewhere
set -euo pipefail
: "${VC_TASK_INDEX:?not set: is the Volcano env plugin enabled?}"

# cannot_proceed REASON: say why (also in the pod's termination message) and end the job.
cannot_proceed() {
  echo "cannot proceed: $1" >&2
  echo "$1" > "${TERMINATION_LOG:-/dev/termination-log}" 2>/dev/null || true
  exit "$CANNOT_PROCEED_EXIT_CODE"
}

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
if [ -n "$PYTHON_REQUIREMENTS" ]; then
  install_packages
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi

# This replica's compile cache, held for the pod's whole life: two runs never write one cache.
cache_dir="$NEURON_CACHE_ROOT/${CACHESET}_${VC_TASK_INDEX}"
mkdir -p "$cache_dir" "$OUTPUT_DIR"
exec {cache_lock}>"$cache_dir.lock"
if ! flock --wait "$CACHE_LOCK_TIMEOUT_SECONDS" "$cache_lock"; then
  cannot_proceed "another run holds the compile cache $cache_dir"
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
    neuron_parallel_compile "${precompile[@]}" "${extra[@]}"
    mkdir -p "$cache_dir.precompiled"
    touch "$cache_dir.precompiled/$COMPILE_KEY"
  else
    echo "every replica's compile cache holds graph key $COMPILE_KEY: skipping neuron_parallel_compile"
  fi
fi

launcher=("$@")
if [ -n "$RESUME_GLOB" ] && compgen -G "$OUTPUT_DIR/$RESUME_GLOB" >/dev/null; then
  read -r -a resume <<<"$RESUME_ARGS"
  echo "resuming $RUN_ID from $OUTPUT_DIR"
  launcher+=("${resume[@]}")
fi
exec "${launcher[@]}"
