"""A table-backed "language model" for the tabular oracle tests of the GRPO trainer.

The policy is the seed demo's `AnswerPolicy` (one row of 13 answer logits per question q = a * 6 + b) dressed up as
a `transformers` causal LM, so that `GRPOTrainer` trains it through its ordinary code path: the tokenizer has one
token per prompt character and ONE token per answer "0".."12", and the model's next-token logits after a prompt
"a+b=" are table[q] on the 13 answer tokens and a large negative constant elsewhere, so that the distribution the
trainer samples from and scores with is exactly Categorical(logits=table[q]).
"""

from __future__ import annotations

import torch
import torch.nn as nn
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerFast
from transformers.modeling_outputs import CausalLMOutput

N_A, N_B = 6, 6
N_Q = N_A * N_B  # 36 questions
N_ANS = N_A + N_B + 1  # answers 0..12, as in the seed demo (a + b <= 10; 11 and 12 are always wrong)
ANSWERS = [str(v) for v in range(N_ANS)]
PROMPT_CHARS = "0123456789+="
NEG = -1e9  # logit of every non-answer token: exp() underflows to exactly 0, but the value stays finite


def build_table_tokenizer() -> PreTrainedTokenizerFast:
    """<pad> = 0, <eos> = 1, one token per prompt character, then the two-digit answers "10", "11", "12"."""
    vocab = {"<pad>": 0, "<eos>": 1}
    for tok in list(PROMPT_CHARS) + [a for a in ANSWERS if len(a) > 1]:
        vocab[tok] = len(vocab)
    tk = Tokenizer(models.WordLevel(vocab=vocab))
    # prompts: one token per character
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tk.add_special_tokens(["<pad>", "<eos>"])
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        pad_token="<pad>",
        eos_token="<eos>",
        padding_side="left",
        model_input_names=["input_ids", "attention_mask"],
        clean_up_tokenization_spaces=False,
    )


class TableConfig(PretrainedConfig):
    model_type = "tinygrpo_test_table"

    def __init__(
        self,
        vocab_size: int = 17,
        n_positions: int = 8,
        answer_token_ids=None,
        digit_token_ids=None,
        **kwargs,
    ) -> None:
        self.vocab_size = vocab_size
        self.n_positions = n_positions
        self.answer_token_ids = list(answer_token_ids or [])  # token id of answer v, v = 0..12
        self.digit_token_ids = list(digit_token_ids or [])  # token id of the prompt digit d, d = 0..9
        super().__init__(**kwargs)


class TablePolicy(PreTrainedModel):
    """Next-token logits after "a+b=" = table[a * 6 + b] on the answer tokens, NEG elsewhere."""

    config_class = TableConfig
    base_model_prefix = "table_policy"

    def __init__(self, config: TableConfig) -> None:
        super().__init__(config)
        self.table = nn.Parameter(torch.zeros(N_Q, N_ANS))
        # The trainer checks len(tokenizer) against the input embeddings; this one is never used (frozen).
        self.embed = nn.Embedding(config.vocab_size, 1).requires_grad_(False)
        digit_of = torch.full((config.vocab_size,), -1, dtype=torch.long)
        digit_of[torch.tensor(config.digit_token_ids)] = torch.arange(len(config.digit_token_ids))
        self.register_buffer("digit_of", digit_of, persistent=False)
        self.register_buffer("answer_ids", torch.tensor(config.answer_token_ids), persistent=False)
        self.post_init()

    def _init_weights(self, module) -> None:  # the table is set by the test, never re-initialised
        pass

    def get_input_embeddings(self) -> nn.Module:
        return self.embed

    def questions(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) ids ending in "a+b=" -> (B,) question index a * 6 + b."""
        a, b = self.digit_of[input_ids[:, -4]], self.digit_of[input_ids[:, -2]]
        if input_ids.size(1) < 4 or bool((a < 0).any() | (b < 0).any() | (a >= N_A).any() | (b >= N_B).any()):
            raise ValueError("the table policy only scores prompts 'a+b=' with a, b in 0..5")
        return a * N_B + b

    def forward(self, input_ids, attention_mask=None, cache=None, use_cache=None, logits_to_keep=0, **kwargs):
        B, T = input_ids.shape
        rows = self.table[self.questions(input_ids)]  # (B, 13)
        V = self.config.vocab_size
        logits = torch.full((B, V), NEG, dtype=rows.dtype).index_copy(1, self.answer_ids, rows)  # (B, V)
        keep = logits_to_keep or T
        return CausalLMOutput(logits=logits[:, None, :].expand(B, keep, V))


def build_table_policy(tokenizer: PreTrainedTokenizerFast, table: torch.Tensor) -> TablePolicy:
    vocab = tokenizer.get_vocab()
    cfg = TableConfig(
        vocab_size=len(tokenizer),
        n_positions=8,
        answer_token_ids=[vocab[a] for a in ANSWERS],
        digit_token_ids=[vocab[str(d)] for d in range(10)],
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = TablePolicy(cfg).to(table.dtype)  # (a float64 table stays float64: no rounding on the copy)
    with torch.no_grad():
        model.table.copy_(table)
    return model
