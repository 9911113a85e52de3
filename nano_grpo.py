"""GRPO in one file, top to bottom: the algorithm the trainer runs with its plain flags (configs/plain.yaml).

    python nano_grpo.py        # 2-digit addition from the SFT reference (python train_sft.py makes it)

One step: draw prompts, sample G completions of each from the policy, score them with the regex verifier, turn
the rewards into group-relative advantages, and take one AdamW step on the token-level clipped surrogate plus beta
times the k3 estimate of the KL to the reference, averaged over the batch's tokens (DAPO). The loss is TRL's
GRPOTrainer's default (loss_type dapo, beta 0, epsilon 0.2, rewards scaled by their group's std); the optimizer is
not: learning rate 2e-3 with cosine decay to 0 (TRL: 1e-6, linear), chosen for a 100k-parameter model that learns
in minutes from a partial reference, and AdamW beta2 0.99 (TRL: 0.999), train_grpo.py's default. Left out on purpose, each a flag of train_grpo.py: prompts weighted by pass rate,
explore rounds, dynamic sampling, several updates per batch (so here the ratio is exactly 1 and the clip never
acts: it is written out all the same), other losses and advantage estimators, tools, processes, checkpoints.

tests/test_nano_grpo.py proves this file is the trainer: in float64 with the same seed, `train_grpo.py --config
configs/plain.yaml` draws the same completions, computes the same loss at every step and ends with the same
parameters, with beta 0 and beta > 0.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import tiny_lm  # noqa: F401  (registers the TinyLM model type with the Auto classes)
from rewards import accuracy  # the regex verifier: 1.0 iff the completion is the exact integer, then <eos>
from tiny_lm.compat import cache_of  # (the output's cache: transformers 5 renamed past_key_values to cache)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_name_or_path", default="checkpoints/reference", help="the SFT reference")
    p.add_argument("--dataset", default="data/addition", help="a directory of <split>.jsonl problem files")
    p.add_argument("--eval_split", default="test", help="held-out split ('' for none)")
    p.add_argument(
        "--num_generations", type=int, default=8, help="G >= 2: completions per prompt (GRPO, 2402.03300)"
    )
    p.add_argument("--per_device_train_batch_size", type=int, default=512, help="completions per step")
    p.add_argument("--max_completion_length", type=int, default=4, help="tokens per completion at most")
    p.add_argument(
        "--max_steps", type=int, default=300, help="(chosen on the validation split: studies/nano.py)"
    )
    p.add_argument("--learning_rate", type=float, default=2e-3, help="AdamW's peak rate, cosine to 0")
    p.add_argument("--beta", type=float, default=0.0, help="weight of the k3 KL to the reference (0: none)")
    p.add_argument("--epsilon", type=float, default=0.2, help="the ratio's clip range (PPO, 1707.06347)")
    p.add_argument(
        "--eval_steps", type=int, default=50, help="every N >= 1 steps and at the end (none: --eval_split '')"
    )
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    return p.parse_args(argv)


def read_split(directory: str, split: str) -> list[dict]:
    with open(Path(directory) / f"{split}.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


@torch.no_grad()
def sample(model, prompt_ids, prompt_mask, G: int, max_new: int, eos: int, pad: int, gen=None):
    """G completions of each prompt, token by token with a KV cache: (P*G, T) ids, pad after <eos>, rows grouped by
    prompt. `gen` (a torch.Generator) None: greedy. Otherwise one uniform per row still running, in row order,
    against the row's cumulative weights in float32 (inverse-CDF sampling: the trainer's draws, in any dtype)."""
    mask = prompt_mask.repeat_interleave(G, 0)  # (B, Tp)
    out = model(prompt_ids.repeat_interleave(G, 0), attention_mask=mask, use_cache=True)
    tokens = torch.full((mask.size(0), max_new), pad)
    running = torch.ones(mask.size(0), dtype=torch.bool)
    for t in range(max_new):
        live = running.nonzero().squeeze(1)  # (A,) the rows that have not emitted <eos>
        logits = out.logits[live, -1].float()  # (A, V)
        if gen is None:
            token = logits.argmax(-1)
        else:
            cdf = torch.exp(logits - logits.amax(-1, keepdim=True)).cumsum(-1)  # unnormalised
            u = torch.rand(len(live), 1, generator=gen) * cdf[:, -1:]
            token = (cdf <= u).sum(-1).clamp(max=logits.size(-1) - 1)  # the first token whose cdf exceeds u
        tokens[live, t] = token
        running[live] = token != eos
        if not running.any():
            return tokens[:, : t + 1]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)  # (finished rows decode on, unread)
        out = model(tokens[:, t : t + 1], attention_mask=mask, cache=cache_of(out), use_cache=True)
    return tokens


def token_logprobs(model, prompt_ids, prompt_mask, completion_ids, G: int):
    """(B, T) log pi(y_t | prompt, y_<t) of each completion token, from one forward over prompt + completion."""
    ids = torch.cat([prompt_ids.repeat_interleave(G, 0), completion_ids], 1)
    mask = torch.cat([prompt_mask.repeat_interleave(G, 0), torch.ones_like(completion_ids)], 1)
    T = completion_ids.size(1)
    logits = model(ids, attention_mask=mask).logits[:, -T - 1 : -1]  # (B, T, V): position t predicts token t
    return torch.log_softmax(logits, -1).gather(-1, completion_ids[..., None]).squeeze(-1)


def prompt_order(n: int, seed: int):
    """Prompt indices, pass after pass over the training set, each pass a fresh permutation (seeded seed + pass)."""
    for epoch in itertools.count():
        yield from torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch)).tolist()


def texts(tok, completion_ids) -> list[str]:
    """Completions as text, <eos> kept: the verifier tells a finished answer from a cut one."""
    return tok.batch_decode([[t for t in row if t != tok.pad_token_id] for row in completion_ids.tolist()])


def evaluate(model, tok, rows: list[dict], max_new: int) -> float:
    """Held-out greedy accuracy, by the verifier."""
    model.eval()
    enc = tok([r["prompt"] for r in rows], padding=True, return_tensors="pt")
    out = sample(
        model, enc.input_ids, enc.attention_mask, 1, max_new, tok.eos_token_id, tok.pad_token_id, None
    )
    scores = accuracy(texts(tok, out), [r["answer"] for r in rows], eos=tok.eos_token)
    return sum(s == 1.0 for s in scores) / len(rows)


def train(args: argparse.Namespace, on_step=None):
    """GRPO from the reference; on_step(step, completions, loss) after each step. Returns the policy."""
    # ---- the reference, the policy (a copy that learns), the data
    torch.manual_seed(args.seed)
    dtype = getattr(torch, args.dtype)
    tok = AutoTokenizer.from_pretrained(args.model_name_or_path)  # characters; pads on the left
    model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path).to(dtype)
    ref = (
        AutoModelForCausalLM.from_pretrained(args.model_name_or_path).to(dtype).eval() if args.beta else None
    )
    train_rows = read_split(args.dataset, "train")
    eval_rows = read_split(args.dataset, args.eval_split) if args.eval_split else []
    G, P = args.num_generations, args.per_device_train_batch_size // args.num_generations
    opt = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, betas=(0.9, 0.99), weight_decay=0.0)
    order = prompt_order(len(train_rows), args.seed)
    sampler = torch.Generator().manual_seed(args.seed * 1_000_003)  # the uniforms of every sampled token
    if eval_rows:
        print(f"step 0: held-out accuracy {evaluate(model, tok, eval_rows, args.max_completion_length):.1%}")
    t0 = time.perf_counter()
    for step in range(1, args.max_steps + 1):
        # ---- 1. the next P prompts of the training set
        rows = [train_rows[next(order)] for _ in range(P)]
        enc = tok([r["prompt"] for r in rows], padding=True, return_tensors="pt")  # (P, Tp), left-padded

        # ---- 2. G completions of each prompt from the policy (eval mode: no dropout while sampling)
        model.eval()
        eos, pad = tok.eos_token_id, tok.pad_token_id
        ids = sample(
            model, enc.input_ids, enc.attention_mask, G, args.max_completion_length, eos, pad, sampler
        )
        done = (ids == eos).cumsum(1) - (ids == eos).long()  # <eos>s before each token
        mask = (done == 0).to(dtype)  # (B, T): 1 for every token up to and including the first <eos>

        # ---- 3. score them: the verifier's reward, 1 or 0
        completions = texts(tok, ids)
        rewards = torch.tensor(
            accuracy(completions, [r["answer"] for r in rows for _ in range(G)], eos=tok.eos_token)
        )

        # ---- 4. group-relative advantages: (r - mean of its group) / (std of its group + 1e-4), as float32
        r = rewards.view(P, G)
        mean = r.sum(-1, keepdim=True) / G
        std = ((r - mean).square().sum(-1, keepdim=True) / (G - 1)).sqrt()  # unbiased, as TRL's torch.std
        advantages = ((r - mean) / (std + 1e-4)).view(-1, 1)  # (B, 1): every token of a completion shares it

        # ---- 5. the loss: token-level clipped ratio to the sampling policy, + beta * k3 KL, over all tokens
        model.train()
        logp = token_logprobs(model, enc.input_ids, enc.attention_mask, ids, G)  # (B, T)
        old_logp = logp.detach()  # the policy that sampled: one update per batch, so ratio == 1 exactly
        ratio = torch.exp(logp - old_logp)
        clipped = torch.clamp(ratio, 1 - args.epsilon, 1 + args.epsilon)
        per_token = -torch.min(ratio * advantages, clipped * advantages)
        if args.beta:
            with torch.no_grad():
                ref_logp = token_logprobs(ref, enc.input_ids, enc.attention_mask, ids, G)
            log_r = ref_logp - logp
            per_token = per_token + args.beta * (torch.exp(log_r) - log_r - 1)  # k3 >= 0, unbiased (Schulman)
        loss = (per_token * mask).sum() / mask.sum().clamp(min=1)  # DAPO: a mean over the batch's tokens

        # ---- 6. AdamW step, gradients clipped to norm 1, learning rate on a cosine from its peak to 0
        # (A batch with no signal and no KL has a zero gradient: no step, or AdamW's momentum would still move.)
        if args.beta or advantages.any():
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        for group in opt.param_groups:  # the rate of the next step
            group["lr"] = args.learning_rate * 0.5 * (1.0 + math.cos(math.pi * step / args.max_steps))
        if on_step is not None:
            on_step(step, completions, loss.item())

        # ---- 7. held-out accuracy now and then
        if eval_rows and (step % args.eval_steps == 0 or step == args.max_steps):
            acc = evaluate(model, tok, eval_rows, args.max_completion_length)
            seconds = time.perf_counter() - t0
            print(f"step {step}: reward {rewards.mean():.3f}, held-out accuracy {acc:.1%} ({seconds:.0f} s)")
    return model


def check(args: argparse.Namespace) -> str | None:
    """The first thing wrong with the options, in one line (None: nothing), found before anything is loaded."""
    # each count's least value: a group-relative advantage needs two samples (the std of one is NaN)
    least = dict(
        num_generations=2, per_device_train_batch_size=1, max_completion_length=1, max_steps=1, eval_steps=1
    )
    for name, lo in least.items():
        if getattr(args, name) < lo:
            return f"--{name} must be >= {lo}, got {getattr(args, name)}"
    B, G, data = args.per_device_train_batch_size, args.num_generations, Path(args.dataset)
    if B % G:  # (whole groups: B / G prompts a step)
        return f"--per_device_train_batch_size {B} is not a multiple of --num_generations {G}"
    if not data.is_dir():
        return f"--dataset {data}: no such directory"
    for split in filter(None, ["train", args.eval_split]):
        if not (data / f"{split}.jsonl").is_file():
            return f"--dataset {data} has no {split}.jsonl"
    if not (Path(args.model_name_or_path) / "config.json").is_file():
        return f"no model at {args.model_name_or_path}: train the reference first (python train_sft.py)"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if problem := check(args):
        print(f"error: {problem}", file=sys.stderr)
        return 1
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
