"""The two forms an arithmetic completion takes, shared by the tasks that offer a worked answer beside the direct
one (multiplication, long addition): the answer alone, or work ending in '=' and the answer."""

from __future__ import annotations

from tiny_lm.tokenization_tiny_lm import EOS_TOKEN
from tinygrpo.data.task import Formats


def completion_format(completion: str) -> str:
    """ "direct" for an integer alone (digits, a minus before them), "scratchpad" when the completion shows work (an
    '=' before its answer), "other" for anything else (a product begun and not finished, a stray comma)."""
    text = completion.removesuffix(EOS_TOKEN)
    if text.removeprefix("-").isdigit():
        return "direct"
    return "scratchpad" if "=" in text else "other"


FORMATS = Formats(("direct", "scratchpad", "other"), completion_format)
