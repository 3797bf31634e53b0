#!/bin/sh
# shellcheck shell=sh
# Puts one file into the team's directory (the pod of `make put`, torchx_trn/put_file.py). It runs as
# the team's uid in a pod of the team's Volcano Job, with the team's claim (its directory of the file
# system) at PUT_ROOT: under Lustre's root squash only that uid may write there.
#
# The file travels in the Job itself, gzip-compressed and base64-encoded (PUT_DATA): a team member
# may create Volcano Jobs but no ConfigMap (k8s_charts/teams/namespaces.py). It is written to a temporary
# file beside the target, checked against PUT_SHA256, and renamed over the target only then: a pod
# that reads the target sees the old file or the new one, never part of either. A target that
# already holds these bytes is left alone ("unchanged").
#
# Refused, each with one line (also the pod's termination message) and nothing written:
# an empty, absolute or trailing-slash PUT_TO, any '.', '..' or empty component of it, a directory
# of it that resolves (through a symbolic link) outside PUT_ROOT, a target that is a directory,
# bytes that do not decode, and bytes whose SHA-256 is not PUT_SHA256.
#
# Environment: PUT_ROOT (the team's directory, /data in the pod), PUT_TO (the path under it),
# PUT_SHA256 (of the file's bytes), PUT_DATA (base64 of the gzip of them); TERMINATION_LOG unset in
# pods (the kubelet's /dev/termination-log), tests point it elsewhere.
# Works with busybox and with coreutils (the training image): sh, base64, gzip, sha256sum, mktemp,
# readlink -f, mv.
set -eu
umask 027

say() {
  echo "$1"
  echo "$1" > "${TERMINATION_LOG:-/dev/termination-log}" 2>/dev/null || true
}
refuse() {
  say "put refused: $1; nothing written"
  exit 1
}

case "$PUT_TO" in
  '') refuse "no target path" ;;
  /*) refuse "'$PUT_TO' is absolute: give a path relative to the team directory" ;;
  */) refuse "'$PUT_TO' ends with '/': give the file's path, not a directory" ;;
esac
set -f
old_ifs=$IFS
IFS=/
for part in $PUT_TO; do
  case "$part" in
    '' | . | ..) IFS=$old_ifs; refuse "'$PUT_TO' has a '$part' component: give a plain path inside the team directory" ;;
  esac
done
IFS=$old_ifs
set +f

root=$(readlink -f "$PUT_ROOT")
target="$root/$PUT_TO"
dir=${target%/*}
# The deepest directory that exists already must be inside the team directory (a symbolic link
# there may point anywhere), before anything is created.
existing=$dir
while [ ! -e "$existing" ] && [ ! -L "$existing" ]; do
  existing=${existing%/*}
done
inside() {
  resolved=$(readlink -f "$1") || return 1
  case "$resolved/" in
    "$root"/*) return 0 ;;
    *) return 1 ;;
  esac
}
inside "$existing" || refuse "'$PUT_TO' leads outside the team directory (a symbolic link)"
mkdir -p "$dir"
inside "$dir" || refuse "'$PUT_TO' leads outside the team directory (a symbolic link)"
[ ! -d "$target" ] || refuse "'$PUT_TO' is a directory"

if [ -f "$target" ] && [ "$(sha256sum < "$target" | cut -d ' ' -f 1)" = "$PUT_SHA256" ]; then
  say "unchanged: $PUT_TO already holds these bytes (sha256 $PUT_SHA256)"
  exit 0
fi

tmp=$(mktemp "$dir/.put.XXXXXX")
trap 'rm -f "$tmp"' EXIT
printf '%s' "$PUT_DATA" | base64 -d | gzip -dc > "$tmp" 2>/dev/null || refuse "the file's bytes do not decode"
sum=$(sha256sum < "$tmp" | cut -d ' ' -f 1)
[ "$sum" = "$PUT_SHA256" ] || refuse "checksum mismatch for '$PUT_TO': the bytes have sha256 $sum, expected $PUT_SHA256"
# mktemp makes it 0600; the team's group reads what its directory holds (2750).
chmod 640 "$tmp"
mv -f "$tmp" "$target"
trap - EXIT
say "written: $PUT_TO ($(wc -c < "$target" | tr -d ' ') bytes, sha256 $sum)"
