"""Successive halving against the run store: each stage-1 run's state as its run dir holds it, each
variant's ladder decided from those states (``halving.climb``), the runs of cut values recorded as
``pruned``, and the next round: the runs that must train on, each with the rung it stops at.

``run_sweep`` calls ``next_round`` before every round of stage 1, and every call starts again from
the run dirs, so a sweep killed at any moment and rerun takes the same decisions and trains only the
steps no run dir holds yet (a paused run resumes from its rung's checkpoint)."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

from ..formatting import plural
from ..rundir import CHECKPOINT, PRUNED, STATUS, SUMMARY, checkpoint_history
from .halving import Ladder, RunState, climb, rungs
from .plan import Plan, RunPlan
from .store import Store, read_json, set_status, write_json
from .tune import base_settings, variant_key
from .worker import FINISHED

Stops = Dict[str, Optional[int]]  # run id -> the rung step it trains to (None: to train.max_steps)


def by_variant(plan: Plan) -> Dict[str, List[RunPlan]]:
    """Stage 1's runs grouped by variant (its settings without the tuned key)."""
    keys = plan.spec.tune.keys
    out: Dict[str, List[RunPlan]] = {}
    for run in plan.runs:
        out.setdefault(variant_key(base_settings(run.settings, keys)), []).append(run)
    return out


def run_state(store: Store, run: RunPlan, select: str, retry: bool = False) -> RunState:
    """``select`` at each rung the run stopped at (status.json's ``rungs``), and at max_steps once
    it completed. ``retry`` (--retry-failed): a failed or diverged run counts as not yet trained."""
    status = store.status(run.run_id)
    state = status.get("status", "pending")
    if retry and state in ("failed", "diverged"):
        return RunState(_value(run), run.seed, "pending", {})
    at = {int(step): metrics.get(select) for step, metrics in (status.get("rungs") or {}).items()}
    if state == "completed":
        run_dir = store.run_dir(run.run_id)
        final = (read_json(run_dir / SUMMARY) or {}).get("final", {})
        at = {**_validations(run_dir, select), **at, run.config.train.max_steps: final.get(select)}
    return RunState(_value(run), run.seed, state, at)


def _value(run: RunPlan):
    value = run.tune["value"]
    return tuple(value) if isinstance(value, list) else value  # a grid's (run.json writes a list)


def _validations(run_dir, select: str) -> Dict[int, Optional[float]]:
    """``select`` at every validation a completed run made (its checkpoint's history): the rungs of a
    run trained to the end without halving, e.g. before ``tune.halving`` was added to the spec."""
    if not (run_dir / CHECKPOINT).is_file():
        return {}
    return {int(row["step"]): row.get(select) for row in checkpoint_history(run_dir) if "step" in row}


def ladders(plan: Plan, store: Store, retry: bool = False) -> Dict[str, Tuple[Ladder, List[RunPlan], List[RunState]]]:
    """Each variant's ladder as the store allows it to be decided, with its runs and their states."""
    tune = plan.spec.tune
    out = {}
    for label, runs in by_variant(plan).items():
        states = [run_state(store, r, tune.select, retry) for r in runs]
        steps = rungs(tune.halving, runs[0].config.train.max_steps)  # one budget per variant (plan.py checks)
        out[label] = (climb(tune, steps, states), runs, states)
    return out


def cut_runs(plan: Plan, store: Store) -> set:
    """Run ids of the values halving cut, finished or not: stage 2 never chooses among them (a
    completed run of a cut value exists after --retry-failed re-decided a rung below it)."""
    return {run.run_id for ladder, runs, states in ladders(plan, store).values()
            for run, state in zip(runs, states) if state.value in ladder.cuts}


def next_round(plan: Plan, store: Store, retry: bool, log: Callable[[str], None]) -> Stops:
    """Record every cut value's unfinished runs as pruned, and return the runs the next round trains
    (empty: stage 1 is done, or waits on nothing this process can train)."""
    tune = plan.spec.tune
    stops: Stops = {}
    shown_steps = set()
    for ladder, runs, states in ladders(plan, store, retry).values():
        for run, state in zip(runs, states):
            value = state.value
            if state.status == "completed":
                _mark_cut(store, run, ladder.cuts.get(value), state, tune.select)
            elif value in ladder.cuts and state.status not in FINISHED + ("failed", PRUNED):
                cut = ladder.cuts[value]
                shown = f" ({tune.select} {cut.score:.4f})" if cut.score is not None else ""
                set_status(store.run_dir(run.run_id), PRUNED, reason=f"pruned at step {cut.step}: {cut.why}",
                           pruned_at=cut.step)
                log(f"stage 1: {run.variant} s{run.seed} pruned at step {cut.step}{shown}")
            elif value in ladder.target and ladder.target[value] not in state.at and state.status not in (
                    "diverged", "failed"):
                step = ladder.target[value]
                stops[run.run_id] = step if step < run.config.train.max_steps else None
                shown_steps.add(step)
    if stops:
        log(f"stage 1 (successive halving): {plural(len(stops), 'run')} to train to step "
            f"{', '.join(map(str, sorted(shown_steps)))}")
    return stops


def _mark_cut(store: Store, run: RunPlan, cut, state: RunState, select: str) -> None:
    """A completed run whose value a later decision cut (--retry-failed re-decided a rung below it)
    keeps its status and results, and says in status.json where it was cut (``pruned_at``, and its
    ``select`` there among the ``rungs``), so that the report, like stage 2, never chooses it; a
    decision that no longer cuts it removes the mark."""
    run_dir = store.run_dir(run.run_id)
    status = read_json(run_dir / STATUS) or {}
    if cut is None and "pruned_at" in status:
        write_json(run_dir / STATUS, {k: v for k, v in status.items() if k not in ("pruned_at", "reason")})
    elif cut is not None and status.get("pruned_at") != cut.step:
        rungs = {str(cut.step): {select: state.at.get(cut.step)}, **(status.get("rungs") or {})}
        set_status(run_dir, "completed", reason=f"completed, then cut at step {cut.step}: {cut.why}",
                   pruned_at=cut.step, rungs=rungs)
