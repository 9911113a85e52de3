"""Prompts, batches and estimates: the prompts with signal and their exact gradients (tinygrpo/oracles/exact.py), batches
drawn as the trainer draws them, and one variant's estimate of a batch through the trainer's own PolicyUpdate."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn as nn
from torch import Tensor

from .variants import MAX_COMPLETION_LENGTH, VARIANTS

if TYPE_CHECKING:
    from tinygrpo.base.processes import Processes
    from tinygrpo.oracles.completion_space import CompletionSpace
    from tinygrpo.oracles.exact import ExactResult
    from tinygrpo.run.config import GRPOConfig

SCAN_CHUNK = 32  # prompts per exact-accuracy forward while looking for prompts with signal


# ------------------------------------------------------------------------------------------------------------------
# prompts, rewards, the exact target


def load_policy(path: str | Path) -> tuple[nn.Module, Any]:
    """A policy directory loaded as train_grpo.py loads it (eval mode: no dropout in tiny_lm anyway)."""
    from tinygrpo.run.launch import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(str(path), "model_name_or_path")
    return model.eval(), tok


def encode(tok: Any, prompts: list[str]) -> tuple[Tensor, Tensor]:
    from tinygrpo.rollout.prompts import left_pad

    return left_pad(tok(prompts)["input_ids"], tok.pad_token_id)


def exact_result(
    model: nn.Module, tok: Any, space: CompletionSpace, prompts: list[str], answers: list[str], grad: bool
) -> ExactResult:
    """tinygrpo.oracles.exact's J (and gradient) for these prompts under the `accuracy` reward, scored as the trainer does."""
    from tinygrpo.oracles.exact import exact_objective, score_completions

    R = score_completions(tok, prompts, space, ["accuracy"], columns={"answer": answers})
    if not bool(torch.isfinite(R).all()):
        raise ValueError("the accuracy reward returned None for some completion")
    ids, mask = encode(tok, prompts)
    return exact_objective(model, ids, mask, space, R, grad=grad)


def pass_at_k_gradient(per_prompt: Tensor, accuracy: Tensor, k: int) -> Tensor:
    """The exact gradient of the pass@k objective mean_x [1 - (1 - acc(x))^k]: mean_x k (1 - acc(x))^(k-1) grad acc(x)
    (the chain rule on each prompt's exact accuracy and its gradient, (P, D) and (P,))."""
    return (k * (1 - accuracy) ** (k - 1) @ per_prompt) / per_prompt.size(0)


def answer_of(prompt: str) -> str:
    """The gold answer of an "a+b=" prompt (tinygrpo.data.tasks.addition.make_row's format)."""
    a, b = prompt.rstrip("=").split("+")
    return str(int(a) + int(b))


def select_prompts(
    model: nn.Module,
    tok: Any,
    space: CompletionSpace,
    rows: list[dict],
    P: int,
    lo: float,
    hi: float,
    seed: int,
) -> dict[str, Any]:
    """The first P prompts, in an order shuffled with `seed`, whose exact expected accuracy is in [lo, hi]; also the
    accuracies of every prompt scanned on the way."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    chosen: list[tuple[int, float]] = []
    scanned: list[float] = []
    for start in range(0, len(order), SCAN_CHUNK):
        idx = order[start : start + SCAN_CHUNK]
        prompts = [rows[i]["prompt"] for i in idx]
        acc = exact_result(model, tok, space, prompts, [rows[i]["answer"] for i in idx], grad=False).accuracy
        for i, a in zip(idx, acc.tolist(), strict=True):
            scanned.append(a)
            if lo <= a <= hi and len(chosen) < P:
                chosen.append((i, a))
        if len(chosen) >= P:
            break
    if not chosen:
        raise ValueError(f"no validation prompt has an exact accuracy in [{lo}, {hi}]")
    s = np.array(scanned)
    return {
        "prompts": [rows[i]["prompt"] for i, _ in chosen],
        "answers": [rows[i]["answer"] for i, _ in chosen],
        "accuracy": [a for _, a in chosen],
        "scanned": len(scanned),
        "scanned_below": int((s < lo).sum()),
        "scanned_above": int((s > hi).sum()),
    }


@dataclass
class Draw:
    """One sampled batch: G completions of each prompt, rows grouped by prompt, and their rewards."""

    completion_ids: Tensor  # (P*G, Tc)
    completion_mask: Tensor  # (P*G, Tc) float
    lengths: Tensor  # (P*G,) tokens, EOS included
    rewards: Tensor  # (P*G,) float32, as the trainer's


class Sampler:
    """Draws batches as tinygrpo/rollout/generation.py does: sample_completions, decode with <eos> kept, the reward."""

    def __init__(self, model: nn.Module, tok: Any, prompts: list[str], answers: list[str], T: int) -> None:
        from rewards import resolve_rewards
        from tinygrpo.model.backend import select_backend

        self.model, self.tok, self.T = model, tok, T
        self.backend = select_backend(model)  # the trainer's choice: the grouped fast path for tiny_lm
        self.ids, self.mask = encode(tok, prompts)
        self.prompts, self.answers = prompts, answers
        self.funcs, self.names, self.weights = resolve_rewards(["accuracy"], None)
        self.kwargs = {"max_completion_length": T, "eos": tok.eos_token}
        self.cache: dict = {}

    def draw(self, G: int, generator: torch.Generator) -> Draw:
        from rewards import combine_rewards, compute_rewards
        from tinygrpo.model.text import decode_rows
        from tinygrpo.rollout.config import SamplingParams
        from tinygrpo.rollout.sampling import sample_completions

        tok = self.tok
        ro = sample_completions(
            self.model,
            self.ids,
            self.mask,
            G,
            SamplingParams(self.T, temperature=1.0),
            generator,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            backend=self.backend,
        )
        lengths = ro.completion_mask.sum(1)
        rows = [r[:n] for r, n in zip(ro.completion_ids.tolist(), lengths.tolist(), strict=True)]
        texts = decode_rows(tok, rows, self.cache)
        prompts = [p for p in self.prompts for _ in range(G)]
        answers = {"answer": [a for a in self.answers for _ in range(G)]}
        per_func = compute_rewards(self.funcs, self.names, prompts, texts, rows, answers, self.kwargs)
        rewards = torch.from_numpy(
            combine_rewards(per_func.astype(np.float32), self.weights).astype(np.float32)
        )
        return Draw(ro.completion_ids.clone(), ro.completion_mask.float(), lengths.clone(), rewards)


# ------------------------------------------------------------------------------------------------------------------
# one variant's estimate of one batch


def variant_config(name: str, G: int, P: int, T: int = MAX_COMPLETION_LENGTH) -> GRPOConfig:
    """The GRPOConfig of a variant for P prompts x G completions in one on-policy mini-batch."""
    from tinygrpo.run.config import GRPOConfig

    return GRPOConfig(
        num_generations=G,
        per_device_train_batch_size=P * G,
        max_completion_length=T,
        temperature=1.0,
        reward_funcs=["accuracy"],
        **VARIANTS[name].overrides,
    )


def one_process() -> Processes:
    """tinygrpo.base.processes.Processes for this process alone (every collective is the identity)."""
    from accelerate import Accelerator

    from tinygrpo.base.processes import Processes

    return Processes(Accelerator(cpu=True))


class Estimator:
    """A variant's gradient estimate of a batch, through the trainer's own PolicyUpdate (prepare, then loss)."""

    def __init__(self, cfg: GRPOConfig, model: nn.Module, sampler: Sampler, processes: Processes) -> None:
        from tinygrpo.algorithm.policy_losses import LossConfig
        from tinygrpo.model.backend import PolicyForward
        from tinygrpo.rollout.config import SamplingParams
        from tinygrpo.update.config import BatchConfig, OptimizerConfig
        from tinygrpo.update.policy_update import PolicyUpdate

        self.cfg, self.sampler = cfg, sampler
        self.params = list(model.parameters())
        # No optimizer: only prepare() and loss() are used, never a step.
        groups = (LossConfig.of(cfg), SamplingParams.of(cfg), BatchConfig.of(cfg), OptimizerConfig.of(cfg))
        policy = PolicyForward(model, sampler.backend)
        self.update = PolicyUpdate(*groups, cfg.unit, policy, model, None, sampler.backend, None, processes)

    def batch(self, draw: Draw):
        """The trainer's Batch of a draw, with this variant's advantages (over the whole batch, as the trainer's)."""
        from tinygrpo.algorithm.advantage_estimators import advantages
        from tinygrpo.rollout.round import Batch

        cfg = self.cfg
        adv, _ = advantages(
            draw.rewards,
            cfg.num_generations,
            mode=cfg.advantage_mode,
            scale_rewards=cfg.scale_rewards,
            lengths=draw.lengths,
            k=cfg.train_pass_k,
        )
        s = self.sampler
        return Batch(s.ids, s.mask, draw.completion_ids, draw.completion_mask, adv, draw.rewards)

    def gradient(self, draw: Draw) -> Tensor:
        """-d loss / d theta, flat in model.parameters() order (float64); 0 when no group has signal (no step)."""
        (mb,) = self.update.prepare(self.batch(draw))
        if mb.inputs.batch.no_signal:
            return torch.zeros(sum(p.numel() for p in self.params), dtype=torch.float64)
        loss, _ = self.update.loss(mb)
        grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        flat = [
            torch.zeros(p.numel()) if d is None else d.reshape(-1)
            for p, d in zip(self.params, grads, strict=True)
        ]
        return -torch.cat(flat).double()
