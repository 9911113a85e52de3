"""Supervised training of the reference policy on "a+b=c<eos>" strings (the CLI is train_sft.py).

    python train_sft.py                                                    # the default, deliberately imperfect reference
    python train_sft.py --train_size 0 --max_steps 3000 --lr_scheduler_type cosine   # the whole train split: 100 %

The default recipe's budget is explicit: 400 training problems (a fixed sample of the train split), 1000 steps of
batch 128, AdamW 3e-3. That gives a reference that has learnt the format (digits then <eos>) and about two thirds
of the held-out sums: the starting point GRPO must improve. The loss covers only the answer and <eos> (the prompt is
given, not predicted). The test split is never trained on; its greedy accuracy is printed at the end.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F

from tiny_lm import TinyLMConfig, TinyLMForCausalLM, build_tokenizer, check_text
from tiny_lm.tokenization_tiny_lm import DEFAULT_CHARS, EOS_TOKEN

from .checks import Bound, ConfigError, check_fields, check_threads
from .config import BOUNDS
from .environment import get_environment
from .evaluation import Verifier, format_counts, format_metrics, greedy_accuracy
from .launch import Input, check_apart
from .problems import MANIFEST, dataset_dir, first_row_columns, load_split
from .tool_calls import ToolUse, written_calls
from .update import NonFiniteError, nonfinite_weight
from .validation import ModelShape, gigabytes, memory_budget
from .writes import save_model_files


@dataclass
class SFTConfig:
    # Other names for a field, on the command line and in a --config recipe: TRL's, and this script's earlier ones.
    ALIASES: ClassVar[dict[str, str]] = {
        "dataset_name": "dataset",
        "dataset_train_split": "train_split",
        "dataset_test_split": "eval_split",
        "batch_size": "per_device_train_batch_size",
        "threads": "torch_num_threads",
        "log_every": "logging_steps",
    }

    task: str = field(
        default="",
        metadata={
            "help": "A task's reference recipe (tinygrpo/tasks/): its dataset, characters, model size and budget "
            "become the defaults, and flags override them. '' = addition's recipe, this config's own defaults."
        },
    )
    output_dir: str = field(
        default="checkpoints/reference", metadata={"help": "Where model + tokenizer are saved."}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Allow replacing a model that output_dir already holds."}
    )
    dataset: str = field(
        default="addition", metadata={"help": "Problem set name or directory of <split>.jsonl."}
    )
    train_split: str = field(default="train", metadata={"help": "Split to train on."})
    completion_column: str = field(
        default="answer",
        metadata={"help": "The column that holds each training problem's target completion (without <eos>)."},
    )
    mix_column: str = field(
        default="",
        metadata={
            "help": "A second column of target completions (a worked format, say) that a share of the training "
            "problems imitate instead: the mixed reference of the reasoning experiment (docs/reasoning.md; "
            "DeepSeek-R1's cold start, arXiv 2501.12948, uses a few worked examples the same way)."
        },
    )
    mix_share: float = field(
        default=0.0,
        metadata={
            "help": "The share of the training problems (a fixed, seeded choice) whose target is mix_column's; "
            "0 = none."
        },
    )
    environment: str = field(
        default="",
        metadata={
            "help": "An environment whose calls the targets contain (tinygrpo/environments/: calculator): each "
            "call's reply is the environment's, so it is left out of the loss, as GRPO leaves it (TRL's tool_mask), "
            "and must be what the environment answers; the held-out completions call it. '' = none."
        },
    )
    eval_split: str = field(
        default="test", metadata={"help": "Held-out split for greedy accuracy ('' = none)."}
    )
    train_size: int = field(
        default=400,
        metadata={"help": "Train on this many problems (a fixed sample of the split); 0 = all of it."},
    )
    max_steps: int = field(default=1000, metadata={"help": "Optimizer steps."})
    per_device_train_batch_size: int = field(
        default=128, metadata={"help": "Sequences per step (TRL's SFTConfig name; batch_size also accepted)."}
    )
    learning_rate: float = field(default=3e-3, metadata={"help": "AdamW learning rate."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    lr_scheduler_type: str = field(
        default="constant",
        metadata={
            "help": "constant, or cosine (decayed to a tenth of the rate over max_steps; `--cosine_decay true` "
            "also accepted). The default experiment's reference keeps a constant rate: decayed, it memorises its "
            "400 problems into a sharper reference that GRPO improves more slowly."
        },
    )
    n_layer: int = field(default=2, metadata={"help": "Transformer blocks."})
    n_embd: int = field(default=64, metadata={"help": "Model width."})
    n_head: int = field(default=4, metadata={"help": "Attention heads."})
    torch_num_threads: int = field(
        default=1,
        metadata={
            "help": "torch threads (0 = torch's default; threads also accepted). 1 by default: the float sums' order, and so the "
            "reference's weights, are then the same whether `python train_sft.py`, `python train_grpo.py` or "
            "`accelerate launch train_grpo.py` (one thread a process) trains it; at this size one thread is as fast."
        },
    )
    n_positions: int = field(default=32, metadata={"help": "Context length (prompt + completion)."})
    chars: str = field(default=DEFAULT_CHARS, metadata={"help": "Tokenizer characters (plus <pad>, <eos>)."})
    seed: int = field(default=0, metadata={"help": "Seed for the sample of problems, init and batches."})
    label_smoothing: float = field(
        default=0.0,
        metadata={"help": "Cross-entropy label smoothing (keeps the reference's sampling diverse)."},
    )
    logging_steps: int = field(
        default=100, metadata={"help": "Print the loss every N steps (0 = never; log_every also accepted)."}
    )

    def __post_init__(self) -> None:
        check_fields(self, SFT_BOUNDS, SFT_CHOICES)  # the same checks, messages and loop as GRPOConfig's
        check_threads("torch_num_threads", self.torch_num_threads)
        if self.mix_share > 0 and not self.mix_column:
            raise ConfigError(f"mix_share={self.mix_share} needs mix_column: the column its problems imitate")
        if self.environment:
            try:
                env = get_environment(self.environment)
            except ValueError as e:
                raise ConfigError(f"environment: {e}") from None
            missing = env.missing_chars(self.chars)
            if missing:
                raise ConfigError(
                    f"environment {self.environment}: its calls and replies use {missing!r}, outside chars "
                    f"{self.chars!r}"
                )

    @classmethod
    def for_task(cls, name: str, **overrides) -> SFTConfig:
        """The reference recipe of task `name` (ValueError if it has none), with `overrides` on top."""
        return cls(**{**task_recipe(name), **overrides, "task": name})


def task_recipe(name: str) -> dict:
    """The SFTConfig fields of task `name`'s reference recipe; a ValueError for an unknown task or one without."""
    from .task import get_task

    task = get_task(name)
    if task.reference is None:
        raise ValueError(
            f"task {name!r} has no reference recipe of its own: its GRPO recipe ({task.config}) starts from the "
            "model it names"
        )
    return {"dataset": task.dataset, "chars": task.chars, **task.reference}


SFT_CHOICES = {"lr_scheduler_type": ("constant", "cosine")}
# Single-field bounds, checked in this order by tinygrpo.config.check_fields (after the finite-number check), as
# GRPOConfig's BOUNDS: "{name} must be {bound.describe()}, got {value}".
SFT_BOUNDS: dict[str, Bound] = {
    **dict.fromkeys(
        ("max_steps", "per_device_train_batch_size", "n_layer", "n_embd", "n_head", "n_positions"), Bound(1)
    ),
    "train_size": Bound(0),  # 0 = the whole split
    "learning_rate": Bound(0, lo_open=True),
    "weight_decay": Bound(0),
    "torch_num_threads": Bound(0),  # 0 = torch's default
    "seed": BOUNDS["seed"],  # numpy and torch take 32-bit seeds
    "label_smoothing": Bound(0, 1),  # the probability mass moved from the label to the other tokens
    "mix_share": Bound(0, 1),
    "logging_steps": Bound(0),  # 0 = never
}


def check_memory(cfg: SFTConfig, vocab: int, tokens: int) -> None:
    """Training holds the model with its gradients and AdamW's two moments (16 bytes a parameter) and one batch's
    activations (tinygrpo.validation.ModelShape's estimate, as GRPO's update): refused above the memory budget
    before the model is built, naming the sizes and the estimate."""
    shape = ModelShape(cfg.n_layer, cfg.n_embd, 4 * cfg.n_embd, cfg.n_head, vocab, tokens)
    c = cfg.n_embd
    params = (
        (vocab + cfg.n_positions) * c + cfg.n_layer * (12 * c * c + 13 * c) + 2 * c
    )  # TinyLM's, tied head
    need, budget = 16 * params + shape.train_bytes(cfg.per_device_train_batch_size, tokens), memory_budget()
    if need > budget:
        raise ConfigError(
            f"n_layer={cfg.n_layer}, n_embd={cfg.n_embd}, n_positions={cfg.n_positions} ({params:,} parameters) and "
            f"per_device_train_batch_size={cfg.per_device_train_batch_size} x {tokens} tokens would need ~{gigabytes(need)} at once to train (limit "
            f"~{gigabytes(budget)}, half this machine's memory); lower them"
        )


def encode_examples(
    tokenizer, prompts: list[str], answers: list[str], replies: list[list[tuple[int, int]]] | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded (N, T) ids, attention mask, and labels (-100 except on the answer and <eos>, and, with `replies`
    (each answer's environment replies as (start, stop) character offsets), -100 on those too)."""
    texts = [p + a + EOS_TOKEN for p, a in zip(prompts, answers, strict=True)]
    enc = tokenizer(texts, padding=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    answer_len = torch.tensor([len(a) + 1 for a in answers])  # +1 for <eos>; one token per character
    pos_from_end = torch.arange(ids.size(1) - 1, -1, -1)[None]  # (1, T): distance from the last column
    labels = ids.masked_fill(pos_from_end >= answer_len[:, None], -100)
    T = ids.size(1)
    for i, spans in enumerate(replies or []):
        first = T - (len(answers[i]) + 1)  # the answer's first column (left padding)
        for start, stop in spans:
            labels[i, first + start : first + stop] = -100
    return ids, mask, labels


def target_replies(target: str, env, where: str) -> list[tuple[int, int]]:
    """Where a target's environment replies lie ((start, stop) character offsets), each checked to be what the
    environment answers: a target that puts other words in its mouth would teach a reply it never gives."""
    spans = []
    for call, start, stop in written_calls(target, env, env.max_calls):
        said, answered = target[start:stop], env.call(call).text
        if said != answered:
            raise ValueError(
                f"{where}: the target's reply to the call {call!r} is {said!r}, but {env.name} answers {answered!r}"
            )
        spans.append((start, stop))
    return spans


def missing_columns(cfg: SFTConfig, columns: list[str]) -> None:
    """A ValueError naming completion_column or mix_column when the training split has no such column."""
    for name in (cfg.completion_column, *([cfg.mix_column] if cfg.mix_column else [])):
        if name not in columns:
            column = "completion_column" if name == cfg.completion_column else "mix_column"
            raise ValueError(
                f"{column} {name!r}: {cfg.dataset}/{cfg.train_split} has no such column (columns: {', '.join(columns)})"
            )


def training_targets(cfg: SFTConfig, train) -> list[str]:
    """Each training problem's target completion: completion_column's, or mix_column's for a fixed share of the
    problems (mix_share, drawn by a generator of its own: the batches' draws are those of an unmixed run)."""
    missing_columns(cfg, train.column_names)
    targets = [str(t) for t in train[cfg.completion_column]]
    if cfg.mix_share > 0:
        alternative = train[cfg.mix_column]
        for i in random.Random(cfg.seed).sample(range(len(targets)), round(cfg.mix_share * len(targets))):
            targets[i] = str(alternative[i])
    return targets


def train_reference(cfg: SFTConfig, verbose: bool = True) -> dict:
    """Train and save the reference; returns a summary dict (also written as sft_summary.json)."""
    out = Path(cfg.output_dir)
    if (out / "config.json").exists() and not cfg.overwrite_output_dir:
        raise ValueError(
            f"output_dir {out} already holds a model; pass --overwrite_output_dir true to replace it, or choose "
            f"another --output_dir"
        )
    check_apart(out, [Input("dataset", cfg.dataset, dataset_dir(cfg.dataset), True)])
    t0 = time.time()
    if cfg.torch_num_threads:
        torch.set_num_threads(cfg.torch_num_threads)
    torch.manual_seed(cfg.seed)
    tokenizer = build_tokenizer(cfg.chars)
    if cfg.task:
        from .task import get_task

        task = get_task(cfg.task)
        if not (task.data_dir / MANIFEST).is_file():
            # A family's problems are written on first use: not for a model that would be refused anyway (its
            # longest example is at most n_positions tokens).
            check_memory(cfg, len(tokenizer), cfg.n_positions)
        task.ensure_data()
    columns = first_row_columns(cfg.dataset, cfg.train_split)  # (a column named wrong: said before the load)
    if columns is not None:
        missing_columns(cfg, columns)
    train = load_split(cfg.dataset, cfg.train_split)
    if cfg.train_size and cfg.train_size < len(train):
        train = train.shuffle(seed=cfg.seed).select(range(cfg.train_size))
    targets = training_targets(cfg, train)
    for i, (p, a) in enumerate(zip(train["prompt"], targets, strict=True)):
        check_text(p + a, tokenizer, where=f"{cfg.dataset}/{cfg.train_split} row {i + 1}")
    tools = reply_spans = None
    if cfg.environment:
        env = get_environment(cfg.environment)
        tools = ToolUse(env, tokenizer, env.max_calls)
        reply_spans = [
            target_replies(a, env, f"{cfg.dataset}/{cfg.train_split} row {i + 1}")
            for i, a in enumerate(targets)
        ]
    ids, mask, labels = encode_examples(tokenizer, train["prompt"], targets, reply_spans)
    if ids.size(1) > cfg.n_positions:
        raise ValueError(f"n_positions={cfg.n_positions} is shorter than the longest example ({ids.size(1)})")
    check_memory(cfg, len(tokenizer), ids.size(1))

    config = TinyLMConfig(
        vocab_size=len(tokenizer),
        n_positions=cfg.n_positions,
        n_embd=cfg.n_embd,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = TinyLMForCausalLM(config)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, cfg.max_steps) / cfg.max_steps))
            if cfg.lr_scheduler_type == "cosine"
            else 1.0
        ),
    )
    gen = torch.Generator().manual_seed(cfg.seed)
    first_loss = last_loss = float("nan")
    for step in range(1, cfg.max_steps + 1):
        idx = torch.randint(0, ids.size(0), (cfg.per_device_train_batch_size,), generator=gen)
        logits = model(ids[idx], attention_mask=mask[idx], use_cache=False).logits  # (B, T, V)
        # Position t predicts token t + 1; only the answer and <eos> carry labels (-100 elsewhere).
        loss = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)),
            labels[idx][:, 1:].reshape(-1),
            ignore_index=-100,
            label_smoothing=cfg.label_smoothing,
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        last_loss = loss.item()
        if not math.isfinite(last_loss):  # the weights it came from are no use: stop, and save nothing
            raise NonFiniteError(
                f"step {step}: the loss is NaN or infinite (learning_rate={cfg.learning_rate} too large?); "
                "stopped, nothing saved"
            )
        if step == 1:
            first_loss = last_loss
        if verbose and cfg.logging_steps and step % cfg.logging_steps == 0:
            print(f"sft step {step:5d}  loss {last_loss:.4f}", flush=True)
    train_time = time.time() - t0

    max_new = max(len(a) for a in targets) + 2
    summary = {
        "train_problems": len(train),
        **({"mixed_problems": round(cfg.mix_share * len(train))} if cfg.mix_share > 0 else {}),
        "steps": cfg.max_steps,
        "first_loss": first_loss,
        "final_loss": last_loss,
        "train_seconds": round(train_time, 2),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    if cfg.eval_split:
        test = load_split(cfg.dataset, cfg.eval_split)
        summary["eval_split"] = cfg.eval_split
        verifier = Verifier.of(cfg.dataset, task=cfg.task or None)
        rows = test.to_dict()
        summary["eval_accuracy"], outs = greedy_accuracy(
            model, tokenizer, rows, max_new, verifier, tools=tools
        )
        summary["eval_problems"] = len(test)
        if verifier.formats is not None:  # the form the greedy completions take, and which are right
            m = format_metrics(
                "", verifier.formats, format_counts(verifier.formats, outs, verifier(outs, rows))
            )
            for key, name in (("format/", "eval_formats"), ("format_accuracy/", "eval_format_accuracy")):
                summary[name] = {k.removeprefix(key): v for k, v in m.items() if k.startswith(key)}
    bad = nonfinite_weight(model)  # (the last step's update may have made them so, after a finite loss)
    if bad is not None:
        raise NonFiniteError(
            f"step {cfg.max_steps}: the weights are NaN or infinite ({bad}; learning_rate={cfg.learning_rate} too "
            "large?); nothing saved"
        )
    texts = {
        "sft_config.json": json.dumps(asdict(cfg), indent=2),
        "sft_summary.json": json.dumps(summary, indent=2),
    }
    save_model_files(out, [model, tokenizer], texts)  # (all or nothing: a failed save leaves no half model)
    if verbose:
        acc = summary.get("eval_accuracy")
        acc_s = (
            f", held-out greedy accuracy {acc:.1%} on {summary['eval_problems']} problems"
            if acc is not None
            else ""
        )
        print(
            f"reference saved to {out}: {summary['parameters']:,} parameters, {len(train)} training problems, "
            f"{cfg.max_steps} steps in {train_time:.1f}s, loss {first_loss:.3f} -> {last_loss:.3f}{acc_s}"
        )
    return summary
