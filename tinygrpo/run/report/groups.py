"""The sampled groups of the logged steps, and the same groups token by token (advantage, probability before and after, ratio, entropy)."""

from __future__ import annotations

from tinygrpo.run.report.html import _colour, _diverging, _e
from tinygrpo.run.report.logs import MAX_GROUP_STEPS, MAX_TOKEN_GROUPS, MAX_TOKEN_STEPS, TOKEN_NUMBERS


def section_groups(completions: list[dict]) -> str:
    """'' without completions.jsonl (the run section says it was not recorded)."""
    if not completions:
        return ""
    head = '<section id="groups"><h2>Sampled groups</h2>'
    by_step: dict[int, list[dict]] = {}
    for c in completions:
        by_step.setdefault(c["step"], []).append(c)
    steps = sorted(by_step)
    if len(steps) > MAX_GROUP_STEPS:
        k = len(steps) - 1
        steps = sorted({steps[round(i * k / (MAX_GROUP_STEPS - 1))] for i in range(MAX_GROUP_STEPS)})
    parts = [
        "<p>Completions of each logged step's first round (whole groups, those with signal first), grouped by prompt: "
        "each cell is one completion, "
        "coloured by its reward (red 0, green 1), with its advantage (what pushed the policy up, +, or down, -). "
        f"{len(steps)} of {len(by_step)} logged steps.</p>"
    ]
    for i, step in enumerate(steps):
        rows = []
        for g in _by_prompt(by_step[step]):
            cells = "".join(
                f'<td style="background:{_colour(c.get("reward", _first_reward(c)))}">'
                f"<code>{_e(c['completion'])}</code><br><small>"
                + (f"A = {c['advantage']:+.2f}" if "advantage" in c else "")
                + "</small></td>"
                for c in g
            )
            gold = _e(g[0].get("answer", "?"))
            rows.append(f"<tr><th><code>{_e(g[0]['prompt'])}</code></th><td>{gold}</td>{cells}</tr>")
        is_open = " open" if i == len(steps) - 1 else ""
        parts.append(
            f"<details{is_open}><summary>step {step}</summary><table class=groups><tr><th>prompt</th><th>gold</th>"
            f"<th colspan=99>completions</th></tr>{''.join(rows)}</table></details>"
        )
    return head + "".join(parts) + "</section>"


def _by_prompt(rows: list[dict]) -> list[list[dict]]:
    """One step's logged completions, grouped: consecutive rows of the same group (runs that do not log the group:
    of the same prompt)."""
    groups: list[list[dict]] = []
    for c in rows:
        if groups and (groups[-1][0].get("group"), groups[-1][0]["prompt"]) == (c.get("group"), c["prompt"]):
            groups[-1].append(c)
        else:
            groups.append([c])
    return groups


def _first_reward(c: dict):
    vals = [v for v in (c.get("rewards") or {}).values() if v is not None]
    return sum(vals) if vals else None


def _token_text(t: str) -> str:
    """A token as shown in its cell: escaped, with a newline or tab made visible."""
    return _e(t).replace("\n", "\\n").replace("\t", "\\t")


def _token_title(p_old: float, p_new: float, ratio: float, entropy: float, adv: float) -> str:
    return (
        f"p_old {p_old:.4g}, p_new {p_new:.4g}, ratio {ratio:.4g}, entropy {entropy:.4g}, "
        f"advantage {adv:+.4g}"
    )


def _token_group(g: list[dict], scale: float) -> str:
    """One group: each completion a row of token cells (hover: the numbers), then the numbers as a table."""
    rows, numbers = [], []
    for j, c in enumerate(g, 1):
        reward = c.get("reward", _first_reward(c))
        cells, lines = [], []
        tool = c.get("token_tool") or [0] * len(c["tokens"])
        for t, fed, *v in zip(c["tokens"], tool, *(c[k] for k in TOKEN_NUMBERS), strict=True):
            adv, p_old, p_new, ratio, entropy = v
            title = _token_title(p_old, p_new, ratio, entropy, adv)
            if fed:  # the environment's: the model read it, the loss does not act on it
                said = _e(
                    f"the environment fed this token (a tool reply): context, outside the loss; {title}"
                )
                cells.append(f'<span class="tok tool" title="{said}">{_token_text(t)}</span>')
                continue
            cells.append(
                f'<span class=tok style="background:{_diverging(adv, scale)}" title="{_e(title)}">'
                f"{_token_text(t)}</span>"
            )
            lines.append(
                f"<tr><td>{j}</td><td><code>{_token_text(t)}</code></td><td>{adv:+.4g}</td><td>{p_old:.4g}</td>"
                f"<td>{p_new:.4g}</td><td>{ratio:.4g}</td><td>{entropy:.4g}</td></tr>"
            )
        shown = "none" if reward is None else f"{reward:g}"
        advantage = f"A = {c['advantage']:+.2f}" if "advantage" in c else ""
        rows.append(
            f'<tr><td>{j}</td><td style="background:{_colour(reward)}">reward {shown}</td><td>{advantage}</td>'
            f"<td class=toks>{''.join(cells)}</td></tr>"
        )
        numbers += lines
    gold = f" (gold {_e(g[0]['answer'])})" if "answer" in g[0] else ""
    head = "".join(f"<th>{h}</th>" for h in ("#", "token", "advantage", "p_old", "p_new", "ratio", "entropy"))
    return (
        f"<p>Prompt <code>{_e(g[0]['prompt'])}</code>{gold}</p><table class=tokens>{''.join(rows)}</table>"
        f"<details><summary>the numbers</summary><table><tr>{head}</tr>{''.join(numbers)}</table></details>"
    )


def section_tokens(completions: list[dict]) -> str:
    """'' without per-token probabilities in completions.jsonl (the run section says they were not recorded)."""
    logged = [c for c in completions if "tokens" in c]
    if not logged:
        return ""
    head = '<section id="tokens"><h2>Tokens</h2>'
    by_step: dict[int, list[dict]] = {}
    for c in logged:
        by_step.setdefault(c["step"], []).append(c)
    steps = sorted(by_step)[-MAX_TOKEN_STEPS:]
    parts = [
        "<p>Groups with signal (a mix of advantages) of the last logged steps, each completion drawn token by token. "
        "A token is coloured by the advantage the loss gave it: blue pushed its probability up, red down, white not "
        "at all (full colour at the step's largest |advantage|). Hover a token for its probability under the policy "
        "that sampled it (p_old) and under the policy after the step's update (p_new), their ratio (what the step "
        "did to it) and the updated policy's entropy at that position, at the run's temperature. In plain GRPO "
        "every token of a completion shares its advantage, so what differs between its tokens is the ratio and the "
        "entropy: where the step moved probability. With tools, the tokens an environment fed (a tool's reply) are "
        "drawn grey, in italics, framed by a dashed line: the model read them, the loss leaves them out.</p>"
    ]
    for step in steps:
        rows = by_step[step]
        scale = max((abs(a) for c in rows for a in c.get("token_advantage", ())), default=0.0)
        signal = [g for g in _by_prompt(rows) if len({c.get("advantage") for c in g}) > 1]
        body = (
            "".join(_token_group(g, scale) for g in signal[:MAX_TOKEN_GROUPS])
            if signal
            else "<p>No logged group of this step has signal (each group's advantages are all equal).</p>"
        )
        is_open = " open" if step == steps[-1] else ""
        parts.append(
            f"<details{is_open}><summary>step {step}: {len(signal)} of {len(_by_prompt(rows))} logged groups with "
            f"signal (colour scale: |advantage| {scale:.3g})</summary>{body}</details>"
        )
    return head + "".join(parts) + "</section>"
