"""The training recipe as components: optimizers and learning-rate schedules are registries, like the
model's (``arch-zoo components`` lists them), chosen by ``train.optimizer`` and ``train.schedule``.
The parametrization, which changes the model's function, is the model's (components.parametrization).

Torch only (no Lightning). ``check_recipe`` is the check of an experiment's ``train`` beyond its own
numbers (config's): ``arch_zoo.experiment`` runs it on every experiment it loads."""
from __future__ import annotations

from typing import List, Optional

import torch

from ..components.parametrization import PARAMETRIZATIONS
from ..config import ExperimentConfig, TrainConfig
from ..errors import ConfigError
from . import muon  # noqa: F401  (registers 'muon')
from .optimizers import OPTIMIZERS, Built, OptimizerRecipe, build_optimizer, optimizer_recipe, shown_groups
from .schedules import SCHEDULES, Schedule

__all__ = ["OPTIMIZERS", "SCHEDULES", "Built", "OptimizerRecipe", "Schedule", "build_optimizer", "build_scheduler",
           "check_recipe", "recipe_warnings", "schedule_for", "shown_groups", "warmup_warning"]


def schedule_for(train: TrainConfig) -> Schedule:
    spec = SCHEDULES.parse(train.schedule, "train.schedule")  # a hand-built TrainConfig may hold a bare name
    return SCHEDULES.get(spec.name).factory(spec.options, train)


def build_scheduler(optimizer: torch.optim.Optimizer, train: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    schedule = schedule_for(train)
    # a plain function, not the Schedule object: LambdaLR would pickle an object's attributes into checkpoints
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: schedule(step))


def warmup_warning(train: TrainConfig, key: str = "train") -> Optional[str]:
    """A warmup longer than the run, whatever the schedule: the run ends before it reaches train.lr."""
    w, m = train.warmup_steps, train.max_steps
    if w <= m:
        return None
    name = SCHEDULES.parse(train.schedule, f"{key}.schedule").name
    return (f"{key}.warmup_steps={w} is longer than the run ({key}.max_steps={m}): it ends in its warmup, at "
            f"{m / w:.0%} of {key}.lr, and the {name} schedule after it never runs; lower warmup_steps or raise "
            "max_steps")


def recipe_warnings(train: TrainConfig, key: str = "train") -> List[str]:
    """What the recipe will run differently from what its settings name (a warmup longer than the run,
    a WSD schedule with no stable phase): training prints each at its start and ``sweep --dry-run``
    before anything trains. A warmup longer than the run is said alone: it is why the rest is cut."""
    warmup = warmup_warning(train, key)
    if warmup:
        return [warmup]
    spec = SCHEDULES.parse(train.schedule, f"{key}.schedule")
    line = SCHEDULES.get(spec.name).factory.warning(spec.options, train, f"{key}.schedule")
    return [line] if line else []


def check_recipe(cfg: ExperimentConfig, key: str = "train") -> None:
    """The recipe's own checks, then whether the model's parametrization has a learning-rate rule for
    every kind of update the optimizer makes. Every error names its key."""
    t = cfg.train
    for registry, spec, name in ((OPTIMIZERS, t.optimizer, "optimizer"), (SCHEDULES, t.schedule, "schedule")):
        registry.get(spec.name).factory.check(spec.options, t, f"{key}.{name}")
    if t.z_loss < 0:
        raise ConfigError(f"{key}.z_loss", f"must be >= 0, got {t.z_loss}")
    parametrization = PARAMETRIZATIONS.build(cfg.model.parametrization, cfg.model)
    for update in optimizer_recipe(t).updates():
        if not parametrization.supports(update):
            fits = [e.name for e in OPTIMIZERS.entries()
                    if all(parametrization.supports(u) for u in e.factory(e.options(), t).updates())]
            raise ConfigError(f"{key}.optimizer", f"'{t.optimizer.name}' makes '{update}' updates, for which "
                              f"parametrization '{cfg.model.parametrization.name}' has no learning-rate rule; "
                              f"optimizers it fits: {', '.join(fits)}")
