"""A probe suite's section (``reports/suite.py``) as files, Markdown and terminal lines: the table a
researcher reads first, per-task score per variant and the suite average with its Δ vs the baseline."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, List, Sequence

import pandas as pd

from ..formatting import number
from .frames import write_frames
from .suite import Suite, wide


def _interval(mean: float, low: float, high: float) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "-"
    if isinstance(low, float) and math.isnan(low):
        return number(mean, 3)
    return f"{number(mean, 3)} [{number(low, 3)}, {number(high, 3)}]"


def display(suite: Suite) -> pd.DataFrame:
    """One row per variant (best first): each task's score, the suite average, Δ vs the baseline, p (Holm)."""
    table = wide(suite)
    rows = []
    for _, r in table.iterrows():
        row = {"variant": r["variant"] + (" *" if r["baseline"] else "")}
        for t in suite.tasks:
            row[t] = _interval(r[f"{t} mean"], r[f"{t} ci_low"], r[f"{t} ci_high"])
        row["suite average"] = _interval(r["mean"], r["ci_low"], r["ci_high"])
        row["seeds"] = int(r["n"])
        row["Δ vs baseline"] = "" if r["baseline"] or math.isnan(r["delta"]) else \
            _interval(r["delta"], r["delta_ci_low"], r["delta_ci_high"])
        row["p (Holm)"] = number(r["p_holm"], 3) if not math.isnan(r["p_holm"]) else ""
        rows.append(row)
    return pd.DataFrame(rows)


def entries_display(suite: Suite) -> pd.DataFrame:
    """One row per entry (task and level), one column per variant: the mean and interval over seeds."""
    variants = list(suite.average["variant"])
    rows = []
    for e in suite.entries:
        part = suite.per_entry[suite.per_entry["entry"] == e].set_index("variant")
        row = {"task": part["task"].iloc[0] if len(part) else "", "entry": e}
        for v in variants:
            row[v] = _interval(part.at[v, "mean"], part.at[v, "ci_low"], part.at[v, "ci_high"]) if v in part.index \
                else "-"
        rows.append(row)
    return pd.DataFrame(rows)


def explanation(suite: Suite) -> str:
    goal = {"max": "higher is better", "min": "lower is better"}.get(suite.goal or "", "")
    return (f"{suite.metric}{f' ({goal})' if goal else ''}: mean [95% t interval] over seeds. A task's score "
            "averages its entries (difficulty levels) per seed; the suite average averages the tasks per seed; "
            "Δ is paired by seed against the baseline variant (*), p Holm-corrected over the variants.")


def markdown(suite: Suite, md_table: Callable[[pd.DataFrame], str], escape: Callable[[str], str]) -> List[str]:
    parts = ["", f"## Probe suite: {escape(suite.name)} ({len(suite.tasks)} tasks, {len(suite.entries)} entries)", "",
             escape(explanation(suite)), "", md_table(display(suite)), ""]
    if len(suite.entries) > len(suite.tasks):
        parts += ["Per entry:", "", md_table(entries_display(suite)), ""]
    return parts + [f"- {escape(n)}" for n in suite.notes]


def terminal_lines(suite: Suite) -> List[str]:
    from tabulate import tabulate

    return [f"probe suite {suite.name}: {explanation(suite)}",
            tabulate(display(suite), headers="keys", tablefmt="simple", showindex=False), *suite.notes]


def suite_table(sweep_dir) -> str:
    """What ``arch-zoo sweep`` prints at the end of a suite sweep: the suite's table from the store."""
    from .aggregate import summarize
    from .load import load_groups
    from .suite import analyse

    groups = load_groups(sweep_dir)
    suite = analyse(groups, tables=[summarize(g) for g in groups])
    return "\n".join(terminal_lines(suite)) + "\n" if suite is not None else ""


def write(suite: Suite, out: Path, fmts: Sequence[str]) -> List[Path]:
    """suite.csv (per variant) and suite_entries.csv (per variant and entry), and .parquet with parquet."""
    return write_frames({"suite": wide(suite), "suite_entries": suite.per_entry}, out, fmts)
