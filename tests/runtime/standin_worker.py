"""The training script's stand-in: what torchrun starts in place of the BERT script.

Run by the torch virtualenv's Python (never imported by the tests). It joins the gloo process
group torchrun set up, all-reduces a one per rank, checks the sum is the world size and prints one
line per collective, so a test sees that every worker of a run met every other. Environment:

  STANDIN_SECONDS    keep all-reducing (every 0.2 s) for this long, as a training loop would: a
                     peer that dies mid-run then fails this worker's next collective (default 0).
                     Every rank stops after the same step: the first after which any rank's time is up.
  STANDIN_FAIL_RANK  the global rank that raises after its first collective (a worker exception).
  STANDIN_FAIL_ATTEMPT  with STANDIN_FAIL_RANK: fail only in this attempt, the Volcano Job's version
                     (VC_JOB_VERSION, set in the pod), so that the next attempt passes
                     (tests/cluster/test_run_pods.py).
  STANDIN_PHASE      "precompile" (set by the neuron_parallel_compile stand-in): one collective,
                     never failing, whatever the switches above say; else "train".

It exits by itself when its agent is gone (a killed pod takes its workers along; here they would
be orphans), and every wait is bounded.
"""

from __future__ import annotations

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

MARKER = "standin:"


def main() -> None:
    agent = os.getppid()
    rank = int(os.environ["RANK"])
    phase = os.environ.get("STANDIN_PHASE", "train")
    training = phase == "train"
    deadline = time.monotonic() + float(os.environ.get("STANDIN_SECONDS", "0") if training else 0)
    fail_rank = os.environ.get("STANDIN_FAIL_RANK") if training else None
    attempt = os.environ.get("STANDIN_FAIL_ATTEMPT")
    if attempt is not None and os.environ.get("VC_JOB_VERSION") != attempt:
        fail_rank = None
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    world = dist.get_world_size()
    step = 0
    while True:
        # A one from every rank, and whether this rank would go on: the ranks' clocks started apart,
        # so they agree to stop at the first step any of them would stop after.
        total = torch.tensor([1.0, float(time.monotonic() < deadline)])
        dist.all_reduce(total)
        assert int(total[0].item()) == world, f"all_reduce gave {total[0].item()}, expected {world}"
        print(
            f"{MARKER} phase={phase} step={step} rank={rank} world={world} run_id={os.environ['TORCHELASTIC_RUN_ID']} "
            f"restart={os.environ['TORCHELASTIC_RESTART_COUNT']} args={' '.join(sys.argv[1:])}",
            flush=True,
        )
        if fail_rank is not None and rank == int(fail_rank):
            raise RuntimeError(f"{MARKER} rank {rank} fails on request (STANDIN_FAIL_RANK)")
        step += 1
        if int(total[1].item()) < world:
            break
        if os.getppid() != agent:
            sys.exit(f"{MARKER} rank {rank}: the agent is gone")
        time.sleep(0.2)
    dist.destroy_process_group()
    print(f"{MARKER} phase={phase} done rank={rank}", flush=True)


if __name__ == "__main__":
    main()
