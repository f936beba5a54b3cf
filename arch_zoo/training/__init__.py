"""Training: Lightning module and data module, callbacks, and ``run_one(config, out_dir)``.

Names load on first use, so the parts that need no Lightning (``rundir``, ``prepare``) can be imported
without paying for it; restoring a trained run is ``arch_zoo.trained``, below training."""
import importlib

_EXPORTS = {"RunResult": "run", "prepare": "run", "run_one": "run"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
