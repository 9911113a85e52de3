"""The 'what it shows' bullets of estimators.md: every number in them measured, each sentence chosen by them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .metrics import COINCIDE_RTOL
from .variants import PASS_K

ROUNDING = 1e-8  # a squared relative bias this small is rounding (float32 gradients), not a measurement


def _fmt(x: float | None, digits: int = 3, kind: str = "f") -> str:
    """A number for the tables; "-" for an undefined one (null in the JSON)."""
    return "-" if x is None or not math.isfinite(x) else f"{x:.{digits}{kind}}"


def _or(x: float | None, default: float) -> float:
    return default if x is None else x


def _ratio(x: float | None, se: float | None) -> float:
    """x / se, NaN when either is undefined or the SE is 0."""
    return x / se if x is not None and se else math.nan


def _z(a: dict, b: dict, key: str) -> float:
    """(a - b) / sqrt(se_a^2 + se_b^2): the samples being shared is ignored (the z is then conservative when the
    two estimates move together, as variants on the same batches do)."""
    if None in (a[key], b[key], a[f"{key}_se"], b[f"{key}_se"]):
        return math.nan
    return _ratio(a[key] - b[key], math.hypot(a[f"{key}_se"], b[f"{key}_se"]))


def _series(cells: dict, v: str, key: str, Gs: list[str], digits: int = 2) -> str:
    return ", ".join(_fmt(cells[v][G][key], digits) for G in Gs if G in cells[v])


@dataclass
class _Policy:
    """One policy's results as the 'what it shows' bullets read them."""

    pol: dict  # the JSON's policies[name]
    T: int  # max completion length
    Gs: list[str]  # every G of the run, as the JSON's keys

    @property
    def cells(self) -> dict[str, dict[str, dict]]:
        return self.pol["cells"]

    @property
    def acc(self) -> np.ndarray:
        return np.array(self.pol["accuracy"])

    def has(self, *variants: str) -> bool:
        return all(v in self.cells for v in variants)

    def series(self, v: str, key: str, digits: int = 2, Gs: list[str] | None = None) -> str:
        return _series(self.cells, v, key, self.Gs if Gs is None else Gs, digits)


def _identical(p: _Policy) -> str | None:
    if not p.pol["coincide"]:
        return None
    groups = "; ".join(" = ".join(g) for g in p.pol["coincide"])
    return (
        f"Identical estimates: {groups} give the same g on every batch (to {COINCIDE_RTOL:g} of |g|). On the "
        "on-policy batch the ratio is exactly 1, and these surrogates differ only where it is not."
    )


def _controls(p: _Policy) -> str | None:
    exact = {
        "reinforce": lambda G: 1 / p.T,
        "rloo": lambda G: 1 / p.T,
        "dr_grpo": lambda G: (1 - 1 / G) / p.T,
    }
    controls = [v for v in exact if v in p.cells]
    if not controls:
        return None
    cells = [(f"{v} G={G}", c, exact[v](int(G))) for v in controls for G, c in p.cells[v].items()]
    zs = {k: _ratio(c["rel_bias2"], c["rel_bias2_se"]) for k, c, _ in cells}
    dev = {k: _ratio(c["alpha"] - a, c["alpha_se"]) for k, c, a in cells if c["alpha"] is not None}

    def count(z: dict[str, float]) -> str:
        far = [f"{k} ({x:.1f} SE)" for k, x in z.items() if not abs(x) <= 3]
        tail = f"not in {', '.join(far)}" if far else f"largest |z| {np.nanmax(np.abs(list(z.values()))):.1f}"
        return f"in {len(z) - len(far)} of {len(z)} cells ({tail})"

    line = (
        f"Controls: {', '.join(controls)} are unbiased in direction by construction. Their squared relative bias is "
        f"within 3 SE of 0 {count(zs)}; their scale alpha is within 3 SE of its exact value (1/T = {1 / p.T:g} for "
        f"reinforce and rloo, (1 - 1/G)/T for dr_grpo) {count(dev)}."
    )
    if all(abs(x) <= 3 for x in [*zs.values(), *dev.values()]):
        return line + " The sampled estimates and the exact gradient agree where theory says they must."
    return line + (
        " (For an unbiased estimator the squared bias is a degenerate U-statistic: a |z| near 3 in one such cell "
        "is weak evidence.)"
    )


def _dr_grpo_claim(p: _Policy) -> str | None:
    if not p.has("grpo", "dr_grpo"):
        return None
    zs = [_z(p.cells["grpo"][G], p.cells["dr_grpo"][G], "rel_bias2") for G in p.Gs]
    sig = [G for G, z in zip(p.Gs, zs, strict=True) if z > 3]
    verdict = (
        f"grpo's direction is measurably more biased than dr_grpo's at G = {', '.join(sig)}"
        if sig
        else "at no G is grpo's direction measurably (3 SE) more biased than dr_grpo's"
    )
    line = (
        f"Dr. GRPO's claim: relative bias |E g - alpha g*| / |alpha g*| of grpo {p.series('grpo', 'rel_bias')} "
        f"against dr_grpo's {p.series('dr_grpo', 'rel_bias')} at G = {', '.join(p.Gs)} (cos(mean) "
        f"{p.series('grpo', 'cos_mean', 3)} against {p.series('dr_grpo', 'cos_mean', 3)}); the squared biases "
        f"differ by {', '.join(f'{z:.1f}' for z in zs)} SE: {verdict}."
    )
    if p.has("dapo"):
        line += (
            " dapo, the same z-score advantages without grpo's per-sequence length normalisation, has "
            f"{p.series('dapo', 'rel_bias')}."
        )
    return line


def _where(p: _Policy) -> str | None:
    """Out of the prompts' span (within prompts) or in it (a reweighting of prompts)."""
    hidden = {v for g in p.pol["coincide"] for v in g[1:]}  # (a variant that coincides with one before it)
    # A cell whose estimates lie in the span up to rounding (reinforce's) has a z that means nothing.
    spans = [
        (v, G, c["rel_bias2_out"], c["rel_bias2_out_se"])
        for v, by_G in p.cells.items()
        for G, c in by_G.items()
        if v not in hidden and c.get("rel_bias2_out") is not None and abs(c["rel_bias2_out"]) > ROUNDING
    ]
    if not spans:
        return None
    exact_in = [
        v
        for v, by_G in p.cells.items()
        if all(abs(_or(c.get("rel_bias2_out"), 1)) <= ROUNDING for c in by_G.values())
    ]
    v, G, top, se = max(spans, key=lambda x: abs(_ratio(x[2], x[3])) if x[3] else -math.inf)
    z = abs(_ratio(top, se))
    Gmax = p.Gs[-1]
    inside = [
        f"{w}'s {_fmt(p.cells[w][Gmax]['rel_bias2_in'], 3, 'g')} ± {_fmt(p.cells[w][Gmax]['rel_bias2_in_se'], 2, 'g')}"
        for w in ("grpo", "dapo")
        if w in p.cells and Gmax in p.cells[w]
    ]
    return (
        f"Where the bias lies: outside the span of the {len(p.acc)} prompts' exact gradients the squared relative "
        f"bias is within {z:.1f} SE of 0 in every cell (the largest: {v}, G={G}, {_fmt(top, 2, 'g')} ± "
        f"{_fmt(se, 2, 'g')}, a relative bias of {math.sqrt(max(top, 0.0)):.3f})"
        + (f"; inside it, at G={Gmax}, " + " and ".join(inside) if inside else "")
        + ". "
        + (
            "What bias there is reweights the prompts; a bias within a prompt (it would leave the span, e.g. a pull "
            "towards short or long completions) is not measurable here."
            if z < 3
            else "Part of the bias lies within prompts (it leaves the span: e.g. a pull towards short or long "
            "completions)."
        )
        + (f" ({', '.join(exact_in)}: in the span up to rounding.)" if exact_in else "")
    )


def _which_prompts(p: _Policy) -> str | None:
    Gmax, acc = p.Gs[-1], p.acc
    w = {
        v: np.array(p.cells[v][Gmax]["prompt_weights"], dtype=float)
        for v in ("dapo", "grpo")
        if v in p.cells and p.cells[v].get(Gmax, {}).get("prompt_weights")
    }
    if not w or not np.all((acc > 0) & (acc < 1)):
        return None
    inv_std = 1 / np.sqrt(acc * (1 - acc))
    parts = [
        f"{v}'s from {x.min():.2f} to {x.max():.2f}, correlation {np.corrcoef(x, inv_std)[0, 1]:.2f}"
        for v, x in w.items()
    ]
    line = (
        f"Which prompts: at G={Gmax}, the weights E g puts on the prompts' gradients, relative to J's (all 1 for an "
        f"unbiased direction), run {'; '.join(parts)} with 1/sqrt(acc (1 - acc)), the std of the prompt's reward "
        "(the table below)."
    )
    n_tok = np.array([len(a) + 1 for a in p.pol["answers"]])  # the right answer's tokens, EOS included
    if "grpo" in w and "dapo" in w and len(set(n_tok)) > 1:
        ratio = w["grpo"] / w["dapo"]
        by_len = ", ".join(
            f"{ratio[n_tok == n].mean():.2f} where the right answer is {n} tokens ({int((n_tok == n).sum())})"
            for n in sorted(set(n_tok))
        )
        line += (
            f" grpo's weight over dapo's (what grpo's division by the sequence's length adds): {by_len}: here the "
            "length normalisation, too, acts as a reweighting of prompts."
        )
    return line


def _pass_at_k(p: _Policy) -> str | None:
    c = p.cells.get("pass_at_k", {})
    dead = [G for G in p.Gs if G in c and c[G]["zero_frac"] == 1]
    own = [G for G in p.Gs if G in c and "own_target" in c[G] and G not in dead]
    if not own:
        return None
    line = (
        f"pass_at_k: cos(mean) with g* {p.series('pass_at_k', 'cos_mean', 3, own)} at G = {', '.join(own)}, but "
        f"with the exact gradient of the pass@{PASS_K} objective "
        + ", ".join(
            f"{_fmt(c[G]['own_target']['cos_mean'], 3)} ± {_fmt(c[G]['own_target']['cos_mean_se'], 3)}"
            for G in own
        )
        + ": it estimates the objective it is built for."
    )
    if dead:
        line += f" At G = {', '.join(dead)} every batch gives g = 0 (a group's pass@k estimate is 0 or 1: no signal)."
    return line


def _one_step(p: _Policy) -> str | None:
    if not p.has("dr_grpo"):
        return None
    c = p.cells["dr_grpo"]
    best = {
        G: max((v for v in p.cells if G in p.cells[v]), key=lambda v: p.cells[v][G]["mean_cos"]) for G in p.Gs
    }
    return (
        f"One step: dr_grpo's mean cos(g_k, g*) is {p.series('dr_grpo', 'mean_cos')} at G = {', '.join(p.Gs)} "
        f"(relative variance {', '.join(_fmt(c[G]['rel_var'], 3, 'g') for G in p.Gs)}; batches with no step "
        f"{p.series('dr_grpo', 'zero_frac')}). The highest mean cos at each G: "
        + ", ".join(f"{best[G]} ({_fmt(p.cells[best[G]][G]['mean_cos'])})" for G in p.Gs)
        + "."
    )


def _no_baseline(p: _Policy) -> str | None:
    if not p.has("reinforce", "dr_grpo"):
        return None
    r, d = p.cells["reinforce"], p.cells["dr_grpo"]
    lower = [G for G in p.Gs if _or(r[G]["rel_var"], math.inf) < _or(d[G]["rel_var"], -math.inf)]
    return (
        f"No baseline: reinforce's relative variance is below dr_grpo's at G = {', '.join(lower) or 'none'} "
        f"({p.series('reinforce', 'rel_var')} against {p.series('dr_grpo', 'rel_var')}), with batches with no step "
        f"{p.series('reinforce', 'zero_frac')} against {p.series('dr_grpo', 'zero_frac')} (its advantage is the "
        "reward: any right answer gives a step)."
    )


def _scale(p: _Policy) -> str | None:
    if not p.has("grpo", "dr_grpo"):
        return None
    ratio = [_ratio(p.cells["grpo"][G]["alpha"], p.cells["dr_grpo"][G]["alpha"]) for G in p.Gs]
    return (
        f"Scale: grpo's alpha is {', '.join(f'{r:.1f}' for r in ratio)} times dr_grpo's at G = {', '.join(p.Gs)} "
        "(the division by the group std and by the sequence's own length instead of T)."
    )


BULLETS = (
    _identical,
    _controls,
    _dr_grpo_claim,
    _where,
    _which_prompts,
    _pass_at_k,
    _one_step,
    _no_baseline,
    _scale,
)


def findings(res: dict) -> dict[str, list[str]]:
    """The 'what it shows' bullets of each policy: every number in them measured, each sentence chosen by them."""
    T, Gs = res["setup"]["max_completion_length"], [str(G) for G in res["setup"]["G"]]
    out = {}
    for policy, pol in res["policies"].items():
        p = _Policy(pol, T, Gs)
        out[policy] = [line for bullet in BULLETS if (line := bullet(p)) is not None]
    return out
