"""Call reward functions with TRL's convention, validate what they return, combine and summarise.

Calling convention (TRL ``GRPOTrainer``)::

    fn(prompts=..., completions=..., completion_ids=..., **columns, **extra_kwargs) -> list[float | None]

Everything is passed by keyword. A function without ``**kwargs`` only receives the
keywords its signature names, so ``def f(completions, answer)`` works unchanged.
``async def`` functions (or any function returning an awaitable) are awaited; all of
them in one batch run concurrently in a single event loop.

Accepted result values: ``None`` (not applicable -> NaN), Python/NumPy ints and floats,
``bool`` (-> 0.0 / 1.0, so ``pred == gold`` works as a verifier), ``Fraction``/``Decimal``,
0-d arrays/tensors. Strings, NaN and infinities are errors.
"""

from __future__ import annotations

import asyncio
import decimal
import inspect
import math
import numbers
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

RewardFunc = Callable[..., Any]

STANDARD_ARGS = ("prompts", "completions", "completion_ids")
# TRL does not forward these dataset columns (they duplicate the standard arguments).
DROPPED_COLUMNS = frozenset({"prompt", "completion", "completion_ids"})


class RewardError(ValueError):
    """A reward function failed, could not be called, or returned something unusable."""


def _show(completion: Any, limit: int = 60) -> str:
    """Short repr of a completion for one-line error messages."""
    if isinstance(completion, str) and len(completion) > limit:
        return repr(completion[:limit]) + "..."
    return repr(completion)


_SIGNATURES: dict[int, tuple[Any, inspect.Signature | None]] = {}


def _signature(fn: RewardFunc) -> inspect.Signature | None:
    """``inspect.signature(fn)`` (None if it has none), remembered per function object: it costs tens of
    microseconds and a trainer asks for it every step. The entry holds ``fn``, so its id cannot be reused."""
    hit = _SIGNATURES.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[1]
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    if len(_SIGNATURES) >= 256:
        _SIGNATURES.clear()
    _SIGNATURES[id(fn)] = (fn, sig)
    return sig


def _bind(fn: RewardFunc, name: str, available: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Pick the arguments ``fn`` accepts out of ``available`` (all of them if it takes ``**kwargs``)."""
    sig = _signature(fn)
    if sig is None:
        # No introspectable signature (some C callables): pass everything, as TRL does.
        return [], dict(available)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    var_keyword = False
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_keyword = True
        elif p.kind is p.VAR_POSITIONAL:
            continue
        elif p.name in available:
            if p.kind is p.POSITIONAL_ONLY:
                args.append(available[p.name])
            else:
                kwargs[p.name] = available[p.name]
        elif p.default is p.empty:
            extras = sorted(k for k in available if k not in STANDARD_ARGS)
            raise RewardError(
                f"reward {name!r} needs argument {p.name!r}, which is neither a standard argument "
                f"({', '.join(STANDARD_ARGS)}) nor a dataset column or trainer keyword "
                f"(available: {', '.join(extras) or 'none'})"
            )
        elif p.kind is p.POSITIONAL_ONLY:
            # Keep later positional-only arguments in their slots.
            args.append(p.default)
    if var_keyword:
        bound_positionally = {p.name for p in sig.parameters.values() if p.kind is p.POSITIONAL_ONLY}
        for key, value in available.items():
            if key not in kwargs and key not in bound_positionally:
                kwargs[key] = value
    return args, kwargs


class _Raised:
    """Marks an exception raised by a reward (as opposed to one it returned)."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


async def _gather(awaitables: list[Awaitable[Any]]) -> list[Any]:
    return await asyncio.gather(*awaitables, return_exceptions=True)


def _run_awaitables(awaitables: list[Awaitable[Any]]) -> list[Any]:
    """Await all of them concurrently; results or exceptions, in order."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_gather(awaitables))
    # Already inside an event loop (notebook, async caller): asyncio.run refuses there,
    # so run a private loop in a worker thread.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _gather(awaitables)).result()


class _Changed:
    """Marks a reward that changed a list it was given (its own copy: the others and the trainer keep theirs)."""

    def __init__(self, key: str, before: int, after: int) -> None:
        self.key, self.before, self.after = key, before, after


def _changed(given: Mapping[str, list], available: Mapping[str, Any]) -> _Changed | None:
    for key, copy in given.items():
        if copy != available[key]:
            return _Changed(key, len(available[key]), len(copy))
    return None


def _call_all(funcs: Sequence[RewardFunc], names: Sequence[str], available: Mapping[str, Any]) -> list[Any]:
    """Call every function; sync ones in order, then all awaitables together. Each gets its own copy of every list
    argument, checked after the call: a reward that changes one (completions.clear()) is told so, and the next
    reward and the trainer still see the batch."""
    results: list[Any] = [None] * len(funcs)
    pending: dict[int, Awaitable[Any]] = {}
    given: dict[int, dict[str, list]] = {}
    try:
        for i, (fn, name) in enumerate(zip(funcs, names, strict=True)):
            given[i] = {k: list(v) for k, v in available.items() if isinstance(v, list)}
            args, kwargs = _bind(fn, name, {**available, **given[i]})
            try:
                out = fn(*args, **kwargs)
            except Exception as exc:
                results[i] = _Raised(exc)
                continue
            if inspect.isawaitable(out):
                pending[i] = out
            else:
                results[i] = _changed(given[i], available) or out
    except BaseException:
        for aw in pending.values():  # avoid "coroutine was never awaited" warnings
            if inspect.iscoroutine(aw):
                aw.close()
        raise
    if pending:
        for i, out in zip(pending, _run_awaitables(list(pending.values())), strict=True):
            results[i] = (
                _Raised(out) if isinstance(out, BaseException) else _changed(given[i], available) or out
            )
    return results


def _as_float(value: Any) -> float | None:
    """The value as a float, or None if it is not a number (strings are not numbers)."""
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    if isinstance(value, (numbers.Real, decimal.Decimal)):
        try:
            return float(value)
        except OverflowError:  # an int too large for a double
            return math.inf if value > 0 else -math.inf
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # 0-d numpy array / torch tensor
        return _as_float(value.item())
    return None


def _to_row(out: Any, name: str, completions: Sequence[Any]) -> np.ndarray:
    """Validate one function's result and turn it into a float64 row (NaN for None)."""
    n = len(completions)
    is_array = hasattr(out, "tolist") and hasattr(out, "ndim")
    if isinstance(out, (str, bytes)) or not (isinstance(out, Sequence) or is_array):
        raise RewardError(
            f"reward {name!r} returned {type(out).__name__}, expected a list of {n} floats or None"
        )
    if is_array:
        if out.ndim != 1:
            raise RewardError(
                f"reward {name!r} returned an array of shape {tuple(out.shape)}, expected ({n},)"
            )
        out = out.tolist()
    if len(out) != n:
        raise RewardError(f"reward {name!r} returned {len(out)} values for {n} samples")
    if all(type(v) is float or type(v) is int for v in out):  # the usual case: plain numbers, checked at once
        try:
            row = np.array(out, dtype=np.float64)
        except OverflowError:  # an int too large for a double: the loop below reports it
            row = None
        if row is not None and np.isfinite(row).all():
            return row
    row = np.empty(n, dtype=np.float64)
    for j, value in enumerate(out):
        if value is None:
            row[j] = math.nan
            continue
        x = _as_float(value)
        if x is not None and math.isfinite(x):
            row[j] = x
            continue
        where = f"for sample {j} (completion {_show(completions[j])})"  # built only for the error message
        if x is None:
            raise RewardError(
                f"reward {name!r} returned non-number {value!r} ({type(value).__name__}) {where}"
            )
        if math.isnan(x):
            raise RewardError(f"reward {name!r} returned NaN {where}; return None for 'not applicable'")
        raise RewardError(f"reward {name!r} returned {'-' if x < 0 else ''}infinity {where}")
    return row


def compute_rewards(
    funcs: Sequence[RewardFunc],
    names: Sequence[str],
    prompts: Sequence[str],
    completions: Sequence[str],
    completion_ids: Sequence[Sequence[int]],
    columns: Mapping[str, Sequence[Any]] | None = None,
    extra_kwargs: Mapping[str, Any] | None = None,
) -> np.ndarray:
    """Run every reward on the batch; float64 array (N, F), NaN where a function returned None.

    ``columns`` are the dataset's other columns (one list per column, N entries each);
    ``prompt``/``completion``/``completion_ids`` columns are dropped like TRL does.
    ``extra_kwargs`` are trainer keywords such as ``max_completion_length`` and ``eos``.
    Any failure raises :class:`RewardError` naming the function (and sample, if any).
    """
    if len(funcs) != len(names):
        raise ValueError(f"got {len(funcs)} reward functions but {len(names)} names")
    n = len(completions)
    if len(prompts) != n or len(completion_ids) != n:
        raise ValueError(
            f"batch mismatch: {len(prompts)} prompts, {n} completions, {len(completion_ids)} completion_ids"
        )
    available: dict[str, Any] = {
        "prompts": prompts,
        "completions": completions,
        "completion_ids": completion_ids,
    }
    for key, values in (columns or {}).items():
        if key in DROPPED_COLUMNS:
            continue
        if key in available:
            raise ValueError(f"dataset column {key!r} clashes with a standard reward argument")
        if len(values) != n:
            raise ValueError(f"dataset column {key!r} has {len(values)} entries for {n} samples")
        available[key] = values
    for key, value in (extra_kwargs or {}).items():
        if key in available:
            raise ValueError(f"trainer keyword {key!r} clashes with a reward argument or dataset column")
        available[key] = value

    results = _call_all(funcs, names, available)
    per_func = np.empty((n, len(funcs)), dtype=np.float64)
    for i, (name, out) in enumerate(zip(names, results, strict=True)):
        if isinstance(out, _Raised):
            exc = out.exc
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise RewardError(f"reward {name!r} raised {type(exc).__name__}: {first}") from exc
        if isinstance(out, _Changed):
            raise RewardError(
                f"reward {name!r} changed the list {out.key!r} it was given ({out.before} items before the call, "
                f"{out.after} after): a reward must not change its arguments (copy a list before changing it)"
            )
        per_func[:, i] = _to_row(out, name, completions)
    return per_func


def _to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor, possibly on an accelerator
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def combine_rewards(per_func: Any, weights: Sequence[float]) -> Any:
    """Weighted sum over functions ignoring NaN; (N, F) -> (N,).

    A sample for which every function returned None gets NaN (the advantage code maps
    it to advantage 0). A torch tensor in gives a torch tensor out (same device/dtype),
    anything else gives a float64 numpy array.
    """
    arr = _to_numpy(per_func)
    if arr.ndim != 2:
        raise ValueError(f"per_func must be 2-D (samples, functions), got shape {arr.shape}")
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (arr.shape[1],):
        raise ValueError(f"got {w.size} weights for {arr.shape[1]} reward functions")
    if not np.all(np.isfinite(w)):
        raise ValueError(f"reward weights must be finite, got {w.tolist()}")
    missing = np.isnan(arr)
    total = np.where(missing, 0.0, arr) @ w
    total[missing.all(axis=1)] = math.nan
    if hasattr(per_func, "detach"):
        import torch  # only when the caller already uses torch

        return torch.as_tensor(total, dtype=per_func.dtype, device=per_func.device)
    return total


FLOAT32_MAX = float(np.finfo(np.float32).max)


def _sample(j: int, completions: Sequence[Any]) -> str:
    return f"for sample {j} (completion {_show(completions[j])})"


def _combined(row: np.ndarray, weights: Sequence[float], names: Sequence[str]) -> str:
    """What one sample's combined reward is made of, for a message: "reward 'f'", or with weights "the weighted
    reward 2 x 'f'" / "the weighted sum 1 x 'f' + 3 x 'g'" (the functions that returned None left out)."""
    applied = [(w, n) for w, n, x in zip(weights, names, row, strict=True) if not math.isnan(x)]
    if len(applied) == 1 and applied[0][0] == 1:
        return f"reward {applied[0][1]!r}"
    terms = " + ".join(f"{w:g} x {n!r}" for w, n in applied)
    return f"the weighted {'reward' if len(applied) == 1 else 'sum'} {terms}"


def rewards_float32(
    per_func: np.ndarray, weights: Sequence[float], names: Sequence[str], completions: Sequence[Any]
) -> tuple[np.ndarray, np.ndarray]:
    """compute_rewards' (N, F) float64 rewards as a trainer keeps them: (N, F) float32 and their weighted sum (N,)
    (combine_rewards) in float32. A value that does not fit float32 would become infinite there, and the loss NaN:
    a RewardError naming the function, the sample and the value instead."""
    with np.errstate(over="ignore"):  # (the overflow is reported below, not warned about)
        per32 = per_func.astype(np.float32)
        total = combine_rewards(per32, weights).astype(np.float32)
    fits = f"which does not fit float32 (at most {FLOAT32_MAX:.3g} in size)"
    over = np.isinf(per32)  # (per_func is finite: compute_rewards refuses infinities)
    if over.any():
        j, i = (int(x) for x in np.argwhere(over)[0])
        raise RewardError(
            f"reward {names[i]!r} returned {per_func[j, i]:g} {_sample(j, completions)}, {fits}"
        )
    if np.isinf(total).any():
        j = int(np.flatnonzero(np.isinf(total))[0])
        exact = float(combine_rewards(per_func[j : j + 1], weights)[0])
        raise RewardError(
            f"{_combined(per_func[j], weights, names)} is {exact:g} {_sample(j, completions)}, {fits}"
        )
    return per32, total


def check_binary(
    total: np.ndarray,
    per_func: np.ndarray,
    weights: Sequence[float],
    names: Sequence[str],
    completions: Sequence[Any],
    who: str,
) -> None:
    """RewardError unless every combined reward is 0 or 1 (NaN, every function None, is allowed); `who` names what
    needs them so ("advantage_mode pass_at_k")."""
    bad = ~np.isnan(total) & (total != 0) & (total != 1)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise RewardError(
            f"{who} needs rewards of 0 or 1 (or None), but {_combined(per_func[j], weights, names)} gave "
            f"{float(total[j]):g} {_sample(j, completions)}"
        )


def reward_metrics(per_func: Any, names: Sequence[str]) -> dict[str, float]:
    """``rewards/<name>/{mean,std,frac_none}`` per function, ignoring None (NaN) entries.

    ``std`` is the sample standard deviation (ddof=1, as TRL's ``nanstd``); with fewer than
    two values, or all None, the statistic is 0.0 so the output never contains NaN.
    """
    arr = _to_numpy(per_func)
    if arr.ndim != 2 or arr.shape[1] != len(names):
        raise ValueError(f"per_func of shape {arr.shape} does not match {len(names)} names")
    if len(set(names)) != len(names):
        raise ValueError(f"reward names must be unique, got {list(names)}")
    metrics: dict[str, float] = {}
    for i, name in enumerate(names):
        col = arr[:, i]
        values = col[~np.isnan(col)]
        metrics[f"rewards/{name}/mean"] = float(values.mean()) if values.size else 0.0
        metrics[f"rewards/{name}/std"] = float(values.std(ddof=1)) if values.size > 1 else 0.0
        metrics[f"rewards/{name}/frac_none"] = float(1.0 - values.size / col.size) if col.size else 0.0
    return metrics
