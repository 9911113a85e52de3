"""Where the time of one tinygrpo training step goes, phase by phase, at two shapes.

    python benchmarks/phases.py                      # 36x8 and 4x8, median over 20 steps after 3 warm-up, 1 thread
    python benchmarks/phases.py --threads 2 --steps 50 --shapes 36x8

Same setting as vs_trl.py (seed-bank reference, beta 0.02 so the reference forward runs, max_completion_length 4,
dapo, lr 2e-3). The trainer's own metrics give time/generate, time/reward, time/ref_old_logps, time/optimize and
time/step; finer phases come from timing wrappers this script installs around the trainer's methods and
objects (nothing in the trainer is changed):
  generation: model forwards   the decoder's work inside `sample_completions`: prefill, one-token steps, dropping
                               finished rows (tiny_lm's GroupedDecoder, or CacheDecoder with --grouped_forward false)
  generation: sampling, rest   time/generate minus those (token sampling, bookkeeping, prompt padding)
  rewards: decode              decode_rows (token ids -> text, <eos> kept)
  rewards: reward functions    compute_rewards (the registered reward functions, with their checks)
  rewards: rest                time/reward minus those two (prompt/column lists, per-row id lists, tensors)
  advantages, batch            time/step - generate - reward - ref - optimize (group advantages, gathers, Batch)
  layouts, reference forward   time/ref_old_logps (the batch's layouts, reference forward + selective log-softmax)
  policy forward               the PolicyForward call inside PolicyUpdate.loss (prompt once + completions)
  loss math                    PolicyUpdate.loss minus the policy forward (grpo_loss: log-softmax, surrogate, KL,
                               aggregation, sums)
  backward                     OptimizerStep.backward (loss.backward, or accelerate's under DeepSpeed/FSDP/scalers)
  grad clip                    OptimizerStep.clip
  optimizer                    OptimizerStep.step + OptimizerStep.zero_grad
  rest of optimize             time/optimize minus the four above (scheduler, finiteness checks, reductions)
  metrics after the step       training_step() wall time minus time/step (the metrics dict, gathers)
Then --count_steps further steps (untimed) are run under a TorchDispatchMode that counts every ATen operation.
Each row: the median over steps in ms and the phase's share of the summed step time (shares add up to 100 %; the
medians need not add up to the median step). The medians go to --results (docs/results/phases.json, replacing the
rows of the settings run), which benchmarks/README.md's table is drawn from (`table`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

if not __package__:  # python benchmarks/phases.py (imported as benchmarks.phases, the docs render its table)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import (  # noqa: E402
    ModelDirs,
    Timer,
    build_our_trainer,
    machine_line,
    md_table,
    merge_rows,
    parse_bool,
    run_and_record,
    shape_parser,
)
from studies.results import RESULTS, markdown, measurement  # noqa: E402

PHASES = (
    "generation: model forwards",
    "generation: sampling, rest",
    "rewards: decode",
    "rewards: reward functions",
    "rewards: rest",
    "advantages, batch",
    "layouts, reference forward",
    "policy forward",
    "loss math",
    "backward",
    "grad clip",
    "optimizer",
    "rest of optimize",
    "metrics after the step",
)


MODEL_HELP = "Model directory (default: the seed-bank reference in runs/bench)."


def build_parser() -> argparse.ArgumentParser:
    p = shape_parser(
        __doc__,
        steps_help="Timed steps per shape (default 20).",
        warmup_help="Untimed warm-up steps (default 3).",
        model_help=MODEL_HELP,
        json_help="Also write the per-step phase times here.",
    )
    p.add_argument("--dataset_name", default="seed_bank", help="Problem set (default seed_bank).")
    p.add_argument("--beta", type=float, default=0.02)
    p.add_argument("--loss_type", default="dapo")
    p.add_argument("--max_completion_length", type=int, default=4)
    p.add_argument(
        "--count_steps",
        type=int,
        default=5,
        help="Further steps per shape whose tensor operations are counted (0: none).",
    )
    p.add_argument(
        "--torch_compile",
        type=parse_bool,
        default=False,
        help="Run tiny_lm's grouped scoring forward (reference and policy) through torch.compile(dynamic=True): "
        "its compile time shows in the warm-up seconds reported.",
    )
    p.add_argument(
        "--results",
        default=str(RESULTS / "phases.json"),
        help="The results file the docs' table is drawn from (default docs/results/phases.json; '' for none): "
        "this run's shapes replace those of the same setting, the others stay.",
    )
    return p


def compile_scoring() -> Callable[[], None]:
    """tiny_lm's grouped scoring forward through torch.compile; returns the undo."""
    import torch

    import tiny_lm.modeling_tiny_lm as modeling

    eager = modeling.grouped_logits
    modeling.grouped_logits = torch.compile(eager, dynamic=True)

    def undo() -> None:
        modeling.grouped_logits = eager

    return undo


def count_ops(trainer, steps: int) -> float:
    """ATen operations per training step (forward, backward, optimizer, bookkeeping), as torch's dispatcher sees
    them, averaged over `steps` untimed steps. At small shapes a step costs roughly what its operations cost to
    dispatch, so this is the number to bring down there."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    counter = Counter()
    with counter:
        for _ in range(steps):
            trainer.training_step()
    return counter.n / steps


def instrument(trainer, timer: Timer):
    """Timing wrappers on the trainer's parts (its update and optimizer-step objects, the scoring module's reward
    helpers, the two decoder classes), restored by the returned undo function; nothing else is touched."""
    import tiny_lm.grouped as grouped
    import tinygrpo.model.backend as backend
    import tinygrpo.rollout.scoring as gmod

    orig_decode, orig_rewards = gmod.decode_rows, gmod.compute_rewards
    gmod.decode_rows = timer.wrap("decode", orig_decode)
    gmod.compute_rewards = timer.wrap("reward_funcs", orig_rewards)
    # Generation's model work: the decoder's prefill (__init__), its steps and its row drops, on either path.
    saved = [
        (cls, name, getattr(cls, name))
        for cls in (grouped.GroupedDecoder, backend.CacheDecoder)
        for name in ("__init__", "step", "keep")
    ]
    for cls, name, fn in saved:
        setattr(cls, name, timer.wrap("gen_forward", fn))
    update, opt = trainer.update, trainer.optim
    parts = [
        (update.policy, "forward", "policy_forward"),
        (update, "loss", "compute_loss"),
        (opt, "backward", "backward"),
        (opt, "clip", "clip"),
        (opt, "step", "optimizer"),
        (opt, "zero_grad", "optimizer"),
    ]
    # What each object held itself before (a method is found on the class; an attribute of its own is put back).
    own = [(obj, name, vars(obj).get(name)) for obj, name, _ in parts]
    for obj, name, phase in parts:
        setattr(obj, name, timer.wrap(phase, getattr(obj, name)))

    def undo() -> None:
        gmod.decode_rows, gmod.compute_rewards = orig_decode, orig_rewards
        for cls, name, fn in saved:
            setattr(cls, name, fn)
        for obj, name, before in own:
            if before is None:
                del obj.__dict__[name]
            else:
                setattr(obj, name, before)

    return undo


def phase_row(m: dict, t: dict, wall: float) -> dict[str, float]:
    g = lambda k: t.get(k, 0.0)  # noqa: E731
    inner_opt = g("compute_loss") + g("backward") + g("clip") + g("optimizer")
    return {
        "generation: model forwards": g("gen_forward"),
        "generation: sampling, rest": m["time/generate"] - g("gen_forward"),
        "rewards: decode": g("decode"),
        "rewards: reward functions": g("reward_funcs"),
        "rewards: rest": m["time/reward"] - g("decode") - g("reward_funcs"),
        "advantages, batch": m["time/step"]
        - m["time/generate"]
        - m["time/reward"]
        - m["time/ref_old_logps"]
        - m["time/optimize"],
        "layouts, reference forward": m["time/ref_old_logps"],
        "policy forward": g("policy_forward"),
        "loss math": g("compute_loss") - g("policy_forward"),
        "backward": g("backward"),
        "grad clip": g("clip"),
        "optimizer": g("optimizer"),
        "rest of optimize": m["time/optimize"] - inner_opt,
        "metrics after the step": wall - m["time/step"],
        "whole step": wall,
    }


def run_shape(dirs: ModelDirs, prompts: int, G: int, args) -> dict:
    trainer = build_our_trainer(
        dirs.for_ours(args.grouped_forward),
        prompts,
        G,
        args.threads,
        dataset=args.dataset_name,
        beta=args.beta,
        loss_type=args.loss_type,
        max_completion_length=args.max_completion_length,
        grouped_forward=args.grouped_forward,
        learning_rate=dirs.learning_rate(args),
    )
    timer = Timer()
    undo = instrument(trainer, timer)
    uncompile = compile_scoring() if args.torch_compile else (lambda: None)
    rows, lengths, warmup_s = [], [], 0.0
    try:
        for i in range(args.warmup + args.steps):
            timer.reset()
            t = time.perf_counter()
            m = trainer.training_step().metrics
            wall = time.perf_counter() - t
            if i >= args.warmup:
                rows.append(phase_row(m, dict(timer.acc), wall))
                lengths.append(m["completions/mean_length"])
            else:
                warmup_s += wall
    finally:
        uncompile()
        undo()
    ops = count_ops(trainer, args.count_steps) if args.count_steps > 0 else None
    return {
        "shape": f"{prompts}x{G}",
        "completions_per_step": prompts * G,
        "steps": rows,
        "mean_length": sum(lengths) / len(lengths),
        "ops_per_step": ops,
        "warmup_s": warmup_s,
    }


def report(results: list[dict], args) -> str:
    parts = [
        f"### tinygrpo: phases of one training step\n\n{machine_line(args.threads)}; median over {args.steps} "
        f"steps after {args.warmup} warm-up; dataset {args.dataset_name}, beta {args.beta}, loss_type "
        f"{args.loss_type}, max_completion_length {args.max_completion_length}"
        + (", scoring forward through torch.compile" if args.torch_compile else "")
        + ".\n"
    ]
    head = ["phase"]
    for r in results:
        head += [f"{r['label']} ms (median)", f"{r['label']} % of step"]
    table = []
    for name in (*PHASES, "whole step"):
        row = [name if name != "whole step" else "**whole step**"]
        for r in results:
            vals = [s[name] for s in r["steps"]]
            total = sum(s["whole step"] for s in r["steps"])
            row += [f"{1000 * statistics.median(vals):.2f}", f"{100 * sum(vals) / total:.1f}"]
        table.append(row)
    extra = []
    for r in results:
        med = statistics.median(s["whole step"] for s in r["steps"])
        ops = "" if r["ops_per_step"] is None else f", {r['ops_per_step']:,.0f} tensor operations per step"
        ops += f"; the {args.warmup} warm-up steps took {r['warmup_s']:.2f} s"
        extra.append(
            f"{r['label']}: {r['completions_per_step'] / med:,.0f} completions/s at the median step "
            f"(completions of {r['mean_length']:.2f} tokens on average: the work follows the lengths the "
            f"policy samples, and runs that learn differently sample differently){ops}"
        )
    parts.append(md_table(head, table))
    parts.append("\n" + "; ".join(extra) + ".")
    return "\n".join(parts)


# ---------------------------------------------------------------------------------------------------- results
KEY = (
    "init",
    "prompts",
    "G",
    "grouped_forward",
    "dataset",
    "beta",
    "loss_type",
    "max_completion_length",
    "learning_rate",
    "torch_compile",
)
# The three reward phases, one figure in the docs: the median of their sum over steps (time/reward).
REWARDS = ("rewards: decode", "rewards: reward functions", "rewards: rest")


def summarize(results: list[dict], args, command: str) -> list[dict]:
    """The rows of docs/results/phases.json from a run's results (run_shape's, one per start and shape): the
    setting, each phase's median over the timed steps in ms (and the rewards' three together: the median of their
    sum), the whole step's, the mean completion length and the tensor operations per step."""
    rows = []
    for r in results:
        prompts, G = map(int, r["shape"].split("x"))
        steps = r["steps"]
        median_ms = {n: 1000 * statistics.median(s[n] for s in steps) for n in (*PHASES, "whole step")}
        median_ms["rewards"] = 1000 * statistics.median(sum(s[n] for n in REWARDS) for s in steps)
        rows.append(
            {
                "command": command,
                "init": r["init"],
                "prompts": prompts,
                "G": G,
                "grouped_forward": args.grouped_forward,
                "dataset": args.dataset_name,
                "beta": args.beta,
                "loss_type": args.loss_type,
                "max_completion_length": args.max_completion_length,
                "learning_rate": args.random_learning_rate if r["init"] == "random" else args.learning_rate,
                "torch_compile": args.torch_compile,
                "threads": args.threads,
                "steps": args.steps,
                "count_steps": args.count_steps,
                "median_ms": median_ms,
                "mean_length": r["mean_length"],
                "ops_per_step": r["ops_per_step"],
            }
        )
    return rows


# The docs' rows: (name, the phases it shows, " / " between them).
ROWS = (
    (
        "generation (model forwards / sampling and the rest)",
        ("generation: model forwards", "generation: sampling, rest"),
    ),
    ("rewards (decode, reward functions, the rest)", ("rewards",)),
    ("advantages, batch", ("advantages, batch",)),
    ("layouts, reference forward", ("layouts, reference forward",)),
    ("policy forward / loss math", ("policy forward", "loss math")),
    ("backward", ("backward",)),
    ("grad clip / optimizer / rest of the update", ("grad clip", "optimizer", "rest of optimize")),
    ("metrics after the step", ("metrics after the step",)),
)


def _column(r: dict) -> str:
    """'36 x 8', and what sets the run apart from the default setting."""
    extra = [
        r["init"] if r["init"] != "reference" else "",
        "generic path" if not r["grouped_forward"] else "",
        r["dataset"] if r["dataset"] != "seed_bank" else "",
        f"max_completion_length {r['max_completion_length']}" if r["max_completion_length"] != 4 else "",
        "torch.compile" if r["torch_compile"] else "",
    ]
    return ", ".join([f"{r['prompts']} x {r['G']}", *filter(None, extra)])


def table(results: dict) -> str:
    """benchmarks/README.md's phases table from docs/results/phases.json: a column per shape (and setting), the
    median ms of each phase (grouped as the README shows them), the whole step, the mean completion length and the
    tensor operations per step."""
    cols = results["rows"]
    body = [
        [name, *(" / ".join(f"{c['median_ms'][n]:.2f}" for n in names) for c in cols)] for name, names in ROWS
    ]
    body.append(["**whole step**", *(f"**{c['median_ms']['whole step']:.1f}**" for c in cols)])
    body.append(["completion length (tokens)", *(f"{c['mean_length']:.2f}" for c in cols)])
    counted = f"tensor operations per step (`--count_steps`, {cols[0]['count_steps']} more steps)"
    body.append([counted, *("-" if c["ops_per_step"] is None else f"{c['ops_per_step']:,.0f}" for c in cols)])
    return markdown(["phase", *(_column(c) for c in cols)], body)


def main(argv: list[str] | None = None) -> list[dict]:
    args = build_parser().parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        raise SystemExit("--steps must be >= 1, --warmup >= 0")
    return run_and_record(
        args,
        argv,
        "phases.py",
        run_shape,
        report,
        lambda path, results, command: merge_rows(
            path, summarize(results, args, command), KEY, measurement(command)
        ),
    )


if __name__ == "__main__":
    main()
