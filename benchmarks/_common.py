"""Helpers shared by the benchmark scripts: thread control, the benchmark's reference model, statistics, tables.

Every script takes `--threads` (default 1) and calls `torch.set_num_threads` before any work. On a 2-core machine
shared with other processes, torch with 2 intra-op threads on these tiny tensors can be 10-100x slower than with
one (OpenMP oversubscription); on a quiet machine 2 threads were ~1.5x faster. Compare A and B at the same setting.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# `python benchmarks/x.py` from anywhere (this module then imported as `_common`): the repo's modules import; as
# benchmarks._common the repository is on the path already
if not __package__ and str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

DEFAULT_BENCH_DIR = REPO_ROOT / "runs" / "bench"  # runs/ is git-ignored
SHAPES = ((36, 8), (4, 8))  # (prompts, completions per prompt) per step


def add_threads_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (torch.set_num_threads). Default 1: on a shared 2-core machine 2 threads on "
        "these tiny tensors can be 10-100x slower; on a quiet machine try 2. Use the same value for A/B.",
    )


def script_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's parser: the docstring's first paragraph as description, the whole as epilog, and --threads."""
    p = argparse.ArgumentParser(
        description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=doc
    )
    add_threads_arg(p)
    return p


def shape_parser(
    doc: str,
    *,
    steps_help: str,
    warmup_help: str,
    model_help: str,
    json_help: str,
    default_init: str = "reference",
) -> argparse.ArgumentParser:
    """The options every per-shape benchmark shares: threads, shapes, steps, warm-up, model, --json."""
    p = script_parser(doc)
    p.add_argument(
        "--shapes",
        type=parse_shapes,
        default=parse_shapes("36x8,4x8"),
        help="Comma-separated PROMPTSxG per step (default 36x8,4x8).",
    )
    p.add_argument("--steps", type=int, default=20, help=steps_help)
    p.add_argument("--warmup", type=int, default=3, help=warmup_help)
    p.add_argument(
        "--init",
        type=parse_inits,
        default=parse_inits(default_init),
        help=f"Comma-separated starting models (default {default_init}). reference: a char GPT SFT'd on the seed "
        "bank (answers in ~2 tokens). random: one random function, as tiny_lm for us and as a transformers GPT-2 "
        "with the same weights for TRL and for our generic path (--grouped_forward false): it rarely says <eos>, "
        "so both trainers sample completions near max_completion_length.",
    )
    p.add_argument(
        "--learning_rate",
        type=float,
        default=2e-3,
        help="AdamW learning rate from the reference (default 2e-3, the default experiment's).",
    )
    p.add_argument(
        "--random_learning_rate",
        type=float,
        default=1e-5,
        help="Learning rate from the random function (default 1e-5): small enough that the function, and the "
        "lengths it samples, stay put over the timed steps; a step's work does not depend on the rate.",
    )
    p.add_argument("--model_name_or_path", default=None, help=model_help)
    add_bench_dir_args(p)
    p.add_argument("--json", default=None, help=json_help)
    p.add_argument(
        "--grouped_forward",
        type=parse_bool,
        default=True,
        help="Our trainer's grouped fast path (default true); false = the generic transformers forward, "
        "to measure what the fast path buys.",
    )
    return p


SEED_REFERENCE_STEPS = 300  # SFT steps of the benchmark's seed-bank reference


def add_bench_dir_args(parser: argparse.ArgumentParser, *, reference: bool = True) -> None:
    """--bench_dir (where the benchmark's own models are built once and reused) and, with `reference`,
    --reference_steps (how long the seed-bank reference trains when it is built)."""
    parser.add_argument(
        "--bench_dir",
        default=str(DEFAULT_BENCH_DIR),
        help="Where the benchmark's own models are built the first time they are needed and reused after: the "
        "seed-bank reference and the random pairs (default runs/bench).",
    )
    if reference:
        parser.add_argument(
            "--reference_steps",
            type=int,
            default=SEED_REFERENCE_STEPS,
            help=f"SFT steps of the seed-bank reference when it is built (default {SEED_REFERENCE_STEPS}; "
            "another number is kept apart, in BENCH_DIR/seed_reference_sftN): a few for a smoke run of the "
            "script. Unused with --model_name_or_path.",
        )


def parse_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


INITS = ("reference", "random")


@dataclass(frozen=True)
class ModelDirs:
    """The model directories of one starting point: tiny_lm for our fast path, the peer's copy (TRL), and the one
    our generic path runs (--grouped_forward false). `init` names the starting point."""

    init: str
    ours: str
    peer: str
    generic: str

    def for_ours(self, grouped_forward: bool) -> str:
        return self.ours if grouped_forward else self.generic

    def learning_rate(self, args) -> float:
        return args.random_learning_rate if self.init == "random" else args.learning_rate


def parse_inits(text: str) -> list[str]:
    out = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in out if t not in INITS]
    if bad or not out:
        raise argparse.ArgumentTypeError(
            f"--init {text!r}: expected a comma-separated list of {', '.join(INITS)}"
        )
    return out


def model_dirs(
    init: str,
    model_name_or_path: str | None,
    workdir: str | Path = DEFAULT_BENCH_DIR,
    sft_steps: int = SEED_REFERENCE_STEPS,
) -> ModelDirs:
    if init == "random":
        tiny, gpt2 = ensure_random_pair(Path(workdir))
        return ModelDirs(init, tiny, gpt2, gpt2)
    path = ensure_seed_reference(model_name_or_path, Path(workdir), sft_steps)
    return ModelDirs(init, path, path, path)


def run_shapes(args, run_shape, report) -> list[dict]:
    """Set threads, silence libraries, run `run_shape(dirs, prompts, G, args)` per starting point (--init) and
    shape, print `report`. Each result gets "init" and a "label" (the shape, plus the init when it is not the
    reference)."""
    set_threads(args.threads)
    quiet()
    results = []
    for init in args.init:
        dirs = model_dirs(init, args.model_name_or_path, args.bench_dir, args.reference_steps)
        for prompts, G in args.shapes:
            print(f"{init}: shape {prompts}x{G} ...", file=sys.stderr, flush=True)
            r = run_shape(dirs, prompts, G, args)
            r["init"] = init
            r["label"] = f"{prompts}x{G}" + ("" if init == "reference" else f" {init}")
            results.append(r)
    print(report(results, args))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return results


def run_and_record(args, argv: list[str] | None, script: str, run_shape, report, record) -> list[dict]:
    """A shape benchmark's main() after its own checks: every shape run (run_shapes), then with --results its results
    recorded (`record(path, results, command)`: the script's summary into docs/results/) and the line that says so."""
    results = run_shapes(args, run_shape, report)
    if args.results:
        record(args.results, results, command_line(script, argv))
        print(
            f"\nwrote {args.results}; python -m studies.results draws the docs' tables from it",
            file=sys.stderr,
        )
    return results


def set_threads(n: int) -> None:
    import torch

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if n < 1:
        raise SystemExit(f"--threads must be >= 1, got {n}")
    torch.set_num_threads(n)


def quiet() -> None:
    """No progress bars, no library chatter (warnings stay for real problems)."""
    import warnings

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    try:
        import datasets

        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()
    except Exception:  # noqa: BLE001
        pass


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'36x8,4x8' -> [(36, 8), (4, 8)]."""
    out = []
    for part in text.split(","):
        p, _, g = part.strip().lower().partition("x")
        if not p or not g:
            raise argparse.ArgumentTypeError(f"shape {part!r}: expected PROMPTSxG, e.g. 36x8")
        out.append((int(p), int(g)))
    return out


def ensure_seed_reference(
    path: str | None, workdir: Path = DEFAULT_BENCH_DIR, sft_steps: int = SEED_REFERENCE_STEPS
) -> str:
    """A model directory both trainers can load by path.

    `path` given: used as is. Otherwise a 2-layer, 64-wide char GPT (the default architecture, 32 positions, the
    14-token vocabulary) is SFT'd for `sft_steps` on the 36 seed-bank questions into `workdir/seed_reference`
    once and reused (`seed_reference_sftN` for another number of steps: a reference of the default budget is never
    mistaken for a shorter one, nor the other way round).
    """
    if path:
        if not (Path(path) / "config.json").is_file():
            raise SystemExit(f"error: --model_name_or_path {path}: no model there (missing config.json)")
        return str(path)
    if sft_steps < 1:
        raise SystemExit(f"error: --reference_steps must be >= 1, got {sft_steps}")
    name = "seed_reference" if sft_steps == SEED_REFERENCE_STEPS else f"seed_reference_sft{sft_steps}"
    out = Path(workdir) / name
    if (out / "config.json").is_file():
        return str(out)
    from tinygrpo.sft.train import SFTConfig, train_reference

    t = time.perf_counter()
    cfg = SFTConfig(
        output_dir=str(out),
        dataset_name="seed_bank",
        dataset_test_split="",
        train_size=0,
        max_steps=sft_steps,
        per_device_train_batch_size=64,
        logging_steps=0,
        seed=0,
    )
    train_reference(cfg, verbose=False)
    print(
        f"(trained the benchmark reference on the seed bank into {out} in {time.perf_counter() - t:.1f}s)",
        file=sys.stderr,
    )
    return str(out)


def ensure_random_pair(
    workdir: Path = DEFAULT_BENCH_DIR, *, seed: int = 0, n_embd: int = 64, n_layer: int = 2, n_head: int = 4
) -> tuple[str, str]:
    """Two model directories holding the same random function: a `tiny_lm` and a transformers GPT-2.

    A freshly initialised char GPT (the default architecture unless told otherwise, 32 positions, the 14-token
    vocabulary) rarely says <eos>, so both trainers sample completions near max_completion_length: the same length
    distribution by construction. The GPT-2 copy (`activation_function="gelu"`, exact GELU as tiny_lm; its Conv1D
    weights are the transposed Linear weights) is what a TRL user would start from; the logits of the two agree to
    float rounding (checked here before saving). Built once per (seed, shape) and reused.
    """
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from tiny_lm import TinyLMConfig, TinyLMForCausalLM, build_tokenizer

    tag = f"random_s{seed}_e{n_embd}_l{n_layer}_h{n_head}"
    tiny_dir, gpt2_dir = Path(workdir) / f"{tag}_tiny_lm", Path(workdir) / f"{tag}_gpt2"
    if (tiny_dir / "config.json").is_file() and (gpt2_dir / "config.json").is_file():
        return str(tiny_dir), str(gpt2_dir)
    tok = build_tokenizer()
    torch.manual_seed(seed)
    cfg = TinyLMConfig(
        vocab_size=len(tok),
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    tiny = TinyLMForCausalLM(cfg).eval()
    gcfg = GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_inner=cfg.n_inner,
        activation_function="gelu",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=cfg.layer_norm_epsilon,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
    )
    gpt2 = GPT2LMHeadModel(gcfg).eval()
    src = tiny.state_dict()
    with torch.no_grad():
        for name, p in gpt2.state_dict().items():
            if name.endswith(".attn.masked_bias") or name.endswith(".attn.bias"):
                continue  # GPT-2's causal-mask buffers (absent in recent transformers)
            p.copy_(src[name].t() if _is_conv1d(gpt2, name) else src[name])  # both name weights GPT-2's way
        ids = torch.randint(2, cfg.vocab_size, (3, 9))
        a, b = tiny(ids).logits, gpt2(ids).logits
        if not torch.allclose(a, b, atol=1e-5, rtol=1e-4):
            raise RuntimeError(
                f"GPT-2 copy differs from tiny_lm: max |diff| {float((a - b).abs().max()):.2e}"
            )
    for d, m in ((tiny_dir, tiny), (gpt2_dir, gpt2)):
        m.save_pretrained(d)
        tok.save_pretrained(d)
    return str(tiny_dir), str(gpt2_dir)


def _is_conv1d(model, param_name: str) -> bool:
    from transformers.pytorch_utils import Conv1D

    module = model.get_submodule(param_name.rsplit(".", 1)[0])
    return isinstance(module, Conv1D) and param_name.endswith(".weight")


def median_min_max(xs: Sequence[float]) -> tuple[float, float, float]:
    return statistics.median(xs), min(xs), max(xs)


def fmt_mmm(xs: Sequence[float], digits: int = 0, scale: float = 1.0) -> str:
    """'median (min-max)'."""
    med, lo, hi = median_min_max([x * scale for x in xs])
    return f"{med:,.{digits}f} ({lo:,.{digits}f}-{hi:,.{digits}f})"


def device_line(devices: dict[str, Sequence[str]]) -> str:
    """'device: ours cpu, trl cpu': where each peer of a comparison ran (every device it ran on, '+' between), one
    line that a reader and a test (tests/test_benchmarks_smoke.py) check: a comparison is like for like only when
    every peer ran on the same device."""
    ran = {peer: "+".join(sorted(set(d))) or "none (it did not run)" for peer, d in devices.items()}
    return "device: " + ", ".join(f"{peer} {d}" for peer, d in ran.items())


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def machine_line(threads: int) -> str:
    """One line describing the conditions of a measurement (load matters a lot on a shared machine)."""
    import torch

    try:
        load = ", load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:
        load = ""
    return (
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s) (--threads {threads}), "
        f"{os.cpu_count()} CPUs{load}"
    )


class Timer:
    """Accumulates seconds per named phase; `wrap` returns a timing wrapper around a callable."""

    def __init__(self) -> None:
        self.acc: dict[str, float] = {}

    def reset(self) -> None:
        self.acc = {}

    def add(self, name: str, seconds: float) -> None:
        self.acc[name] = self.acc.get(name, 0.0) + seconds

    def wrap(self, name: str, fn: Callable) -> Callable:
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(name, time.perf_counter() - t)

        timed.__wrapped__ = fn
        return timed


def build_our_trainer(
    model_path: str,
    prompts: int,
    G: int,
    threads: int,
    *,
    dataset: str = "seed_bank",
    beta: float = 0.02,
    loss_type: str = "dapo",
    learning_rate: float = 2e-3,
    max_completion_length: int = 4,
    seed: int = 0,
    output_dir: str | None = None,
    device: str = "cpu",
    **overrides,
):
    """tinygrpo's GRPOTrainer at the benchmark shape (no eval split, no checkpoints, no plots)."""
    import tempfile

    from tinygrpo.data.problems import load_split
    from tinygrpo.run.config import GRPOConfig
    from tinygrpo.run.launch import load_model_and_tokenizer
    from tinygrpo.run.trainer import GRPOTrainer

    out = output_dir or tempfile.mkdtemp(prefix="tinygrpo-bench-")
    cfg = GRPOConfig(
        model_name_or_path=model_path,
        dataset_name=dataset,
        dataset_train_split="train",
        dataset_test_split=None,
        num_generations=G,
        per_device_train_batch_size=prompts * G,
        max_completion_length=max_completion_length,
        temperature=1.0,
        beta=beta,
        loss_type=loss_type,
        learning_rate=learning_rate,
        adam_beta2=0.999,
        max_grad_norm=1.0,
        num_iterations=1,
        max_steps=1_000_000,
        output_dir=out,
        save_steps=0,
        make_plots=False,
        disable_tqdm=True,
        torch_num_threads=threads,
        seed=seed,
        # TRL's GRPO: every step one round of the prompts in order, no extra sampling (our exploration is off).
        dynamic_sampling=False,
        explore_rounds=0,
        prompt_sampler="uniform",
        **overrides,
    )
    model, tok = load_model_and_tokenizer(model_path, "model_name_or_path")
    ref = load_model_and_tokenizer(model_path, "ref_model_name_or_path")[0] if beta > 0 else None
    from accelerate import Accelerator

    acc = Accelerator(cpu=device == "cpu")
    return GRPOTrainer(cfg, model, tok, load_split(dataset, "train"), None, ref_model=ref, accelerator=acc)


def sync(device: str) -> None:
    """Wait for the GPU's queued work before reading a clock (a no-op on the CPU)."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def command_line(script: str, argv: list[str] | None) -> str:
    """The command a results file records: `python benchmarks/SCRIPT ARGS`."""
    import shlex

    return shlex.join(["python", f"benchmarks/{script}", *(sys.argv[1:] if argv is None else argv)])


def merge_rows(
    path: str | Path, rows: list[dict], key: Sequence[str], measured: dict, field: str = "rows"
) -> dict:
    """Write `rows` into the results file at `path` (docs/results/NAME.json) and return what it then holds.

    A table of the docs may draw on several runs of one script (other shapes, starting points, lengths): each row
    keeps the command that measured it, and a run replaces the rows with its own values of the `key` fields, in
    place, and keeps the others. `measured` (this run's `measurement`) goes on top, its command the rows' commands.
    """
    from studies.results import save

    path = Path(path)
    old = json.loads(path.read_text()) if path.is_file() else {}
    ident = lambda r: tuple(r.get(k) for k in key)  # noqa: E731
    new = {ident(r): r for r in rows}
    merged = [new.pop(ident(r), r) for r in old.get(field, [])]
    merged += new.values()
    commands = list(dict.fromkeys(r["command"] for r in merged))
    out = {"measurement": {**measured, "command": "; ".join(commands)}, field: merged}
    kept_old = any(ident(r) not in {ident(n) for n in rows} for r in old.get(field, []))
    if kept_old and "caveat" in old.get("measurement", {}):  # (rows of an earlier record stay what they were)
        out["measurement"]["caveat"] = old["measurement"]["caveat"]
    save(path, out)
    return out
