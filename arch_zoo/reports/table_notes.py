"""The notes under a summary table (``aggregate.summarize``): what a partial sweep lacks, variants with
too few seeds, values left out as non-finite, intervals clipped to a metric's range, and the
table's attrs that carry them."""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
import pandas as pd

from ..metrics import range_of

BOOTSTRAP_FEW = 10  # fewer seeds than this: the report warns that a bootstrap interval under-covers
MIN_SEEDS = 3  # fewer completed seeds than this: the report warns that the interval and p mean little


def oneline(text: str, limit: int = 200) -> str:
    """A reason (often a whole error message) as one short line, for tables."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def run_notes(group: pd.DataFrame) -> str:
    """A variant's runs that did not complete, each with its status and reason (the notes column)."""
    parts = []
    for _, r in group[group["status"] != "completed"].iterrows():
        seed = "?" if pd.isna(r["seed"]) else r["seed"]
        reason = f": {oneline(r['reason'])}" if isinstance(r["reason"], str) and r["reason"] else ""
        parts.append(f"seed {seed} {r['status']}{reason}")
    return "; ".join(parts)


def clip_note(m: str, names: List[str]) -> str:
    lo, hi = range_of(m)
    return (f"{m}: the 95% CI of the mean is clipped to the metric's range [{lo:g}, {hi:g}] for {', '.join(names)} "
            "(its interval reached past it; with so few seeds the clipped interval is wide, not precise)")


def missing_notes(runs: pd.DataFrame) -> List[str]:
    """What a partial sweep lacks, one line per status, naming each run."""
    lines = []
    todo = runs[runs["status"] != "completed"]
    if len(todo):
        lines.append(f"{len(runs) - len(todo)} of {len(runs)} runs completed; statistics use completed runs only.")
    for status, group in todo.groupby("status", sort=False):
        names = [f"{r['variant']} seed {r['seed']}" + (f" ({oneline(r['reason'])})" if isinstance(r["reason"], str)
                                                         and r["reason"] else "") for _, r in group.iterrows()]
        lines.append(f"{status}: " + "; ".join(names))
    for variant, why in (runs.attrs.get("not_evaluated") or {}).items():
        lines.append(f"{variant}: not evaluated (so no mean) at {why}")
    return lines


def _non_finite(runs: pd.DataFrame, metric: str) -> List[str]:
    """Completed runs whose ``metric`` is NaN or infinite: left out of every statistic, said so."""
    if metric not in runs.columns:
        return []
    done = runs[runs["status"] == "completed"]
    values = pd.to_numeric(done[metric], errors="coerce")
    skipped = set(runs.attrs.get("not_evaluated") or {})  # said apart: "not evaluated (so no mean) at ..."
    bad = done[~np.isfinite(values.to_numpy(dtype=float)) & ~done["variant"].isin(skipped)]
    if not len(bad):
        return []
    names = "; ".join(f"{r['variant']} seed {r['seed']} ({r[metric]})" for _, r in bad.iterrows())
    return [f"completed with a non-finite or missing {metric}, left out of its statistics: {names}"]


def _few_seeds(runs: pd.DataFrame, few: pd.DataFrame, col: str, metric: str) -> str:
    """One warning for every variant with too few completed seeds, and what to do about it."""
    counts = sorted({int(n) for n in few[col]})
    names = ", ".join(str(v) if len(counts) == 1 else f"{v} ({int(n)})" for v, n in zip(few["variant"], few[col]))
    seeds = sorted({int(s) for s in runs["seed"].dropna()})
    more = seeds + [s for s in range(max(seeds, default=-1) + 1, max(seeds, default=-1) + MIN_SEEDS + 1)]
    more = more[:max(MIN_SEEDS, len(seeds) + MIN_SEEDS - counts[0])]
    failed = runs[runs["variant"].isin(few["variant"]) & runs["status"].isin(["failed", "diverged"])]
    retry = " (or retrain the failed ones with --retry-failed)" if len(failed) else ""
    return (f"warning: only {'-'.join(map(str, dict.fromkeys([counts[0], counts[-1]])))} completed "
            f"seed{'s' * (counts[-1] != 1)} with {metric} for {names}; intervals and p-values need at least "
            f"{MIN_SEEDS} to mean much: add seeds to the sweep spec (seeds: [{', '.join(map(str, more))}]) and rerun "
            f"the same `arch-zoo sweep` command{retry}; finished runs are kept, only the new ones train.")


def table_attrs(runs, settings, metric, goal, base, metrics, table, ci="t", min_effect=None) -> Dict[str, Any]:
    notes = list(runs.attrs.get("load_notes") or []) + missing_notes(runs)  # load_notes: duplicates dropped
    if not base:
        notes.append("no baseline: Δ columns are empty (set one with --baseline KEY=VALUE).")
    col = f"{metric} n"
    if len(table) and col in table.columns and (table[col] == 0).any():
        empty = table.loc[table[col] == 0, "variant"]
        notes.append(f"no completed run with {metric}: {'; '.join(map(str, empty))}")
    if len(table) and col in table.columns:
        few = table.loc[(table[col] > 0) & (table[col] < MIN_SEEDS)]
        if len(few):
            notes.append(_few_seeds(runs, few, col, metric))
        paired_col = f"{metric} n_paired"
        if paired_col in table.columns:
            thin = table.loc[(table[col] >= MIN_SEEDS) & (table[paired_col] > 0) & (table[paired_col] < MIN_SEEDS)]
            for _, r in thin.iterrows():
                notes.append(f"warning: {r['variant']}'s Δ vs {r['baseline_variant']} pairs only {r[paired_col]} "
                             f"seed{'s' * (r[paired_col] != 1)} both completed; its p-value needs at least {MIN_SEEDS}.")
    notes += _non_finite(runs, metric)
    if ci == "bootstrap" and len(table) and col in table.columns and (table[col].between(1, BOOTSTRAP_FEW - 1)).any():
        notes.append(f"warning: with fewer than {BOOTSTRAP_FEW} seeds a bootstrap interval is too narrow (it resamples "
                     "only the seeds there are; about 71% coverage at 3 seeds, 82% at 5 for a nominal 95%; none is "
                     "given below 3): the t-interval (the default) holds its coverage.")
    return {"name": runs.attrs.get("name", ""), "task": runs.attrs.get("task"), "metric": metric, "goal": goal,
            "goals": runs.attrs.get("goals") or {}, "baseline": base,
            "settings": settings, "metrics": metrics, "notes": notes, "ci": ci,
            "min_effect": min_effect, "not_evaluated": runs.attrs.get("not_evaluated") or {}}
