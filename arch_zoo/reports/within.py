"""Comparisons within each level of a second axis (``arch-zoo report --within KEY``).

A grid over a variant axis and a setting axis (mixer x task.documents) asks whether a verdict holds at
every level of the setting. For each level of KEY every other variant there is compared with the baseline
variant at that level (the baseline's other settings, KEY at the level), paired by seed, with the statistics
of the main table (``aggregate``: Δ, its t or bootstrap interval, the paired t-test; ``verdicts``: Holm over
the family of these comparisons, the interval at the adjusted level, the verdict read off it).

The interaction asks whether a variant's Δ changes with KEY: per seed, its Δ at a level minus its Δ at the
reference level (the baseline's own level of KEY, else the sweep's first), a difference of differences,
averaged over the seeds with all four runs, with a paired t-test and its own Holm family.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import pandas as pd

from ..errors import ConfigError, did_you_mean
from ..run_names import plain, settings_label
from ..stats import BETTER, EQUIVALENT, INCONCLUSIVE, WORSE, bootstrap_ci
from .aggregate import (CONFIDENCE, Baseline, _compare, _pairing_note, _pairs, _ranking, _same, _variant_row,
                        check_options, paired, resolve_baseline, setting_columns, settings_of)
from .sequential_verdicts import adaptive_of
from .verdicts import judge_rows

CHANGES, SAME = "changes", "same"
# An interaction's verdict says whether Δ moves with the setting, not which variant is better.
READING = {BETTER: CHANGES, WORSE: CHANGES, EQUIVALENT: SAME, INCONCLUSIVE: INCONCLUSIVE}


@dataclass
class Within:
    key: str                 # the settings column split by (task.documents)
    reference: Any           # the level every other level's Δ is compared with
    levels: List[Any]        # reference first, then the sweep's order
    metric: str
    goal: str
    baseline: Dict[str, Any]  # the baseline's settings less ``key``
    ci: str
    rows: pd.DataFrame       # one per (level, variant): Δ vs the baseline at that level
    interaction: pd.DataFrame  # one per (variant, level other than the reference)
    notes: List[str]


def resolve_key(runs: pd.DataFrame, key: str) -> str:
    """The swept settings column ``key`` names (whole, or its last parts where unambiguous)."""
    settings = settings_of(runs)
    match = setting_columns(settings, key)
    if len(match) != 1:
        what = "is ambiguous" if match else "is not a swept key of this sweep"
        raise ConfigError("--within", f"'{key}' {what}{did_you_mean(key, settings)}; choices: "
                                      f"{', '.join(settings) or '(none: nothing is swept)'}")
    return match[0]


def _levels(values: pd.Series, first: Any) -> List[Any]:
    out = [first]
    for v in values:
        if not any(_same(v, seen) for seen in out):
            out.append(v)
    return out


def within(runs: pd.DataFrame, key: str, metric: Optional[str] = None, baseline: Baseline = None, ci: str = "t",
           min_effect: Optional[float] = None) -> Within:
    """The comparisons within each level of ``key`` and their interaction; a user mistake (``key`` not swept, a
    baseline that only sets ``key``, a level without baseline runs) raises ``ConfigError`` before anything."""
    min_effect = min_effect if min_effect is not None else runs.attrs.get("min_effect")
    check_options(ci, min_effect)
    axis = resolve_key(runs, key)
    metric, _, goal = _ranking(runs, metric)
    if metric not in runs.columns:  # logged, but no run has a final value yet (all pending or failed)
        runs = runs.copy()
        runs[metric] = math.nan
    settings = settings_of(runs)
    full = resolve_baseline(runs, baseline)
    base = {k: v for k, v in full.items() if k != axis}
    if not base:
        raise ConfigError("--within", f"the baseline ({_spelled(full) or 'none'}) sets no setting but {axis}, so "
                                      f"there is no variant to compare within a level; give one with --baseline "
                                      f"(choices: {', '.join(s for s in settings if s != axis) or 'none: the sweep varies only ' + axis})")
    levels = _levels(runs[axis], full[axis]) if axis in full else _levels(runs[axis], runs[axis].iloc[0])
    rows: List[Dict[str, Any]] = []
    ties: List[str] = []
    for level in levels:
        at = runs[[_same(v, level) for v in runs[axis]]]
        level_base = {**base, axis: level}
        level_rows = [_variant_row(runs.attrs, variant, group, settings, [metric], level_base, ci, {})
                      for variant, group in at.groupby("variant", sort=False, dropna=False)]
        if not any(r["baseline"] for r in level_rows):
            raise ConfigError("--within", f"{axis}: the baseline ({_spelled(base)}) has no runs at {axis}="
                                          f"{plain(level)}; levels with baseline runs: "
                                          f"{_baseline_levels(runs, axis, base, levels)}; swept keys: "
                                          f"{', '.join(settings)}")
        pairing = _pairing_note(level_rows, _compare(level_rows, settings, [metric], list(level_base), metric, ci,
                                                     min_effect))
        if pairing:
            ties.append(f"at {axis}={plain(level)}: {pairing}")
        for r in level_rows:
            r["level"] = level
        rows += sorted(level_rows, key=lambda r: not r["baseline"])  # stable: then the sweep's order
    judge_rows(rows, [metric], runs.attrs, goal, ci)
    label = [s for s in settings if s != axis]
    mixer = runs.attrs.get("mixer") or "attention"
    for r in rows:
        r["label"] = settings_label({s: r[s] for s in label}, mixer) or str(r["variant"])
    inter, notes = _interaction(rows, axis, label, levels[0], metric, ci, min_effect)
    notes = ties + notes
    if adaptive_of(runs.attrs.get("seeds")) is not None:
        notes.append("seeds were added adaptively, stopping on the main table's comparisons (seeds: {start, max} "
                     "in the spec): the fixed-sample p-values and intervals here take no account of those looks; "
                     "the main table's verdicts, from repeated intervals, do")
    judge_rows(inter, [metric], runs.attrs, goal, ci)
    for r in inter:
        r[f"{metric} verdict"] = READING.get(r[f"{metric} verdict"], r[f"{metric} verdict"])
    return Within(axis, levels[0], levels, metric, goal, base, ci, _frame(rows, axis, metric),
                  _frame(inter, axis, metric), notes)


def _spelled(setting: Dict[str, Any]) -> str:
    return ", ".join(f"{k}={plain(v)}" for k, v in setting.items())


def _baseline_levels(runs: pd.DataFrame, axis: str, base: Dict[str, Any], levels: List[Any]) -> str:
    have = [lv for lv in levels if any(_same(r[axis], lv) and all(_same(r[k], v) for k, v in base.items())
                                       for _, r in runs.iterrows())]
    return ", ".join(plain(lv) for lv in have) or "(none)"


def _by_seed(row: Dict[str, Any], other: Dict[str, Any], metric: str) -> Dict[Any, float]:
    a, b = row["_values"][metric], other["_values"][metric]
    return {s: a[s] - b[s] for s in a if s in b}


def _interaction(rows: List[Dict[str, Any]], axis: str, label: List[str], reference: Any, metric: str, ci: str,
                 min_effect: Optional[float]) -> tuple:
    """One row per non-baseline variant at a level other than ``reference``: the seed-paired difference of its
    Δ there and its Δ at ``reference`` (the variant with the same other settings), with ``paired``'s interval
    and p; the variants with no counterpart at the reference level, named in a note."""
    by_variant = {str(r["variant"]): r for r in rows}
    out, alone = [], []
    for r in rows:
        if r["baseline"] or _same(r["level"], reference):
            continue
        twin = next((o for o in rows if _same(o["level"], reference) and not o["baseline"]
                     and all(_same(o[s], r[s]) for s in label)), None)
        if twin is None:
            alone.append(str(r["variant"]))
            continue
        here = _by_seed(r, by_variant[str(r["baseline_variant"])], metric)
        there = _by_seed(twin, by_variant[str(twin["baseline_variant"])], metric)
        delta, low, high, p, n = paired(here, there)
        at_level, at_reference = _pairs(here, there)  # over the seeds with all four runs
        diffs = at_level - at_reference
        if ci == "bootstrap":
            low, high = bootstrap_ci(diffs, CONFIDENCE)
        out.append({"variant": r["variant"], "label": r["label"], "level": r["level"], "reference": reference,
                    "reference_variant": twin["variant"], "baseline_variant": r["baseline_variant"],
                    "reference_baseline_variant": twin["baseline_variant"], "baseline": False,
                    f"{metric} delta": delta, f"{metric} delta_ci_low": low, f"{metric} delta_ci_high": high,
                    f"{metric} p": p, f"{metric} n_paired": n,
                    f"{metric} delta_at_level": float(at_level.mean()) if n else math.nan,
                    f"{metric} delta_at_reference": float(at_reference.mean()) if n else math.nan,
                    f"{metric} margin": min_effect if min_effect is not None else math.nan,
                    "_diffs": {metric: diffs}})
    notes = [f"no interaction for {', '.join(alone)}: no variant with the same other settings at {axis}="
             f"{plain(reference)}"] if alone else []
    return out, notes


COLUMNS = ("mean", "std", "n", "delta", "delta_ci_low", "delta_ci_high", "p", "n_paired", "p_holm",
           "verdict_ci_low", "verdict_ci_high", "verdict_ci_level", "margin", "verdict",
           "delta_at_level", "delta_at_reference")


def _frame(rows: List[Dict[str, Any]], axis: str, metric: str) -> pd.DataFrame:
    """The rows as within.csv has them: the level under the key's own name, the metric's columns named as
    variants.csv names them."""
    front = ["level", "reference", "label", "variant", "baseline", "baseline_variant", "reference_variant",
             "reference_baseline_variant"]
    stats = [f"{metric} {c}" for c in COLUMNS]
    table = pd.DataFrame([{c: r.get(c) for c in front + stats if c in r} for r in rows])
    if table.empty:
        return table
    table["level"] = pd.Series([r["level"] for r in rows], dtype=object).map(plain)
    if "reference" in table.columns:
        table["reference"] = table["reference"].map(plain)
    return table.rename(columns={"level": axis})
