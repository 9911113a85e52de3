"""TRL's options that a run here does not take, each with what to use instead or why it is not supported: a TRL user
who types one gets that line, not a bare "unknown argument" (GRPOConfig's and SFTConfig's `TRL_HINTS`)."""

from __future__ import annotations

NO_HUB = (
    "not supported here: no model hub is reached (models are trained here and saved with save_pretrained)"
)
ONE_LOOP = "not supported here: decoding is this repository's own batched loop (tinygrpo/rollout/sampling.py)"

TRAINING = {  # (TRL's TrainingArguments, for GRPO and SFT alike)
    "optim": "not supported here: the optimizer is torch's fused AdamW (TRL's default, adamw_torch); "
    "adam_beta1, adam_beta2, adam_epsilon and weight_decay set it",
    "lr_scheduler_kwargs": "not supported here: lr_scheduler_type (linear, cosine, constant, ...) takes no arguments",
    "per_device_eval_batch_size": "not supported here: the held-out split is evaluated in one batch",
    "eval_strategy": "not supported here: eval_steps says when (every N steps, and at 0 and the end)",
    "save_strategy": "not supported here: save_steps says when (0 = only at the end)",
    "logging_strategy": "not supported here: logging_steps says when",
    "gradient_checkpointing": "not needed here: tiny models keep every activation",
    "fp16": "not supported here: bf16 (autocast, float32 weights) is the mixed precision",
    "push_to_hub": NO_HUB,
    "hub_model_id": NO_HUB,
    "dataloader_num_workers": "not needed here: the prompts are tokenized once, in memory",
    "disable_dropout": "not needed here: tiny_lm has no dropout, and decoding runs in eval mode",
    "model_init_kwargs": "not supported here: model_name_or_path is a directory of save_pretrained files, loaded "
    "as saved",
}

GRPO = {
    **TRAINING,
    "generation_batch_size": "here per_device_train_batch_size x steps_per_generation is what a generation "
    "samples per process: set steps_per_generation (TRL's generation_batch_size / per_device_train_batch_size / "
    "processes)",
    "generation_kwargs": ONE_LOOP + "; temperature, top_k, top_p, min_p and repetition_penalty set it",
    "use_vllm": ONE_LOOP,
    "log_completions_steps": "here logging_steps says when completions are logged (log_completions)",
}

SFT = {
    **TRAINING,
    "gradient_accumulation_steps": "not supported in SFT here: one optimizer step is one batch; a larger step is a "
    "larger per_device_train_batch_size",
    "num_train_epochs": "not supported in SFT here: it samples its batches with replacement; set max_steps",
    "max_length": "not supported here: n_positions is the context (prompt + completion), checked against the "
    "longest example",
    "packing": "not supported here: one example a row, left-padded",
    "completion_only_loss": "always on here: only the completion (and <eos>) carries labels",
}


def unknown_line(flags: list[str], hints: dict[str, str]) -> str:
    """The error for unknown command-line arguments: each TRL option among them with its hint, else the list."""
    known = [f for f in flags if f.startswith("--") and f[2:].split("=")[0].replace("-", "_") in hints]
    if known:
        name = known[0][2:].split("=")[0].replace("-", "_")
        return f"{name}: TRL's option; {hints[name]}"
    return f"unknown argument(s): {' '.join(flags)} (see --help)"
