"""Where two CPUs part on the default reference: hashes of the kernels its training uses, of each module's output on
its first forward, and of its loss, gradients and weights after every step, to compare two machines bit for bit.

    python -m studies.fingerprint                          # docs/results/fingerprint_<cpu>.json for this machine
    python -m studies.fingerprint --compare A.json B.json  # the first kernel, module and step where they part

It trains README command 1's reference (`python train_sft.py`'s defaults) as train_sft.py does: in a process
started on the portable kernels (tinygrpo.sft.train.PORTABLE), one thread, with the recipe's own functions
(training_examples, initial_model, fit), so its last weights are the saved reference's; `weights` hashes a saved
model's tensors the same way. Two machines that train the same reference agree on every line; where they part, the
first kernel, the first module of the first forward and the first step that differ (its batch, loss, gradients or
weights) say which computation to pin. Each hash is the first 16 hex digits of a SHA-256 of float32 bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from .results import RESULTS, machine, markdown, measurement, pct, save


def digest(tensors: Iterable[Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().float().numpy().tobytes())
    return h.hexdigest()[:16]


def weights(model: torch.nn.Module) -> str:
    """A model's tensors by name, sorted, a tied tensor once (under its first name, as the saved file keeps it):
    the hash ../shared-style `weights.py DIR` gives of its model.safetensors."""
    seen, named = set(), {}
    for name, t in model.state_dict().items():
        if t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            named[name] = t
    h = hashlib.sha256()
    for name in sorted(named):
        h.update(name.encode())
        h.update(named[name].contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def kernels() -> dict[str, str]:
    """The kernels of a training step at the default reference's shapes (batch 128, 12 positions, width 64, 4 heads,
    vocabulary 16), each on fixed inputs (seed 0)."""
    torch.manual_seed(0)
    B, T, C, H, V = 128, 12, 64, 4, 16
    x, w = torch.randn(B * T, C), torch.randn(C, C) * 0.1
    w4, b4 = torch.randn(4 * C, C) * 0.1, torch.randn(4 * C) * 0.1
    q, k, v = (torch.randn(B, H, T, C // H) for _ in range(3))
    s = torch.randn(B, H, T, T)
    out = {
        "mm": digest([x @ w]),
        "linear +bias": digest([F.linear(x, w4, b4)]),
        "addmm": digest([torch.addmm(torch.zeros(C), F.linear(x, w4, b4), w4)]),
        "bmm q k^T": digest([q @ k.transpose(-1, -2)]),
        "sdpa causal": digest([F.scaled_dot_product_attention(q, k, v, is_causal=True)]),
        "softmax": digest([torch.softmax(s, -1)]),
        "log_softmax": digest([torch.log_softmax(s, -1)]),
        "exp": digest([torch.exp(s)]),
        "log": digest([torch.log(s.abs() + 1e-3)]),
        "tanh": digest([torch.tanh(s)]),
        "gelu tanh": digest([F.gelu(s, approximate="tanh")]),
        "gelu erf": digest([F.gelu(s)]),
        "layer_norm": digest([F.layer_norm(x, (C,), torch.ones(C), torch.zeros(C))]),
        "sum": digest([x.sum(0)]),
        "randn": digest([torch.randn(4 * C, C)]),
        "normal_ (init)": digest([torch.empty(4 * C, C).normal_(0.0, 0.02)]),
    }
    logits, target = torch.randn(B * T, V, requires_grad=True), torch.randint(0, V, (B * T,))
    loss = F.cross_entropy(logits, target, ignore_index=-100)
    loss.backward()
    out["cross_entropy"], out["cross_entropy grad"] = digest([loss.reshape(1)]), digest([logits.grad])
    lin = torch.nn.Linear(C, 4 * C)
    lin(x).pow(2).mean().backward()
    out["linear grad W"], out["linear grad b"] = digest([lin.weight.grad]), digest([lin.bias.grad])
    p = torch.nn.Parameter(torch.randn(4 * C, C))
    p.grad = torch.randn(4 * C, C)
    out["clip_grad_norm"] = digest([torch.nn.utils.clip_grad_norm_([p], 0.1).reshape(1)])
    opt = torch.optim.AdamW([p], lr=3e-3)
    for _ in range(3):
        opt.step()
    out["AdamW 3 steps"] = digest([p])
    return out


def first_forward(model: torch.nn.Module, ids: Tensor, mask: Tensor) -> dict[str, str]:
    """Each module's output on the initial model's forward of the first 128 examples, in the order they ran."""
    out: dict[str, str] = {}

    def record(name: str):
        def hook(_module, _inputs, output) -> None:  # (None: the output is left as it is)
            out[name or "model"] = digest([_tensor(output)])

        return hook

    hooks = [m.register_forward_hook(record(name)) for name, m in model.named_modules()]
    with torch.no_grad():
        model(ids[:128], attention_mask=mask[:128], use_cache=False)
    for hook in hooks:
        hook.remove()
    return out


def _tensor(output) -> Tensor:
    """A module's main output: itself, a tuple's first, or a model output's first field (logits, hidden states)."""
    return output if isinstance(output, Tensor) else output[0]


def trajectory(max_steps: int | None, output_dir: str) -> dict:
    """The default reference's training, step by step: the data, the first forward, and after each step the
    batch's rows, the loss, the gradients and the weights; then its held-out accuracy."""
    from tiny_lm import build_tokenizer
    from tinygrpo.sft.config import SFTConfig
    from tinygrpo.sft.train import fit, held_out_summary, initial_model, training_examples

    cfg = SFTConfig(output_dir=output_dir, logging_steps=0, **({"max_steps": max_steps} if max_steps else {}))
    if cfg.torch_num_threads:  # (train_reference's order: threads, seed, tokenizer, data, model)
        torch.set_num_threads(cfg.torch_num_threads)
    torch.manual_seed(cfg.seed)
    tokenizer = build_tokenizer(cfg.chars)
    _, targets, tools, (ids, mask, labels) = training_examples(cfg, tokenizer)
    model = initial_model(cfg, tokenizer)
    forward = first_forward(model, ids, mask)
    steps = [{"step": 0, "weights": weights(model)}]

    def on_step(step: int, rows: Tensor, loss: float) -> None:
        grads = digest(p.grad for p in model.parameters() if p.grad is not None)
        row = {"batch": digest([rows]), "loss": float(loss).hex(), "grads": grads, "weights": weights(model)}
        steps.append({"step": step, **row})

    fit(model, cfg, ids, mask, labels, False, on_step)
    held_out = held_out_summary(cfg, model, tokenizer, max(len(a) for a in targets) + 2, tools)
    return {
        "data": digest([ids, mask, labels]),
        "first_forward": forward,
        "steps": steps,
        "held_out_accuracy": held_out["eval_accuracy"],
    }


# ------------------------------------------------------------------------------------------------ two machines
def compare(a: dict, b: dict) -> list[str]:
    """Where two fingerprints part: one line each for the kernels, the data, the first forward and the steps (the
    first step that differs, and which of its batch, loss, gradients, weights); empty when they agree."""
    lines = []
    diff = [k for k in a["kernels"] if a["kernels"][k] != b["kernels"].get(k)]
    if diff:
        lines.append(
            f"kernels: {len(a['kernels']) - len(diff)} of {len(a['kernels'])} agree; differ: {', '.join(diff)}"
        )
    if a["data"] != b["data"]:
        lines.append(
            "data: the encoded training examples differ (the problems or the tokenizer, not a kernel)"
        )
    modules = [k for k in a["first_forward"] if a["first_forward"][k] != b["first_forward"].get(k)]
    if modules:
        lines.append(f"first forward: {len(modules)} modules differ, the first to run: {modules[0]}")
    for x, y in zip(a["steps"], b["steps"], strict=False):
        parts = [k for k in ("batch", "loss", "grads", "weights") if x.get(k) != y.get(k)]
        if parts:
            lines.append(
                f"steps: the same through step {x['step'] - 1}; step {x['step']} differs in {', '.join(parts)}"
            )
            break
    if len(a["steps"]) != len(b["steps"]):
        lines.append(f"steps: {len(a['steps']) - 1} against {len(b['steps']) - 1}")
    return lines


def table(results: dict) -> str:
    """One machine's fingerprint, as docs/default.md shows it: the weights after steps 1, 10, 100 and the last,
    and the held-out accuracy of the reference they end in."""
    m, steps = results["measurement"]["machine"], results["steps"]
    shown = [s for s in steps if s["step"] in (1, 10, 100) or s is steps[-1]]
    head = ["CPU", "kernels", *(f"weights after step {s['step']}" for s in shown), "held out"]
    row = [m["cpu"], m["kernels"], *(f"`{s['weights']}`" for s in shown), pct(results["held_out_accuracy"])]
    return (
        markdown(head, [row])
        + f"\n\n(`{results['measurement']['command']}`: trained on the portable kernels, one thread; the file also "
        f"holds {len(results['kernels'])} kernels' hashes, the first forward's {len(results['first_forward'])} "
        "modules and every step's batch, loss, gradients and weights.)"
    )


def default_results() -> Path:
    """docs/results/fingerprint_<cpu>_<kernels>.json: one file per kind of CPU, so two machines' sit side by side."""
    m = machine(threads=1)
    slug = re.sub(r"[^a-z0-9]+", "-", f"{m['cpu']} {m['kernels']}".lower()).strip("-")
    return RESULTS / f"fingerprint_{slug}.json"


def measure(results: Path, max_steps: int | None) -> int:
    """In a process on the portable kernels: every fingerprint, written to `results`."""
    from tinygrpo.sft.train import on_portable_kernels

    if not on_portable_kernels():
        sys.exit(
            "error: studies.fingerprint measures in a process started on the portable kernels (run it plainly)"
        )
    torch.set_num_threads(1)
    found = {"kernels": kernels()}
    with tempfile.TemporaryDirectory(prefix="fingerprint-") as tmp:
        found.update(trajectory(max_steps, tmp))
    command = "python -m studies.fingerprint" + (f" --max_steps {max_steps}" if max_steps else "")
    record = measurement(command, threads=1)
    record["machine"]["kernels"] = os.environ.get("TINYGRPO_NATIVE_KERNELS", record["machine"]["kernels"])
    save(results, {"measurement": record, "portable": "DEFAULT", **found})
    last = found["steps"][-1]
    print(
        f"step {last['step']}: weights {last['weights']}, held-out accuracy {found['held_out_accuracy']:.1%}"
    )
    print(f"wrote {results}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--compare", nargs=2, type=Path, metavar=("A", "B"), help="Two fingerprint files: where they part."
    )
    p.add_argument(
        "--results", type=Path, help="Where to write (default: docs/results/fingerprint_<cpu>.json)."
    )
    p.add_argument("--max_steps", type=int, help="Fewer steps than the recipe's (a quick look).")
    args = p.parse_args(argv)
    if args.compare:
        a, b = (json.loads(f.read_text()) for f in args.compare)
        lines = compare(a, b)
        print(
            "\n".join(lines)
            if lines
            else f"the same: every kernel, module and all {len(a['steps']) - 1} steps"
        )
        return 1 if lines else 0
    from tinygrpo.sft.train import PORTABLE, on_portable_kernels

    if on_portable_kernels():
        return measure(args.results or default_results(), args.max_steps)
    # A process started on the portable kernels (they are read when torch loads), told this CPU's own kernels.
    results = args.results or default_results()
    env = {**os.environ, **PORTABLE, "OMP_NUM_THREADS": "1", "TINYGRPO_NATIVE_KERNELS": machine()["kernels"]}
    cmd = [sys.executable, "-m", "studies.fingerprint", "--results", str(results)]
    cmd += ["--max_steps", str(args.max_steps)] if args.max_steps else []
    return subprocess.run(cmd, env=env, cwd=Path(__file__).resolve().parents[1]).returncode


if __name__ == "__main__":
    sys.exit(main())
