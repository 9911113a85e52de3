"""The character tokenizer: one token per character, plus <pad> and <eos>, built with `tokenizers`.

Wrapped as a `PreTrainedTokenizerFast` with left padding (generation appends on the right, so prompts of different
lengths must end in the same column). There is no unknown token on purpose: a character outside the vocabulary is
an error, never a silent <unk> that would train the model on garbage.
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<pad>"
EOS_TOKEN = "<eos>"
DEFAULT_CHARS = "0123456789+="


def build_tokenizer(chars: str = DEFAULT_CHARS) -> PreTrainedTokenizerFast:
    """Vocabulary: <pad> = 0, <eos> = 1, then each character of `chars` in order."""
    if len(set(chars)) != len(chars):
        raise ValueError(f"chars has repeated characters: {chars!r}")
    vocab = {PAD_TOKEN: 0, EOS_TOKEN: 1}
    for ch in chars:
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab))  # no unk_token: unknown input raises
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")  # every character is a word
    tok.decoder = decoders.Fuse()  # join characters back without spaces
    tok.add_special_tokens([PAD_TOKEN, EOS_TOKEN])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD_TOKEN,
        eos_token=EOS_TOKEN,
        padding_side="left",
        model_input_names=["input_ids", "attention_mask"],
        clean_up_tokenization_spaces=False,
    )


def vocabulary_chars(tokenizer: PreTrainedTokenizerFast) -> set[str]:
    """The plain characters the tokenizer knows (special tokens excluded)."""
    return {t for t in tokenizer.get_vocab() if t not in tokenizer.all_special_tokens}


def check_text(
    text: str, tokenizer: PreTrainedTokenizerFast, where: str = "text", known: set[str] | None = None
) -> None:
    """Raise a ValueError naming the first character of `text` that is not in the vocabulary.

    The tokenizer itself raises too, but with a terse message from the Rust library; this one says what and where.
    `known`: `vocabulary_chars(tokenizer)`, given by a caller that checks many texts (it costs ~40 us a call).
    """
    known = vocabulary_chars(tokenizer) if known is None else known
    for i, ch in enumerate(text.replace(EOS_TOKEN, "")):
        if ch not in known:
            raise ValueError(
                f"{where}: character {ch!r} (U+{ord(ch):04X}) at index {i} of {text!r} is not in the tokenizer's "
                f"vocabulary {''.join(sorted(known))!r}"
            )
