#!/bin/sh
# shellcheck shell=busybox
# Stage one version of a data set on the shared FSx volume (the Job of k8s_charts/dataset_staging.py).
# POSIX sh: it runs under busybox ash in the alpine image.
#
# Arguments: the files to fetch, as triples URL SHA256 DESTINATION (absolute paths). A file:// URL is
# a local file: an s3:// source that the Job's fetch container copied there (aws s3 cp) first.
# Environment:
#   DATASET_NAME        for messages
#   DATASET_DIR         this version's directory; emptied, then the archive unpacks into it
#   MARKER              beside DATASET_DIR, written last, once everything is in place and verified
#   STAGED_VERSION      the marker's first line: the version's identity and the archive checksum
#                       it was verified against; training pods refuse a marker without it
#   ARCHIVE_URL         optional: a tar streamed into DATASET_DIR
#   ARCHIVE_SHA256      optional: the archive's checksum, verified while it streams
#
# What waiting training pods read (k8s_charts/scripts/run_worker.sh): MARKER once staged;
# MARKER.failures, one line per failed attempt with its reason; MARKER.heartbeat, touched every
# 30 s while an attempt runs, so that a staging pod killed without a word is noticed too.
set -eu
set -o pipefail

failures="$MARKER.failures"
heartbeat="$MARKER.heartbeat"
heartbeat_pid=""
reason="cannot create $DATASET_DIR"

finish() {
  status=$?
  if [ -n "$heartbeat_pid" ]; then kill "$heartbeat_pid" 2>/dev/null || true; fi
  if [ "$status" -ne 0 ]; then
    # Where the record cannot be written (the layout has not handed the directory over), the log says it.
    { echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $DATASET_NAME: $reason (exit $status)" >> "$failures"; } 2>/dev/null || true
    echo "staging $DATASET_NAME failed: $reason" >&2
  fi
}
trap finish EXIT
trap 'reason="terminated (deadline, eviction or deletion)"; exit 143' TERM INT

if [ -e "$MARKER" ] && [ "$(head -n 1 "$MARKER")" = "$STAGED_VERSION" ]; then
  echo "$DATASET_NAME: already staged in $DATASET_DIR"
  exit 0
fi
# This Job runs as the platform's uid, never root; the layout Job hands /datasets to it (once,
# recursively, from root on a file system staged before). Until it has, wait: a failed attempt
# would count against the data set.
versions=$(dirname "$MARKER")
waited=0
until mkdir -p "$versions" 2>/dev/null && [ -w "$versions" ]; do
  if [ "$waited" -ge "${LAYOUT_WAIT_SECONDS:-1800}" ]; then
    reason="$versions is not writable by uid $(id -u) after ${waited}s: has the fsx-layout Job run?"
    exit 1
  fi
  echo "waiting for the fsx-layout Job to hand $versions to uid $(id -u)"
  sleep 10
  waited=$((waited + 10))
done
# A marker without this version's line (an older release's empty marker) vouches for nothing.
rm -f "$MARKER"
mkdir -p "$(dirname "$MARKER")"
( while :; do touch "$heartbeat"; sleep 30; done ) >/dev/null 2>&1 &
heartbeat_pid=$!
# Whatever an earlier attempt left is redone from scratch: nothing there was verified.
rm -rf "$DATASET_DIR"
mkdir -p "$DATASET_DIR"

# download URL: its bytes on stdout (an https:// URL, or a file:// one the fetch container wrote).
download() {
  case "$1" in
    file://*) cat "${1#file://}" ;;
    *) wget -q -O - "$1" ;;
  esac
}

# fetch URL SHA256 DEST: download unless DEST already holds exactly that content.
fetch() {
  if [ -f "$3" ] && echo "$2  $3" | sha256sum -c - >/dev/null 2>&1; then
    echo "$3: up to date"
    return 0
  fi
  echo "$3: downloading $1"
  reason="cannot download $1"
  mkdir -p "$(dirname "$3")"
  download "$1" > "$3.partial"
  reason="checksum mismatch for $1 (expected $2)"
  echo "$2  $3.partial" | sha256sum -c -
  mv "$3.partial" "$3"
}

actual=""
if [ -n "${ARCHIVE_URL:-}" ]; then
  echo "$DATASET_DIR: streaming $ARCHIVE_URL"
  reason="cannot download or unpack $ARCHIVE_URL"
  # The checksum is taken from the same bytes tar reads, through a FIFO: no second copy on disk.
  sums="$MARKER.archive.sha256"
  fifo="$MARKER.archive.fifo"
  rm -f "$fifo" "$sums"
  mkfifo "$fifo"
  sha256sum < "$fifo" > "$sums" &
  sum_pid=$!
  # -o: keep the files owned by this user (the platform's uid: no file can come out root's, setuid
  # root or a device, whatever the archive says); the archive's owners mean nothing here. In the
  # background: the shell runs its TERM trap (a deadline, a deletion) only between commands, and
  # `wait` is the one that a signal interrupts.
  download "$ARCHIVE_URL" | tee "$fifo" | tar -x -o -f - -C "$DATASET_DIR" &
  wait "$!"
  wait "$sum_pid"
  actual=$(cut -d ' ' -f 1 < "$sums")
  rm -f "$fifo" "$sums"
  if [ -n "${ARCHIVE_SHA256:-}" ] && [ "$actual" != "$ARCHIVE_SHA256" ]; then
    reason="checksum mismatch for $ARCHIVE_URL (expected $ARCHIVE_SHA256, got $actual)"
    exit 1
  fi
  echo "$ARCHIVE_URL: sha256 $actual"
fi

while [ "$#" -ge 3 ]; do
  fetch "$1" "$2" "$3"
  shift 3
done
# Readable by every team's uid whatever modes the archive carried; written by nobody but this uid.
reason="cannot make $DATASET_DIR readable"
chmod -R a+rX,go-w "$DATASET_DIR"
reason="cannot write $MARKER"
# Written whole, then renamed: a reader sees no marker or the complete one.
printf '%s\n%s\n' "$STAGED_VERSION" "archive-sha256-streamed=${actual:-none}" > "$MARKER.partial"
mv "$MARKER.partial" "$MARKER"
rm -f "$failures"
echo "staging $DATASET_NAME complete"
