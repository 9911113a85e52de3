"""Tool calls (tinygrpo/rollout/environment.py, tinygrpo/rollout/tool_calls.py): the calculator's replies, a decode that feeds them
against completions written out by hand, the environment's tokens of real rollouts on both backends against the
tool's output, and the loss: exactly no gradient on the environment's tokens, and the masked loss against the same
completion's per-token terms summed without them."""

from __future__ import annotations

import math
import time

import pytest
import torch
from _numerics import F64_EPS

from tiny_lm import TinyLMConfig, TinyLMForCausalLM
from tiny_lm.tokenization_tiny_lm import build_tokenizer
from tinygrpo.algorithm.policy_losses import LossConfig
from tinygrpo.model.backend import GenericBackend, GroupedBackend
from tinygrpo.model.text import decode_completions
from tinygrpo.rollout.config import SamplingParams
from tinygrpo.rollout.environment import OUTCOMES, Environment, get_environment
from tinygrpo.rollout.round import Batch
from tinygrpo.rollout.sampling import completion_logits, decode, sample_completions
from tinygrpo.rollout.tool_calls import ToolUse, policy_mask
from tinygrpo.run.config import GRPOConfig
from tinygrpo.update.loss import LossInputs, grpo_loss

CHARS = "0123456789*+=<>?"  # no '-': a negative result is a reply the tokenizer cannot write
CALC = get_environment("calculator")


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(CHARS)


# ------------------------------------------------------------------------------------------------ the environment
@pytest.mark.parametrize(
    "call,reply,outcome",
    [
        ("12*7", "84>", "ok"),
        ("999*99", "98901>", "ok"),
        ("12+30", "42>", "ok"),
        ("12-30", "-18>", "ok"),  # (exact: the environment does not know the tokenizer)
        ("1000000*2", "?>", "raised"),  # out of range
        ("12*", "?>", "malformed"),
        ("", "?>", "malformed"),
        ("1*2*3", "?>", "malformed"),
        ("12=3", "?>", "malformed"),
    ],
)
def test_the_calculator_answers_exactly_and_fails_as_text(call, reply, outcome):
    got = CALC.call(call)
    assert (got.text, got.outcome) == (reply, outcome) and outcome in OUTCOMES


def test_the_one_digit_calculator_refuses_a_longer_factor_and_other_tools():
    env = get_environment("calculator_one_digit")
    assert env.call("123*7").text == "861>"
    assert (env.call("12*34").text, env.call("12*34").outcome) == ("?>", "raised")
    assert env.call("12+3").outcome == "unknown_tool"


def _hang(a: int) -> int:
    """Never returns.

    Args:
        a: Anything.
    """
    while True:  # (sleeping: an abandoned thread of the test must not spin on a core)
        time.sleep(0.01)


def _boom(a: int) -> int:
    """Raises.

    Args:
        a: Anything.
    """
    raise RuntimeError("boom")


def _half(a: int) -> float:
    """A half.

    Args:
        a: The number halved.
    """
    return a / 2


@pytest.mark.kills
@pytest.mark.parametrize("thread", [False, True])
def test_a_tool_that_raises_or_hangs_is_an_error_reply_and_the_caller_goes_on(thread):
    names = {"h": "_hang", "b": "_boom", "x": "_half"}
    env = Environment(
        "faulty", "tools that fail", (_hang, _boom, _half), lambda s: (names[s[0]], [s[1:]]), timeout_s=0.5
    )  # (a deadline far past what the calls that return take, even on a loaded machine: only the hang reaches it)

    def calls():
        return [env.call(c) for c in ("h1", "b1", "x3", "xq", "z1", "")]

    if thread:  # (from another thread than the main one, as from the main one: the worker's deadline)
        import threading

        got: list = []
        worker = threading.Thread(target=lambda: got.extend(calls()))
        worker.start()
        worker.join(60)
    else:
        got = calls()
    assert [(r.text, r.outcome) for r in got] == [
        ("?>", "timeout"),
        ("?>", "raised"),
        ("1.5>", "ok"),
        ("?>", "bad_arguments"),  # "q" is no integer (the hint says int)
        ("?>", "malformed"),  # parse raised KeyError: a parser's own error is a malformed call too
        ("?>", "malformed"),
    ]


def test_a_tool_without_hints_or_docstring_is_refused_at_definition():
    def bare(a):
        return a

    with pytest.raises(ValueError, match="tool bare"):
        Environment("bad", "no hints", (bare,), lambda s: ("bare", [s]))


# ------------------------------------------------------------------------------------------------ decoding
class ScriptedDecoder:
    """A policy that writes its script whatever it is fed: row r proposes script[r]'s next character (then <eos>).
    A fed token is told apart from its own by its value: the scripts below never propose, just after a call,
    a character of that call's reply."""

    def __init__(self, tok, scripts: list[str]) -> None:
        self.tok, self.V = tok, len(tok)
        self.scripts = [tok.convert_tokens_to_ids(list(s)) + [tok.eos_token_id] for s in scripts]
        self.at = [0] * len(scripts)
        self.live = list(range(len(scripts)))
        self.logits = self._logits()

    def _logits(self) -> torch.Tensor:
        out = torch.full((len(self.live), self.V), -30.0)
        for a, r in enumerate(self.live):
            out[a, self.scripts[r][min(self.at[r], len(self.scripts[r]) - 1)]] = 30.0
        return out

    def keep(self, rows: torch.Tensor) -> None:
        self.live = [self.live[i] for i in rows.tolist()]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        for r, t in zip(self.live, tokens.tolist(), strict=True):
            if self.at[r] < len(self.scripts[r]) and t == self.scripts[r][self.at[r]]:
                self.at[r] += 1  # its own token (a fed one is not)
        self.logits = self._logits()
        return self.logits


# (script, what the completion must read, with the environment's tokens in brackets), with a cap of 2 calls
WRITTEN_OUT = [
    ("<12*7=+<3*4=", "<12*7=[84>]+<3*4=[12>]<eos>"),
    ("<5*5=1", "<5*5=[25>]1<eos>"),  # the policy goes on after the reply
    ("<12**3=1", "<12**3=[?>]1<eos>"),  # malformed
    ("<2+2=<3*3=<4*4=1", "<2+2=[4>]<3*3=[9>]<4*4=1<eos>"),  # the third call is past the cap: not answered
    ("<2*3", "<2*3<eos>"),  # <eos> inside a call: no reply
    ("12*7=84", "12*7=84<eos>"),  # no call at all
    ("<3+4=1<5", "<3+4=[7>]1<5<eos>"),  # an open call at the end: nothing owed
]


def _bracketed(tok, ids: list[int], fed: list[bool]) -> str:
    out = ""
    for j, (t, f) in enumerate(zip(ids, fed, strict=True)):
        opens = f and (j == 0 or not fed[j - 1])
        closes = f and (j + 1 == len(fed) or not fed[j + 1])
        out += ("[" if opens else "") + tok.convert_ids_to_tokens(t) + ("]" if closes else "")
    return out


def test_a_decode_feeds_each_call_its_reply_as_written_out_by_hand(tok):
    scripts = [s for s, _ in WRITTEN_OUT]
    dec = ScriptedDecoder(tok, scripts)
    tools = ToolUse(CALC, tok, max_calls=2).session(len(scripts))
    ro = decode(dec, SamplingParams.greedy(40), eos_token_id=tok.eos_token_id, pad_token_id=0, tools=tools)
    for i, (_, want) in enumerate(WRITTEN_OUT):
        n = int(ro.completion_mask[i].sum())
        got = _bracketed(tok, ro.completion_ids[i, :n].tolist(), ro.tool_mask[i, :n].tolist())
        assert got == want
        assert int(ro.tool_calls[i]) == want.count("[") and int(ro.tool_failures[i]) == want.count("[?")
    assert not ro.tool_mask[ro.completion_mask == 0].any()


def test_a_reply_the_tokenizer_cannot_write_is_the_error_and_a_cut_reply_stays_cut(tok):
    dec = ScriptedDecoder(tok, ["<2+5=1", "<99*99="])
    tools = ToolUse(CALC, tok, max_calls=4).session(2)
    # "2+5" is fine; a 7-token budget cuts "<99*99=" + "9801>" after "98"
    ro = decode(dec, SamplingParams.greedy(9), eos_token_id=tok.eos_token_id, pad_token_id=0, tools=tools)
    n = ro.completion_mask.sum(1).tolist()
    assert (
        _bracketed(tok, ro.completion_ids[1, : n[1]].tolist(), ro.tool_mask[1, : n[1]].tolist())
        == "<99*99=[98]"
    )
    assert not bool(ro.is_eos[1])
    dec = ScriptedDecoder(tok, ["<2*3=1", "<5*1=1"])
    minus = Environment("minus", "always negative", CALC.tools, lambda s: ("subtract", s.split("*")))
    tools = ToolUse(minus, tok, max_calls=4).session(2)
    ro = decode(dec, SamplingParams.greedy(12), eos_token_id=tok.eos_token_id, pad_token_id=0, tools=tools)
    n = int(ro.completion_mask[0].sum())
    assert (
        _bracketed(tok, ro.completion_ids[0, :n].tolist(), ro.tool_mask[0, :n].tolist()) == "<2*3=[?>]1<eos>"
    )
    assert tools.outcomes["unwritable"] == 1 and tools.outcomes["ok"] == 1  # (5 - 1 = 4 is written)


def _model(tok, seed: int) -> TinyLMForCausalLM:
    torch.manual_seed(seed)
    return TinyLMForCausalLM(TinyLMConfig(vocab_size=len(tok), n_positions=64, initializer_range=0.3)).eval()


def _calls_in(text_ids: list[int], fed: list[bool], tok, env: Environment) -> list[tuple[str, str]]:
    """From a completion's tokens and which the environment fed: each call's text (the policy's tokens from its
    open to its end) and the reply that followed it (the fed run)."""
    out, j = [], 0
    chars = tok.convert_ids_to_tokens(text_ids)
    while j < len(chars):
        if fed[j]:
            k = j
            while k < len(chars) and fed[k]:
                k += 1
            before = "".join(chars[:j])
            assert before.endswith(env.end) and env.open in before, before
            out.append((before[before.rindex(env.open) + 1 : -1], "".join(chars[j:k])))
            j = k
        else:
            j += 1
    return out


@pytest.mark.parametrize("backend", ["grouped", "generic"])
def test_the_environment_tokens_of_a_real_rollout_are_exactly_the_tools_output(tok, backend):
    """A random policy at temperature 1.5 on two prompts x 128 samples: every run of fed tokens follows a call and
    is that call's reply (cut only by the length cap); no policy token is marked; the two backends draw the same."""
    model = _model(tok, 0)
    enc = tok(["12*34=", "7*8="], padding=True, return_tensors="pt")
    be = GroupedBackend() if backend == "grouped" else GenericBackend()
    params, gen = SamplingParams(24, 1.5), torch.Generator().manual_seed(3)
    use = ToolUse(CALC, tok, max_calls=3)
    kw = dict(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, backend=be, tools=use)
    ro = sample_completions(model, enc["input_ids"], enc["attention_mask"], 128, params, gen, **kw)
    calls = 0
    for i in range(ro.completion_ids.size(0)):
        n = int(ro.completion_mask[i].sum())
        ids, fed = ro.completion_ids[i, :n].tolist(), ro.tool_mask[i, :n].tolist()
        found = _calls_in(ids, fed, tok, CALC)
        for k, (call, reply) in enumerate(found):
            full = CALC.call(call).text
            if "-" in full:
                full = "?>"
            last = k == len(found) - 1
            assert reply == full or (last and n == 24 and full.startswith(reply)), (call, reply)
        # (a call ended by the last token allowed is answered, its reply cut whole)
        cut_whole = n == 24 and not bool(ro.is_eos[i]) and not fed[-1]
        assert len(found) <= int(ro.tool_calls[i]) <= min(3, len(found) + cut_whole)
        calls += len(found)
    assert calls > 20  # (the test needs calls)
    assert not ro.tool_mask[ro.completion_mask == 0].any()
    if backend == "generic":  # the grouped decode drew the very same completions
        gen = torch.Generator().manual_seed(3)
        kw["backend"] = GroupedBackend()
        other = sample_completions(model, enc["input_ids"], enc["attention_mask"], 128, params, gen, **kw)
        assert torch.equal(other.completion_ids, ro.completion_ids) and torch.equal(
            other.tool_mask, ro.tool_mask
        )


# ------------------------------------------------------------------------------------------------ the loss
def _tool_batch(tok, seed: int = 0, dtype=torch.float64):
    """A real rollout with tool calls, as the update sees it: the environment's tokens out of the mask."""
    model = _model(tok, seed).to(dtype)
    enc = tok(["12*34=", "7*8="], padding=True, return_tensors="pt")
    params = SamplingParams(20, 1.5)
    use = ToolUse(CALC, tok, max_calls=3)
    ro = sample_completions(
        model,
        enc["input_ids"],
        enc["attention_mask"],
        16,
        params,
        torch.Generator().manual_seed(seed),
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tools=use,
    )
    mask = policy_mask(ro.completion_mask.float(), ro.tool_mask)
    adv = torch.randn(ro.completion_ids.size(0), generator=torch.Generator().manual_seed(seed), dtype=dtype)
    batch = Batch(
        enc["input_ids"],
        enc["attention_mask"],
        ro.completion_ids.clone(),  # (out of inference mode, as generation does)
        mask.to(dtype),
        adv,
        torch.zeros(adv.shape),
    )
    assert ro.tool_mask.any() and (ro.tool_mask.sum(1) > 0).sum() >= 3  # (the test needs several)
    return model, batch, ro


def _logits(model, batch: Batch, backend) -> torch.Tensor:
    return completion_logits(
        model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids, 16, batch.completion_mask, backend
    )


@pytest.mark.parametrize("backend", ["grouped", "generic"])
@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"beta": 0.1},  # the KL to a reference (k3)
        {"beta": 0.1, "kl_estimator": "full", "loss_type": "dapo"},
        {"entropy_coef": 0.05, "loss_type": "bnpo"},  # an entropy bonus
    ],
)
def test_the_loss_has_exactly_no_gradient_on_the_environments_tokens(tok, backend, fields):
    model, batch, ro = _tool_batch(tok)
    be = GroupedBackend() if backend == "grouped" else GenericBackend()
    logits = _logits(model, batch, be).detach().requires_grad_(True)
    cfg = GRPOConfig(num_generations=16, max_completion_length=20, **fields)
    ref = _model(tok, 9).double()
    ref_logits = _logits(ref, batch, be).detach()
    ref_logps = torch.log_softmax(ref_logits, -1).gather(-1, batch.completion_ids[..., None])[..., 0]
    n = batch.completion_ids.size(0)
    inputs = LossInputs(
        batch, rows=n, tokens=batch.completion_mask.sum(), ref_logps=ref_logps, ref_logits=ref_logits
    )
    num_items = batch.completion_mask.sum() if cfg.loss_type == "dapo" else None
    loss, _ = grpo_loss(
        logits,
        inputs,
        LossConfig.of(cfg),
        SamplingParams.of(cfg),
        num_items,
        entropy_coef=fields.get("entropy_coef", 0.0),
    )
    loss.backward()
    g = logits.grad.abs().sum(-1)  # (n, Tc)
    assert bool((g[ro.tool_mask] == 0).all())  # exactly
    own = batch.completion_mask.bool()
    assert bool((g[own] > 0).all())  # every one of the policy's own tokens moves


def test_the_masked_loss_is_the_sum_without_the_environments_tokens(tok):
    """grpo (per-sequence mean, then the mean over sequences) with a KL term, on-policy: the loss against the same
    completion's per-token terms, computed here from the log-probs, summed over the policy's tokens only."""
    model, batch, ro = _tool_batch(tok, seed=1)
    be = GroupedBackend()
    logits = _logits(model, batch, be)
    ref_logits = _logits(_model(tok, 9).double(), batch, be).detach()
    lp = torch.log_softmax(logits.detach(), -1).gather(-1, batch.completion_ids[..., None])[..., 0]
    ref_lp = torch.log_softmax(ref_logits, -1).gather(-1, batch.completion_ids[..., None])[..., 0]
    cfg = GRPOConfig(num_generations=16, max_completion_length=20, beta=0.1, loss_type="grpo")
    n = batch.completion_ids.size(0)
    inputs = LossInputs(batch, rows=n, tokens=batch.completion_mask.sum(), ref_logps=ref_lp)
    loss, _ = grpo_loss(logits, inputs, LossConfig.of(cfg), SamplingParams.of(cfg))
    expected = 0.0
    own = (ro.completion_mask.bool() & ~ro.tool_mask).tolist()
    for i in range(n):
        terms = []
        for t, keep in enumerate(own[i]):
            if keep:  # on-policy the ratio is 1: -A, plus beta x k3 = exp(r - lp) - (r - lp) - 1
                d = float(ref_lp[i, t] - lp[i, t])
                terms.append(-float(batch.advantages[i]) + 0.1 * (math.exp(d) - d - 1))
        expected += sum(terms) / len(terms)
    expected /= n
    assert loss.item() == pytest.approx(expected, rel=1e4 * F64_EPS, abs=1e4 * F64_EPS)
    # and with the environment's tokens counted, the loss differs: the mask does something
    counted = Batch(
        *[getattr(batch, f) for f in ("prompt_ids", "prompt_mask", "completion_ids")],
        ro.completion_mask.double(),
        batch.advantages,
        batch.rewards,
    )
    inputs = LossInputs(counted, rows=n, tokens=counted.completion_mask.sum(), ref_logps=ref_lp)
    assert grpo_loss(logits, inputs, LossConfig.of(cfg), SamplingParams.of(cfg))[0].item() != pytest.approx(
        expected
    )


def test_decoded_completions_keep_the_replies(tok):
    dec = ScriptedDecoder(tok, ["<12*7=1"])
    tools = ToolUse(CALC, tok, max_calls=2).session(1)
    ro = decode(dec, SamplingParams.greedy(20), eos_token_id=tok.eos_token_id, pad_token_id=0, tools=tools)
    assert decode_completions(tok, ro.completion_ids, ro.completion_mask) == ["<12*7=84>1<eos>"]


# ------------------------------------------------------------------------------------------------ a run
def test_a_run_with_the_calculator_trains_logs_and_reports_the_environments_tokens(tok, tmp_path):
    """Three steps of GRPO with the calculator, rewarded for any answered call: the step's tools/* metrics, the
    logged completions' token_tool (the environment's tokens, advantage 0 on each) and the report's grey cells."""
    import json

    from datasets import Dataset

    from tinygrpo.run.report import REPORT_FILE
    from tinygrpo.run.trainer import GRPOTrainer

    prompts = ["12*34=", "7*8=", "21*3=", "5*6="]
    ds = Dataset.from_dict({"prompt": prompts, "answer": ["408", "56", "63", "30"]})

    def answered(completions, **kw):
        return [float(">" in c) for c in completions]

    cfg = GRPOConfig(
        output_dir=str(tmp_path / "run"),
        environment="calculator",
        num_generations=8,
        per_device_train_batch_size=32,
        max_completion_length=16,
        temperature=1.5,
        max_steps=3,
        logging_steps=1,
        save_steps=0,
        dataset_test_split=None,
        disable_tqdm=True,
        make_plots=False,
        dynamic_sampling=False,
        explore_rounds=0,
        signal_forecast_prompts=0,
        seed=1,
    )
    GRPOTrainer(cfg, _model(tok, 0), tok, ds, reward_funcs=[answered]).train()
    out = tmp_path / "run"
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "tools/call_frequency" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert all(r["tools/call_frequency"] > 0 and 0 <= r["tools/failure_frequency"] <= 1 for r in steps)
    assert all(0 < r["tools/completions_with_calls"] <= 1 for r in steps)
    logged = [json.loads(x) for x in (out / "completions.jsonl").read_text().splitlines()]
    fed = [(c, j) for c in logged if "token_tool" in c for j, f in enumerate(c["token_tool"]) if f]
    assert fed, "no logged completion has a tool reply"
    assert all(c["token_advantage"][j] == 0 for c, j in fed)
    assert all(c["tokens"][j] in "0123456789?>" for c, j in fed)
    assert 'class="tok tool"' in (out / REPORT_FILE).read_text()


# ------------------------------------------------------------------------------------------------ the reference
def test_a_targets_replies_are_found_checked_and_left_out_of_the_sft_loss(tok):
    from tinygrpo.rollout.tool_calls import written_calls
    from tinygrpo.sft.train import encode_examples, target_replies

    assert written_calls("<37*48=1776>1776", CALC, 4) == [("37*48", 7, 12)]
    assert written_calls("<1*2=2><3*4=12>12", CALC, 1) == [("1*2", 5, 7)]  # (the cap, as decoding reads it)
    assert written_calls("1776", CALC, 4) == [] and written_calls("<37*48", CALC, 4) == []
    answers = ["<37*48=1776>1776", "56"]
    spans = target_replies(answers, CALC, "split")
    ids, _, labels = encode_examples(tok, ["37*48=", "7*8="], answers, spans)
    row = [
        tok.convert_ids_to_tokens(int(t)) if int(lab) != -100 else "_"
        for t, lab in zip(ids[0], labels[0], strict=True)
    ]
    assert "".join(row).rstrip("<eos>").endswith("<37*48=_____1776")  # the reply "1776>" carries no label
    assert int((labels[1] != -100).sum()) == 3  # "56" and <eos>, as without an environment
    with pytest.raises(ValueError, match=r"split row 2: the target's reply to the call '37\*48' is '1777>'"):
        target_replies(["<37*48=1776>1776", "<37*48=1777>1777"], CALC, "split")


def test_the_tool_reference_trains_and_is_evaluated_calling_the_tool(tmp_path):
    """Two SFT steps of the tool task's recipe on 64 problems: it trains, and its held-out completions are the
    policy's with the calculator's replies (a completion that calls gets a reply, from the tool)."""
    import json

    from tinygrpo.sft.train import SFTConfig, train_reference

    cfg = SFTConfig.for_task(
        "multiplication_tool", output_dir=str(tmp_path / "ref"), max_steps=2, train_size=64, logging_steps=0
    )
    summary = train_reference(cfg, verbose=False)
    assert summary["eval_problems"] == 500 and 0 <= summary["eval_accuracy"] <= 1
    assert set(summary["eval_formats"]) == {"direct", "tool", "scratchpad", "other"}
    saved = json.loads((tmp_path / "ref" / "sft_config.json").read_text())
    assert saved["environment"] == "calculator" and saved["mix_column"] == "tool"


def test_max_tool_calling_iterations_caps_the_calls_a_run_answers(tok):
    """The run's option over the environment's own cap (TRL's name): 1 answers one call of a completion, None
    keeps the environment's."""
    from tinygrpo.rollout.config import RolloutConfig
    from tinygrpo.rollout.tool_calls import tool_use

    capped = tool_use(RolloutConfig(environment="calculator", max_tool_calling_iterations=1), tok)
    default = tool_use(RolloutConfig(environment="calculator", max_tool_calling_iterations=None), tok)
    assert capped.max_calls == 1 and default.max_calls == CALC.max_calls > 1
    calls = capped.session(1)
    written = tok.convert_tokens_to_ids(list("<2+2=<3*3="))
    for t in written:  # the policy writes two calls; the first is answered, the second is not
        calls.next_tokens(torch.tensor([0]), torch.tensor([t]))
        while calls.owed[0]:
            calls.next_tokens(torch.tensor([0]), torch.tensor([t]))
    assert int(calls.calls[0]) == 1 and dict(calls.outcomes) == {"ok": 1}


@pytest.mark.slow
def test_the_one_digit_tool_answers_every_digit_and_every_gold_target_of_its_task():
    from tinygrpo.data.task import get_task
    from tinygrpo.sft.train import target_replies

    env = get_environment("calculator_one_digit")
    assert [env.call(f"37*{d}").text for d in range(10)] == [f"{37 * d}>" for d in range(10)]
    task = get_task("multiplication_tool_digits")
    rows = task.build()["validation"]
    targets = [r[task.reference["mix_column"]] for r in rows]  # (the worked targets its reference sees)
    spans = target_replies(targets, env, "multiplication_tool_digits/validation")  # (raises on a wrong reply)
    assert len(spans) == len(rows) and all(len(s) == 2 for s in spans)  # two calls a target: one per digit
