#!/bin/sh
# A training pod's passwd and group files (cluster_facts/pod_user.py): the image's own, plus an
# entry for the uid and gid the pod runs as (its team's) when the image has none. Run by an init
# container of the pod on the pod's own image, as the pod's uid, into an emptyDir that the training
# container mounts read-only over /etc/passwd and /etc/group. Nothing runs as root, nothing in the
# image is written.
#
# Arguments: $1 the directory to write (passwd, group), $2 the user's name, $3 its home.
# Needs only sh, id, cut, grep and cp, which every image that runs run_worker.sh has.
set -eu
directory=$1
name=$2
home=$3
uid=$(id -u)
gid=$(id -g)
cp /etc/passwd "$directory/passwd"
cp /etc/group "$directory/group"
if ! cut -d: -f3 /etc/passwd | grep -qx "$uid"; then
  printf '%s:x:%s:%s:team user:%s:/bin/sh\n' "$name" "$uid" "$gid" "$home" >>"$directory/passwd"
fi
if ! cut -d: -f3 /etc/group | grep -qx "$gid"; then
  printf '%s:x:%s:\n' "$name" "$gid" >>"$directory/group"
fi
echo "pod-user: uid $uid gid $gid: $(grep -c '' "$directory/passwd") passwd entries"
