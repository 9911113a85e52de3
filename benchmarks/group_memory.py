"""Memory and time of one scoring forward + backward against the group size G, for each attention layout.

    python benchmarks/group_memory.py --threads 1                     # G = 8 .. 256, max_completion_length 16
    python benchmarks/group_memory.py --G 8 32 128 --completion_length 4
    python benchmarks/group_memory.py --threads 1 --G 8 32 128 --completion_length 16 32 64   # and against length

The grouped fast path (tiny_lm/grouped.py) attends a prompt and its G samples either as one "group sequence" of
L = Tp + G * (Tc - 1) slots, whose mask and attention scores grow with L^2 (quadratic in G), or per sample (its
prompt's shared keys and its own), linear in G; tiny_lm/grouped_layout.py switches to the per-sample layout past
MAX_GROUP_SEQUENCE slots. This script forces each layout in turn (GroupedBackend's max_group_sequence), and the
generic transformers forward for scale, on one batch of P prompts x G random completions of Tc tokens (a random
default-size tiny_lm: the cost does not depend on the weights), and reports the peak resident memory the forward +
backward added and its median time. Each (layout, G) runs in a fresh process, so that one peak does not hide
another. Every point goes to --results (docs/results/group_memory.json, written whole), which benchmarks/README.md's
tables are drawn from (`layouts_table`; `length_table` from a run against the completion length).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

if not __package__:  # python benchmarks/group_memory.py (the docs import benchmarks.group_memory)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import REPO_ROOT, add_threads_arg, command_line  # noqa: E402
from studies.results import RESULTS, markdown, measurement, save  # noqa: E402

LAYOUTS = ("group", "per_sample", "generic")


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def one(layout: str, G: int, P: int, Tc: int, threads: int, reps: int) -> dict:
    """Measure one (layout, G) in this process: peak RSS added by the forward + backward, median ms."""
    import torch

    from tiny_lm import TinyLMConfig, TinyLMForCausalLM
    from tinygrpo.model.backend import GenericBackend, GroupedBackend
    from tinygrpo.rollout.sampling import completion_logits

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = TinyLMForCausalLM(TinyLMConfig(n_positions=max(32, 6 + Tc))).train()
    V = model.config.vocab_size
    prompt_ids = torch.randint(2, V, (P, 6))
    prompt_mask = torch.ones_like(prompt_ids)
    comp = torch.randint(2, V, (P * G, Tc))
    mask = torch.ones(P * G, Tc)
    # The layout by argument: a threshold no group sequence reaches, or 0 (every one attended per sample).
    threshold = 10**9 if layout == "group" else 0
    backend = GenericBackend() if layout == "generic" else GroupedBackend(max_group_sequence=threshold)
    before = rss_mib()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        logits = completion_logits(model, prompt_ids, prompt_mask, comp, G, mask, backend=backend)
        logp = torch.log_softmax(logits, -1).gather(-1, comp[..., None])[..., 0]
        (logp * mask).sum().backward()
        times.append(time.perf_counter() - t0)
        model.zero_grad(set_to_none=True)
        del logits, logp
    return {
        "layout": layout,
        "G": G,
        "P": P,
        "Tc": Tc,
        "slots": 6 + G * (Tc - 1),
        "peak_added_mib": rss_mib() - before,
        "ms": 1000 * statistics.median(times),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__)
    add_threads_arg(p)
    p.add_argument("--G", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256])
    p.add_argument("--prompts", type=int, default=4, help="P prompts per batch (default 4).")
    p.add_argument(
        "--completion_length",
        type=int,
        nargs="+",
        default=[16],
        help="Tc tokens per completion (default 16; several: a table for each).",
    )
    p.add_argument("--reps", type=int, default=3, help="Forward + backward repetitions per point (median).")
    p.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=LAYOUTS)
    p.add_argument(
        "--results",
        default=str(RESULTS / "group_memory.json"),
        help="The results file the docs' table is drawn from, written whole (default docs/results/group_memory.json; "
        "'' for none). benchmarks/README.md's table against the completion length has its own.",
    )
    p.add_argument("--one", nargs=2, metavar=("LAYOUT", "G"), help=argparse.SUPPRESS)  # the child process
    args = p.parse_args(argv)
    if args.one:
        Tc = args.completion_length[0]
        r = one(args.one[0], int(args.one[1]), args.prompts, Tc, args.threads, args.reps)
        print(json.dumps(r))
        return 0
    points = []
    for Tc in args.completion_length:
        rows = []
        for G in args.G:
            for layout in args.layouts:
                cmd = [sys.executable, __file__, "--one", layout, str(G), "--threads", str(args.threads)]
                cmd += ["--prompts", str(args.prompts), "--completion_length", str(Tc)]
                cmd += ["--reps", str(args.reps)]
                out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
                if out.returncode:
                    last = (out.stderr.strip().splitlines() or ["?"])[-1]
                    rows.append({"layout": layout, "G": G, "Tc": Tc, "error": last})
                    print(f"{layout} G={G} Tc={Tc}: failed: {last}", file=sys.stderr)
                    continue
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(
            f"P = {args.prompts} prompts of 6 tokens, Tc = {Tc}, {args.threads} thread(s), "
            f"median of {args.reps}; memory: peak RSS added by the forward + backward"
        )
        print()
        print("| G | slots per group | " + " | ".join(f"{lay} MiB / ms" for lay in args.layouts) + " |")
        print("|---|---|" + "---|" * len(args.layouts))
        for G in args.G:
            cells = []
            for layout in args.layouts:
                r = next(x for x in rows if x["G"] == G and x["layout"] == layout)
                cells.append("failed" if "error" in r else f"{r['peak_added_mib']:.0f} / {r['ms']:.0f}")
            print(f"| {G} | {6 + G * (Tc - 1)} | " + " | ".join(cells) + " |")
        print()
        points += rows
    if args.results:
        from tiny_lm.grouped_layout import MAX_GROUP_SEQUENCE

        command = command_line("group_memory.py", argv)
        save(
            args.results,
            {
                "measurement": measurement(command, threads=args.threads),
                "prompts": args.prompts,
                "reps": args.reps,
                "max_group_sequence": MAX_GROUP_SEQUENCE,
                "completion_lengths": args.completion_length,
                "layouts": args.layouts,
                "points": points,
            },
        )
        print(
            f"wrote {args.results}; python -m studies.results draws the docs' tables from it", file=sys.stderr
        )
    return 0


# ------------------------------------------------------------------------------------------------ the docs' tables
def _point(results: dict, layout: str, G: int, Tc: int) -> dict:
    return next(p for p in results["points"] if (p["layout"], p["G"], p["Tc"]) == (layout, G, Tc))


def _gs(results: dict) -> list[int]:
    return list(dict.fromkeys(p["G"] for p in results["points"]))


def layouts_table(results: dict) -> str:
    """benchmarks/README.md's table against G (the first completion length of docs/results/group_memory.json): per
    G the slots of a group sequence, and per layout the peak memory the forward + backward added and its median
    time."""
    Tc = results["completion_lengths"][0]
    names = {
        "group": "one group sequence per prompt",
        "per_sample": f"per sample (used past {results['max_group_sequence']} slots)",
        "generic": "generic transformers forward",
    }
    rows = []
    for G in _gs(results):
        cells = []
        for layout in results["layouts"]:
            p = _point(results, layout, G, Tc)
            cells.append("failed" if "error" in p else f"{p['peak_added_mib']:,.0f} MiB / {p['ms']:,.0f} ms")
        rows.append([str(G), f"{6 + G * (Tc - 1):,}", *cells])
    return markdown(["G", "slots per group sequence", *(names[lay] for lay in results["layouts"])], rows)


def length_table(results: dict) -> str:
    """benchmarks/README.md's memory against G and the completion length (docs/results/group_memory_length.json):
    the peak memory added, MiB, of each layout, " / " between them."""
    rows = []
    for G in _gs(results):
        cells = []
        for Tc in results["completion_lengths"]:
            ps = [_point(results, layout, G, Tc) for layout in results["layouts"]]
            cells.append(" / ".join("failed" if "error" in p else f"{p['peak_added_mib']:,.0f}" for p in ps))
        rows.append([str(G), *cells])
    return markdown(["G", *(f"{Tc} tokens" for Tc in results["completion_lengths"])], rows)


if __name__ == "__main__":
    sys.exit(main())
