"""Downstream evaluation of trained runs with lm-evaluation-harness (the ``eval`` extra).

``arch-zoo eval RUN_OR_SWEEP --tasks T1,T2`` restores each run, wraps it as an lm_eval model
(``lm.ArchZooLM``, registered in lm_eval's model registry as ``arch_zoo``: importing this package
registers it) and writes each task's results into the run directory as ``eval/<task>.json``;
reports read them as metrics named ``eval/<task>/<metric>``. ``python -m arch_zoo.evaluation`` is
lm_eval's own command line with ``--model arch_zoo`` available."""
from .harness import evaluate_runs, runs_of
from .lm import MODEL_NAME, ArchZooLM

__all__ = ["MODEL_NAME", "ArchZooLM", "evaluate_runs", "runs_of"]
