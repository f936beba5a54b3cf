"""What a worker does with one run, whatever launched it (a local worker process or a Ray task):
take the run's lock, decide from its status whether to train, resume or leave it, call run_one."""
from __future__ import annotations

import os
import time
import traceback
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Deque, Dict, Iterable, Optional, Tuple

from .. import rundir
from ..rundir import FINISHED


@dataclass(frozen=True)
class Task:
    run_id: str
    run_dir: str
    config: Any  # ExperimentConfig (pickled to the worker)
    store_root: str
    retry: bool = False  # --retry-failed, and the run had failed or diverged when the sweep was planned
    seen: Optional[str] = None  # the status.json "updated" stamp seen then: only that failure is retried
    wait: bool = False  # block on a lock another process holds, instead of handing the task back
    stop_at: Optional[int] = None  # successive halving: stop (paused) at this rung step
    best: Optional[Tuple[str, str]] = None  # the sweep's metric and goal: the run keeps its best checkpoint by it


@dataclass
class Result:
    run_id: str
    outcome: str  # trained | skipped | busy
    status: str
    reason: Optional[str] = None
    seconds: float = 0.0  # inside run_one
    metrics: Dict[str, Any] = field(default_factory=dict)
    pid: int = 0
    began: float = 0.0  # time.monotonic() when run_one was called and when it returned: the gap
    ended: float = 0.0  # between runs in one worker is the machinery's cost per run


def execute(task: Task) -> Result:
    result = _execute(task)
    if not result.ended:
        result.began = result.ended = time.monotonic()
    return result


def _execute(task: Task) -> Result:
    from .store import Store, run_lock

    run_dir = Path(task.run_dir)
    with run_lock(run_dir, task.wait) as mine:
        if not mine:
            return Result(task.run_id, "busy", "running", pid=os.getpid())
        record = rundir.read_json(run_dir / rundir.STATUS) or {}
        status = record.get("status")
        if status in FINISHED + ("failed",):
            if task.retry and record.get("updated") == task.seen:
                Store(Path(task.store_root)).archive(task.run_id)
            else:  # finished, or failed and left as data; perhaps by another sweep process just now
                return Result(task.run_id, "skipped", status, record.get("reason"), metrics=_metrics(run_dir),
                              pid=os.getpid())
        began, started = time.monotonic(), time.perf_counter()
        try:
            from ..training.run import run_one

            result = run_one(task.config, run_dir, quiet=True, stop_at=task.stop_at, best=task.best)
        except (KeyboardInterrupt, SystemExit):  # Lightning turns Ctrl-C into SystemExit(1) mid-fit
            if (rundir.read_json(run_dir / rundir.STATUS) or {}).get("status") == "running":
                rundir.set_status(run_dir, "interrupted", reason="interrupted by the user")
            raise
        except Exception as exc:  # noqa: BLE001 - run_one records training crashes; this catches the rest
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
            (run_dir / rundir.ERROR).write_text(traceback.format_exc())
            rundir.set_status(run_dir, "failed", reason=reason)
            return Result(task.run_id, "trained", "failed", reason, time.perf_counter() - started, pid=os.getpid(),
                          began=began, ended=time.monotonic())
        return Result(task.run_id, "skipped" if result.skipped else "trained", result.status, result.reason,
                      time.perf_counter() - started, result.metrics, os.getpid(), began, time.monotonic())


def _metrics(run_dir: Path) -> Dict[str, Any]:
    return (rundir.read_json(run_dir / rundir.SUMMARY) or {}).get("final", {})


class TaskQueue:
    """Tasks in plan order. A task handed back as busy (another sweep process holds its run) goes
    to the back; once nothing else is left it is sent again to wait for that lock, so the sweep
    ends only when every run has finished, here or there."""

    def __init__(self, tasks: Iterable[Task]):
        self.pending: Deque[Task] = deque(tasks)
        self.busy: Deque[Task] = deque()

    def next(self) -> Optional[Task]:
        if self.pending:
            return self.pending.popleft()
        if self.busy:
            return replace(self.busy.popleft(), wait=True)
        return None

    def hand_back(self, task: Task) -> None:
        self.busy.append(task)

    def settle(self, task: Task, result: Result, on_result: Callable[[Task, Result], None]) -> None:
        """What every launcher does with a finished task: a busy one comes back later, any other
        outcome is the run's result."""
        if result.outcome == "busy":
            self.hand_back(task)
        else:
            on_result(task, result)

    def __bool__(self) -> bool:
        return bool(self.pending or self.busy)


def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(max(1, n))


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1
