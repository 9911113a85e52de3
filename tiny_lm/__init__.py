"""tiny_lm: a character-level GPT that is a genuine `transformers` model.

Importing this package registers the model with `AutoConfig` and `AutoModelForCausalLM`, so a saved directory
loads with `AutoModelForCausalLM.from_pretrained(path)` and `AutoTokenizer.from_pretrained(path)`.
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from .compat import register_tokenizer
from .configuration_tiny_lm import TinyLMConfig
from .modeling_tiny_lm import TinyLMForCausalLM, TinyLMModel
from .tokenization_tiny_lm import EOS_TOKEN, PAD_TOKEN, build_tokenizer, check_text

AutoConfig.register(TinyLMConfig.model_type, TinyLMConfig, exist_ok=True)
AutoModel.register(TinyLMConfig, TinyLMModel, exist_ok=True)
AutoModelForCausalLM.register(TinyLMConfig, TinyLMForCausalLM, exist_ok=True)
register_tokenizer(TinyLMConfig)  # transformers 4.x only: see tiny_lm/compat.py

__all__ = ["EOS_TOKEN", "PAD_TOKEN", "TinyLMConfig", "TinyLMForCausalLM", "build_tokenizer", "check_text"]
