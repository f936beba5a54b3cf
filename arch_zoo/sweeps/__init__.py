"""Sweeps: vary architecture choices over seeds, on local worker processes or a Ray cluster.

``load_spec`` reads a spec, ``make_plan`` expands and validates it into runs, ``run_sweep`` runs
(or resumes) them into the run store (see ``store.py`` for its layout)."""
from .plan import Plan, RunPlan, make_plan
from .runner import DEFAULT_OUT, SweepOutcome, dry_run_table, results_table, run_sweep
from .spec import SweepSpec, expand, load_spec, parse_spec

__all__ = ["DEFAULT_OUT", "Plan", "RunPlan", "SweepOutcome", "SweepSpec", "dry_run_table", "expand", "load_spec",
           "make_plan", "parse_spec", "results_table", "run_sweep"]
