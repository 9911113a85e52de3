"""How many samples each prompt of a step gets (`sample_allocation`): pure functions of the pass-rate estimates.

With binary rewards and a pass rate p, a group of n samples carries signal (its rewards differ) with probability
1 - p^n - (1 - p)^n. One G for every prompt spends most samples where that is near 0: late in a run most prompts are
solved (p near 1), and the few that are not need many samples to show a right answer. The rules here spend the same
budget prompt by prompt, in units of `allocation_unit` samples (tinygrpo/algorithm/group_sizes.py):

    fixed         G for every prompt (GRPO).
    knapsack      the step's P * G samples split across its P prompts to maximise the summed value
                  (1 - p^n - (1 - p)^n) * p (1 - p)^2 of n samples at each prompt's estimated pass rate (Knapsack RL,
                  Li et al. 2025, arXiv 2509.25849: the chance of a non-zero gradient times its information gain), at
                  least one unit and at most `max_num_generations` samples each.
    screen        one unit of each prompt first, then the rest of a group of G only where the unit's rewards differ or
                  the prompt is known to be hard (SPEED, Zhang et al. 2025, arXiv 2506.09016: screen with a few
                  samples, spend full groups on the prompts of intermediate pass rate); tinygrpo/rollout/passes.py's
                  `screen`.
    until_signal  one unit of each prompt, then one more unit at a time of each prompt whose rewards are all alike,
                  until they differ, the prompt reaches `max_num_generations` or the round its budget of P * G
                  (Reinforce-Ada, Xiong et al. 2025, arXiv 2510.04996: sample a prompt until both outcomes appear);
                  tinygrpo/rollout/passes.py's `until_signal`.

The estimate of a prompt is its pass-rate EMA (tinygrpo/rollout/prompts.py), kept inside [c, 1 - c] with
c = 1 / (2 (n + 1)) after n samples of it: an estimate of 0 or 1 from a few samples is not a certainty (Jeffreys'
estimate of a binomial rate with no success is 1 / (2 (n + 1))). An unseen prompt takes the mean estimate of the seen
ones (0.5 before any): the policy's level, not a guess about that prompt.
"""

from __future__ import annotations

import torch
from torch import Tensor

SAMPLE_ALLOCATIONS = ("fixed", "knapsack", "screen", "until_signal")


def signal_probability(p: Tensor, n: Tensor) -> Tensor:
    """The probability that n samples at pass rate p are not all equal: 1 - p^n - (1 - p)^n."""
    return 1 - p.pow(n) - (1 - p).pow(n)


def knapsack_value(p: Tensor, n: Tensor) -> Tensor:
    """Knapsack RL's value of n samples of a prompt at pass rate p: the probability of a non-zero gradient times the
    information gain of that gradient, p (1 - p)^2 (Li et al. 2025, eq. for InfoGain)."""
    return signal_probability(p, n) * p * (1 - p).square()


def pass_rate_estimates(pass_rate: Tensor, samples: Tensor) -> Tensor:
    """(P,) EMA pass rates (NaN = unseen) and sample counts -> the estimates the allocation reads (the module
    docstring): inside [c, 1 - c], c = 1 / (2 (n + 1)); unseen prompts at the mean of the seen ones (0.5 if none)."""
    p = pass_rate.double()
    seen = ~p.isnan()
    prior = float(p[seen].mean()) if bool(seen.any()) else 0.5
    c = 0.5 / (samples.double() + 1)
    return torch.where(seen, torch.minimum(torch.maximum(p, c), 1 - c), torch.full_like(p, prior))


def knapsack_units(p: Tensor, budget: int, unit: int, max_units: int) -> list[int]:
    """(P,) pass-rate estimates -> units per prompt, each in [1, max_units], summing to `budget` units, that maximise
    the summed knapsack_value of unit * k samples. The value is concave in n (each added sample adds
    p^n (1 - p) + (1 - p)^n p, which falls with n), so taking the `budget - P` largest marginal gains over every
    prompt's next units is exact (a separable concave knapsack); ties go to the earlier prompt."""
    P = p.numel()
    if not P <= budget <= P * max_units:
        raise ValueError(f"a budget of {budget} units cannot give {P} prompts between 1 and {max_units} each")
    n = torch.arange(1, max_units + 1, dtype=torch.float64) * unit  # (K,) samples at k = 1..K units
    value = knapsack_value(p.double()[:, None], n[None, :])  # (P, K)
    gains = (value[:, 1:] - value[:, :-1]).reshape(-1)  # (P * (K - 1),) the k-th unit's gain, row by row
    order = torch.sort(-gains, stable=True).indices[: budget - P]
    extra = torch.bincount(order // max(max_units - 1, 1), minlength=P) if max_units > 1 else torch.zeros(P)
    return [1 + int(k) for k in extra.tolist()]
