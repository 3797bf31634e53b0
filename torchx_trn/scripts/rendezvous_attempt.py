# Start torchrun under a rendezvous id of this attempt's own, then become it.
#
# Runs first in every pod of a job the TorchX component (torchx_trn/components.py) submits:
# the pod's command is ``python3 -c <this file's text> <launcher argv>``, so it uses the standard
# library only. The launcher argv is ``python3 -m torch.distributed.run ... --rdzv_endpoint <etcd>
# --rdzv_id <job> ...``; this program replaces ``<job>`` by ``<job>-a<N>`` and execs the launcher.
#
# Why: torchrun's etcd rendezvous marks a run ``closed`` whenever an agent exits normally (after
# success or after a worker failure), and the run's state outlives the pods, so a Volcano RestartJob
# under the same id fails at once with RendezvousClosedError. The cluster's own runs take the job's
# version from Volcano's pod annotations through the downward API; TorchX's Kubernetes scheduler
# (0.7.0) renders no downward-API variable, so the attempt is found in etcd instead: ``N`` is the
# first attempt whose rendezvous is not closed. Every pod of one attempt finds the same ``N``: an
# attempt's run is closed only when one of its agents exits, which happens after every agent has
# joined (``--nnodes`` is fixed), and Volcano starts the next attempt's pods only after deleting
# the last attempt's.
#
# It talks to etcd's v2 API (what torchrun's etcd backend uses) at the launcher's own
# ``--rdzv_endpoint``, under torchrun's default prefix ``/torchelastic/p2p``. Its text holds no
# dollar sign: TorchX substitutes its macros and Kubernetes its variable references in the command.
#
# It runs as the pod runs: as the team's uid from the start (the pod's runAsUser, which the component
# sets from --uid), never as root; it changes no identity.
#
# Environment: RDZV_WAIT_SECONDS (default 300) bounds how long an unreachable etcd is retried.
# Exit status: the launcher's; 1 when etcd cannot be asked or the argv has no id to replace.
# The rendered command holds the program without this header (cluster_facts.script_files.script_body).

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable

PREFIX = "/torchelastic/p2p"
MAX_ATTEMPTS = 1000
# The pods' http_proxy points at a closed port (it keeps plain-HTTP calls to the instance metadata
# service from hanging); etcd is asked directly.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def option_index(argv: list[str], name: str) -> int:
    """Where the value of ``name`` (given as ``name value``) is in ``argv``."""
    if argv.count(name) != 1 or argv.index(name) + 1 >= len(argv):
        raise ValueError(f"the launcher argv must hold {name} <value> exactly once: {argv}")
    return argv.index(name) + 1


def rendezvous_status(endpoint: str, run_id: str) -> str | None:
    """The status torchrun recorded for ``run_id`` (``closed``, ``final``, ...), None if there is none."""
    url = f"http://{endpoint}/v2/keys{PREFIX}/run_{run_id}/rdzv/active_version"
    try:
        with _NO_PROXY.open(url, timeout=10) as response:
            node = json.loads(response.read().decode())["node"]
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise
    status: str = json.loads(node["value"])["status"]
    return status


def attempt_id(base: str, status: Callable[[str], str | None]) -> str:
    """``<base>-a<N>`` for the first ``N`` whose rendezvous is not closed."""
    for attempt in range(MAX_ATTEMPTS):
        run_id = f"{base}-a{attempt}"
        if status(run_id) != "closed":
            return run_id
    raise RuntimeError(f"the first {MAX_ATTEMPTS} rendezvous of {base} are all closed")


def main(argv: list[str]) -> int:
    try:
        endpoint = argv[option_index(argv, "--rdzv_endpoint")]
        id_index = option_index(argv, "--rdzv_id")
    except ValueError as error:
        print(f"rendezvous_attempt: {error}", file=sys.stderr)
        return 1
    deadline = time.monotonic() + float(os.environ.get("RDZV_WAIT_SECONDS", "300"))
    while True:
        try:
            run_id = attempt_id(argv[id_index], lambda run: rendezvous_status(endpoint, run))
            break
        except (OSError, ValueError, KeyError) as error:
            # etcd restarting, its Service without endpoints yet, or an answer that is not JSON.
            if time.monotonic() > deadline:
                print(
                    f"rendezvous_attempt: cannot read the rendezvous at {endpoint}: {error}", file=sys.stderr
                )
                return 1
            time.sleep(5)
    print(f"rendezvous_attempt: this attempt rendezvouses as {run_id} at {endpoint}", flush=True)
    launcher = [*argv[:id_index], run_id, *argv[id_index + 1 :]]
    os.execvp(launcher[0], launcher)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
