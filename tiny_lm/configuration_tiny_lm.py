"""TinyLMConfig: the hyper-parameters of the character-level GPT, as a Hugging Face `PretrainedConfig`."""

from __future__ import annotations

from transformers import PretrainedConfig


class TinyLMConfig(PretrainedConfig):
    """A decoder-only, pre-LayerNorm GPT with tied embeddings.

    The defaults (2 layers, 64 wide, 4 heads, 32 positions) give ~0.1 M parameters: enough to learn 2-digit
    addition, small enough to train in seconds on 2 CPU cores.
    """

    model_type = "tiny_lm"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size: int = 14,
        n_positions: int = 32,
        n_embd: int = 64,
        n_layer: int = 2,
        n_head: int = 4,
        n_inner: int | None = None,
        dropout: float = 0.0,
        layer_norm_epsilon: float = 1e-5,
        initializer_range: float = 0.02,
        pad_token_id: int = 0,
        eos_token_id: int = 1,
        bos_token_id: int | None = None,
        tie_word_embeddings: bool = True,
        use_cache: bool = True,
        **kwargs,
    ) -> None:
        if n_embd % n_head != 0:
            raise ValueError(f"n_embd ({n_embd}) must be divisible by n_head ({n_head})")
        self.vocab_size = vocab_size
        self.n_positions = n_positions
        self.n_embd = n_embd
        self.n_layer = n_layer
        self.n_head = n_head
        self.n_inner = n_inner if n_inner is not None else 4 * n_embd
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.use_cache = use_cache
        super().__init__(
            pad_token_id=pad_token_id,
            eos_token_id=eos_token_id,
            bos_token_id=bos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )

    # Names that generic transformers code (generation, cache sizing) looks for.
    @property
    def hidden_size(self) -> int:
        return self.n_embd

    @property
    def num_hidden_layers(self) -> int:
        return self.n_layer

    @property
    def num_attention_heads(self) -> int:
        return self.n_head

    @property
    def max_position_embeddings(self) -> int:
        return self.n_positions


TinyLMConfig.register_for_auto_class()  # saved configs carry an auto_map (see modeling_tiny_lm.py)
