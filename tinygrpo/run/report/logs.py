"""The logs a report reads, and the shape it checks each against (a log it cannot read is one error naming the file and line)."""

from __future__ import annotations

import json
from pathlib import Path

from tinygrpo.run.logs import INT, NUM, NUM_OR_NULL, STR, Check, Shape, by_name, list_of, read_checked
from tinygrpo.run.report.curves import FORMAT_PREFIXES, curve_panels

REPORT_FILE = "report.html"


MAX_GROUP_STEPS = 30  # logged steps shown in the groups section (evenly spaced, the last one included)


MAX_HEATMAP_ROWS = 300  # prompts are binned into at most this many rows


MAX_TOKEN_STEPS = 4  # logged steps in the tokens section: the last one (open) and the ones before it


MAX_TOKEN_GROUPS = 4  # groups with signal drawn per step


# The per-token lists of a completions.jsonl row (tinygrpo/run/logs.py TOKEN_KEYS: runs of older versions lack them).
TOKEN_NUMBERS = ("token_advantage", "token_p_old", "token_p_new", "token_ratio", "token_entropy")


# What the report reads in each log's rows (metrics_io.read_checked): the keys it indexes, and the kind of each value
# it formats or draws. Keys it does not read are not checked: older and newer runs log other things.
_CURVE_KEYS = {k for p in curve_panels([]) for k in (p.x, *(y for y, _ in p.ys)) if k}


_TRIPLES: Check = (lambda v: isinstance(v, list) and len(v) == 3, "a [prompt, gold, completion]")


_TABLE: Check = (  # what imshow draws: non-empty, rectangular
    lambda v: list_of(list_of(NUM))[0](v) and len({len(r) for r in v}) == 1 and bool(v and v[0]),
    "a table of numbers (equal-length lists)",
)


LOGS = {
    "metrics.jsonl": Shape(
        {"step": INT},
        dict.fromkeys(_CURVE_KEYS, NUM)
        | {"eval/accuracy/": NUM_OR_NULL, "eval/format_accuracy/": NUM}
        | dict.fromkeys(FORMAT_PREFIXES, NUM),
    ),
    "completions.jsonl": Shape(
        {"step": INT, "prompt": STR, "completion": STR},
        {
            "reward": NUM_OR_NULL,
            "advantage": NUM,
            "rewards": by_name(NUM_OR_NULL),
            "tokens": list_of(STR),
            "group": INT,
        }
        | dict.fromkeys(TOKEN_NUMBERS, list_of(NUM)),
    ),
    "prompt_stats.jsonl": Shape({"step": INT, "pass_rate": list_of(NUM_OR_NULL)}, same_length="pass_rate"),
    "eval_failures.jsonl": Shape({"step": INT, "total": INT, "failures": list_of(_TRIPLES)}),
    "warnings.jsonl": Shape({"step": INT, "warning": STR}),
    "beliefs.jsonl": Shape(
        {"step": INT, "probs": _TABLE} | dict.fromkeys(("questions", "answers", "gold"), list_of(STR))
    ),
}


def read_log(run: Path, name: str) -> list[dict]:
    """The rows of RUN/name, checked against LOGS[name] (none when the file is missing; a torn last line dropped)."""
    return read_checked(run / name, LOGS[name])


def _read_json(path: Path) -> dict:
    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}
