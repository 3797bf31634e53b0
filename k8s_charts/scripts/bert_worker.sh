#!/bin/bash
# One worker pod of a BERT run (the Volcano Jobs of k8s_charts/bert_jobs.py): wait for what this
# phase needs, set up this replica's compile cache and the Python packages the pinned script
# needs, then run the launcher it is given as arguments.
#
# Arguments: the launcher's argv (python3 -m torch.distributed.run ...), passed on as "$@".
# Environment:
#   PHASE                  precompile: run the launcher under neuron_parallel_compile, then mark
#                          this replica's cache compiled; train: wait for that mark, then exec it.
#   VC_TASK_INDEX          this replica's index, from Volcano's env plugin; replica N of both
#                          phases uses the same cache directory.
#   REQUIRED_FILES         space-separated paths the staging job writes; waited for first.
#   NEURON_CACHE_ROOT, CACHESET   the cache is $NEURON_CACHE_ROOT/${CACHESET}_$VC_TASK_INDEX.
#   PYTHON_PACKAGES_DIR    a pip --target directory on FSx, installed once and put on PYTHONPATH.
#   PYTHON_REQUIREMENTS    space-separated pinned requirements that go into it.
#   WAIT_TIMEOUT_SECONDS   how long to wait for each prerequisite.
set -eu
# VC_TASK_INDEX (0..replicas-1) comes from Volcano's env plugin; the same index in both
# phases means the same cache directory.
: "${VC_TASK_INDEX:?not set: is the Volcano env plugin enabled?}"
wait_for() {
  local deadline=$((SECONDS + WAIT_TIMEOUT_SECONDS))
  until [ -e "$1" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then echo "gave up waiting for $2 ($1)" >&2; exit 1; fi
    echo "waiting for $2 ($1)"; sleep 30
  done
}
for file in $REQUIRED_FILES; do
  wait_for "$file" "the data staging job"
done
cache_dir="$NEURON_CACHE_ROOT/${CACHESET}_${VC_TASK_INDEX}"
if [ "$PHASE" = train ]; then
  wait_for "$cache_dir.precompiled" "the precompile job (replica $VC_TASK_INDEX)"
fi
if [ ! -e "$PYTHON_PACKAGES_DIR/.complete" ]; then
  mkdir -p "$PYTHON_PACKAGES_DIR"
  # Every pod of every job shares the directory: one installs, under a lock, the others wait.
  # shellcheck disable=SC2016 # $0 and $1 belong to the inner bash.
  flock "$PYTHON_PACKAGES_DIR.lock" bash -c '[ -e "$0/.complete" ] || { python3 -m pip install --quiet --no-deps --target "$0" $1 && touch "$0/.complete"; }' "$PYTHON_PACKAGES_DIR" "$PYTHON_REQUIREMENTS"
fi
export PYTHONPATH="$PYTHON_PACKAGES_DIR${PYTHONPATH:+:$PYTHONPATH}"
export NEURON_CC_FLAGS="--cache_dir=$cache_dir"
if [ "$PHASE" = precompile ]; then
  neuron_parallel_compile "$@"
  touch "$cache_dir.precompiled"
else
  exec "$@"
fi
