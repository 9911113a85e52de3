"""Stopping a run cleanly: Ctrl-C or SIGTERM asks for a stop at the next step boundary, where a checkpoint is exact
(StopOnSignal), and a run started by `accelerate launch` gets a SIGTERM when its launcher dies (stop_with_launcher)."""

from __future__ import annotations

import os
import signal
import threading

from tqdm.auto import tqdm


def stop_with_launcher() -> None:
    """Under `accelerate launch`, ask the kernel for a SIGTERM when the launcher dies (Linux): its plain launcher
    does not pass SIGTERM on, and the training process would run on as an orphan. SIGTERM stops at the next step
    boundary with a checkpoint, as Ctrl-C does."""
    if not any(k.startswith("ACCELERATE_") for k in os.environ):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return


class StopOnSignal:
    """Ctrl-C (SIGINT) or SIGTERM (what Docker, Kubernetes and Slurm send) asks for a stop at the next step
    boundary, where a checkpoint is exact; a second Ctrl-C stops at once. A SIGTERM after the first signal is taken
    as the same request (a launcher that dies on Ctrl-C sends one: see stop_with_launcher). Installed only in
    the main thread (signal handlers can be set nowhere else)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, verbose: bool) -> None:
        self.verbose = verbose
        self.requested = False
        self.last_step_done = False  # (set by the loop once no step is left: a signal then stops nothing)
        self.name = "interrupted"
        self._previous: dict = {}

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)

    def _handle(self, signum, frame) -> None:
        if self.requested:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt  # a second Ctrl-C: stop now, without a checkpoint
            return
        self.requested = True
        self.name = signal.Signals(signum).name
        if self.verbose and self.last_step_done:
            tqdm.write(f"{self.name}: the last step is done: finishing the end-of-run writes first")
        elif self.verbose:
            tqdm.write(f"{self.name}: stopping after this step and saving a checkpoint (again to abort)")
