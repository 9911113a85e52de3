"""Tabular GRPO/REINFORCE (the seed demo) against token-level GRPO/REINFORCE on the tiny char GPT, same questions.

    python -m studies.compare --output_dir runs/compare [--seeds 0 1 2 3 4] [--quick] [--docs docs]

On the seed demo's 36 questions a + b (a, b in 0..5, answers 0..12), every method samples groups of G = 8 answers
and is scored by greedy accuracy on the same 36 questions against the number of completions it has sampled:

  tabular REINFORCE / GRPO   `tinygrpo.oracles.bandit.train_demo` with the demo's settings (zero table, one random question
                             per step, 8 answers, SGD 0.08; GRPO: z-score, clip 0.2, exact KL 0.02 to the initial
                             table, zero-variance groups skipped). Seed i uses the demo's seed + i (42 + i for GRPO,
                             49 + i for REINFORCE), so seed 0 over the first 120 steps is the demo itself.
  token-level GRPO           `GRPOTrainer`, advantage_mode="grpo" (group z-score), beta = 0.02 with the exact
                             per-token KL (kl_estimator="full") to the starting model: the demo's KL coefficient.
  token-level REINFORCE      advantage_mode="reinforce" (raw 0/1 reward, no baseline) and beta = 0: like the demo's
                             REINFORCE, which has no KL term either.

Each token-level method starts from two SFT references (a 2-layer, 32-wide char GPT, 16 positions), trained per seed
with `tinygrpo.sft.train.train_reference`:
  format-only   every seed-bank prompt paired with each answer 0..12 once (468 rows): the model learns "a number
                then <eos>" and a near-uniform belief over 0..12, the transformer's analogue of the zero table.
  imperfect     the real answers of 12 of the 36 questions (a random subset per seed), for a short budget: it
                knows those 12 and a few more by generalisation, a fraction of the 36.
Token-level steps sample 8 prompts x 8 completions = 64 completions; the table samples 8 per step; every run gets
the same budget of sampled completions (19,200 by default: 2,400 table steps, 300 token-level steps; --quick: 640).

Outputs (in --output_dir): comparison.md, comparison.json (the results it is drawn from: mean and std over seeds,
the settings it names, the command and the machine), results.json (every curve of every seed),
accuracy_vs_completions.png, skipped_fraction.png, beliefs.png, plus the SFT references and the addition run's
files. `--docs docs` writes docs/results/comparison.json, docs/comparison.md (its page between markers that
`python -m studies.results` renders again from that file: `report.page`) and the three figures as well. A second table checks 2-digit addition: held-out
accuracy of the addition reference (checkpoints/reference, else trained with the SFT defaults) before and
after a token-level GRPO run with the trainer's defaults.

The package: `run.py` runs the experiments, `report.py` summarizes them and draws comparison.md from the summary,
`plots.py` draws the figures.
"""
