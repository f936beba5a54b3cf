"""A run's curves from its metrics.csv: the one reader plots, the interactive report and the
dashboard exports share (metrics.csv is the source of truth; everything else is a view of it)."""
from __future__ import annotations

from pathlib import Path
from typing import Union

import pandas as pd
from ..rundir import METRICS, VALIDATION_METRIC, validation_logged_early

NOT_METRICS = ("step", "epoch")


def read_metrics(run_dir: Union[str, Path]) -> pd.DataFrame:
    """Long form (metric, step, value), one row per logged number, in step order; a validation at the
    step it followed (``rundir.METRICS_STEPS``, also for a run dir an earlier version wrote). Lightning writes a sparse table (a row per log call,
    blank where that call had no value); a resumed run may have logged a step twice, and the later
    row wins. Empty when the file is missing or unreadable (a run that has not logged yet, or one
    being written by another process)."""
    try:
        data = pd.read_csv(Path(run_dir) / METRICS)
    except (OSError, ValueError, pd.errors.EmptyDataError):
        return pd.DataFrame(columns=["metric", "step", "value"])
    if "step" not in data.columns:
        return pd.DataFrame(columns=["metric", "step", "value"])
    names = [c for c in data.columns if c not in NOT_METRICS]
    long = data.melt(id_vars=["step"], value_vars=names, var_name="metric", value_name="value")
    long["value"] = pd.to_numeric(long["value"], errors="coerce")
    long["step"] = pd.to_numeric(long["step"], errors="coerce")
    long = long.dropna(subset=["step", "value"])  # blanks, and the NaN loss of a diverged step
    long = long.astype({"step": int})
    if validation_logged_early(run_dir):  # an earlier version's run dir: read its validations at step k
        long.loc[long["metric"].str.match(VALIDATION_METRIC), "step"] += 1
    long = long.groupby(["metric", "step"], as_index=False, sort=False).last()
    return long.sort_values(["metric", "step"], kind="stable").reset_index(drop=True)


def read_curves(run_dir: Union[str, Path], metric: str) -> pd.DataFrame:
    """(step, value) rows of one metric from a run's metrics.csv; empty when it has none."""
    rows = read_metrics(run_dir)
    return rows[rows["metric"] == metric][["step", "value"]].astype(float).reset_index(drop=True)
