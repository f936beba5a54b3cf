"""A probe suite's section of the report (``suite:`` in the sweep spec, ``sweeps/suite.py``): per
architecture variant, its score on every entry and task, and the suite average, as MAD reports them.

A run's entry, task and architecture variant (its settings without the entry and a tuned key) come from
its run.json's ``suite`` record, so every statistic is a function of the run store. The scores:

- an entry: the mean of the sweep's metric over the seeds that completed it, with the report's t interval;
- a task: for each seed, the mean over the task's entries (MAD's per-task score averages its difficulty
  levels), then the mean and interval over the seeds that completed every entry of the task;
- the suite average: for each seed, the mean over the tasks, then mean and interval over the seeds that
  completed every entry; Δ against the baseline variant is paired by seed (a paired t-test), and the
  p-values of every variant's test are Holm-corrected as one family, as the main table's are.

Stage 1 of a tuned sweep (the lr x weight-decay grid) is not scored here: each variant's stage-2 runs
at its chosen values per entry are, on seeds the choice never saw.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import pandas as pd

from .aggregate import _same, mean_ci, paired
from .load import goal_for
from ..stats import holm


@dataclass
class Suite:
    name: str
    metric: str
    goal: Optional[str]
    tasks: List[str]
    entries: List[str]
    per_entry: pd.DataFrame  # variant, task, entry, n, mean, ci_low, ci_high
    per_task: pd.DataFrame  # variant, task, n, mean, ci_low, ci_high
    average: pd.DataFrame  # variant, baseline, baseline_variant, n, mean, std, ci_low, ci_high, delta..., p_holm
    notes: List[str] = field(default_factory=list)


def suite_runs(groups: Sequence[pd.DataFrame], tables: Optional[Sequence[pd.DataFrame]] = None) -> pd.DataFrame:
    """One row per run of a suite sweep: its architecture variant, entry, task, seed, status, baseline flag
    (the report's: ``tables``, each group's ``summarize``, when given, so --baseline counts; else run.json's),
    architecture settings and every metric (the long form the statistics are computed from)."""
    rows = []
    for i, frame in enumerate(groups):
        base = set(tables[i].loc[tables[i]["baseline"].astype(bool), "variant"]) if tables is not None \
            and len(tables[i]) else None
        records = frame.attrs.get("suite") or {}
        settings = [s for s in frame.attrs.get("settings") or [] if s != "suite.task"]
        for _, r in frame.iterrows():
            rec = records.get(r["run_id"])
            if not rec:
                continue
            row = {"variant": rec["variant"], "entry": rec["entry"], "task": rec["task"], "seed": r["seed"],
                   "status": r["status"],
                   "is_baseline": bool(r["is_baseline"]) if base is None else r["variant"] in base, "_record": rec,
                   "_settings": {s: r[s] for s in settings}}
            row.update({m: r[m] for m in frame.columns if "/" in m})
            rows.append(row)
    return pd.DataFrame(rows)


def _order(values) -> List[Any]:
    return list(dict.fromkeys(values))


def analyse(groups: Sequence[pd.DataFrame], metric: Optional[str] = None,
            tables: Optional[Sequence[pd.DataFrame]] = None) -> Optional[Suite]:
    """The suite section for a suite sweep's groups (``load_groups``; ``tables``: their ``summarize``);
    None for any other sweep."""
    runs = suite_runs(groups, tables)
    if runs.empty:
        return None
    attrs = groups[0].attrs
    metric = metric or attrs.get("metric") or "val/loss"
    goal = goal_for(attrs, metric)
    first = runs.iloc[0]["_record"]
    task_of = dict(first.get("entries") or zip(runs["entry"], runs["task"]))  # every entry, run or not
    entries = list(task_of)
    tasks = list(first.get("tasks") or _order(task_of.values()))
    done = runs[(runs["status"] == "completed")].copy()
    done["value"] = pd.to_numeric(done[metric], errors="coerce") if metric in done.columns else math.nan
    done = done[np.isfinite(done["value"].astype(float))]
    variants = _order(runs["variant"])
    notes: List[str] = []
    per_entry, per_task, average = [], [], []
    seed_scores: Dict[str, Dict[Any, float]] = {}
    for v in variants:
        mine = done[done["variant"] == v]
        by_entry = {e: dict(zip(g["seed"], g["value"])) for e, g in mine.groupby("entry", sort=False)}
        for e in entries:
            xs = list(by_entry.get(e, {}).values())
            mean, _, low, high = mean_ci(xs)
            per_entry.append({"variant": v, "task": task_of.get(e), "entry": e, "n": len(xs), "mean": mean,
                              "ci_low": low, "ci_high": high})
        task_seed: Dict[str, Dict[Any, float]] = {}
        for t in tasks:
            its = [e for e in entries if task_of[e] == t]
            seeds = set.intersection(*(set(by_entry.get(e, {})) for e in its)) if its else set()
            task_seed[t] = {s: float(np.mean([by_entry[e][s] for e in its])) for s in sorted(seeds)}
            mean, _, low, high = mean_ci(list(task_seed[t].values()))
            per_task.append({"variant": v, "task": t, "n": len(task_seed[t]), "mean": mean, "ci_low": low,
                             "ci_high": high})
        seeds = set.intersection(*(set(x) for x in task_seed.values())) if task_seed else set()
        seed_scores[v] = {s: float(np.mean([task_seed[t][s] for t in tasks])) for s in sorted(seeds)}
        planned = set(runs.loc[runs["variant"] == v, "seed"])
        if len(seeds) < len(planned):
            missing = sorted(planned - seeds)
            notes.append(f"{v}: seed{'s' * (len(missing) != 1)} {', '.join(map(str, missing))} did not complete "
                         f"every entry with {metric}, so {'they are' if len(missing) != 1 else 'it is'} left out of "
                         "the task scores that lack it and of the suite average")
        mean, std, low, high = mean_ci(list(seed_scores[v].values()))
        base = runs[runs["variant"] == v]
        average.append({"variant": v, "baseline": bool(base["is_baseline"].any()), "n": len(seed_scores[v]),
                        "mean": mean, "std": std, "ci_low": low, "ci_high": high,
                        "_settings": base.iloc[0]["_settings"]})
    _deltas(average, seed_scores)
    table = pd.DataFrame([{k: x for k, x in r.items() if k != "_settings"} for r in average])
    if goal in ("min", "max") and table["mean"].notna().any():
        table["rank"] = table["mean"].rank(method="min", ascending=goal == "min").astype("Int64")
        table = table.sort_values(["rank"], kind="stable", na_position="last").reset_index(drop=True)
    if not table["baseline"].any():
        notes.append("no baseline variant: the Δ columns are empty (set baseline: in the spec, or --baseline)")
    return Suite(str(first.get("name") or "suite"), metric, goal, tasks, entries, pd.DataFrame(per_entry),
                 pd.DataFrame(per_task), table, notes)


def _deltas(rows: List[Dict[str, Any]], scores: Dict[str, Dict[Any, float]]) -> None:
    """Δ of each variant's suite average against the baseline variant that shares most of its other
    settings (a grid beside the baseline's axis), paired by seed; Holm over every variant's test."""
    bases = [r for r in rows if r["baseline"]]
    for r in rows:
        other = max(bases, key=lambda b: sum(_same(b["_settings"].get(k), x) for k, x in r["_settings"].items()),
                    default=None)
        r["baseline_variant"] = other["variant"] if other is not None else None
        if other is None or other is r:
            r.update(delta=math.nan, delta_ci_low=math.nan, delta_ci_high=math.nan, p=math.nan, n_paired=0)
            continue
        delta, low, high, p, n = paired(scores[r["variant"]], scores[other["variant"]])
        r.update(delta=delta, delta_ci_low=low, delta_ci_high=high, p=p, n_paired=n)
    for r, adjusted in zip(rows, holm([r["p"] for r in rows])):
        r["p_holm"] = float(adjusted)


def wide(suite: Suite) -> pd.DataFrame:
    """One row per variant: each task's mean and interval, then the suite average and its Δ (suite.csv)."""
    out = suite.average.copy()
    for t in suite.tasks:
        part = suite.per_task[suite.per_task["task"] == t].set_index("variant")
        for col in ("mean", "ci_low", "ci_high", "n"):
            out[f"{t} {col}"] = out["variant"].map(part[col])
    return out
