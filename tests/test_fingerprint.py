"""studies.fingerprint follows the reference's own training step by step: its last weights are the weights
train_sft.py saves for the same recipe (same process, same kernels), and `--compare` names the first step, and
which of its parts, where two machines' fingerprints part."""

from __future__ import annotations

import copy

import pytest
import torch

from studies import fingerprint
from tiny_lm import TinyLMForCausalLM
from tinygrpo.sft.config import SFTConfig
from tinygrpo.sft.train import train_reference


@pytest.mark.slow
def test_the_fingerprints_last_weights_are_the_saved_references(tmp_path):
    """Three steps of the default recipe, followed by studies.fingerprint and trained by train_reference (native
    kernels, in this process, for both): the weights after the last step hash alike; the first step moved them."""
    torch.set_num_threads(1)
    found = fingerprint.trajectory(3, str(tmp_path / "unused"))
    out = tmp_path / "reference"
    summary = train_reference(
        SFTConfig(output_dir=str(out), max_steps=3, kernels="native", logging_steps=0), False
    )
    saved = TinyLMForCausalLM.from_pretrained(out)
    assert [s["step"] for s in found["steps"]] == [0, 1, 2, 3]
    assert found["steps"][-1]["weights"] == fingerprint.weights(saved)
    assert found["steps"][0]["weights"] != found["steps"][1]["weights"]
    assert float.fromhex(found["steps"][-1]["loss"]) == summary["final_loss"]
    assert found["held_out_accuracy"] == summary["eval_accuracy"]
    assert "model" in found["first_forward"] and "transformer.h.0.attn" in found["first_forward"]


def _fingerprint(steps: int = 4) -> dict:
    rows = [{"step": 0, "weights": "w0"}]
    rows += [
        {"step": s, "batch": f"b{s}", "loss": f"l{s}", "grads": f"g{s}", "weights": f"w{s}"}
        for s in range(1, steps)
    ]
    return {
        "kernels": {"mm": "1", "exp": "2"},
        "data": "d",
        "first_forward": {"model": "m", "lm_head": "h"},
        "steps": rows,
    }


def test_compare_names_the_first_step_and_its_parts_where_two_machines_part():
    a = _fingerprint()
    assert fingerprint.compare(a, copy.deepcopy(a)) == []
    b = copy.deepcopy(a)
    b["steps"][2].update(grads="other", weights="other")
    b["steps"][3].update(loss="other")  # (a later step differing too: the first one is named)
    assert fingerprint.compare(a, b) == ["steps: the same through step 1; step 2 differs in grads, weights"]
    c = copy.deepcopy(a)
    c["kernels"]["exp"] = "other"
    c["first_forward"]["lm_head"] = "other"
    assert fingerprint.compare(a, c) == [
        "kernels: 1 of 2 agree; differ: exp",
        "first forward: 1 modules differ, the first to run: lm_head",
    ]
