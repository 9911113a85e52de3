#!/usr/bin/env bash
# GPU readiness, on one NVIDIA GPU (CI runs only --cpu, in tests/test_benchmarks_gpu_sh.py):
#
#   bash benchmarks/gpu.sh            # fp32
#   bash benchmarks/gpu.sh --bf16     # steps 1-3 under bf16 autocast (--bf16 true in both trainers)
#   bash benchmarks/gpu.sh --cpu      # the same steps on the CPU, shortened: checks the script itself
#   STEPS=1b,4,4b,5 bash benchmarks/gpu.sh   # those steps alone (the goals' first, where one call may not hold all)
#
# 1. host synchronisations of the grouped fast path on the GPU (torch.cuda.set_sync_debug_mode): per scoring
#    forward and per decode step, against the number of layers (none may grow with the layers);
# 1b. benchmarks/static_decode.py: today's decode against the static-shape one and the CUDA-graphed one, ms per
#    rollout and host reads per decode step, side by side; the scoring forward, today's, static and graphed; the
#    update's forward and backward, static and graphed;
# 2. the default experiment (`train_grpo.py` with its defaults; on CUDA they decode with static shapes) on the GPU:
#    held-out accuracy before / after, seconds and peak host memory; then the same with --static_shapes false;
# 3. benchmarks/vs_trl.py on the GPU, both starting points, 36x8 and 4x8;
# 4. benchmarks/time_to_accuracy.py --peer trl,ours_default --seeds $SEEDS (42) on the GPU: held-out accuracy against
#    training seconds, TRL's GRPOTrainer and our default, 1000 steps each, in fp32 (its TRL peer has no bf16);
# 4b. the same for our default with --cuda_graphs true (the decode's whole loop, the no-grad scoring forwards, and
#    the update's forward and backward, replayed as CUDA graphs);
# 5. benchmarks/gpu_goals.py: the goals read from steps 4 and 4b (1000 steps, seconds to 99 %, TRL's seconds to 90 %
#    over ours), and the step split of our runs of steps 2, 2b, 4 and 4b (median ms of generate, reward, reference
#    and old log-probs, optimize), OUT/goals.json.
# Steps 3 and 4 print where each trainer ran, a line like `device: ours cuda, trl cuda`.
# Output: $OUT (default runs/gpu): gpu.log and what each step writes, results files included (nothing goes to
# docs/results), and the benchmark's own models in $OUT/bench. REFERENCE=DIR: the initial policy of steps 2 and 4
# (default train_grpo.py's, checkpoints/reference, trained first if missing). --cpu shortens every step to a check
# (its figures mean nothing): 2 training steps in step 2, one 2x4 block of one step and a 20-step seed reference in
# step 3, one step evaluated on 50 problems in step 4.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# A failed step is said and the next ones run (one GPU session measures all it can); the exit status says whether
# any failed. Only a missing GPU stops the script.
FAILED=()
failed() {
  FAILED+=("$1")
  echo "error: step $1 exited with $2; the next steps run" >&2
}
# STEPS=1b,4,4b,5 runs those steps alone (one GPU call may not hold them all); every step by default
step() {
  echo "== $1. $2"
  [[ -z ${STEPS:-} || ",$STEPS," == *",$1,"* ]] && return 0
  echo "(skipped: not in STEPS=$STEPS)"
  return 1
}
DEVICE=cuda BF16=false QUICK=() VS_TRL=() TTA=() STATIC=()
for arg in "$@"; do
  case "$arg" in
    --bf16) BF16=true ;;
    --cpu)
      DEVICE=cpu
      QUICK=(--max_steps 2 --eval_steps 2)
      STATIC=(--reps 1 --quick)
      VS_TRL=(--reps 1 --steps 1 --warmup 0 --profile_steps 1 --shapes 2x4 --reference_steps 20)
      TTA=(--max_steps 1 --eval_steps 1 --eval_limit 50)
      ;;
    *) echo "error: unknown argument $arg (expected --bf16 or --cpu)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-runs/gpu}
# step 4's seeds: one by default, so that the script fits 8 minutes on one GPU (TRL's 1000 steps and ours take ~2
# minutes a seed there); SEEDS=42,1,2 for the median of three
SEEDS=${SEEDS:-42}
BENCH=$OUT/bench
REF=() && [[ -n ${REFERENCE:-} ]] && REF=(--model_name_or_path "$REFERENCE")
mkdir -p "$OUT" || exit 1
exec > >(tee "$OUT/gpu.log") 2>&1
export TOKENIZERS_PARALLELISM=false
# train_grpo.py and time_to_accuracy.py take a GPU wherever there is one: --cpu hides it from every step
[[ $DEVICE == cpu ]] && export CUDA_VISIBLE_DEVICES=""

echo "== device"
DEVICE=$DEVICE python - <<'PY' || exit 1
import os, sys, torch
if os.environ["DEVICE"] == "cuda":
    if not torch.cuda.is_available():
        sys.exit(f"error: no CUDA device visible to torch {torch.__version__}; run with --cpu to check the script")
    print(torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
else:
    print("cpu (--cpu: a check of this script, not a GPU figure) | torch", torch.__version__)
PY

if step 1 "host synchronisations of the grouped fast path"; then
  DEVICE=$DEVICE BF16=$BF16 BENCH=$BENCH python - <<'PY' || failed 1 $?
import os, sys, warnings
sys.path.insert(0, "benchmarks")
import torch
from _common import build_our_trainer, ensure_random_pair, quiet

quiet()
dev, bf16 = os.environ["DEVICE"], os.environ["BF16"] == "true"
for n_layer in (2,) if dev == "cpu" else (2, 8):  # (--cpu: the script's check, nothing counted)
    tiny, _ = ensure_random_pair(os.environ["BENCH"], n_layer=n_layer)
    tr = build_our_trainer(tiny, 36, 8, 1, learning_rate=1e-5, device=dev, bf16=bf16)
    tr.training_step()
    out = tr.training_step()
    b, be, model = out.scored.batch, tr.backend, tr.model
    dev_t = next(model.parameters()).device
    args = [t.to(dev_t) for t in (b.prompt_ids, b.prompt_mask, b.completion_ids, b.completion_mask)]
    layout = be.layout(model, args[0], args[1], args[2], 8, args[3])
    counts = {}
    for name, fn in (
        ("scoring forward", lambda: be.logits(model, layout)),
        ("decoder prefill", lambda: be.decoder(model, args[0], args[1], 8)),
    ):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if dev == "cuda":
                torch.cuda.set_sync_debug_mode("warn")
            with torch.no_grad():
                fn()
            if dev == "cuda":
                torch.cuda.set_sync_debug_mode("default")
        counts[name] = sum("synchroniz" in str(w.message) for w in caught)
    note = "" if dev == "cuda" else " (CPU: not counted)"
    print(f"n_layer {n_layer} on {dev_t.type}: host syncs per call: {counts}{note}")
PY
fi

if step 1b "static-shape decode"; then
  python benchmarks/static_decode.py --device "$DEVICE" "${STATIC[@]}" --results "$OUT/static_decode.json" \
    || failed 1b $?
fi

if step 2 "the default experiment"; then
  rm -rf "$OUT/default"
  # (GNU time's peak memory where it is installed; the run alone otherwise)
  TIME=() && [[ -x /usr/bin/time ]] && TIME=(/usr/bin/time -v)
  status=0
  "${TIME[@]}" python train_grpo.py --output_dir "$OUT/default" --bf16 "$BF16" "${REF[@]}" "${QUICK[@]}" \
    2>"$OUT/default.time" | { grep -Ei "held-out|accuracy|error|note" || true; } || status=$?
  if ((status)); then
    sed '/Command being timed:/,$d' "$OUT/default.time" | tail -n 30  # its error (GNU time's report cut)
    failed 2 "$status"
  fi
  grep -E "Elapsed|Maximum resident" "$OUT/default.time" || true
  DEVICE=$DEVICE OUTDIR="$OUT/default" python - <<'PY' || failed 2 $?
import json, os
from pathlib import Path
s = Path(os.environ["OUTDIR"], "summary.json")
print(json.dumps(json.loads(s.read_text()), indent=1)[:1500] if s.is_file() else "no summary.json")
PY
fi

if step 2b "the default experiment, today's decode (--static_shapes false)"; then
  if [[ $DEVICE == cpu ]]; then
    echo "(--cpu: skipped; it is step 2's command with --static_shapes false, which the CPU runs by default)"
  else
    rm -rf "$OUT/default_eager"
    python train_grpo.py --output_dir "$OUT/default_eager" --bf16 "$BF16" --static_shapes false "${REF[@]}" \
      | { grep -Ei "held-out|error" || true; } || failed 2b $?
  fi
fi

if step 3 "vs_trl.py"; then
  if [[ $DEVICE == cpu ]]; then
    python benchmarks/vs_trl.py --threads 1 --device cpu --bf16 "$BF16" --bench_dir "$BENCH" "${VS_TRL[@]}" \
      --results "$OUT/vs_trl_results.json" || failed 3 $?
  else
    python benchmarks/vs_trl.py --threads 1 --device cuda --bf16 "$BF16" --bench_dir "$BENCH" \
      --json "$OUT/vs_trl.json" --results "$OUT/vs_trl_results.json" || failed 3 $?
  fi
fi

if step 4 "time_to_accuracy.py"; then
  python benchmarks/time_to_accuracy.py --threads 1 --peer trl,ours_default --seeds "$SEEDS" "${REF[@]}" "${TTA[@]}" \
    --output_dir "$OUT/time_to_accuracy" --results "$OUT/time_to_accuracy_results.json" || failed 4 $?
fi

if step 4b "time_to_accuracy.py, our default with CUDA graphs (--cuda_graphs true)"; then
  if [[ $DEVICE == cpu ]]; then
    echo "(--cpu: skipped; CUDA graphs need CUDA)"
  elif [[ $BF16 == true ]]; then
    echo "(--bf16: skipped; the graphs capture the float32 decode)"
  else
    python benchmarks/time_to_accuracy.py --threads 1 --peer ours_default --seeds "$SEEDS" "${REF[@]}" \
      --output_dir "$OUT/time_to_accuracy_graphs" --results "$OUT/time_to_accuracy_graphs_results.json" \
      -- --cuda_graphs true || failed 4b $?
  fi
fi

if step 5 "the goals (1000 steps <= 15 s, 99 % within 10 s, >= 15x TRL to 90 %)"; then
  python benchmarks/gpu_goals.py "$OUT" || failed 5 $?
fi
if ((${#FAILED[@]})); then
  echo "error: steps ${FAILED[*]} failed (their errors are above): $OUT/gpu.log" >&2
  exit 1
fi
echo "== done: $OUT/gpu.log"
