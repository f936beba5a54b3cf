"""What a sweep shows of its runs in progress: each busy worker's run, read from the progress record
its training callback keeps in the run dir (``arch_zoo/progress.py``), one line per run."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Dict, List

from ..progress import LiveLines
from ..rundir import PROGRESS, read_json
from .worker import Task


class SweepProgress:
    """``tick(busy tasks)`` shows a line per run a worker has in hand that has written a record since
    it was handed out (a record left by an earlier attempt or rung says nothing about this one)."""

    def __init__(self, console: LiveLines, label: Callable[[str], str]):
        self.console, self.label = console, label
        self._since: Dict[str, float] = {}  # run id -> when it was first seen in a worker's hands (time.time())

    def tick(self, busy: List[Task]) -> None:
        now = time.time()
        self._since = {t.run_id: self._since.get(t.run_id, now) for t in busy}
        rows = {}
        for task in busy:
            record = read_json(Path(task.run_dir) / PROGRESS)
            if _fresh(record, self._since[task.run_id]):
                rows[task.run_id] = (self.label(task.run_id), record)
        self.console.show(rows)

    def log(self, line: str) -> None:
        self.console.log(line)

    def close(self) -> None:
        self.console.close()


def _fresh(record, since: float) -> bool:
    # the launcher ticks as it hands a run out, so ``since`` precedes every record of this attempt
    return isinstance(record, dict) and isinstance(record.get("step"), int) and \
        isinstance(record.get("max_steps"), int) and float(record.get("updated") or 0) >= since
