#!/usr/bin/env bash
# GPU readiness, a few minutes on one NVIDIA GPU (CI never runs it):
#
#   bash benchmarks/gpu.sh            # fp32
#   bash benchmarks/gpu.sh --bf16     # the same under bf16 autocast (--bf16 true in both trainers)
#   bash benchmarks/gpu.sh --cpu      # the same steps on the CPU, shortened: checks the script itself
#
# 1. host synchronisations of the grouped fast path on the GPU (torch.cuda.set_sync_debug_mode): per scoring
#    forward and per decode step, against the number of layers (none may grow with the layers);
# 2. the default experiment (`train_grpo.py` with its defaults) on the GPU: held-out accuracy before / after,
#    seconds and peak host memory;
# 3. benchmarks/vs_trl.py on the GPU, both starting points, 36x8 and 4x8.
# Output: $OUT (default runs/gpu): gpu.log and what each step writes.
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=cuda BF16=false QUICK=()
for arg in "$@"; do
  case "$arg" in
    --bf16) BF16=true ;;
    --cpu) DEVICE=cpu QUICK=(--max_steps 20 --eval_steps 10) ;;
    *) echo "error: unknown argument $arg (expected --bf16 or --cpu)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-runs/gpu}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu.log") 2>&1
export TOKENIZERS_PARALLELISM=false

echo "== device"
DEVICE=$DEVICE python - <<'PY'
import os, sys, torch
if os.environ["DEVICE"] == "cuda":
    if not torch.cuda.is_available():
        sys.exit(f"error: no CUDA device visible to torch {torch.__version__}; run with --cpu to check the script")
    print(torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
else:
    print("cpu (--cpu: a check of this script, not a GPU figure) | torch", torch.__version__)
PY

echo "== 1. host synchronisations of the grouped fast path"
DEVICE=$DEVICE BF16=$BF16 python - <<'PY'
import os, sys, warnings
sys.path.insert(0, "benchmarks")
import torch
from _common import build_our_trainer, ensure_random_pair, quiet

quiet()
dev, bf16 = os.environ["DEVICE"], os.environ["BF16"] == "true"
for n_layer in (2, 8):
    tiny, _ = ensure_random_pair(n_layer=n_layer)
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
    print(f"n_layer {n_layer}: host syncs per call: {counts}" + ("" if dev == "cuda" else " (CPU: not counted)"))
PY

echo "== 2. the default experiment"
rm -rf "$OUT/default"
/usr/bin/time -v python train_grpo.py --output_dir "$OUT/default" --bf16 "$BF16" "${QUICK[@]}" 2>"$OUT/default.time" \
  | grep -Ei "held-out|accuracy|error|note" || true
grep -E "Elapsed|Maximum resident" "$OUT/default.time" || true
DEVICE=$DEVICE OUTDIR="$OUT/default" python - <<'PY'
import json, os
from pathlib import Path
s = Path(os.environ["OUTDIR"], "summary.json")
print(json.dumps(json.loads(s.read_text()), indent=1)[:1500] if s.is_file() else "no summary.json")
PY

echo "== 3. vs_trl.py"
if [[ $DEVICE == cpu ]]; then
  python benchmarks/vs_trl.py --threads 1 --device cpu --bf16 "$BF16" --reps 1 --steps 3 --warmup 1 --shapes 4x8 --results "$OUT/vs_trl_results.json"
else
  python benchmarks/vs_trl.py --threads 1 --device cuda --bf16 "$BF16" --json "$OUT/vs_trl.json" --results "$OUT/vs_trl_results.json"
fi
echo "== done: $OUT/gpu.log"
