"""The compute bound on GRPO steps for the tiny model, and how close tinygrpo gets to it.

    python benchmarks/limit.py                      # 36x8 and 4x8 on the seed bank, beta 0.02, 1 thread
    python benchmarks/limit.py --threads 2 --shapes 256x8 --dataset_name addition --beta 0

1. FLOPs per completion of a whole step: the work the step NEEDS, analytically from the model config and the
   completion lengths the step sampled (matmul FLOPs 2*m*n*k; attention QK^T and AV, 4*d per query-key pair,
   each token against the keys up to itself; the LM head only where logits are used; LayerNorm, GELU, softmax
   and the optimizer are not counted):
     rollout     the P prompts once (logits at the last position, so the last block's projection and MLP only
                 there), their keys/values shared by the G samples;
                 then each completion's tokens but its last are fed, one at a time (logits at each)
     reference   (beta > 0) the same tokens in one forward
     policy      that forward + its backward (2x the forward's matmuls): 3x
   and, for comparison, without the prompt sharing (each of the P*G rows runs its prompt). A completion of n
   tokens (EOS included) feeds n - 1 of them: nothing after EOS is computed, and decoding drops finished rows.
   Cross-checked against `torch.utils.flop_counter.FlopCounterMode` on one real `training_step()` with the
   lengths that step sampled: FlopCounterMode has no formula for the CPU scaled_dot_product_attention kernels nor
   counts broadcast products, so it sees the matmuls without attention, plus the decoder's attention to the
   prompts, which is two batched matmuls over the whole (P, G) grid of rows at every decode step (finished rows
   included: `decoder_prompt_attention_flops`, work executed rather than needed).
2. fp32 matmul throughput at the same thread count: torch.mm at 256^3, and the four Linear layers of one block
   (c_attn, attn c_proj, mlp c_fc, mlp c_proj) on (P*G, width) activations; median of repeats.
3. The bound: completions/s <= throughput / FLOPs per completion (averaged over the timed steps' own lengths);
   against what tinygrpo reaches (median completions/s over --steps whole steps), as a % of the bound.
The figures go to --results (docs/results/limit.json, replacing the rows of the settings run), which
benchmarks/README.md's paragraph is drawn from (`summary`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import textwrap
import time
from dataclasses import dataclass, replace
from pathlib import Path

if not __package__:  # python benchmarks/limit.py (imported as benchmarks.limit, the docs render its summary)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import (  # noqa: E402
    ModelDirs,
    build_our_trainer,
    machine_line,
    md_table,
    merge_rows,
    run_and_record,
    shape_parser,
)
from studies.results import RESULTS, measurement  # noqa: E402

MODEL_HELP = "Model directory (default: the seed-bank reference in runs/bench)."


def build_parser() -> argparse.ArgumentParser:
    p = shape_parser(
        __doc__,
        steps_help="Timed steps per shape for the achieved rate (default 20).",
        warmup_help="Untimed warm-up steps (default 3).",
        model_help=MODEL_HELP,
        json_help="Also write the numbers here.",
    )
    p.add_argument("--repeats", type=int, default=15, help="Repeats of each matmul timing (default 15).")
    p.add_argument("--dataset_name", default="seed_bank", help="Problem set (default seed_bank).")
    p.add_argument("--beta", type=float, default=0.02)
    p.add_argument("--max_completion_length", type=int, default=4)
    p.add_argument(
        "--results",
        default=str(RESULTS / "limit.json"),
        help="The results file the docs' summary is drawn from (default docs/results/limit.json; '' for none): "
        "this run's shapes replace those of the same setting, the others stay.",
    )
    return p


# ---------------------------------------------------------------------------------------------------- FLOPs
@dataclass
class Arch:
    n_layer: int
    n_embd: int
    n_inner: int
    vocab_size: int
    # False: leave out QK^T and AV (FlopCounterMode has no formula for CPU SDPA kernels)
    attention: bool = True

    @classmethod
    def from_config(cls, c) -> Arch:
        return cls(c.n_layer, c.n_embd, c.n_inner, c.vocab_size)

    def forward(self, tokens: int, pairs: int, logits: int, last_layer: int | None = None) -> float:
        """Matmul FLOPs of a forward over `tokens` tokens with `pairs` query-key pairs in all, and the LM head on
        `logits` positions. `last_layer`: tokens that still need the last block's projection and MLP (the others
        only feed keys and values to it); default all."""
        d, L = self.n_embd, self.n_layer
        qkv = 2 * d * 3 * d  # c_attn
        rest = 2 * d * d + 2 * 2 * d * self.n_inner  # attn c_proj, mlp c_fc + c_proj
        last = tokens if last_layer is None else last_layer
        attention = 2 * 2 * pairs * d if self.attention else 0  # QK^T and AV over all heads
        return (
            L * (tokens * qkv + attention)
            + ((L - 1) * tokens + last) * rest
            + 2 * d * self.vocab_size * logits
        )


def decoder_prompt_attention_flops(a: Arch, P: int, G: int, Tp: int, lengths: list[int]) -> float:
    """Matmul FLOPs of tiny_lm's GroupedDecoder attending to the prompts: QK^T and PV on all P*G rows of the grid
    at each of the max(lengths) - 1 decode steps, every layer."""
    steps = max(max(lengths) - 1, 0)
    return steps * a.n_layer * 2 * 2 * P * G * Tp * a.n_embd


def step_flops(
    a: Arch, P: int, G: int, Tp: int, lengths: list[int], beta: float, shared: bool = True
) -> dict[str, float]:
    """FLOPs of one step, by part: P prompts of Tp tokens (padded width), the P*G completions' `lengths` (tokens,
    EOS included). The rollout and each scoring forward compute the same tokens: the prompts (once per prompt
    when `shared`) and each completion's tokens but its last, the k-th of them against Tp + k keys."""
    assert len(lengths) == P * G, (len(lengths), P, G)
    rows = P if shared else P * G
    fed = [max(n - 1, 0) for n in lengths]
    # the prompts, with only the last column's output needed in the last layer
    prompt = a.forward(rows * Tp, rows * Tp * (Tp + 1) // 2, rows, last_layer=rows)
    completions = a.forward(sum(fed), sum(f * Tp + f * (f + 1) // 2 for f in fed), sum(fed))
    fwd = prompt + completions
    out = {"rollout": fwd, "reference": fwd if beta > 0 else 0.0, "policy fwd+bwd": 3 * fwd}
    out["total"] = sum(out.values())
    return out


def counted_flops(trainer):
    """FLOPs FlopCounterMode sees in one real training step, and that step's output (metrics, samples)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        out = trainer.training_step()
    return float(fc.get_total_flops()), out


# ---------------------------------------------------------------------------------------------------- throughput
def _time(fn, repeats: int, min_s: float = 0.02) -> float:
    """Median seconds per call of fn over `repeats` timed batches (each long enough to time reliably)."""
    fn()
    k, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        t = time.perf_counter() - t0
        if t >= min_s or k >= 1 << 16:
            break
        k *= 2
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        times.append((time.perf_counter() - t0) / k)
    return statistics.median(times)


def matmul_gflops(width: int, inner: int, rows: int, repeats: int) -> dict[str, float]:
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
    out = {"mm 256^3": 2 * 256**3 / _time(lambda: torch.mm(a, b), repeats) / 1e9}
    x = torch.randn(rows, width, generator=g)
    h = torch.randn(rows, inner, generator=g)
    ws = [
        (torch.randn(3 * width, width, generator=g), torch.zeros(3 * width)),
        (torch.randn(width, width, generator=g), torch.zeros(width)),
        (torch.randn(inner, width, generator=g), torch.zeros(inner)),
        (torch.randn(width, inner, generator=g), torch.zeros(width)),
    ]

    def block_linears():
        F.linear(x, *ws[0])
        F.linear(x, *ws[1])
        F.linear(x, *ws[2])
        F.linear(h, *ws[3])

    flops = 2 * rows * (3 * width * width + width * width + 2 * width * inner)
    out[f"block Linears on ({rows}, {width})"] = flops / _time(block_linears, repeats) / 1e9
    return out


# ---------------------------------------------------------------------------------------------------- main
def run_shape(dirs: ModelDirs, P: int, G: int, args) -> dict:
    trainer = build_our_trainer(
        dirs.for_ours(args.grouped_forward),
        P,
        G,
        args.threads,
        dataset=args.dataset_name,
        beta=args.beta,
        max_completion_length=args.max_completion_length,
        grouped_forward=args.grouped_forward,
        learning_rate=dirs.learning_rate(args),
    )
    arch = Arch.from_config(trainer.model.config)
    # the padded width (of every batch of the seed bank; of almost every batch of addition)
    Tp = max(map(len, trainer.prompts.token_ids))
    for _ in range(args.warmup):
        trainer.training_step()
    counted, out = counted_flops(trainer)
    counted_lengths = out.scored.first.lengths.tolist()
    times, per_completion, per_completion_unshared, mean_len = [], [], [], []
    N = P * G
    for _ in range(args.steps):
        t = time.perf_counter()
        out = trainer.training_step()
        times.append(time.perf_counter() - t)
        lengths = out.scored.first.lengths.tolist()
        mean_len.append(sum(lengths) / N)
        per_completion.append(step_flops(arch, P, G, Tp, lengths, args.beta))
        per_completion_unshared.append(step_flops(arch, P, G, Tp, lengths, args.beta, shared=False)["total"])
    parts = {k: statistics.mean(f[k] for f in per_completion) / N for k in per_completion[0]}
    tput = matmul_gflops(arch.n_embd, arch.n_inner, N, args.repeats)
    return {
        "shape": f"{P}x{G}",
        "P": P,
        "G": G,
        "Tp": Tp,
        "mean_length": statistics.mean(mean_len),
        "flops_per_completion": parts,
        "flops_per_completion_unshared": statistics.mean(per_completion_unshared) / N,
        "counted_step": {
            "counted": counted,
            "lengths": counted_lengths,
            "analytic": step_flops(arch, P, G, Tp, counted_lengths, args.beta)["total"],
            "analytic_no_attention": step_flops(
                replace(arch, attention=False), P, G, Tp, counted_lengths, args.beta
            )["total"],
            "decoder_prompt_attention": decoder_prompt_attention_flops(arch, P, G, Tp, counted_lengths),
        },
        "gflops": tput,
        "step_s": times,
        "achieved_cps": N / statistics.median(times),
    }


def report(results: list[dict], args) -> str:
    out = [
        f"### Compute bound\n\n{machine_line(args.threads)}; dataset {args.dataset_name}, beta {args.beta}, "
        f"max_completion_length {args.max_completion_length}; achieved = median of {args.steps} whole steps; "
        "FLOPs from each timed step's own completion lengths, averaged.\n"
    ]
    rows = []
    for r in results:
        N = r["P"] * r["G"]
        a, c = r["flops_per_completion"], r["counted_step"]
        rows.append(
            [
                r["label"],
                f"{r['Tp']} / {r['mean_length']:.2f}",
                f"{a['rollout'] / 1e6:.3f}",
                f"{a['reference'] / 1e6:.3f}",
                f"{a['policy fwd+bwd'] / 1e6:.3f}",
                f"**{a['total'] / 1e6:.3f}**",
                f"{r['flops_per_completion_unshared'] / 1e6:.3f}",
                f"{c['analytic'] / N / 1e6:.3f} / "
                f"{(c['analytic_no_attention'] + c['decoder_prompt_attention']) / N / 1e6:.3f}",
                f"{c['counted'] / N / 1e6:.3f}",
            ]
        )
    out.append("FLOPs per completion (MFLOP), whole step:\n")
    out.append(
        md_table(
            [
                "shape",
                "Tp / mean completion length",
                "rollout",
                "reference",
                "policy fwd+bwd",
                "total (KV shared)",
                "total (no sharing)",
                "one counted step, analytic: all / as FlopCounterMode sees it",
                "FlopCounterMode, that step",
            ],
            rows,
        )
    )
    out.append(
        "\n(FlopCounterMode counts no FLOPs for the CPU scaled_dot_product_attention kernels nor for the "
        "broadcast products, so it should match the analytic count without attention plus the decoder's batched "
        "matmuls over the prompts.)"
    )
    rows = []
    for r in results:
        per = r["flops_per_completion"]["total"]
        for name, gf in r["gflops"].items():
            bound = gf * 1e9 / per
            rows.append(
                [
                    r["label"],
                    name,
                    f"{gf:.1f}",
                    f"{bound:,.0f}",
                    f"{r['achieved_cps']:,.0f}",
                    f"{100 * r['achieved_cps'] / bound:.1f} %",
                ]
            )
    out.append(
        "\nBound = fp32 matmul throughput / FLOPs per completion (KV shared, the steps' own lengths):\n"
    )
    out.append(
        md_table(
            ["shape", "matmul", "GFLOP/s", "bound completions/s", "tinygrpo completions/s", "% of bound"],
            rows,
        )
    )
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------------- results
KEY = ("init", "prompts", "G", "grouped_forward", "dataset", "beta", "max_completion_length", "learning_rate")


def summarize(results: list[dict], args, command: str) -> list[dict]:
    """The rows of docs/results/limit.json from a run's results (run_shape's, one per start and shape): the setting,
    the MFLOP per completion (prompt shared, and not), and over the matmul measurements (torch.mm, one block's
    Linears) the range of the fp32 throughput, of the bound on completions/s, and of our fraction of it."""
    rows = []
    for r in results:
        per = r["flops_per_completion"]["total"]
        gflops = sorted(r["gflops"].values())
        bounds = [g * 1e9 / per for g in gflops]
        rows.append(
            {
                "command": command,
                "init": r["init"],
                "prompts": r["P"],
                "G": r["G"],
                "grouped_forward": args.grouped_forward,
                "dataset": args.dataset_name,
                "beta": args.beta,
                "max_completion_length": args.max_completion_length,
                "learning_rate": args.random_learning_rate if r["init"] == "random" else args.learning_rate,
                "threads": args.threads,
                "mean_length": r["mean_length"],
                "mflop_per_completion": per / 1e6,
                "mflop_unshared": r["flops_per_completion_unshared"] / 1e6,
                "matmul_gflops": r["gflops"],
                "gflops": [gflops[0], gflops[-1]],
                "bound_cps": [bounds[0], bounds[-1]],
                "achieved_cps": r["achieved_cps"],
                "fraction_of_bound": [r["achieved_cps"] / bounds[-1], r["achieved_cps"] / bounds[0]],
            }
        )
    return rows


def _range(lo_hi: list[float], fmt: str, scale: float = 1.0) -> str:
    lo, hi = (format(x * scale, fmt) for x in lo_hi)
    return lo if lo == hi else f"{lo}-{hi}"


def summary(results: dict) -> str:
    """benchmarks/README.md's compute-bound paragraph from docs/results/limit.json: per shape with a FLOP count its
    MFLOP per completion, the bound and the matmul rate it comes from; then the fraction of the bound reached at
    every shape (ranges: over the matmul measurements)."""
    rows = results["rows"]

    def shape(r: dict) -> str:
        return f"{r['prompts']} x {r['G']}"

    counted = []
    for r in (r for r in rows if "mflop_per_completion" in r):
        threads = "one thread" if r["threads"] == 1 else f"{r['threads']} threads"
        counted.append(
            f"At {shape(r)} a completion needs {r['mflop_per_completion']:.2f} MFLOP ({r['mflop_unshared']:.2f} "
            f"without sharing the prompt): a bound of ~{_range(r['bound_cps'], '.0f', 1e-3)} k completions/s at the "
            f"measured fp32 matmul rate (~{_range(r['gflops'], '.0f')} GFLOP/s on {threads})."
        )
    reached = [f"{_range(r['fraction_of_bound'], '.0f', 100)} % at {shape(r)}" for r in rows]
    reached[0] = reached[0].replace(" % at", " % of the bound at", 1)
    tail = ", ".join(reached[:-1]) + " and " + reached[-1] if len(reached) > 1 else reached[0]
    text = " ".join([*counted, f"We reach {tail}."])
    # (no line breaks inside "36 x 8" nor before a %)
    return textwrap.fill(text.replace(" x ", "\0x\0").replace(" %", "\0%"), 116).replace("\0", " ")


def main(argv: list[str] | None = None) -> list[dict]:
    args = build_parser().parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.repeats < 1:
        raise SystemExit("--steps and --repeats must be >= 1, --warmup >= 0")
    return run_and_record(
        args,
        argv,
        "limit.py",
        run_shape,
        report,
        lambda path, results, command: merge_rows(
            path, summarize(results, args, command), KEY, measurement(command)
        ),
    )


if __name__ == "__main__":
    main()
