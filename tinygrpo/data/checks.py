"""The start-up checks that a problem set, its verifier and the reward functions agree, one set for both entry points
(GRPO's and SFT's), each failure one ConfigError naming the split and the row: every reward function runs on every
training row with the gold answer as the completion (probe), every gold answer scores 1.0 under the verifier
(check_gold), rewards read the tokenizer's end-of-sequence text (check_eos_read), and the held-out split shares no
prompt with the training split (check_apart). A gold completion ends with the tokenizer's end-of-sequence text."""

from __future__ import annotations

from math import inf

import numpy as np

from rewards import EOS, check_binary, compute_rewards, rewards_float32
from tinygrpo.base.options import ConfigError
from tinygrpo.base.progress import chunks, progress


def check_held_out(
    verifier,
    train_dataset,
    eval_dataset,
    splits: tuple[str, str, str | None],
    allow_overlapping_splits: bool = False,
    reward_kwargs: dict | None = None,
) -> None:
    """The start-up checks of a held-out evaluation, one set for both entry points (GRPO's check_inputs, SFT's
    train_reference): the verifier reads every gold answer of the held-out split, and of the training split (whose
    sampled completions GRPO's metrics judge), and scores each 1.0, or its accuracy means nothing; and the two
    splits share no prompt, unless allow_overlapping_splits. `splits`: the dataset's name, its training and
    held-out splits. A gold completion ends with the verifier's EOS text (its tokenizer's)."""
    dataset, train_split, eval_split = splits
    kwargs = {**(reward_kwargs or {}), "eos": verifier.eos}
    for split, ds in ((eval_split, eval_dataset), (train_split, train_dataset)):
        if ds is not None and "answer" in ds.column_names:
            where = f"{dataset}/{split}"
            try:
                probe([verifier.fn], [verifier.name], ds, where, kwargs)
            except (
                ConfigError
            ) as e:  # (the verifier cannot read this data's answers: say how to choose another)
                raise ConfigError(
                    f"{e}; {verifier.name!r} decides held-out accuracy: {CHOOSE_VERIFIER}"
                ) from None
            check_gold(verifier, ds, where)
    if eval_dataset is not None and not allow_overlapping_splits:
        check_apart(train_dataset, eval_dataset, splits)


CHOOSE_VERIFIER = "choose the rule that reads this data's answers with --eval_reward NAME"


def check_gold(verifier, dataset, where: str) -> None:
    """Every gold completion (the verifier's target column, `answer` unless the task's format is another, then the
    verifier's EOS text) of a row with an answer scores exactly 1.0 under the verifier; ConfigError naming the first
    row that does not."""
    table = dataset.to_dict()
    n = len(table["prompt"])
    column = verifier.target if verifier.target in table else "answer"
    for lo, hi in chunks(n):
        rows = {c: v[lo:hi] for c, v in table.items()}
        golds = [
            "" if a is None else str(t) + verifier.eos
            for a, t in zip(rows["answer"], rows[column], strict=True)
        ]
        cols = {c: v for c, v in rows.items() if c != "prompt"}
        ids = [[0] * len(a) for a in golds]
        eos = {"eos": verifier.eos}
        scores = compute_rewards([verifier.fn], [verifier.name], rows["prompt"], golds, ids, cols, eos)[:, 0]
        for i, (a, score) in enumerate(zip(rows["answer"], scores.tolist(), strict=True)):
            if a is not None and score != 1.0:
                got = "None" if score != score else f"{score:g}"
                what = (
                    f"gold answer {str(a)!r}" if column == "answer" else f"gold {column} {rows[column][i]!r}"
                )
                ended = (
                    ""
                    if verifier.eos == EOS
                    else f" (then this tokenizer's end-of-sequence text {verifier.eos!r})"
                )
                raise ConfigError(
                    f"{where} row {lo + i + 1}: the held-out verifier {verifier.name!r} scores the {what}{ended} "
                    f"{got}, not 1.0, so it would count right answers wrong; {CHOOSE_VERIFIER}"
                )


def check_apart(train_dataset, eval_dataset, splits: tuple[str, str, str | None]) -> None:
    """The held-out split shares no prompt with the training split (held-out accuracy on trained prompts measures
    memory); ConfigError with the count and an example, unless allow_overlapping_splits."""
    train = set(train_dataset.select_columns(["prompt"]).to_dict()["prompt"])
    held = eval_dataset.select_columns(["prompt"]).to_dict()["prompt"]
    shared = [p for p in held if p in train]
    if shared:
        raise ConfigError(
            f"the training split {splits[1]!r} and the held-out split {splits[2]!r} of {splits[0]} "
            f"share {len(shared):,} of the {len(held):,} held-out prompts (e.g. {shared[0]!r}): held-out accuracy "
            "would be measured on prompts trained on. Evaluate on a split apart (a task's test, or its "
            "validation with the training split that leaves it out), or pass --allow_overlapping_splits true"
        )


def probe(
    funcs: list,
    names: list[str],
    dataset,
    where: str,
    kwargs: dict,
    weights: list[float] | None = None,
    binary: str | None = None,
) -> float:
    """Call the reward functions on every row with the gold answer, then `kwargs["eos"]`, as the completion;
    ConfigError naming the first row that fails. What they return is judged only where the run could not use it: a
    value that does not fit float32 (alone or weighted and summed), and, where `binary` names what needs 0/1
    rewards, a combined reward other than 0, 1 or None. (Otherwise a reward may well skip gold-shaped completions.)
    A gold completion's ids are one a character of the answer, then EOS (a length penalty counts them: exact for
    tiny_lm's characters). Returns the highest combined reward of a gold answer (-inf: no reward applies to one)."""
    table = dataset.to_dict()
    n = len(table["prompt"])
    weights = weights if weights is not None else [1.0] * len(funcs)

    def rewards(lo: int, hi: int) -> float:
        cols = {c: v[lo:hi] for c, v in table.items() if c != "prompt"}
        answers = cols.get("answer", ["0"] * (hi - lo))
        completions = ["" if a is None else str(a) + kwargs["eos"] for a in answers]
        ids = [[] if a is None else [0] * (len(str(a)) + 1) for a in answers]  # (an id a character, then EOS)
        per_func = compute_rewards(funcs, names, table["prompt"][lo:hi], completions, ids, cols, kwargs)
        total = rewards_float32(per_func, weights, names, completions)[1]
        if binary:
            check_binary(total, per_func, weights, names, completions, binary)
        scored = total[
            np.array([a is not None for a in answers]) & ~np.isnan(total)
        ]  # (rows with a gold answer)
        return float(scored.max()) if scored.size else -inf

    blocks = chunks(n)  # (a bar past a few seconds: 200,000 rows take that long)
    try:
        bar = progress(blocks, len(blocks), f"checking {where} with the rewards", "blocks")
        return max([rewards(lo, hi) for lo, hi in bar], default=-inf)
    except ValueError as whole:
        lo, hi = 0, n  # a row in [lo, hi) fails: find the first one
        while hi - lo > 1:
            mid = (lo + hi) // 2
            try:
                rewards(lo, mid)
                lo = mid
            except ValueError:
                hi = mid
        try:
            rewards(lo, lo + 1)
        except ValueError as e:
            raise ConfigError(f"{where} row {lo + 1}: {e}") from None
        raise ConfigError(f"{where}: {whole}") from None  # (no single row fails: the split as a whole does)


def check_eos_read(
    best: float, funcs: list, names: list[str], weights: list[float], dataset, where: str, kwargs: dict
) -> None:
    """Rewards that give no gold answer, written with this tokenizer's end-of-sequence text, more than 0, but do
    reward gold answers written with tiny_lm's "<eos>", look for a fixed "<eos>": with this tokenizer they would
    score every completion 0 and the run would learn nothing, silently. ConfigError saying so. (Rewards that give
    gold answers 0 either way, a penalty for instance, are not this check's to judge.) `best`: `probe`'s highest
    combined gold reward with this tokenizer's text."""
    if kwargs["eos"] == EOS or "answer" not in dataset.column_names or best > 0 or best == -inf:
        return
    if probe(funcs, names, dataset, where, {**kwargs, "eos": EOS}, weights) <= 0:
        return
    raise ConfigError(
        f"{where}: the rewards ({', '.join(names)}) give gold answers a positive reward only when they end in "
        f"{EOS!r}, and this tokenizer's end-of-sequence text is {kwargs['eos']!r}: every completion would score "
        "0. A reward reads the end of a finished completion from its `eos` keyword (the trainer passes the "
        "tokenizer's), never from a fixed '<eos>'"
    )
