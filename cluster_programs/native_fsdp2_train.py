"""Native PyTorch training on Trainium: what torchrun runs on every worker of a run of preset
native-fsdp2 (config/presets.py), shipped in the run's ConfigMap and checked by its SHA-256.

A small Llama-style decoder (RMSNorm, rotary attention, SwiGLU) learns a text file byte by byte
(256 tokens: no tokenizer to stage). Every block, then the whole model, is sharded across all
workers with FSDP2 (``fully_shard`` on a one-dimensional device mesh); AdamW steps the shards.

On a cluster the run passes ``--device neuron --backend neuron``: ``import torch_neuronx`` registers
TorchNeuron's ``neuron`` device and process-group backend (Neuron 2.33, "How to use
torch.distributed on Neuron"), one worker per logical NeuronCore. tests/runtime runs this same file
with ``--device cpu --backend gloo``, as Neuron's distributed tutorial runs its examples on CPU
before Neuron: everything but the device is proven there.

Checkpoints (torch.distributed.checkpoint, every ``--checkpoint_every`` steps and at the end) go to
``<output_dir>/step-<8 digits>/``: written under a hidden name, renamed into place by rank 0 once
every rank has written its part, so a directory named ``step-*`` is always whole. The two newest are
kept. With ``--resume`` the newest is loaded and training continues from its step; the data each
step reads depends only on the seed, the step and the rank, so a resumed run sees what an
uninterrupted one would have.

One line per step on rank 0 (``step=<n> loss=<x> tokens_per_second=<y>``): the run's log shows
progress (the gang watchdog ends a silent run, k8s_charts/scripts/stuck_runs.py), and
``<output_dir>/metrics.jsonl`` keeps the same figures. Exit 0 when ``--steps`` are done.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import shutil
import time
from pathlib import Path

import torch  # type: ignore[import-not-found]
import torch.distributed as dist  # type: ignore[import-not-found]
import torch.distributed.checkpoint as dcp  # type: ignore[import-not-found]
import torch.nn.functional as F  # type: ignore[import-not-found]
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict  # type: ignore[import-not-found]
from torch.distributed.device_mesh import init_device_mesh  # type: ignore[import-not-found]
from torch.distributed.fsdp import fully_shard  # type: ignore[import-not-found]

CHECKPOINT = re.compile(r"step-(\d{8})")
KEEP_CHECKPOINTS = 2
VOCABULARY = 256


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data", type=Path, required=True, help="the text file to learn")
    parser.add_argument("--output_dir", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True, help="optimizer steps in all")
    parser.add_argument("--batch_size", type=int, default=4, help="sequences per worker and step")
    parser.add_argument("--sequence_length", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--model_dim", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--learning_rate", type=float, default=3e-4)
    parser.add_argument("--checkpoint_every", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="neuron", help="neuron on Trainium; cpu to try it anywhere")
    parser.add_argument("--backend", default="neuron", help="the process group's: neuron, or gloo on cpu")
    parser.add_argument(
        "--compile", action="store_true", help="torch.compile (the neuron backend on Trainium)"
    )
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint")
    return parser.parse_args(argv)


# --- the model -----------------------------------------------------------------------------------


def rotary(length: int, width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosines and sines of the rotary position embedding for ``length`` positions of head width ``width``."""
    frequencies = 1.0 / (10000 ** (torch.arange(0, width, 2, device=device, dtype=torch.float32) / width))
    angles = torch.outer(torch.arange(length, device=device, dtype=torch.float32), frequencies)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class Block(nn.Module):  # type: ignore[misc]
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.attention_norm = nn.RMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.mlp_norm = nn.RMSNorm(width)
        hidden = 256 * math.ceil(width * 8 / 3 / 256)
        self.gate_up = nn.Linear(width, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        # (batch, heads, length, head width): the rotary tables broadcast over batch and heads.
        q, k, v = (
            self.qkv(self.attention_norm(x)).view(batch, length, 3, self.heads, -1).transpose(1, 3).unbind(2)
        )
        attended = F.scaled_dot_product_attention(rotate(q, cos, sin), rotate(k, cos, sin), v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, length, width))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Decoder(nn.Module):  # type: ignore[misc]
    def __init__(self, *, layers: int, width: int, heads: int) -> None:
        super().__init__()
        self.width, self.heads = width, heads
        self.embedding = nn.Embedding(VOCABULARY, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.RMSNorm(width)
        self.head = nn.Linear(width, VOCABULARY, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        cos, sin = rotary(tokens.shape[1], self.width // self.heads, tokens.device)
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


# --- data ----------------------------------------------------------------------------------------


def batch(
    text: torch.Tensor, *, step: int, rank: int, args: argparse.Namespace
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's sequences of ``step``: a function of the seed, the step and the rank only."""
    generator = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 4099 + rank)
    starts = torch.randint(
        0, text.numel() - args.sequence_length - 1, (args.batch_size,), generator=generator
    )
    rows = torch.stack([text[start : start + args.sequence_length + 1] for start in starts.tolist()])
    rows = rows.long()
    return rows[:, :-1], rows[:, 1:]


# --- checkpoints ---------------------------------------------------------------------------------


def checkpoints(output: Path) -> list[tuple[int, Path]]:
    """The whole checkpoints in ``output``, oldest first."""
    found = [
        (int(match[1]), path) for path in output.glob("step-*") if (match := CHECKPOINT.fullmatch(path.name))
    ]
    return sorted(found)


def save(output: Path, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, rank: int) -> None:
    partial, final = output / f".partial-step-{step:08d}", output / f"step-{step:08d}"
    if rank == 0 and partial.exists():
        shutil.rmtree(partial)  # a save an earlier attempt did not finish
    dist.barrier()
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(partial))
    dist.barrier()  # every rank has written its part
    if rank == 0:
        if final.exists():
            shutil.rmtree(final)
        partial.rename(final)
        for _, old in checkpoints(output)[:-KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)
        print(f"checkpoint step={step} {final}", flush=True)
    dist.barrier()


def load(output: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Load the newest checkpoint; the step it holds (0 when there is none)."""
    found = checkpoints(output)
    if not found:
        return 0
    step, path = found[-1]
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return step


# --- training ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    if args.device == "neuron":
        import torch_neuronx  # type: ignore[import-not-found]  # noqa: F401, PLC0415 (registers the neuron device and backend)
    dist.init_process_group(args.backend, timeout=datetime.timedelta(minutes=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(args.device)
    mesh = init_device_mesh(args.device, (world,))
    torch.manual_seed(args.seed)  # every rank builds the same initial model before it is sharded
    model = Decoder(layers=args.layers, width=args.model_dim, heads=args.heads).to(device)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
    forward = (
        torch.compile(model, backend=args.device if args.device == "neuron" else "inductor")
        if args.compile
        else model
    )
    args.output_dir.mkdir(parents=True, exist_ok=True)
    first = load(args.output_dir, model, optimizer) if args.resume else 0
    if rank == 0:
        print(f"training from step {first} to {args.steps} on {world} {args.device} workers", flush=True)
    text = torch.frombuffer(bytearray(args.data.read_bytes()), dtype=torch.uint8)
    metrics = args.output_dir / "metrics.jsonl"
    for step in range(first + 1, args.steps + 1):
        begun = time.monotonic()
        inputs, targets = batch(text, step=step, rank=rank, args=args)
        logits = forward(inputs.to(device))
        loss = F.cross_entropy(logits.reshape(-1, VOCABULARY), targets.to(device).reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if rank == 0:
            seconds = time.monotonic() - begun
            record = {
                "step": step,
                "loss": round(mean.item() / world, 5),
                "tokens_per_second": round(inputs.numel() * world / seconds),
            }
            print(" ".join(f"{key}={value}" for key, value in record.items()), flush=True)
            with metrics.open("a") as log:
                log.write(json.dumps(record) + "\n")
        if step % args.checkpoint_every == 0 or step == args.steps:
            save(args.output_dir, step, model, optimizer, rank)
    if rank == 0:
        print(f"done: {args.steps} steps", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
