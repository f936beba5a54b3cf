"""The L(N, D) part of a ladder's scaling section (nd.py), as display tables, text and frames; render.py
puts them after the L(C) tables."""
from __future__ import annotations

import math
from typing import Dict, List, Tuple

import pandas as pd

from ...formatting import number
from .nd import PARAMS, NDScaling

HEADLINE = "L(N, D) = E + A / N^alpha + B / D^beta, from sizes x WSD-S budgets"


def cell(x) -> str:
    """A number as a table cell: blank for none, inf spelled out, 4 significant digits."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return number(float(x), 4)


def _ci(row, name: str, low: str = "_low", high: str = "_high") -> str:
    value = cell(row.get(name))
    return f"{value} [{cell(row.get(name + low))}, {cell(row.get(name + high))}]" if value else ""


def tables(nd: NDScaling) -> List[Tuple[str, pd.DataFrame]]:
    fits = pd.DataFrame([{"variant": r["variant"], "points": str(r["points"]),
                          **{f"{p} [95% CI]": _ci(r, p) for p in PARAMS},
                          "fit": r["status"] + (f": {r['note']}" if isinstance(r.get("note"), str) and r["note"] else "")}
                         for _, r in nd.fits.iterrows()])
    best = pd.DataFrame([{"variant": r["variant"], "train FLOPs": f"{r['compute']:.3e}", "N* [95% CI]": _ci(r, "N_opt"),
                          "D* [95% CI]": _ci(r, "D_opt"), "loss at N*, D* [95% CI]": _ci(r, "loss_opt")}
                         for _, r in nd.optimum.iterrows()])
    ks = pd.DataFrame([{"variant": r["variant"], "vs": r["baseline"], "train FLOPs": f"{r['compute']:.3e}",
                        "k at the optimum [95% CI]": "no finite k" if math.isinf(r["k"]) else _ci(r, "k")}
                       for _, r in nd.multipliers.iterrows()])
    held = pd.DataFrame([{"variant": r["variant"], "N": f"{r['N']:.4g}", "D": f"{r['D']:.4g}", "seeds": str(r["seeds"]),
                          "measured": cell(r["measured"]),
                          "predicted [95% CI]": _ci({**r, "pred": r.get("predicted")}, "pred"),
                          "error (nats)": cell(r.get("error")), "error (seed SDs)": cell(r.get("error_sds")),
                          "inside": "" if pd.isna(r.get("inside")) else ("yes" if r["inside"] else "no"),
                          "note": r["note"] if isinstance(r.get("note"), str) else ""}
                         for _, r in nd.holdout.iterrows()])
    return [("L(N, D) fits", fits), ("Compute-optimal size and data at the largest compute", best),
            ("Compute multiplier at the compute-optimal point", ks),
            ("Held-out (N, D) point: the largest size at its largest budget, predicted without it", held)]


def explanation(nd: NDScaling) -> List[str]:
    lines = [f"{HEADLINE}: the same Huber fit on log residuals from a grid of starts and the same paired, "
             "t-calibrated bootstrap as L(C), through each (size, budget) point's mean over seeds; N: non-embedding "
             "parameters, D: training tokens (a WSD-S decay branch counts as a run of its own length). N*, D*: the "
             f"loss's minimum at C = kappa N D (kappa = {cell(nd.points.kappa)}, the ladder's training FLOPs per "
             "parameter and token); k at the optimum: the compute the baseline's compute-optimal frontier needs to "
             "reach the variant's optimal loss at C, over C."]
    return lines + list(nd.notes)


def terminal_lines(nd: NDScaling) -> List[str]:
    """What `arch-zoo report` prints of the section: each variant's fit, its compute-optimal point and
    multiplier, the held-out point, and the notes (a ladder that resolves no E or exponent says so)."""
    out = [f"{HEADLINE}:"]
    optimum = {r["variant"]: r for _, r in nd.optimum.iterrows()}
    ks = {r["variant"]: r for _, r in nd.multipliers.iterrows()}
    for _, r in nd.fits.iterrows():
        line = f"  {r['variant']}: " + ", ".join(f"{p} {_ci(r, p)}" for p in PARAMS if _ci(r, p)) or r["status"]
        best = optimum.get(r["variant"])
        if best is not None and _ci(best, "N_opt"):
            line += (f"; at {best['compute']:.3e} FLOPs N* {_ci(best, 'N_opt')}, D* {_ci(best, 'D_opt')}, "
                     f"loss {_ci(best, 'loss_opt')}")
        k = ks.get(r["variant"])
        if k is not None:
            line += f"; k vs {k['baseline']} " + ("no finite k" if math.isinf(k["k"]) else _ci(k, "k"))
        out.append(line)
    for _, r in nd.holdout.iterrows():
        out.append(f"  held out {r['variant']} at N {r['N']:.4g}, D {r['D']:.4g}: measured {cell(r['measured'])}, "
                   f"predicted {_ci({**r, 'pred': r.get('predicted')}, 'pred') or 'none'}"
                   + (f", error {cell(r.get('error'))} nats" if cell(r.get("error")) else "")
                   + (f" ({cell(r.get('error_sds'))} seed SDs)" if cell(r.get("error_sds")) else "")
                   + (f" ({r['note']})" if isinstance(r.get("note"), str) and r["note"] else ""))
    return out + [f"  note: {n}" for n in nd.notes]


def frames(nd: NDScaling) -> Dict[str, pd.DataFrame]:
    return {"scaling_nd_fits": nd.fits, "scaling_nd_optimum": nd.optimum, "scaling_nd_multipliers": nd.multipliers,
            "scaling_nd_holdout": nd.holdout}
