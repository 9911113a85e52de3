"""Today's decode and scoring against the static-shape ones (tinygrpo/rollout/static_decode.py,
tinygrpo/model/static_shapes.py) and, on CUDA, the static decode's loop and scoring forward replayed as CUDA graphs
(tinygrpo/rollout/static_decode.py, tinygrpo/model/static_shapes.py), side by side in one process: milliseconds per rollout and per scoring forward (medians
of --reps, the ways alternating), host reads per decode step, and whether each way samples today's completions.

    python benchmarks/static_decode.py                     # CPU, one thread: the default shape and a long one
    python benchmarks/static_decode.py --device cuda       # on a GPU (benchmarks/gpu.sh runs it)

Shapes: P prompts x G samples of at most T tokens, the fast path (grouped backend), fp32. The addition reference
(checkpoints/reference) when it is there, else a random model of its size (its completions run longer: no <eos>
learnt). A host read is a call that waits for the tensor's values (item, tolist, bool, int, nonzero, ...), counted
with a TorchFunctionMode on any device; per step = (reads of a T-step rollout - reads of a 1-step one) / (T - 1).
Prints a Markdown table and writes docs/results/static_decode.json (`--results FILE`; '' for none), from which
`table` draws benchmarks/README.md's (python -m studies.results).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# python benchmarks/static_decode.py (imported as benchmarks.static_decode: the docs' table, without torch)
if not __package__:
    sys.path.insert(0, str(REPO))
from studies.results import RESULTS, markdown, measurement, save  # noqa: E402

SHAPES = ((64, 8, 4), (36, 8, 16))  # (P, G, T): the default experiment's, and a longer completion


def load(device: str):
    import torch

    from tiny_lm import TinyLMConfig, TinyLMForCausalLM
    from tiny_lm.tokenization_tiny_lm import DEFAULT_CHARS, build_tokenizer

    ref = REPO / "checkpoints" / "reference"
    if (ref / "config.json").is_file():
        from transformers import AutoTokenizer

        model, tok, what = (
            TinyLMForCausalLM.from_pretrained(ref),
            AutoTokenizer.from_pretrained(ref),
            "reference",
        )
    else:
        tok = build_tokenizer(DEFAULT_CHARS)
        torch.manual_seed(0)
        model, what = TinyLMForCausalLM(TinyLMConfig(vocab_size=len(tok), n_positions=32)), "random init"
    return model.eval().to(device), tok, what


BACKENDS: dict = {}  # one backend a way of decoding: a graphed one keeps its decoders and graphs between rollouts


def rollout(
    model, tok, ids, mask, G, T, static: bool, seed: int, eos: int | None = None, graphed: bool = False
):
    import torch

    from tinygrpo.model.backend import GroupedBackend
    from tinygrpo.rollout.config import SamplingParams
    from tinygrpo.rollout.sampling import sample_completions
    from tinygrpo.rollout.static_decode import sample_static

    gen = torch.Generator().manual_seed(seed)
    backend = BACKENDS.setdefault((static, graphed), GroupedBackend())
    kw = dict(
        eos_token_id=tok.eos_token_id if eos is None else eos, pad_token_id=tok.pad_token_id, backend=backend
    )
    if static:
        return sample_static(
            model, ids, mask, G, SamplingParams(T, 1.0), gen, capture=graphs() if graphed else None, **kw
        )
    return sample_completions(model, ids, mask, G, SamplingParams(T, 1.0), gen, **kw)


def graphs():
    """One CudaGraphs (its memory pool and stream) for every graph, the decode's and the scoring's."""
    from tiny_lm.static_decoder import CudaGraphs

    return BACKENDS.get("graphs") or BACKENDS.setdefault("graphs", CudaGraphs())


def score(model, ids, mask, G, ro, static: bool, graphed: bool = False):
    """One no-grad scoring forward of a rollout (the reference's, or the old policy's): per-token log-probs.
    `graphed`: the static forward replayed from a CUDA graph (captured on the first call of its shape)."""
    import torch

    from tinygrpo.algorithm.core import selective_log_softmax
    from tinygrpo.model.backend import GroupedBackend
    from tinygrpo.model.static_shapes import StaticShapeBackend, replayed

    width = ro.completion_ids.size(1)
    if graphed:  # (kept: its captures serve every call)
        be = BACKENDS.get(("score", width))
        if be is None:
            be = BACKENDS[("score", width)] = StaticShapeBackend(GroupedBackend(), width, graphs())
    else:
        be = StaticShapeBackend(GroupedBackend(), width) if static else GroupedBackend()
    with torch.no_grad(), replayed(be):  # (as a training step asks for the reference's)
        cmask = ro.completion_mask.float()
        layout = be.layout(model, ids, mask, ro.completion_ids, G, cmask)
        return selective_log_softmax(be.logits(model, layout), ro.completion_ids) * cmask


def train(model, ids, mask, G, ro, graphed: bool) -> list:
    """One static-shape forward with gradient and its backward (the policy's, in an update): a fixed weighting of
    the per-token log-probs, summed; the parameters' gradients. `graphed`: both replayed from CUDA graphs
    (torch.cuda.make_graphed_callables, made on the first call of its shape)."""
    import functools

    import torch

    from tinygrpo.algorithm.core import selective_log_softmax
    from tinygrpo.model.backend import GroupedBackend
    from tinygrpo.model.static_shapes import StaticShapeBackend

    width = ro.completion_ids.size(1)
    be = BACKENDS.get(("train", width, graphed))
    if be is None:
        how = (
            functools.partial(torch.cuda.make_graphed_callables, allow_unused_input=True) if graphed else None
        )
        be = BACKENDS[("train", width, graphed)] = StaticShapeBackend(
            GroupedBackend(), width, graph_training=how
        )
    cids, cmask = (
        ro.completion_ids.clone(),
        ro.completion_mask.float(),
    )  # (plain tensors: autograd saves them)
    for p in model.parameters():
        p.grad = None
    layout = be.layout(model, ids, mask, cids, G, cmask)
    logp = selective_log_softmax(be.logits(model, layout), cids) * cmask
    (logp * torch.linspace(-1, 1, logp.numel(), device=logp.device).view_as(logp)).sum().backward()
    return [p.grad for p in model.parameters()]


def graphed_grad_diff(model, ids, mask, G, ro) -> tuple[float, float]:
    """The graphed gradients' largest difference from the eager ones, and the largest eager gradient."""
    eager = [g.clone() for g in train(model, ids, mask, G, ro, False)]
    graphed = train(model, ids, mask, G, ro, True)
    diff = max(float((a - b).abs().max()) for a, b in zip(graphed, eager, strict=True))
    return diff, max(float(g.abs().max()) for g in eager)


FAILED: list[str] = []  # the shapes whose CUDA graphs failed (the other ways are still measured)


def graphs_work(model, tok, ids, mask, G, T, ro) -> bool:
    """Whether the graphed decode and scoring run at this shape (captured here, the first time); a failure is said
    in one line and the script goes on with the other ways, then exits 1."""
    try:
        rollout(model, tok, ids, mask, G, T, True, 1, graphed=True)
        score(model, ids, mask, G, ro, True, True)
        train(model, ids, mask, G, ro, True)
        return True
    except Exception as e:  # (a capture this GPU refuses: the eager figures are still worth having)
        FAILED.append(f"{ids.size(0)} x {G}, {T}")
        print(f"error: CUDA graphs failed at {FAILED[-1]}: {type(e).__name__}: {e}", file=sys.stderr)
        return False


def timed(device: str, fn, *args, **kwargs) -> float:
    """Milliseconds of one call (the GPU's queue drained before and after)."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn(*args, **kwargs)
    if device == "cuda":
        torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - t0)


def reads_per_step(model, tok, ids, mask, G, T, static: bool) -> float:
    from benchmarks._host_reads import HostReads

    counts = []
    for steps in (1, T):
        with HostReads() as r:
            rollout(model, tok, ids, mask, G, steps, static, 0, eos=-1)  # (no row ends: every step runs)
        counts.append(r.count)
    return (counts[1] - counts[0]) / max(1, T - 1)


def table(results: dict) -> str:
    """benchmarks/README.md's table: each shape's medians, their ratio, host reads per step, same completions."""
    m = results["measurement"]
    rows = [
        [
            f"{r['P']} x {r['G']}, {r['T']}",
            f"{r['today_ms']:.2f}",
            f"{r['static_ms']:.2f}",
            f"{r['static_ms'] / r['today_ms']:.2f}",
            f"{r['reads_per_step_today']:g}",
            f"{r['reads_per_step_static']:g}",
            "yes" if r["same_completions"] else "NO",
            "-" if r.get("graphed_ms") is None else f"{r['graphed_ms']:.2f}",
            {None: "-", True: "yes", False: "NO"}[r.get("same_graphed")],
            f"{r['score_today_ms']:.2f}",
            f"{r['score_static_ms']:.2f}",
            "-" if r.get("score_graphed_ms") is None else f"{r['score_graphed_ms']:.2f}",
            f"{r['logp_max_diff']:.0e}",
            f"{r['train_static_ms']:.2f}",
            "-" if r.get("train_graphed_ms") is None else f"{r['train_graphed_ms']:.2f}",
        ]
        for r in results["rows"]
    ]
    head = [
        "P x G, T",
        "today ms",
        "static ms",
        "static / today",
        "host reads a step, today",
        "static",
        "same",
        "CUDA graphs ms",
        "same",
        "scoring ms, today",
        "static",
        "CUDA graphs",
        "log-prob max diff",
        "forward + backward ms, static",
        "CUDA graphs",
    ]
    where = f"{m['device']}, {m['threads']} thread(s), {results['model']}; {m['machine']['cpu']}"
    return markdown(head, rows) + (
        f"\n\nMedians of {results['reps']} rollouts and of as many no-grad scoring forwards of one rollout, the "
        f"ways alternating ({where}); the log-prob difference is fp32's, on the real positions, the static (and graphed) "
        "forward's against today's; forward + backward: the policy's forward with gradient and its backward, as an "
        "update runs them."
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument(
        "--quick",
        action="store_true",
        help="One small shape, to check the script (its figures mean nothing).",
    )
    p.add_argument("--results", default=str(RESULTS / "static_decode.json"), help="'' writes none.")
    args = p.parse_args(argv)
    import torch

    from tinygrpo.rollout.prompts import left_pad

    torch.set_num_threads(args.threads)
    model, tok, what = load(args.device)
    print(f"device {args.device}, {args.threads} thread(s), torch {torch.__version__}, model: {what}\n")
    rows = []
    for P, G, T in ((4, 4, 4),) if args.quick else SHAPES:
        texts = [f"{(7 * i) % 100}+{(13 * i) % 100}=" for i in range(P)]
        ids, mask = (t.to(args.device) for t in left_pad(tok(texts)["input_ids"], tok.pad_token_id))
        # the ways of decoding: (static, graphs); CUDA graphs only where there is CUDA
        ways = {"today": (False, False), "static": (True, False)}
        ro = rollout(model, tok, ids, mask, G, T, False, 1)
        if args.device == "cuda" and graphs_work(model, tok, ids, mask, G, T, ro):
            ways["graphed"] = (True, True)
        same = {
            way: torch.equal(
                ro.completion_ids,
                rollout(model, tok, ids, mask, G, T, how[0], 1, graphed=how[1]).completion_ids,
            )
            for way, how in ways.items()
        }
        # the scoring forwards: (static, graphed); CUDA graphs only where there is CUDA
        scorings = {"today": (False, False), "static": (True, False)}
        if "graphed" in ways:
            scorings["graphed"] = (True, True)
        base = score(model, ids, mask, G, ro, False)
        diff = max(
            float((score(model, ids, mask, G, ro, *how) - base).abs().max()) for how in scorings.values()
        )
        trainings = {"static": False} | ({"graphed": True} if "graphed" in ways else {})
        grad_diff = graphed_grad_diff(model, ids, mask, G, ro)[0] if "graphed" in ways else None
        times: dict[str, list[float]] = {way: [] for way in ways}
        scoring: dict[str, list[float]] = {way: [] for way in scorings}
        training: dict[str, list[float]] = {way: [] for way in trainings}

        for rep in range(args.reps + 2):
            for way, (static, graphed) in ways.items():  # alternating: a drift of the machine hits every way
                ms = timed(args.device, rollout, model, tok, ids, mask, G, T, static, rep, graphed=graphed)
                if rep >= 2:  # (two warm-up rounds: the graphs are captured in the first)
                    times[way].append(ms)
            for way, (static, graphed) in scorings.items():
                ms = timed(args.device, score, model, ids, mask, G, ro, static, graphed)
                if rep >= 2:
                    scoring[way].append(ms)
            for way, graphed in trainings.items():
                ms = timed(args.device, train, model, ids, mask, G, ro, graphed)
                if rep >= 2:
                    training[way].append(ms)
        r_today, r_static = (reads_per_step(model, tok, ids, mask, G, T, s) for s in (False, True))
        rows.append(
            {"P": P, "G": G, "T": T, "today_ms": statistics.median(times["today"])}
            | {"static_ms": statistics.median(times["static"]), "reads_per_step_today": r_today}
            | {"reads_per_step_static": r_static, "same_completions": same["static"]}
            | {
                "graphed_ms": statistics.median(times["graphed"]) if "graphed" in times else None,
                "same_graphed": same.get("graphed"),
            }
            | {
                "score_today_ms": statistics.median(scoring["today"]),
                "score_static_ms": statistics.median(scoring["static"]),
                "score_graphed_ms": statistics.median(scoring["graphed"]) if "graphed" in scoring else None,
            }
            | {"logp_max_diff": float(diff)}
            | {
                "train_static_ms": statistics.median(training["static"]),
                "train_graphed_ms": statistics.median(training["graphed"]) if "graphed" in training else None,
                "grad_max_diff_graphed": grad_diff,
            }
        )
    after_update = None
    if (
        args.device == "cuda" and not FAILED
    ):  # the graphs read the weights where they are: an update in place must show through
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1e-2 * torch.randn_like(p))
        today, graphed = (
            rollout(model, tok, ids, mask, G, T, s, 7, graphed=s).completion_ids for s in (False, True)
        )
        after_update = bool(torch.equal(today, graphed))
        print(f"the graphed decode after an update of the weights in place: same completions: {after_update}")
        drift = (
            (score(model, ids, mask, G, ro, True, True) - score(model, ids, mask, G, ro, False)).abs().max()
        )
        grad_drift, scale = graphed_grad_diff(model, ids, mask, G, ro)
        # (fp32 against today's forward, as the table's; the gradients against the eager ones, relative to their size)
        after_update = after_update and float(drift) < 1e-4 and grad_drift <= 1e-4 * max(scale, 1.0)
        print(
            f"the graphed scoring after it: log-prob max diff {float(drift):.0e}; gradients {grad_drift:.0e}"
        )
    command = "python benchmarks/static_decode.py" + (
        f" --device {args.device}" if args.device != "cpu" else ""
    )
    results = {
        "measurement": measurement(command, threads=args.threads, device=args.device),
        "model": what,
        "reps": args.reps,
        "rows": rows,
        "graphed_same_after_update": after_update,
    }
    print(table(results))
    if args.results:
        path = save(Path(args.results), results)
        print(f"\nwrote {path}; python -m studies.results draws the docs' table from it", file=sys.stderr)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
