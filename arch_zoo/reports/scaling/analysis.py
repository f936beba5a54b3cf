"""A ladder sweep's scaling section: per variant the fit of the loss against training compute (and,
for a tokens-per-parameter ladder, against non-embedding parameters) with bootstrap intervals, the
compute multiplier against the baseline at every rung (and, only when asked, beyond the ladder, as
an extrapolation), and a verdict line. Everything a reader could mistake for a result when it is
not one (too few rungs, a loss that does not fall, a fit that does not converge, no baseline) is a
note instead of a number."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np
import pandas as pd

from ...errors import ConfigError
from ...run_names import short_names
from ...sweeps.scale import HOLDOUT_FROM, MIN_RUNGS, SIZE_KEY
from ...stats import BOOTSTRAP_SEED
from .bootstrap import REPLICATES, Curve, fit_curves, huber_delta
from .fit import OK, curve as curve_values
from .multiplier import k_band, k_table
from .nd import wsds_surfaces
from .predict import DECISION_COLUMNS, HOLDOUT_COLUMNS, decision_accuracy, decision_line, held_out_fits, \
    holdout_table
from .points import ARCH_HIDDEN, Ladder, arch_label, draws, ladder_points, resample, seed_noise
from .trust import drop_untrained, shared_lr_note
from .verdict import k_phrase, verdict

FIT_COLUMNS = ["variant", "x", "status", "rungs", "E", "E_ci_low", "E_ci_high", "A", "A_ci_low", "A_ci_high", "alpha",
               "alpha_ci_low", "alpha_ci_high", "x_ref", "huber_delta", "replicates", "replicates_used", "note"]
GRID = 60  # points along a plotted curve
K_COLUMNS = ["variant", "baseline", "rung", "size", "kind", "compute", "loss_fit", "k", "k_ci_low", "k_ci_high",
             "k_equivalent_low", "k_equivalent_high", "relation", "note"]


@dataclass
class Scaling:
    metric: str
    baseline: Optional[str]
    fits: pd.DataFrame
    multipliers: pd.DataFrame
    verdicts: Dict[str, str]
    notes: List[str]
    curves: Dict[str, Curve] = field(default_factory=dict)  # variant -> its compute fit
    extrapolate_to: Optional[float] = None
    ladder: Optional[Ladder] = None
    confidence: float = 0.95
    margin: float = math.nan  # the smallest effect that counts, in the metric's units
    holdout: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=HOLDOUT_COLUMNS))
    decisions: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=DECISION_COLUMNS))
    held: Dict[str, Curve] = field(default_factory=dict)  # variant -> its fit without the held-out rung
    nd: Optional[Any] = None  # a WSD-S ladder's L(N, D) fits (nd.NDScaling): sizes x budgets


def is_ladder(runs: pd.DataFrame) -> bool:
    """One ladder sweep's runs (several stores compared together have no one ladder to fit)."""
    return bool(runs.attrs.get("scale")) and SIZE_KEY in (runs.attrs.get("settings") or [])


def _fit_row(c: Curve, replicates: int) -> Dict[str, Any]:
    row: Dict[str, Any] = {"variant": c.variant, "x": c.x, "status": c.status, "rungs": len(c.numbers),
                           "x_ref": c.x_ref, "huber_delta": c.delta, "replicates": replicates, "note": c.note or None}
    if not c.ok:
        return row
    reps, point = c.replicates, c.point
    for name, value, values in (("E", point.E[0], reps.E), ("A", point.A(c.x_ref)[0], reps.A(c.x_ref)),
                                ("alpha", point.alpha[0], reps.alpha)):
        low, high = c.interval(values)
        row.update({name: float(value), f"{name}_ci_low": low, f"{name}_ci_high": high})
    row["replicates_used"] = int(c.usable.sum())
    if point.floor_at_bound[0]:
        row["note"] = "E = 0: the ladder resolves no floor"
    return row


def _rung_stats(table: pd.DataFrame, ladder: Ladder, variant: str, names: Dict[str, str], metric: str) -> List:
    """(rung name, verdict word) of ``variant`` at each rung, from the per-variant table's rows."""
    out = []
    for _, row in table.iterrows():
        if row.get("baseline") or arch_label({k: row[k] for k in ladder.keys[variant]}, names) != variant:
            continue
        size = row.get("scale.size")
        rung = next((r for r in ladder.rungs.get(variant, []) for c in r.cells if c.size == size
                     and (not ladder.isoflop or r.label == f"{float(row['scale.flops']):.3g} FLOPs")), None)
        if rung is None:
            continue
        name = str(rung.number) + (f" ({size})" if ladder.isoflop else "")
        word = row.get(f"{metric} verdict")
        out.append((rung.number, name, word if isinstance(word, str) else ""))
    return [(n, w) for _, n, w in sorted(out, key=lambda t: t[0])]


def analyse(runs: pd.DataFrame, table: pd.DataFrame, extrapolate_to: Optional[float] = None,
            replicates: int = REPLICATES) -> Optional[Scaling]:
    """The scaling section of a ladder sweep's report; None for any other sweep (``--extrapolate-to`` on
    one is an error)."""
    if not is_ladder(runs):
        if extrapolate_to is not None:
            raise ConfigError("--extrapolate-to", "is for a ladder sweep (a spec with scale); these runs have no rungs")
        return None
    metric, goal = table.attrs.get("metric", "val/loss"), table.attrs.get("goal", "min")
    kept, notes = drop_untrained(runs)
    ladder = ladder_points(kept, metric)
    settings = [s for s in runs.attrs.get("settings") or [] if s not in ARCH_HIDDEN]
    names = short_names(settings)
    lr_note = shared_lr_note(runs)
    notes += [lr_note] if lr_note else []
    margin, baseline = _margin(table, metric), _baseline(table, settings, names)
    computes = [c.compute for rs in ladder.rungs.values() for r in rs for c in r.cells]
    _check_extrapolation(extrapolate_to, computes)
    if goal != "min":
        notes.append(f"no scaling fits: {metric} is maximised, and L = E + A C^-alpha describes a loss; "
                     "report a loss metric (--metric val/loss) for fits")
    plan = _plan(runs, ladder.planned)
    fits = _fit(ladder, ladder.variants if goal == "min" and plan["fit"] else [], replicates, computes)
    words = {v: _rung_stats(table, ladder, v, names, metric) for v in ladder.variants if v != baseline}
    k_rows, verdicts, lines = _multipliers(ladder, fits.curves, baseline, goal, extrapolate_to, margin, words)
    notes += lines + _fit_notes(fits.curves, ladder, replicates)
    held, holdout, lines, decisions = _predictive(ladder, fits.drawn, fits.curves, baseline, fits.x_ref, fits.delta,
                                                  plan)
    cite = decision_line(decisions)
    verdicts = {v: line + (f"; {cite}" if cite else "") for v, line in verdicts.items()}
    notes += lines + _ladder_notes(ladder, plan)
    return Scaling(metric, baseline, pd.DataFrame(fits.rows, columns=FIT_COLUMNS),
                   pd.DataFrame(k_rows, columns=K_COLUMNS), verdicts, notes, fits.curves, extrapolate_to, ladder,
                   margin=margin, decisions=decisions, held=held,
                   **({"holdout": holdout} if holdout is not None else {}),
                   nd=wsds_surfaces(kept, table, metric, replicates) if goal == "min" else None)


def _margin(table: pd.DataFrame, metric: str) -> float:
    """The smallest effect that counts, in the metric's units, as the per-variant table has it (NaN without)."""
    margins = table[f"{metric} margin"].dropna() if f"{metric} margin" in table.columns else []
    return float(margins.iloc[0]) if len(margins) else math.nan


def _baseline(table: pd.DataFrame, settings: List[str], names: Dict[str, str]) -> Optional[str]:
    """The baseline variant's label, from the per-variant table's baseline row; None without one."""
    base_rows = table[table["baseline"] == True] if "baseline" in table.columns else table.iloc[:0]  # noqa: E712
    return arch_label({k: base_rows.iloc[0][k] for k in settings}, names) if len(base_rows) else None


def _check_extrapolation(extrapolate_to: Optional[float], computes: List[float]) -> None:
    if extrapolate_to is not None:
        if not (math.isfinite(extrapolate_to) and computes and extrapolate_to > max(computes)):
            largest = f"{max(computes):.3g}" if computes else "none yet"
            raise ConfigError("--extrapolate-to", f"{extrapolate_to:.3g} FLOPs is not beyond the largest rung's "
                              f"training compute ({largest}); an extrapolation names a compute past the ladder")


@dataclass
class _Fits:
    curves: Dict[str, Curve]  # variant -> its compute fit
    rows: List[Dict[str, Any]]  # FIT_COLUMNS: per variant its compute fit, then its parameter fit
    drawn: Dict[str, Any]  # variant -> its rungs' bootstrap resamples of the shared draws
    x_ref: float  # the compute the fits are normalised by
    delta: float  # the Huber loss's delta, from the ladder's seed noise


def _fit(ladder: Ladder, fitted: List[str], replicates: int, computes: List[float]) -> _Fits:
    """Each of ``fitted``'s loss against training compute (and, for a tokens-per-parameter ladder, against
    non-embedding parameters), with bootstrap replicates."""
    delta = huber_delta(seed_noise(ladder))
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    shared = draws(ladder, replicates, rng)  # the same draws on the same seeds for every variant at a rung
    x_ref = math.exp(float(np.mean(np.log(computes)))) if computes else 1.0
    params = [c.params for rs in ladder.rungs.values() for r in rs for c in r.cells]
    n_ref = math.exp(float(np.mean(np.log(params)))) if params else 1.0
    drawn = {v: resample(ladder.rungs[v], shared, replicates) for v in fitted}
    curves = {c.variant: c for c in fit_curves([(v, ladder.rungs[v], drawn[v]) for v in fitted], x_ref, delta)}
    by_params = {}
    if ladder.tokens_per_param:
        drawn_n = {v: resample(ladder.rungs[v], shared, replicates, "params") for v in fitted}
        by_params = {c.variant: c for c in fit_curves([(v, ladder.rungs[v], drawn_n[v]) for v in fitted], n_ref,
                                                      delta, "params")}
    rows = []
    for v in fitted:
        rows.append(_fit_row(curves[v], replicates))
        if v in by_params:
            rows.append(_fit_row(by_params[v], replicates))
    return _Fits(curves, rows, drawn, x_ref, delta)


def _multipliers(ladder: Ladder, curves: Dict[str, Curve], baseline: Optional[str], goal: str,
                 extrapolate_to: Optional[float], margin: float, words: Dict[str, List]):
    """(k rows, each variant's verdict line, the notes saying why there are no multipliers): every variant's
    compute multiplier against the baseline at each rung (and at ``extrapolate_to``); ``words``: each
    variant's (rung, verdict word) pairs from the per-variant table."""
    k_rows, verdicts, notes = [], {}, []
    base = curves.get(baseline) if baseline else None
    if baseline is None:
        notes.append("no baseline: no compute multipliers (set one with --baseline KEY=VALUE)")
    elif goal == "min" and (base is None or not base.ok):
        notes.append(f"no compute multipliers: the baseline ({baseline}) has no usable fit"
                     + (f" ({base.note})" if base is not None and base.note else ""))
    for variant in ladder.variants:
        if variant == baseline:
            continue
        c = curves.get(variant)
        k_text = k_rel = None
        if c is not None and base is not None and c.ok and base.ok:
            rows = k_table(c, base, ladder, extrapolate_to, margin)
            k_rows += rows
            largest = [r for r in rows if r["kind"] == "rung"][-1]
            k_text = k_phrase(largest["k"], largest["k_ci_low"], largest["k_ci_high"], k_band(largest))
            k_rel = largest["relation"]
        elif c is not None and not c.ok:
            k_text = f"no compute multiplier: {c.status}"
        verdicts[variant] = verdict(words[variant], k_text, k_rel)
    return k_rows, verdicts, notes


def _fit_notes(curves: Dict[str, Curve], ladder: Ladder, replicates: int) -> List[str]:
    """Per fit: the rungs it misses, why there is none, or how few replicates its intervals rest on."""
    notes = []
    for c in curves.values():
        if c.ok:
            notes += misfits(c, ladder.rungs[c.variant])
        if not c.ok:
            notes.append(f"{c.variant}: no fit ({c.status}): {c.note}")
        elif c.usable.sum() < 0.95 * replicates:
            notes.append(f"{c.variant}: intervals from {int(c.usable.sum())} of {replicates} bootstrap replicates; "
                         "the others did not converge")
    return notes


def _ladder_notes(ladder: Ladder, plan: Dict[str, Any]) -> List[str]:
    """What the ladder's plan and seeds leave out: fits turned off, seed noise, too few rungs."""
    notes = []
    if not plan["fit"]:
        notes.append("scale.fit: false: per-rung comparisons only, no scaling fits")
    seeds = [len(cell.losses) for rs in ladder.rungs.values() for r in rs for cell in r.cells]
    if seeds and min(seeds) < 2:
        notes.append("warning: a rung with one seed has no spread to draw from: the intervals leave out its seed noise "
                     "and cover less than their nominal 95%")
    if ladder.planned < MIN_RUNGS and plan["fit"]:
        notes.append(f"the ladder has {ladder.planned} rung{'s' * (ladder.planned != 1)}: fits need at least 3")
    return notes


def _predictive(ladder: Ladder, drawn, curves: Dict[str, Curve], baseline: Optional[str], x_ref: float, delta: float,
                plan: Dict[str, Any]):
    """(held-out fits, their table or None, the lines it gives, decision accuracy): how well the ladder predicts."""
    held = held_out_fits(ladder, drawn, x_ref, delta) if plan["holdout"] == "largest" else {}
    holdout, lines = holdout_table(ladder, held, curves, baseline) if held else (None, [])
    return held, holdout, lines, decision_accuracy(ladder, drawn, x_ref, delta)


def _plan(runs: pd.DataFrame, planned: int) -> Dict[str, Any]:
    """The ladder's fit and hold-out settings as its runs recorded them (runs planned before they were recorded:
    fits, and the largest rung held out from HOLDOUT_FROM rungs up)."""
    records = list((runs.attrs.get("scale") or {}).values())
    first = records[0] if records else {}
    holdout = first["holdout"] if "holdout" in first else ("largest" if planned >= HOLDOUT_FROM else None)
    return {"fit": first.get("fit", True), "holdout": holdout}


def band(c: Curve, x: np.ndarray, confidence: float = 0.95):
    """(fitted loss, CI low, CI high) at ``x`` FLOPs: the pointwise percentiles of the replicates' curves."""
    mid = curve_values(c.point, x, c.x_ref)[0]
    reps = curve_values(c.replicates, x, c.x_ref)[c.usable]
    low, high = np.quantile(reps, [(1 - confidence) / 2, (1 + confidence) / 2], axis=0) if len(reps) else (mid, mid)
    return mid, low, high


# A rung whose mean lies off its variant's curve by more than this many of its seeds' standard errors
# (and by more than MISFIT_SHARE of the loss, so that near-identical seeds do not flag every rung) is
# one the curve does not describe: a robust fit may follow the other rungs past it.
MISFIT_SE, MISFIT_SHARE = 4.0, 0.01


def misfits(c: Curve, rungs) -> List[str]:
    """A note per rung that the fitted curve misses by more than seed noise explains."""
    by_number = {r.number: r for r in rungs}
    out = []
    for number, y, f in zip(c.numbers, c.py, curve_values(c.point, c.px, c.x_ref)[0]):
        rung = by_number[number]
        n = len(rung.best().losses)
        se = _std(rung) / math.sqrt(n) if n > 1 else 0.0
        if abs(y / f - 1) > MISFIT_SHARE and abs(y - f) > MISFIT_SE * se:
            spread = f"{abs(y - f) / se:.0f}x its seeds' standard error" if se > 0 else "with no spread over seeds"
            out.append(f"{c.variant}: rung {number} ({rung.label}) lies {y / f - 1:+.1%} off the fitted curve "
                       f"({spread}): the curve does not describe that rung, and values read off it there "
                       f"(the compute multiplier) are the curve's, not the rung's")
    return out


def _std(rung) -> float:
    cell = rung.best()
    values = list(cell.losses.values())
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def series(s: Scaling) -> Dict[str, dict]:
    """Per variant, what the static and the interactive plot draw (plain lists: JSON-safe)."""
    out, rungs = {}, s.ladder.rungs
    for variant, c in s.curves.items():
        entry = {"x": [float(v) for v in c.px], "y": [float(v) for v in c.py],
                 "err": [_std(r) for r in rungs[variant]], "status": c.status}
        if c.ok:
            top = max(c.px.max(), s.extrapolate_to or 0.0)
            grid = np.geomspace(c.px.min() / 1.5, c.px.max() * 1.5, GRID)
            mid, low, high = band(c, grid)
            entry.update(fit_x=grid.tolist(), fit=mid.tolist(), low=low.tolist(), high=high.tolist())
            if s.extrapolate_to is not None:
                far = np.geomspace(c.px.max(), top, GRID // 2)
                mid, low, high = band(c, far)
                entry.update(far_x=far.tolist(), far=mid.tolist(), far_low=low.tolist(), far_high=high.tolist())
        held = s.held.get(variant)
        if held is not None and held.ok and len(s.holdout):
            row = s.holdout[s.holdout["variant"] == variant].iloc[0]
            grid = np.geomspace(held.px.min() / 1.5, row["compute"] * 1.2, GRID)
            mid, low, high = band(held, grid)
            entry.update(held_x=[float(row["compute"])], held_y=[float(row["measured"])], held_fit_x=grid.tolist(),
                         held_fit=mid.tolist(), held_low=low.tolist(), held_high=high.tolist())
        out[variant] = entry
    return out


__all__ = ["Scaling", "analyse", "band", "is_ladder", "series", "OK"]
