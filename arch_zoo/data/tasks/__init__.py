"""Built-in tasks. Importing this package registers all of them in ``TASKS``; ``validate_task`` is the
check of an experiment's ``task`` against its model, which ``arch_zoo.experiment`` runs."""
from ...config import ExperimentConfig
from ...errors import ConfigError
from .base import TASKS, Example, Task, TaskData  # noqa: F401

from . import corpus, dyck, scan, synthetic  # noqa: F401  (registers char_lm, mlm, dyck, dyck_depth, scan, copy...)
from . import recall, sequence_probes  # noqa: F401  (the MAD probes and Zoology's mqar)


def validate_task(cfg: ExperimentConfig, key: str = "task") -> None:
    if cfg.task is None:
        return

    task = TASKS.get(cfg.task.name, key)
    if cfg.model.kind not in task.factory.kinds:
        fits = [e.name for e in TASKS.entries() if cfg.model.kind in e.factory.kinds]
        raise ConfigError(key, f"task '{cfg.task.name}' does not fit model.kind '{cfg.model.kind}' (it needs "
                          f"{' or '.join(task.factory.kinds)}); tasks for {cfg.model.kind}: {', '.join(fits)}")
    task.factory.check(cfg.task.options, cfg.model.kind, cfg.model.max_seq_len, key)
