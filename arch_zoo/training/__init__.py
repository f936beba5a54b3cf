"""Training: Lightning module and data module, callbacks, and ``run_one(config, out_dir)``."""
from .run import RunResult, prepare, run_one

__all__ = ["RunResult", "prepare", "run_one"]
