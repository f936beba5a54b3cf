"""``--within KEY`` (``reports/within.py``) as files, Markdown, HTML and terminal lines: the comparisons at
each level of KEY, then the interaction (how each variant's Δ changes between levels)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, List, Sequence

import pandas as pd

from ..formatting import number
from ..run_names import plain
from ..stats import ALPHA
from .frames import write_frames
from .tables import DELTA, _delta, _level, mean_std, num, pvalue
from .within import Within

INTERACTION = "difference of Δ [Holm CI]"


def _short(w: Within) -> str:
    return w.key.rsplit(".", 1)[-1]


def display(w: Within) -> pd.DataFrame:
    """One row per (level, variant): the level, the variant by its other settings, the metric's mean ± std,
    Δ vs the baseline at that level with its Holm-adjusted interval, p, p (Holm), verdict and paired seeds."""
    m, arrow = w.metric, "↓" if w.goal == "min" else "↑"
    rows = []
    for _, r in w.rows.iterrows():
        word = r.get(f"{m} verdict")
        rows.append({_short(w): r[w.key], "variant": r["label"] + (" (baseline)" if r["baseline"] else ""),
                     f"{m} {arrow}": mean_std(r, m), DELTA: _delta(r, m), "CI level": _level(r, m),
                     "p": "" if r["baseline"] else pvalue(r.get(f"{m} p")),
                     "p (Holm)": "" if r["baseline"] else pvalue(r.get(f"{m} p_holm")),
                     "verdict": word if isinstance(word, str) else "",
                     "seeds": num(r[f"{m} n"] if r["baseline"] else r[f"{m} n_paired"])})
    return pd.DataFrame(rows)


def interaction_display(w: Within) -> pd.DataFrame:
    """One row per variant and level: its Δ there and at the reference level, and the difference of the two
    with its Holm-adjusted interval, p, p (Holm), reading and the seeds with all four runs."""
    m = w.metric
    rows = []
    for _, r in w.interaction.iterrows():
        rows.append({"variant": r["label"], _short(w): f"{r[w.key]} − {r['reference']}",
                     "Δ at the level": _signed(r[f"{m} delta_at_level"]),
                     f"Δ at {plain(w.reference)}": _signed(r[f"{m} delta_at_reference"]),
                     INTERACTION: _delta(r, m), "CI level": _level(r, m), "p": pvalue(r.get(f"{m} p")),
                     "p (Holm)": pvalue(r.get(f"{m} p_holm")), "Δ changes?": r.get(f"{m} verdict") or "",
                     "seeds": num(r[f"{m} n_paired"])})
    return pd.DataFrame(rows)


def _signed(x: float) -> str:
    text = number(x)
    return ("+" + text) if text and x > 0 else text


def explanation(w: Within) -> str:
    base = ", ".join(f"{k}={plain(v)}" for k, v in w.baseline.items())
    interval = "BCa bootstrap" if w.ci == "bootstrap" else "t"
    return (f"At each level of {w.key}, each variant against the baseline at that level ({base}, {w.key} at the "
            f"level), paired over the seeds both completed: Δ = variant − baseline, p from a paired t-test, "
            f"p (Holm) adjusted over the {int(w.rows[f'{w.metric} p'].notna().sum())} comparisons of this table, Δ's "
            f"{interval} interval at the matching CI level (1 - {ALPHA:g} x p / p (Holm)), so it excludes 0 exactly "
            "when p (Holm) < 0.05; the verdict reads it as the main table's does.")


def interaction_explanation(w: Within) -> str:
    given = w.interaction[f"{w.metric} margin"].dropna() if len(w.interaction) else []
    same = (f"'same' when it lies inside ±{number(given.iloc[0], 3)} (the smallest effect that counts), "
            if len(given) else "no 'same' without a smallest effect that counts (--min-effect or metric.min_effect), ")
    return (f"A difference of differences: per seed, (variant − baseline at the level) − (variant − baseline at "
            f"{w.key}={plain(w.reference)}), the same variant and baseline settings at both levels; its mean over "
            "the seeds with all four runs (paired by seed: a seed's initial weights, and under a task.* key other than "
            "the data's, its data order, are shared by its four runs, so pairing removes the seed's share of the "
            "noise; the test holds whatever the key; the two Δs "
            "shown are over those seeds too, so they differ from the table above where a run is missing), a t-test "
            f"of it against 0 (a paired t-test of the two Δs), p (Holm) over the {len(w.interaction)} "
            f"interaction{'s' if len(w.interaction) != 1 else ''}, its interval at the matching CI level. 'changes' "
            f"when that interval excludes 0 (Δ at the level differs from Δ at {plain(w.reference)}), {same}else "
            "inconclusive. It compares Δs, so it holds where the metric itself is not comparable across levels.")


def frame(w: Within) -> pd.DataFrame:
    """within.csv: the comparisons (section 'within') then the interactions (section 'interaction')."""
    parts = [t.assign(section=name) for name, t in (("within", w.rows), ("interaction", w.interaction)) if len(t)]
    out = pd.concat(parts, ignore_index=True)
    return out[["section"] + [c for c in out.columns if c != "section"]]


def write(w: Within, out: Path, fmts: Sequence[str]) -> List[Path]:
    return write_frames({"within": frame(w)}, out, fmts)


def title(w: Within) -> str:
    return f"Within {w.key}: each variant against the baseline at the same level ({w.metric})"


def markdown(w: Within, md_table: Callable[[pd.DataFrame], str], escape: Callable[[str], str]) -> List[str]:
    parts = ["", f"## {escape(title(w))}", "", escape(explanation(w)), "", md_table(display(w)), ""]
    if len(w.interaction):
        parts += [f"### Interaction: does Δ change with {escape(w.key)}?", "", escape(interaction_explanation(w)), "",
                  md_table(interaction_display(w)), ""]
    return parts + [f"- {escape(n)}" for n in w.notes]


def html(w: Within, table: Callable[[pd.DataFrame], str], esc: Callable[[str], str]) -> List[str]:
    parts = [f"<h2>{esc(title(w))}</h2>", f"<p>{esc(explanation(w))}</p>", table(display(w))]
    if len(w.interaction):
        parts += [f"<h3>Interaction: does Δ change with {esc(w.key)}?</h3>",
                  f"<p>{esc(interaction_explanation(w))}</p>", table(interaction_display(w))]
    return parts + [f"<p>{esc(n)}</p>" for n in w.notes]


def terminal_lines(w: Within) -> List[str]:
    from tabulate import tabulate

    lines = ["", title(w), tabulate(display(w), headers="keys", tablefmt="simple", showindex=False,
                                     disable_numparse=True), explanation(w)]
    if len(w.interaction):
        lines += ["", f"Interaction: does Δ change with {w.key}?",
                  tabulate(interaction_display(w), headers="keys", tablefmt="simple", showindex=False,
                           disable_numparse=True), interaction_explanation(w)]
    return lines + w.notes
