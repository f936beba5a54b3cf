"""Live progress of runs in training: the record a run keeps in its run dir, one line per run, and the
console that shows those lines while the runs go on.

A run's training callback writes ``progress.json`` (``rundir.PROGRESS``) every second or so:
``{step, max_steps, loss, tokens_per_s, eta_s, updated, pid}``. `arch-zoo train` shows its own record
as it goes; a sweep reads the record of each run its workers have in hand (workers are other
processes, and a file is what a crashed one leaves readable).

On a terminal the lines are redrawn in place below whatever the command prints; elsewhere (a CI log,
``| tee``) a run gets a plain line once it has run ``first_s`` seconds, then one whenever it has done
another tenth of its steps (``first_s`` apart at least) or ``quiet_s`` seconds have passed: a log shows
that a run moves without a line per step. A leaf module: the standard library only."""
from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Any, Callable, Dict, Mapping, Optional, TextIO, Tuple

REDRAW_S = 1.0  # how often a run's record is rewritten, and a terminal's lines redrawn
FIRST_S = 10.0  # plain output: nothing for a run's first seconds (a short run gets only its end line)
QUIET_S = 30.0  # plain output: at least one line per run this often


def duration(seconds: float) -> str:
    """'0:45', '12:03', '1:02:03'."""
    s = max(0, int(round(seconds)))
    h, m = divmod(s, 3600)
    m, s = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def progress_line(label: str, record: Mapping[str, Any]) -> str:
    """``label  step 120/400  loss 3.2140  1,234 tok/s  ETA 0:45`` from a progress record."""
    parts = [label, f"step {record['step']}/{record['max_steps']}"]
    loss = record.get("loss")
    if isinstance(loss, (int, float)):
        parts.append(f"loss {loss:.4f}")
    rate = record.get("tokens_per_s")
    if isinstance(rate, (int, float)) and rate > 0:
        parts.append(f"{rate:,.0f} tok/s")
    eta = record.get("eta_s")
    if isinstance(eta, (int, float)):
        parts.append(f"ETA {duration(eta)}")
    return "  ".join(parts)


def is_terminal(stream: TextIO) -> bool:
    """A terminal that understands cursor movement (not TERM=dumb, e.g. an editor's output pane)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"


class LiveLines:
    """One line per run in progress, under the lines a command prints for good (``log``).

    ``show({key: (label, record)})`` gives the runs in progress now; a run that is no longer given
    has ended (its end is the command's to print, with ``log``)."""

    def __init__(self, stream: Optional[TextIO] = None, terminal: Optional[bool] = None,
                 first_s: Optional[float] = None, quiet_s: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.stream = stream if stream is not None else sys.stdout
        self.terminal = is_terminal(self.stream) if terminal is None else terminal
        self.first_s = FIRST_S if first_s is None else first_s
        self.quiet_s = QUIET_S if quiet_s is None else quiet_s
        self.clock = clock
        self._drawn = 0  # terminal: how many live lines stand below the last permanent one
        self._lines: Dict[Any, str] = {}
        self._seen: Dict[Any, Tuple[float, Optional[float], int]] = {}  # plain: key -> (first seen, last
        # line at, the tenth of its steps it had reached then)

    def log(self, text: str) -> None:
        """A line for good (a run's end): above the live lines, which are drawn again below it."""
        if self.terminal:
            self._clear()
            self.stream.write(text + "\n")
            self._draw()
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def show(self, runs: Mapping[Any, Tuple[str, Mapping[str, Any]]]) -> None:
        now = self.clock()
        for key in [k for k in self._seen if k not in runs]:  # ended: a rerun of it starts afresh
            del self._seen[key]
        self._lines = {k: progress_line(label, record) for k, (label, record) in runs.items()}
        if self.terminal:
            self._clear()
            self._draw()
        else:
            for key, (label, record) in runs.items():
                if self._due(key, record, now):
                    self.stream.write(self._lines[key] + "\n")
        self.stream.flush()

    def close(self) -> None:
        """Take the live lines away (the command prints its results next)."""
        if self.terminal:
            self._clear()
            self.stream.flush()
        self._lines = {}

    def _due(self, key, record: Mapping[str, Any], now: float) -> bool:
        first, last, tenth = self._seen.setdefault(key, (now, None, 0))
        reached = int(10 * record["step"] / max(1, record["max_steps"]))
        if last is None:
            due = now - first >= self.first_s
        else:
            due = now - last >= self.quiet_s or (reached > tenth and now - last >= self.first_s)
        if due:
            self._seen[key] = (first, now, reached)
        return due

    def _clear(self) -> None:
        if self._drawn:  # up to the first live line, then erase from there to the end of the screen
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def _draw(self) -> None:
        width = _columns(self.stream) - 1  # a line that wrapped would take two to erase
        for line in self._lines.values():
            self.stream.write(line[:width] + "\n")
        self._drawn = len(self._lines)


def _columns(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, OSError, ValueError):
        return shutil.get_terminal_size().columns
