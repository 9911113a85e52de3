"""Fingerprints of 15 short GRPO runs, to show that a refactor changes nothing: same fingerprints, same code.

    python benchmarks/same_runs.py --out /tmp/same_runs_base.json --model /tmp/refs/addition \\
        --tool_model /tmp/refs/multiplication_tool
    python benchmarks/same_runs.py --out /tmp/same_runs_new.json --model /tmp/refs/addition \\
        --tool_model /tmp/refs/multiplication_tool      # after the change
    python benchmarks/same_runs.py --compare /tmp/same_runs_base.json /tmp/same_runs_new.json

The references: `python train_sft.py --output_dir /tmp/refs/addition` and `python train_sft.py --task
multiplication_tool --max_steps 300 --output_dir /tmp/refs/multiplication_tool` (any fixed models will do: both
sides of a comparison must use the same ones). `--only default,cispo` runs a subset.

Each run is `python train_grpo.py FLAGS` in a subprocess (its command line only, so the script outlives any change of
the library's layout), at one torch thread with PYTHONHASHSEED=0, in its own directory under a temporary one. Its
fingerprint: every row of metrics.jsonl without its timing keys (time/*, throughput/*, any key that holds "seconds",
"it/s" or "_time"), the sha256 of completions.jsonl's rows without timing keys, and the sha256 of each tensor's raw
bytes in final/model.safetensors. --compare prints SAME or the first difference per run and exits 1 on any.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# Every addition run: 12 optimizer steps of 16 prompts x G = 8, a metrics row and logged completions each step,
# held-out evaluation only at the start and the end, no checkpoints, plots, report or progress bar.
COMMON = (
    "--max_steps 12 --per_device_train_batch_size 128 --logging_steps 1 --num_completions_to_print 16 "
    "--eval_steps 1000 --save_steps 0 --make_plots false --make_report false --disable_tqdm true "
    "--signal_forecast_prompts 0 --torch_num_threads 1 --seed 42"
)
ADDITION = "--dataset_name addition --dataset_train_split train --dataset_test_split test"
DEFAULT = "--config configs/default.yaml"
RUNS: dict[str, str] = {
    "default": DEFAULT,
    "plain_beta": "--config configs/plain.yaml --beta 0.04",
    "alloc_screen": f"{DEFAULT} --sample_allocation screen",
    "alloc_until_signal": f"{DEFAULT} --sample_allocation until_signal",
    "alloc_knapsack": f"{DEFAULT} --sample_allocation knapsack",
    "kl_in_reward_rloo": f"{DEFAULT} --use_kl_in_reward true --beta 0.04 --advantage_mode rloo",
    # two passes over two mini-batches of 64: the same generation of 128 as the others, 3 generations
    "remax_off_policy": f"{DEFAULT} --advantage_mode remax --num_iterations 2 --steps_per_generation 2 "
    "--per_device_train_batch_size 64",
    "top_entropy": f"{DEFAULT} --top_entropy_quantile 0.2",
    "off_policy_mask": f"{DEFAULT} --off_policy_mask_threshold 0.5 --loss_type bnpo --num_iterations 2",
    "explore_is": f"{DEFAULT} --explore_rounds 3 --explore_importance_sampling_correction true",
    "kl_full": f"{DEFAULT} --beta 0.04 --kl_estimator full",
    "adaptive_entropy": f"{DEFAULT} --use_adaptive_entropy true --loss_type dr_grpo",
    "cispo": f"{DEFAULT} --loss_type cispo",
    "sapo_sequence": f"{DEFAULT} --loss_type sapo --importance_sampling_level sequence",
}
TOOL_RUN = "tool"
TOOL = (
    "--config configs/multiplication_tool.yaml --dataset_name multiplication --dataset_train_split train "
    "--dataset_test_split test --max_steps 4"
)


def command(name: str, model: str, tool_model: str) -> list[str]:
    """The run's train_grpo.py command line but its --output_dir (later flags override earlier ones)."""
    flags = f"{COMMON} {TOOL}" if name == TOOL_RUN else f"{COMMON} {ADDITION} {RUNS[name]}"
    return [
        "train_grpo.py",
        *flags.split(),
        "--model_name_or_path",
        tool_model if name == TOOL_RUN else model,
    ]


def is_timing(key: str) -> bool:
    return key.startswith(("time/", "throughput/")) or any(s in key for s in ("seconds", "it/s", "_time"))


def untimed(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if not is_timing(k)}


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [untimed(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def tensor_hashes(path: Path) -> dict[str, str]:
    import torch
    from safetensors.torch import load_file

    return {
        name: hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
        for name, t in sorted(load_file(path).items())
    }


def fingerprint(name: str, model: str, tool_model: str, tmp: Path) -> dict[str, Any]:
    """Run one variant and read its fingerprint; a failed run stops the script with its stderr."""
    out = tmp / name
    argv = command(name, model, tool_model)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *argv, "--output_dir", str(out)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"run {name} failed (rc {proc.returncode}): python {' '.join(argv)}\n{proc.stderr[-3000:]}")
    print(f"{name}: {seconds:.1f} s", flush=True)
    rows = [json.dumps(r, sort_keys=True) for r in jsonl(out / "completions.jsonl")]
    return {
        "argv": argv,
        "seconds": seconds,
        "metrics": jsonl(out / "metrics.jsonl"),
        "completions_sha256": hashlib.sha256("\n".join(rows).encode()).hexdigest(),
        "completions_rows": len(rows),
        "tensors": tensor_hashes(out / "final" / "model.safetensors"),
    }


def first_difference(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """Where two fingerprints of one run first differ (None: they do not)."""
    ma, mb = a["metrics"], b["metrics"]
    for i, (ra, rb) in enumerate(zip(ma, mb, strict=False)):
        for key in sorted(ra.keys() | rb.keys()):
            if ra.get(key, "<absent>") != rb.get(key, "<absent>"):
                step = ra.get("step", f"row {i}")
                return f"metrics step {step}: {key}: {ra.get(key, '<absent>')} != {rb.get(key, '<absent>')}"
    if len(ma) != len(mb):
        return f"metrics: {len(ma)} rows != {len(mb)} rows"
    if a["completions_sha256"] != b["completions_sha256"]:
        return f"completions.jsonl: sha256 differs ({a['completions_rows']} rows vs {b['completions_rows']})"
    ta, tb = a["tensors"], b["tensors"]
    for name in sorted(ta.keys() | tb.keys()):
        if ta.get(name) != tb.get(name):
            return f"final model: tensor {name} differs" + ("" if name in ta and name in tb else " (absent)")
    return None


def compare(path_a: str, path_b: str) -> int:
    a, b = (json.loads(Path(p).read_text())["runs"] for p in (path_a, path_b))
    differ = 0
    for name in [*a, *(n for n in b if n not in a)]:
        if name not in a or name not in b:
            line = f"only in {path_a if name in a else path_b}"
        else:
            line = first_difference(a[name], b[name]) or "SAME"
            if line == "SAME" and a[name]["argv"] != b[name]["argv"]:
                line += " (note: the command lines differ)"
        differ += not line.startswith("SAME")
        print(f"{name}: {line}")
    print(f"{len(set(a) | set(b)) - differ} same, {differ} different")
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", help="the fingerprint file to write")
    p.add_argument("--model", default="/tmp/refs/addition", help="the addition runs' model (and reference)")
    p.add_argument("--tool_model", default="/tmp/refs/multiplication_tool", help="the tool run's model")
    p.add_argument("--only", default="", help="comma-separated run names (default: all)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (each at one thread)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two fingerprint files")
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        p.error("give --out FILE or --compare A B")
    names = [*RUNS, TOOL_RUN]
    chosen = [n for n in args.only.split(",") if n] or names
    if unknown := sorted(set(chosen) - set(names)):
        p.error(f"unknown runs {unknown}; the runs: {', '.join(names)}")
    models = (str(Path(args.model).resolve()), str(Path(args.tool_model).resolve()))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="same_runs_") as tmp, ThreadPoolExecutor(args.jobs) as pool:
        prints = list(pool.map(lambda n: fingerprint(n, *models, Path(tmp)), chosen))
    runs = dict(zip(chosen, prints, strict=True))
    Path(args.out).write_text(json.dumps({"runs": runs}, indent=1, sort_keys=True) + "\n")
    print(f"{len(runs)} runs in {time.perf_counter() - t0:.0f} s: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
