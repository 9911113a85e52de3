"""The grouped decoder with every tensor in a buffer of fixed shape, so that a decode step can be captured once as a
CUDA graph and replayed (PyTorch's "Accelerating PyTorch with CUDA Graphs"; gpt-fast's static KV cache): on a GPU a
tiny model's step is hundreds of small kernels, each launched from Python, and a replay launches them all at once.

`GroupedDecoder` (tiny_lm/grouped.py) drops finished rows and grows each row's keys and values by one token a step
(`torch.cat`): shapes that change every step. `StaticGroupedDecoder` keeps all P * G rows, writes step t's keys and
values into column t of (P * G, nh, T, hd) buffers, and reads the first t + 1 of them: step t's shapes depend on t
only. Its arithmetic is GroupedDecoder's, op for op, on the grid of all rows (the prompt's padding bias is always
added: zeros where a prompt has no padding, which changes no value), so its logits are GroupedDecoder's while no row
has been dropped, and a dropped row is one the static loop (tinygrpo/rollout/static_decode.py) never reads again.

A step is idempotent: it reads the step's tokens and the buffers, and writes column t and the logits; running it
twice leaves the same state. That is what capturing needs (a warm-up run, then the capture, then replays).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .grouped import GroupedDecoder, GroupedWeights, _embed, _finish_block, _head, _qkv, _split_heads
from .grouped_layout import FrameCache

# capture(fn) -> replay: runs fn's kernels again on each call (CudaGraphs: a CUDA graph's replay)
Capture = Callable[[Callable[[], None]], Callable[[], None]]


class CudaGraphs:
    """A `Capture` for CUDA: each call captures fn as a CUDA graph and returns its replay. One memory pool and one
    stream serve every graph (PyTorch's CUDA-graph notes: a private pool per capture "sometimes needlessly wastes
    memory"; the warm-up runs on the stream that captures, so that lazy initialisations such as cuBLAS's workspace,
    kept per stream, happen before the capture, not in it). Sharing the pool is safe here because no tensor made
    inside a graph outlives its replay: every step writes its results into buffers allocated outside any graph,
    so a graph may reuse the memory of any other, whatever order they are replayed in."""

    def __init__(self) -> None:
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = torch.cuda.Stream()

    def __call__(self, fn: Callable[[], None]) -> Callable[[], None]:
        """fn must be idempotent and read and write only tensors that outlive the graph."""
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            fn()  # the warm-up
        torch.cuda.current_stream().wait_stream(self.stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
            fn()
        return graph.replay


class StaticGroupedDecoder:
    """Incremental decoding of G samples of P prompts of width Tp, for at most T steps, in fixed buffers (see the
    module docstring). `prefill` starts a rollout; `step(tokens)` feeds one token per row (all P * G rows, always)
    and returns the (P * G, V) logits buffer, overwritten by the next step. With `capture`, each step index runs as
    a captured graph, captured on its first use and replayed after."""

    def __init__(
        self, w: GroupedWeights, P: int, Tp: int, G: int, T: int, capture: Capture | None = None
    ) -> None:
        self.w, self.P, self.G, self.T, self.capture = w, P, G, T, capture
        nh, (V, C) = w.n_head, w.wte.shape
        hd, B = C // nh, P * G
        self.nh, self.scale = nh, hd**-0.5
        z = {"device": w.wte.device, "dtype": w.wte.dtype}
        with torch.inference_mode():
            self.kp = [torch.zeros(P, nh, hd, Tp, **z) for _ in w.layers]  # the prompts' keys, transposed
            self.vp = [torch.zeros(P, nh, Tp, hd, **z) for _ in w.layers]
            self.kc = [
                torch.zeros(B, nh, T, hd, **z) for _ in w.layers
            ]  # each row's own keys, column t at step t
            self.vc = [torch.zeros(B, nh, T, hd, **z) for _ in w.layers]
            self.prompt_bias = torch.zeros(P, 1, 1, Tp, **z)  # additive: -inf on a prompt's padding
            self.pos0 = torch.zeros(B, dtype=torch.long, device=z["device"])  # position of each row's token 0
            self.tokens = torch.zeros(B, dtype=torch.long, device=z["device"])
            self.logits = torch.zeros(B, V, **z)
        self.t = 0
        self.replays: dict[int, Callable[[], None]] = {}
        self.loops: dict = {}  # a caller's own captures on these buffers (a whole decode loop's: static_decode.py)

    def release(self) -> None:
        """Drop the captured graphs (its own and a caller's): they refer back to this decoder, so without this they
        and its buffers would wait for Python's cycle collector once the decoder itself is dropped."""
        self.replays.clear()
        self.loops.clear()

    @torch.inference_mode()
    def prefill(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, frames: FrameCache | None = None
    ) -> None:
        """Start a rollout of these (P, Tp) prompts: GroupedDecoder's own prefill, copied into the buffers."""
        eager = GroupedDecoder(self.w, prompt_ids, prompt_mask, self.G, frames)
        for i in range(len(self.w.layers)):
            self.kp[i].copy_(eager.kp[i])
            self.vp[i].copy_(eager.vp[i])
        if eager.prompt_bias is None:
            self.prompt_bias.zero_()
        else:
            self.prompt_bias.copy_(eager.prompt_bias)
        self.pos0.copy_(eager.pos)
        self.logits.copy_(eager.logits)
        self.t = 0

    @torch.inference_mode()
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """(P * G,) tokens -> the (P * G, V) logits of the token after each (the `logits` buffer)."""
        t = self.t
        if t >= self.T:
            raise ValueError(f"step {t + 1} of a decoder built for {self.T}")
        self.tokens.copy_(tokens)
        if self.capture is None:
            self.compute(t)
        else:
            replay = self.replays.get(t)
            if replay is None:
                replay = self.replays[t] = self.capture(lambda: self.compute(t))
            replay()
        self.t = t + 1
        return self.logits

    def compute(self, t: int, out: torch.Tensor | None = None) -> None:
        """Step t: reads `tokens` and the buffers, writes column t of each layer's own keys and values, and `logits`
        (or `out`). GroupedDecoder.step's arithmetic with no row dropped (`_attend` below is its `full` branch)."""
        w, B = self.w, self.P * self.G
        x = _embed(w, self.tokens, self.pos0 + t)  # (B, C)
        for i, layer in enumerate(w.layers):
            q, k, v = _split_heads(_qkv(layer, x), (B, 1), self.nh)  # (B, nh, 1, hd)
            self.kc[i][:, :, t : t + 1].copy_(k)
            self.vc[i][:, :, t : t + 1].copy_(v)
            x = _finish_block(layer, x, self._attend(i, q * self.scale, t))
        (self.logits if out is None else out).copy_(_head(w, x))

    def _attend(self, i: int, q: torch.Tensor, t: int) -> torch.Tensor:
        """(B, nh, 1, hd) scaled queries -> (B, C): softmax over [prompt keys; own keys 0..t]."""
        P, G = self.P, self.G
        B, nh, _, hd = q.shape
        kc, vc = self.kc[i][:, :, : t + 1], self.vc[i][:, :, : t + 1]  # (B, nh, t + 1, hd)
        sp = q[:, :, 0].view(P, G, nh, hd).transpose(1, 2) @ self.kp[i]  # (P, nh, G, Tp)
        sp = (sp + self.prompt_bias).transpose(1, 2).reshape(B, nh, -1)  # (B, nh, Tp)
        s = torch.cat([sp, (q * kc).sum(-1)], dim=-1)  # (B, nh, Tp + t + 1): prompt, then own tokens
        e = torch.exp(s - s.amax(-1, keepdim=True))
        p = e / e.sum(-1, keepdim=True)
        Tp = sp.size(-1)
        pp = p[..., :Tp]  # (B, nh, Tp)
        yp = (pp.reshape(P, G, nh, Tp).transpose(1, 2) @ self.vp[i]).transpose(1, 2).reshape(B, nh, hd)
        yo = (p[..., Tp:].unsqueeze(-1) * vc).sum(-2)  # (B, nh, hd)
        return (yp + yo).reshape(B, nh * hd)
