"""SIGTERM and Ctrl-C as exceptions: what `train` and `sweep` (its coordinator and its workers)
share so that a cluster's preemption or time limit stops them cleanly instead of killing them.
Standard library only: the sweep coordinator imports it before any worker has started."""
from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path
from typing import Iterator, List, Optional, Tuple


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by SIGTERM or Ctrl-C (SIGINT). Its status is ``interrupted`` and rerunning the
    same command resumes it from ``step``, its last checkpoint (after a SIGTERM, the step it was at).
    ``exit_code`` is the shell's convention for the signal: 143 (128 + 15) or 130 (128 + 2)."""

    def __init__(self, signal_name: str = "SIGTERM", run_dir: Optional[Path] = None, step: Optional[int] = None):
        super().__init__(signal_name)
        self.signal_name, self.run_dir, self.step = signal_name, run_dir, step

    @property
    def exit_code(self) -> int:
        return 128 + int(getattr(signal, self.signal_name, signal.SIGINT))

    def message(self, command: str) -> str:
        """One line for the user: what stopped the run, what is kept, the command that resumes it."""
        where = f" in {self.run_dir}" if self.run_dir else ""
        kept = f"checkpoint at step {self.step}{where}" if self.step else f"no checkpoint yet{where}"
        return f"run interrupted by {self.signal_name} ({kept}); resume with: {command}"


class SweepInterrupted(RunInterrupted):
    """A sweep stopped by SIGTERM or Ctrl-C once its workers have recorded their runs: ``runs`` are
    (name, step) of the runs it had in progress (step None: no checkpoint yet). Finished runs are
    kept, and rerunning the same command resumes the others."""

    def __init__(self, signal_name: str, runs: List[Tuple[str, Optional[int]]]):
        super().__init__(signal_name)
        self.runs = runs

    def message(self, command: str) -> str:
        shown = "; ".join(f"{name} at step {step}" if step else f"{name} (no checkpoint yet)"
                          for name, step in self.runs[:4]) + ("; ..." if len(self.runs) > 4 else "")
        kept = f"runs in progress checkpointed: {shown}; " if self.runs else ""
        return (f"sweep interrupted by {self.signal_name} ({kept}finished runs are kept); "
                f"resume with: {command}")


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises ``RunInterrupted`` in the main thread, once: a scheduler that signals a whole
    process group and a coordinator that passes the signal on to its workers send a process two,
    and the second must not cut short the recording the first set off.

    Inside a Lightning fit, validate or test, Lightning installs its own handler, which calls this one
    too: there it must not raise (that would cut a step in half); Lightning stops at the end of the
    step and RunCheckpoint saves. It still counts as the one SIGTERM."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen = []

    def handler(signum, frame):
        if seen:
            return
        seen.append(signum)
        if signal.getsignal(signal.SIGTERM) is handler:
            raise RunInterrupted("SIGTERM")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def sigterm_held() -> Iterator[None]:
    """A SIGTERM arriving in the body waits until it ends (the kernel holds it), so that a record
    the body writes is written whole and once."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
