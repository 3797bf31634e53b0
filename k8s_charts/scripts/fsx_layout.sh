#!/bin/sh
# shellcheck shell=busybox
# The file system's layout (the Job of k8s_charts/fsx_layout.py): the directories every team's
# volumes mount must exist before a team's pod mounts them. Idempotent: it only creates what is
# missing and never removes anything (a dropped team's files stay until removed by hand).
#
# Arguments: the teams' names.
# Environment: DATA_MOUNT (the whole file system), TEAMS_DIR, DATASETS_DIR.
set -eu
mkdir -p "$DATA_MOUNT/$DATASETS_DIR"
echo "$DATA_MOUNT/$DATASETS_DIR: ready"
for team in "$@"; do
  mkdir -p "$DATA_MOUNT/$TEAMS_DIR/$team"
  echo "$DATA_MOUNT/$TEAMS_DIR/$team: ready"
done
