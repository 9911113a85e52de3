"""Environments over turns (TRL's environment_factory): the decoding loop against episodes written out by hand, the
exact oracles of guess the number, the environment's tokens outside the gradient, hostile environments answered in
band, the environment's reward against the transcript's, and a run on two processes."""

from __future__ import annotations

import json
import math
import pickle
import re
import time
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from _runs import launch_two
from test_tool_calls import ScriptedDecoder, _bracketed

from rewards import EOS
from tiny_lm import TinyLMConfig, TinyLMForCausalLM
from tiny_lm.tokenization_tiny_lm import build_tokenizer
from tinygrpo.algorithm.policy_losses import LossConfig
from tinygrpo.data.tasks.guess_number import (
    CHARS,
    MAX_TURNS,
    PROMPT,
    N,
    found_in,
    guess_found,
    guess_turns,
    optimal_expected_turns,
    reply,
    turns_of,
    weak_episode,
)
from tinygrpo.model.backend import GenericBackend, GroupedBackend
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.environment import Environment, get_environment
from tinygrpo.rollout.round import Batch
from tinygrpo.rollout.sampling import completion_logits, decode, sample_completions
from tinygrpo.rollout.tool_calls import ToolUse, policy_mask
from tinygrpo.run.config import GRPOConfig
from tinygrpo.update.loss import LossInputs, grpo_loss

GUESS = get_environment("guess_number")
BLIND = get_environment("guess_number_blind")


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(CHARS)


def _decode(tok, env, scripts, targets, max_new=60, max_calls=None):
    dec = ScriptedDecoder(tok, scripts)
    use = ToolUse(
        env, tok, env.max_calls if max_calls is None else max_calls, [{"target": t} for t in targets]
    )
    calls = use.session(len(scripts))
    ro = decode(
        dec, SamplingParams.greedy(max_new), eos_token_id=tok.eos_token_id, pad_token_id=0, tools=calls
    )
    n = ro.completion_mask.sum(1).tolist()
    texts = [
        _bracketed(tok, ro.completion_ids[i, : n[i]].tolist(), ro.tool_mask[i, : n[i]].tolist())
        for i in range(len(scripts))
    ]
    return ro, texts, calls


# ------------------------------------------------------------------------------------------------ the decoding loop
# (target, what the policy writes whatever it is fed, the completion as written out by hand: the environment's tokens
# in brackets); the environment ends a found episode with <eos>, its token.
EPISODES = [
    (49, "32?48?56?49?", "32?[>]48?[>]56?[<]49?[=<eos>]"),
    (0, "0?", "0?[=<eos>]"),
    (63, "63?1?", "63?[=<eos>]"),  # found: nothing the policy would write next is read
    (10, "07?10?", "07?[!]10?[=<eos>]"),  # a malformed guess costs its turn
    (5, "?5?", "?[!]5?[=<eos>]"),  # an empty guess too
    (20, "30?25?", "30?[<]25?[<]<eos>"),  # the policy stops: its own <eos>, the episode unfinished
    (20, "30?2", "30?[<]2"),  # cut by the length: no <eos>
]


def test_a_decode_plays_each_episode_as_written_out_by_hand(tok):
    targets = [t for t, _, _ in EPISODES]
    ro, texts, calls = _decode(tok, GUESS, [s for _, s, _ in EPISODES], targets, max_new=60)
    want = [w for _, _, w in EPISODES]
    assert texts[:-1] == want[:-1]  # (the last row is cut below, in a decode of its own)
    assert [int(c) for c in ro.tool_calls[:-1]] == [w.count("?") for w in want[:-1]]
    assert [int(f) for f in ro.tool_failures[:-1]] == [w.count("[!]") for w in want[:-1]]
    assert ro.is_eos[:-1].all()
    envs = ro.environments
    assert [e.found for e in envs[:-1]] == [True, True, True, True, True, False]
    assert [e.turns for e in envs[:-1]] == [4, 1, 1, 2, 2, 2]
    assert envs[0].guesses == [32, 48, 56, 49] and envs[3].guesses == [10]
    _, cut, _ = _decode(tok, GUESS, [EPISODES[-1][1]], [20], max_new=5)
    assert cut == [EPISODES[-1][2]]


def test_the_cap_ends_an_episode_and_blind_replies_say_only_found(tok):
    wrong = "".join(f"{g}?" for g in range(1, 20))
    ro, texts, _ = _decode(tok, GUESS, [wrong], [0], max_new=80)
    assert texts[0] == "".join(f"{g}?[<]" for g in range(1, MAX_TURNS)) + f"{MAX_TURNS}?[<<eos>]"
    assert ro.environments[0].turns == MAX_TURNS and not ro.environments[0].found
    _, texts, _ = _decode(tok, BLIND, ["32?48?49?", "1?"], [49, 1])
    assert texts == ["32?[.]48?[.]49?[=<eos>]", "1?[=<eos>]"]
    _, texts, _ = _decode(tok, GUESS, ["32?48?49?"], [49], max_calls=2)  # (max_tool_calling_iterations)
    assert texts == ["32?[>]48?[><eos>]"]


class Greeting:
    """An episode that says something first (TRL's reset may return the first observation)."""

    def reset(self, target: int, **row) -> str:
        self.target, self.done = target, False
        return "<>"

    def guess(self, n: str) -> str:
        """Guess.

        Args:
            n: The guess.
        """
        self.done = int(n) == self.target
        return "=" if self.done else "."


def _env(name: str, factory, **kw) -> Environment:
    return Environment(
        name, "a test episode", (), lambda s: ("guess", [s]), open="", end="?", close="", error="!",
        factory=factory, **{"max_calls": 4, "timeout_s": 0.5, **kw},
    )  # fmt: skip


def test_what_reset_says_is_fed_first(tok):
    _, texts, _ = _decode(tok, _env("greeting", Greeting), ["3?4?"], [4])
    assert texts == ["[<>]3?[.]4?[=<eos>]"]


class GreetsAtLength(Greeting):
    """Says first as many characters as its target: a first observation of any length."""

    def reset(self, target: int, **row) -> str:
        self.target, self.done = target, False
        return "<" * target


def test_a_first_observation_of_exactly_max_reply_chars_is_fed_and_one_more_is_refused(tok):
    """The bound on a reply holds for what reset says first, at its edge: exactly max_reply_chars characters are
    fed as said; one more, and the episode cannot start (bad_reply, ended at once)."""
    env = _env("greets_at_length", GreetsAtLength, max_reply_chars=4)
    _, texts, calls = _decode(tok, env, ["4?", "5?"], [4, 5])
    assert texts == ["[<<<<]4?[=<eos>]", "[!<eos>]"]
    assert calls.outcomes["reset_bad_reply"] == 1


# ------------------------------------------------------------------------------------------------ the exact oracles
def _midpoint_turns(n: int) -> Fraction:
    """Binary search by the midpoint rule, played on every number: its mean turns."""
    total = 0
    for target in range(n):
        lo, hi, turns = 0, n - 1, 0
        while True:
            g, turns = (lo + hi) // 2, turns + 1
            if g == target:
                break
            lo, hi = (lo, g - 1) if target < g else (g + 1, hi)
        total += turns
    return Fraction(total, n)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 64, 100])
def test_the_optimum_is_binary_search_played_out(n):
    assert optimal_expected_turns(n) == pytest.approx(float(_midpoint_turns(n)), rel=1e-12)
    assert optimal_expected_turns(64) == 5.125


@pytest.mark.parametrize("n", [1, 2, 5, 9, 64])
def test_the_weak_strategys_expectation_is_the_random_search_trees(n):
    """A uniform guess in the interval is a search in a random binary search tree: mean successful search
    2 (1 + 1/n) H_n - 3 comparisons (Knuth, TAOCP vol. 3, 6.2.2)."""
    from studies.turns import weak_expected_turns

    h = sum(Fraction(1, k) for k in range(1, n + 1))
    assert weak_expected_turns(n) == pytest.approx(float(2 * (1 + Fraction(1, n)) * h - 3), rel=1e-12)


def test_the_weak_episodes_follow_the_replies_and_find_the_number():
    import random

    rng = random.Random(0)
    for _ in range(300):
        target = rng.randrange(N)
        text = weak_episode(target, rng)
        lo, hi = 0, N - 1
        for guess, said in [(int(g), r) for g, r in re.findall(r"(\d+)\?([<>=])", text)]:
            assert lo <= guess <= hi and said == reply(target, guess)
            lo, hi = (lo, guess - 1) if said == "<" else (guess + 1, hi) if said == ">" else (guess, guess)
        assert text.endswith("=") and found_in(text + EOS, target) == (text.count("?") <= MAX_TURNS)
        assert not found_in(text, target)  # (no <eos>: not a finished episode)


def test_an_equals_the_policy_wrote_after_a_wrong_guess_is_not_found():
    """The environment answers `=` only to the hidden number: after a wrong guess it says `<`, `>` (or `.` when
    blind), so an `=` there in a transcript is the policy's own text (a decode without the environment writes its
    replies itself), not the environment's reply. guess_found reads the guess, not that `=`: 0.0; the number found
    (the guess is the target, answered `=`) is 1.0."""
    target = 15
    assert reply(target, 16) == "<"  # (what the environment says to 16)
    wrote_its_own = ["32?<16?=", "16?=", "32?.16?="]
    assert guess_found([t + EOS for t in wrote_its_own], [target] * 3) == [0.0, 0.0, 0.0]
    assert guess_found(["32?<15?=" + EOS, "15?=" + EOS], [target] * 2) == [1.0, 1.0]


# ------------------------------------------------------------------------------------------------ real episodes
def _model(tok, seed: int) -> TinyLMForCausalLM:
    torch.manual_seed(seed)
    cfg = TinyLMConfig(vocab_size=len(tok), n_positions=64, n_embd=32, n_layer=2, n_head=2)
    return TinyLMForCausalLM(cfg).eval()


def _biased(tok, seed: int) -> TinyLMForCausalLM:
    """A random model pushed to write digits and `?` (a random one would rarely end a guess): the final norm's bias
    reads one embedding column, set per token (the head is tied to the embeddings)."""
    model = _model(tok, seed)
    with torch.no_grad():
        pull = torch.full((len(tok),), -1.0)
        pull[tok.convert_tokens_to_ids(list("0123456789"))] = 0.6
        pull[tok.convert_tokens_to_ids("?")] = 1.0
        model.transformer.wte.weight[:, 0] = pull
        model.transformer.ln_f.weight.mul_(0.2)
        model.transformer.ln_f.bias.zero_()
        model.transformer.ln_f.bias[0] = 4.0
    return model


def _episodes(tok, model, env, targets, G=8, seed=0, dtype=torch.float32):
    enc = tok([PROMPT] * len(targets), padding=True, return_tensors="pt")
    use = ToolUse(env, tok, env.max_calls).with_rows({"target": targets})
    params, gen = SamplingParams(4 * MAX_TURNS + 1, 1.0), torch.Generator().manual_seed(seed)
    ro = sample_completions(
        model.to(dtype), enc["input_ids"], enc["attention_mask"], G, params, gen,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tools=use,
    )  # fmt: skip
    return enc, ro


def test_the_environments_reward_is_the_transcripts(tok):
    """Two computations: the episode's own state (guess_turns, TRL's environments) and the transcript read back."""
    from tinygrpo.model.text import decode_completions

    targets = list(range(0, N, 4))
    _, ro = _episodes(tok, _biased(tok, 0), GUESS, targets)
    texts = decode_completions(tok, ro.completion_ids, ro.completion_mask)
    rows = [t for t in targets for _ in range(8)]
    mine = guess_turns(texts, environments=ro.environments)
    read = []
    for text in texts:
        turns, found = turns_of(text)
        read.append((MAX_TURNS + 1 - turns) / MAX_TURNS * found)
    assert mine == read
    ended = [float(e.found and t.endswith(EOS)) for e, t in zip(ro.environments, texts, strict=True)]
    assert guess_found(texts, rows) == ended and sum(ended) > 0
    assert sum(ro.tool_calls.tolist()) > 100  # (the episodes took turns)


@pytest.mark.parametrize("backend", ["grouped", "generic"])
def test_the_loss_has_exactly_no_gradient_on_the_observations(tok, backend):
    enc, ro = _episodes(tok, _biased(tok, 1), GUESS, [3, 30, 40, 60], G=8, dtype=torch.float64)
    model = _biased(tok, 1).double()
    mask = policy_mask(ro.completion_mask.double(), ro.tool_mask)
    adv = torch.randn(
        ro.completion_ids.size(0), generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    batch = Batch(
        enc["input_ids"], enc["attention_mask"], ro.completion_ids.clone(), mask, adv, torch.zeros(adv.shape)
    )
    be = GroupedBackend() if backend == "grouped" else GenericBackend()
    logits = completion_logits(model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, 8, mask, be)
    logits = logits.detach().requires_grad_(True)
    cfg = GRPOConfig(num_generations=8, max_completion_length=4 * MAX_TURNS + 1)
    inputs = LossInputs(batch, rows=adv.numel(), tokens=mask.sum())
    loss, _ = grpo_loss(logits, inputs, LossConfig.of(cfg), SamplingParams.of(cfg), None)
    loss.backward()
    g = logits.grad.abs().sum(-1)
    assert int(ro.tool_mask.sum()) > 50
    assert bool((g[ro.tool_mask] == 0).all())  # exactly: the observations and the environment's <eos>
    assert bool((g[mask.bool()] > 0).all())


# ------------------------------------------------------------------------------------------------ hostile episodes
class _Base(Greeting):
    def reset(self, target: int, **row) -> None:
        self.target, self.done = target, False


class RaisesOnReset(_Base):
    def reset(self, target: int, **row) -> None:
        raise RuntimeError("no")


class RaisesOnGuess(_Base):
    def guess(self, n: str) -> str:
        """Guess.

        Args:
            n: The guess.
        """
        raise SystemExit(3)


class HangsOnSeven(_Base):
    def guess(self, n: str) -> str:
        """Guess.

        Args:
            n: The guess.
        """
        if n == "7":
            time.sleep(60)
        return "."


class AnswersOutsideTheAlphabet(_Base):
    def guess(self, n: str) -> str:
        """Guess.

        Args:
            n: The guess.
        """
        return "x"


class Unpicklable(_Base):
    def guess(self, n: str) -> str:
        """Guess.

        Args:
            n: The guess.
        """
        self.lock = __import__("threading").Lock()
        return "."


def _refuse():
    raise RuntimeError("this instance cannot be loaded")


class Unloadable(_Base):
    """Sent fine, but its loading raises in the run's process."""

    def guess(self, n: str) -> str:
        """Guess.

        Args:
            n: The guess.
        """
        return "."

    def __reduce__(self):
        return (_refuse, ())


class DoneRaises(_Base):
    """Says whether it is done at reset, and raises when asked after a guess."""

    def reset(self, target: int, **row) -> None:
        self.target, self.guessed = target, False

    @property
    def done(self) -> bool:
        if self.guessed:
            raise ValueError("done?")
        return False

    def guess(self, n: str) -> str:
        """Guess.

        Args:
            n: The guess.
        """
        self.guessed = True
        return "."


HOSTILE = {
    # name: (factory, scripts, what each row reads, outcomes counted)
    "reset": (RaisesOnReset, ["1?2?"], ["[!<eos>]"], {"reset_raised": 1}),  # (it cannot start: it ends)
    "guess": (
        RaisesOnGuess,
        ["1?2?"],
        ["1?[!]2?[!]<eos>"],
        {"raised": 2},
    ),  # (a tool's error is the model's to read)
    "hang": (
        HangsOnSeven,
        ["1?7?", "1?2?3?"],
        ["1?[.]7?[!<eos>]", "1?[.]2?[!<eos>]"],  # the other episode was lost with the worker: it ends too
        {"timeout": 1, "lost": 1},
    ),
    "alphabet": (AnswersOutsideTheAlphabet, ["1?2?"], ["1?[!]2?[!]<eos>"], {"unwritable": 2}),
    "unpicklable": (Unpicklable, ["1?"], ["1?[.]<eos>"], {"lost_instance": 1}),
    "unloadable": (Unloadable, ["1?"], ["1?[.]<eos>"], {"lost_instance": 1}),
    "done": (DoneRaises, ["1?2?"], ["1?[.<eos>]"], {}),
}


@pytest.mark.kills
@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_episode_is_answered_in_band_counted_and_the_decode_goes_on(tok, name):
    factory, scripts, want, counted = HOSTILE[name]
    env = _env(f"hostile_{name}", factory)
    _, texts, calls = _decode(tok, env, scripts, [99] * len(scripts))
    assert texts == want
    for outcome, n in counted.items():
        assert calls.outcomes[outcome] == n, calls.outcomes
    _, texts, _ = _decode(tok, GUESS, ["3?"], [3])  # (and another environment goes on as before)
    assert texts == ["3?[=<eos>]"]


def test_a_factory_environment_is_checked_at_definition():
    with pytest.raises(ValueError, match="tools or a factory"):
        Environment("x", "", GUESS.tools, GUESS.parse, factory=Greeting, open="", end="?", close="")
    with pytest.raises(ValueError, match="three different characters"):
        Environment("x", "", (), GUESS.parse, factory=Greeting, open="?", end="?", close="")
    with pytest.raises(ValueError, match="three different characters"):  # (only an episode may drop them)
        Environment("x", "", GUESS.tools, GUESS.parse, open="", end="?", close="")
    assert [t.__name__ for t in GUESS.tools] == ["guess"] and pickle.dumps(Greeting())
    assert list(GUESS.schemas["guess"]["properties"]) == ["n"]  # (read as bound: `self` is no argument)


# ------------------------------------------------------------------------------------------------ the task, the reference
def test_the_references_targets_replay_on_their_episodes_and_a_wrong_reply_is_refused(tok):
    from tinygrpo.data.tasks.guess_number import build
    from tinygrpo.sft.train import target_replies

    rows = build()["validation"][:200]
    targets = [r["answer"] for r in rows]
    spans = target_replies(targets, GUESS, "guess_number/validation", rows)
    for target, s in zip(targets, spans, strict=True):
        assert "".join(target[a:b] for a, b in s) == "".join(c for c in target if c in "<>=")
    bad = [{**rows[0], "target": (rows[0]["target"] + 1) % N}]
    with pytest.raises(ValueError, match="row 1: the target's reply"):
        target_replies([targets[0]], GUESS, "guess_number/validation", bad)
    assert all(found_in(t + EOS, r["target"]) for t, r in zip(targets, rows, strict=True))
    assert guess_found([t + EOS for t in targets], [r["target"] for r in rows]) == [1.0] * len(rows)


def test_the_guess_number_build_writes_the_committed_files_with_their_twelve_turn_golds(tmp_path):
    """The task's build, written afresh, is byte for byte the committed data/guess_number/ (every split and the
    manifest), and golds of exactly MAX_TURNS turns are in every split: the cap keeps them (an episode is drawn
    again only when it takes more turns than the cap)."""
    from tinygrpo.data.tasks.guess_number import TASK

    committed = Path(__file__).resolve().parent.parent / "data" / "guess_number"
    TASK.write(tmp_path)
    built = tmp_path / "guess_number"
    names = sorted(p.name for p in committed.iterdir())
    assert sorted(p.name for p in built.iterdir()) == names and "manifest.json" in names
    for name in names:
        assert (built / name).read_bytes() == (committed / name).read_bytes(), name
    for name in names:
        if name.endswith(".jsonl"):
            turns = [
                json.loads(line)["answer"].count("?") for line in (committed / name).read_text().splitlines()
            ]
            assert max(turns) == MAX_TURNS and turns.count(MAX_TURNS) > 0, name


@pytest.mark.slow
def test_a_run_on_two_processes_plays_its_episodes(tok, tmp_path):
    """Two processes, each its own episodes and worker: the global metrics, the rewards read back from the logged
    transcripts, the report's greyed observations."""
    model = _biased(tok, 2)
    ref = tmp_path / "ref"
    model.save_pretrained(ref)
    tok.save_pretrained(ref)
    out = tmp_path / "run"
    argv = [
        "--config",
        "configs/guess_number.yaml",
        "--model_name_or_path",
        str(ref),
        "--output_dir",
        str(out),
    ]
    argv += "--per_device_train_batch_size 32 --max_steps 2 --logging_steps 1 --eval_steps 2 --save_steps 0".split()
    argv += (
        "--dataset_test_split validation --disable_tqdm true --make_plots false --torch_num_threads 1".split()
    )
    proc = launch_two(argv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "tools/call_frequency" in r]
    assert [r["step"] for r in steps] == [1, 2] and all(r["num_completions"] >= 64 * r["step"] for r in steps)
    assert all(r["tools/call_frequency"] > 0 for r in steps)
    logged = [json.loads(x) for x in (out / "completions.jsonl").read_text().splitlines()]
    for c in logged:
        turns, found = turns_of(c["completion"])
        assert math.isclose(c["reward"], (MAX_TURNS + 1 - turns) / MAX_TURNS * found, abs_tol=1e-6)
    assert 'class="tok tool"' in (out / "report.html").read_text()


@pytest.mark.parametrize("bad", [3.5, 64, -1, 1e9, "3", True, None, float("nan")])
def test_a_target_that_is_not_an_integer_in_range_is_refused_by_the_episode_and_the_verifier(bad):
    """A row's target must be the hidden number itself, an integer in [0, 64): 3.5 is not played (or scored) as 3,
    nor 64 as a number the replies can never find; the episode's reset and the verifier both refuse it, in words
    that name the value. 3.0 (a number column's integer) is 3."""
    from rewards.guess_number import hidden
    from tinygrpo.rollout.environments.guess_number import GuessNumber

    with pytest.raises(ValueError, match=r"target .*: the hidden number is an integer in \[0, 64\)"):
        GuessNumber().reset(target=bad)
    with pytest.raises(ValueError, match=r"the hidden number is an integer"):
        guess_found(["32?<3?=" + EOS], [bad])
    assert [hidden(t) for t in (0, 3, 3.0, 63)] == [0, 3, 3, 63]


class ResetRaises(Greeting):
    def reset(self, target: int, **row) -> str:
        raise RuntimeError(f"no room for {target}")


def test_an_environment_that_fails_everywhere_is_named_in_the_error_with_its_outcomes_and_cause(tok):
    """Every episode's reset raises: the decode counts it, the run's tally (ToolUse.answered, shared by its decodes)
    keeps the count and the first cause, and the error of a run whose rewards then apply to nothing names the
    environment, the outcome, its count and the cause, before the reward functions (which had nothing to read)."""
    from tinygrpo.rollout.scoring import no_reward_applies
    from tinygrpo.rollout.tool_calls import failures_line

    env = _env("resets_raise", ResetRaises)
    _, texts, calls = _decode(tok, env, ["4?", "5?", "6?"], [4, 5, 6])
    assert calls.outcomes["reset_raised"] == 3 and texts == ["[!<eos>]"] * 3
    assert no_reward_applies(3, ["guess_turns"]).startswith("no reward function applies")  # (no environment)
    message = no_reward_applies(3, ["guess_turns"], failures_line(env.name, calls.answered))
    assert message.startswith(
        "the environment resets_raise answered reset_raised 3 times (RuntimeError: no room for 4), lost_instance "
    )
    assert "no reward function applies to any of the 3 samples" in message and message.endswith(
        "and the environment"
    )


def test_a_runs_tally_is_shared_by_its_decodes_and_not_by_another_run(tok):
    """ToolUse.answered: every decode of a run (with_rows copies, sessions) adds to one tally; another run's ToolUse
    starts from none (the error of one run never quotes another's failures)."""
    use = ToolUse(_env("resets_raise", ResetRaises), tok, 4)
    for _ in range(2):
        use.with_rows({"target": [4, 5]}).session(2)
    assert use.answered["reset_raised"] == (4, "RuntimeError: no room for 4")
    assert use.failures().startswith("the environment resets_raise answered reset_raised 4 times")
    assert ToolUse(use.env, tok, 4).failures() == ""
