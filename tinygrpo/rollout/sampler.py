"""How one token is drawn, and what a decode returns: `SamplingParams` (length, temperature, top-k, top-p, min-p,
the repetition penalty, the generator), `sample_from_logits` (the sampler itself), `Rollout` and `finish_rollout`.
Shared by the decoding loops: today's (sampling.py) and the static-shape one (static_decode.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tinygrpo.rollout.tool_calls import ToolCalls


@dataclass(frozen=True)
class SamplingParams:
    """How to sample a completion, token by token.

    - max_new_tokens: tokens per completion at most (EOS included); decoding stops earlier once every row has
      emitted EOS.
    - temperature: the logits are divided by it before the softmax (< 1 sharpens, > 1 flattens); 0 is greedy
      (argmax, no uniform drawn).
    - top_k: sample among the k most likely tokens only (Fan et al. 2018, "Hierarchical Neural Story
      Generation"); 0 = all.
    - top_p: nucleus sampling, among the smallest set of most likely tokens whose probability reaches top_p
      (Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration"); 1 = all.
    - generator: the source of the uniforms, one per row per step (None: torch's global generator). The same
      generator object, drawn in the same order, gives the same completions; a caller that must not move another
      stream's state (evaluation beside training) gives its own.
    - min_p: sample among the tokens whose probability is at least min_p x the top token's (Nguyen et al. 2024,
      "Turning Up the Heat: Min-p Sampling"); 0 = all.
    - repetition_penalty: a token already in the row (prompt, completion so far, environment replies) has its
      logit divided by it when positive, multiplied when negative, before the temperature (Keskar et al. 2019,
      CTRL; transformers' RepetitionPenaltyLogitsProcessor); 1 = off. Greedy decoding (temperature 0) is argmax.

    Filters and the penalty change what is sampled; the log-probs a loss reads are the model's at the temperature.
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    generator: torch.Generator | None = None
    min_p: float = 0.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not self.max_new_tokens >= 0:
            raise ValueError(f"max_new_tokens must be >= 0, got {self.max_new_tokens}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not self.top_k >= 0:
            raise ValueError(f"top_k must be >= 0 (0 = all tokens), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p < 1:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")

    @classmethod
    def greedy(cls, max_new_tokens: int) -> SamplingParams:
        """Argmax decoding: draws nothing from any generator."""
        return cls(max_new_tokens, temperature=0)


@dataclass
class Rollout:
    completion_ids: torch.Tensor  # (P*G, Tc) long, pad after EOS
    completion_mask: (
        torch.Tensor
    )  # (P*G, Tc) 1 for every token up to and including EOS (the environment's too)
    is_eos: torch.Tensor  # (P*G,) bool: the completion ended with EOS (not truncated)
    # (P*G, Tc) bool: the tokens the environment fed (tool replies, tinygrpo/rollout/tool_calls.py); None without tools
    tool_mask: torch.Tensor | None = None
    tool_calls: torch.Tensor | None = None  # (P*G,) calls answered in each completion
    tool_failures: torch.Tensor | None = None  # (P*G,) of them, answered with the environment's error
    environments: list | None = None  # (P*G,) an episode's environment: each row's instance at its end


def penalize_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """(B, V) logits, (B, V) bool tokens already in each row -> the logits with those tokens' divided by `penalty`
    where positive and multiplied where negative (CTRL's repetition penalty, as transformers applies it)."""
    return torch.where(seen, torch.where(logits > 0, logits / penalty, logits * penalty), logits)


def sample_from_logits(
    logits: torch.Tensor, params: SamplingParams, uniforms: torch.Tensor | None = None
) -> torch.Tensor:
    """(B, V) -> (B,) token ids, one per row, drawn as `params` says (its max_new_tokens is the caller's).
    `uniforms` (B, 1): the draws to use, already drawn from `params.generator` (the static-shape decode's);
    None: drawn here.

    Inverse-CDF sampling (one uniform per row against the cumulative weights) instead of `torch.multinomial`: the
    same distribution, several times cheaper on tiny vocabularies; and exp/sum by hand rather than softmax, which
    is slow on a tiny last dimension on CPU.
    """
    temperature, top_k, top_p, generator = params.temperature, params.top_k, params.top_p, params.generator
    if temperature == 0:
        return logits.argmax(-1)
    if logits.dtype != torch.float32:
        logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    if top_k and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        drop_sorted = (
            cum - torch.softmax(sorted_logits, dim=-1)
        ) >= top_p  # keep the smallest set reaching top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    if params.min_p > 0:  # (after top_k/top_p: the top token is kept by both, so the reference is the same)
        top = logits.amax(-1, keepdim=True)
        logits = logits.masked_fill(logits < top + math.log(params.min_p), float("-inf"))
    weights = torch.exp(logits - logits.amax(-1, keepdim=True))  # (B, V), unnormalised
    cdf = weights.cumsum(-1)
    # The uniforms come from the generator's device (the CPU's for the trainer's: the same draws, and checkpoints
    # that resume on either device), then move to the logits'.
    u = uniforms
    if u is None:
        u = torch.rand(
            logits.size(0),
            1,
            generator=generator,
            device=generator.device if generator is not None else logits.device,
        )
    if u.device != logits.device:
        u = u.to(logits.device)
    u = u * cdf[:, -1:]
    return (cdf <= u).sum(-1).clamp(max=logits.size(-1) - 1)  # first index whose cdf exceeds u


def finish_rollout(
    completion_ids: torch.Tensor, eos_token_id: int, tools: ToolCalls | None, tool_mask: torch.Tensor | None
) -> Rollout:
    """(B, Tc) sampled ids, as long as the longest completion -> the Rollout (masks, and the environment's records)."""
    Tc = completion_ids.size(1)
    is_eos_tok = completion_ids == eos_token_id
    # Mask: every token up to and including the first EOS.
    after_eos = (is_eos_tok.cumsum(1) - is_eos_tok.long()) > 0
    completion_mask = (~after_eos).long()
    if tools is None:
        return Rollout(completion_ids, completion_mask, is_eos_tok.any(1))
    return Rollout(
        completion_ids,
        completion_mask,
        is_eos_tok.any(1),
        tool_mask[:, :Tc],
        tools.calls,
        tools.failures,
        tools.environments(),
    )
