"""Adaptive seeds: after each round, the comparisons still undecided get more seeds, the others none.

A comparison is a variant against its baseline (the baseline variant sharing most of its settings),
judged on the seeds both completed by ``sequential.look``: decided once its repeated interval
excludes 0 or lies inside the margin, at the most at ``seeds.max``. ``next_round`` starts again from
the run store every time it is called, so a sweep killed at any moment and rerun takes the same
decisions; the runs a round adds are the full design's runs (same ids, configs and budgets), chosen."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from ..sequential import Design, Look, look
from ..stats import pair_margin
from ..rundir import STAGE_TUNE, SUMMARY
from .plan import Plan, RunPlan, make_plan, second_plan
from .seed_spec import AdaptiveSeeds
from .store import Store, read_json
from .worker import FINISHED


@dataclass
class Pair:
    variant: str
    baseline: str
    planned: int  # seeds planned for the pair so far (the variant's)
    look: Optional[Look]  # None: fewer than 2 paired seeds completed
    margin: float

    def open(self, most: int) -> bool:
        """Undecided, and short of ``most`` seeds."""
        return self.planned < most and (self.look is None or not self.look.decided)


def design(adaptive: AdaptiveSeeds, pairs: int) -> Design:
    return Design(adaptive.looks, adaptive.alpha, adaptive.rule, max(1, pairs))


def evaluated(plan: Plan) -> List[RunPlan]:
    """The runs the comparison reads: all of them, or a tuned sweep's stage 2."""
    return [r for r in plan.runs if r.tune.get("stage") != STAGE_TUNE]


def baseline_of(runs: List[RunPlan]) -> Dict[str, str]:
    """Each variant -> the baseline variant it is compared with (the one sharing most settings)."""
    settings = {r.variant: r.settings for r in runs}
    bases = [r.variant for r in runs if r.is_baseline]
    bases = list(dict.fromkeys(bases))
    out = {}
    for name, s in settings.items():
        if name in bases or not bases:
            continue
        out[name] = max(bases, key=lambda b: sum(settings[b].get(k) == v for k, v in s.items()))
    return out


def pairs(plan: Plan, store: Store) -> Tuple[List[Pair], List[str]]:
    """Every comparison as the store holds it, and the runs not finished yet ('variant s<seed>: status')."""
    adaptive, metric = plan.spec.adaptive, plan.spec.metric
    runs = evaluated(plan)
    values: Dict[str, Dict[int, float]] = {}
    waiting = []
    for run in runs:
        status = store.status(run.run_id)["status"]
        values.setdefault(run.variant, {})
        if status not in FINISHED + ("failed",):
            waiting.append(f"{run.variant} s{run.seed}: {status}")
        final = ((read_json(store.run_dir(run.run_id) / SUMMARY) or {}).get("final") or {}).get(metric["name"])
        if status == "completed" and isinstance(final, (int, float)) and math.isfinite(final):
            values[run.variant][run.seed] = float(final)
    planned = {name: sum(1 for r in runs if r.variant == name) for name in values}
    against = baseline_of(runs)
    d = design(adaptive, len(against))
    out = []
    for name, base in against.items():
        shared = sorted(set(values[name]) & set(values[base]))
        differences = [values[name][s] - values[base][s] for s in shared]
        margin = pair_margin(values[name].values(), values[base].values(), metric.get("min_effect"))  # as the report
        seen = look(differences, d, margin) if len(differences) >= 2 else None
        out.append(Pair(name, base, planned[name], seen, margin))
    return out, waiting


def full_plan(plan: Plan, store: Store) -> Plan:
    """The design's every run (each variant on every seed up to ``max``), planned as the sweep plans its
    runs: the same run ids, configs and budgets; a tuned sweep's from stage 1's choices."""
    spec = dataclasses.replace(plan.spec, seeds=plan.spec.adaptive.seeds)
    if spec.tune is None:
        return make_plan(spec)
    from .stages import stage_one

    # stage 1's runs only: stage 2's runs (the chosen value on other seeds) are no tuning evidence
    tuning = [r for r in plan.runs if r.tune.get("stage") == STAGE_TUNE]
    _, chosen, _ = stage_one(dataclasses.replace(plan, runs=tuning), store)
    return second_plan(spec, chosen)


def next_round(plan: Plan, store: Store, log: Callable[[str], None]) -> List[RunPlan]:
    """The runs the next round adds: for each open comparison, its variant's seeds up to the next look
    and its baseline's as far; none while a run of the plan is unfinished, or once every pair is decided."""
    found, waiting = pairs(plan, store)
    if waiting:
        log(f"seeds: the next round waits for {len(waiting)} unfinished run(s) ({'; '.join(waiting[:3])}); "
            "rerun the same command to resume")
        return []
    adaptive = plan.spec.adaptive
    want: Dict[str, int] = {}
    for p in found:
        if p.open(adaptive.max):
            more = next((n for n in adaptive.looks if n > p.planned), adaptive.max)
            want[p.variant] = max(want.get(p.variant, 0), more)
            want[p.baseline] = max(want.get(p.baseline, 0), more)
    if not want:
        if found:
            log("seeds: every comparison is decided or at seeds.max: "
                + "; ".join(f"{p.variant} at {p.planned} seeds ({_state(p)})" for p in found))
        return []
    seeds = adaptive.seeds
    have = {(r.variant, r.seed) for r in plan.runs}
    full = full_plan(plan, store)
    store.keep_ids(full)
    add = [r for r in evaluated(full) if r.variant in want and r.seed in seeds[:want[r.variant]]
           and (r.variant, r.seed) not in have]
    if add:
        log(f"seeds: {len(add)} more run(s) for {', '.join(sorted({r.variant for r in add}))} "
            f"(undecided at {', '.join(sorted({str(p.planned) for p in found if p.open(adaptive.max)}))} seeds)")
    return add


def _state(p: Pair) -> str:
    if p.look is None:
        return "fewer than 2 paired seeds completed"
    return {"differs": "differs", "equivalent": "equivalent"}.get(p.look.decided, "undecided")
