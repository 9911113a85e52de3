"""comparison.md from the comparison's results (docs/results/comparison.json): the per-method table, a plain-words
reading generated from the numbers, the setup, and the held-out addition table.

`summarize` turns a run's results (results.json: every curve of every seed) into the results file (what the page
shows: mean and std over seeds, the settings it names, the command and the machine); `page` draws the page below its
title from that file alone, `table` and `addition_table` its two tables.
"""

from __future__ import annotations

from pathlib import Path

from tinygrpo.oracles import bandit

from ..results import markdown, measurement
from .settings import METHODS, N_ANSWERS, N_QUESTIONS, TOKEN_SEED_BASE, G, mean_std

TITLE = "# Tabular vs token-level GRPO on the seed demo's 36 questions"
SHOWN_SETTINGS = (
    "seeds",
    "quick",
    "budget",
    "table_steps",
    "token_steps",
    "prompts_per_step",
    "completions_per_token_step",
    "token_lr",
    "token_beta",
    "max_completion_length",
    "n_layer",
    "n_embd",
    "n_head",
    "n_positions",
    "sft_batch",
    "format_sft_steps",
    "imperfect_sft_steps",
    "imperfect_questions",
)


def summarize(full: dict, command: str) -> dict:
    """The results file from a run's results (`run`'s dict): each method's summary over seeds (without the curves),
    the references' accuracy over seeds, the addition section, and the settings the page names."""
    st = full["settings"]
    refs = list(full["references"].values())

    def ms(values: list[float]) -> dict:
        m = mean_std(values)
        return {"mean": m["mean"], "std": m["std"]}

    methods = {}
    for method, (_, _, _, label) in METHODS.items():
        s = full["methods"][method]["summary"]
        methods[method] = {
            "label": label,
            "start_acc": {k: s["start_acc"][k] for k in ("mean", "std")},
            "final_acc": {k: s["final_acc"][k] for k in ("mean", "std")},
            **{
                f"reach_{t}": {k: s[f"reach_{t}"][k] for k in ("mean", "std", "n", "seeds")}
                for t in (90, 100)
            },
            "final_zero_var_frac": {k: s["final_zero_var_frac"][k] for k in ("mean", "std")},
        }
    add = full["addition"]
    return {
        "measurement": measurement(command, threads=full.get("threads", 1)),
        "seconds": full["seconds"],
        "settings": {
            **{k: st[k] for k in SHOWN_SETTINGS},
            "group_size": G,
            "questions": N_QUESTIONS,
            "answers": N_ANSWERS,
            "token_seed_base": TOKEN_SEED_BASE,
            "table_lr": bandit.DEMO_LR,
            "table_clip": bandit.DEMO_CLIP_EPS,
            "table_kl_beta": bandit.DEMO_KL_BETA,
            "table_seeds": dict(bandit.DEMO_SEEDS),
        },
        "methods": methods,
        "references": {
            "format_only_acc": ms([r["format_only"]["acc"] for r in refs]),
            "format_only_well_formed": ms([r["format_only"]["well_formed"] for r in refs]),
            "imperfect_acc": ms([r["imperfect"]["acc"] for r in refs]),
        },
        "addition": {
            **{
                k: add[k]
                for k in (
                    "reference",
                    "test_problems",
                    "test_unseen_by_grpo",
                    "acc_reference",
                    "acc_after_grpo",
                    "grpo_steps",
                    "grpo_completions",
                )
            },
            "grpo_settings": {
                k: add["grpo_settings"][k]
                for k in ("per_device_train_batch_size", "num_generations", "learning_rate", "beta")
            },
        },
    }


def _fmt(ms: dict, digits: int) -> str:
    if ms["mean"] is None:
        return "not reached"
    return f"{ms['mean']:.{digits}f} ± {ms['std']:.{digits}f}"


def _reach_cell(r: dict) -> str:
    if r["n"] == 0:
        return "not reached"
    cell = _fmt(r, 0)
    return cell if r["n"] == r["seeds"] else f"{cell} ({r['n']}/{r['seeds']} seeds)"


def table(results: dict) -> str:
    """The per-method table: greedy accuracy at the start and after the budget, completions to 90 % and 100 %, the
    fraction of zero-variance groups; mean ± std over seeds."""
    header = [
        "method",
        "greedy acc at start",
        f"greedy acc after {results['settings']['budget']:,} completions",
        "completions to 90 %",
        "completions to 100 %",
        "zero-variance groups (cumulative fraction)",
    ]
    rows = [
        [
            s["label"],
            _fmt(s["start_acc"], 3),
            _fmt(s["final_acc"], 3),
            _reach_cell(s["reach_90"]),
            _reach_cell(s["reach_100"]),
            _fmt(s["final_zero_var_frac"], 3),
        ]
        for s in results["methods"].values()
    ]
    return markdown(header, rows)


def addition_table(results: dict) -> str:
    """Held-out 2-digit addition: the SFT reference's greedy accuracy and the accuracy after token-level GRPO."""
    add = results["addition"]
    return markdown(
        ["policy", f"greedy accuracy on the {add['test_problems']} held-out test problems"],
        [
            [f"SFT reference (`{add['reference']}`)", f"{add['acc_reference']:.3f}"],
            [
                f"after token-level GRPO ({add['grpo_steps']} steps, {add['grpo_completions']:,} completions)",
                f"{add['acc_after_grpo']:.3f}",
            ],
        ],
    )


def findings(results: dict) -> str:
    """Plain-words reading of the numbers, generated from them (no claim the data do not carry)."""
    S = results["methods"]
    B = results["settings"]["budget"]
    G_ = results["settings"]["group_size"]

    def acc(m):
        return S[m]["final_acc"]["mean"]

    def reach(m, t):
        r = S[m][f"reach_{t}"]
        return r["mean"] if r["n"] == r["seeds"] else None  # only when every seed got there

    def cmp(g, r, what):
        ag, ar = acc(g), acc(r)
        if abs(ag - ar) < 0.02:
            verdict = f"GRPO and REINFORCE end level ({ag:.3f} vs {ar:.3f})"
        elif ag > ar:
            verdict = f"GRPO ends higher ({ag:.3f} vs {ar:.3f})"
        else:
            verdict = f"GRPO does NOT beat REINFORCE: it ends lower ({ag:.3f} vs {ar:.3f})"
        sg, sr = S[g]["final_acc"]["std"], S[r]["final_acc"]["std"]
        if abs(ag - ar) >= 0.02 and abs(ag - ar) < max(sg, sr):
            verdict += f", a gap smaller than the seed-to-seed std ({sg:.3f}, {sr:.3f})"
        parts = []
        for t in (90, 100):
            rg, rr = reach(g, t), reach(r, t)
            if rg is not None and rr is not None:
                faster = "GRPO" if rg < rr else "REINFORCE" if rr < rg else "neither"
                spread = max(S[g][f"reach_{t}"]["std"], S[r][f"reach_{t}"]["std"])
                note = f"faster: {faster}" + (
                    f", by less than the seed std {spread:.0f}" if abs(rg - rr) < spread else ""
                )
                parts.append(f"{t} % is reached after {rg:.0f} vs {rr:.0f} completions ({note})")
            else:
                ng, nr = S[g][f"reach_{t}"]["n"], S[r][f"reach_{t}"]["n"]
                if ng == nr == 0:
                    parts.append(f"neither reaches {t} % on any seed")
                else:
                    parts.append(
                        f"{t} % is reached on {ng} (GRPO) vs {nr} (REINFORCE) of {S[g][f'reach_{t}']['seeds']} seeds"
                    )
        return f"{what}: {verdict}; " + "; ".join(parts) + "."

    out = [
        cmp("table_grpo", "table_reinforce", "On the table"),
        cmp("gpt_grpo_format", "gpt_reinforce_format", "On the char GPT from the format-only start"),
        cmp("gpt_grpo_imperfect", "gpt_reinforce_imperfect", "On the char GPT from the imperfect SFT start"),
    ]
    tbl, gpt = acc("table_grpo"), acc("gpt_grpo_format")
    rel = "above" if gpt > tbl + 0.02 else "below" if gpt < tbl - 0.02 else "level with"
    out.append(
        f"From equally ignorant starts (zero table vs format-only GPT), token-level GRPO ends {rel} tabular GRPO "
        f"after {B:,} completions ({gpt:.3f} vs {tbl:.3f}); the imperfect SFT start begins at "
        f"{S['gpt_grpo_imperfect']['start_acc']['mean']:.3f} instead of "
        f"{S['gpt_grpo_format']['start_acc']['mean']:.3f} and ends at {acc('gpt_grpo_imperfect'):.3f}."
    )
    zt, zg = (
        S["table_grpo"]["final_zero_var_frac"]["mean"],
        S["gpt_grpo_format"]["final_zero_var_frac"]["mean"],
    )
    # the fractions as the table shows them (three decimals), as percentages
    out.append(
        f"Zero-variance groups (all {G_} answers right or all wrong) are {zt:.1%} of the table GRPO's groups and "
        f"{zg:.1%} of the format-only GPT GRPO's: GRPO gets no policy-gradient signal from them (the table skips "
        f"the update; the GPT keeps only the KL term), while REINFORCE still pushes on the all-right ones."
    )
    return "\n\n".join(out)


def page(results: dict) -> str:
    """comparison.md below its title, from the results file alone."""
    st = results["settings"]
    refs = results["references"]
    add = results["addition"]
    n, g, q, a = st["seeds"], st["group_size"], st["questions"], st["answers"]
    base = st["token_seed_base"]
    lines = [
        f"Generated by `{results['measurement']['command']}` ({results['seconds']:.0f} s). Every number is mean ± "
        f"std (sample std, ddof = 1) over {n} seeds; each seed's curves are in the run's `results.json`.",
        "",
        table(results),
        "",
        f"Greedy accuracy is on the {q} training questions, measured after every step: the table's argmax per row; "
        f"the char GPT's greedy decoding (a completion must be exactly `k<eos>`). "
        f'"Completions to X %" is the first point at which greedy accuracy ≥ X, mean ± std over the seeds that '
        f"got there (the count is given when not all did). Every run samples {st['budget']:,} completions in groups "
        f"of G = {g}: the table {g} per step (one random question, {st['table_steps']} steps); the char GPT "
        f"{st['prompts_per_step']} prompts x {g} = {st['completions_per_token_step']} per step "
        f"({st['token_steps']} steps), so its curve has a point every {st['completions_per_token_step']} "
        f"completions and the table's every {g}.",
        "",
        "## What the numbers say",
        "",
        findings(results),
        "",
        "## Setup",
        "",
        f"- **Table** (`tinygrpo.oracles.bandit.train_demo`, the seed demo's settings): zero-initialised {q} x {a} logits, SGD "
        f"lr {st['table_lr']}; GRPO = group z-score, clip {st['table_clip']}, exact KL {st['table_kl_beta']} to "
        f"the initial table, update skipped on zero-variance groups; REINFORCE = raw 0/1 reward, no baseline. Seed i "
        f"is the demo's seed + i (GRPO {st['table_seeds']['grpo']} + i, REINFORCE {st['table_seeds']['reinforce']} + i).",
        f"- **Char GPT** ({st['n_layer']} layers, width {st['n_embd']}, {st['n_head']} heads, {st['n_positions']} "
        f"positions), `GRPOTrainer`: AdamW lr {st['token_lr']} with the trainer's default cosine decay, max {st['max_completion_length']} completion tokens, "
        f"strict accuracy reward, loss_type dapo, one optimisation pass per batch (ratio = 1, so the clip never "
        f"acts — as in the table, where old = current policy too). GRPO: advantage_mode grpo (group z-score), "
        f"beta = {st['token_beta']} with the exact per-token KL (kl_estimator full) to the starting model — the "
        f"demo's coefficient. REINFORCE: advantage_mode reinforce (raw reward), beta = 0 (the demo's REINFORCE has "
        f"no KL either). Prompts are drawn without replacement, a fresh permutation of the {q} per epoch "
        f"(the table draws one question uniformly at random per step). Seeds {base}..{base + n - 1}.",
        f"- **Format-only reference** (one per seed): SFT on every seed-bank prompt paired with each answer 0..{a - 1} "
        f"once ({q * a} rows, {st['format_sft_steps']} steps of batch {st['sft_batch']}). Greedy "
        f"accuracy {_fmt(refs['format_only_acc'], 3)} (chance 1/{a} = {1 / a:.3f}); greedy output well-formed "
        f"(`k<eos>`, k in 0..{a - 1}) {_fmt(refs['format_only_well_formed'], 3)}. Greedy decoding takes the likeliest "
        f"first token, and '1' starts four of the {a} answers (1, 10, 11, 12), so its greedy answers cluster on those.",
        f"- **Imperfect reference** (one per seed): SFT on the real answers of {st['imperfect_questions']} of the {q} "
        f"questions (a random subset per seed), {st['imperfect_sft_steps']} steps of batch {st['sft_batch']}. "
        f"Greedy accuracy {_fmt(refs['imperfect_acc'], 3)} on the {q}.",
        "",
        "![accuracy vs completions](accuracy_vs_completions.png)",
        "",
        "![zero-variance groups](skipped_fraction.png)",
        "",
        f"`beliefs.png`: P(answer k) for each of the {q} questions at the start, midway and end, for table GRPO and "
        'for the char GPT\'s GRPO from the format-only start (first seed of each). For the GPT, P("k<eos>") is the '
        f"exact product of its token probabilities (all {a} candidates scored with `completion_logits`); the rest of "
        "each row's mass is on malformed strings.",
        "",
        "![beliefs](beliefs.png)",
        "",
        "## 2-digit addition: generalising to unseen questions",
        "",
        addition_table(results),
        "",
        f"GRPO trains on the train split only; none of the {add['test_problems']} test problems is ever sampled in "
        f"training ({add['test_unseen_by_grpo']} of {add['test_problems']} are absent from the train split). "
        f"Trainer defaults (batch {add['grpo_settings']['per_device_train_batch_size']} completions, "
        f"G = {add['grpo_settings']['num_generations']}, lr {add['grpo_settings']['learning_rate']}, beta "
        f"{add['grpo_settings']['beta']}){' except fewer steps (--quick)' if st['quick'] else ''}. "
        f"A table cannot do this at all: it has one row of logits per question it has seen, and no row for an "
        f"unseen question, so its held-out accuracy is undefined (at best a uniform guess).",
    ]
    return "\n".join(lines)


def write_report(results: dict, path: Path, results_path: str | None = None) -> str:
    """comparison.md at `path`: its title and the page; with `results_path` (the results file as the docs name it),
    the page sits between markers naming it, so that `python -m studies.results` draws it again."""
    body = page(results)
    if results_path is not None:
        body = f"<!-- results studies.compare.report:page {results_path} -->\n{body}\n<!-- /results -->"
    text = f"{TITLE}\n\n{body}\n"
    path.write_text(text)
    return text
