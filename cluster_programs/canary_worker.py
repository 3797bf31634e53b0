"""The canary's worker (``make canary``, stacks/canary.py): what torchrun runs on every worker of
the canary run, a Volcano Job rendered by the same chart as every run (k8s_charts/training_run.py).

Reaching this file proves what the run's pod script did before it (image, mounts as the team's uid,
data sets and code checked, the compile-cache lock, torchrun's etcd rendezvous). It then proves the
rest, each stage as ONE line on stdout that stacks/canary.py reads from the pod's log:

    CANARY {"stage": "<id>", "ok": true|false, "seconds": <float>, "detail": "<one line>"}

The ids are stages of stacks/canary_report.py (``CANARY_STAGES``). Local rank 0 of each node checks
the node (mounts, Neuron and EFA devices); every rank joins the collective; global rank 0 writes the
run's output (a TensorBoard event file, which TensorBoard must then list). A failed stage prints its
line and exits 1: the pod fails and the run ends (the canary runs with no retries).

Environment (the canary run's; stacks/canary_run.py): OUTPUT_DIR, RUN_ID (the run's), DATA_MOUNT,
DATASETS_ROOT, CANARY_NEURON_DEVICES and CANARY_EFA_DEVICES (what the catalog says a node has),
CANARY_NETWORK_GBPS and CANARY_THRESHOLD (the all-reduce's bus bandwidth must reach THRESHOLD x the
instance type's EFA bandwidth when NODES > 1), CANARY_MESSAGE_BYTES, CANARY_NEURON_STACK (``xla``,
the default, or ``native``: the node group's Neuron stack, cluster_facts/neuron_stack.py),
CANARY_NOT_MEASURABLE (``--not-measurable``: the stages among neuron_devices, efa_devices, compile
and collective whose check is not run; compile and collective come together, and the process group
is then gloo's on the CPU, so the rendezvous is still proven); RANK,
LOCAL_RANK, WORLD_SIZE from torchrun. Standard library, plus torch and, for the collective, torch_xla
(xla) or torch_neuronx (native: TorchNeuron's ``neuron`` device and process-group backend) from the
training image.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

PREFIX = "CANARY "
_START = time.monotonic()


def report(stage: str, ok: bool, seconds: float, detail: str) -> None:
    line = {"stage": stage, "ok": ok, "seconds": round(seconds, 3), "detail": " ".join(detail.split())[:400]}
    print(PREFIX + json.dumps(line), flush=True)


def stage(name: str, check: Callable[[], str]) -> None:
    """Run one check; its line; exit 1 when it fails (``check`` raises with the explanation)."""
    begun = time.monotonic()
    try:
        detail = check()
    except Exception as error:  # noqa: BLE001 (any failure is the stage's, and is reported)
        report(name, False, time.monotonic() - begun, f"{type(error).__name__}: {error}")
        sys.exit(1)
    report(name, True, time.monotonic() - begun, detail)


def check_mounts() -> str:
    """/data writable as the team's uid; the data sets mounted read-only."""
    data = os.environ.get("DATA_MOUNT", "/data")
    datasets = os.environ.get("DATASETS_ROOT", f"{data}/datasets")
    with tempfile.NamedTemporaryFile(dir=data, prefix=".canary-") as probe:
        probe.write(b"canary\n")
        probe.flush()
    try:
        with tempfile.NamedTemporaryFile(dir=datasets, prefix=".canary-"):
            pass
    except OSError:
        pass
    else:
        raise RuntimeError(f"{datasets} is writable: the data sets must be mounted read-only")
    return f"{data} writable as uid {os.getuid()}, {datasets} read-only"


def _count(pattern: str) -> int:
    return len(glob.glob(pattern))


def check_neuron() -> str:
    want = int(os.environ["CANARY_NEURON_DEVICES"])
    found = _count("/dev/neuron[0-9]*")
    if found != want:
        raise RuntimeError(f"{found} Neuron devices in the pod, the instance type has {want}")
    return f"{found} Neuron devices"


def check_efa() -> str:
    want = int(os.environ["CANARY_EFA_DEVICES"])
    found = _count("/dev/infiniband/uverbs[0-9]*")
    if found != want:
        raise RuntimeError(
            f"{found} EFA devices (/dev/infiniband/uverbs*) in the pod, the instance type has {want}"
        )
    provider = os.environ.get("FI_PROVIDER", "")
    if provider != "efa":
        raise RuntimeError(f"FI_PROVIDER is {provider!r}, not efa")
    return f"{found} EFA devices, FI_PROVIDER=efa"


class Collective:
    """torch_xla's all-reduce over the run's process group (the path training takes)."""

    def __init__(self) -> None:
        import torch  # type: ignore[import-not-found]  # noqa: PLC0415 (the training image has it; the checks before need none)
        import torch.distributed as dist  # type: ignore[import-not-found]  # noqa: PLC0415 (the training image has it; the checks before need none)
        import torch_xla.core.xla_model as xm  # type: ignore[import-not-found]  # noqa: PLC0415 (the training image has it; the checks before need none)
        import torch_xla.distributed.xla_backend  # type: ignore[import-not-found]  # noqa: F401, PLC0415 (registers the "xla" backend)

        self.torch, self.dist, self.xm = torch, dist, xm
        self.size = int(os.environ.get("CANARY_MESSAGE_BYTES", str(256 * 2**20)))
        self.world = int(os.environ["WORLD_SIZE"])
        self.tensor: Any = None

    def rendezvous(self) -> str:
        self.dist.init_process_group("xla", init_method="xla://")
        return f"process group of {self.dist.get_world_size()} ranks"

    def first_step(self) -> str:  # the "compile" stage
        """The first all-reduce: its graph compiles (or comes from the cache) and runs."""
        device = self.xm.xla_device()
        self.tensor = self.torch.ones(self.size // 4, dtype=self.torch.float32, device=device)
        self.xm.all_reduce(self.xm.REDUCE_SUM, [self.tensor])
        self.xm.mark_step()
        self.xm.wait_device_ops()
        return f"all-reduce of {self.size} bytes compiled and run"

    def bandwidth(self) -> str:
        repeats = 5
        begun = time.monotonic()
        for _ in range(repeats):
            self.xm.all_reduce(self.xm.REDUCE_SUM, [self.tensor])
            self.xm.mark_step()
        self.xm.wait_device_ops()
        return self._judged((time.monotonic() - begun) / repeats)

    def _judged(self, seconds: float) -> str:
        """One all-reduce of ``seconds`` against the instance type's EFA bandwidth."""
        # Bus bandwidth as nccom-test reports it (GiB/s), judged as the fabric check judges it
        # (k8s_charts/scripts/fabric_verdict.py): 1 GiB/s = 8.589934592 Gbps.
        busbw = self.size / seconds * 2 * (self.world - 1) / self.world / 2**30
        gbps = busbw * 8.589934592
        nodes = int(os.environ.get("NODES", "1"))
        required = float(os.environ["CANARY_NETWORK_GBPS"]) * float(os.environ["CANARY_THRESHOLD"])
        if nodes > 1 and gbps < required:
            raise RuntimeError(f"bus bandwidth {gbps:.1f} Gbps below {required:.1f} Gbps over {nodes} nodes")
        return f"bus bandwidth {gbps:.1f} Gbps over {nodes} nodes (required {required:.1f} across nodes)"


class NativeCollective(Collective):
    """TorchNeuron's all-reduce: the ``neuron`` process group and device the native stack's runs use
    (Neuron 2.33, "How to use torch.distributed on Neuron"). The same stages as the xla path's."""

    def __init__(self) -> None:
        import torch  # noqa: PLC0415 (the training image has it; the checks before need none)
        import torch.distributed as dist  # noqa: PLC0415 (the training image has it; the checks before need none)
        import torch_neuronx  # type: ignore[import-not-found]  # noqa: F401, PLC0415 (registers the neuron device and backend)

        self.torch, self.dist = torch, dist
        self.size = int(os.environ.get("CANARY_MESSAGE_BYTES", str(256 * 2**20)))
        self.world = int(os.environ["WORLD_SIZE"])
        self.tensor: Any = None

    def rendezvous(self) -> str:
        self.dist.init_process_group("neuron")
        return f"process group of {self.dist.get_world_size()} ranks"

    def first_step(self) -> str:  # the "compile" stage
        """The first all-reduce on the neuron device: its kernels compile (or load) and run."""
        self.tensor = self.torch.ones(
            self.size // 4, dtype=self.torch.float32, device=self.torch.device("neuron")
        )
        self.dist.all_reduce(self.tensor)
        self.tensor.cpu()  # waits for the device
        return f"all-reduce of {self.size} bytes compiled and run"

    def _all_reduce_repeatedly(self, repeats: int) -> None:
        for _ in range(repeats):
            self.dist.all_reduce(self.tensor)
        self.tensor.cpu()

    def bandwidth(self) -> str:
        begun = time.monotonic()
        self._all_reduce_repeatedly(5)
        return self._judged((time.monotonic() - begun) / 5)


class CpuProcessGroup:
    """CANARY_NOT_MEASURABLE names compile and collective (a cluster whose nodes have no Neuron
    device): the run's process group formed by gloo on the CPU over torchrun's rendezvous, and one
    all-reduce of one value through it, so the rendezvous is measured; no Neuron all-reduce runs."""

    def __init__(self) -> None:
        import torch  # noqa: PLC0415 (the training image has it; the checks before need none)
        import torch.distributed as dist  # noqa: PLC0415 (the training image has it; the checks before need none)

        self.torch, self.dist = torch, dist

    def rendezvous(self) -> str:
        self.dist.init_process_group("gloo")
        world = self.dist.get_world_size()
        total = self.torch.ones(1)
        self.dist.all_reduce(total)
        if int(total.item()) != world:
            raise RuntimeError(f"an all-reduce of one per rank gave {total.item()} over {world} ranks")
        return f"process group of {world} ranks (gloo on the CPU: one all-reduce over every rank)"


def not_measurable() -> set[str]:
    return {name for name in os.environ.get("CANARY_NOT_MEASURABLE", "").split(",") if name}


def write_output() -> str:
    """A TensorBoard event file in the run's output directory, as training writes its own."""
    from torch.utils.tensorboard import SummaryWriter  # type: ignore[import-not-found]  # noqa: PLC0415 (the training image has it)

    output = os.environ["OUTPUT_DIR"]
    writer = SummaryWriter(log_dir=output)
    writer.add_scalar("canary/ok", 1.0, 0)
    writer.close()
    written = glob.glob(os.path.join(output, "events.out.tfevents.*"))
    if not written:
        raise RuntimeError(f"no event file in {output}")
    return f"{os.path.basename(written[0])} in {output}"


def main() -> int:
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    unmeasured = not_measurable()
    if local_rank == 0:
        stage("mounts", check_mounts)
        stage("data_ready", lambda: "no data set to stage: the run's marker wait passed")
        if "neuron_devices" not in unmeasured:
            stage("neuron_devices", check_neuron)
        if "efa_devices" not in unmeasured:
            stage("efa_devices", check_efa)
    collective: Collective | CpuProcessGroup
    if "collective" in unmeasured:
        collective = CpuProcessGroup()
    elif os.environ.get("CANARY_NEURON_STACK") == "native":
        collective = NativeCollective()
    else:
        collective = Collective()
    # torchrun's etcd rendezvous already placed this worker: the process group is the proof.
    begun = time.monotonic()
    try:
        detail = collective.rendezvous()
    except Exception as error:  # noqa: BLE001
        report("rendezvous", False, time.monotonic() - begun, f"{type(error).__name__}: {error}")
        return 1
    if rank == 0:
        report("rendezvous", True, time.monotonic() - _START, detail)
    checks = (
        ()
        if isinstance(collective, CpuProcessGroup)
        else (
            ("compile", collective.first_step),
            ("collective", collective.bandwidth),
        )
    )
    for name, check in checks:
        begun = time.monotonic()
        try:
            detail = check()
        except Exception as error:  # noqa: BLE001
            report(name, False, time.monotonic() - begun, f"{type(error).__name__}: {error}")
            return 1
        if rank == 0:
            report(name, True, time.monotonic() - begun, detail)
    if rank == 0:
        stage("output_write", write_output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
