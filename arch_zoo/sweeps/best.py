"""Moved to ``arch_zoo.training.best`` (it reads run directories only, below the sweeps); kept so
that code written against this path keeps importing. Nothing in the package imports it."""
from ..training.best import BestRun, best_run, checkpoint, is_sweep, restore, sweep_metric  # noqa: F401
