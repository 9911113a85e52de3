"""Supervised training of the reference policy on "a+b=c<eos>" strings (the CLI is train_sft.py).

    python train_sft.py                                                    # the default, deliberately imperfect reference
    python train_sft.py --train_size 0 --max_steps 3000 --lr_scheduler_type cosine   # the whole train split: 100 %

The default recipe's budget is explicit: 400 training problems (a fixed sample of the train split), 1000 steps of
batch 128, AdamW 3e-3. That gives a reference that has learnt the format (digits then <eos>) and most, not all, of
the held-out sums (docs/default.md): the starting point GRPO must improve. The loss covers only the answer and <eos> (the prompt is
given, not predicted). The test split is never trained on; its greedy accuracy is printed at the end.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from tiny_lm import TinyLMConfig, TinyLMForCausalLM, build_tokenizer, check_text
from tiny_lm.tokenization_tiny_lm import vocabulary_chars
from tinygrpo.base.files import Input, check_apart, save_model_files
from tinygrpo.base.options import ConfigError
from tinygrpo.data.checks import check_held_out
from tinygrpo.data.problems import MANIFEST, dataset_dir, first_row_columns, load_split
from tinygrpo.data.verifier import Verifier, format_counts, format_metrics
from tinygrpo.model.memory import ModelShape, gigabytes, memory_budget
from tinygrpo.model.text import eos_text
from tinygrpo.rollout.environment import get_environment
from tinygrpo.rollout.evaluation import greedy_accuracy
from tinygrpo.rollout.tool_calls import ToolUse
from tinygrpo.sft.config import SFTConfig
from tinygrpo.sft.targets import encode_examples, missing_columns, target_replies, training_targets
from tinygrpo.update.policy_update import NonFiniteError, nonfinite_weight


def check_memory(cfg: SFTConfig, vocab: int, tokens: int) -> None:
    """Training holds the model with its gradients and AdamW's two moments (16 bytes a parameter) and one batch's
    activations (tinygrpo.run.validation.ModelShape's estimate, as GRPO's update): refused above the memory budget
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


# The kernels meant to run alike on every x86-64 CPU: ATen's generic (non-vectorised) ones, MKL in its conditional
# numerical reproducibility mode (documented as the same results on Intel and compatible CPUs), oneDNN at most at
# SSE4.1. They are read when torch and MKL load, so a process is started with them (kernels="portable"). They give one
# reference whichever kernels a process starts on; an AMD EPYC and an Intel Xeon still train two (docs/default.md;
# studies.fingerprint finds where two CPUs part).
PORTABLE = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE",
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
}
# How a child says why it stopped (its last stderr line is "error: ..."), as the exception the caller gets: a
# failed write (4) comes back as its one described line, as a ValueError.
CHILD_ERRORS = {2: ValueError, 3: NonFiniteError, 4: ValueError, 5: KeyboardInterrupt}
SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def _handling(handler: Callable) -> Iterator[None]:
    """SIGINT and SIGTERM go to `handler` inside the block (in the main thread: handlers can be set nowhere else)."""
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, handler) for s in SIGNALS} if main else {}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def stop_on_signals(out: Path):
    """Ctrl-C or SIGTERM stops the reference's training at once (it has no checkpoint to stop at) and saves nothing:
    a KeyboardInterrupt that says so, raised once (a second signal, as a terminal's Ctrl-C passed on by a parent,
    changes nothing); train_sft.py prints its one line and exits with 130, as train_grpo.py does."""
    said: list[str] = []

    def stop(signum, frame) -> None:
        if not said:
            said.append(signal.Signals(signum).name)
            raise KeyboardInterrupt(f"{said[0]}: the reference's training stopped; nothing saved in {out}")

    return _handling(stop)


def _die_with_parent() -> None:
    """A SIGTERM for this process when its parent dies, killed or not (Linux): no orphan trains on and saves later."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # (1: PR_SET_PDEATHSIG)
    except (OSError, AttributeError):
        pass


def on_portable_kernels() -> bool:
    """Whether this process was started on PORTABLE's kernels."""
    return torch.backends.cpu.get_cpu_capability() == "DEFAULT" and all(
        os.environ.get(k) == v for k, v in PORTABLE.items()
    )


def visible_to_a_child(task: str) -> bool:
    """Whether a fresh process finds the task `task` names: a built-in one, a family of a built-in module, a task
    file, or a module's (module:NAME); not one registered at run time by this process's own code."""
    from tinygrpo.data.task import TASK_FAMILIES, TASKS, get_task

    head, _, tail = task.partition(":")
    if head.endswith(".py") or (tail and head not in TASK_FAMILIES and head not in TASKS):
        return True  # a file, or module:NAME: the child imports it as this process did
    owner = TASK_FAMILIES[head].__module__ if tail else get_task(task).build.__module__
    return owner.startswith("tinygrpo.")


def train_in_child(cfg: SFTConfig, verbose: bool) -> dict:
    """train_reference in a process started on PORTABLE's kernels (`python -m tinygrpo.sft.train CONFIG_JSON`): its
    lines printed as they come, its error raised here as the same class with the same message."""
    if cfg.task and not visible_to_a_child(cfg.task):
        raise ConfigError(
            f"task {cfg.task!r} was registered by this process's code, and kernels=portable trains in a fresh "
            "process that cannot see it: put it in a task file (--task path/to/file.py), or pass --kernels native"
        )
    overridden = [f"{k}={os.environ[k]}" for k, v in PORTABLE.items() if os.environ.get(k, v) != v]
    if overridden and verbose:  # (a user's own setting, replaced: said, not silently)
        print(
            f"kernels=portable: {', '.join(overridden)} from the environment is replaced for the reference's "
            "training (tinygrpo.sft.train.PORTABLE); --kernels native keeps it",
            file=sys.stderr,
        )
    child = subprocess.Popen(
        [sys.executable, "-m", "tinygrpo.sft.train", json.dumps(asdict(cfg)), "1" if verbose else "0"],
        env={**os.environ, **PORTABLE},
        stdout=None if verbose else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    # A signal here is passed on, and the child, stopping as it does (stop_on_signals), is waited for.
    with _handling(lambda signum, frame: child.send_signal(signum)):
        stderr = child.communicate()[1]
    lines = stderr.splitlines()
    said = [line for line in lines if not line.startswith("error: ")]
    if said and verbose:
        print("\n".join(said), file=sys.stderr)
    if child.returncode:
        errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
        if child.returncode in CHILD_ERRORS and errors:
            raise CHILD_ERRORS[child.returncode](errors[-1])
        raise RuntimeError(
            f"the reference's training process exited with {child.returncode}: {stderr[-2000:]}"
        )
    return json.loads((Path(cfg.output_dir) / "sft_summary.json").read_text())


def train_reference(cfg: SFTConfig, verbose: bool = True) -> dict:
    """Train and save the reference; returns a summary dict (also written as sft_summary.json). With
    kernels="portable" in a process not started on them, its inputs are checked here and it trains in one that is."""
    out = Path(cfg.output_dir)
    if (out / "config.json").exists() and not cfg.overwrite_output_dir:
        raise ValueError(
            f"output_dir {out} already holds a model; pass --overwrite_output_dir true to replace it, or choose "
            f"another --output_dir"
        )
    check_apart(out, [Input("dataset", cfg.dataset_name, dataset_dir(cfg.dataset_name), True)])
    t0 = time.time()
    if cfg.torch_num_threads:
        torch.set_num_threads(cfg.torch_num_threads)
    torch.manual_seed(cfg.seed)
    tokenizer = build_tokenizer(cfg.chars)
    train, targets, tools, (ids, mask, labels) = training_examples(cfg, tokenizer)
    if (
        cfg.kernels == "portable" and not on_portable_kernels()
    ):  # (every check above made here: one line, at once)
        return train_in_child(cfg, verbose)
    model = initial_model(cfg, tokenizer)
    first_loss, last_loss = fit(model, cfg, ids, mask, labels, verbose)
    train_time = time.time() - t0
    summary = {
        "train_problems": len(train),
        **({"mixed_problems": round(cfg.mix_share * len(train))} if cfg.mix_share > 0 else {}),
        "steps": cfg.max_steps,
        **{"first_loss": first_loss, "final_loss": last_loss},
        "train_seconds": round(train_time, 2),
        "parameters": sum(p.numel() for p in model.parameters()),
        "kernels": f"{cfg.kernels} ({torch.backends.cpu.get_cpu_capability()})",
    }
    if cfg.dataset_test_split:
        summary.update(held_out_summary(cfg, model, tokenizer, max(len(a) for a in targets) + 2, tools))
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


def initial_model(cfg: SFTConfig, tokenizer) -> TinyLMForCausalLM:
    """The reference before training: cfg's sizes, initialised from torch's global generator."""
    sizes = {k: getattr(cfg, k) for k in ("n_positions", "n_embd", "n_layer", "n_head")}
    special = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    return TinyLMForCausalLM(TinyLMConfig(vocab_size=len(tokenizer), **sizes, **special))


def training_examples(cfg: SFTConfig, tokenizer):
    """The training split (a task's problems written first), each problem's target, checked on the tokenizer, the
    held-out verifier and the environment, and encoded: (train, targets, the environment's tools or None, (ids,
    mask, labels)). Every check an SFT run makes before training."""
    if cfg.task:
        from tinygrpo.data.task import get_task

        task = get_task(cfg.task)
        if not (task.data_dir / MANIFEST).is_file():
            # A family's problems are written on first use: not for a model that would be refused anyway (its
            # longest example is at most n_positions tokens).
            check_memory(cfg, len(tokenizer), cfg.n_positions)
        task.ensure_data()
    where = f"{cfg.dataset_name}/{cfg.dataset_train_split}"
    columns = first_row_columns(
        cfg.dataset_name, cfg.dataset_train_split
    )  # (a column named wrong: said first)
    if columns is not None:
        missing_columns(cfg, columns)
    train = load_split(cfg.dataset_name, cfg.dataset_train_split)
    if cfg.train_size and cfg.train_size < len(train):
        train = train.shuffle(seed=cfg.seed).select(range(cfg.train_size))
    if cfg.dataset_test_split:  # GRPO's checks of a held-out evaluation, before any training
        verifier = Verifier.of(cfg.dataset_name, task=cfg.task or None, eos=eos_text(tokenizer))
        splits = (cfg.dataset_name, cfg.dataset_train_split, cfg.dataset_test_split)
        test = load_split(cfg.dataset_name, cfg.dataset_test_split)
        check_held_out(verifier, train, test, splits, cfg.allow_overlapping_splits)
    targets = training_targets(cfg, train)
    known = vocabulary_chars(tokenizer)
    for i, (p, a) in enumerate(zip(train["prompt"], targets, strict=True)):
        check_text(p + a, tokenizer, where=f"{where} row {i + 1}", known=known)
    tools = reply_spans = None
    if cfg.environment:
        env = get_environment(cfg.environment)
        tools = ToolUse(env, tokenizer, env.max_calls)
        columns = {c: train[c] for c in train.column_names} if env.stateful else None
        rows = [{c: v[i] for c, v in columns.items()} for i in range(len(train))] if columns else None
        reply_spans = target_replies(targets, env, where, rows)
    ids, mask, labels = encode_examples(tokenizer, train["prompt"], targets, reply_spans)
    if ids.size(1) > cfg.n_positions:
        raise ValueError(f"n_positions={cfg.n_positions} is shorter than the longest example ({ids.size(1)})")
    check_memory(cfg, len(tokenizer), ids.size(1))
    return train, targets, tools, (ids, mask, labels)


def fit(
    model: nn.Module,
    cfg: SFTConfig,
    ids: Tensor,
    mask: Tensor,
    labels: Tensor,
    verbose: bool,
    on_step: Callable[[int, Tensor, float], None] | None = None,
) -> tuple[float, float]:
    """The SFT loop: max_steps AdamW steps on batches drawn with replacement (a generator seeded by cfg.seed),
    cross-entropy on the labelled tokens (the answer and <eos>), the gradient clipped at 1. Its first and last loss;
    a NaN or infinite loss stops it (NonFiniteError: nothing is saved). `on_step(step, batch rows, loss)` is called
    after each step's update (studies.fingerprint hashes the weights there)."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    cosine = cfg.lr_scheduler_type == "cosine"
    steps = cfg.max_steps
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)) if cosine else 1.0
    )
    gen = torch.Generator().manual_seed(cfg.seed)
    first_loss = last_loss = float("nan")
    for step in range(1, steps + 1):
        idx = torch.randint(0, ids.size(0), (cfg.per_device_train_batch_size,), generator=gen)
        logits = model(ids[idx], attention_mask=mask[idx], use_cache=False).logits  # (B, T, V)
        # Position t predicts token t + 1; only the answer and <eos> carry labels (-100 elsewhere).
        loss = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)),
            labels[idx][:, 1:].reshape(-1),
            ignore_index=-100,
            label_smoothing=cfg.label_smoothing_factor,
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        last_loss = loss.item()
        if on_step is not None:
            on_step(step, idx, last_loss)
        if not math.isfinite(last_loss):  # the weights it came from are no use: stop, and save nothing
            raise NonFiniteError(
                f"step {step}: the loss is NaN or infinite (learning_rate={cfg.learning_rate} too large?); "
                "stopped, nothing saved"
            )
        if step == 1:
            first_loss = last_loss
        if verbose and cfg.logging_steps and step % cfg.logging_steps == 0:
            print(f"sft step {step:5d}  loss {last_loss:.4f}", flush=True)
    return first_loss, last_loss


def held_out_summary(
    cfg: SFTConfig, model: nn.Module, tokenizer, max_new: int, tools: ToolUse | None
) -> dict:
    """The trained reference on the held-out split: greedy accuracy under the task's verifier (and the share of
    each answer format, where the task defines them), as sft_summary.json records it."""
    test = load_split(cfg.dataset_name, cfg.dataset_test_split)
    verifier = Verifier.of(cfg.dataset_name, task=cfg.task or None, eos=eos_text(tokenizer))
    rows = test.to_dict()
    summary = {"eval_split": cfg.dataset_test_split}
    summary["eval_accuracy"], outs = greedy_accuracy(model, tokenizer, rows, max_new, verifier, tools=tools)
    summary["eval_problems"] = len(test)
    if verifier.formats is not None:  # the form the greedy completions take, and which are right
        m = format_metrics("", verifier.formats, format_counts(verifier.formats, outs, verifier(outs, rows)))
        for key, name in (("format/", "eval_formats"), ("format_accuracy/", "eval_format_accuracy")):
            summary[name] = {k.removeprefix(key): v for k, v in m.items() if k.startswith(key)}
    return summary


def child_main(argv: list[str]) -> int:
    """`python -m tinygrpo.sft.train CONFIG_JSON VERBOSE`: train_in_child's process."""
    if len(argv) != 2 or argv[1] not in ("0", "1"):  # (--help among them: this is no command for a person)
        usage = (
            "usage: python -m tinygrpo.sft.train CONFIG_JSON 0|1 -- the portable reference's training process, "
            "started by train_sft.py (--kernels portable); to train a reference, run python train_sft.py --help"
        )
        if argv in (["--help"], ["-h"]):
            print(usage)
            return 0
        print(f"error: {usage}", file=sys.stderr)
        return 2
    import datasets
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # (as train_sft.py: no bars around the script's own lines)
    datasets.disable_progress_bars()
    _die_with_parent()
    cfg = SFTConfig(**json.loads(argv[0]))
    try:
        with stop_on_signals(Path(cfg.output_dir)):
            train_reference(cfg, verbose=argv[1] == "1")
    except KeyboardInterrupt as e:
        print(f"error: {e}", file=sys.stderr)
        return 5
    except NonFiniteError as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk, a read-only place: the file, the cause, and that nothing was saved
        from tinygrpo.base.files import describe_write_error

        where = json.loads(argv[0])["output_dir"]
        print(f"error: {describe_write_error(e, f'no model was saved in {where}')}", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
