"""The best run of a sweep by its metric and goal, and its best checkpoint: what ``generate SWEEP
--best`` and ``arch_zoo.restore(SWEEP, best=True)`` load.

Every completed run counts (a tuned sweep's stage 1 too: its runs are trained models like any other).
A run is scored by what the loaded checkpoint scored: its best checkpoint's value (summary.json's
``best_checkpoint``, kept by the sweep's metric, a validation metric) or, for a run without one (a
sweep whose metric is a test metric, or trained before runs kept one), its final value and last.ckpt.
Ties go to the first run by run id. Reads the store's files only (their format is ``rundir``'s), so
it sits below the sweeps that write them, beside ``restore``."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, NamedTuple, Optional

from .. import rundir
from ..errors import ConfigError
from ..formatting import plural
from ..metrics import direction, goal_of
from ..rundir import SPEC, read_json


class BestRun(NamedTuple):
    run_dir: Path
    checkpoint: Path
    metric: str
    goal: str  # min | max
    value: float
    step: Optional[int]  # of the checkpoint's validation; None: the final value of a run without a best checkpoint
    among: int  # completed runs that had the metric

    def line(self) -> str:
        """One line saying which run and checkpoint were chosen, and why."""
        at = f" at step {self.step} (its best checkpoint)" if self.step is not None else \
            " (final; it kept no best checkpoint, so its last one)"
        return (f"the best run of {plural(self.among, 'completed run')} by {self.metric} ({self.goal}) is "
                f"{self.run_dir.name}: {self.metric} {self.value:.4f}{at}; loading {self.checkpoint}")


def is_sweep(path: Path) -> bool:
    return (path / SPEC).is_file() and (path / "runs").is_dir()


def sweep_metric(sweep_dir: Path) -> Dict[str, str]:
    """The metric sweep.yaml ranks by (the spec's ``metric``; val/loss, min, when it names none)."""
    import yaml

    try:
        spec = yaml.safe_load((sweep_dir / SPEC).read_text()) or {}
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError("--best", f"cannot read {sweep_dir / SPEC}: {type(exc).__name__}") from None
    metric = spec.get("metric") if isinstance(spec, dict) else None
    name = metric.get("name") if isinstance(metric, dict) and isinstance(metric.get("name"), str) else "val/loss"
    goal = direction(metric.get("goal")) if isinstance(metric, dict) else None
    return {"name": name, "goal": goal or goal_of(name) or "min"}


def best_run(sweep_dir) -> BestRun:
    """The best completed run of the sweep at ``sweep_dir`` (``OUT/<sweep name>``); a ConfigError
    naming ``--best`` for a path that is not a sweep or a sweep without a completed, scored run."""
    sweep_dir = Path(sweep_dir)
    if not is_sweep(sweep_dir):
        what = ("is a run directory, not a sweep" if (sweep_dir / rundir.CONFIG).is_file() else
                "is a file, not a sweep" if sweep_dir.is_file() else
                "is not a sweep directory" if sweep_dir.exists() else "does not exist")
        raise ConfigError("--best", f"{sweep_dir} {what} (no {SPEC}); --best picks the best run of a sweep: "
                          "give its store, OUT/<sweep name>")
    metric = sweep_metric(sweep_dir)
    scored, seen = [], {}
    for run_dir in sorted(p for p in (sweep_dir / "runs").iterdir() if p.is_dir()):
        status = (read_json(run_dir / rundir.STATUS) or {}).get("status", "pending")
        seen[status] = seen.get(status, 0) + 1
        pick = _score(run_dir, metric) if status == "completed" else None
        if pick is not None:
            scored.append(pick)
    if not scored:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(seen.items())) or "no runs yet"
        if not seen.get("completed"):
            raise ConfigError("--best", f"{sweep_dir} has no completed run to choose from ({counts}); rerun its "
                              "`arch-zoo sweep` command to train them")
        raise ConfigError("--best", f"none of the {plural(seen['completed'], 'completed run')} of {sweep_dir} has "
                          f"both {metric['name']} (the sweep's metric) and a checkpoint")
    sign = 1 if metric["goal"] == "min" else -1
    best = min(scored, key=lambda r: sign * r["value"])  # min keeps the first of equals
    return BestRun(best["run_dir"], best["checkpoint"], metric["name"], metric["goal"], best["value"], best["step"],
                   len(scored))


def _score(run_dir: Path, metric: Dict[str, str]) -> Optional[Dict[str, Any]]:
    summary = read_json(run_dir / rundir.SUMMARY) or {}
    kept = summary.get("best_checkpoint") or {}
    ckpt = run_dir / rundir.BEST_CHECKPOINT
    if kept.get("metric") == metric["name"] and kept.get("goal") == metric["goal"] and ckpt.is_file():
        value, step = kept.get("value"), kept.get("step")
    else:
        value, step, ckpt = (summary.get("final") or {}).get(metric["name"]), None, run_dir / rundir.CHECKPOINT
    if not isinstance(value, (int, float)) or not math.isfinite(value) or not ckpt.is_file():
        return None
    return {"run_dir": run_dir, "checkpoint": ckpt, "value": float(value), "step": step}


def restore(path, best: bool = False):
    """``arch_zoo.restore``: (config, model in eval mode, tokenizer) from a run directory or a
    checkpoint file; with ``best=True``, from the best run of the sweep at ``path`` and its best
    checkpoint (``best_run(path)`` says which). Needs no Lightning."""
    from .restore import restore as restore_run

    return restore_run(checkpoint(path, best))


def checkpoint(path, best: bool) -> Path:
    """What to load for ``path``: the best run's checkpoint (``best``), else ``path`` itself, which
    must not be a sweep (a user mistake: say how to pick one of its runs)."""
    path = Path(path)
    if best:
        return best_run(path).checkpoint
    if is_sweep(path):
        raise ConfigError("run", f"{path} is a sweep, not a run: add --best (best=True) for its best run, or give "
                          f"one of its runs, {path / 'runs'}/<run_id>")
    return path
