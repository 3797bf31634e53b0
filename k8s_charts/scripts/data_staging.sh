#!/bin/sh
# shellcheck shell=busybox
# Stage a data set and training script files on the shared FSx volume (the Job of
# k8s_charts/data_staging.py). POSIX sh: it runs under busybox ash in the alpine image.
#
# Environment, all required:
#   DATA_MOUNT                        where the claim is mounted
#   DATASET_URL, DATASET_DIR          the tarball (streamed into tar) and the directory it unpacks to
#   DATASET_MARKER                    written after a complete unpack; holds DATASET_URL
#   SCRIPT_URL, SCRIPT_SHA256, SCRIPT_PATH
#   OPTIMIZER_MODULE_URL, OPTIMIZER_MODULE_SHA256, OPTIMIZER_MODULE_PATH
set -eu
set -o pipefail

# fetch URL SHA256 DEST: download unless DEST already holds exactly that content.
fetch() {
  if [ -f "$3" ] && echo "$2  $3" | sha256sum -c - >/dev/null 2>&1; then
    echo "$3: up to date"
    return 0
  fi
  echo "$3: downloading $1"
  wget -q -O "$3.partial" "$1"
  echo "$2  $3.partial" | sha256sum -c -
  mv "$3.partial" "$3"
}

# The marker holds the URL of the last complete unpack; anything else means (re)do it.
if [ "$(cat "$DATASET_MARKER" 2>/dev/null || true)" = "$DATASET_URL" ]; then
  echo "$DATASET_DIR: already staged"
else
  echo "$DATASET_DIR: streaming $DATASET_URL"
  rm -rf "$DATASET_DIR" "$DATASET_MARKER"
  # -o: keep the files owned by this user; the archive's owners mean nothing here.
  wget -q -O - "$DATASET_URL" | tar -x -o -f - -C "$DATA_MOUNT"
  test -d "$DATASET_DIR"
  echo "$DATASET_URL" > "$DATASET_MARKER"
fi

fetch "$SCRIPT_URL" "$SCRIPT_SHA256" "$SCRIPT_PATH"
fetch "$OPTIMIZER_MODULE_URL" "$OPTIMIZER_MODULE_SHA256" "$OPTIMIZER_MODULE_PATH"
echo "staging complete"
