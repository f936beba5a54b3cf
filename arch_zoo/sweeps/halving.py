"""Successive halving of a tuned sweep's stage 1: ``tune.halving: {eta, min_steps}``.

Rungs are at ``min_steps``, ``min_steps * eta``, ``min_steps * eta**2``, ... (each below the run's
``train.max_steps``), then ``train.max_steps``. Every value of a variant trains to the first rung on
every tuning seed; at each rung the values still alive are ranked by ``select`` averaged over the
tuning seeds at that rung's step, the best ``ceil(n_alive / eta)`` (at least one) train on to the
next rung and the others are pruned there. A value that diverged or failed on any seed before a
rung is dropped at it. Stage 2 chooses among the values that reached the last rung
(``tune.choose`` over their final results).

The halving is synchronous: a rung is decided only once every alive value has a result there on
every tuning seed, and ``climb`` decides it from those results alone, so the whole ladder is a pure
function of what the run store holds (``rungs.py`` reads it) and a killed sweep, rerun, takes the
same decisions. Runs keep their full-budget config (the learning-rate schedule spans
``train.max_steps``); stopping at a rung is an instruction to the run, which resumes from its
checkpoint when promoted. Pure data: no torch, no store.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import ConfigError
from .fields import Halving, TuneSpec, _check_keys, _mapping

HALVING_KEYS = ("eta", "min_steps")
DROPPED = ("diverged", "failed")  # a run in one of these states has no result past where it stopped


def parse_halving(value: Any) -> Halving:
    """``tune.halving``; ``min_steps`` against ``train.max_steps`` is checked by ``check_budget``
    once the runs' configs are known."""
    h = _mapping(value, "tune.halving")
    _check_keys(h, HALVING_KEYS, "tune.halving.")
    for k in HALVING_KEYS:
        if k not in h:
            raise ConfigError(f"tune.halving.{k}", "missing: successive halving needs eta (e.g. 3) and min_steps "
                              "(the first rung's step)")
    eta, min_steps = h["eta"], h["min_steps"]
    if isinstance(eta, bool) or not isinstance(eta, int) or eta < 2:
        raise ConfigError("tune.halving.eta", f"expected an integer of at least 2 (keep 1/eta of the values at each "
                          f"rung), got {eta!r}")
    if isinstance(min_steps, bool) or not isinstance(min_steps, int) or min_steps < 1:
        raise ConfigError("tune.halving.min_steps", f"expected a positive integer (the first rung's step), got "
                          f"{min_steps!r}")
    return Halving(eta, min_steps)


def check_budget(halving: Halving, max_steps: int, val_every: int, variant: str) -> None:
    """``min_steps`` against a variant's budget. Rungs fall on validations the runs make anyway, so a
    promoted run resumes from an ordinary checkpoint and its history equals an unhalved run's."""
    if halving.min_steps >= max_steps:
        raise ConfigError("tune.halving.min_steps", f"must be below train.max_steps ({max_steps}, variant {variant}), "
                          f"got {halving.min_steps}: there would be no rung before the end")
    if halving.min_steps % val_every:
        raise ConfigError("tune.halving.min_steps", f"must be a multiple of train.val_every ({val_every}), got "
                          f"{halving.min_steps}: values are compared at a validation the runs make anyway")


def check_budgets(halving: Halving, runs: Sequence[Tuple[str, int, int]]) -> None:
    """Stage 1's (variant, train.max_steps, train.val_every) per run: each variant halves over one
    budget (a tuned key that changes the budget cannot be halved)."""
    budgets: Dict[str, set] = {}
    for variant, max_steps, val_every in runs:
        check_budget(halving, max_steps, val_every, variant)
        budgets.setdefault(variant, set()).add(max_steps)
    for variant, steps in budgets.items():
        if len(steps) > 1:
            raise ConfigError("tune.halving", f"the values of variant {variant} train for different train.max_steps "
                              f"({', '.join(map(str, sorted(steps)))}); successive halving compares them at shared "
                              "steps: drop tune.halving or tune another key")


def rungs(halving: Halving, max_steps: int) -> Tuple[int, ...]:
    """The steps at which values are compared: min_steps * eta**k below max_steps, then max_steps."""
    out, step = [], halving.min_steps
    while step < max_steps:
        out.append(step)
        step *= halving.eta
    return tuple(out) + (max_steps,)


def kept(n_alive: int, eta: int) -> int:
    """How many of ``n_alive`` values a rung promotes."""
    return max(1, math.ceil(n_alive / eta)) if n_alive else 0


def ladder_sizes(n_values: int, halving: Halving, max_steps: int) -> List[Tuple[int, int]]:
    """(rung step, values that train to it) per rung, when no value fails: the plan --dry-run shows."""
    out, alive = [], n_values
    for step in rungs(halving, max_steps):
        out.append((step, alive))
        alive = kept(alive, halving.eta)
    return out


def steps_per_seed(n_values: int, halving: Halving, max_steps: int) -> int:
    """Training steps one variant spends per tuning seed with halving (at most: failures spend less)."""
    total, before = 0, 0
    for step, alive in ladder_sizes(n_values, halving, max_steps):
        total += alive * (step - before)
        before = step
    return total


@dataclass(frozen=True)
class RunState:
    """One stage-1 run as the store holds it: its value, seed, status and ``select`` at each rung
    step it has reached (a completed run: at max_steps too)."""

    value: Any
    seed: int
    status: str
    at: Mapping[int, Optional[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Cut:
    step: int  # the rung at which the value stopped
    score: Optional[float]  # its mean ``select`` there (None: dropped for a failed seed)
    why: str


@dataclass
class Ladder:
    """One variant's halving as far as the store allows: ``target`` (value -> the rung its runs train
    to next; empty once the last rung is decided), ``cuts`` (pruned or dropped values), ``alive``
    (the values still in the running; after the last rung, those stage 2 chooses among) and
    ``scores`` (rung step -> value -> mean ``select``)."""

    target: Dict[Any, int]
    cuts: Dict[Any, Cut]
    alive: List[Any]
    scores: Dict[int, Dict[Any, float]]

    @property
    def done(self) -> bool:
        return not self.target


def climb(tune: TuneSpec, steps: Sequence[int], runs: Sequence[RunState]) -> Ladder:
    """One variant's rungs decided from its stage-1 runs, lowest first, up to the first rung some
    alive value has not reached on every tuning seed. Ties go to the value tried first."""
    by = {(r.value, r.seed): r for r in runs}
    alive, cuts, scores = list(tune.values), {}, {}
    sign = 1 if tune.goal == "min" else -1
    for i, step in enumerate(steps):
        ready, waiting = {}, []
        for v in alive:
            results = [_result(by.get((v, seed)), step) for seed in tune.seeds]
            if "dropped" in results:
                cuts[v] = Cut(step, None, "a tuning seed diverged or failed before this rung")
            elif "waiting" in results:
                waiting.append(v)
            else:
                ready[v] = sum(results) / len(results)
        scores[step] = ready
        if waiting:
            return Ladder({v: step for v in waiting}, cuts, [v for v in alive if v not in cuts], scores)
        n_alive = len(alive)
        ranked = sorted(ready, key=lambda v: (sign * ready[v], tune.values.index(v)))
        if i + 1 == len(steps):
            return Ladder({}, cuts, ranked, scores)
        keep = kept(n_alive, tune.halving.eta)
        for rank, v in enumerate(ranked[keep:], start=keep + 1):
            cuts[v] = Cut(step, ready[v], f"{tune.select} ranked {rank} of {n_alive} at step {step}")
        alive = ranked[:keep]
    return Ladder({}, cuts, alive, scores)  # no rungs at all: nothing to decide


def _result(run: Optional[RunState], step: int):
    """A run's ``select`` at ``step`` (a number), or "waiting" (not there yet) or "dropped"."""
    if run is None:
        return "waiting"
    if step in run.at:
        x = run.at[step]
        return x if isinstance(x, (int, float)) and math.isfinite(x) else "dropped"
    return "dropped" if run.status in DROPPED else "waiting"
