"""Sweeps: vary architecture choices over seeds, on local worker processes or a Ray cluster.

``load_spec`` reads a spec, ``make_plan`` expands and validates it into runs, ``run_sweep`` runs
(or resumes) them into the run store (see ``store.py`` for its layout).

The names below load on first use (PEP 562), so the reports can read a spec's pure parts
(``sweeps.tune``, ``sweeps.fields``) without importing torch through the planner."""
import importlib

_WHERE = {"Plan": "plan", "RunPlan": "plan", "make_plan": "plan",
          "DEFAULT_OUT": "runner", "SweepOutcome": "runner", "dry_run_table": "tables", "results_table": "tables",
          "run_sweep": "runner", "SweepSpec": "spec", "expand": "spec", "load_spec": "spec", "parse_spec": "spec"}

__all__ = sorted(_WHERE)


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
