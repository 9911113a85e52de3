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

from tinygrpo.data.task import NATIVE_KERNELS, Task, register_task_family
from tinygrpo.data.tasks._splits import split_rows

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


def _chain_sum_worked(rows: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """reasoning-gym's chain_sum problems in the built-in chain_sum_worked's layout (tinygrpo/data/tasks/chain_sum.py):
    the terms zero-padded in the prompt, the running totals then the answer as the target; the entry (and so the
    verifier, reasoning-gym's score_answer) unchanged."""
    from tinygrpo.data.tasks import chain_sum

    out = {}
    for split, split_rows_ in rows.items():
        out[split] = []
        for r in split_rows_:
            words = json.loads(r["entry"])["metadata"]["expression"].split()
            terms, ops = [int(w) for w in words[::2]], words[1::2]
            if chain_sum.running_totals(terms, ops)[-1] != int(r["answer"]):
                raise ValueError(
                    f"reasoning_gym:chain_sum row {r['id']}: {r['answer']} is not {words} summed"
                )
            prompt, worked = chain_sum.padded(terms, ops), chain_sum.worked_total(terms, ops)
            out[split].append({**r, "prompt": prompt, "worked": worked, "terms": terms, "ops": "".join(ops)})
    return out


def _chain_sum_worked_task() -> Task:
    """`chain_sum_worked`: reasoning-gym's chain_sum through the built-in worked format. Its GRPO recipe starts from
    the built-in chain_sum_worked's reference (configs/reasoning_gym_chain_sum_worked.yaml); its own recipe, the
    same on reasoning-gym's train split, is there for `python train_sft.py --task reasoning_gym:chain_sum_worked`."""
    from tinygrpo.data.tasks import chain_sum

    def build() -> dict[str, list[dict]]:
        return _chain_sum_worked(build_for("chain_sum"))  # (new rows: the cached ones are not touched)

    dataset = "reasoning_gym_chain_sum_worked"
    reference = chain_sum.WORKED.reference | {"output_dir": f"checkpoints/{dataset}"}
    return Task(
        name="reasoning_gym:chain_sum_worked",
        summary="reasoning-gym's chain_sum, worked as chain_sum_worked (running totals, then the answer)",
        build=build,
        chars=chain_sum.CHARS,
        config=f"configs/{dataset}.yaml",
        correct="reasoning_gym_final_answer",
        dataset=dataset,
        reference=reference,
        kinds=chain_sum.kinds,
        formats=chain_sum.WORKED.formats,
    )


WORKED = {
    "chain_sum_worked": _chain_sum_worked_task
}  # reasoning-gym datasets offered in a built-in task's worked format


def make(name: str) -> Task:
    """The task for reasoning-gym's dataset `name` (or one of WORKED); a ValueError naming the problem (the extra
    missing, an unknown name with the known ones)."""
    rg = _require()
    if name in WORKED:
        return WORKED[name]()
    known = sorted(rg.factory.DATASETS)
    if name not in known:
        raise ValueError(
            f"reasoning-gym has no dataset {name!r} (it has: {', '.join(known)}; worked: {', '.join(WORKED)})"
        )
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
            **NATIVE_KERNELS,
            "output_dir": f"checkpoints/{dataset}",
            "train_size": 0,
            "dataset_test_split": "validation",
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
    from tinygrpo.data.problems import DATA_DIR, MANIFEST

    return (DATA_DIR / dataset / MANIFEST).is_file()


def _read(dataset: str) -> dict[str, list[dict]]:
    """The splits of a finished build (its manifest checked them when they were loaded)."""
    from tinygrpo.data.problems import DATA_DIR

    return {
        path.stem: [
            json.loads(line) for line in path.read_text(encoding="utf-8-sig").splitlines() if line.strip()
        ]
        for path in sorted((DATA_DIR / dataset).glob("*.jsonl"))
    }


register_task_family("reasoning_gym", make)
