"""Comparison reports for sweeps: pandas tables with statistics, plots, and exports.

    runs  = load_runs("sweeps_out/positions")      # one row per run
    table = summarize(runs, metric="val/loss")      # one row per variant: mean ± std, CI, Δ, p, rank
    write_report("sweeps_out/positions", "reports/positions", formats="md,html")
    print(terminal_table("sweeps_out/positions"))
"""
from .aggregate import mean_ci, paired, summarize
from .table_notes import missing_notes
from .export import latex, markdown, write_report
from .load import load_groups, load_runs
from .tables import terminal_table

__all__ = ["load_runs", "load_groups", "summarize", "write_report", "terminal_table", "markdown", "latex", "mean_ci", "paired",
           "missing_notes"]
