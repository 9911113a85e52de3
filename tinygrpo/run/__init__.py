"""A GRPO run. May import every other package of tinygrpo but the oracles; none imports it.

config.py      GRPOConfig, composed of the components' option groups, and its command line
launch.py      train_grpo.py's main: the checks and set-up before any expensive work, then the run
validation.py  the start-up checks of the run's inputs (data, tokenizer, model, rewards, sizes)
trainer.py     GRPOTrainer: one step, the loop around it, its checkpoints
checkpoint.py  checkpoints written whole and resumed exactly; the end of a run (final/, summary.json)
signals.py     Ctrl-C and SIGTERM stop at a step boundary; a run ends with its launcher
callbacks.py   transformers' TrainerCallbacks, called where TRL calls them
watch.py       runs that cannot learn, said while they run; the signal forecast before the first step
metrics.py     the metrics of one step (TRL's names)
logs.py        the run's JSON-lines logs: written whole, read, cut back on resume; the progress bar
report/        report.html, one self-contained page of a run
"""
