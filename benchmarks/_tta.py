"""time_to_accuracy.py's peers and summary: TRL's GRPOTrainer on our settings under an evaluation clock, and the
seconds / completions to each accuracy threshold, medians over seeds, the figure.

The TRL peer runs in a process of its own (time_to_accuracy.py starts itself with --trl_run_json), as train_grpo.py
does for ours: each run starts fresh and its peak memory is its own.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

if not __package__:  # imported as `_tta` (the tests do) rather than benchmarks._tta
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import REPO_ROOT, md_table  # noqa: E402

THRESHOLDS = (0.90, 0.95, 0.98, 0.99)
PEERS = ("trl", "ours_plain", "ours_default")
ALIASES = {"plain": "ours_plain", "default": "ours_default"}
# Every peer is evaluated at the same steps. "First evaluation at or above X" reads a noisy curve (500 problems:
# +-0.5 points near 99 %), so a peer evaluated less often gets fewer chances to cross early (TRL used to be read every
# 25 steps: its crossings could come up to 20 steps later than if read as often). An evaluation costs ~0.03 s, off
# the clock.
DEFAULT_EVAL_STEPS = {"trl": 5, "ours_plain": 5, "ours_default": 5}
# Our trainer doing TRL's algorithm: every step the next prompts of a shuffled pass, one round of G samples each.
PLAIN_FLAGS = ("--prompt_sampler", "uniform", "--explore_rounds", "0", "--dynamic_sampling", "false")
# Our settings that TRL 1.16's GRPOConfig has under the same name and meaning: TRL gets our value for each.
SHARED = (
    "num_generations",
    "per_device_train_batch_size",
    "max_completion_length",
    "temperature",
    "top_k",
    "top_p",
    "beta",
    "loss_type",
    "epsilon",
    "epsilon_high",
    "delta",
    "importance_sampling_level",
    "scale_rewards",
    "num_iterations",
    "mask_truncated_completions",
    "use_bias_correction_kl",
    "top_entropy_quantile",
    "entropy_coef",
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "max_grad_norm",
    "max_steps",
    "seed",
)
# Set for TRL where its default differs from what ours does (or would write files / draw bars).
TRL_ONLY = {
    "generation_batch_size": None,  # = per_device_train_batch_size: one generation round per step (set below)
    "gradient_checkpointing": False,  # TRL's default True recomputes the blocks in backward; ours never does
    "bf16": False,  # TRL's default True where supported; ours trains in fp32
    "fp16": False,
    "report_to": "none",
    "save_strategy": "no",  # ours' checkpoints are off its clock (time/step), TRL's would be on it
    "eval_strategy": "no",  # the held-out evaluation is ours, in a callback, off the clock
    "disable_tqdm": True,
    "dataloader_num_workers": 0,
}


def our_device() -> str:
    """Where train_grpo.py trains: tinygrpo.run.launch.build_accelerator's choice, a GPU where there is one (decided
    here without building an Accelerator, which would hold a CUDA context in this parent process)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def trl_settings(cfg: Any, output_dir: str) -> dict[str, Any]:
    """TRL GRPOConfig keyword arguments from our (parsed) GRPOConfig: SHARED copied, TRL_ONLY set, the rest TRL's
    defaults (logging_steps 10, shuffle_dataset, adamw_torch_fused, ...)."""
    kw = {n: getattr(cfg, n) for n in SHARED}
    kw.update(TRL_ONLY, generation_batch_size=cfg.per_device_train_batch_size, output_dir=output_dir)
    # The same device as ours (a GPU where there is one): the same work on both sides.
    kw["use_cpu"] = our_device() == "cpu"
    return kw


def strict_accuracy_for_trl(eos_token: str, eos_token_id: int) -> Callable[..., list]:
    """Our strict verifier (rewards.accuracy) under TRL's calling convention.

    TRL hands a reward function the completions decoded without special tokens (no <eos>, so the strict rule would
    score everything 0) and their token ids, cut after the first <eos>. Our trainer decodes with <eos> kept and
    padding dropped; with only <pad> and <eos> special in the char tokenizer, that text is TRL's plus <eos> when the
    last id is <eos> (checked against tinygrpo.model.text.decode_rows in tests/test_benchmarks.py) - no second decode.
    """
    from rewards import accuracy as strict

    def accuracy(
        completions: list[str], completion_ids: list[list[int]], answer: list, **kwargs: Any
    ) -> list:
        texts = [
            c + eos_token if ids and ids[-1] == eos_token_id else c
            for c, ids in zip(completions, completion_ids, strict=True)
        ]
        return strict(completions=texts, answer=answer, eos=eos_token)

    return accuracy


def _eval_clock(
    evaluate: Callable[[Any, int], float], every: int, completions_per_step: int, threads: int
) -> Any:
    """The EvalClock callback (built here: transformers is imported only in the TRL child)."""
    from transformers import TrainerCallback

    class EvalClock(TrainerCallback):
        """Held-out accuracy at step 0 (before the clock starts) and every `every` steps and the last, with the
        evaluations' own seconds kept off the clock: training seconds = wall seconds since the clock started (just
        before the first step's data loading) minus the evaluation seconds since then."""

        def __init__(self) -> None:
            self.points: list[dict] = []
            self.t0 = 0.0
            self.eval_total = 0.0
            self.threads_seen = 0

        def _record(self, model: Any, step: int, train_s: float, wall_s: float) -> None:
            t = time.perf_counter()
            was_training = model.training
            model.eval()
            acc = evaluate(model, step)
            model.train(was_training)
            point = {"step": step, "accuracy": acc, "completions": step * completions_per_step}
            point.update(train_s=train_s, wall_s=wall_s, eval_s=time.perf_counter() - t)
            self.points.append(point)

        def on_train_begin(self, args, state, control, model=None, **kw):
            import torch

            torch.set_num_threads(threads)  # as ours (--torch_num_threads), whatever the libraries set
            self._record(model, 0, 0.0, 0.0)
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kw):
            import torch

            k = state.global_step
            if k % every and k != state.max_steps:
                return
            self.threads_seen = torch.get_num_threads()
            now = time.perf_counter()
            wall = now - self.t0
            self._record(model, k, wall - self.eval_total, wall)
            self.eval_total += time.perf_counter() - now

    return EvalClock()


def run_trl(cfg: Any, model_path: str, eval_limit: int, eval_every: int, out: Path, threads: int) -> dict:
    """One TRL GRPOTrainer run on our settings (`cfg`: our parsed GRPOConfig), evaluated by our evaluator."""
    import torch
    from transformers import AutoTokenizer
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    import tiny_lm  # noqa: F401  (registers the model type with the Auto classes: TRL loads the directory itself)
    from tinygrpo.data.problems import load_splits
    from tinygrpo.data.verifier import Verifier
    from tinygrpo.model.backend import select_backend
    from tinygrpo.rollout.config import SamplingParams
    from tinygrpo.rollout.evaluation import HeldOutEvaluator

    torch.set_num_threads(threads)
    train, test = load_splits(cfg.dataset_name, cfg.dataset_train_split, cfg.dataset_test_split)
    rows = test[:eval_limit] if eval_limit else test[:]
    tok = AutoTokenizer.from_pretrained(model_path)
    out.mkdir(parents=True, exist_ok=True)
    evaluator: list[HeldOutEvaluator] = []  # built once the model is loaded (the backend looks at it)

    def evaluate(model: Any, step: int) -> float:
        return evaluator[0](model, step)["eval/accuracy"]

    clock = _eval_clock(evaluate, eval_every, cfg.per_device_train_batch_size, threads)
    trainer = GRPOTrainer(
        model=model_path,
        reward_funcs=strict_accuracy_for_trl(tok.eos_token, tok.eos_token_id),
        args=TRLConfig(**trl_settings(cfg, str(out / "trl"))),
        train_dataset=train,
        processing_class=tok,
        callbacks=[clock],
    )
    verifier = Verifier.of(cfg.dataset_name, cfg.eval_reward, cfg.task)
    sampling = SamplingParams.of(cfg)
    evaluator.append(
        HeldOutEvaluator(
            rows,
            tok,
            select_backend(trainer.model),
            sampling,
            verifier,
            cfg.seed,
            cfg.eval_pass_k,
            cfg.num_generations_eval is not None,
        )
    )
    with (
        open(out / "trl.log", "w") as log,
        redirect_stdout(log),
        redirect_stderr(log),
    ):  # its per-10-step logs
        trainer.train()
    device = next(trainer.model.parameters()).device.type  # where it trained (the parent checks it)
    return {
        "points": clock.points,
        "threads_seen": clock.threads_seen,
        "eval_seconds": clock.eval_total,
        "device": device,
    }


# ------------------------------------------------------------------------------------------------ the summary
def first_crossing(points: list[dict], threshold: float) -> dict | None:
    return next((p for p in points if p["accuracy"] >= threshold), None)


def _median(xs: list[float]) -> float:
    """Median where a threshold not reached counts as infinitely late (so the median of 3 is finite iff 2 reached)."""
    return statistics.median(xs) if xs else float("nan")


def _fmt(x: float, spec: str) -> str:
    return "not reached" if x == float("inf") else format(x, spec)


def run_row(run: dict) -> list[str]:
    """peer, seed, final accuracy, training seconds to each threshold, completions to each threshold."""
    pts = run["points"]
    firsts = [first_crossing(pts, t) for t in THRESHOLDS]
    secs = [_fmt(p["train_s"] if p else float("inf"), ".1f") for p in firsts]
    comps = [_fmt(p["completions"] if p else float("inf"), ",.0f") for p in firsts]
    return [run["peer"], str(run["seed"]), f"{pts[-1]['accuracy']:.1%}", *secs, *comps]


def median_rows(runs: list[dict]) -> list[list[str]]:
    rows = []
    for peer in dict.fromkeys(r["peer"] for r in runs):
        mine = [r for r in runs if r["peer"] == peer]
        firsts = [[first_crossing(r["points"], t) for r in mine] for t in THRESHOLDS]
        secs = [_median([p["train_s"] if p else float("inf") for p in ps]) for ps in firsts]
        comps = [_median([p["completions"] if p else float("inf") for p in ps]) for ps in firsts]
        rows.append(
            [
                peer,
                f"{len(mine)} ({', '.join(str(r['seed']) for r in mine)})",
                f"{_median([r['points'][-1]['accuracy'] for r in mine]):.1%}",
                *[_fmt(s, ".1f") for s in secs],
                *[_fmt(c, ",.0f") for c in comps],
            ]
        )
    return rows


TABLE_HEAD = [
    *("s to 90 %", "s to 95 %", "s to 98 %", "s to 99 %"),
    *("completions to 90 %", "completions to 95 %", "completions to 98 %", "completions to 99 %"),
]


def plot_runs(runs: list[dict], path: Path, title: str) -> None:
    """Held-out accuracy against training seconds and against sampled completions, one line per run (a colour per
    peer, a line style per seed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    peers = list(dict.fromkeys(r["peer"] for r in runs))
    seeds = list(dict.fromkeys(r["seed"] for r in runs))
    styles = ["-", "--", ":", "-."]
    for r in runs:
        acc = [100 * p["accuracy"] for p in r["points"]]
        kw = {
            "color": f"C{peers.index(r['peer'])}",
            "ls": styles[seeds.index(r["seed"]) % len(styles)],
            "marker": "o",
            "ms": 2,
            "label": f"{r['peer']}, seed {r['seed']}",
        }
        axes[0].plot([p["train_s"] for p in r["points"]], acc, **kw)
        axes[1].plot([p["completions"] for p in r["points"]], acc, **kw)
    axes[0].set_xlabel("training seconds (evaluation excluded)")
    axes[1].set_xlabel("sampled completions")
    for ax in axes:
        for t in THRESHOLDS:
            ax.axhline(100 * t, color="grey", lw=0.6, ls=":")
        ax.set_ylabel("held-out greedy accuracy (%)")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="lower right", fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------ runs and tables
def write_eval_subset(cfg, limit: int, where: Path) -> None:
    """A dataset directory holding the train split as is and the first `limit` rows of the held-out split."""
    from tinygrpo.data.problems import DATA_DIR

    src = Path(cfg.dataset_name) if Path(cfg.dataset_name).is_dir() else DATA_DIR / cfg.dataset_name
    where.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / f"{cfg.dataset_train_split}.jsonl", where / f"{cfg.dataset_train_split}.jsonl")
    lines = (src / f"{cfg.dataset_test_split}.jsonl").read_text().splitlines(keepends=True)
    (where / f"{cfg.dataset_test_split}.jsonl").write_text("".join(lines[:limit]))


def run_and_watch(cmd: list[str], metrics: Path, log: Path, threads: int, poll_s: float = 0.1) -> dict:
    """Run the training subprocess; note when each metrics row appears and the peak RSS of its process tree."""
    try:
        import psutil
    except ImportError:
        psutil = None
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS=str(threads))
    t_start = time.time()
    with open(log, "w") as logf:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=logf, stderr=subprocess.STDOUT)
    ps = psutil.Process(proc.pid) if psutil else None
    seen: dict[int, float] = {}  # metrics.jsonl line index -> time first seen
    peak_poll = 0
    ru_maxrss = 0
    while True:
        # wait4 rather than poll: the rusage of this child alone (RUSAGE_CHILDREN would be the largest of all runs)
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        done = pid != 0
        if done:
            proc.returncode = os.waitstatus_to_exitcode(status)
            ru_maxrss = usage.ru_maxrss
        if ps is not None and not done:
            try:
                rss = ps.memory_info().rss + sum(c.memory_info().rss for c in ps.children(recursive=True))
                peak_poll = max(peak_poll, rss)
            except psutil.Error:
                pass
        if metrics.is_file():
            now = time.time()
            with open(metrics) as f:
                n = sum(1 for line in f if line.endswith("\n"))
            for i in range(len(seen), n):
                seen[i] = now
        if done:
            break
        time.sleep(poll_s)
    ru_bytes = ru_maxrss if sys.platform == "darwin" else ru_maxrss * 1024  # KiB on Linux, bytes on macOS
    return {
        "returncode": proc.returncode,
        "output": log.read_text(),
        "seen": seen,
        "peak_rss_ru_maxrss": ru_bytes,
        "peak_rss_polled": peak_poll,
        "process_seconds": time.time() - t_start,
    }


def curve(metrics: Path, seen: dict[int, float]) -> list[dict]:
    """One point per evaluation: step, accuracy, completions, train seconds (summed time/step), wall seconds."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    t0 = None
    train_s, last_step, points = 0.0, 0, []
    for i, r in enumerate(rows):
        step = r.get("step", 0)
        if "time/step" in r:
            # With logging_steps 1 every step has a row; otherwise a logged step stands for the unlogged ones before it.
            train_s += r["time/step"] * max(1, step - last_step)
            last_step = step
        if "eval/accuracy" not in r:
            continue
        if t0 is None:
            t0 = seen.get(i)
        wall = seen.get(i, float("nan")) - t0 if t0 is not None else float("nan")
        points.append(
            {
                "step": step,
                "accuracy": r["eval/accuracy"],
                "completions": r.get("num_completions", 0),
                "train_s": train_s,
                "wall_s": wall,
            }
        )
    return points


def crossings(points: list[dict], threshold: float) -> tuple[dict | None, dict | None]:
    first = next((p for p in points if p["accuracy"] >= threshold), None)
    sustained = None
    for i, p in enumerate(points):
        if all(q["accuracy"] >= threshold for q in points[i:]):
            sustained = p
            break
    return first, sustained


def settings_table(runs: list[dict], commands: bool = True) -> str:
    """One column per peer (its first seed's settings; the seeds differ in the seed only), "-" where a peer has no
    such setting; then (`commands`) each run's command line."""
    firsts = {r["peer"]: r["settings"] for r in reversed(runs)}
    firsts = {p: firsts[p] for p in dict.fromkeys(r["peer"] for r in runs)}
    names = list(dict.fromkeys(n for s in firsts.values() for n in s if n != "seed"))
    rows = [[n, *[str(s.get(n, "-")) for s in firsts.values()]] for n in names]
    rows.append(["seeds", *[", ".join(str(r["seed"]) for r in runs if r["peer"] == p) for p in firsts]])
    cmds = [f"- {r['peer']}, seed {r['seed']}: `{' '.join(short_cmd(r['cmd']))}`" for r in runs]
    return md_table(["setting", *firsts], rows) + ("\n\n" + "\n".join(cmds) if commands else "")


def short_cmd(cmd: list[str]) -> list[str]:
    return [Path(c).name if i < 2 else c for i, c in enumerate(cmd)]


def details_row(r: dict) -> list[str]:
    last = r["points"][-1]
    sustained = [crossings(r["points"], t)[1] for t in THRESHOLDS]
    mib = " / ".join(
        f"{r[k] / 2**20:.0f}" if r[k] else "n/a" for k in ("peak_rss_ru_maxrss", "peak_rss_polled")
    )
    return [
        r["peer"],
        str(r["seed"]),
        f"{r['points'][0]['accuracy']:.1%} -> {last['accuracy']:.1%}",
        str(last["step"]),
        f"{last['completions']:,}",
        f"{last['train_s']:.1f}",
        f"{last['wall_s']:.1f}",
        f"{last['wall_s'] - last['train_s']:.1f}",
        " / ".join("not reached" if p is None else f"{p['train_s']:.1f}" for p in sustained),
        f"{r['process_seconds']:.1f}",
        mib,
    ]


def load_average() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


DETAILS_HEAD = [
    "peer",
    "seed",
    "accuracy before -> after",
    "steps",
    "completions",
    "train s",
    "wall s",
    "wall - train s",
    "sustained 90/95/98/99 %: train s",
    "process s",
    "peak RSS MiB (ru_maxrss / psutil)",
]
