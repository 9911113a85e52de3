"""Held-out greedy accuracy against training seconds and sampled completions: TRL's GRPOTrainer, our trainer doing
TRL's algorithm, and our default, on the same task, reference, verifier and settings.

    python benchmarks/time_to_accuracy.py                                          # ours_default, seed 42
    python benchmarks/time_to_accuracy.py --peer trl,ours_plain,ours_default --seeds 42,1,2   # the comparison
    python benchmarks/time_to_accuracy.py --peer trl --max_steps 3 --eval_steps 1 --eval_limit 50   # smoke run
    python benchmarks/time_to_accuracy.py --max_steps 20 -- --beta 0.02    # after --: more train_grpo.py flags

Peers (--peer, comma-separated; each runs every seed of --seeds, each run in a fresh process, one after another):
  ours_default  `python train_grpo.py` with its defaults: 2-digit addition (data/addition: the train split's prompts;
                the 500 test problems held out) from checkpoints/reference (SFT'd first by the repo's own
                tinygrpo.sft.train if missing), 64 prompts x G = 8 per step (per_device_train_batch_size 512),
                max_completion_length 4, temperature 1, AdamW lr 2e-3 cosine, betas 0.9/0.99, clip 1.0, beta 0,
                loss dapo, 1000 steps; prompts weighted toward unsolved ones, explore rounds, dynamic sampling.
  ours_plain    the same with --prompt_sampler uniform --explore_rounds 0 --dynamic_sampling false: TRL's algorithm.
  trl           TRL's GRPOTrainer (model = the reference directory) with our settings wherever its GRPOConfig has
                them (benchmarks/_tta.py SHARED: the above and epsilon, scale_rewards, num_iterations, ...;
                generation_batch_size 512: one generation per step), gradient checkpointing and bf16 off as ours,
                no checkpoints; TRL's defaults otherwise (logs every 10 steps). Reward: our strict verifier
                rewards.accuracy under TRL's calling convention (_tta.strict_accuracy_for_trl).
Flags after `--` go to train_grpo.py; the TRL peer takes those of them TRL has (SHARED). Every setting of every peer
is printed first, then a line naming each peer's device (`device: trl cpu, ours_default cpu`): every peer trains on
the one train_grpo.py takes, a GPU where there is one (the TRL child reports where it trained, and is checked).

The clock (held-out evaluation off it on both sides; evaluation = tinygrpo.rollout.evaluation.HeldOutEvaluator: greedy
decoding of the test split, or its first --eval_limit problems, scored by the strict verifier):
  ours  train s = the summed time/step of metrics.jsonl (--logging_steps 1: a row per step): generation, rewards,
        advantages, update. Not on it: the step's metrics (computed after time/step is taken), logging, evaluation
        (every --eval_steps, default 5), checkpoints.
  TRL   a TrainerCallback evaluates at step 0 and in on_step_end every --eval_steps (default 5, as ours) and at
        the end, and keeps its seconds off the clock: train s = wall seconds since the clock started (after the
        step-0 evaluation, before the first step's data loading) minus the evaluations' seconds since. On it: everything
        else TRL's Trainer loop does (data loading, its per-step metrics, its logs every 10 steps, callbacks).
  wall s  ours: since the step-0 evaluation row appeared in metrics.jsonl (polled every 0.1 s); TRL: since its
        clock started. Both include the evaluations (and ours its logging and checkpoints).
  completions  sampled so far: ours num_completions (every round of a step), TRL steps x 512.

What each side does that the other does not (read in TRL 1.16's trl/trainer/grpo_trainer.py, as configured here):
  TRL   tokenizes the step's prompt texts every step, each prompt G times (64 x 8 = 512 rows); samples with
        transformers' generate, each row running its own copy of the prompt, and finished rows stay in the batch
        until every row has ended; decodes the completions (our reward re-attaches <eos>, no second decode); runs the
        policy forward and backward on every completion, the groups whose advantages are all zero included, over the
        padded prompt + completion rows; every step, it computes the metrics it logs (on the clock) and keeps the
        batch's prompts, completions and advantages for its logs; visits the train split in a fresh shuffle per pass
        in batches of 64, dropping the last 9500 mod 64 = 28 prompts of each pass.
  ours  tokenizes the prompts once; tiny_lm's grouped fast path: each prompt runs through the network once for its
        G samples, in decoding and scoring, finished rows leave decoding, no work after <eos>; at beta 0 with no
        entropy term, groups whose advantages are all zero are left out of the forward and backward (exact: their
        loss terms are zero and the dapo normaliser still counts their tokens); decoded completions cached by token
        ids; a batch may straddle two passes of the shuffled split. ours_default also samples where the signal is:
        prompts weighted toward unsolved ones, explore rounds (failed prompts re-sampled at higher temperatures),
        dynamic sampling (refills), so it samples more completions per step (counted).
  both  fp32 on one torch thread (--threads), fused AdamW, no reference model at beta 0, no old log-prob pass
        (num_iterations 1: the ratio is exactly 1), transformers' cosine schedule.

Reported: per run the final accuracy, training seconds and completions to the first evaluation at or above 90 / 95 /
98 / 99 % ("not reached" otherwise), medians over seeds per peer (not reached counts as infinitely late), and per
run the first evaluation after which every later one stays at or above each threshold ("sustained"), the
evaluation seconds, the peak RSS (ru_maxrss of the waited child, and psutil polling). Outputs in OUTPUT_DIR (default
runs/bench/time_to_accuracy): time_to_accuracy.md (the report), .json (settings and every curve), .png (accuracy
against training seconds and against completions, one line per run); each run in OUTPUT_DIR/PEER_sSEED with its
time_to_accuracy.log (and, under --eval_limit, ours' problems in OUTPUT_DIR/PEER_sSEED_eval_subset). Seed variance
is real: compare medians over seeds. The medians and each run's crossings go to --results
(docs/results/time_to_accuracy.json, each peer run replacing that peer's entry), which benchmarks/README.md's table
(`table`) and the README's (`headline`) are drawn from.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import textwrap
from pathlib import Path

if not __package__:  # python benchmarks/time_to_accuracy.py (the docs import it as a module)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import (  # noqa: E402
    DEFAULT_BENCH_DIR,
    REPO_ROOT,
    command_line,
    device_line,
    md_table,
    merge_rows,
    script_parser,
)
from benchmarks._tta import (  # noqa: E402
    ALIASES,
    DEFAULT_EVAL_STEPS,
    DETAILS_HEAD,
    PEERS,
    PLAIN_FLAGS,
    SHARED,
    TABLE_HEAD,
    THRESHOLDS,
    crossings,
    curve,
    details_row,
    load_average,
    median_rows,
    our_device,
    plot_runs,
    run_and_watch,
    run_row,
    run_trl,
    settings_table,
    short_cmd,
    trl_settings,
    write_eval_subset,
)
from studies.results import RESULTS, measurement, pct  # noqa: E402


def parse_peers(text: str) -> list[str]:
    out = [ALIASES.get(t.strip(), t.strip()) for t in text.split(",") if t.strip()]
    bad = [t for t in out if t not in PEERS]
    if bad or not out:
        raise argparse.ArgumentTypeError(
            f"--peer {text!r}: expected a comma-separated list of {', '.join(PEERS)}"
        )
    return list(dict.fromkeys(out))


def parse_seeds(text: str) -> list[int]:
    try:
        return list(dict.fromkeys(int(t) for t in text.split(",") if t.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: expected comma-separated integers") from None


class SeedsAction(argparse.Action):
    """--seeds 42 1 2, or 42,1,2 (the earlier form): one list of distinct seeds."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        try:
            seeds = parse_seeds(",".join(values))
        except argparse.ArgumentTypeError as e:
            parser.error(str(e))
        setattr(namespace, self.dest, seeds)


def build_parser() -> argparse.ArgumentParser:
    p = script_parser(__doc__)
    p.add_argument(
        "--peer",
        type=parse_peers,
        default=["ours_default"],
        help=f"Comma-separated peers: {', '.join(PEERS)} (plain, default: short names). Default ours_default.",
    )
    p.add_argument(
        "--seeds",
        "--seed",
        dest="seeds",
        nargs="+",
        action=SeedsAction,
        default=None,
        help="Run seeds, each peer runs each: --seeds 42 1 2 (42,1,2 also works; default: train_grpo.py's, 42).",
    )
    p.add_argument(
        "--max_steps", type=int, default=None, help="Training steps (default: train_grpo.py's, 1000)."
    )
    p.add_argument(
        "--model_name_or_path",
        default=None,
        help="Initial policy (default: train_grpo.py's, checkpoints/reference; trained first if missing).",
    )
    p.add_argument(
        "--eval_steps",
        type=int,
        default=None,
        help="Held-out evaluation every N steps (default: "
        + ", ".join(f"{k} {v}" for k, v in DEFAULT_EVAL_STEPS.items())
        + "; also at step 0 and the end).",
    )
    p.add_argument(
        "--eval_limit",
        type=int,
        default=0,
        help="Evaluate on the first N test problems only (default 0: all).",
    )
    p.add_argument(
        "--output_dir",
        default=str(DEFAULT_BENCH_DIR / "time_to_accuracy"),
        help="Where the report goes, each run in a subdirectory (overwritten). Default runs/bench/time_to_accuracy.",
    )
    p.add_argument(
        "--results",
        default=str(RESULTS / "time_to_accuracy.json"),
        help="The results file the docs' tables are drawn from (default docs/results/time_to_accuracy.json; '' "
        "for none): each peer run here replaces that peer's entry, the other peers' stay.",
    )
    p.add_argument("--dry_run", action="store_true", help="Print the settings and commands, and exit.")
    p.add_argument(
        "--trl_run_json", default=None, help=argparse.SUPPRESS
    )  # the TRL child: one run, result here
    p.add_argument("train_args", nargs="*", help="Extra train_grpo.py flags, after `--`.")
    return p


def _our_config(argv: list[str]):
    from tinygrpo.run.config import parse_config

    return parse_config(argv)


def _out_dir(args) -> Path:
    out = Path(args.output_dir)
    return out if out.is_absolute() else REPO_ROOT / out  # (train_grpo.py runs in the repository root)


def eval_subset_dir(run_dir: str | Path) -> Path:
    """Where a run of ours under --eval_limit reads its problems: beside its output directory, not inside it
    (train_grpo.py refuses a dataset inside its output_dir: a run never writes where it reads)."""
    run_dir = Path(run_dir)
    return run_dir.with_name(f"{run_dir.name}_eval_subset")


def train_command(
    args, peer: str = "ours_default", seed: int | None = None, run_dir: Path | None = None
) -> list[str]:
    """One run's command line: train_grpo.py for ours, this script as the TRL child for trl."""
    out = str(run_dir) if run_dir is not None else args.output_dir
    every = str(args.eval_steps or DEFAULT_EVAL_STEPS[peer])
    shared = _shared_flags(args, seed)
    if peer == "trl":
        cmd = [sys.executable, str(Path(__file__).resolve()), "--peer", "trl", "--threads", str(args.threads)]
        cmd += ["--eval_steps", every, "--eval_limit", str(args.eval_limit), "--output_dir", out, *shared]
        cmd += ["--trl_run_json", str(Path(out) / "trl_run.json")]
        return cmd + (["--", *args.train_args] if args.train_args else [])
    cmd = [sys.executable, str(REPO_ROOT / "train_grpo.py"), "--output_dir", out]
    cmd += [*"--overwrite_output_dir true --torch_num_threads".split(), str(args.threads)]
    cmd += [*"--logging_steps 1 --eval_steps".split(), every, "--disable_tqdm", "true"]
    if args.eval_limit:  # (written by execute before the run)
        cmd += ["--dataset_name", str(eval_subset_dir(out))]
    cmd += [*shared, *(PLAIN_FLAGS if peer == "ours_plain" else ())]
    return cmd + list(args.train_args)


def plot(points: list[dict], path: Path, title: str) -> None:
    """One run's curve (plot_runs with one run)."""
    plot_runs([{"peer": "run", "seed": "", "points": points}], path, title)


# ------------------------------------------------------------------------------------------------ the runs
OURS_ONLY = (
    "prompt_sampler explore_rounds explore_temperatures dynamic_sampling max_dynamic_sampling_rounds "
    "skip_zero_advantage_groups grouped_forward advantage_mode logging_steps eval_steps save_steps"
).split()


def plan(args) -> list[dict]:
    """Every run: peer, seed, directory, command line, settings (ours: train_grpo.py's parsed command line; TRL: the
    keyword arguments its GRPOConfig gets from the same parse of the shared flags) and that shared parse (`base`)."""
    runs = []
    for peer in args.peer:
        for seed in args.seeds or [None]:
            base = _our_config(_shared_flags(args, seed) + list(args.train_args))
            run_dir = _out_dir(args) / f"{peer}_s{base.seed}"
            cmd = train_command(args, peer, seed, run_dir)
            if peer == "trl":
                settings = {k: v for k, v in trl_settings(base, "").items() if k != "output_dir"}
                settings["device"] = "cpu" if settings["use_cpu"] else "cuda"
            else:
                cfg = _our_config(cmd[2:])
                settings = {n: getattr(cfg, n) for n in (*SHARED, *OURS_ONLY)}
                settings["device"] = our_device()
            # (ours' --dataset_name is the eval_subset directory under --eval_limit: the problems are base's)
            settings.update(
                dataset=base.dataset_name,
                train_split=base.dataset_train_split,
                eval_split=base.dataset_test_split,
            )
            settings["eval every (steps)"] = args.eval_steps or DEFAULT_EVAL_STEPS[peer]
            settings["held-out problems"] = f"the first {args.eval_limit}" if args.eval_limit else "all"
            settings["torch threads"] = args.threads
            runs.append({"peer": peer, "seed": base.seed, "dir": run_dir, "cmd": cmd, "base": base})
            runs[-1]["settings"] = settings
    return runs


def _shared_flags(args, seed: int | None) -> list[str]:
    flags = ["--max_steps", str(args.max_steps)] if args.max_steps is not None else []
    if args.model_name_or_path:
        flags += ["--model_name_or_path", args.model_name_or_path]
    return flags + (["--seed", str(seed)] if seed is not None else [])


def ensure_reference(args) -> None:
    """train_grpo.py's default reference, SFT'd by the repo's own code as train_grpo.py would, if missing: before the
    first run, so that every peer starts from the same one."""
    if args.model_name_or_path:
        return
    from tinygrpo.run.config import GRPOConfig

    ref = REPO_ROOT / GRPOConfig.__dataclass_fields__["model_name_or_path"].default
    if (ref / "config.json").is_file():
        return
    import torch

    from tinygrpo.sft.train import SFTConfig, train_reference

    print(
        f"no reference at {ref}: training it first (tinygrpo.sft.train, as train_grpo.py does)",
        file=sys.stderr,
    )
    torch.set_num_threads(args.threads)
    train_reference(SFTConfig(output_dir=str(ref)))


def execute(run: dict, args) -> dict:
    """Run one peer and seed in a fresh process; its curve and resources."""
    d = run["dir"]
    if d.exists():
        shutil.rmtree(d)  # (this script's own PEER_sSEED directory: no stale curve is read back)
    d.mkdir(parents=True)
    if args.eval_limit and run["peer"] != "trl":
        write_eval_subset(run["base"], args.eval_limit, eval_subset_dir(d))
    print(
        f"{run['peer']}, seed {run['seed']}: {' '.join(short_cmd(run['cmd']))}", file=sys.stderr, flush=True
    )
    res = run_and_watch(run["cmd"], d / "metrics.jsonl", d / "time_to_accuracy.log", args.threads)
    if res["returncode"] != 0:
        sys.stderr.write(res["output"][-4000:])
        raise SystemExit(f"{run['peer']} (seed {run['seed']}) exited with {res['returncode']}")
    if run["peer"] == "trl":
        trl = json.loads((d / "trl_run.json").read_text())
        points, extra = trl["points"], {"threads_seen": trl["threads_seen"], "device": trl["device"]}
        if trl["device"] != run["settings"]["device"]:  # the device line printed first would be wrong
            raise SystemExit(
                f"trl (seed {run['seed']}) trained on {trl['device']}, not {run['settings']['device']}"
            )
    else:
        points = curve(d / "metrics.jsonl", res["seen"])
        s = d / "summary.json"
        extra = {"summary": json.loads(s.read_text()) if s.is_file() else {}}
    if not points:
        raise SystemExit(f"{run['peer']} (seed {run['seed']}): no held-out evaluation recorded in {d}")
    keep = ("peak_rss_ru_maxrss", "peak_rss_polled", "process_seconds")
    return {
        "peer": run["peer"],
        "seed": run["seed"],
        "command": run["cmd"],
        "settings": run["settings"],
        "points": points,
        **{k: res[k] for k in keep},
        **extra,
    }


# ------------------------------------------------------------------------------------------------ results
NAMES = {"trl": "TRL", "ours_plain": "our plain GRPO", "ours_default": "the default"}


def _key(t: float) -> str:
    return f"{t:g}"


def _median_or_none(xs: list[float | None]) -> float | None:
    """The median over seeds, a threshold not reached (None) counting as infinitely late; None if that is the
    median."""
    m = statistics.median([float("inf") if x is None else x for x in xs])
    return None if m == float("inf") else m


def summarize(runs: list[dict], command: str, threads: int, trl_version: str = "") -> list[dict]:
    """One entry per peer for docs/results/time_to_accuracy.json, from the runs (`execute`'s results): each run's
    final accuracy, training seconds, completions and step at the first evaluation at or above each threshold, and
    its sustained crossing (the first evaluation after which every later one stays at or above it), None where not
    reached; then the medians over seeds of each."""
    peers = []
    for peer in dict.fromkeys(r["peer"] for r in runs):
        each = []
        for r in (r for r in runs if r["peer"] == peer):
            pts = r["points"]
            first, sustained = {}, {}
            for t in THRESHOLDS:
                first[_key(t)], sustained[_key(t)] = crossings(pts, t)
            pick = lambda d, f: {k: None if p is None else p[f] for k, p in d.items()}  # noqa: E731
            each.append(
                {
                    "seed": r["seed"],
                    "final_accuracy": pts[-1]["accuracy"],
                    "steps": pts[-1]["step"],
                    "train_s": pts[-1]["train_s"],
                    "first_s": pick(first, "train_s"),
                    "first_completions": pick(first, "completions"),
                    "first_step": pick(first, "step"),
                    "sustained_s": pick(sustained, "train_s"),
                }
            )
        entry = {
            "peer": peer,
            "command": command,
            "seeds": [e["seed"] for e in each],
            "eval_steps": next(r["settings"]["eval every (steps)"] for r in runs if r["peer"] == peer),
            "threads": threads,
            "final_accuracy": statistics.median(e["final_accuracy"] for e in each),
        }
        for field in ("first_s", "first_completions", "sustained_s"):
            entry[field] = {_key(t): _median_or_none([e[field][_key(t)] for e in each]) for t in THRESHOLDS}
        if peer == "trl":
            entry["trl_version"] = trl_version
        peers.append({**entry, "runs": each})
    return peers


def write_results(path: str, runs: list[dict], command: str, threads: int) -> dict:
    version = ""
    if any(r["peer"] == "trl" for r in runs):
        import trl

        version = trl.__version__
    peers = summarize(runs, command, threads, version)
    return merge_rows(path, peers, ("peer",), measurement(command), field="peers")


def _label(p: dict) -> str:
    if p["peer"] == "trl":
        return "TRL " + ".".join(p["trl_version"].split(".")[:2]) + " GRPOTrainer"
    return {"ours_plain": "tinygrpo, TRL's algorithm", "ours_default": "tinygrpo, default"}[p["peer"]]


def _sooner(p: dict, trl: dict | None, field: str, key: str) -> str:
    """'7.2x': how much sooner than TRL, where both reached the threshold."""
    if trl is None or p is trl or p[field].get(key) is None or trl[field].get(key) is None:
        return ""
    return f"{trl[field][key] / p[field][key]:.1f}x"


def _s(x: float | None) -> str:
    return "not reached" if x is None else f"{x:.1f}"


def _final(p: dict, peers: list[dict]) -> str:
    cell = pct(p["final_accuracy"], space=True)
    return f"**{cell}**" if p["final_accuracy"] == max(q["final_accuracy"] for q in peers) else cell


def _head(cells: list[str]) -> list[str]:
    """A table's first two lines, its first column unnamed ('| |')."""
    return ["| |" + "".join(f" {c} |" for c in cells), "|" + "---|" * (len(cells) + 1)]


def table(results: dict) -> str:
    """benchmarks/README.md's time-to-accuracy table from docs/results/time_to_accuracy.json: per peer the median
    over seeds of the final accuracy (the best in bold), of the training seconds to the first evaluation at or
    above each threshold (how much sooner than TRL where both reach it) and of the completions sampled by the first
    and the last threshold; then the sustained crossings' medians at those two."""
    peers = results["peers"]
    trl = next((p for p in peers if p["peer"] == "trl"), None)
    keys = list(peers[0]["first_s"])
    lo, hi = keys[0], keys[-1]
    lines = _head(
        ["final accuracy", *(f"s to {pct(float(k), 0, space=True)}" for k in keys)]
        + [f"completions to {pct(float(lo), 0, space=True)}", f"to {pct(float(hi), 0, space=True)}"]
    )
    for p in peers:
        secs = []
        for k in keys:
            sooner = _sooner(p, trl, "first_s", k)
            secs.append(_s(p["first_s"][k]) + (f" ({sooner} sooner)" if sooner else ""))
        comps = [
            "not reached" if p["first_completions"][k] is None else f"{p['first_completions'][k]:,.0f}"
            for k in (lo, hi)
        ]
        lines.append("| " + " | ".join([_label(p), _final(p, peers), *secs, *comps]) + " |")
    return "\n".join(lines) + "\n\n" + _sustained(peers, trl, (lo, hi))


def _and(items: list[str], conj: str = "and") -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" {conj} " + items[-1]


def _sustained(peers: list[dict], trl: dict | None, keys: tuple[str, str]) -> str:
    parts = []
    for k in keys:
        known = [p for p in peers if k in p["sustained_s"]]
        reached = [p for p in known if p["sustained_s"][k] is not None]
        missed = [NAMES.get(p["peer"], p["peer"]) for p in known if p["sustained_s"][k] is None]
        items = []
        for p in reached:
            sooner = _sooner(p, trl, "sustained_s", k)
            items.append(
                f"{p['sustained_s'][k]:.1f} s for {NAMES.get(p['peer'], p['peer'])}"
                + (f" ({sooner} sooner)" if sooner else "")
            )
        text = f"{pct(float(k), 0, space=True)} after {_and(items)}" if items else ""
        if missed:
            text += (", never for " if items else f"{pct(float(k), 0, space=True)} never for ") + _and(
                missed, "or"
            )
        parts.append(text)
    text = (
        "Sustained crossings (another definition: the first evaluation after which every later one stays at or "
        "above the threshold), medians: " + "; ".join(parts) + "."
    )
    return textwrap.fill(text.replace(" %", "\0%"), 116).replace("\0", " ")  # (no line breaks before a %)


def headline(results: dict) -> str:
    """The README's short time-to-accuracy table from docs/results/time_to_accuracy.json: per peer the median final
    accuracy, seconds to the first evaluation at or above 90 % (how much sooner than TRL), seconds to 99 %."""
    peers = results["peers"]
    trl = next((p for p in peers if p["peer"] == "trl"), None)
    keys = list(peers[0]["first_s"])
    lo, hi = keys[0], keys[-1]
    rows = [
        [
            _label(p),
            _final(p, peers),
            _s(p["first_s"][lo]),
            _sooner(p, trl, "first_s", lo) or "-",
            _s(p["first_s"][hi]),
        ]
        for p in peers
    ]
    lo_, hi_ = pct(float(lo), 0, space=True), pct(float(hi), 0, space=True)
    return "\n".join(  # (the README names its one machine once, above: tests/test_results.py checks it)
        _head(["final accuracy", f"s to {lo_}", f"sooner than TRL (to {lo_})", f"s to {hi_}"])
        + ["| " + " | ".join(r) + " |" for r in rows]
        + ["", "(Medians of the seeds; test split; one thread.)"]
    )


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if args.threads < 1 or (args.eval_steps is not None and args.eval_steps < 1) or args.eval_limit < 0:
        raise SystemExit("--threads and --eval_steps must be >= 1, --eval_limit >= 0")
    if args.trl_run_json:  # the TRL child: one run in this process, its result to the parent as JSON
        cfg = _our_config(_shared_flags(args, (args.seeds or [None])[0]) + list(args.train_args))
        every = args.eval_steps or DEFAULT_EVAL_STEPS["trl"]
        res = run_trl(
            cfg, cfg.model_name_or_path, args.eval_limit, every, Path(args.output_dir), args.threads
        )
        Path(args.trl_run_json).write_text(json.dumps(res))
        return res
    runs = plan(args)
    head = "### Time to accuracy\n\nSettings (load average at the start {}):\n\n{}\n\n{}\n"
    devices = device_line({p: [r["settings"]["device"] for r in runs if r["peer"] == p] for p in args.peer})
    if args.dry_run:  # the settings, then the command lines as they run
        print(head.format(load_average(), settings_table(runs, commands=False), devices))
        print("\n".join(" ".join(r["cmd"]) for r in runs))
        return {}
    head = head.format(load_average(), settings_table(runs), devices)
    print(head, flush=True)
    ensure_reference(args)
    results = [execute(r, args) for r in runs]
    seconds = "training seconds (evaluation off the clock; ours: summed time/step)"
    report = [
        head,
        f"Time to accuracy: first held-out evaluation at or above each threshold, {seconds}; load average at the "
        f"end {load_average()}.\n",
        md_table(["peer", "seed", "accuracy at the end", *TABLE_HEAD], [run_row(r) for r in results]),
        "\nMedians over seeds (a threshold not reached counts as infinitely late):\n",
        md_table(["peer", "seeds", "accuracy at the end", *TABLE_HEAD], median_rows(results)),
        "\nEach run:\n",
        md_table(DETAILS_HEAD, [details_row(r) for r in results]),
    ]
    out = _out_dir(args)
    png = out / "time_to_accuracy.png"
    plot_runs(results, png, f"held-out greedy accuracy, {args.threads} torch thread(s)")
    report.append(f"\nCurves: {png}")
    text = "\n".join(report)
    print(text[len(head) :])
    (out / "time_to_accuracy.md").write_text(text + "\n")
    result = {"runs": results, "medians": median_rows(results)}
    (out / "time_to_accuracy.json").write_text(json.dumps(result, indent=1, default=str))
    if args.results:
        write_results(args.results, results, command_line("time_to_accuracy.py", argv), args.threads)
        print(
            f"wrote {args.results}; python -m studies.results draws the docs' tables from it", file=sys.stderr
        )
    return result


if __name__ == "__main__":
    main()
