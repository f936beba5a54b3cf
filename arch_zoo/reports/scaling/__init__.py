"""Scaling fits for ladder sweeps (``scale`` in a spec): ``analyse`` gives the report's scaling
section (fits with bootstrap intervals, compute multipliers, verdicts, notes); ``render`` writes it
in each format and ``plot`` draws it. Nothing here runs for a sweep without rungs."""
from .analysis import Scaling, analyse, is_ladder

__all__ = ["Scaling", "analyse", "is_ladder"]
