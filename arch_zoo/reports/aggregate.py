"""Per-run rows → one row per variant: seed counts, size and speed, and for every metric the mean,
std, 95% t-interval and best seed, and Δ vs the baseline from a paired t-test across seeds.

Statistics use completed runs only. Diverged, failed, running and pending runs are counted in
their own columns and named in ``notes``; they are never averaged and never dropped.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import pandas as pd
from scipy import stats

from ..errors import ConfigError, did_you_mean
from .load import FIXED, goal_of

STATUSES = ("completed", "diverged", "failed", "interrupted", "running", "pending")
STATS = ("mean", "std", "ci_low", "ci_high", "n", "best", "best_seed",
         "delta", "delta_ci_low", "delta_ci_high", "p", "n_paired")
CONFIDENCE = 0.95
Baseline = Union[None, Mapping[str, Any], Sequence[str]]


def settings_of(runs: pd.DataFrame) -> List[str]:
    return list(runs.attrs.get("settings") or [c for c in runs.columns if "." in c and "/" not in c])


def metrics_of(runs: pd.DataFrame) -> List[str]:
    """Metrics with final values (summary.json) in the frame."""
    return [c for c in runs.columns if "/" in c and c not in FIXED]


def check_metric(runs: pd.DataFrame, metric: str) -> None:
    logged = list(dict.fromkeys(metrics_of(runs) + list(runs.attrs.get("metrics") or [])))
    if logged and metric not in logged:
        raise ConfigError("metric", f"'{metric}' was logged by no run{did_you_mean(metric, logged)}; "
                                    f"logged metrics: {', '.join(sorted(logged))}")


def mean_ci(values: Sequence[float]) -> tuple:
    """(mean, std, ci_low, ci_high): sample std and a t-distribution 95% interval."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        return math.nan, math.nan, math.nan, math.nan
    mean = float(x.mean())
    if n == 1:
        return mean, math.nan, math.nan, math.nan
    std, sem = float(x.std(ddof=1)), float(stats.sem(x))
    if sem == 0:
        return mean, std, mean, mean
    low, high = stats.t.interval(CONFIDENCE, n - 1, loc=mean, scale=sem)
    return mean, std, float(low), float(high)


def paired(a: Mapping[Any, float], b: Mapping[Any, float]) -> tuple:
    """(mean a-b, ci_low, ci_high, p, n) over the seeds both have; ttest_rel for the p-value."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return math.nan, math.nan, math.nan, math.nan, 0
    xa, xb = np.array([a[s] for s in seeds]), np.array([b[s] for s in seeds])
    delta, _, low, high = mean_ci(xa - xb)
    p = math.nan
    if len(seeds) >= 2:
        with warnings.catch_warnings():  # identical differences: scipy warns and returns nan
            warnings.simplefilter("ignore", RuntimeWarning)
            p = float(stats.ttest_rel(xa, xb).pvalue)
    return delta, low, high, p, len(seeds)


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a).lower() == str(b).lower() if isinstance(a, bool) or isinstance(b, bool) else str(a) == str(b)


def resolve_baseline(runs: pd.DataFrame, baseline: Baseline) -> Dict[str, Any]:
    """{settings column: value}; keys may be short ('position') when unambiguous."""
    if baseline is None:
        baseline = runs.attrs.get("baseline") or {}
    if not isinstance(baseline, Mapping):
        pairs = {}
        for item in baseline:
            if "=" not in item:
                raise ConfigError("baseline", f"'{item}' is not KEY=VALUE")
            key, value = item.split("=", 1)
            pairs[key.strip()] = value.strip()
        baseline = pairs
    settings = settings_of(runs)
    out = {}
    for key, value in baseline.items():
        match = [s for s in settings if s == key] or [s for s in settings if s.endswith("." + key)]
        if len(match) != 1:
            what = "is ambiguous" if match else "is not a varied setting"
            raise ConfigError("baseline", f"'{key}' {what}{did_you_mean(key, settings)}; "
                                          f"varied settings: {', '.join(settings) or '(none)'}")
        out[match[0]] = value
    if out and not any(all(_same(r[k], v) for k, v in out.items()) for _, r in runs.iterrows()):
        wanted = ",".join(f"{k}={v}" for k, v in out.items())
        raise ConfigError("baseline", f"{wanted} matches no variant; variants: "
                                      f"{'; '.join(dict.fromkeys(runs['variant'].astype(str)))}")
    return out


def _closest(row: Dict[str, Any], candidates: List[Dict[str, Any]], settings: List[str], base_keys: List[str]):
    """The baseline variant that agrees with ``row`` on the most settings outside the baseline's keys:
    with a grid over position x norm and baseline position=sinusoidal, rope+rmsnorm is compared
    with sinusoidal+rmsnorm."""
    others = [s for s in settings if s not in base_keys]
    return max(candidates, key=lambda c: sum(_same(c[s], row[s]) for s in others), default=None)


def oneline(text: str, limit: int = 200) -> str:
    """A reason (often a whole error message) as one short line, for tables."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _notes(group: pd.DataFrame) -> str:
    parts = []
    for _, r in group[group["status"] != "completed"].iterrows():
        seed = "?" if pd.isna(r["seed"]) else r["seed"]
        reason = f": {oneline(r['reason'])}" if isinstance(r["reason"], str) and r["reason"] else ""
        parts.append(f"seed {seed} {r['status']}{reason}")
    return "; ".join(parts)


def summarize(runs: pd.DataFrame, metric: Optional[str] = None, baseline: Baseline = None) -> pd.DataFrame:
    """One row per variant, ranked by ``metric`` (default: the sweep's) in its goal's direction."""
    metric = metric or runs.attrs.get("metric") or "val/loss"
    goal = runs.attrs.get("goal") if metric == runs.attrs.get("metric") else goal_of(metric)
    goal = goal or goal_of(metric)
    check_metric(runs, metric)
    settings, metrics = settings_of(runs), metrics_of(runs)
    base = resolve_baseline(runs, baseline)
    rows = []
    for variant, group in runs.groupby("variant", sort=False, dropna=False):
        first = group.iloc[0]
        row: Dict[str, Any] = {"variant": variant, **{s: first[s] for s in settings}}
        row["baseline"] = bool(base) and all(_same(first[k], v) for k, v in base.items())
        row["seeds"] = len(group)
        for status in STATUSES:
            row[status] = int((group["status"] == status).sum())
        row["other"] = int((~group["status"].isin(STATUSES)).sum())
        done = group[group["status"] == "completed"]
        for col in ("params", "flops_per_token", "train_tokens_per_s", "peak_memory_mb", "wall_time_s"):
            values = (done if done[col].notna().any() else group)[col].dropna()
            row[col] = float(values.mean()) if len(values) else math.nan
        row["notes"] = _notes(group) or None
        row["_values"] = {}
        for m in metrics:
            ok = done[np.isfinite(done[m])]
            per_seed = ok.groupby("seed")[m].mean().to_dict() if ok["seed"].notna().all() else \
                dict(enumerate(ok[m]))
            row["_values"][m] = per_seed
            mean, std, low, high = mean_ci(ok[m].to_numpy())
            row.update({f"{m} mean": mean, f"{m} std": std, f"{m} ci_low": low, f"{m} ci_high": high,
                        f"{m} n": len(ok)})
            if len(ok):
                best = ok[m].idxmin() if goal_of(m) == "min" else ok[m].idxmax()
                row[f"{m} best"], row[f"{m} best_seed"] = float(ok.at[best, m]), ok.at[best, "seed"]
            else:
                row[f"{m} best"], row[f"{m} best_seed"] = math.nan, pd.NA
        rows.append(row)
    candidates = [r for r in rows if r["baseline"]]
    for r in rows:
        other = _closest(r, candidates, settings, list(base))
        r["baseline_variant"] = other["variant"] if other is not None else None
        for m in metrics:
            d = paired(r["_values"][m], other["_values"][m]) if other is not None else (math.nan,) * 4 + (0,)
            r.update({f"{m} {name}": value for name, value in
                      zip(("delta", "delta_ci_low", "delta_ci_high", "p", "n_paired"), d)})
    table = pd.DataFrame([{k: v for k, v in r.items() if k != "_values"} for r in rows])
    if table.empty:
        table = pd.DataFrame(columns=["variant", *settings, "baseline", "seeds", *STATUSES, "rank"])
        table.attrs.update(_attrs(runs, metric, goal, base, metrics, []))
        return table
    key = f"{metric} mean"
    if key in table.columns:
        table["rank"] = table[key].rank(method="min", ascending=goal == "min").astype("Int64")
        table = table.sort_values(["rank", "variant"], na_position="last", kind="stable").reset_index(drop=True)
    else:
        table["rank"] = pd.array([pd.NA] * len(table), dtype="Int64")
    front = ["rank", "variant", *settings, "baseline", "baseline_variant", "seeds", *STATUSES, "other"]
    table = table[front + [c for c in table.columns if c not in front]]
    table.attrs.update(_attrs(runs, metric, goal, base, metrics, table))
    return table


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


def _attrs(runs, metric, goal, base, metrics, table) -> Dict[str, Any]:
    notes = list(runs.attrs.get("load_notes") or []) + missing_notes(runs)  # load_notes: duplicates dropped
    if not base:
        notes.append("no baseline: Δ columns are empty (set one with --baseline KEY=VALUE).")
    col = f"{metric} n"
    if len(table) and col in table.columns and (table[col] == 0).any():
        empty = table.loc[table[col] == 0, "variant"]
        notes.append(f"no completed run with {metric}: {'; '.join(map(str, empty))}")
    return {"name": runs.attrs.get("name", ""), "task": runs.attrs.get("task"), "metric": metric, "goal": goal, "baseline": base,
            "settings": settings_of(runs), "metrics": metrics, "notes": notes}
