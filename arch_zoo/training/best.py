"""Moved to ``arch_zoo.trained.best`` (it reads run directories only); this path is kept for code
written against it (a user's, ``sweeps.best``)."""
from ..trained.best import BestRun, best_run, checkpoint, is_sweep, restore, sweep_metric  # noqa: F401
