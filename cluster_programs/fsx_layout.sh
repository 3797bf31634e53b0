#!/bin/sh
# shellcheck shell=busybox
# The file system's layout (the Job of k8s_charts/fsx_layout.py): the directories every team's
# volumes mount must exist before a team's pod mounts them. Idempotent: it only creates what is
# missing and never removes anything (a dropped team's files stay until removed by hand).
#
# Each team's directory belongs to the team: owner and group its id, mode 2750 (the team writes,
# its group reads, files made inside keep the group). A directory that does not yet belong to the
# team (a new one, or one that root's pods filled before root squash) is handed over whole, once.
# Root here is root because the Job runs where the file system does not squash it, with CHOWN as
# its one capability: it modifies only directories root owns.
#
# Arguments: the teams, as <name>:<uid> (the gid is the uid).
# The data sets' directory belongs to the platform's uid (DATASETS_OWNER, gid the same, mode 755),
# which the staging Jobs run as: handed over whole, once, like a team's (root staged before).
#
# Environment: DATA_MOUNT (the whole file system), TEAMS_DIR, DATASETS_DIR, DATASETS_OWNER.
set -eu
umask 022
mkdir -p "$DATA_MOUNT/$DATASETS_DIR" "$DATA_MOUNT/$TEAMS_DIR"
# Every team's pods mount it read-only (as their own uid): readable and searchable by all, writable
# by the platform's uid alone, which stages the data sets (never root, never a team).
datasets="$DATA_MOUNT/$DATASETS_DIR"
owner=$(stat -c %u:%g "$datasets")
if [ "$owner" != "$DATASETS_OWNER:$DATASETS_OWNER" ]; then
  chmod 755 "$datasets"
  chown -R "$DATASETS_OWNER:$DATASETS_OWNER" "$datasets"
  echo "$datasets: handed from $owner to $DATASETS_OWNER:$DATASETS_OWNER"
fi
echo "$datasets: ready, owned by $(stat -c %u:%g "$datasets") mode $(stat -c %a "$datasets")"
for entry in "$@"; do
  team=${entry%%:*}
  id=${entry#*:}
  dir="$DATA_MOUNT/$TEAMS_DIR/$team"
  mkdir -p "$dir"
  owner=$(stat -c %u:%g "$dir")
  if [ "$owner" != "$id:$id" ]; then
    # The mode first, while root owns it (no FOWNER needed); chown keeps a directory's setgid bit.
    chmod 2750 "$dir"
    chown -R "$id:$id" "$dir"
    echo "$dir: handed from $owner to $id:$id"
  fi
  echo "$dir: ready, owned by $(stat -c %u:%g "$dir") mode $(stat -c %a "$dir")"
done
