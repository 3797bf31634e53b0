"""Presets: what a well-known training run is, in the terms of any run.

A preset is configuration, not code: it fills a run's image, script, arguments, environment, data
set, Python packages, precompile and resume settings from a few recipe parameters. The charts know
nothing about BERT; they run what the configuration describes.

``bert-large``: BERT-large phase-1 pretraining (sequence length 128) from the AWS Neuron tutorial,
aws-neuron-samples ``torch-neuronx/training/dp_bert_hf_pretrain`` at tag v2.27.0.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster_facts.kubernetes_names import dataset_variable

__all__ = [
    "BERT_DATASET",
    "BERT_LARGE",
    "DatasetPreset",
    "FilePreset",
    "RunPreset",
    "bert_large_arguments",
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
    script: str
    dataset: DatasetPreset
    python_requirements: tuple[str, ...]
    precompile_steps_arg: str
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
