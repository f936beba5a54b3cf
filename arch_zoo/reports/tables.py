"""The per-variant frame as a table of display strings: for Markdown, HTML, the terminal and LaTeX.

The display keeps what a reader compares: rank, the varied settings, seeds, size and speed, the
ranked metric with its interval and Δ vs the baseline, and the other metrics as mean ± std. Reports
show it as two tables that fit a screen (``main_and_more``): the ranked metric's statistics, then
costs and the other metrics. The CSV/Parquet exports keep every statistic of every metric.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import pandas as pd

from ..formatting import number, setting, si
from ..metrics import per_layer
from ..run_names import DEFAULT_MIXER, is_layers, plain, shown
from .aggregate import summarize
from .load import MAX_LABEL_SETTINGS as MAX_SETTING_COLUMNS, goal_for, load_runs
from ..stats import ALPHA, FLOAT_TOLERANCE, MAX_SEEDS, POWER, SEED_SHARE

RUN_COLUMNS = ["run_id", "variant", "seed", "status", "reason", "step", "params"]

MAX_OTHER_METRICS = 6
PM = "±"
DELTA = "Δ vs baseline [Holm CI]"  # the interval the verdict reads (verdicts.py)
NO_SPREAD = "no spread measured"  # seeds with equal values: a zero-width interval would claim a precision
OPTIONAL = ("params", "FLOPs/token", "state B/token", "train tokens", "train FLOPs", "tokens/s", "bytes/s", "MFU",
            "peak MB", "95% CI", DELTA, "CI level", "p", "p (Holm)", "verdict", "margin", "claim", "d_z",
            "seeds needed", "best seed", "notes")  # dropped from a display when no row has a value


def num(v: Any, digits: int = 4) -> str:
    if digits == 0 and isinstance(v, float) and not math.isnan(v):
        return f"{v:.0f}"
    return number(None if v is pd.NA else v, digits)


def pvalue(p: Any) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return ""
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def seeds_needed_text(row: pd.Series, m: str) -> str:
    """'34', '>1000', 'no effect' (Δ is exactly 0) or 'undefined' (fewer than 2 paired seeds)."""
    n, dz = row.get(f"{m} seeds_needed"), row.get(f"{m} d_z")
    if isinstance(n, float) and not math.isnan(n):
        return f">{MAX_SEEDS}" if math.isinf(n) else str(int(n))
    if isinstance(dz, float) and math.isnan(dz) and row.get(f"{m} delta") == 0:
        return "no effect"
    return "undefined" if row.get("baseline_variant") else ""


def seeds_text(row: pd.Series) -> str:
    text = f"{row['completed']}/{row['seeds']}"
    extra = [f"{row[s]} {s}" for s in ("diverged", "failed", "interrupted", "running", "pending", "other")
             if row.get(s, 0)]
    return text + (f" ({', '.join(extra)})" if extra else "")


def other_metrics(table: pd.DataFrame) -> List[str]:
    """Metrics shown beside the ranked one, losses first (val/loss, val@128/loss, ... before
    accuracies), so a length sweep shows every length; perplexity is exp(loss) and adds nothing. A
    summary of per-layer values (val/attn_first_token, the mean of val/attn_first_token/layer_N) comes
    next, the per-layer values last: one column per run's diagnostic before one per layer."""
    metric = table.attrs.get("metric")
    shown = [m for m in table.attrs.get("metrics", []) if m != metric and not m.endswith("/perplexity")]
    layered = {m.rsplit("/", 1)[0] for m in shown if per_layer(m)}
    # stable: the order within each group stays
    shown.sort(key=lambda m: 0 if m.endswith("/loss") else 1 if m in layered else 3 if per_layer(m) else 2)
    return shown[:MAX_OTHER_METRICS]


def mean_std(row: pd.Series, m: str, pm: str = PM) -> str:
    mean, std = row.get(f"{m} mean"), row.get(f"{m} std")
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    return num(mean) + (f" {pm} {num(std)}" if isinstance(std, float) and not math.isnan(std) else "")


def _interval(low: Any, high: Any) -> str:
    if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in (low, high)):
        return ""
    return NO_SPREAD if low == high else f"[{num(low)}, {num(high)}]"


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _delta(row: pd.Series, m: str) -> str:
    if row.get("baseline"):
        return "baseline"
    d = row.get(f"{m} delta")
    if d is None or (isinstance(d, float) and math.isnan(d)):
        return ""
    interval = _interval(row.get(f"{m} verdict_ci_low"), row.get(f"{m} verdict_ci_high"))
    return ("+" if d > 0 else "") + num(d) + " " + (f"({interval})" if interval == NO_SPREAD else interval)


def _level(row: pd.Series, m: str) -> str:
    level = row.get(f"{m} verdict_ci_level")
    return "" if row.get("baseline") or _missing(level) else f"{level * 100:.4g}%"


def _claim(row: pd.Series, m: str, goal: str) -> str:
    """'holds: Δ ≤ -0.0213 (99.0%)', the one-sided bound the claim reads and its level; '' without a claim."""
    word, bound, level = row.get(f"{m} claim"), row.get(f"{m} claim_bound"), row.get(f"{m} claim_level")
    if not isinstance(word, str) or _missing(bound):
        return ""
    side = "≤" if goal == "min" else "≥"
    return f"{word}: Δ {side} {num(bound)} ({level:.1%}), p {pvalue(row.get(f'{m} claim_p_holm'))}"


def display(table: pd.DataFrame, pm: str = PM) -> pd.DataFrame:
    """Display strings, one row per variant; column names are plain text."""
    metric = table.attrs.get("metric", "val/loss")
    settings = table.attrs.get("settings", [])
    goal = goal_for(table.attrs, metric)
    if len(settings) > MAX_SETTING_COLUMNS:  # e.g. compare across unrelated runs: one label column instead
        settings = []
    short = {s: s.rsplit(".", 1)[-1] for s in settings}
    if len(set(short.values())) < len(short):
        short = {s: s for s in settings}
    rows = []
    for _, r in table.iterrows():
        out: Dict[str, str] = {"rank": num(r["rank"])}
        out.update({short[s]: _setting_cell(s, r, settings, table.attrs.get("mixer")) for s in settings} if settings
                   else {"variant": str(r["variant"])})
        out["seeds ok"] = seeds_text(r)
        out["params"] = si(r.get("params"))
        out["FLOPs/token"] = si(r.get("flops_per_token"))
        out["state B/token"] = si(r.get("state_bytes_per_token"))  # float32 decoding state at max_seq_len
        out["train tokens"] = si(r.get("train_tokens"))  # the budget each variant actually spent
        out["train FLOPs"] = si(r.get("train_flops"))
        out["tokens/s"] = si(r.get("train_tokens_per_s"))
        out["bytes/s"] = si(r.get("train_bytes_per_s"))  # UTF-8 bytes of training text a second (text tasks)
        mfu = r.get("mfu")
        out["MFU"] = f"{mfu:.1%}" if isinstance(mfu, float) and not math.isnan(mfu) else ""
        out["peak MB"] = num(r.get("peak_memory_mb"), 0) if isinstance(r.get("peak_memory_mb"), float) else ""
        arrow = "↓" if goal == "min" else "↑"
        out[f"{metric} {arrow}"] = mean_std(r, metric, pm)
        out["95% CI"] = _interval(r.get(f"{metric} ci_low"), r.get(f"{metric} ci_high"))
        out[DELTA] = _delta(r, metric)
        out["CI level"] = _level(r, metric)
        out["p"] = "" if r.get("baseline") else pvalue(r.get(f"{metric} p"))
        out["p (Holm)"] = "" if r.get("baseline") else pvalue(r.get(f"{metric} p_holm"))
        word = r.get(f"{metric} verdict")
        out["verdict"] = word if isinstance(word, str) else ""
        margin = r.get(f"{metric} margin")
        out["margin"] = "" if r.get("baseline") or _missing(margin) else num(margin, 3)
        out["claim"] = _claim(r, metric, goal)
        dz = r.get(f"{metric} d_z")
        out["d_z"] = "" if r.get("baseline") or dz is None or math.isnan(dz) else f"{dz:+.2f}"
        out["seeds needed"] = "" if r.get("baseline") else seeds_needed_text(r, metric)
        seed = r.get(f"{metric} best_seed")
        out["best seed"] = "" if seed is None or pd.isna(seed) else str(seed)
        skipped = (table.attrs.get("not_evaluated") or {}).get(str(r["variant"])) or ""
        for m in other_metrics(table):  # a length the variant cannot run is marked, its why in the notes
            out[m] = mean_std(r, m, pm) or ("not evaluated" if f"{m.rsplit('/', 1)[0]}:" in skipped else "")
        notes = r.get("notes")
        out["notes"] = notes if isinstance(notes, str) else ""  # None reads back from pandas as NaN
        rows.append(out)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    return frame[[c for c in frame.columns if c not in OPTIONAL or frame[c].str.len().gt(0).any()]]


def _setting_cell(key: str, row: pd.Series, settings: List[str], mixer: Optional[str]) -> str:
    """A setting as its column shows it: a layer list by its layout's name (run_names.shown)."""
    if is_layers(key):
        return shown(key, row[key], {s: row[s] for s in settings}, mixer or DEFAULT_MIXER)
    return "null" if row[key] is None else setting(row[key])


def main_and_more(table: pd.DataFrame, pm: str = PM) -> tuple:
    """The display split in two: (variant, seeds, the ranked metric's mean ± std, CI, Δ vs baseline,
    p, p (Holm), d_z, seeds needed, rank) and (variant, size and speed, best seed, the other metrics, notes)."""
    shown = display(table, pm)
    if shown.empty:
        return shown, shown
    metric_cols = [c for c in shown.columns if c.startswith(table.attrs.get("metric", "val/loss") + " ")]
    stats = [*metric_cols, "95% CI", DELTA, "CI level", "p", "p (Holm)", "verdict", "margin", "claim", "d_z",
             "seeds needed"]
    label = [c for c in shown.columns if c not in ("rank", "seeds ok", *OPTIONAL, *metric_cols)
             and c not in other_metrics(table)]
    main = shown[[*label, "seeds ok", *[c for c in stats if c in shown.columns], "rank"]]
    more = shown[[c for c in shown.columns if c not in main.columns or c in label]]
    return main, more.rename(columns={"best seed": f"best seed ({table.attrs.get('metric', 'val/loss')})"})


def title(table: pd.DataFrame) -> str:
    metric, goal = table.attrs.get("metric", "val/loss"), table.attrs.get("goal", "min")
    task = f", task {table.attrs['task']}" if table.attrs.get("task") else ""
    return f"{table.attrs.get('name') or 'report'}{task}: variants ranked by {metric} ({goal})"


def footnotes(table: pd.DataFrame) -> List[str]:
    base = table.attrs.get("baseline") or {}
    lines = []
    if base:
        lines.append("Δ = variant − baseline (" + ", ".join(f"{k}={plain(v)}" for k, v in base.items())
                     + "), paired over the seeds both completed; p from a paired t-test (scipy.stats.ttest_rel); "
                     "p (Holm): Holm-Bonferroni adjusted over every variant-vs-baseline test of this metric; "
                     f"Δ's interval is adjusted for the same comparisons: at CI level 1 - {ALPHA:g} x p / p (Holm) "
                     "(its Holm step's level), so it excludes 0 exactly when p (Holm) < "
                     f"{ALPHA:g} (the unadjusted 95% CI is delta_ci_low/high in the CSV)"
                     + ("; with adaptive seeds, the repeated confidence interval of each pair's last look instead "
                        "(the seeds note below)" if table.attrs.get("sequential") else "") + "; "
                     "d_z = mean Δ / std of the paired differences (same sign as Δ).")
        lines.append(margin_note(table))
        effect = (f"a difference of {table.attrs['min_effect']:g}" if table.attrs.get("min_effect")
                  else "the observed Δ")
        lines.append(f"seeds needed: paired seeds for {POWER:.0%} power (two-sided paired t-test, alpha {ALPHA:g}, exact "
                     f"noncentral t) to detect {effect} at the observed spread of the paired differences.")
    lines.append("mean ± std over completed seeds; 95% CI " + (
        "by BCa bootstrap (scipy.stats.bootstrap, 9999 resamples, fixed seed; the percentile interval where BCa "
        "is undefined)."
        if table.attrs.get("ci") == "bootstrap" else "from the t-distribution.")
        + " An interval of a bounded metric (an accuracy in [0, 1]) is clipped to its range.")
    return lines + list(table.attrs.get("notes", []))


def margin_note(table: pd.DataFrame) -> str:
    """What the verdict column means, with the margin it used and where that came from."""
    metric = table.attrs.get("metric", "val/loss")
    given = table.attrs.get("min_effect")
    source = (f"±{number(given, 3)}, the smallest effect that counts as given (metric.min_effect in the spec, or "
              "--min-effect)" if given
              else f"± the margin column: the default smallest effect that counts, {SEED_SHARE:g} x the pooled seed "
                   f"standard deviation of {metric} of the two variants compared (no other variant's), at least "
                   f"{FLOAT_TOLERANCE:g} x their typical value (float rounding); set metric.min_effect in the spec, "
                   "or --min-effect, to choose it")
    return (f"verdict: equivalent when Δ's interval lies inside {source} (two one-sided tests); better or worse "
            f"when p (Holm) < {ALPHA:g}, which is when that interval excludes 0; else inconclusive."
            + (f" '{NO_SPREAD}': the seeds gave equal values, so the spread, and with it any interval, is unknown."
               if _no_spread(table) else ""))


def _no_spread(table: pd.DataFrame) -> bool:
    """Whether some interval of the ranked metric is a point: seeds with equal values (or equal differences)."""
    metric = table.attrs.get("metric", "val/loss")
    ends = [(f"{metric} ci_low", f"{metric} ci_high"), (f"{metric} verdict_ci_low", f"{metric} verdict_ci_high")]
    return any(low in table.columns and bool((table[low] == table[high]).any()) for low, high in ends)


def terminal_table(sweep_dir: Union[str, Path, pd.DataFrame, List[pd.DataFrame]], metric: Optional[str] = None,
                   baseline=None) -> str:
    """The table ``arch-zoo sweep`` and ``arch-zoo report`` print: a sweep dir (or a per-variant frame)."""
    from tabulate import tabulate

    if isinstance(sweep_dir, list):  # one table per task (load_groups)
        return "\n".join(terminal_table(t) for t in sweep_dir)
    table = sweep_dir if isinstance(sweep_dir, pd.DataFrame) else \
        summarize(load_runs(sweep_dir), metric=metric, baseline=baseline)
    shown = display(table)
    wide = ["FLOPs/token", "train tokens", "train FLOPs", "peak MB", "notes"]
    if "state B/token" in shown.columns and shown["state B/token"].nunique() < 2:
        wide.append("state B/token")  # shown where variants differ in it: the decoding-memory trade a mixer makes
    keep = [c for c in shown.columns if c not in wide and c not in other_metrics(table)]
    body = tabulate(shown[keep], headers="keys", tablefmt="simple", showindex=False, disable_numparse=True) \
        if len(shown) else "(no runs)"
    return "\n".join([title(table), body, *footnotes(table)]) + "\n"


def runs_display(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The per-run table of every report format: ids, status, reason and the ranked metric."""
    cols = [c for c in RUN_COLUMNS if c in runs.columns] + ([metric] if metric in runs.columns else [])
    shown = runs[cols].copy()
    for col in shown.columns:
        shown[col] = [" ".join(v.split()) if isinstance(v, str) else
                      num(int(v)) if isinstance(v, float) and v.is_integer() else num(v) for v in shown[col]]
    return shown
