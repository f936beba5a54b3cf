"""One colour per variant for every figure of a report: the static plots, the tuning curves and the
interactive page. Colours follow the sweep's plan (the order of its runs), not the ranking, so they
hold while a sweep runs and ranks change; a tuned sweep's stage-1 variant (its name without the
tuned key) and the stage-2 variant it became share one colour."""
from __future__ import annotations

from typing import Dict, List

import pandas as pd

# matplotlib's tab10 and tab20, as hex (the interactive page needs no matplotlib)
TAB10 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
TAB20 = ["#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896", "#9467bd", "#c5b0d5",
         "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7", "#bcbd22", "#dbdb8d", "#17becf", "#9edae5"]


def palette(n: int) -> List[str]:
    return TAB10 if n <= len(TAB10) else TAB20


def variant_colors(runs: pd.DataFrame) -> Dict[str, str]:
    """{variant name: hex colour} for the frame's variants and, in a tuned sweep, stage 1's."""
    tuning = runs.attrs.get("tuning") or {}
    base = dict(tuning.get("variants") or {})  # stage-2 variant -> its stage-1 name
    names = [str(v) for v in runs["variant"]] if len(runs) else []
    keys = list(dict.fromkeys([*(str(r["variant"]) for r in tuning.get("runs") or []),
                               *(base.get(v, v) for v in names)]))
    colors = palette(len(keys))
    slot = {k: colors[i % len(colors)] for i, k in enumerate(keys)}
    return {**slot, **{v: slot[base.get(v, v)] for v in names}}
