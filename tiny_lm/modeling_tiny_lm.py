"""TinyLMForCausalLM: a character-level GPT as a genuine `transformers` causal LM.

nanoGPT's architecture (pre-LayerNorm blocks, causal self-attention via `scaled_dot_product_attention`, a GELU
MLP, tied input/output embeddings), wrapped so that `generate()`, `save_pretrained()` and
`AutoModelForCausalLM.from_pretrained()` work: it honours a 2-D `attention_mask` with LEFT padding (positions are
counted from the first real token) and a transformers `Cache` for incremental decoding.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

from .compat import base_model_output, cache_of, causal_lm_output
from .configuration_tiny_lm import TinyLMConfig
from .grouped import GroupedDecoder, GroupedWeights, grouped_logits, read_weights
from .grouped_layout import MAX_GROUP_SEQUENCE, FrameCache, GroupLayout, group_layout


class CausalSelfAttention(nn.Module):
    def __init__(self, config: TinyLMConfig, layer_idx: int) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.head_dim = config.n_embd // config.n_head
        self.layer_idx = layer_idx
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v in one matmul
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.dropout = config.dropout

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None, cache: Cache | None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, nh, T, hd)
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)  # (B, nh, T_past + T, hd)
        # attn_mask None means "plain causal, no padding, no past": SDPA's fused causal path is the fastest.
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attn_mask,
            is_causal=attn_mask is None and T > 1,  # (no mask and T == 1: decoding, every key is visible)
            dropout_p=self.dropout if self.training else 0.0,
        )
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, config: TinyLMConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, config.n_inner)
        self.c_proj = nn.Linear(config.n_inner, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Exact (erf) GELU: on tiny CPU tensors it is several times faster than the tanh approximation.
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(GradientCheckpointingLayer):
    """A pre-LayerNorm block. A GradientCheckpointingLayer, so that trainers can turn on activation checkpointing
    (TRL's GRPOTrainer does by default): it recomputes the block in backward instead of storing its activations."""

    def __init__(self, config: TinyLMConfig, layer_idx: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.attn = CausalSelfAttention(config, layer_idx)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None, cache: Cache | None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), attn_mask, cache)
        return x + self.mlp(self.ln_2(x))


class TinyLMPreTrainedModel(PreTrainedModel):
    config_class = TinyLMConfig
    base_model_prefix = "transformer"
    _no_split_modules = ["Block"]
    _supports_sdpa = True
    supports_gradient_checkpointing = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
            # GPT-2's scaled init of the residual projections keeps the residual stream's variance flat in depth.
            if getattr(module, "_is_residual_proj", False):
                nn.init.normal_(module.weight, mean=0.0, std=std / math.sqrt(2 * self.config.n_layer))
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


def build_attention_mask(
    attention_mask: torch.Tensor, q_len: int, past_len: int, dtype: torch.dtype = torch.bool
) -> torch.Tensor:
    """(B, T_past + T) 0/1 padding mask -> (B, 1, T, T_past + T) boolean SDPA mask (True = may attend).

    Query i (absolute index past_len + i) sees key j when j <= past_len + i and key j is not padding. A query that
    is itself padding would see nothing, and SDPA returns NaN for an all-False row, so it may see itself: its output
    is never used (its logits are masked out of every loss), but a NaN would leak into later sums.
    """
    B, K = attention_mask.shape
    device = attention_mask.device
    q_pos = torch.arange(past_len, past_len + q_len, device=device)  # (T,)
    k_pos = torch.arange(K, device=device)  # (K,)
    causal = k_pos[None, :] <= q_pos[:, None]  # (T, K)
    keep = causal[None] & attention_mask[:, None, :].bool()  # (B, T, K)
    keep = keep | (k_pos[None, None, :] == q_pos[None, :, None])  # a query always sees itself
    return keep[:, None]  # (B, 1, T, K)


class TinyLMModel(TinyLMPreTrainedModel):
    """The backbone: token and position embeddings, the blocks, the final LayerNorm -> hidden states (B, T, C).
    `TinyLMForCausalLM.transformer` is one (GPT-2's layout); libraries that look for `base_model` find it."""

    def __init__(self, config: TinyLMConfig, *, initialize: bool = True) -> None:
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_positions, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList([Block(config, i) for i in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        for block in self.h:
            block.attn.c_proj._is_residual_proj = True
            block.mlp.c_proj._is_residual_proj = True
        if initialize:  # (under a head, the head's post_init initializes everything in one pass, see there)
            self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.wte

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.wte = value

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """input_ids (B, T) -> last_hidden_state (B, T, C), and the cache when one is used.

        `cache` (alias `past_key_values`, the pre-5.x name) holds the keys/values of earlier tokens;
        `attention_mask` (B, T_past + T) marks real tokens (1) and left padding (0).
        """
        cache = cache if cache is not None else past_key_values
        if use_cache is None:
            # A cache only pays off when decoding; a training forward keeps none unless asked.
            use_cache = self.config.use_cache and not self.training
        if not use_cache:
            cache = None
        elif cache is None:
            cache = DynamicCache()
        B, T = input_ids.shape
        past_len = cache.get_seq_length() if cache is not None else 0

        if position_ids is None:
            if attention_mask is not None:
                # Left padding: a sequence's first real token is position 0, whatever its column.
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, -T:]  # (B, T)
            else:
                position_ids = torch.arange(past_len, past_len + T, device=input_ids.device)[None]  # (1, T)
        if int(position_ids.max()) >= self.config.n_positions:
            raise ValueError(
                f"sequence reaches position {int(position_ids.max())}, beyond the model's context "
                f"(n_positions={self.config.n_positions})"
            )

        # Without padding, SDPA needs no mask at all when there is no past (its fused causal path) or when a single
        # new token attends to everything before it (decoding); otherwise an explicit boolean mask.
        padded = attention_mask is not None and not bool(attention_mask.all())
        attn_mask = None
        if padded or (past_len > 0 and T > 1):
            mask2d = (
                attention_mask
                if attention_mask is not None
                else torch.ones(B, past_len + T, device=input_ids.device)
            )
            attn_mask = build_attention_mask(mask2d, T, past_len)

        x = self.drop(self.wte(input_ids) + self.wpe(position_ids))  # (B, T, C)
        for block in self.h:
            x = block(x, attn_mask, cache)
        return base_model_output(self.ln_f(x), cache)


class TinyLMForCausalLM(TinyLMPreTrainedModel, GenerationMixin):
    # transformers 5 reads {tied: source}; 4.x iterates it as the list of tied names (the keys): both work.
    _tied_weights_keys = {"lm_head.weight": "transformer.wte.weight"}

    def __init__(self, config: TinyLMConfig) -> None:
        super().__init__(config)
        # Every module is built before any weight is drawn: the random stream is consumed in one order (each
        # module's default init as it is built, then _init_weights over the whole tree), so a seed fixes the weights.
        self.transformer = TinyLMModel(config, initialize=False)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.transformer.wte

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.transformer.wte = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, value: nn.Linear) -> None:
        self.lm_head = value

    # ---- GRPO's grouped fast path (tiny_lm/grouped.py): G completions per prompt, each prompt encoded once.
    @property
    def supports_grouped(self) -> bool:
        """Whether the grouped path computes exactly what `forward` does, in either mode: it has no dropout."""
        return self.config.dropout == 0

    def grouped_layout(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        num_generations: int,
        completion_mask: torch.Tensor | None = None,
        frames: FrameCache | None = None,
        *,
        max_group_sequence: int = MAX_GROUP_SEQUENCE,
    ) -> GroupLayout:
        """The token layout of (P, Tp) prompts and their (P*G, Tc) completions: build once per batch, then score it
        with `grouped_logits` (with this model, or another of the same config, such as a reference). Past
        `max_group_sequence` slots per prompt it attends per sample (tiny_lm/grouped_layout.py)."""
        return group_layout(
            prompt_ids,
            prompt_mask,
            completion_ids,
            num_generations,
            completion_mask,
            n_positions=self.config.n_positions,
            dtype=self.transformer.wte.weight.dtype,
            frames=frames,
            max_group_sequence=max_group_sequence,
        )

    def grouped_weights(self) -> GroupedWeights:
        """The tensors the grouped path uses, looked up by name (a caller that runs it often may keep them: the
        parameters are updated in place)."""
        return read_weights(self)

    def grouped_logits(self, layout: GroupLayout, weights: GroupedWeights | None = None) -> torch.Tensor:
        """(P*G, Tc, V) logits scoring each completion token of the layout's batch (0 where nothing is scored)."""
        return grouped_logits(read_weights(self) if weights is None else weights, layout)

    def grouped_decoder(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        num_generations: int,
        frames: FrameCache | None = None,
        weights: GroupedWeights | None = None,
    ) -> GroupedDecoder:
        """An incremental decoder for G samples per prompt that drops finished rows."""
        w = read_weights(self) if weights is None else weights
        return GroupedDecoder(w, prompt_ids, prompt_mask, num_generations, frames)

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: Cache | None = None,
        past_key_values: Cache | None = None,
        use_cache: bool | None = None,
        labels: torch.LongTensor | None = None,
        logits_to_keep: int = 0,
        return_dict: bool | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """input_ids (B, T) -> logits (B, T, V), or (B, logits_to_keep, V) when logits_to_keep > 0; the cache
        arguments as in `TinyLMModel.forward`."""
        out = self.transformer(
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            past_key_values=past_key_values,
            use_cache=use_cache,
        )
        x = out.last_hidden_state
        if logits_to_keep:
            x = x[:, -logits_to_keep:]  # only the positions whose next token is wanted
        logits = self.lm_head(x)  # (B, T', V)

        loss = None
        if labels is not None:
            # Causal LM convention: labels are the inputs; position t predicts token t + 1. -100 is ignored.
            flat = logits[:, :-1].reshape(-1, logits.size(-1))
            loss = F.cross_entropy(
                flat if flat.dtype == torch.float64 else flat.float(),  # half precision up; float64 stays
                labels[:, 1:].reshape(-1),
                ignore_index=-100,
            )
        return causal_lm_output(loss, logits, cache_of(out))


# Saved directories carry this code and an `auto_map`, so they load with trust_remote_code in a process that never
# imported tiny_lm (and the registration travels with the code).
TinyLMModel.register_for_auto_class("AutoModel")
TinyLMForCausalLM.register_for_auto_class("AutoModelForCausalLM")
