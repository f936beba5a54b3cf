"""WSD-S (``train.schedule: {name: wsd, decays: [...]}``): several budgets from one run.

The run trains its stable phase once; a budget ``f`` of ``decays`` below 1 is a *branch*: a run of
``steps = round(f * max_steps)`` steps whose decay is wsd's own, the last ``decay_fraction`` of its
steps (so its length is a fraction of the steps so far, as OLMo-core's WSD-S). It forks from the
stable phase where that decay starts and is exactly the wsd run of ``max_steps = steps`` with the
same seed: up to the fork both schedules are warmup then train.lr, and the data order is a function
of (seed, step). The run itself is the budget at 1.0. Pure arithmetic: training
(``training/branches.py``) and ``sweep --dry-run`` read the same plan."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import List

from ..coerce import ComponentSpec
from ..config import ExperimentConfig, TrainConfig
from .schedules import SCHEDULES, WarmupStableDecay


@dataclass(frozen=True)
class Branch:
    steps: int  # the budget: the branch ends here, as a run of train.max_steps = steps would
    fork: int  # the stable-phase step it branches from: its decay starts here
    fraction: float  # the entry of decays it is (the first, where two round to the same steps)

    @property
    def decay_steps(self) -> int:
        return self.steps - self.fork


def branch_train(train: TrainConfig, steps: int) -> TrainConfig:
    """The train config of the separate run a branch equals: max_steps = steps, the same wsd, no decays."""
    spec = SCHEDULES.parse(train.schedule, "train.schedule")
    options = dataclasses.replace(spec.options, decays=None)
    return dataclasses.replace(train, max_steps=steps, schedule=ComponentSpec(spec.name, options))


def branch_config(cfg: ExperimentConfig, steps: int) -> ExperimentConfig:
    return dataclasses.replace(cfg, train=branch_train(cfg.train, steps))


def branches(train: TrainConfig) -> List[Branch]:
    """The run's branches, shortest first (budgets that round to the same step count are one; the
    budget at max_steps is the run itself). Empty for any other schedule."""
    spec = SCHEDULES.parse(train.schedule, "train.schedule")
    if spec.name != "wsd" or not spec.options.decays:
        return []
    out = {}
    for fraction in spec.options.decays:
        steps = max(1, round(fraction * train.max_steps))
        if steps < train.max_steps:
            separate = branch_train(train, steps)
            # a budget inside warmup has no decay: it forks at its end and trains no steps of its own
            start = WarmupStableDecay(separate.schedule.options, separate).decay_start
            out.setdefault(steps, Branch(steps, min(start, steps), fraction))
    return [out[k] for k in sorted(out)]


def saved_steps(train: TrainConfig) -> dict:
    """Optimizer steps of this run with its branches, against the separate runs of every budget:
    {"budgets", "steps", "separate_steps", "saved_steps"}."""
    points = branches(train)
    steps = train.max_steps + sum(b.decay_steps for b in points)
    separate = train.max_steps + sum(b.steps for b in points)
    return {"budgets": [b.steps for b in points] + [train.max_steps], "steps": steps, "separate_steps": separate,
            "saved_steps": separate - steps}
