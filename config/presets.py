"""Presets: what a well-known training run is, in the terms of any run.

A preset is configuration, not code: it fills a run's image, script, arguments, environment, data
set, Python packages, precompile and resume settings from a few recipe parameters. The charts know
nothing about BERT; they run what the configuration describes.

Each preset runs on one Neuron stack (cluster_facts/neuron_stack.py):

- ``bert-large`` (xla): BERT-large phase-1 pretraining (sequence length 128) from the AWS Neuron
  tutorial, aws-neuron-samples ``torch-neuronx/training/dp_bert_hf_pretrain`` at tag v2.27.0.
- ``native-fsdp2`` (native): a small Llama-style decoder trained byte-level on a text file with FSDP2
  (``fully_shard``) through torchrun on TorchNeuron's ``neuron`` device, checkpointed with
  torch.distributed.checkpoint and resumed after a retry: the project's own program,
  cluster_programs/native_fsdp2_train.py, shipped with the run and checked by its SHA-256. The
  text is Tiny Shakespeare (public-domain plays, 1,115,394 bytes), pinned by commit and SHA-256.
  TorchTitan Neuron's Llama 3 recipe was the alternative: it installs from a git clone of
  aws-neuron/torchtitan-neuron (``pip install -e .``, no release a pod could install with
  ``--require-hashes``) and its Llama 3 tokenizer is gated behind Meta's licence on Hugging Face,
  so a run could not stage it without a token; pytorch/torchtitan itself is BSD-3-Clause.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster_facts.kubernetes_names import dataset_variable
from cluster_facts.neuron_stack import StackName

__all__ = [
    "BERT_DATASET",
    "BERT_LARGE",
    "NATIVE_DATASET",
    "NATIVE_FSDP2",
    "PRESETS",
    "DatasetPreset",
    "FilePreset",
    "RunPreset",
    "bert_large_arguments",
    "native_fsdp2_arguments",
]


@dataclass(frozen=True, kw_only=True)
class FilePreset:
    url: str
    sha256: str
    name: str


@dataclass(frozen=True, kw_only=True)
class DatasetPreset:
    name: str
    archive_url: str | None
    archive_sha256: str | None
    files: tuple[FilePreset, ...]


@dataclass(frozen=True, kw_only=True)
class RunPreset:
    name: str
    stack: StackName
    """The Neuron stack it trains on: its image must be a release of it, its node group serve it."""
    script: str | None
    """What torchrun runs, a file of its data set; None: its ``program``."""
    program: str | None = None
    """A program of the project (cluster_programs/<name>), shipped in the run's ConfigMap."""
    dataset: DatasetPreset
    python_requirements: tuple[str, ...]
    precompile_steps_arg: str | None
    """None: no precompile phase (the native path compiles as it runs)."""
    resume_glob: str
    resume_args: tuple[str, ...]


# aws-neuron/aws-neuron-samples tag v2.27.0 (Neuron SDK 2.27) = commit 4ed5764f; the directory is
# unchanged on master since. Pinned by commit: a tag can move, a commit cannot.
_SAMPLES = (
    "https://raw.githubusercontent.com/aws-neuron/aws-neuron-samples/"
    "4ed5764f27bc7bf49e264b08667a350169e6b120/torch-neuronx/training/dp_bert_hf_pretrain"
)
BERT_DATASET = DatasetPreset(
    name="bert-wikicorpus-128",
    # s3://neuron-s3/training_datasets/... from the Neuron tutorials; the bucket is public, so the
    # virtual-hosted HTTPS URL works without credentials or the AWS CLI. AWS publishes no checksum
    # for it, so the preset carries none: the one archive the configuration accepts without one
    # (DatasetSettings requires archive_sha256). The operator pins it with
    # parameters.dataset_archive_sha256 once the first staging has recorded it (docs/code-integrity.md).
    archive_url=(
        "https://neuron-s3.s3.amazonaws.com/training_datasets/bert_pretrain_wikicorpus_tokenized_hdf5/"
        "bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128.tar"
    ),
    archive_sha256=None,
    files=(
        FilePreset(
            url=f"{_SAMPLES}/dp_bert_large_hf_pretrain_hdf5.py",
            sha256="8cb9bd61592d3a8c0db3844f53a01415c6ac09eab9f33f0dbbc6de5a7891cc43",
            name="dp_bert_large_hf_pretrain_hdf5.py",
        ),
        # The script's default optimizer (AdamW_FP32OptimParams) is imported from this file, found next to it.
        FilePreset(
            url=f"{_SAMPLES}/adamw_fp32_optim_params.py",
            sha256="0706c68035c3f9a66315ea9097dc79d28a0c94b67a6e05a9c9f1060cfca6fbae",
            name="adamw_fp32_optim_params.py",
        ),
    ),
)
# The tarball's single top-level directory, under the data set's directory.
_BERT_DATA = f"$({dataset_variable(BERT_DATASET.name)})/bert_pretrain_wikicorpus_tokenized_hdf5_seqlen128"

BERT_LARGE = RunPreset(
    name="bert-large",
    stack="xla",
    script=f"$({dataset_variable(BERT_DATASET.name)})/dp_bert_large_hf_pretrain_hdf5.py",
    dataset=BERT_DATASET,
    # The stock Neuron training image ships a transformers release without ``transformers.AdamW``,
    # which the script imports: each pod installs the release the script was written for (its
    # requirements.txt at the same commit), checked by hash (CPython 3.12, manylinux x86_64 wheels
    # from PyPI). docker/Dockerfile bakes the same pins into the project image (a test keeps them equal).
    python_requirements=(
        "transformers==4.44.0 --hash=sha256:ea0ff72def71e9f4812d9414d4803b22681b1617aa6f511bd51cfff2b44a6fca",
        "tokenizers==0.19.1 --hash=sha256:7c9d5b6c0e7a1e979bec10ff960fae925e947aab95619a6fdb4c1d8ff3708ce3",
        "huggingface-hub==0.24.5 --hash=sha256:d93fb63b1f1a919a22ce91a14518974e81fc4610bf344dfe7572343ce8d3aced",
    ),
    precompile_steps_arg="--steps_this_run",
    # The script's --resume_ckpt loads the newest ckpt_<step>.pt in --output_dir and asserts when
    # there is none, so it is passed only when one exists.
    resume_glob="ckpt_*.pt",
    resume_args=("--resume_ckpt",),
)


def bert_large_arguments(
    *, batch_size: int, grad_accum_usteps: int, bf16: bool, shards_per_ckpt: int = 1
) -> tuple[str, ...]:
    """The script's arguments: per-worker batch, accumulation steps, the data and the run's output.

    BF16 is the script's default (model.to(torch.bfloat16)); ``--enable_fp32`` turns it off, for
    which the upstream recipe halves batch_size and doubles grad_accum_usteps.
    """
    arguments = (
        "--batch_size", str(batch_size),
        "--grad_accum_usteps", str(grad_accum_usteps),
        "--data_dir", _BERT_DATA,
        "--output_dir", "$(OUTPUT_DIR)",
        # How often it checkpoints: what a failure mid-run can cost (its default is 1 too).
        "--shards_per_ckpt", str(shards_per_ckpt),
    )  # fmt: skip
    return arguments if bf16 else (*arguments, "--enable_fp32")


# karpathy/char-rnn, data/tinyshakespeare/input.txt at its last commit (6f9487a6, 2016-04-30; git
# blob 7dcb3a2d): 1,115,394 bytes of Shakespeare's plays, public domain. The checksum was computed
# from that commit's blob (2026-11-28).
NATIVE_DATASET = DatasetPreset(
    name="tinyshakespeare",
    archive_url=None,
    archive_sha256=None,
    files=(
        FilePreset(
            url=(
                "https://raw.githubusercontent.com/karpathy/char-rnn/"
                "6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e/data/tinyshakespeare/input.txt"
            ),
            sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
            name="input.txt",
        ),
    ),
)

NATIVE_FSDP2 = RunPreset(
    name="native-fsdp2",
    stack="native",
    script=None,
    program="native_fsdp2_train.py",
    dataset=NATIVE_DATASET,
    # torch and torch-neuronx come with the image; the program needs nothing else.
    python_requirements=(),
    precompile_steps_arg=None,
    # The program writes each checkpoint as step-<8 digits>/ (renamed into place once whole) and,
    # given --resume, loads the newest one.
    resume_glob="step-*",
    resume_args=("--resume",),
)

PRESETS = {preset.name: preset for preset in (BERT_LARGE, NATIVE_FSDP2)}


def native_fsdp2_arguments(
    *,
    steps: int,
    batch_size: int,
    sequence_length: int,
    layers: int,
    model_dim: int,
    heads: int,
    learning_rate: float,
    checkpoint_every: int,
    seed: int,
    compile: bool,
) -> tuple[str, ...]:
    """The program's arguments on the cluster: TorchNeuron's ``neuron`` device and process-group
    backend (tests/runtime runs the same program with ``--device cpu --backend gloo``)."""
    arguments = (
        "--data", f"$({dataset_variable(NATIVE_DATASET.name)})/input.txt",
        "--output_dir", "$(OUTPUT_DIR)",
        "--steps", str(steps),
        "--batch_size", str(batch_size),
        "--sequence_length", str(sequence_length),
        "--layers", str(layers),
        "--model_dim", str(model_dim),
        "--heads", str(heads),
        "--learning_rate", repr(learning_rate),
        "--checkpoint_every", str(checkpoint_every),
        "--seed", str(seed),
        "--device", "neuron",
        "--backend", "neuron",
    )  # fmt: skip
    return (*arguments, "--compile") if compile else arguments
