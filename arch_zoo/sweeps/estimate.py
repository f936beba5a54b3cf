"""The estimated wall time ``arch-zoo sweep --dry-run`` prints for every sweep: plain, tuned (stage 1's
runs, and stage 2 priced before stage 1 chose), halved, ladders and suites, from one ``probe_plan``.

A run costs ``Timing.seconds`` (probe.py); a halved stage 1 trains each variant's values only as far
as its rungs take them (halving.ladder_sizes, when no value fails), starting again at each rung a value is
promoted past; stage 2 is each variant at its first tuned value on the evaluation seeds (``second_plan``
with that as the choice), so it costs what the same variant's stage-1 run costs at stage 2's steps when
the tuned key leaves the step time alone (train.lr). The sweep's time with N workers is the total over
N, what a local launcher with N workers approaches when runs are many and alike."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from ..formatting import plural
from .halving import ladder_sizes
from .plan import Plan, second_plan
from .probe import CALIBRATION_STEPS, TIMED_STEPS, Probe, probe_plan
from .tune import choose


@dataclass
class Estimate:
    probe: Probe
    stage_one: float  # seconds, one run after another
    stage_two: float = 0.0
    runs_two: int = 0

    @property
    def total(self) -> float:
        return self.stage_one + self.stage_two


def stage_two_unchosen(plan: Plan) -> Plan:
    """A tuned plan's stage 2 as if every variant chose its first tuned value (every value ties)."""
    rows = [(r.settings, r.seed, "completed", 0.0) for r in plan.runs]
    return second_plan(plan.spec, choose(plan.spec.tune, rows))


def estimate(plan: Plan, threads: int, probe=probe_plan) -> Estimate:
    """Probe ``plan`` (and a tuned plan's stage 2, whose shapes are stage 1's) and add it up."""
    second = stage_two_unchosen(plan) if plan.spec.tune is not None else None
    both = Plan(plan.spec, plan.runs + (second.runs if second is not None else []), plan.axes, plan.names)
    p = probe(both, threads)
    out = Estimate(p, _stage_one(plan, p))
    if second is not None:
        out.stage_two, out.runs_two = sum(p.seconds(r.run_id) for r in second.runs), len(second.runs)
    return out


def _stage_one(plan: Plan, p: Probe) -> float:
    tune = plan.spec.tune
    if tune is None or tune.halving is None:
        return sum(p.seconds(r.run_id) for r in plan.runs)
    total, n = 0.0, len(tune.values)
    for run in plan.runs:  # a run's share of its variant's halving: the variant's cost over its values
        t = p.timings[run.run_id]
        before, steps, launches, evals = 0, 0, 0, 0
        for step, alive in ladder_sizes(n, tune.halving, t.max_steps):
            steps += alive * (step - before)
            evals += alive * (t.validations(step) - t.validations(before))
            launches += alive
            before = step
        total += t.seconds(steps / n, launches / n, evals / n)
    return total


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def estimate_line(plan: Plan, est: Estimate, workers: Optional[int] = None) -> str:
    p, o = est.probe, est.probe.overhead
    n = len(plan.runs) + est.runs_two
    per = f"; with --workers {workers}, about {duration(est.total / workers)}" if workers and workers > 1 else ""
    text = f"estimated wall time: {duration(est.total)} for {plural(n, 'run')} one after another{per}\n"
    tune = plan.spec.tune
    if tune is not None:
        halved = " (successive halving: as far as the rungs take each value, none failing)" if tune.halving else ""
        text += (f"  stage 1: {duration(est.stage_one)} for {plural(len(plan.runs), 'run')}{halved}; stage 2: "
                 f"{duration(est.stage_two)} for {plural(est.runs_two, 'run')}, an estimate before stage 1 chose: "
                 f"each variant at its first {tune.key} value, at stage 2's steps\n")
    measured = (f"no start-up or loop overhead (--estimate measures them by a {CALIBRATION_STEPS}-step run through "
                "the real training path; without them the estimate has read 2-2.6x low)" if o.skipped else
                f"{duration(o.startup)} start-up per run and {o.per_step * 1000:.1f} ms per step of training-loop "
                f"overhead at most, each shape's own from a {CALIBRATION_STEPS}-step run through the real training "
                "path" if o.failed is None
                else f"no start-up or loop overhead (the {CALIBRATION_STEPS}-step timing run failed: {o.failed})")
    return text + (f"  how: the median of {TIMED_STEPS} timed steps for each of {plural(p.shapes, 'model/task shape')} "
                   f"on {plural(p.threads, 'torch thread')} (a local worker's share of this machine's cores, as loaded "
                   "now) x each run's steps, plus its validations (an eval batch at a third of a step, every val@L "
                   f"split priced at the training length), plus {measured}; left out: worker processes' start-up "
                   "(imports, once per worker), data preparation and downloads, runs slowed by each other beyond "
                   "their share of the cores, and the report\n")


def seconds_by_run(est: Estimate, plan: Plan) -> Dict[str, float]:
    return {r.run_id: est.probe.seconds(r.run_id) for r in plan.runs}
