"""Any of reasoning-gym's procedural datasets as a task: `--task reasoning_gym:chain_sum` (the optional extra:
`pip install reasoning-gym`).

The problems are drawn with reasoning-gym's own generator (seeded), distinct questions only, and cut into
validation, test and train splits. A character model has no use for the instruction every question repeats, so the
prefix and suffix that all questions share are dropped and the prompt is what is left, then "=" ("State the final
answer to the following arithmetic problem: 4 - 1 - 7 =" -> "4 - 1 - 7 ="). The answer is reasoning-gym's; the
verifier is its own `score_answer` (rewards/reasoning_gym.py), right when it gives 1.0. The alphabet is whatever the
generated text uses. The data are written to data/reasoning_gym_<name>/ when first needed (not committed).
"""

from __future__ import annotations

import json
import os
import sys
from functools import lru_cache

from tinygrpo.task import Task, register_task_family
from tinygrpo.tasks._splits import split_rows

SIZES = {"validation": 500, "test": 500, "train": 10_000}  # (train last: see split_rows)
SEED = 2031
COMPLETION_ROOM = 24  # context beyond the longest prompt: configs/reasoning_gym.yaml samples up to 16 tokens
DRAWN = 20_000  # entries drawn; duplicates dropped (a small generator has fewer distinct questions)


def _require() -> object:
    try:
        import reasoning_gym
    except ImportError:
        from rewards.reasoning_gym import INSTALL

        raise ValueError(f"the reasoning_gym tasks need the reasoning-gym package: {INSTALL}") from None
    return reasoning_gym


def _common_affixes(texts: list[str]) -> tuple[int, int]:
    """(length of the prefix, of the suffix) every text shares, cut back to a space so no word is split."""
    pre = os.path.commonprefix(texts)
    suf = os.path.commonprefix([t[::-1] for t in texts])[::-1]
    shortest = min(map(len, texts))
    if len(pre) + len(suf) > shortest:
        suf = suf[len(pre) + len(suf) - shortest :]
    if " " in pre:
        pre = pre[: pre.rindex(" ") + 1]
    elif pre:
        pre = ""
    return len(pre), len(suf)


@lru_cache(maxsize=8)
def build_for(name: str) -> dict[str, list[dict]]:
    rg = _require()
    from tqdm.auto import tqdm

    # (minutes for some datasets: a line first, and a bar once it takes more than a few seconds)
    print(
        f"reasoning_gym:{name}: drawing {DRAWN:,} problems with reasoning-gym (seed {SEED})", file=sys.stderr
    )
    drawn = rg.create_dataset(name, size=DRAWN, seed=SEED)
    entries = list(tqdm(drawn, total=DRAWN, desc=f"reasoning_gym:{name}", delay=3, file=sys.stderr))
    seen: dict[str, dict] = {}
    for e in entries:
        seen.setdefault(e["question"], e)
    entries = list(seen.values())
    pre, suf = _common_affixes([e["question"] for e in entries])
    rows = []
    for i, e in enumerate(entries):
        core = e["question"][pre : len(e["question"]) - suf].strip()
        prompt = core if core.endswith("=") else core + "="
        item = {"question": e["question"], "answer": e["answer"], "metadata": e["metadata"]}
        rows.append(
            {"prompt": prompt, "answer": str(e["answer"]), "entry": json.dumps(item, default=str), "id": i}
        )
    n_train = min(SIZES["train"], len(rows) - SIZES["validation"] - SIZES["test"])
    if n_train < 1000:
        raise ValueError(f"reasoning_gym:{name}: only {len(rows)} distinct questions, too few for the splits")
    return split_rows(rows, {**SIZES, "train": n_train})


def make(name: str) -> Task:
    """The task for reasoning-gym's dataset `name`; a ValueError naming the problem (the extra missing, an unknown
    name with the known ones)."""
    rg = _require()
    known = sorted(rg.factory.DATASETS)
    if name not in known:
        raise ValueError(f"reasoning-gym has no dataset {name!r} (it has: {', '.join(known)})")
    dataset = f"reasoning_gym_{name}"

    def build() -> dict[str, list[dict]]:
        return {split: [dict(r) for r in rows] for split, rows in build_for(name).items()}

    splits = build() if not _data_exists(dataset) else None
    rows = splits or _read(dataset)
    text = "".join(r["prompt"] + r["answer"] for split in rows.values() for r in split)
    longest = max(len(r["prompt"]) for split in rows.values() for r in split)
    return Task(
        name=f"reasoning_gym:{name}",
        summary=f"reasoning-gym's {name}",
        build=build,
        chars="".join(sorted(set(text))),
        config="configs/reasoning_gym.yaml",
        correct="reasoning_gym",
        dataset=dataset,
        reference={
            "output_dir": f"checkpoints/{dataset}",
            "train_size": 0,
            "eval_split": "validation",
            "n_layer": 3,
            "n_embd": 96,
            "n_head": 4,
            "n_positions": longest + COMPLETION_ROOM,
            "max_steps": 1000,
            "learning_rate": 3e-3,
            "torch_num_threads": 1,  # (the same weights on any machine)
        },
    )


def _data_exists(dataset: str) -> bool:
    """A finished build is there (its manifest is written last)."""
    from tinygrpo.problems import DATA_DIR, MANIFEST

    return (DATA_DIR / dataset / MANIFEST).is_file()


def _read(dataset: str) -> dict[str, list[dict]]:
    from tinygrpo.metrics_io import read_jsonl
    from tinygrpo.problems import DATA_DIR

    return {path.stem: read_jsonl(path) for path in sorted((DATA_DIR / dataset).glob("*.jsonl"))}


register_task_family("reasoning_gym", make)
