"""The one place where tiny_lm (and tinygrpo's generic backend) bridge transformers 4.x and 5.x.

The supported range starts at transformers 4.56.2 (TRL 1.16's floor). Each bridge picks its branch by testing for
the feature, never by reading a version number.
"""

from __future__ import annotations

from dataclasses import fields

import transformers
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

# transformers 5 renamed the key/value cache from `past_key_values` to `cache`, both as the output field and as the
# models' forward keyword (5.x still takes the old name, with a deprecation warning); 4.x knows only the old one.
CACHE_KEYWORD = "cache" if "cache" in {f.name for f in fields(CausalLMOutputWithPast)} else "past_key_values"


def cache_kwargs(cache) -> dict:
    """The keyword a transformers causal LM's forward takes its cache by: `model(..., **cache_kwargs(cache))`."""
    return {CACHE_KEYWORD: cache}


def causal_lm_output(loss, logits, cache) -> CausalLMOutputWithPast:
    """`CausalLMOutputWithPast` with the cache under this transformers' field name."""
    return CausalLMOutputWithPast(loss=loss, logits=logits, **cache_kwargs(cache))


def base_model_output(hidden, cache) -> BaseModelOutputWithPast:
    """`BaseModelOutputWithPast` with the cache under this transformers' field name."""
    return BaseModelOutputWithPast(last_hidden_state=hidden, **cache_kwargs(cache))


def cache_of(output):
    """The cache a model output carries, under either name."""
    return getattr(output, CACHE_KEYWORD)


def register_tokenizer(config_class: type) -> None:
    """Let transformers 4.x's `AutoTokenizer` load a tokenizer directory saved by 5.x.

    5.x writes `"tokenizer_class": "TokenizersBackend"` (its name for the `tokenizers`-backed tokenizer, which 4.x
    calls `PreTrainedTokenizerFast`) into tokenizer_config.json, and 4.x raises "Tokenizer class TokenizersBackend
    does not exist". Registering a subclass of that name lets 4.x find it; 5.x has the class and needs nothing.
    """
    if hasattr(transformers, "TokenizersBackend"):
        return
    backend = type("TokenizersBackend", (PreTrainedTokenizerFast,), {"__module__": __name__})
    AutoTokenizer.register(config_class, fast_tokenizer_class=backend, exist_ok=True)


def checkpoints_activations(model) -> bool:
    """Whether activation (gradient) checkpointing is on: transformers 5 renamed `is_gradient_checkpointing` to
    `is_activation_checkpointing` (the old name warns); a model that is not a PreTrainedModel has neither."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False
