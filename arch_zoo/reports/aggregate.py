"""Per-run rows → one row per variant: seed counts, size and speed, and for every metric the mean,
std, 95% interval (t, or bootstrap on request) and best seed, and Δ vs the baseline from a paired
t-test across seeds, with Holm-adjusted p-values, the interval the verdict reads (``verdicts``), the
effect size d_z and the seeds 80% power needs; optionally a one-sided claim.

Statistics use completed runs only. Diverged, failed, running and pending runs are counted in
their own columns and named in ``notes``; they are never averaged and never dropped.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import pandas as pd
from scipy import stats

from ..errors import ConfigError, did_you_mean
from ..metrics import check_claim, per_byte_instead, range_of
from ..run_names import plain
from .load import FIXED, goal_for
from .table_notes import clip_note, run_notes, table_attrs
from .sequential_verdicts import apply as sequential_apply
from ..stats import bootstrap_ci, cohens_dz, pair_margin, seeds_needed, tost_p
from .verdicts import claim_note, claim_rows, equivalence_hint, judge_rows

STATUSES = ("completed", "diverged", "failed", "interrupted", "running", "pending")
STATS = ("mean", "std", "ci_low", "ci_high", "n", "best", "best_seed",
         "delta", "delta_ci_low", "delta_ci_high", "p", "n_paired", "p_holm", "verdict_ci_low", "verdict_ci_high",
         "verdict_ci_level", "d_z", "seeds_needed", "margin", "p_tost", "verdict", "sd_paired")
CONFIDENCE = 0.95
CI_METHODS = ("t", "bootstrap")
Baseline = Union[None, str, Mapping[str, Any], Sequence[str]]  # "k=v", "k=v k2=v2", ["k=v", ...] or {k: v}


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


def ranking_metric(runs: pd.DataFrame, metric: str) -> Tuple[str, Optional[str]]:
    """``metric``, or the bits per byte of its split when ``metric`` is per token and the variants'
    tokens cover different text (measured: their runs' bytes per token on that split differ), with
    the one line that says so (metrics.per_byte_instead)."""
    split = metric.rsplit("/", 1)[0]
    measured = {v: per_split.get(split) for v, per_split in (runs.attrs.get("bytes_per_token") or {}).items()
                if v in set(runs["variant"].astype(str))}
    available = [m for m in metrics_of(runs) if runs[m].notna().any()]
    return per_byte_instead(metric, measured, available, runs.attrs.get("units"))


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


def _pairs(a: Mapping[Any, float], b: Mapping[Any, float]) -> tuple:
    seeds = sorted(set(a) & set(b))
    return np.array([a[s] for s in seeds], dtype=float), np.array([b[s] for s in seeds], dtype=float)


def paired(a: Mapping[Any, float], b: Mapping[Any, float]) -> tuple:
    """(mean a-b, ci_low, ci_high, p, n) over the seeds both have; ttest_rel for the p-value."""
    xa, xb = _pairs(a, b)
    n = len(xa)
    if not n:
        return math.nan, math.nan, math.nan, math.nan, 0
    delta, _, low, high = mean_ci(xa - xb)
    p = math.nan
    if n >= 2:
        with warnings.catch_warnings():  # identical differences: scipy warns and returns nan
            warnings.simplefilter("ignore", RuntimeWarning)
            p = float(stats.ttest_rel(xa, xb).pvalue)
    return delta, low, high, p, n


NULLS = ("null", "Null", "NULL", "~")  # how YAML writes null: --baseline model.qk_norm=null is the null setting


def _typed(value: Any) -> Any:
    """A baseline value from the command line: null as YAML reads it; the rest compare as text."""
    return None if isinstance(value, str) and value.strip() in NULLS else value


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        if isinstance(a, bool) or isinstance(b, bool):
            return str(a).lower() == str(b).lower()
        return _text(a) == _text(b)


def _text(value: Any) -> str:
    """A list or mapping (a spec's ``model.layers``) as run.json stores it: its YAML flow text."""
    return plain(value) if isinstance(value, (list, tuple, dict)) else str(value)


def setting_columns(settings: Sequence[str], key: str) -> List[str]:
    """The settings columns ``key`` names: itself, else those it ends (a short key, 'position')."""
    return [s for s in settings if s == key] or [s for s in settings if s.endswith("." + key)]


def resolve_baseline(runs: pd.DataFrame, baseline: Baseline) -> Dict[str, Any]:
    """{settings column: value}; keys may be short ('position') when unambiguous."""
    if baseline is None:
        baseline = runs.attrs.get("baseline") or {}
    if isinstance(baseline, str):  # what --baseline takes, as one string: shell-style words
        import shlex

        baseline = shlex.split(baseline)
    if not isinstance(baseline, Mapping):
        pairs = {}
        for item in baseline:
            if not isinstance(item, str) or "=" not in item:
                raise ConfigError("baseline", f"'{item}' is not KEY=VALUE")
            key, value = item.split("=", 1)
            pairs[key.strip()] = value.strip()
        baseline = pairs
    settings = settings_of(runs)
    out = {}
    for key, value in baseline.items():
        match = setting_columns(settings, key)
        if len(match) != 1:
            what = "is ambiguous" if match else "is not a varied setting"
            raise ConfigError("baseline", f"'{key}' {what}{did_you_mean(key, settings)}; "
                                          f"varied settings: {', '.join(settings) or '(none)'}")
        out[match[0]] = _typed(value)
    if out and len(runs) and not any(all(_same(r[k], v) for k, v in out.items()) for _, r in runs.iterrows()):
        wanted = ",".join(f"{k}={plain(v)}" for k, v in out.items())
        null = [k for k, v in out.items() if v in ("None", "none") and runs[k].isna().any()]
        hint = f" (null is spelled null, as in YAML: {null[0]}=null)" if null else ""
        raise ConfigError("baseline", f"{wanted} matches no variant{hint}; variants: "
                                      f"{'; '.join(dict.fromkeys(runs['variant'].astype(str)))}")
    return out


def _closest(row: Dict[str, Any], candidates: List[Dict[str, Any]], settings: List[str], base_keys: List[str]):
    """The baseline variant that agrees with ``row`` on the most settings outside the baseline's keys:
    with a grid over position x norm and baseline position=sinusoidal, rope+rmsnorm is compared
    with sinusoidal+rmsnorm."""
    return max(candidates, key=lambda c: _agreement(row, c, settings, base_keys), default=None)


def _agreement(row, candidate, settings: List[str], base_keys: List[str]) -> int:
    return sum(_same(candidate[s], row[s]) for s in settings if s not in base_keys)


def _tied(row, chosen, candidates, settings: List[str], base_keys: List[str]) -> bool:
    """Whether another baseline variant shares as many of ``row``'s other settings as ``chosen``."""
    best = _agreement(row, chosen, settings, base_keys)
    return any(c is not chosen and _agreement(row, c, settings, base_keys) == best for c in candidates)


def check_options(ci: str, min_effect: Optional[float]) -> None:
    if ci not in CI_METHODS:
        raise ConfigError("ci", f"unknown interval '{ci}'{did_you_mean(ci, CI_METHODS)}; choices: "
                                f"{', '.join(CI_METHODS)}")
    if min_effect is not None and not (math.isfinite(min_effect) and min_effect > 0):
        raise ConfigError("min-effect", f"{min_effect} is not a positive difference in the metric's units")


def _effect(r: Dict[str, Any], other: Optional[Dict[str, Any]], m: str, ci: str,
            min_effect: Optional[float]) -> Dict[str, Any]:
    """Δ vs the baseline variant ``other`` on metric ``m``: paired t-test, d_z and the seeds 80% power needs
    for the observed effect, or for ``min_effect`` (metric units) at the observed spread of the differences;
    the pair's margin (``min_effect``, else from these two variants' seeds) and its TOST p. Records the
    paired differences in ``r["_diffs"]``."""
    r.setdefault("_diffs", {})
    if other is None:
        values = (math.nan,) * 4 + (0,) + (math.nan,) * 5
    else:
        xa, xb = _pairs(r["_values"][m], other["_values"][m])
        r["_diffs"][m] = xa - xb
        margin = pair_margin(r["_values"][m].values(), other["_values"][m].values(), min_effect) \
            if other is not r else math.nan
        delta, low, high, p, n = paired(r["_values"][m], other["_values"][m])
        if ci == "bootstrap":
            low, high = bootstrap_ci(xa - xb, CONFIDENCE)
        dz = cohens_dz(xa - xb)
        spread = float(np.std(xa - xb, ddof=1)) if n >= 2 else math.nan
        if min_effect is not None and n >= 2:
            target = min_effect / spread if spread > 0 else math.inf
        else:
            target = dz
        values = (delta, low, high, p, n, dz, seeds_needed(target), tost_p(xa - xb, margin), margin, spread)
    names = ("delta", "delta_ci_low", "delta_ci_high", "p", "n_paired", "d_z", "seeds_needed", "p_tost", "margin",
             "sd_paired")
    return {f"{m} {name}": value for name, value in zip(names, values)}


def summarize(runs: pd.DataFrame, metric: Optional[str] = None, baseline: Baseline = None, ci: str = "t",
              min_effect: Optional[float] = None, claim: Optional[Mapping[str, float]] = None) -> pd.DataFrame:
    """One row per variant, ranked by ``metric`` (default: the sweep's) in its goal's direction.

    ``ci``: "t" (t-distribution) or "bootstrap" (BCa, for metrics far from normal) for the intervals of
    the means and of Δ. ``min_effect``: the smallest difference of ``metric`` that counts, in its units
    (default: the sweep spec's ``metric.min_effect``, else ``stats.smallest_effect`` of the seeds'
    spread); a Δ whose interval lies inside it is 'equivalent', and the seeds-needed column plans for it
    (when given) instead of the observed Δ. ``claim`` ({better_by, alpha}; default: the spec's
    ``metric.claim``): test that each variant beats its baseline on ``metric`` by at least better_by."""
    min_effect = min_effect if min_effect is not None else runs.attrs.get("min_effect")
    check_options(ci, min_effect)
    claim = check_claim(claim if claim is not None else runs.attrs.get("claim"))
    metric, rank_note, goal = _ranking(runs, metric)
    settings, metrics = settings_of(runs), metrics_of(runs)
    base = resolve_baseline(runs, baseline)
    clipped: Dict[str, List[str]] = {}  # metric -> the variants whose interval is clipped to its range
    rows = [_variant_row(runs.attrs, variant, group, settings, metrics, base, ci, clipped)
            for variant, group in runs.groupby("variant", sort=False, dropna=False)]
    ambiguous = _compare(rows, settings, metrics, list(base), metric, ci, min_effect)
    judge_rows(rows, metrics, runs.attrs, goal, ci)
    sequential = sequential_apply(rows, metric, goal, runs.attrs.get("seeds"))
    if claim is not None:
        claim_rows(rows, metric, claim, goal)
    hint = equivalence_hint(rows, metric) if min_effect is None else None
    table = pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows])
    for s in settings:  # as the runs have them: a null beside numbers stays None, not NaN
        table[s] = pd.Series([r[s] for r in rows], dtype=object)
    if table.empty:
        table = pd.DataFrame(columns=["variant", *settings, "baseline", "seeds", *STATUSES, "rank"])
        table.attrs.update(table_attrs(runs, settings, metric, goal, base, metrics, [], ci, min_effect))
        return table
    table = _ranked(table, metric, goal, settings)
    table.attrs.update(table_attrs(runs, settings, metric, goal, base, metrics, table, ci, min_effect))
    table.attrs["claim"] = claim
    table.attrs["mixer"] = runs.attrs.get("mixer")  # the model's mixer: a layer list's name says it (tables.py)
    table.attrs["notes"] += [clip_note(m, names) for m, names in clipped.items()]
    if claim is not None:
        table.attrs["notes"].append(claim_note(metric, goal, claim, int(table[f"{metric} claim_p"].notna().sum())))
    if hint:
        table.attrs["notes"].append(hint)
    if rank_note:
        table.attrs["notes"].insert(0, rank_note)
    table.attrs["notes"] += sequential
    table.attrs["sequential"] = bool(sequential)  # the Δ interval is each pair's repeated interval (tables.py)
    pairing = _pairing_note(rows, ambiguous)
    if pairing:
        table.attrs["notes"].append(pairing)
    return table


def _ranking(runs: pd.DataFrame, metric: Optional[str]) -> Tuple[str, Optional[str], str]:
    """(the metric the table ranks by, the line saying why when it is not the one asked for, its goal)."""
    metric = metric or runs.attrs.get("metric") or "val/loss"
    check_metric(runs, metric)
    metric, rank_note = ranking_metric(runs, metric)
    goal = goal_for(runs.attrs, metric)
    if goal is None:
        raise ConfigError("metric", f"{metric}: no run or sweep spec says whether lower or higher is better "
                          "(set metric.goal in the sweep spec)")
    return metric, rank_note, goal


def _variant_row(attrs: Mapping[str, Any], variant: Any, group: pd.DataFrame, settings: List[str],
                 metrics: List[str], base: Dict[str, Any], ci: str, clipped: Dict[str, List[str]]) -> Dict[str, Any]:
    """One variant's row before any comparison: its settings, run counts by status, size and speed, and
    each metric's statistics over its completed seeds (``_values``: seed -> value, for the pairing)."""
    first = group.iloc[0]
    row: Dict[str, Any] = {"variant": variant, **{s: first[s] for s in settings}}
    row["baseline"] = bool(base) and all(_same(first[k], v) for k, v in base.items())
    row["seeds"] = len(group)
    for status in STATUSES:
        row[status] = int((group["status"] == status).sum())
    row["other"] = int((~group["status"].isin(STATUSES)).sum())
    done = group[group["status"] == "completed"]
    for col in ("params", "flops_per_token", "state_bytes_per_token", "train_tokens", "train_flops",
                "train_tokens_per_s", "train_bytes_per_s", "mfu", "peak_memory_mb", "wall_time_s"):
        values = (done if done[col].notna().any() else group)[col].dropna()
        row[col] = float(values.mean()) if len(values) else math.nan
    row["notes"] = run_notes(group) or None
    row["_values"] = {}
    for m in metrics:
        row.update(_metric_stats(attrs, m, done, ci, row, clipped))
    return row


def _metric_stats(attrs: Mapping[str, Any], m: str, done: pd.DataFrame, ci: str, row: Dict[str, Any],
                  clipped: Dict[str, List[str]]) -> Dict[str, Any]:
    """Metric ``m`` over a variant's completed runs: mean, std, interval, n and best seed (non-finite values
    left out); records its values by seed in ``row["_values"]``."""
    ok = done[np.isfinite(done[m])]
    per_seed = ok.groupby("seed")[m].mean().to_dict() if ok["seed"].notna().all() else dict(enumerate(ok[m]))
    row["_values"][m] = per_seed
    mean, std, low, high = mean_ci(ok[m].to_numpy())
    if ci == "bootstrap":
        low, high = bootstrap_ci(ok[m].to_numpy(), CONFIDENCE)
    low, high = _clipped(m, low, high, row["variant"], clipped)
    out = {f"{m} mean": mean, f"{m} std": std, f"{m} ci_low": low, f"{m} ci_high": high, f"{m} n": len(ok)}
    direction = goal_for(attrs, m)
    if len(ok) and direction is not None:
        best = ok[m].idxmin() if direction == "min" else ok[m].idxmax()
        out[f"{m} best"], out[f"{m} best_seed"] = float(ok.at[best, m]), ok.at[best, "seed"]
    else:
        out[f"{m} best"], out[f"{m} best_seed"] = math.nan, pd.NA
    return out


def _compare(rows: List[Dict[str, Any]], settings: List[str], metrics: List[str], base_keys: List[str], metric: str,
             ci: str, min_effect: Optional[float]) -> List[str]:
    """Each row's Δ columns against its baseline variant (the one sharing most other settings); the
    pairs where another baseline variant shared as many ('variant vs baseline variant')."""
    candidates = [r for r in rows if r["baseline"]]
    ambiguous = []
    for r in rows:
        other = _closest(r, candidates, settings, base_keys)
        r["baseline_variant"] = other["variant"] if other is not None else None
        if other is not None and not r["baseline"] and _tied(r, other, candidates, settings, base_keys):
            ambiguous.append(f"{r['variant']} vs {other['variant']}")
        for m in metrics:
            r.update(_effect(r, other, m, ci, min_effect if m == metric else None))
    return ambiguous


def _ranked(table: pd.DataFrame, metric: str, goal: str, settings: List[str]) -> pd.DataFrame:
    """The table ranked by ``metric``'s mean in its goal's direction, its identifying columns first."""
    key = f"{metric} mean"
    if key in table.columns:
        table["rank"] = table[key].rank(method="min", ascending=goal == "min").astype("Int64")
        table = table.sort_values(["rank", "variant"], na_position="last", kind="stable").reset_index(drop=True)
    else:
        table["rank"] = pd.array([pd.NA] * len(table), dtype="Int64")
    front = ["rank", "variant", *settings, "baseline", "baseline_variant", "seeds", *STATUSES, "other"]
    return table[front + [c for c in table.columns if c not in front]]


def _pairing_note(rows: List[Dict[str, Any]], ambiguous: List[str]) -> Optional[str]:
    """With several baseline variants (a grid beside the baseline's axis): which baseline each is compared with."""
    if sum(bool(r["baseline"]) for r in rows) < 2:
        return None
    pairs = [f"{r['variant']} vs {r['baseline_variant']}" for r in rows if not r["baseline"] and r["baseline_variant"]]
    return (f"Δ is against the baseline variant sharing most other settings: {'; '.join(pairs)}"
            + (f"; a tie, broken by the first baseline variant, for {'; '.join(ambiguous)}" if ambiguous else ""))


def _clipped(m: str, low: float, high: float, variant: Any, clipped: Dict[str, List[str]]) -> tuple:
    """The interval of a bounded metric's mean clipped to the metric's range (``metrics.RANGES``): a t-interval
    at 2 seeds reaches far past it (e.g. [-3.44, 4.57] for an accuracy), and no mean can lie there."""
    bounds = range_of(m)
    if bounds is None or math.isnan(low) or math.isnan(high) or (bounds[0] <= low and high <= bounds[1]):
        return low, high
    clipped.setdefault(m, []).append(str(variant))
    return max(low, bounds[0]), min(high, bounds[1])
