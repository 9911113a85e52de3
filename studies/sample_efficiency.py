"""Sample efficiency: where the samples go, how many updates they feed, the schedule; how soon the default reaches 99 %.

    python -m studies.sample_efficiency --docs docs            # every arm, 3 seeds, one run at a time
    python -m studies.sample_efficiency --seeds 42 --arms default "600 steps"   # a screen on one seed

The exploration study's runner (studies/exploration.py) with other arms: every run is `train_grpo.py` from
checkpoints/reference, one thread, trained on `train_without_validation` (9,000 problems) and evaluated every 10 steps
on `validation` (500 problems carved from the training problems): every choice is made on validation, the test split
is evaluated once per run at the end, for reporting. The question is the issue's goal of 99 % held-out within 30 s of
training: how many completions, and training seconds, until the first validation evaluation at or above 99 %, each
seed and the median (a seed that never gets there counts as infinitely late), and the accuracy at the end.

Writes OUTPUT_DIR/<arm>-seed<k>/ (the runs), OUTPUT_DIR/sample_efficiency.json and, with `--docs DIR`,
DIR/results/sample_efficiency.json (the results, each seed's seconds and completions to 99 % among them),
DIR/sample_efficiency.md (the page, drawn from that file alone by studies.exploration:page) and
DIR/sample_efficiency.png. `headline` draws the README's summary table from the same file.
"""

from __future__ import annotations

import sys

from .exploration import Study, run_study
from .results import each, markdown, median

# name -> (train_grpo.py flags, what it is). Each arm changes one thing of the default; "a + b" combines arms a and b.
ARMS: dict[str, tuple[list[str], str]] = {
    "default": (
        [],
        "train_grpo.py's defaults: 1000 steps of lr 2e-3 cosine, prompt_sampler_floor 0.05, 3 refills",
    ),
    "floor 0.01": (
        "--prompt_sampler_floor 0.01".split(),
        "a prompt whose groups were all right is drawn a fifth as often as under the default (weight 1 - p + "
        "0.01): fewer rollouts predicted to have zero variance (GRESO, Zheng et al. 2025, skips them outright)",
    ),
    "one refill": (
        "--max_dynamic_sampling_rounds 1".split(),
        "dynamic sampling (DAPO, Yu et al. 2025) refills the batch at most once a step instead of three times",
    ),
    "32 prompts": (
        "--per_device_train_batch_size 256".split(),
        "32 prompts x 8 a step instead of 64 x 8: twice the updates for the same samples",
    ),
    "lr 3e-3": (
        "--learning_rate 3e-3".split(),
        "a peak rate of 3e-3 instead of 2e-3",
    ),
    "600 steps": (
        "--max_steps 600".split(),
        "the cosine schedule over 600 steps instead of 1000: the rate falls sooner",
    ),
    "400 steps": (
        "--max_steps 400".split(),
        "the cosine schedule over 400 steps",
    ),
    "floor 0.2": (
        "--prompt_sampler_floor 0.2".split(),
        "the other way: a solved prompt is drawn four times as often as under the default, so that the sampler "
        "sees sooner a prompt the policy has forgotten",
    ),
    "G 16": (
        "--num_generations 16".split(),
        "16 samples of each of 32 prompts a step instead of 8 of 64 (the same 512): more groups with signal among "
        "the prompts solved rarely, the case Knapsack RL (Li et al. 2025) gives more samples",
    ),
    "2 iterations": (
        "--num_iterations 2 --max_generations 1000".split(),  # (max_steps counts optimizer steps: 2 a generation)
        "two clipped updates per generated batch instead of one (GRPO's mu, Shao et al. 2024): twice the updates "
        "for the same samples, the second off-policy by one update",
    ),
    "5 explore rounds": (
        "--explore_rounds 5".split(),
        "a prompt whose samples all failed is sampled again up to five times instead of three (the last three at "
        "T = 4): more chances to find the right answer of a prompt the policy fails (Reinforce-Ada, Xiong et al. 2025)",
    ),
    "knapsack": (
        "--sample_allocation knapsack".split(),
        "each step's 512 samples split prompt by prompt in units of 4 (at most 32 a prompt) by the value of a sample "
        "at the prompt's pass-rate estimate (Knapsack RL, Li et al. 2025): solved prompts get 4, uncertain ones more",
    ),
    "knapsack, unit 2": (
        "--sample_allocation knapsack --allocation_unit 2".split(),
        "the knapsack in units of 2: a solved prompt costs 2 samples",
    ),
    "screen": (
        "--sample_allocation screen".split(),
        "4 samples of each prompt first, 4 more only where they differ or the prompt was solved before but rarely "
        "(SPEED, Zhang et al. 2025): the rest of the batch from refills",
    ),
    "screen, unit 2": (
        "--sample_allocation screen --allocation_unit 2".split(),
        "a screen of 2 samples, then 6 more where they differ or the prompt is hard",
    ),
    "until signal": (
        "--sample_allocation until_signal".split(),
        "4 samples of each prompt, then 4 more at a time of each prompt whose samples all agree, until they differ, "
        "the prompt has 32 or the step's 512 are spent (Reinforce-Ada, Xiong et al. 2025)",
    ),
    "until signal, unit 2": (
        "--sample_allocation until_signal --allocation_unit 2".split(),
        "the same in units of 2: a prompt that differs in its first 2 samples costs 2",
    ),
}
# Combinations "a + b": arms a's and b's flags together (here the two that edged the default at 3 seeds).
PAIRS = [
    (
        "floor 0.01",
        "2 iterations",
        "the two changes above together: more of the samples where the signal is, and two updates from each batch",
    ),
]
ARMS |= {f"{a} + {b}": (ARMS[a][0] + ARMS[b][0], what) for a, b, what in PAIRS}

STUDY = Study(
    name="sample_efficiency",
    title="Sample-efficiency study",
    arms=ARMS,
    eval_steps=10,
    completions_at=0.99,
    per_seed_at=0.99,
    intro="The goal this study serves: 99 % held-out within 30 s of training and at least 99.5 % at the end "
    "(medians of 3 seeds). Choices are read from validation; the test column is for reporting.",
)

# The README's summary of the study (`headline`): these arms, each under its label there, then one row for the arms
# that reach 99 % on no seed.
HEADLINE = {
    "default": "default",
    "floor 0.01": "prompt_sampler_floor 0.01 (solved prompts drawn a fifth as often: the nearest our sampler comes "
    "to GRESO)",
    "2 iterations": "num_iterations 2 (two clipped updates per generation)",
    "floor 0.01 + 2 iterations": "both of the above",
    "one refill": "one refill instead of three",
}
NEVER = {
    "32 prompts": "32 prompts x 8",
    "G 16": "32 x 16 (G 16)",
    "600 steps": "a 600-step schedule",
    "floor 0.2": "floor 0.2",
}


def headline(results: dict) -> str:
    """The README's table of the study (docs/results/sample_efficiency.json): for the default, the two arms that
    edged it, their pair and one refill, each seed's final validation accuracy and seconds to 99 % (median, a seed
    that never got there counted as infinitely late); then the arms that reach 99 % on no seed, with the range of
    their final accuracies."""
    arms = {r["arm"]: r for r in results["arms"]}
    rows = []
    for arm, label in HEADLINE.items():
        r = arms[arm]
        seconds = list(r["per_seed_to"]["seconds"].values())
        med = median([float("inf") if s is None else s for s in seconds])
        rows.append(
            [
                label,
                each(list(r["validation_final"].values()), lambda x: f"{100 * x:.1f}") + " %",
                each(seconds, lambda s: "-" if s is None else f"{s:.1f}")
                + f" ({'not reached' if med == float('inf') else f'{med:.1f}'})",
            ]
        )
    never = [arms[a] for a in NEVER]
    finals = [x for r in never for x in r["validation_final"].values()]
    reached = any(s is not None for r in never for s in r["per_seed_to"]["seconds"].values())
    rows.append(
        [
            ", ".join(NEVER.values()),
            f"{100 * min(finals):.1f}-{100 * max(finals):.1f} %",
            "reached on some seeds (docs/sample_efficiency.md)" if reached else "not reached",
        ]
    )
    head = ["arm", "validation at the end, per seed", "s to 99 % on validation, per seed (median)"]
    return markdown(head, rows)


def main(argv: list[str] | None = None) -> int:
    return run_study(STUDY, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
