"""WSD-S (``train.schedule: {name: wsd, decays: [...]}``): several budgets from one run.

The run trains its stable phase once; a budget ``f`` of ``decays`` below 1 is a *branch*: a run of
``steps = round(f * max_steps)`` steps whose decay is wsd's own, the last ``decay_fraction`` of its
steps (so its length is a fraction of the steps so far, as OLMo-core's WSD-S). It forks from the
stable phase where that decay starts and is exactly the wsd run of ``max_steps = steps`` with the
same seed: up to the fork both schedules are warmup then train.lr, and the data order is a function
of (seed, step). The run itself is the budget at 1.0. Pure arithmetic: training
(``training/branches.py``) and ``sweep --dry-run`` read the same plan.

Budgets given as training tokens (``decay_tokens``) are each the whole number of steps nearest to
training that many tokens, at the tokens per step run.json's budget counts (``TrainConfig.examples_per_step`` x tokens per example),
so a branch's recorded tokens are within half a step of the count asked for. Only a task whose
every step trains the same tokens (windows of a token stream) has such a count."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, List, Optional

from ..coerce import ComponentSpec
from ..config import ExperimentConfig, TrainConfig
from ..data.lengths import split_lengths
from ..data.windows import Windows
from ..errors import ConfigError
from .schedules import SCHEDULES, WarmupStableDecay

TOKENS_KEY = "train.schedule.decay_tokens"


@dataclass(frozen=True)
class Branch:
    steps: int  # the budget: the branch ends here, as a run of train.max_steps = steps would
    fork: int  # the stable-phase step it branches from: its decay starts here
    # the entry of decays (a fraction) or decay_tokens (a token count) it is (the first, where two
    # round to the same steps): its wsds.budget, shared by every run that branches at it
    budget: float
    tokens: Optional[float] = None  # what it trains, with decay_tokens: steps x the run's tokens per step

    @property
    def decay_steps(self) -> int:
        return self.steps - self.fork


def branch_train(train: TrainConfig, steps: int) -> TrainConfig:
    """The train config of the separate run a branch equals: max_steps = steps, the same wsd, no decays."""
    spec = SCHEDULES.parse(train.schedule, "train.schedule")
    options = dataclasses.replace(spec.options, decays=None, decay_tokens=None)
    return dataclasses.replace(train, max_steps=steps, schedule=ComponentSpec(spec.name, options))


def branch_config(cfg: ExperimentConfig, steps: int) -> ExperimentConfig:
    return dataclasses.replace(cfg, train=branch_train(cfg.train, steps))


def decay_tokens(train: TrainConfig) -> Optional[List[int]]:
    """The budgets given as training tokens; None where they are fractions or absent."""
    spec = SCHEDULES.parse(train.schedule, "train.schedule")
    return spec.options.decay_tokens if spec.name == "wsd" else None


def step_tokens(cfg: ExperimentConfig, train_split: Any) -> float:
    """Training tokens per optimizer step of ``cfg`` on its task's train split, as run.json's budget
    counts them; ConfigError naming decay_tokens where steps train different numbers of tokens."""
    lengths = split_lengths(train_split) if train_split is not None else None
    # windows of a stream are all one length but the last: the mean is what every budget counts
    if lengths is None or not (isinstance(train_split, Windows) or len(lengths.counts) == 1):
        task = cfg.task.name if cfg.task is not None else "(none)"
        raise ConfigError(TOKENS_KEY, f"task {task}'s steps do not all train the same number of tokens (its "
                          "examples differ in length), so a token count names no step; give the budgets as "
                          "train.schedule.decays, fractions of train.max_steps")
    return cfg.train.examples_per_step * (lengths.mean(0) + lengths.mean(1))


def branches(train: TrainConfig, tokens_per_step: Optional[float] = None) -> List[Branch]:
    """The run's branches, shortest first (budgets that round to the same step count are one; the
    budget at max_steps is the run itself). Empty for any other schedule. ``tokens_per_step``
    (``step_tokens``) is needed where the budgets are ``decay_tokens``; a count more than half a step
    above the run's tokens is a ConfigError."""
    spec = SCHEDULES.parse(train.schedule, "train.schedule")
    if spec.name != "wsd" or not (spec.options.decays or spec.options.decay_tokens):
        return []
    out = {}
    for budget, steps in _budget_steps(train, spec.options, tokens_per_step):
        if steps < train.max_steps:
            separate = branch_train(train, steps)
            # a budget inside warmup has no decay: it forks at its end and trains no steps of its own
            start = WarmupStableDecay(separate.schedule.options, separate).decay_start
            tokens = steps * tokens_per_step if spec.options.decay_tokens else None
            out.setdefault(steps, Branch(steps, min(start, steps), budget, tokens))
    return [out[k] for k in sorted(out)]


def planned(cfg: ExperimentConfig, train_split: Any) -> List[Branch]:
    """A run's branches, token budgets converted at its task's tokens per step (ConfigError for a
    budget the run cannot branch: training says it before the run dir is written)."""
    return branches(cfg.train, step_tokens(cfg, train_split) if decay_tokens(cfg.train) else None)


def _budget_steps(train: TrainConfig, options, per_step: Optional[float]):
    if options.decays:
        return [(f, max(1, round(f * train.max_steps))) for f in options.decays]
    if per_step is None:
        raise ValueError("decay_tokens need the run's tokens per step (step_tokens)")
    total = train.max_steps * per_step
    over = [t for t in options.decay_tokens if round(t / per_step) > train.max_steps]
    if over:
        raise ConfigError(TOKENS_KEY, f"{over[0]:,} is above the run's {total:,.0f} training tokens "
                          f"(train.max_steps={train.max_steps} x {per_step:,.0f} tokens per step); lower it or "
                          "raise max_steps")
    return [(t, max(1, round(t / per_step))) for t in options.decay_tokens]


def saved_steps(train: TrainConfig, tokens_per_step: Optional[float] = None) -> dict:
    """Optimizer steps of this run with its branches, against the separate runs of every budget:
    {"budgets", "steps", "separate_steps", "saved_steps"}."""
    points = branches(train, tokens_per_step)
    steps = train.max_steps + sum(b.decay_steps for b in points)
    separate = train.max_steps + sum(b.steps for b in points)
    return {"budgets": [b.steps for b in points] + [train.max_steps], "steps": steps, "separate_steps": separate,
            "saved_steps": separate - steps}
