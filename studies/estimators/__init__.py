"""What each estimator estimates: the sampled gradient of every GRPO variant against the exact gradient of J.

    python -m studies.estimators --docs docs    # both policies, every variant, G = 2..32, K = 200 (~6 min)
    python -m studies.estimators --policies reference --variants grpo dr_grpo --G 4 --batches 50  # a look
    python -m studies.estimators --model_name_or_path DIR --prompts 1+2= 3+4= --G 2 --batches 8  # any model
    python -m studies.estimators --docs docs --rewrite_docs      # the docs again from the JSON, no run

Why. GRPO climbs J(theta) = mean over prompts x of sum_y pi(y | x) R(x, y). On this task every completion can be
listed (tinygrpo/oracles/exact.py), so for a batch of prompts J's gradient g* is known exactly, and so is each prompt's. One
GRPO step computes, from G sampled completions per prompt, a loss whose negated gradient g is meant to point along
g*. Where a variant's g points on average, how long it is and how noisy, is a property of the estimator alone
(advantages, normalisers, ratios), measured here for each variant and group size G, on a real transformer:

- cos(mean): the cosine of E g with g* (1: unbiased in direction). The plain cosine of the mean of K batches is
  pulled below 1 by their Monte Carlo noise alone (far below for a noisy estimator; it is in the JSON as
  cos_mean_raw), so |E g|^2 and <E g, u>^2 (u = g* / |g*|) are estimated by U-statistics, sums over pairs of
  DIFFERENT batches (1/(K(K-1)) sum_{j != k} <g_j, g_k>), which are unbiased: cos(mean) = sqrt(<E g, u>^2 / |E g|^2),
  above 1 by noise when E g is along g*.
- relative bias |E g - alpha g*| / |alpha g*|: the part of E g not along g*, relative to the part along it, from the
  same U-statistics (rel_bias2, its square, is 0 in expectation for an estimator unbiased in direction and can come
  out negative; rel_bias_raw is the plain |mean g - alpha g*| / |alpha g*|, noise included). It splits into the part
  outside the span of the prompts' exact gradients (rel_bias2_out: a bias within prompts, e.g. a pull towards short
  completions) and the rest (rel_bias2_in: E g weighs the prompts otherwise than J does); prompt_weights are E g's
  least-squares coefficients on the prompts' gradients over their mean (all 1 for an unbiased direction).
- scale alpha = <E g, g*> / |g*|^2: the step's length along g* (normalisers and the group std rescale it).
- relative variance E|g - E g|^2 / |E g|^2: unbiased sample variance over the unbiased |E g|^2.
- mean cos: the mean over batches of cos(g_k, g*), how well ONE step points; a batch without a group with signal
  gives g = 0 (the trainer takes no step there) and counts as cosine 0 (zero_frac says how often).
- A variant built for another objective (pass_at_k: pass@k) is also measured against that objective's exact
  gradient (own_target), mean_x k (1 - acc(x))^(k-1) grad acc(x).
Standard errors: delete-one jackknife over the K batches (a numerical delta method: each statistic is a smooth
function of sums over batches, recomputed with each batch left out); for the squared biases and cos(mean), at least
the standard deviation of a pair sum over a subspace where E g is zero (a degenerate U-statistic, whose jackknife SE
is itself noisy and can come out far too small), 2 tr(Sigma_sub^2) / (K (K - 1)), estimated from consecutive batches.
The standard error of the mean for mean cos. Completions per batch (P * G) are reported so that readers can compare
at equal samples.

How a batch becomes g: as the trainer's on-policy first mini-batch. `sample_completions` at temperature 1 (the
trainer's sampler and backend), the `accuracy` reward computed as tinygrpo/rollout/generation.py does, advantages by
`advantage_estimators.advantages` with the variant's settings, then the trainer's own `PolicyUpdate.prepare`
(zero-advantage groups left out, normalisers over the whole mini-batch, the dapo normaliser) and `PolicyUpdate.loss`
(`grpo_loss`, the ratio exactly 1), whose gradient w.r.t. the parameters, negated, is g. No dynamic sampling and no
explore rounds: the estimator of one batch. Every variant sees the same K batches (common random numbers), so
differences between variants are not sampling luck, and variants whose g coincide on every batch are reported.

Setup. Policies: `reference` (checkpoints/reference) and `mid` (60 steps of train_grpo.py's default recipe from the
reference, as the studies run it, trained into OUTPUT_DIR/policy-mid when missing). Prompts: from the `validation`
split of data/addition (every choice a study makes is on validation), shuffled with --seed, scanned in chunks of 32
with their exact expected accuracy, the first P whose accuracy is in --accuracy_range kept, per policy (a prompt
answered always or never has no gradient). Completions of at most 4 tokens, as the trainer's default.

Writes OUTPUT_DIR/estimators.json (every number; null where a statistic is undefined) and, with `--docs DIR`,
DIR/estimators.md (setup, what the numbers show, tables) and DIR/estimators.png.
"""

# The package (one concept a file): `variants.py` the GRPO variants measured and the study's defaults, `metrics.py`
# the pure statistics of K estimates against an exact gradient, `sampling.py` prompts, batches and each variant's
# estimate through the trainer's own code, `study.py` one policy's (variant, G) cells, `findings.py` the "what it
# shows" bullets, `report.py` estimators.md and estimators.png, `cli.py` the command line (`__main__.py` runs it).

from .cli import main, parse_args
from .findings import BULLETS, findings
from .metrics import (
    COINCIDE_RTOL,
    FINGERPRINT_DIMS,
    SPAN_STATISTICS,
    STATISTICS,
    coincide,
    coinciding_groups,
    estimator_metrics,
    fingerprint,
    jackknife_se,
)
from .report import WEIGHT_VARIANTS, plot, write_docs, write_markdown
from .sampling import (
    SCAN_CHUNK,
    Draw,
    Estimator,
    Sampler,
    answer_of,
    encode,
    exact_result,
    load_policy,
    one_process,
    pass_at_k_gradient,
    select_prompts,
    variant_config,
)
from .study import ensure_mid, shown, study_policy
from .variants import (
    DEFAULT_BATCHES,
    DEFAULT_G,
    DEFAULT_PROMPTS,
    DEFAULT_RANGE,
    MAX_COMPLETION_LENGTH,
    MID_STEPS,
    PASS_K,
    POLICIES,
    VARIANTS,
    Variant,
)

__all__ = [
    "BULLETS",
    "COINCIDE_RTOL",
    "DEFAULT_BATCHES",
    "DEFAULT_G",
    "DEFAULT_PROMPTS",
    "DEFAULT_RANGE",
    "FINGERPRINT_DIMS",
    "MAX_COMPLETION_LENGTH",
    "MID_STEPS",
    "PASS_K",
    "POLICIES",
    "SCAN_CHUNK",
    "SPAN_STATISTICS",
    "STATISTICS",
    "VARIANTS",
    "WEIGHT_VARIANTS",
    "Draw",
    "Estimator",
    "Sampler",
    "Variant",
    "answer_of",
    "coincide",
    "coinciding_groups",
    "encode",
    "ensure_mid",
    "estimator_metrics",
    "exact_result",
    "findings",
    "fingerprint",
    "jackknife_se",
    "load_policy",
    "main",
    "one_process",
    "parse_args",
    "pass_at_k_gradient",
    "plot",
    "select_prompts",
    "shown",
    "study_policy",
    "variant_config",
    "write_docs",
    "write_markdown",
]
