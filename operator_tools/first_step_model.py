"""A model of the time from ``kubectl apply`` of a run on zero Trainium nodes to its first step.

A model written here, because nothing here can launch a Trainium node: each stage of
cluster_facts.run_stages gets an expected time and the source of that number. Figures marked
``estimate`` have no published measurement behind them; the canary (``make canary``) measures the
same stages on a real account and is what replaces them. ``make timeline CONFIG=...``
(operator_tools/timeline.py) prints the model per configured run; docs/capacity.md explains the stages.

Stages run one after the other on the path, with two exceptions the model keeps:

- the training image may be pulled while the node is still being checked (``prepull``: a pull at
  node start, before the gang is bound); only what is left of the pull then is on the path;
- a data set is staged by a Job on the system nodes, once per version, from the deploy that
  introduced it; a run waits only for what is left of that staging when its pods start.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from cluster_facts.neuron_stack import TRAINING_IMAGE as DEFAULT_TRAINING_IMAGE
from cluster_facts.run_stages import RUN_STAGES, RunStage

__all__ = [
    "COLD",
    "FIGURES",
    "GOAL_SECONDS",
    "WARM",
    "Caches",
    "Figure",
    "RunStart",
    "StageTime",
    "before_the_cuts",
    "image_pull_seconds",
    "timeline",
    "total_seconds",
]

GOAL_SECONDS = 10 * 60
"""Issue 25's goal: a run with warm caches reaches its first step within 10 minutes of kubectl apply."""


@dataclass(frozen=True)
class Figure:
    value: float
    source: str


# Every number of the model, with where it comes from. Seconds unless the name says otherwise.
FIGURES: dict[str, Figure] = {
    "pods_pending": Figure(
        5,
        "estimate: Volcano's job controller creates the pods at once and its scheduler runs every "
        "second (volcano-sh/volcano, scheduler --schedule-period default 1s); a few cycles",
    ),
    "scale_up": Figure(
        30,
        "cluster-autoscaler FAQ, 'What are the Service Level Objectives for Cluster Autoscaler?': "
        "scale-up decided within 30 s of a pod becoming unschedulable for clusters up to 100 nodes "
        "(--scan-interval 10 s, left at its default here)",
    ),
    "instance_launch": Figure(
        45,
        "estimate: AWS publishes no launch time for Trainium; general EKS nodes take 45-65 s from "
        "launch to Ready (KubeFM, 'Faster EKS Node and Pod Startup', 2026), about half of it EC2",
    ),
    "node_join": Figure(
        75,
        "estimate: boot of the AL2023 Neuron AMI with the Neuron driver and 8-16 network cards "
        "(awslabs/amazon-eks-ami templates/al2023: neuron-kmod-load, configure-multicard-interfaces), "
        "nodeadm, kubelet, VPC CNI ready; longer than a general node's half of 45-65 s",
    ),
    "device_plugins": Figure(
        30,
        "estimate: the Neuron and EFA plugin pods start once the node is Ready, pull images of tens of "
        "MB from the account's cache and register with the kubelet over its socket",
    ),
    "node_check": Figure(
        120,
        "issue 24's bound for the startup-taint node check (device count, local collective, EFA "
        "loopback, Lustre): about two minutes",
    ),
    "pods_bound": Figure(
        5, "estimate: one Volcano scheduling cycle (1 s) and the binding, after the taint goes"
    ),
    "image_bytes": Figure(
        15e9,
        f"estimate: the compressed size of {DEFAULT_TRAINING_IMAGE.rsplit('/', 1)[-1]} "
        "was not found in any public source readable here. Bounds: AWS's Neuron PyTorch training DLC "
        "(SDK 2.10) had image_size_baseline 13000 MB (aws/deep-learning-containers "
        "pytorch/training/buildspec-neuronx.yml); the Neuron vLLM DLC of SDK 2.26.1 is '18+GB' "
        "(vllm-project/vllm#4838); AWS's DLCs are '15-20 GB' (AWS ML blog, 'Reducing container cold "
        "start times using SOCI index on DLAMI and DLC', 2026). The canary prints the kubelet's 'Image size'",
    ),
    "pull_bytes_per_second": Figure(
        96e6,
        "aws-samples/karpenter-blueprints blueprints/soci-snapshotter: 10,778,400,361 bytes from ECR in "
        "the same region in 112.33 s with containerd's default pull (AL2023)",
    ),
    "fast_pull_bytes_per_second": Figure(
        180e6,
        "aws-samples/karpenter-blueprints blueprints/soci-snapshotter: the same 10.8 GB image in 59.81 s "
        "with the SOCI snapshotter's parallel pull and unpack on AL2023 (root volume gp3 at 1,000 MiB/s "
        "and 16,000 IOPS), about 50% less than containerd's default",
    ),
    "data_marker_check": Figure(2, "run_worker.sh reads each data set's marker and compares its version"),
    "dataset_staging": Figure(
        48e9 / 100e6 + 15 * 60,
        "estimate: the BERT archive is 48 GB and unpacks in about 15 minutes (a public ParallelCluster "
        "walkthrough of the same tutorial); downloaded at an assumed 100 MB/s from S3 through the NAT",
    ),
    "compile_miss": Figure(
        30 * 60,
        "a public ParallelCluster walkthrough of the Neuron BERT-large phase 1 tutorial: "
        "neuron_parallel_compile 'takes around 30 minutes'",
    ),
    "precompile_warm": Figure(
        4 * 60,
        "estimate: neuron_parallel_compile with every graph in the cache still starts the script, "
        "builds the model and traces --steps_this_run 10 steps, then finds each graph in the cache",
    ),
    "neff_load": Figure(
        60,
        "estimate: training loads its compiled graphs (NEFFs) from the cache on the file system "
        "before its first step",
    ),
    "rendezvous": Figure(
        30,
        "estimate: torchrun's etcd rendezvous of the gang's agents and the collectives' bootstrap of "
        "the workers (one per NeuronCore) over EFA (not timed here: tests/runtime runs real etcd and "
        "torchrun, but on CPU with gloo)",
    ),
    "first_step": Figure(
        30,
        "estimate: the data loader's first batches and one step with the graphs loaded",
    ),
}


@dataclass(frozen=True, kw_only=True)
class RunStart:
    """What the model needs of one run and the nodes it starts."""

    run: str
    instance_type: str
    nodes: int
    image: str
    image_bytes: Figure
    datasets: int
    staging: Figure | None = None
    """How long the run's data sets take to stage from the deploy (the BERT preset's archive); None
    when their size is not known offline (a run's own data sets): not modelled, and said so."""
    workers_per_node: int = 0
    """One per NeuronCore of the instance type (cluster_facts/instance_catalog.py)."""
    precompile: bool
    fast_image_pull: bool
    """The node group's nodes pull with the SOCI snapshotter's parallel mode (nodeadm FastImagePull)."""
    root_volume_mib_per_second: int
    """The root volume's throughput: a parallel pull writes no faster than this."""
    prepull: bool
    """The run's image is pulled when the node starts, while it is being checked."""
    compile_key_reuse: bool
    """A run whose graphs are in the cache already skips neuron_parallel_compile."""


@dataclass(frozen=True)
class Caches:
    name: str
    data_staged: bool
    compile_cache_warm: bool


COLD = Caches("cold", data_staged=False, compile_cache_warm=False)
"""The first run of its kind: its data set staged by the deploy just before, no compiled graph."""
WARM = Caches("warm", data_staged=True, compile_cache_warm=True)
"""A run whose data set version is staged and whose graphs are in its compile cache."""


@dataclass(frozen=True)
class StageTime:
    stage: RunStage
    seconds: float
    """What this stage adds to the path (0 when it is hidden behind another)."""
    detail: str
    source: str


def image_pull_seconds(start: RunStart) -> float:
    rate = FIGURES["fast_pull_bytes_per_second" if start.fast_image_pull else "pull_bytes_per_second"].value
    # A parallel pull buffers and unpacks on the root volume: it cannot write faster than the volume.
    volume_rate = start.root_volume_mib_per_second * 1024 * 1024
    return start.image_bytes.value / min(rate, volume_rate)


def _data_stage(start: RunStart, caches: Caches, before_pods_start: float) -> tuple[float, str]:
    """The data sets' time on the path, and why."""
    check = FIGURES["data_marker_check"].value
    if not start.datasets:
        return 0.0, "the run names no data set"
    if caches.data_staged:
        return check, "staged: each marker read and its version compared"
    if start.staging is None:
        return check, "staging not modelled: its data sets' sizes are not known offline (counted as staged)"
    staging = start.staging.value
    return max(check, staging - before_pods_start), (
        f"staging takes {staging:.0f} s from the deploy; {before_pods_start:.0f} s of it pass before the pods start"
    )


def timeline(start: RunStart, caches: Caches) -> tuple[StageTime, ...]:
    """Each stage of cluster_facts.run_stages, in order, with its time on the path."""
    f = {name: figure.value for name, figure in FIGURES.items()}
    image = _image_stage(start)
    before_pods_start = (
        sum(
            f[name]
            for name in (
                "pods_pending",
                "scale_up",
                "instance_launch",
                "node_join",
                "device_plugins",
                "node_check",
            )
        )
        + f["pods_bound"]
        + image[0]
    )
    stages: dict[str, tuple[float, str, str]] = {
        "pods_pending": _figure("pods_pending"),
        "scale_up": _figure("scale_up"),
        "instance_launch": _figure("instance_launch", f"{start.nodes} x {start.instance_type}"),
        "node_join": _figure("node_join"),
        "device_plugins": _figure("device_plugins"),
        "node_check": _figure("node_check"),
        "pods_bound": _figure("pods_bound"),
        "image_pull": image,
        "data_ready": _data_ready_stage(start, caches, before_pods_start),
        "compile": _compile_stage(start, caches),
        "rendezvous": _figure("rendezvous", f"{start.nodes} x {start.workers_per_node} workers"),
        "first_step": _figure("first_step"),
    }
    return tuple(
        StageTime(stage, round(value, 1), detail, source)
        for stage in RUN_STAGES
        for value, detail, source in [stages[stage.id]]
    )


def _figure(name: str, detail: str = "") -> tuple[float, str, str]:
    """A stage that takes one figure's time: its seconds, ``detail`` and the figure's source."""
    return FIGURES[name].value, detail, FIGURES[name].source


def _image_stage(start: RunStart) -> tuple[float, str, str]:
    """The image pull's time on the path (only what is left of it after node start with ``prepull``)."""
    f = {name: figure.value for name, figure in FIGURES.items()}
    pull = image_pull_seconds(start)
    pull_source = (
        f"{start.image_bytes.value / 1e9:.1f} GB at "
        f"{(f['fast_pull_bytes_per_second'] if start.fast_image_pull else f['pull_bytes_per_second']) / 1e6:.0f} MB/s"
        f"{' (SOCI parallel pull)' if start.fast_image_pull else ' (containerd default)'}, "
        f"root volume {start.root_volume_mib_per_second} MiB/s"
    )
    hidden_behind = f["device_plugins"] + f["node_check"] + f["pods_bound"]
    image_on_path = max(0.0, pull - hidden_behind) if start.prepull else pull
    image_detail = (
        f"pull {pull:.0f} s from node start, {hidden_behind:.0f} s of it while plugins register and the node is checked"
        if start.prepull
        else f"pull {pull:.0f} s after the pods are bound"
    )
    rate = FIGURES["fast_pull_bytes_per_second" if start.fast_image_pull else "pull_bytes_per_second"]
    return image_on_path, image_detail, f"{pull_source}; {rate.source}; {start.image_bytes.source}"


def _data_ready_stage(start: RunStart, caches: Caches, before_pods_start: float) -> tuple[float, str, str]:
    """What is left of the data sets' staging (or the marker check) when the pods start."""
    data, data_detail = _data_stage(start, caches, before_pods_start)
    if caches.data_staged:
        return data, data_detail, FIGURES["data_marker_check"].source
    staging = start.staging
    return (
        data,
        data_detail,
        staging.source if staging is not None else "no size of the run's data sets is configured",
    )


def _compile_stage(start: RunStart, caches: Caches) -> tuple[float, str, str]:
    """Compiling (or loading) the graphs: what the compile cache and the precompile phase leave to do."""
    f = {name: figure.value for name, figure in FIGURES.items()}
    if not start.precompile:
        compile_seconds = f["neff_load"] if caches.compile_cache_warm else f["compile_miss"]
        compile_detail = "no precompile phase: graphs compile (or load) as training starts"
    elif caches.compile_cache_warm and start.compile_key_reuse:
        compile_seconds = f["neff_load"]
        compile_detail = "every replica's cache holds this graph key: precompile skipped, graphs loaded"
    elif caches.compile_cache_warm:
        compile_seconds = f["precompile_warm"] + f["neff_load"]
        compile_detail = "a new Job precompiles again: every graph found in the cache, then loaded"
    else:
        compile_seconds = f["compile_miss"] + f["neff_load"]
        compile_detail = "neuron_parallel_compile fills the cache, then training loads the graphs"
    compile_sources = {
        "compile_miss": not caches.compile_cache_warm,
        "precompile_warm": caches.compile_cache_warm and start.precompile and not start.compile_key_reuse,
        "neff_load": True,
    }
    source = "; ".join(FIGURES[name].source for name, used in compile_sources.items() if used)
    return compile_seconds, compile_detail, source


def total_seconds(stages: tuple[StageTime, ...]) -> float:
    return round(sum(stage.seconds for stage in stages), 1)


def before_the_cuts(start: RunStart) -> RunStart:
    """The same run as the stack started it before issue 25: default pull, no pre-pull, a new Job
    always precompiles, gp3 at its baseline throughput."""
    return replace(
        start, fast_image_pull=False, prepull=False, compile_key_reuse=False, root_volume_mib_per_second=125
    )
