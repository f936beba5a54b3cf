"""The scaling section as display tables and text, for the terminal, Markdown, LaTeX and HTML (the
CSV and Parquet exports keep the frames' full precision: ``write``)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, List

import pandas as pd

from ..frames import write_frames
from . import render_nd
from .render_nd import cell as _v
from .analysis import Scaling
from .verdict import k_value

HEADLINE = "Scaling: loss against training compute, L(C) = E + A * C^-alpha"


def _ci(row, name: str) -> str:
    value = _v(row.get(name))
    low, high = _v(row.get(f"{name}_ci_low")), _v(row.get(f"{name}_ci_high"))
    return f"{value} [{low}, {high}]" if value and low else value


def fits_display(s: Scaling) -> pd.DataFrame:
    rows = []
    for _, r in s.fits.iterrows():
        x = "training FLOPs" if r["x"] == "compute" else "non-embedding params"
        rows.append({"variant": r["variant"], "x": x, "rungs": str(r["rungs"]), "E [95% CI]": _ci(r, "E"),
                     "A [95% CI]": _ci(r, "A"), "alpha [95% CI]": _ci(r, "alpha"),
                     "fit": r["status"] + (f": {r['note']}" if isinstance(r["note"], str) and r["note"] else "")})
    return pd.DataFrame(rows)


def k_display(s: Scaling) -> pd.DataFrame:
    rows = []
    for _, r in s.multipliers.iterrows():
        where = f"rung {int(r['rung'])} ({r['size']})" if r["kind"] == "rung" else "extrapolated"
        band = None if pd.isna(r["k_equivalent_low"]) else (r["k_equivalent_low"], r["k_equivalent_high"])
        k = "no finite k" if math.isinf(r["k"]) else \
            f"{k_value(r['k'], band, 4)} [{k_value(r['k_ci_low'], band, 4)}, {k_value(r['k_ci_high'], band, 4)}]"
        rows.append({"variant": r["variant"], "vs": r["baseline"], "at": where, "train FLOPs": f"{r['compute']:.3e}",
                     "fitted loss": _v(r["loss_fit"]), "k [95% CI]": k, "k vs 1": r["relation"],
                     "note": r["note"] if isinstance(r["note"], str) else ""})
    return pd.DataFrame(rows)


def holdout_display(s: Scaling) -> pd.DataFrame:
    rows = []
    for _, r in s.holdout.iterrows():
        k = "" if pd.isna(r["k_predicted"]) else f"{_v(r['k_predicted'])} [{_v(r['k_low'])}, {_v(r['k_high'])}]"
        rows.append({"variant": r["variant"], "held-out rung": f"{int(r['rung'])} ({r['size']})",
                     "measured": _v(r["measured"]), "predicted [95%]": _ci_of(r, "predicted", "pred_low", "pred_high"),
                     "error (nats)": _v(r["error"]), "error (seed sds)": _v(r["error_sds"]),
                     "inside": _yes(r["inside"]), "k predicted [95%]": k, "k from every rung": _v(r["k_all_rungs"]),
                     "k inside": _yes(r["k_inside"]), "note": r["note"] if isinstance(r["note"], str) else ""})
    return pd.DataFrame(rows)


def decisions_display(s: Scaling) -> pd.DataFrame:
    return pd.DataFrame([{"rung": f"{int(r['rung'])} ({r['size']})", "order from": r["by"], "pairs": str(r["pairs"]),
                          "decision accuracy [95%]": "" if pd.isna(r["accuracy"]) else
                          f"{r['accuracy']:.0%} [{r['ci_low']:.0%}, {r['ci_high']:.0%}]"}
                         for _, r in s.decisions.iterrows()])


def _ci_of(row, mid: str, low: str, high: str) -> str:
    return "" if pd.isna(row[mid]) else f"{_v(row[mid])} [{_v(row[low])}, {_v(row[high])}]"


def _yes(v) -> str:
    return "" if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else ("yes" if v else "no")


def tables(s: Scaling) -> List[tuple]:
    """(title, display frame) for each table of the section, in order."""
    return [("Fits", fits_display(s)), ("Compute multipliers", k_display(s)),
            ("Held-out rung: predicted from the rungs below", holdout_display(s)),
            ("Decision accuracy: the order at a smaller rung against the largest rung's", decisions_display(s)),
            *(render_nd.tables(s.nd) if s.nd is not None else [])]


def explanation(s: Scaling) -> List[str]:
    lines = ["Fit per variant: Huber loss on log residuals (Hoffmann et al. 2022, approach 3; delta = "
             f"{_v(float(s.fits['huber_delta'].iloc[0])) if len(s.fits) else '1e-3'}, 1.345 x the seeds' standard "
             "error in log space, at least 1e-3), from a grid of starts, through each rung's mean over seeds; 95% CI: "
             "percentiles of a parametric bootstrap, refitted each time, in which each rung's mean moves by its "
             "standard error times a Student t with seeds - 1 degrees of freedom (calibrated for few seeds), "
             "every variant with the same weights on the same seeds (paired)."]
    if s.baseline:
        lines.append(f"k: the compute multiplier against {s.baseline}, the factor of training compute the "
                     "baseline needs to reach the variant's fitted loss at C (k > 1: the variant is worth more than it "
                     "costs); no finite k where that loss is below the baseline's fitted floor E. A k whose loss lies "
                     f"within the smallest effect that counts ({_v(s.margin)} in {s.metric}) of the baseline's prints "
                     "as 1.00; 'k vs 1' reads the interval against that band: above 1, below 1, equivalent to 1, or "
                     "inconclusive.")
    if s.extrapolate_to is not None:
        lines.append(f"The row 'extrapolated' is at {s.extrapolate_to:.3e} FLOPs, beyond every rung: both curves are "
                     "assumed to hold there, which the ladder cannot show.")
    return lines + list(s.notes) + (render_nd.explanation(s.nd) if s.nd is not None else [])


def terminal_lines(s: Scaling) -> List[str]:
    out = [f"{HEADLINE}; verdicts vs {s.baseline or '(no baseline)'}:"]
    out += [f"  {v}: {line}" for v, line in s.verdicts.items()]
    out += [f"  {n}" if n.startswith("warning") else f"  note: {n}" for n in s.notes]
    return out + (render_nd.terminal_lines(s.nd) if s.nd is not None else [])


def markdown(s: Scaling, table: Callable[[pd.DataFrame], str], esc: Callable[[str], str],
             plot: Path = None) -> List[str]:
    parts = ["", f"## {HEADLINE}", ""]
    parts += [f"- **{esc(v)}**: {esc(line)}" for v, line in s.verdicts.items()] + [""]
    for title, frame in tables(s):
        if len(frame):
            parts += ([] if title == "Fits" else [f"{title}:", ""]) + [table(frame), ""]
    if plot is not None:
        parts += [f"![loss against compute]({plot.as_posix()})", ""]
    return parts + [f"- {esc(line)}" for line in explanation(s)]


def html(s: Scaling, table: Callable[[pd.DataFrame], str], esc: Callable[[str], str]) -> List[str]:
    parts = [f"<h2>{esc(HEADLINE)}</h2>", '<ul class="notes">'
             + "".join(f"<li><b>{esc(v)}</b>: {esc(line)}</li>" for v, line in s.verdicts.items()) + "</ul>"]
    for title, frame in tables(s):
        if len(frame):
            parts += [f"<h3>{esc(title)}</h3>", table(frame)]
    return parts + ['<ul class="notes">' + "".join(f"<li>{esc(line)}</li>" for line in explanation(s)) + "</ul>"]


def latex(s: Scaling, escape: Callable[[str], str]) -> str:
    """Booktabs tables of the fits and the compute multipliers."""
    out = [f"% {escape(HEADLINE)}", "% requires \\usepackage{booktabs}"]
    for _, frame in tables(s):
        if not len(frame):
            continue
        out += [f"\\begin{{tabular}}{{{'l' * len(frame.columns)}}}", "\\toprule",
                " & ".join(escape(c) for c in frame.columns) + r" \\", "\\midrule"]
        out += [" & ".join(escape(v) for v in row) + r" \\" for row in frame.astype(str).itertuples(index=False)]
        out += ["\\bottomrule", "\\end{tabular}", ""]
    out += [f"% {escape(v)}: {escape(line)}" for v, line in s.verdicts.items()]
    return "\n".join(out + [f"% {escape(line)}" for line in explanation(s)]) + "\n"


def write(s: Scaling, out: Path, formats) -> List[Path]:
    """scaling_fits, compute_multipliers, holdout and decision_accuracy as CSV and Parquet, at full precision."""
    frames = {"scaling_fits": s.fits, "compute_multipliers": s.multipliers, "holdout": s.holdout,
              "decision_accuracy": s.decisions, **(render_nd.frames(s.nd) if s.nd is not None else {})}
    return write_frames({k: f for k, f in frames.items() if len(f) or k in ("scaling_fits", "compute_multipliers")},
                        out, formats)
