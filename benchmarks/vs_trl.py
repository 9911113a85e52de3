"""Whole-step throughput of tinygrpo's GRPOTrainer against TRL's `trl.GRPOTrainer`, same model, data and shape.

    python benchmarks/vs_trl.py                          # both inits, 36x8 and 4x8, 3 blocks of 20 steps, 1 thread
    python benchmarks/vs_trl.py --threads 2 --reps 5 --steps 20 --shapes 36x8

Two starting points (--init), each at every shape:
  reference  both trainers load the same model directory: a 2-layer, 64-wide char GPT SFT'd on the 36 seed-bank
             questions (SFT'd for --reference_steps, 300, into runs/bench/seed_reference, or --bench_dir, the
             first time it is needed, then reused; or --model_name_or_path); it answers in ~2 tokens.
  random     both start from the same random function: a tiny_lm for us, a transformers GPT-2 holding the same
             weights for TRL (what its user would load; --grouped_forward false runs ours on that GPT-2 too).
             A random function rarely says <eos>: both sample completions near max_completion_length, the same
             length distribution by construction.
Both trainers train on the same 36 prompts with G
completions each, max_completion_length 4, temperature 1.0, beta 0.02 (a reference model is kept and run; the k3
KL estimator in both), num_iterations 1, loss_type dapo, AdamW lr 2e-3 (betas 0.9/0.999, no weight decay), gradient
clip 1.0, fp32 on the CPU. Rewards: exact-match accuracy (the completion is the answer followed by <eos>; for TRL,
whose reward functions see text decoded without special tokens, the stripped text equals the answer and the last
completion token is <eos>).

What is timed: whole training steps (sampling, rewards, advantages, reference forward, policy forward + backward,
clip, optimizer, scheduler, per-step bookkeeping).
  ours  `GRPOTrainer.training_step()` called back to back; each call timed with perf_counter.
  TRL   one `trainer.train()` run; a TrainerCallback records the time between consecutive `on_step_end` calls, so
        each TRL step includes everything the Trainer loop does per step (data loading, `_prepare_inputs` with
        generation and rewards, the reference forward, forward + backward, clip, optimizer, scheduler, callbacks).
        (`on_step_begin` -> `on_step_end`, which leaves out the data loading, is reported too.)
Both trainers live in one process and run interleaved, A B A B: after W warm-up steps each, the callback runs a
block of N steps of ours, then TRL runs N steps, and so on for --reps repetitions. Throughput of a block =
completions in the block / its summed step times; the table gives the median and min-max over repetitions, and the
ratio ours / TRL per repetition pair. The medians go to --results (docs/results/vs_trl.json, replacing the rows of
the settings run), which benchmarks/README.md's tables are drawn from (throughput_table, opsplit_table, length_table).
The report names the device each trainer's model ran on (`device: ours cpu, trl cpu`; --device sets both): a run
whose trainers ended up on different devices stops with an error instead.

Our trainer runs TRL's GRPO: one round of the prompts per step, in order (exploration, dynamic sampling and the
weighted prompt sampler off). TRL loads the model directory itself (`GRPOTrainer(model=path)`): tiny_lm is a conventional transformers model, with
a `TinyLMModel` backbone for TRL's fused log-prob head and an `auto_map` in its saved config.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

if not __package__:  # python benchmarks/vs_trl.py (imported as benchmarks.vs_trl, the docs render its tables)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import (  # noqa: E402
    ModelDirs,
    build_our_trainer,
    device_line,
    fmt_mmm,
    machine_line,
    md_table,
    merge_rows,
    parse_bool,
    run_and_record,
    shape_parser,
    sync,
)
from benchmarks._opsplit import OpSplit, StepProfile, median_split  # noqa: E402
from studies.results import RESULTS, markdown, measurement  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = shape_parser(
        __doc__,
        steps_help="Steps per timed block (default 20).",
        warmup_help="Untimed warm-up steps per trainer (default 3).",
        model_help="Model directory for both trainers (default: a seed-bank reference in --bench_dir, trained there "
        "the first time).",
        json_help="Also write the raw per-step timings here.",
        default_init="reference,random",
    )
    p.add_argument("--reps", type=int, default=3, help="Timed blocks per trainer, alternating (default 3).")
    p.add_argument(
        "--profile_steps",
        type=int,
        default=5,
        help="After the timed blocks, this many more steps per trainer, each under torch.profiler (default 5; 0: "
        "none): the median step's time inside the model's arithmetic kernels, inside every other ATen call, and the "
        "rest (benchmarks/_opsplit.py).",
    )
    p.add_argument(
        "--task",
        default="",
        help="Train on this task (tinygrpo/data/tasks/) instead of the seed bank: its train split, its verifier as the "
        "reward (for TRL wrapped to see <eos> as ours does), its reference (checkpoints/<task>, or "
        "--model_name_or_path) for both trainers (--init is ignored).",
    )
    p.add_argument("--beta", type=float, default=0.02)
    p.add_argument("--loss_type", default="dapo", choices=("dapo", "bnpo", "grpo", "dr_grpo"))
    p.add_argument("--max_completion_length", type=int, default=4)
    p.add_argument(
        "--device",
        default="cpu",
        choices=("cpu", "cuda"),
        help="Where both trainers run (default cpu; cuda: the first GPU, timings synchronised).",
    )
    p.add_argument(
        "--bf16",
        type=parse_bool,
        default=False,
        help="Both trainers under bf16 autocast (TRL's bf16; ours too).",
    )
    p.add_argument(
        "--results",
        default=str(RESULTS / "vs_trl.json"),
        help="The results file the docs' tables are drawn from (default docs/results/vs_trl.json; '' for none): "
        "this run's rows replace those of the same setting (task, start, shape, path, length, ...), the others "
        "stay (benchmarks/README.md draws on several runs).",
    )
    return p


# ---------------------------------------------------------------------------------------------------- TRL
def trl_accuracy(completions, answer, completion_ids=None, eos_token_id: int = 1, **kwargs):
    """Exact match for TRL: the text (decoded without special tokens) is the answer and the completion ended on EOS."""
    out = []
    for i, (c, a) in enumerate(zip(completions, answer, strict=True)):
        ok = c.strip() == str(a).strip()
        if ok and completion_ids is not None:
            ok = len(completion_ids[i]) > 0 and completion_ids[i][-1] == eos_token_id
        out.append(1.0 if ok else 0.0)
    return out


class TaskVerifierForTRL:
    """A task's verifier (which reads the EOS text at the end of a finished completion) under TRL, whose rewards see
    the text decoded without special tokens: the EOS text is put back where the completion's last id is EOS."""

    def __init__(self, name: str, eos_token_id: int, eos: str) -> None:
        from rewards import resolve_reward

        self.fn, self.eos_token_id, self.eos, self.__name__ = resolve_reward(name), eos_token_id, eos, name

    def __call__(self, completions, completion_ids, **columns):
        ended = [len(ids) > 0 and ids[-1] == self.eos_token_id for ids in completion_ids]
        texts = [c + self.eos if e else c for c, e in zip(completions, ended, strict=True)]
        return self.fn(completions=texts, eos=self.eos, **columns)


def build_trl_trainer(
    model_path: str,
    prompts: int,
    G: int,
    max_steps: int,
    learning_rate: float,
    args,
    callback,
    dataset: str = "seed_bank",
):
    from functools import partial

    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from tinygrpo.data.problems import load_split

    tok = AutoTokenizer.from_pretrained(model_path)
    if args.task:
        from tinygrpo.data.task import get_task

        reward = TaskVerifierForTRL(get_task(args.task).correct, tok.eos_token_id, tok.eos_token)
    else:
        reward = partial(trl_accuracy, eos_token_id=tok.eos_token_id)
        reward.__name__ = "accuracy"
    cfg = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-bench-"),
        per_device_train_batch_size=prompts * G,
        generation_batch_size=prompts * G,
        num_generations=G,
        max_completion_length=args.max_completion_length,
        temperature=1.0,
        beta=args.beta,
        num_iterations=1,
        loss_type=args.loss_type,
        scale_rewards="group",
        learning_rate=learning_rate,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=max_steps,
        report_to="none",
        use_cpu=args.device == "cpu",
        bf16=args.bf16,
        fp16=False,
        gradient_checkpointing=False,
        logging_strategy="no",
        save_strategy="no",
        eval_strategy="no",
        disable_tqdm=True,
        seed=0,
        dataloader_num_workers=0,
    )
    return GRPOTrainer(
        model=model_path,
        reward_funcs=reward,
        args=cfg,
        train_dataset=load_split(dataset, "train"),
        processing_class=tok,
        callbacks=[callback],
    )


# ---------------------------------------------------------------------------------------------------- the A/B run
def run_shape(dirs: ModelDirs, prompts: int, G: int, args) -> dict:
    import torch
    from transformers import TrainerCallback

    n = prompts * G
    task = None
    if args.task:
        from tinygrpo.data.task import get_task

        task = get_task(args.task)
    on_task = {"dataset": task.dataset, "reward_funcs": [task.correct]} if task else {}
    ours = build_our_trainer(
        dirs.for_ours(args.grouped_forward),
        prompts,
        G,
        args.threads,
        **on_task,
        beta=args.beta,
        loss_type=args.loss_type,
        learning_rate=dirs.learning_rate(args),
        max_completion_length=args.max_completion_length,
        grouped_forward=args.grouped_forward,
        device=args.device,
        bf16=args.bf16,
    )
    before = [q.detach().clone() for q in ours.model.parameters()]
    ours_blocks: list[list[float]] = []
    ours_len: list[tuple[float, float]] = []  # (mean, max) completion length of each timed step
    pushed: list[bool] = []  # whether each of our steps had a non-zero gradient to apply

    def ours_steps(k: int, record: bool = True) -> list[float]:
        ts = []
        for _ in range(k):
            t = time.perf_counter()
            m = ours.training_step().metrics
            sync(args.device)
            ts.append(time.perf_counter() - t)
            if record:
                ours_len.append((m["completions/mean_length"], m["completions/max_length"]))
            pushed.append(bool(m.get("grad_norm")))
        return ts

    W, N, R, F = args.warmup, args.steps, args.reps, args.profile_steps

    class Interleave(TrainerCallback):
        def __init__(self) -> None:
            self.gaps: list[float] = []  # on_step_end -> on_step_end: TRL's whole loop iteration
            self.inner: list[float] = []  # on_step_begin -> on_step_end
            self.last = self.begin = 0.0
            self.trainer = None  # set after construction: per-step completion lengths come from its metrics
            self.lengths: list[tuple[float, float]] = []
            self.profile: StepProfile | None = None
            self.splits: list[OpSplit] = []  # TRL's last F steps, one profile each

        def on_train_begin(self, a, state, control, **kw):
            torch.set_num_threads(args.threads)
            self.last = time.perf_counter()

        def on_step_begin(self, a, state, control, **kw):
            self.begin = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            sync(args.device)
            now = time.perf_counter()
            self.gaps.append(now - self.last)
            self.inner.append(now - self.begin)
            if self.trainer is not None:
                mt = self.trainer._metrics["train"]
                if mt.get("completions/mean_length") and mt.get("completions/max_length"):
                    self.lengths.append((mt["completions/mean_length"][-1], mt["completions/max_length"][-1]))
            k = state.global_step
            if k >= W and (k - W) % N == 0 and len(ours_blocks) < R:
                if k == W:
                    ours_steps(W, record=False)  # our warm-up, right after TRL's
                assert torch.get_num_threads() == args.threads, torch.get_num_threads()
                ours_blocks.append(ours_steps(N))
            if self.profile is not None:  # one profiled step ends, from on_step_end to on_step_end as timed
                self.splits.append(self.profile.stop())
                self.profile = None
            if W + R * N <= k < W + R * N + F:  # the timed blocks are done: profile TRL's last F steps
                self.profile = StepProfile()
                self.profile.start()
            self.last = time.perf_counter()

    cb = Interleave()
    steps, lr = W + R * N + F, dirs.learning_rate(args)
    dataset = on_task.get("dataset", "seed_bank")
    trl = build_trl_trainer(dirs.peer, prompts, G, steps, lr, args, cb, dataset=dataset)
    cb.trainer = trl
    torch.set_num_threads(args.threads)
    with contextlib.redirect_stdout(sys.stderr):  # the Trainer prints its summary dict
        trl.train()
    # Both trainers share accelerate's GradientState singleton; make sure ours really stepped inside TRL's loop.
    # (A random function may find no reward and no gradient in a few steps: then nothing had to move.)
    if any(pushed) and all(torch.equal(a, b) for a, b in zip(before, ours.model.parameters(), strict=True)):
        raise RuntimeError("our trainer's parameters did not change: its optimizer steps were skipped")
    # Where each trainer's model ran (the parameters' device once trained): like for like only on one device.
    ours_device = next(ours.model.parameters()).device.type
    trl_device = next(trl.model.parameters()).device.type
    if ours_device != trl_device:
        raise RuntimeError(f"the trainers ran on different devices: ours {ours_device}, TRL {trl_device}")
    ours_splits = []
    for _ in range(F):
        profile = StepProfile()
        profile.start()
        ours_steps(1, record=False)
        ours_splits.append(profile.stop())
    trl_blocks = [cb.gaps[W + r * N : W + (r + 1) * N] for r in range(R)]
    trl_inner = [cb.inner[W + r * N : W + (r + 1) * N] for r in range(R)]
    ours_cps = [n * len(b) / sum(b) for b in ours_blocks]
    trl_cps = [n * len(b) / sum(b) for b in trl_blocks]
    trl_inner_cps = [n * len(b) / sum(b) for b in trl_inner]
    return {
        "shape": f"{prompts}x{G}",
        "completions_per_step": n,
        "ours_step_s": ours_blocks,
        "trl_step_s": trl_blocks,
        "trl_inner_step_s": trl_inner,
        "ours_cps": ours_cps,
        "trl_cps": trl_cps,
        "trl_inner_cps": trl_inner_cps,
        "ratio": [a / b for a, b in zip(ours_cps, trl_cps, strict=True)],
        "ours_lengths": ours_len,
        "trl_lengths": cb.lengths[W : W + R * N] if len(cb.lengths) == W + R * N + F else [],
        "ours_split": asdict(median_split(ours_splits)) if F else None,
        "trl_split": asdict(median_split(cb.splits)) if F else None,
        "ours_device": ours_device,
        "trl_device": trl_device,
    }


def _lengths(xs: list[tuple[float, float]]) -> str:
    """Mean completion length (tokens, EOS included) and the mean of the per-step maxima over the timed steps: the
    work per step follows them (decoding stops when every row has ended), and each trainer learns its own way."""
    if not xs:
        return "n/a"
    return f"{sum(a for a, _ in xs) / len(xs):.2f} / {sum(b for _, b in xs) / len(xs):.2f}"


def _block_ms(blocks: list[list[float]]) -> list[float]:
    """Each timed block's mean step, in ms."""
    return [1000 * sum(b) / len(b) for b in blocks]


def split_table(results: list[dict]) -> str:
    """Per shape and trainer: the timed step (median of the block means), its time inside the arithmetic kernels and
    inside other ATen calls (profiled steps), the rest, and the ratio TRL's step / our arithmetic kernels: what ours
    / TRL could reach if every other call and all Python were free, with torch's kernels as they are."""
    rows = []
    for r in results:
        ours_ms, trl_ms = (statistics.median(_block_ms(r[k])) for k in ("ours_step_s", "trl_step_s"))
        for who, ms, sp in (("ours", ours_ms, r["ours_split"]), ("TRL", trl_ms, r["trl_split"])):
            ceiling = f"{trl_ms / sp['arithmetic_ms']:.1f}x" if who == "ours" else ""
            rows.append(
                [
                    r["label"],
                    who,
                    f"{ms:.1f}",
                    f"{sp['arithmetic_ms']:.1f} ({sp['arithmetic_calls']:.0f})",
                    f"{sp['other_ms']:.1f} ({sp['other_calls']:.0f})",
                    f"{ms - sp['arithmetic_ms'] - sp['other_ms']:.1f}",
                    ceiling,
                ]
            )
    head = [
        "shape",
        "trainer",
        "ms/step (timed)",
        "arithmetic kernels ms (calls)",
        "other ATen calls ms (calls)",
        "the rest ms",
        "ceiling of ours / TRL",
    ]
    return (
        "Where the steps go (--profile_steps more steps per trainer, each under torch.profiler, the median step's "
        "self times; "
        "benchmarks/_opsplit.py): the arithmetic kernels are matmuls, attention, GELU and LayerNorm, forward and "
        "backward; the rest is the timed step minus both (Python, the autograd engine, bookkeeping). The ceiling is "
        "TRL's step over our arithmetic kernels: the most ours / TRL can be with torch's kernels as they are.\n\n"
        + md_table(head, rows)
    )


def report(results: list[dict], args) -> str:
    rows = []
    for r in results:
        ours_ms, trl_ms = _block_ms(r["ours_step_s"]), _block_ms(r["trl_step_s"])
        rows.append(
            [
                r["label"],
                r["completions_per_step"],
                fmt_mmm(r["ours_cps"]),
                fmt_mmm(r["trl_cps"]),
                fmt_mmm(r["ratio"], 2),
                fmt_mmm(ours_ms, 1),
                fmt_mmm(trl_ms, 1),
                fmt_mmm(r["trl_inner_cps"]),
                _lengths(r["ours_lengths"]),
                _lengths(r["trl_lengths"]),
            ]
        )
    head = [
        "shape (prompts x G)",
        "completions/step",
        "ours completions/s",
        "TRL completions/s",
        "ours / TRL",
        "ours ms/step",
        "TRL ms/step",
        "TRL completions/s (step_begin->end)",
        "ours completion length mean / max",
        "TRL completion length mean / max",
    ]
    return (
        f"### tinygrpo vs TRL: whole-step throughput\n\n{machine_line(args.threads)}; {args.reps} alternating "
        f"blocks of {args.steps} steps per trainer after {args.warmup} warm-up steps; median (min-max) over blocks.\n"
        f"{args.device}, bf16 {str(args.bf16).lower()}, beta {args.beta}, loss_type {args.loss_type}, "
        f"max_completion_length {args.max_completion_length}, "
        f"temperature 1.0, lr {args.learning_rate} from the reference, {args.random_learning_rate} from the "
        "random function (its lengths stay put).\n"
        + device_line(
            {"ours": [r["ours_device"] for r in results], "trl": [r["trl_device"] for r in results]}
        )
        + "\n\n"
        + md_table(head, rows)
        + ("\n\n" + split_table(results) if args.profile_steps else "")
    )


# ---------------------------------------------------------------------------------------------------- results
# A row's setting: a run replaces the rows of its own settings in the results file and keeps the others.
KEY = (
    "task",
    "init",
    "prompts",
    "G",
    "grouped_forward",
    "max_completion_length",
    "beta",
    "loss_type",
    "learning_rate",
    "device",
    "bf16",
)


def _mean_length(xs: list[tuple[float, float]]) -> float | None:
    return sum(a for a, _ in xs) / len(xs) if xs else None


def _split(sp: dict, step_ms: float) -> dict:
    """The profiled median step's split, and the rest: the timed step minus both (Python, autograd, bookkeeping)."""
    return {**sp, "rest_ms": step_ms - sp["arithmetic_ms"] - sp["other_ms"]}


def summarize(results: list[dict], args, command: str) -> list[dict]:
    """The rows of docs/results/vs_trl.json from a run's results (run_shape's, one per start and shape): the
    setting, then medians over the timed blocks (completions/s, the mean step in ms), the ratio ours / TRL of each
    block pair (median, min, max), the mean completion lengths, and (--profile_steps) the split of the median
    profiled step and the ceiling TRL's step / our arithmetic kernels."""
    rows = []
    for r in results:
        prompts, G = map(int, r["shape"].split("x"))
        ours_ms = statistics.median(_block_ms(r["ours_step_s"]))
        trl_ms = statistics.median(_block_ms(r["trl_step_s"]))
        row = {
            "command": command,
            "task": args.task,
            "init": r["init"],
            "prompts": prompts,
            "G": G,
            "grouped_forward": args.grouped_forward,
            "max_completion_length": args.max_completion_length,
            "beta": args.beta,
            "loss_type": args.loss_type,
            "learning_rate": args.random_learning_rate if r["init"] == "random" else args.learning_rate,
            "device": args.device,
            "bf16": args.bf16,
            "threads": args.threads,
            "blocks": args.reps,
            "steps_per_block": args.steps,
            "ours_cps": statistics.median(r["ours_cps"]),
            "trl_cps": statistics.median(r["trl_cps"]),
            "ratio": {
                "median": statistics.median(r["ratio"]),
                "min": min(r["ratio"]),
                "max": max(r["ratio"]),
            },
            "ours_ms": ours_ms,
            "trl_ms": trl_ms,
            "ours_length": _mean_length(r["ours_lengths"]),
            "trl_length": _mean_length(r["trl_lengths"]),
        }
        if r.get("ours_split") and r.get("trl_split"):
            row["ours_split"] = _split(r["ours_split"], ours_ms)
            row["trl_split"] = _split(r["trl_split"], trl_ms)
            row["ceiling"] = trl_ms / r["ours_split"]["arithmetic_ms"]
        rows.append(row)
    return rows


def _on_cpu(results: dict, task: bool) -> list[dict]:
    """The rows the CPU tables show: fp32 on the CPU, on a task (the length table) or on the seed bank."""
    return [r for r in results["rows"] if r["device"] == "cpu" and not r["bf16"] and bool(r["task"]) == task]


def _start(r: dict, generic: str) -> str:
    label = f"{r['init']}, {r['prompts']} x {r['G']}"
    if not r["grouped_forward"]:
        label += ", " + (generic if r["init"] == "random" else "our generic path")
    return label


def _trl(results: dict) -> str:
    """'TRL 1.16': the version the results file's measurement names, major.minor."""
    return "TRL " + ".".join(results["measurement"]["trl"].split(".")[:2])


def _length(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def throughput_table(results: dict) -> str:
    """benchmarks/README.md's throughput table (seed bank, fp32 on the CPU) from docs/results/vs_trl.json."""
    rows = [
        [
            _start(r, "our generic path on the GPT-2"),
            f"{r['ours_cps']:,.0f}",
            f"{r['trl_cps']:,.0f}",
            f"**{r['ratio']['median']:.2f}x** ({r['ratio']['min']:.2f}-{r['ratio']['max']:.2f})",
            f"{r['ours_ms']:.1f} / {r['trl_ms']:.1f}",
            f"{_length(r['ours_length'])} / {_length(r['trl_length'])}",
        ]
        for r in _on_cpu(results, task=False)
    ]
    head = [
        "start, shape (prompts x G)",
        "tinygrpo completions/s",
        f"{_trl(results)} completions/s",
        "ours / TRL",
        "ms per step, ours / TRL's",
        "tokens per completion, ours / TRL's",
    ]
    return markdown(head, rows)


def opsplit_table(results: dict) -> str:
    """benchmarks/README.md's "where the steps go" table: the profiled median step of each trainer split into the
    arithmetic kernels, other ATen calls and the rest, and the ceiling TRL's step / our arithmetic kernels."""

    def cell(sp: dict) -> str:
        return f"{sp['arithmetic_ms']:.1f} / {sp['other_ms']:.1f} / {sp['rest_ms']:.1f}"

    rows = [
        [_start(r, "generic path"), cell(r["ours_split"]), cell(r["trl_split"]), f"{r['ceiling']:.1f}x"]
        for r in _on_cpu(results, task=False)
        if "ours_split" in r
    ]
    head = [
        "start, shape",
        "ours: arithmetic / other ATen / rest, ms",
        "TRL's: arithmetic / other ATen / rest, ms",
        "TRL's step / our arithmetic",
    ]
    return markdown(head, rows)


def length_table(results: dict) -> str:
    """benchmarks/README.md's table against max_completion_length (runs on a task, --task): the mean completion
    length (one figure where both trainers' agree to 0.1), the median step of each, the median ratio of the
    blocks. A reference whose completions stop well short of the cap (mean < 90 % of it) is said so."""
    rows = []
    for r in _on_cpu(results, task=True):
        cap = r["max_completion_length"]
        ours = f"{r['ours_length']:.1f}"
        trl = "n/a" if r["trl_length"] is None else f"{r['trl_length']:.1f}"
        stops = " (the reference stops by itself)" if r["ours_length"] < 0.9 * cap else ""
        rows.append(
            [
                f"{cap}{stops}",
                ours if ours == trl else f"{ours} / {trl}",
                f"{r['ours_ms']:.1f}",
                f"{r['trl_ms']:.1f}",
                f"{r['ratio']['median']:.2f}x",
            ]
        )
    return markdown(
        ["max_completion_length", "mean length, both", "ours ms/step", "TRL ms/step", "ours / TRL"], rows
    )


def write_results(path: str, results: list[dict], args, command: str) -> dict:
    import trl

    return merge_rows(path, summarize(results, args, command), KEY, measurement(command, trl=trl.__version__))


def main(argv: list[str] | None = None) -> list[dict]:
    args = build_parser().parse_args(argv)
    if min(args.reps, args.steps) < 1 or min(args.warmup, args.profile_steps) < 0:
        raise SystemExit("--reps and --steps must be >= 1, --warmup and --profile_steps >= 0")
    try:
        import trl  # noqa: F401
    except ImportError:
        raise SystemExit("vs_trl.py needs TRL: pip install -e '.[bench]'") from None
    if args.task:
        from tinygrpo.data.task import get_task

        try:
            task = get_task(args.task)
        except ValueError as e:
            raise SystemExit(f"error: {e}") from None
        args.init = ["reference"]  # (a task runs from its reference; --init is ignored)
        if task.reference is None and args.model_name_or_path is None:
            raise SystemExit(f"error: task {args.task!r} has no reference recipe: pass --model_name_or_path")
        args.model_name_or_path = args.model_name_or_path or task.reference["output_dir"]
        if not Path(args.model_name_or_path, "config.json").is_file():
            raise SystemExit(
                f"error: no model at {args.model_name_or_path}: train it first (python train_sft.py --task {args.task})"
            )
    record = lambda path, results, command: write_results(path, results, args, command)  # noqa: E731
    return run_and_record(args, argv, "vs_trl.py", run_shape, report, record)


if __name__ == "__main__":
    main()
