"""Studies built on the library: runs, reports and figures (the library never imports them).

python -m studies.bandit demo | chapter     the seed tutorials' tabular runs
python -m studies.compare                   tabular vs token-level GRPO on the seed bank
"""
