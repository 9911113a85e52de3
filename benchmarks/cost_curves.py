"""Cost curves: what one GRPO step costs against model size, completion length, prompts x G and G, with TRL beside.

    python benchmarks/cost_curves.py --threads 1 --docs docs    # the four sweeps, ~15 min on 2 quiet cores
    python benchmarks/cost_curves.py --sweeps length,batch --trl false

Every point starts from one random function (benchmarks/_common.py `ensure_random_pair`: a tiny_lm for us, the
same weights as a transformers GPT-2 for TRL), so both trainers sample completions near max_completion_length at
every size: a fixed amount of work per step. Problems: 2-digit addition (`data/addition`, prompts of 4-6 tokens);
beta 0.02 (the reference forward runs), temperature 1, loss_type dapo, AdamW at lr 1e-5 (the lengths stay put),
one round of the prompts per step (exploration and dynamic sampling off, as TRL), fp32 on the CPU.

Sweeps (the rest of a point at its default: n_embd 64, n_layer 2, max_completion_length 4, 36 prompts x G 8):
  model   n_embd 64 / 128 / 256 / 512 x n_layer 2 / 4 / 8 (n_head = max(4, n_embd // 64))
  length  max_completion_length 4 / 8 / 16
  batch   prompts 4 / 16 / 36 / 64 / 128 / 256 / 512 at G 8
  group   G 8 / 32 / 64 / 128 / 256 at 4 prompts: peak memory must grow linearly with G
Each point runs in a fresh process per trainer (so that one peak RSS does not hide another): a few warm-up steps,
then whole `training_step()` calls until --min_seconds have passed (at least 3, at most 20 steps); TRL: one
`train()` timed between `on_step_end` calls as in vs_trl.py. Reported per point: median ms per step, completions/s,
the mean completion length, peak RSS and what the step added to the RSS after the trainer was built, our own
phases (time/generate, time/ref_old_logps, time/optimize as shares of time/step), and the fraction of the compute
bound: the step's matmul FLOPs (limit.py's analytic count from each timed step's own lengths, prompt keys and
values shared) per second, over the best fp32 matmul rate measured in the same process (torch.mm at 256^3, or the
model's four block Linears on (P*G, n_embd) rows, whichever is faster). A step far below the bound is
dispatch-bound (a few hundred tiny operations whose fixed costs dominate); near it, compute-bound. A run prints the
device each trainer ran on, over its points (`device: ours cpu, trl cpu`): both on the CPU.

`--docs DIR` writes DIR/results/cost_curves.json (the results: each point's numbers, ours and TRL's, TRL's ms per
step over ours, the settings, the command and the machine), DIR/cost_curves.md (drawn from that file alone by
`page`, between markers that `python -m studies.results` renders again) and DIR/cost_curves.png; `--json` writes
the results file elsewhere, `--from_json` draws the tables and the figure again from one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

# python benchmarks/cost_curves.py (imported as benchmarks.cost_curves: the docs draw its page)
if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import (  # noqa: E402
    REPO_ROOT,
    add_bench_dir_args,
    command_line,
    device_line,
    parse_bool,
    quiet,
    script_parser,
    set_threads,
)
from studies.results import markdown, measurement, save  # noqa: E402

BETA = 0.02
LEARNING_RATE = 1e-5
DATASET = "addition"


@dataclass(frozen=True)
class Point:
    n_embd: int = 64
    n_layer: int = 2
    max_completion_length: int = 4
    P: int = 36
    G: int = 8

    @property
    def n_head(self) -> int:
        return max(4, self.n_embd // 64)


BASE = Point()
SWEEPS: dict[str, list[Point]] = {
    "model": [replace(BASE, n_embd=e, n_layer=n) for n in (2, 4, 8) for e in (64, 128, 256, 512)],
    "length": [replace(BASE, max_completion_length=t) for t in (4, 8, 16)],
    "batch": [replace(BASE, P=p) for p in (4, 16, 36, 64, 128, 256, 512)],
    "group": [replace(BASE, P=4, G=g) for g in (8, 32, 64, 128, 256)],
}


def build_parser() -> argparse.ArgumentParser:
    p = script_parser(__doc__)
    p.add_argument("--sweeps", default=",".join(SWEEPS), help=f"Comma-separated, of {', '.join(SWEEPS)}.")
    p.add_argument("--trl", type=parse_bool, default=True, help="Run TRL beside us (default true).")
    p.add_argument(
        "--trl_max_completions",
        type=int,
        default=2048,
        help="Skip TRL at points with more completions per step than this (default 2048: its step grows past "
        "several seconds there).",
    )
    p.add_argument("--warmup", type=int, default=2, help="Untimed warm-up steps per point (default 2).")
    p.add_argument(
        "--min_seconds", type=float, default=4.0, help="Timed seconds per point and trainer (default 4)."
    )
    p.add_argument("--trl_steps", type=int, default=4, help="Timed TRL steps per point (default 4).")
    p.add_argument(
        "--max_points",
        type=int,
        default=0,
        help="Measure only the first N points of each sweep (default 0: every point); a smoke run of the script: "
        "--sweeps length --max_points 1.",
    )
    add_bench_dir_args(p, reference=False)
    p.add_argument(
        "--docs",
        default=None,
        help="Write DOCS/results/cost_curves.json (the results), DOCS/cost_curves.md (drawn from them) and "
        "DOCS/cost_curves.png.",
    )
    p.add_argument("--json", default=None, help="Also write the results here.")
    p.add_argument(
        "--from_json",
        default=None,
        help="Redraw the figure and tables from a results file (--json's, or docs/results/cost_curves.json); "
        "no runs.",
    )
    p.add_argument("--point", default=None, help=argparse.SUPPRESS)  # internal: one point in this process
    p.add_argument("--trainer", default="ours", choices=("ours", "trl"), help=argparse.SUPPRESS)
    return p


# ---------------------------------------------------------------------------------------------------- one point
def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def peak_rss_mib(*seen: float) -> float:
    """The process's peak RSS: the kernel's high-water mark (ru_maxrss, KiB on Linux), and never below an RSS seen
    (`seen`, or now): the kernel syncs its per-thread RSS counters lazily, so the mark can trail a reading of
    /proc/self/statm by a few pages."""
    return max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, rss_mib(), *seen)


def measure_ours(pt: Point, args) -> dict:
    from benchmarks._common import build_our_trainer, ensure_random_pair
    from benchmarks.limit import Arch, matmul_gflops, step_flops

    tiny, _ = ensure_random_pair(Path(args.bench_dir), n_embd=pt.n_embd, n_layer=pt.n_layer, n_head=pt.n_head)
    N = pt.P * pt.G
    trainer = build_our_trainer(
        tiny,
        pt.P,
        pt.G,
        args.threads,
        dataset=DATASET,
        beta=BETA,
        learning_rate=LEARNING_RATE,
        max_completion_length=pt.max_completion_length,
    )
    arch = Arch.from_config(trainer.model.config)
    base_rss = rss_mib()
    for _ in range(args.warmup):
        trainer.training_step()
    times, flops, lengths, phases = [], [], [], []
    t_start = time.perf_counter()
    while len(times) < 20 and (len(times) < 3 or time.perf_counter() - t_start < args.min_seconds):
        t = time.perf_counter()
        out = trainer.training_step()
        times.append(time.perf_counter() - t)
        ls = out.scored.first.lengths.tolist()
        Tp = out.scored.first.batch.prompt_ids.size(1)
        flops.append(step_flops(arch, pt.P, pt.G, Tp, ls, BETA)["total"])
        lengths.append(sum(ls) / N)
        m = out.metrics
        phases.append({k: m[f"time/{k}"] / m["time/step"] for k in ("generate", "ref_old_logps", "optimize")})
    gf = matmul_gflops(pt.n_embd, arch.n_inner, N, repeats=5)
    rate = [f / t for f, t in zip(flops, times, strict=True)]
    return {
        "step_ms": 1000 * statistics.median(times),
        "steps": len(times),
        "completions_per_s": N / statistics.median(times),
        "mean_length": statistics.mean(lengths),
        "gflop_per_step": statistics.mean(flops) / 1e9,
        "achieved_gflops": statistics.median(rate) / 1e9,
        "matmul_gflops": max(gf.values()),
        "bound_fraction": statistics.median(rate) / 1e9 / max(gf.values()),
        "phases": {k: statistics.median(p[k] for p in phases) for k in phases[0]},
        "params_m": sum(p.numel() for p in trainer.model.parameters()) / 1e6,
        "base_rss_mib": base_rss,
        "peak_rss_mib": peak_rss_mib(base_rss),
        "device": next(trainer.model.parameters()).device.type,
    }


def measure_trl(pt: Point, args) -> dict:
    import torch
    from transformers import TrainerCallback

    from benchmarks._common import ensure_random_pair
    from benchmarks.vs_trl import build_trl_trainer

    _, gpt2 = ensure_random_pair(Path(args.bench_dir), n_embd=pt.n_embd, n_layer=pt.n_layer, n_head=pt.n_head)
    W, K = args.warmup, args.trl_steps
    gaps: list[float] = []
    lengths: list[float] = []
    rss: list[float] = []

    class Clock(TrainerCallback):
        last = 0.0
        trainer = None

        def on_train_begin(self, a, state, control, **kw):
            torch.set_num_threads(args.threads)
            rss.append(rss_mib())
            self.last = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            now = time.perf_counter()
            gaps.append(now - self.last)
            mt = self.trainer._metrics["train"]
            if mt.get("completions/mean_length"):
                lengths.append(mt["completions/mean_length"][-1])
            self.last = time.perf_counter()

    # vs_trl.py's options that build_trl_trainer reads (no task: the addition problems and exact match)
    ns = argparse.Namespace(
        task="",
        max_completion_length=pt.max_completion_length,
        beta=BETA,
        loss_type="dapo",
        device="cpu",
        bf16=False,
    )
    cb = Clock()
    trl = build_trl_trainer(gpt2, pt.P, pt.G, W + K, LEARNING_RATE, ns, cb, dataset=DATASET)
    cb.trainer = trl
    with contextlib.redirect_stdout(sys.stderr):  # the Trainer prints its summary dict
        trl.train()
    step = statistics.median(gaps[W:])
    return {
        "step_ms": 1000 * step,
        "steps": len(gaps) - W,
        "completions_per_s": pt.P * pt.G / step,
        "mean_length": statistics.mean(lengths[W:]) if len(lengths) > W else float("nan"),
        "base_rss_mib": rss[0] if rss else float("nan"),
        "peak_rss_mib": peak_rss_mib(*rss),
        "device": next(trl.model.parameters()).device.type,
    }


def run_point(pt: Point, trainer: str, args) -> dict | None:
    """One point in a fresh process; None if it failed (its stderr tail is printed)."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--point",
        json.dumps(asdict(pt)),
        "--trainer",
        trainer,
        "--threads",
        str(args.threads),
        "--warmup",
        str(args.warmup),
        "--min_seconds",
        str(args.min_seconds),
        "--trl_steps",
        str(args.trl_steps),
        "--bench_dir",
        str(args.bench_dir),
    ]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
    if proc.returncode != 0:
        print(f"  {trainer} {pt} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    print(
        f"  {trainer:4s} {pt}: {r['step_ms']:,.1f} ms/step ({time.perf_counter() - t:.0f} s)", file=sys.stderr
    )
    return r


# ---------------------------------------------------------------------------------------------------- report
def summarize(sweeps: dict[str, list[dict]], args, command: str) -> dict:
    """The results (docs/results/cost_curves.json) of the points measured: each point's numbers, ours and TRL's
    (None where one did not run), TRL's ms per step over ours, the settings and where it was measured."""
    import torch

    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "measurement": measurement(
            command, threads=args.threads, torch_threads=torch.get_num_threads(), load_average=load
        ),
        "settings": {
            "dataset": DATASET,
            "beta": BETA,
            "learning_rate": LEARNING_RATE,
            "warmup": args.warmup,
            "min_seconds": args.min_seconds,
        },
        "sweeps": {
            sweep: [
                {
                    **r,
                    "trl_over_ours": r["trl"]["step_ms"] / r["ours"]["step_ms"]
                    if r["ours"] and r["trl"]
                    else None,
                }
                for r in rows
            ]
            for sweep, rows in sweeps.items()
        },
    }


def _row(sweep: str, r: dict) -> list[str]:
    pt, ours, trl = Point(**r["point"]), r["ours"], r["trl"]

    def f(r: dict | None, key: str, fmt: str) -> str:
        return "n/a" if r is None else format(r[key], fmt)

    ph = ours["phases"] if ours else {}
    if sweep == "model":
        label = (
            f"{pt.n_embd} x {pt.n_layer} ({ours['params_m']:.2f} M)" if ours else f"{pt.n_embd}x{pt.n_layer}"
        )
    else:
        label = str(pt.max_completion_length) if sweep == "length" else f"{pt.P} x {pt.G}"
    return [
        label,
        f(ours, "step_ms", ",.1f"),
        f(trl, "step_ms", ",.1f"),
        "n/a" if r["trl_over_ours"] is None else f"{r['trl_over_ours']:.2f}",
        f(ours, "completions_per_s", ",.0f"),
        f"{ours['mean_length']:.2f} / {trl['mean_length']:.2f}"
        if ours and trl
        else f(ours, "mean_length", ".2f"),
        f(ours, "gflop_per_step", ".3f"),
        "n/a" if not ours else f"{100 * ours['bound_fraction']:.1f} % of {ours['matmul_gflops']:.0f}",
        "n/a"
        if not ours
        else " / ".join(f"{100 * ph[k]:.0f}" for k in ("generate", "ref_old_logps", "optimize")),
        "n/a"
        if not ours
        else f"{ours['peak_rss_mib']:,.0f} (+{ours['peak_rss_mib'] - ours['base_rss_mib']:,.0f})",
        "n/a"
        if not trl
        else f"{trl['peak_rss_mib']:,.0f} (+{trl['peak_rss_mib'] - trl['base_rss_mib']:,.0f})",
    ]


HEAD = [
    "point",
    "ours ms/step",
    "TRL ms/step",
    "TRL / ours",
    "ours completions/s",
    "mean length ours / TRL",
    "GFLOP/step",
    "ours % of matmul bound (GFLOP/s)",
    "ours generate / reference / update % of step",
    "ours peak RSS MiB (+step)",
    "TRL peak RSS MiB (+step)",
]
TITLES = {
    "model": "Model size (n_embd x n_layer, parameters), 36 x 8, max_completion_length 4",
    "length": "Completion length (max_completion_length), default model, 36 x 8",
    "batch": "Prompts x G, default model, max_completion_length 4",
    "group": "G alone, 4 prompts, default model, max_completion_length 4",
}


def machine_line(results: dict) -> str:
    """The conditions of the measurement (load matters a lot on a shared machine), from the results."""
    m = results["measurement"]
    load = m.get("load_average")
    # (torch's version: under `versions` in a file its run wrote, under `machine` in the earlier files)
    torch = (m.get("versions") or m["machine"]).get("torch", "version not recorded")
    return (
        f"torch {torch}, {m['torch_threads']} thread(s) (--threads {m['threads']}), "
        f"{m['machine']['cores']} CPUs"
        + ("" if load is None else ", load average {:.2f} {:.2f} {:.2f}".format(*load))
    )


def tables(results: dict) -> str:
    """The conditions, then one table per sweep, from the results alone."""
    st = results["settings"]
    out = [
        f"{machine_line(results)}; one random function per model size (completions near "
        f"max_completion_length), {st['dataset']}, beta {st['beta']}, lr {st['learning_rate']}; median ms per step "
        f"over >= 3 steps (>= {st['min_seconds']:g} s) after {st['warmup']} warm-up, each point and trainer in a "
        "fresh process. Peak RSS: the process's maximum; (+step): above the RSS once the trainer was built.\n"
    ]
    for sweep, rows in results["sweeps"].items():
        out.append(f"\n#### {TITLES[sweep]}\n")
        out.append(markdown(HEAD, [_row(sweep, r) for r in rows]))
    return "\n".join(out)


def report(results: dict) -> str:
    """What the script prints."""
    return f"### Cost curves\n\n{tables(results)}"


def page(results: dict) -> str:
    """docs/cost_curves.md below its title, from docs/results/cost_curves.json."""
    return (
        f"Written by `{results['measurement']['command']}`; the method is in that script's docstring.\n\n"
        f"![cost curves](cost_curves.png)\n\n{tables(results)}"
    )


def write_page(results: dict, path: Path, results_path: Path) -> None:
    """The page: its title, then `page` between markers naming the results file (python -m studies.results draws
    it again)."""
    p = results_path.resolve()
    shown = p.relative_to(REPO_ROOT) if p.is_relative_to(REPO_ROOT) else p
    path.write_text(
        f"# Cost curves\n\n<!-- results benchmarks.cost_curves:page {shown} -->\n{page(results)}\n"
        "<!-- /results -->\n"
    )


def figure(results: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    ax = axes[0, 0]
    for n in (2, 4, 8):
        rs = [r for r in results.get("model", []) if r["point"]["n_layer"] == n and r["ours"]]
        if rs:
            x = [r["ours"]["params_m"] for r in rs]
            (line,) = ax.plot(x, [r["ours"]["step_ms"] for r in rs], "o-", label=f"ours, {n} layers")
            t = [(xi, r["trl"]["step_ms"]) for xi, r in zip(x, rs, strict=True) if r["trl"]]
            if t:
                ax.plot(
                    *zip(*t, strict=True), "s--", color=line.get_color(), alpha=0.6, label=f"TRL, {n} layers"
                )
    ax.set(
        xscale="log", yscale="log", xlabel="parameters (M)", ylabel="ms per step", title="model size, 36 x 8"
    )
    if ax.lines:
        ax.legend(fontsize=7)
    else:  # (a figure of other sweeps)
        ax.set_visible(False)

    def pair(ax, sweep: str, key, xkey, xlabel: str, ylabel: str, title: str, logx: bool = False) -> None:
        rs = [r for r in results.get(sweep, []) if r["ours"]]
        if not rs:
            ax.set_visible(False)
            return
        value = key if callable(key) else (lambda r: r[key])
        x = [xkey(r["point"]) for r in rs]
        ax.plot(x, [value(r["ours"]) for r in rs], "o-", label="ours")
        t = [(xi, value(r["trl"])) for xi, r in zip(x, rs, strict=True) if r["trl"]]
        if t:
            ax.plot(*zip(*t, strict=True), "s--", label="TRL")
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
        if logx:
            ax.set_xscale("log", base=2)
        ax.legend(fontsize=8)

    pair(axes[0, 1], "length", "step_ms", lambda p: p["max_completion_length"], "max_completion_length",
         "ms per step", "completion length, 36 x 8")  # fmt: skip
    pair(axes[0, 2], "batch", "completions_per_s", lambda p: p["P"] * p["G"], "completions per step (G = 8)",
         "completions/s", "prompts x G", logx=True)  # fmt: skip
    pair(axes[1, 0], "group", lambda r: r["peak_rss_mib"] - r["base_rss_mib"], lambda p: p["G"], "G (4 prompts)",
         "peak RSS above the built trainer (MiB)", "memory against G")  # fmt: skip
    ax = axes[1, 1]
    for sweep, marker in (("model", "o"), ("length", "^"), ("batch", "s"), ("group", "D")):
        rs = [r["ours"] for r in results.get(sweep, []) if r["ours"]]
        if rs:
            ax.plot([r["gflop_per_step"] for r in rs], [100 * r["bound_fraction"] for r in rs], marker,
                    linestyle="none", label=sweep)  # fmt: skip
    ax.set(
        xscale="log",
        xlabel="GFLOP per step",
        ylabel="% of the fp32 matmul bound",
        title="dispatch- vs compute-bound",
    )
    if ax.lines:
        ax.legend(fontsize=8)
    ax = axes[1, 2]
    rs = [r for sweep in ("model", "batch") for r in results.get(sweep, []) if r["ours"]]
    if rs:
        x = [r["ours"]["gflop_per_step"] for r in rs]
        for k, lab in (("generate", "generate"), ("ref_old_logps", "reference"), ("optimize", "update")):
            ax.plot(x, [100 * r["ours"]["phases"][k] for r in rs], "o", label=lab)
        ax.set(
            xscale="log",
            xlabel="GFLOP per step",
            ylabel="% of step",
            title="our phases (model, batch sweeps)",
        )
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.point is not None:  # internal: one point, one trainer, in this process; prints one JSON line
        set_threads(args.threads)
        quiet()
        pt = Point(**json.loads(args.point))
        r = measure_ours(pt, args) if args.trainer == "ours" else measure_trl(pt, args)
        print(json.dumps(r))
        return r
    sweeps = [s.strip() for s in args.sweeps.split(",") if s.strip()]
    bad = [s for s in sweeps if s not in SWEEPS]
    if bad or not sweeps:
        raise SystemExit(
            f"error: --sweeps {args.sweeps!r}: expected a comma-separated list of {', '.join(SWEEPS)}"
        )
    if args.min_seconds <= 0 or args.warmup < 0 or args.trl_steps < 1 or args.max_points < 0:
        raise SystemExit(
            "error: --min_seconds must be > 0, --warmup >= 0, --trl_steps >= 1, --max_points >= 0"
        )
    if args.trl:
        try:
            import trl  # noqa: F401
        except ImportError:
            raise SystemExit(
                "error: --trl true needs TRL: pip install -e '.[bench]' (or pass --trl false)"
            ) from None
    set_threads(args.threads)
    quiet()
    command = command_line("cost_curves.py", argv)
    if args.from_json:
        data = json.loads(Path(args.from_json).read_text())
        if "sweeps" not in data:  # an older --json file: the raw numbers alone
            data = summarize(data, args, f"{command} (the numbers of {args.from_json})")
        results = {**data, "sweeps": {k: v for k, v in data["sweeps"].items() if k in sweeps}}
    else:
        measured: dict[str, list[dict]] = {}
        for sweep in sweeps:
            print(f"{sweep}:", file=sys.stderr, flush=True)
            measured[sweep] = []
            for pt in SWEEPS[sweep][: args.max_points or None]:
                ours = run_point(pt, "ours", args)
                trl = (
                    run_point(pt, "trl", args)
                    if args.trl and args.trl_max_completions >= pt.P * pt.G
                    else None
                )
                measured[sweep].append({"point": asdict(pt), "ours": ours, "trl": trl})
        results = summarize(measured, args, command)
        # where each trainer ran, over every point it ran (TRL beside us only like for like on our device)
        ran = [r for rows in measured.values() for r in rows]
        peers = {"ours": [r["ours"]["device"] for r in ran if r["ours"]]}
        if args.trl:
            peers["trl"] = [r["trl"]["device"] for r in ran if r["trl"]]
        print(device_line(peers))
    print(report(results))
    if args.json:
        save(Path(args.json), results)
    if args.docs:
        docs = Path(args.docs)
        docs.mkdir(parents=True, exist_ok=True)
        figure(results["sweeps"], docs / "cost_curves.png")
        path = save(docs / "results" / "cost_curves.json", results)
        write_page(results, docs / "cost_curves.md", path)
        print(f"(wrote {path}, {docs / 'cost_curves.png'} and {docs / 'cost_curves.md'})", file=sys.stderr)
    return results


if __name__ == "__main__":
    main()
