"""arch_zoo: controlled Transformer architecture comparisons.

``arch_zoo.restore(run_dir)`` loads a trained run (``restore(sweep_dir, best=True)``: the best run of
a sweep); it is imported on first use, so that ``import arch_zoo.models`` still needs torch alone."""
__version__ = "0.1.0"
__all__ = ["restore"]


def __getattr__(name: str):
    if name == "restore":
        from .trained.best import restore

        return restore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
