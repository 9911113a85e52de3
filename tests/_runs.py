"""Helpers shared by the end-to-end test modules: train_grpo's command line on the seed bank, in process or not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import train_grpo
from tinygrpo.data.problems import load_split
from tinygrpo.run.config import GRPOConfig
from tinygrpo.run.launch import load_model_and_tokenizer
from tinygrpo.run.trainer import GRPOTrainer

REPO = Path(train_grpo.__file__).resolve().parent
SMALL = (
    "--dataset_name seed_bank --dataset_train_split train --dataset_test_split train --allow_overlapping_splits true "
    "--per_device_train_batch_size 32 "
    "--num_generations 4 --max_completion_length 3 --disable_tqdm true --make_plots false --torch_num_threads 1"
).split()
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
# `accelerate launch` as tests call it; two CPU processes need the torchrun launcher (--multi_gpu) plus
# ACCELERATE_USE_CPU, which makes accelerate pick gloo (its plain launcher would start one process).
LAUNCH = [sys.executable, "-m", "accelerate.commands.launch", "--quiet", "--num_machines", "1"]
LAUNCH += "--mixed_precision no --dynamo_backend no --main_process_port 0".split()
TWO_CPU_PROCESSES = [*LAUNCH, "--multi_gpu", "--num_processes", "2"]
LAUNCH_ENV = {**ENV, "ACCELERATE_USE_CPU": "true"}


def launch_two(argv: list[str]) -> subprocess.CompletedProcess:
    """train_grpo.py on 2 CPU processes, to the end."""
    cmd = [*TWO_CPU_PROCESSES, "train_grpo.py", *argv]
    return subprocess.run(cmd, cwd=REPO, env=LAUNCH_ENV, capture_output=True, text=True, timeout=300)


def cli(ref: str, out: Path, *extra: str) -> list[str]:
    """train_grpo argv on the seed bank; `extra` flags come last, so they override these (later flags win)."""
    return ["--model_name_or_path", ref, *SMALL, "--output_dir", str(out), *extra]


def run_inproc(ref: str, out: Path, *extra: str) -> int:
    return train_grpo.main(cli(ref, out, *extra))


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root, by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file()}


def reference_trainer(seed_reference, tmp_path, reward_funcs=None, **overrides) -> GRPOTrainer:
    """A trainer on the seed reference (and, with beta > 0, the reference as ref_model too): plain GRPO (uniform
    order, no explore rounds) on the 36 seed-bank prompts, 16 per step, unless `overrides` say otherwise."""
    model, tok = load_model_and_tokenizer(seed_reference, "model_name_or_path")
    kw = dict(
        output_dir=str(tmp_path / "t"),
        dataset_name="seed_bank",
        dataset_test_split=None,
        num_generations=4,
        per_device_train_batch_size=64,
        max_completion_length=3,
        disable_tqdm=True,
        make_plots=False,
        seed=3,
        dynamic_sampling=False,
        prompt_sampler="uniform",  # plain GRPO: these tests count what one round samples
        explore_rounds=0,
    )
    cfg = GRPOConfig(**{**kw, **overrides})
    ref = load_model_and_tokenizer(seed_reference, "model_name_or_path")[0] if cfg.beta > 0 else None
    return GRPOTrainer(
        cfg, model, tok, load_split("seed_bank", "train"), ref_model=ref, reward_funcs=reward_funcs
    )
