"""The frontier of the ranked metric against a cost: the variants no other variant beats at no more
cost. Zoology's figure of recall against state size (Arora et al. 2023) asks it of decoding-state
bytes: which mixers recall most for the state they keep. Pure pandas and numpy; the figure is
frontier_plot.py's.

A variant is on the frontier when no other has a cost at most its own and a better value, nor a
smaller cost and an equal value: it is the best there is for its cost. The frontier's value at a cost
is the best value of any variant at or below it (a step function), so a variant's distance below the
frontier is what it gives up against the best variant that keeps no more state.

Families: where the sweep has one numeric setting of 3 or more values (a width), the points of one
combination of the other settings (a mixer) form a family, as ``plots.axis_series`` draws a line
each; otherwise each variant is its own family."""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from ..formatting import si
from ..metrics import goal_of
from ..run_names import all_numbers, settings_label

COST = "state_bytes_per_token"
COST_LABEL = "state B/token"


def on_frontier(cost: Sequence[float], value: Sequence[float], goal: str = "max") -> np.ndarray:
    """One bool per point: True where no other point has cost <= its cost and a better value, nor a
    smaller cost and an equal value. ``goal``: "max" (an accuracy) or "min" (a loss). A point whose cost
    or value is missing or not finite is never on it and beats nothing."""
    c, v = np.asarray(cost, dtype=float), np.asarray(value, dtype=float)
    if goal == "min":
        v = -v
    out = np.zeros(len(c), dtype=bool)
    ok = np.flatnonzero(np.isfinite(c) & np.isfinite(v))
    order = ok[np.lexsort((-v[ok], c[ok]))]  # cheapest first; at one cost, the best value first
    best, i = -np.inf, 0
    while i < len(order):
        j = i
        while j < len(order) and c[order[j]] == c[order[i]]:
            j += 1
        top = v[order[i]]
        if top > best:  # beats every cheaper point: each point of this cost at the top value is on it
            out[[k for k in order[i:j] if v[k] == top]] = True
            best = top
        i = j
    return out


def best_at_most(cost: Sequence[float], value: Sequence[float], goal: str = "max") -> np.ndarray:
    """The frontier's value at each point's cost: the best value of any point costing no more (NaN where
    the point's cost is missing)."""
    c, v = np.asarray(cost, dtype=float), np.asarray(value, dtype=float)
    sign = -1.0 if goal == "min" else 1.0
    ok = np.isfinite(c) & np.isfinite(v)
    out = np.full(len(c), np.nan)
    for i in np.flatnonzero(np.isfinite(c)):
        within = ok & (c <= c[i])
        if within.any():
            out[i] = sign * np.max(sign * v[within])
    return out


def numeric_axis(table: pd.DataFrame, exclude: Sequence[str] = ()) -> Optional[Tuple[str, List[str]]]:
    """(axis, the other settings) for the sweep's one numeric setting with 3 or more values (a width, a
    length); ``exclude``: settings that are no axis (a tuned key: each variant's own choice). None unless
    exactly one such setting exists."""
    settings = [k for k in table.attrs.get("settings", []) if k in table.columns and k not in exclude]
    numeric = [k for k in settings if all_numbers(table[k]) and table[k].nunique() >= 3]
    if len(numeric) != 1:
        return None
    return numeric[0], [k for k in settings if k != numeric[0]]


def naming_keys(rows: pd.DataFrame, keys: Sequence[str]) -> List[str]:
    """``keys`` less those the others determine (a mixer's own lr or position): a family's name says only
    what tells the families apart. Dropped from the last, each only where the families stay as many."""
    keep = list(keys)
    if not keep:
        return keep
    count = len(rows[keep].astype(str).drop_duplicates())
    for key in reversed(list(keys)):
        rest = [k for k in keep if k != key]
        if rest and len(rows[rest].astype(str).drop_duplicates()) == count:
            keep = rest
    return keep


def frontier_frame(table: pd.DataFrame, metric: Optional[str] = None, cost: str = COST,
                   exclude: Sequence[str] = ()) -> Optional[pd.DataFrame]:
    """One row per variant with a mean of ``metric`` (default: the ranked one) and a positive ``cost``,
    cheapest first: family, variant, the axis value (where one exists), cost, mean, ci_low, ci_high,
    best_at_most (the frontier's value at its cost) and on_frontier. None unless two variants differ
    in cost: with one cost there is no trade to draw."""
    metric = metric or table.attrs.get("metric", "val/loss")
    key = f"{metric} mean"
    if key not in table.columns or cost not in table.columns:
        return None
    rows = table[pd.to_numeric(table[key], errors="coerce").notna() & pd.to_numeric(table[cost], errors="coerce").gt(0)]
    if rows[cost].nunique() < 2:
        return None
    ranked = metric == table.attrs.get("metric") and table.attrs.get("goal")
    goal = ranked or goal_of(metric, table.attrs.get("goals")) or "min"
    found = numeric_axis(table, exclude)
    axis, others = found if found is not None else (None, [])
    others = naming_keys(rows, others)
    out = pd.DataFrame({
        "family": [settings_label({k: r[k] for k in others}, table.attrs.get("mixer") or "attention") or str(r["variant"])
                   if axis else str(r["variant"]) for _, r in rows.iterrows()],
        "variant": rows["variant"].astype(str).to_numpy(),
        **({axis: rows[axis].to_numpy()} if axis else {}),
        cost: rows[cost].astype(float).to_numpy(),
        "mean": rows[key].astype(float).to_numpy(),
        "ci_low": rows.get(f"{metric} ci_low", pd.Series(np.nan, index=rows.index)).astype(float).to_numpy(),
        "ci_high": rows.get(f"{metric} ci_high", pd.Series(np.nan, index=rows.index)).astype(float).to_numpy(),
        "n": rows.get(f"{metric} n", pd.Series(np.nan, index=rows.index)).to_numpy(),
    })
    out["best_at_most"] = best_at_most(out[cost], out["mean"], goal)
    out["on_frontier"] = on_frontier(out[cost], out["mean"], goal)
    out = out.sort_values([cost, "mean"], ascending=[True, goal == "min"], kind="stable").reset_index(drop=True)
    out.attrs.update({"metric": metric, "goal": goal, "cost": cost, "axis": axis})
    return out


def frontier_lines(frame: pd.DataFrame) -> List[str]:
    """The frontier in words: its points cheapest first, then each family's count on it."""
    metric, cost, axis = frame.attrs["metric"], frame.attrs["cost"], frame.attrs.get("axis")
    on = frame[frame["on_frontier"]]
    name = (lambda r: f"{r['family']} at {axis.rsplit('.', 1)[-1]} {r[axis]:g}") if axis else (lambda r: r["family"])
    points = "; ".join(f"{name(r)} ({metric} {r['mean']:.4g} at {si(r[cost])} B/token)" for _, r in on.iterrows())
    counts = frame.groupby("family", sort=False)["on_frontier"].agg(["sum", "size"])
    off = [f for f, c in counts.iterrows() if c["sum"] == 0]
    lines = [f"on the frontier, cheapest first: {points}."]
    if axis:
        lines.append("families with points on it: " + ", ".join(f"{f} ({int(c['sum'])} of {int(c['size'])})"
                                                              for f, c in counts.iterrows() if c["sum"] > 0) + ".")
    if off:
        lines.append("no point on it: " + ", ".join(off) + ".")
    return lines


def markdown(table: pd.DataFrame, md_table: Callable[[pd.DataFrame], str], escape: Callable[[object], str],
             exclude: Sequence[str] = ()) -> List[str]:
    """The report's frontier section (empty where ``frontier_frame`` is None): the lines, then every
    variant cheapest first with the frontier's value at its cost."""
    frame = frontier_frame(table, exclude=exclude)
    if frame is None:
        return []
    metric, cost, axis = frame.attrs["metric"], frame.attrs["cost"], frame.attrs.get("axis")
    shown = pd.DataFrame({
        "family": frame["family"],
        **({axis.rsplit(".", 1)[-1]: [f"{v:g}" for v in frame[axis]]} if axis else {}),
        COST_LABEL: [si(v) for v in frame[cost]],
        metric: [f"{v:.4g}" for v in frame["mean"]],
        f"best at ≤ this state": [f"{v:.4g}" for v in frame["best_at_most"]],
        "frontier": ["yes" if v else "" for v in frame["on_frontier"]],
    })
    return ["", f"## Frontier: {escape(metric)} against decoding-state bytes per token", "",
            *[f"- {escape(line)}" for line in frontier_lines(frame)],
            f"- a variant is on the frontier when no other reaches a better mean {escape(metric)} with at most its "
            "state, nor the same with less; state: float32 decoding-state bytes after max_seq_len positions over "
            "max_seq_len (a K/V cache per token of context; a fixed state spread over the positions). With few "
            "seeds a point on it may lead its neighbours by less than the seeds' spread: the intervals are in the "
            "tables above.", "", md_table(shown)]
