#!/bin/bash
# A worker pod of the fabric check (k8s_charts/fabric_check.py): one per node, holding every Neuron
# device and EFA interface of its node. It serves SSH, through which the launcher's nccom-test
# (mpirun) starts the ranks on this node; it runs until Volcano ends the job.
#
# Volcano's ssh plugin mounts the job's key pair, authorized_keys and client config at /root/.ssh.
# An SSH session does not inherit the container's environment, so the variables the ranks need
# (PATH, LD_LIBRARY_PATH and every FI_*, NEURON_*, CCOM_* and NCCL_* variable) are handed to the
# sessions with sshd's SetEnv option (OpenSSH 8.7 or later).
#
# Environment: the pod's, passed on as described; nothing else is read.
set -eu
set_env=()
for name in $(compgen -e); do
  case "$name" in
    PATH | LD_LIBRARY_PATH | FI_* | NEURON_* | CCOM_* | NCCL_*) ;;
    *) continue ;;
  esac
  value=${!name}
  case "$value" in
    *[[:space:]\"\']*)
      echo "not passing $name to SSH sessions: its value holds whitespace or quotes" >&2
      continue
      ;;
  esac
  set_env+=("$name=$value")
done
# Host keys are generated per pod (the image may ship none); the privilege-separation directory
# lives on a tmpfs in some images.
ssh-keygen -A
mkdir -p /run/sshd
# sshd re-executes itself, which it refuses to do unless started by absolute path.
sshd_path=$(command -v sshd) || { echo "the image has no sshd" >&2; exit 1; }
echo "serving SSH for the fabric check; passing ${#set_env[@]} variables to sessions"
exec "$sshd_path" -D -e -o "SetEnv=${set_env[*]}"
