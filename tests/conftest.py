"""Shared fixtures: one thread for torch, and a tiny reference policy trained once per session on the seed bank.

One thread: on tiny tensors it is as fast as two on an idle machine, and on a loaded 2-core machine two intra-op
threads oversubscribe the cores (an SFT test went from ~1 s to 60-100 s).
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)

# The test files that take longest (pytest --durations), started first: with two test processes each taking a whole
# file (--dist loadfile), a long file started last would leave one process running alone at the end. The others
# keep their order. (pytest-xdist >= 3.7 would otherwise order the files by their count of tests.)
LONGEST_FIRST = (
    "test_reliability.py",
    "test_trainer.py",
    "test_walkthrough.py",
    "test_benchmarks_gpu_sh.py",
    "test_benchmarks_smoke.py",
    "test_reference_kernels.py",
    "test_compare.py",
    "test_turns.py",
    "test_readme_task.py",
    "test_nano_grpo.py",
    "test_exploration.py",
    "test_hostile_tools.py",
)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(
        key=lambda item: rank.get(item.path.name, len(rank))
    )  # (stable: each file's tests keep their order)


@pytest.fixture(scope="session")
def seed_reference(tmp_path_factory) -> str:
    """A char GPT SFT'd briefly on the 36 seed-bank questions: knows the format, gets many sums right."""
    from tinygrpo.sft.train import SFTConfig, train_reference

    out = tmp_path_factory.mktemp("seed_reference")
    cfg = SFTConfig(
        output_dir=str(out),
        dataset_name="seed_bank",
        dataset_test_split="",
        train_size=0,
        max_steps=60,
        per_device_train_batch_size=32,
        n_embd=32,
        n_head=2,
        n_positions=16,
        logging_steps=0,
        seed=0,
        kernels="native",  # (in this process: a fixture, not the default reference)
    )
    train_reference(cfg, verbose=False)
    return str(out)


@pytest.fixture(scope="module")
def tok():
    """The character tokenizer (one token per character, <pad> = 0, <eos> = 1, left padding)."""
    from tiny_lm import build_tokenizer

    return build_tokenizer()


@pytest.fixture(scope="module")
def model():
    """A random default-size TinyLM in eval mode, seed 0, with a large init range so that greedy paths differ
    between prompts. One per test module (tests that switch it to train mode switch it back)."""
    from tiny_lm import TinyLMConfig, TinyLMForCausalLM

    torch.manual_seed(0)
    return TinyLMForCausalLM(TinyLMConfig(initializer_range=0.3)).eval()


@pytest.fixture(scope="module")
def model64(model):
    """The same random model in float64, for tests that compare two computation orders of the same math
    (tests/_numerics.py says why: float32's last bits differ from CPU to CPU)."""
    import copy

    return copy.deepcopy(model).double()
