"""The run directory: what a run leaves behind, written atomically so a crash never leaves half a file.

    config.yaml      the fully resolved config (rebuilds the exact model)
    status.json      running | completed | diverged | failed | interrupted | paused | pruned, with the
                     reason and step, and ``attempts``: one record per call that trained (see
                     ``Attempt``); a run stopped at a successive-halving rung is ``paused`` (a sweep
                     may resume it) or ``pruned`` (the sweep decided it stops there), and ``rungs``
                     keeps its validation metrics at each rung step it stopped at
    metrics.csv      Lightning's CSVLogger: train loss, lr (every parameter group's) and validation
                     metrics over steps (``METRICS_STEPS``); a resumed run continues it from the rows
                     its checkpoint covers
    summary.json     final and best metrics, size, speed, memory, versions, git commit, attempts
    progress.json    while it trains, rewritten every second or so: step, max_steps, loss, tokens/s, ETA
                     (``arch_zoo/progress.py``): what a sweep shows of a run in progress
    tokenizer.json   the tokenizer, to decode the model's outputs
    checkpoints/last.ckpt
    checkpoints/best.ckpt  a sweep's runs: the weights at the best validation by the sweep's metric
                     (summary.json's ``best_checkpoint`` says which step, and its value)
    eval/<task>.json an lm_eval task's results (``arch-zoo eval``): metrics, their standard errors and
                     goals, how many examples, the checkpoint and step; reports read them as
                     metrics named ``eval/<task>/<metric>``
    branches/<steps>/ a WSD-S run's decay branches (``train.schedule.decays``), each a run directory
                     of its own: the separate run of ``steps`` steps it equals (training/branches.py)
    plugins/<sha256[:16]>-<file name>  a copy of each plugin file the run imported (status.json's
                     ``plugins`` records name them by sha256): ``restore`` uses it when the original moved

A sweep's directory (``sweeps/store.py``) holds ``sweep.yaml``, ``index.csv``, ``invocations.jsonl``
and ``runs/<run id>/``, each a run directory plus the sweep's ``run.json`` (variant, seed, settings).

A leaf module (standard library; torch only inside ``checkpoint_history``): every layer that reads
or writes these files names them from here.
"""
from __future__ import annotations

import csv
import datetime as _dt
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Dict, List, Optional


# a run directory
CONFIG, STATUS, SUMMARY, METRICS = "config.yaml", "status.json", "summary.json", "metrics.csv"
PROGRESS = "progress.json"
CHECKPOINTS = "checkpoints"
CHECKPOINT = f"{CHECKPOINTS}/last.ckpt"
BEST_CHECKPOINT = f"{CHECKPOINTS}/best.ckpt"
PLUGINS = "plugins"
TOKENIZER = "tokenizer.json"
ERROR = "error.txt"  # the traceback of a run that crashed outside training
BRANCHES = "branches"  # branches/<steps>/: a WSD-S run's decay branches, run dirs of their own
EVAL = "eval"  # eval/<task>.json: downstream results (arch_zoo/evaluation)
# a sweep's directory, and the sweep's record inside each of its run directories
RUN_JSON, LOCK, INDEX, SPEC, INVOCATIONS = "run.json", ".lock", "index.csv", "sweep.yaml", "invocations.jsonl"
FINISHED = ("completed", "diverged")  # never trained again
STAGE_TUNE, STAGE_EVAL = "tune", "eval"  # run.json's tune.stage: a tuning run (stage 1) or an evaluation run (stage 2)
PAUSED, PRUNED = "paused", "pruned"  # stopped at a rung (``run_one(stop_at=...)``); resumable from there
# metrics.csv logs each validation at the optimizer steps done before it (trainer.global_step), the step
# status.json, summary.json, the console and the live loggers give it. Run dirs whose status.json (and
# checkpoints) do not say so were written before: they logged an in-fit validation one step early.
METRICS_STEPS = "global_step"
VALIDATION_METRIC = re.compile(r"^val(@\d+)?/")  # a validation split's metric column


def is_lr_column(name: str) -> bool:
    """metrics.csv's learning rates: ``lr`` (the group at train.lr) and ``lr/<part>.<k>``, every group's."""
    return name == "lr" or name.startswith("lr/")


def validation_logged_early(run_dir: Path) -> bool:
    """Whether ``run_dir``'s metrics.csv logs an in-fit validation at step k - 1 (an earlier version's)."""
    return (read_json(Path(run_dir) / STATUS) or {}).get("metrics_steps") != METRICS_STEPS


def validation_rows_to_global_step(header: List[str], rows: List[Dict[str, str]]) -> List[Dict[str, str]]:
    """An earlier version's metrics.csv rows with each validation row moved to the step it followed."""
    columns = [c for c in header if VALIDATION_METRIC.match(c)]
    return [{**r, "step": str(int(float(r["step"])) + 1)} if r.get("step") and any(r.get(c) for c in columns) else r
            for r in rows]


def stopped_by(record: Dict[str, Any], stop_at: Optional[int]) -> bool:
    """Whether a status.json record shows a run already stopped at (or past) the rung ``stop_at``."""
    return (stop_at is not None and record.get("status") in (PAUSED, PRUNED)
            and int(record.get("step") or 0) >= stop_at)


def checkpoint_history(run_dir: Path) -> List[Dict[str, float]]:
    """The validation history last.ckpt holds (one row per validation, with its step)."""
    import torch

    state = torch.load(run_dir / CHECKPOINT, map_location="cpu", weights_only=True, mmap=True)
    return list(state.get("arch_zoo", {}).get("history") or [])


def branch_dirs(run_dir: Path) -> List[Path]:
    """A run's WSD-S branch directories that were forked, shortest first (none for other runs)."""
    root = Path(run_dir) / BRANCHES
    found = [p for p in root.iterdir() if p.is_dir() and p.name.isdigit()] if root.is_dir() else []
    return sorted(found, key=lambda p: int(p.name))


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def write_json(path: Path, data: Dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(path)


def read_json(path: Path) -> Optional[Dict[str, Any]]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def eval_metrics(run_dir: Path) -> tuple:
    """({'eval/<task>/<metric>': value}, {that name: 'min' | 'max'}) from a run's eval/*.json; a
    file that cannot be read (being written, damaged) is left out, as a report leaves out any."""
    metrics: Dict[str, float] = {}
    goals: Dict[str, str] = {}
    for path in sorted((Path(run_dir) / EVAL).glob("*.json")):
        record = read_json(path)
        if not isinstance(record, dict) or not isinstance(record.get("metrics"), dict):
            continue
        task = record.get("task") or path.stem
        for name, value in record["metrics"].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                metrics[f"{EVAL}/{task}/{name}"] = float(value)
                goal = (record.get("goals") or {}).get(name)
                if goal in ("min", "max"):
                    goals[f"{EVAL}/{task}/{name}"] = goal
    return metrics, goals


def set_status(run_dir: Path, status: str, **extra) -> None:
    record = read_json(run_dir / STATUS) or {}
    record.update({"status": status, "updated": now(), **extra})
    write_json(run_dir / STATUS, record)


def plugin_copy(run_dir: Path, record: Dict[str, Any]) -> Optional[Path]:
    """Where the run keeps its copy of the file behind a plugin record (None: it names no file)."""
    if not record.get("path") or not record.get("sha256"):
        return None
    return run_dir / PLUGINS / f"{record['sha256'][:16]}-{Path(record['path']).name}"


def keep_plugins(run_dir: Path, records: List[Dict[str, Any]]) -> None:
    """Copy each plugin file a run imports into the run dir, once per content, so that the run dir
    alone rebuilds its model after the original has moved. A file that changed since it was imported
    is not the code this process runs, and is not copied."""
    for record in records:
        dest = plugin_copy(run_dir, record)
        if dest is None or dest.is_file():
            continue
        try:
            data = Path(record["path"]).read_bytes()
        except OSError:
            continue
        if hashlib.sha256(data).hexdigest() == record["sha256"]:
            dest.parent.mkdir(exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(dest)


def resume_state(run_dir: Path) -> Optional[Dict[str, int]]:
    """What a rerun resumes from: the checkpoint's step, how many rows of metrics.csv it covers and
    whether those log validation a step early (``METRICS_STEPS``); None for a run without a checkpoint."""
    path = run_dir / CHECKPOINT
    if not path.exists():
        return None
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    step = int(state.get("global_step", 0))
    rows = state.get("arch_zoo", {}).get("metrics_rows")
    return {"step": step, "metrics_rows": _rows_before(run_dir / METRICS, step) if rows is None else int(rows),
            "validation_early": state.get("arch_zoo", {}).get("metrics_steps") != METRICS_STEPS}


def _rows_before(path: Path, step: int) -> int:
    """For checkpoints that predate ``metrics_rows``: the leading rows logged before ``step``
    (Lightning logs step k's rows with step k - 1)."""
    if not path.exists():
        return 0
    with path.open(newline="") as f:
        steps = [int(float(r.get("step") or 0)) for r in csv.DictReader(f)]
    return next((i for i, s in enumerate(steps) if s >= step), len(steps))


class Attempt:
    """One call that trains a run dir, recorded in status.json's ``attempts`` as it goes:
    ``{started, pid, from_step, step, wall_time_s, outcome}``. ``step`` and ``wall_time_s`` are
    updated at every checkpoint, so an attempt whose process was killed (SIGKILL, power loss) keeps
    its progress up to its last checkpoint and reads as ``died`` to the next one; the work after
    that checkpoint is trained again and counted in the attempt that redoes it. Outcomes: running,
    completed, diverged, failed, interrupted, died."""

    def __init__(self, run_dir: Path, writer: bool = True):
        self.run_dir, self.writer = run_dir, writer
        self._t0 = time.perf_counter()
        self.step: Optional[int] = None
        self.begun = False

    def begin(self, from_step: Optional[int]) -> None:
        """Starts the record. Without a checkpoint the run starts over, and earlier attempts
        (which left nothing this run keeps) are dropped with it."""
        self._t0 = time.perf_counter()
        self.step, self.begun = from_step or 0, True
        if not self.writer:
            return
        earlier = [{**a, "outcome": "died"} if a.get("outcome") == "running" else a
                   for a in (self.records() if from_step is not None else [])]
        self._write(earlier + [{"started": now(), "pid": os.getpid(), "from_step": self.step, "step": self.step,
                                "wall_time_s": 0.0, "outcome": "running"}])

    def update(self, step: Optional[int] = None, outcome: str = "running") -> List[Dict[str, Any]]:
        """Records progress (``step`` = the last step the run dir holds) and returns all attempts."""
        if step is not None:
            self.step = step
        records = self.records()
        if not self.writer or not self.begun or not records:  # the last record is this attempt's once begun
            return records
        records[-1].update(step=self.step, wall_time_s=round(time.perf_counter() - self._t0, 3), outcome=outcome)
        self._write(records)
        return records

    def records(self) -> List[Dict[str, Any]]:
        return list((read_json(self.run_dir / STATUS) or {}).get("attempts") or [])

    def _write(self, records: List[Dict[str, Any]]) -> None:
        record = read_json(self.run_dir / STATUS) or {}
        record["attempts"] = records
        write_json(self.run_dir / STATUS, record)


def total_wall_time(attempts: List[Dict[str, Any]]) -> float:
    return round(sum(float(a.get("wall_time_s") or 0.0) for a in attempts), 3)


def versions() -> Dict[str, str]:
    import platform

    import pytorch_lightning
    import torch

    from . import __version__

    return {"arch_zoo": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "pytorch_lightning": pytorch_lightning.__version__}
