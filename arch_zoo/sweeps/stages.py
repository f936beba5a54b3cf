"""A tuned plan's two stages: counted before stage 1 has chosen (its variants and stage 2's size, which
``--dry-run`` shows and the sweep's progress counter includes from its first run), stage 1 as the
store holds it and each variant's choice, and stage 2's plan from those choices."""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Tuple

from ..formatting import plural
from ..metrics import PER_BYTE
from ..run_names import plain, variant_name
from ..rundir import PRUNED, SUMMARY
from .plan import Plan, second_plan
from .rungs import cut_runs
from .scale import transfer_lookup
from .spec import expand
from .store import Store, read_json
from .tune import Choice, base_settings, choose, edge_warning, per_byte_rows, shown, variant_key
from .worker import FINISHED


def stage_two_size(plan: Plan) -> int:
    """The runs a tuned plan's stage 2 holds when every variant gets a choice: each on every seed."""
    return len(stage_variants(plan)) * len(plan.spec.seeds or [None])


def stage_variants(plan: Plan) -> Dict[str, bool]:
    """A tuned plan's variants (names without the tuned key) -> whether the baseline is among them
    (without a spec baseline, only the first value's runs are marked, so any of them counts)."""
    out: Dict[str, bool] = {}
    for r in plan.runs:
        out[r.tune["variant"]] = out.get(r.tune["variant"], False) or r.is_baseline
    scale = plan.spec.scale
    if scale is not None and scale.lr == "transfer":  # stage 1 tunes the smallest rung; stage 2 trains them all
        first = transfer_lookup(scale)
        out = {variant_name(v.settings, plan.names): out.get(variant_name(first(v.settings), plan.names), False)
               for v in expand(plan.spec)}
    return out


def stage_one(plan: Plan, store: Store) -> Tuple[List[str], Dict[str, Choice], Dict[str, str]]:
    """A tuned sweep's stage 1 as the store holds it: its runs not finished yet ('variant s<seed>:
    status'), each variant's choice (final only once none waits) and each variant's name, by the
    key ``choose`` gives it. Reads the store, writes nothing (``--dry-run`` shows it too)."""
    tune = plan.spec.tune
    rows, measured, waiting, names = [], [], [], {}
    cut = cut_runs(plan, store) if tune.halving is not None else set()
    split = tune.select.rsplit("/", 1)[0]
    for run in plan.runs:
        status = PRUNED if run.run_id in cut else store.status(run.run_id)["status"]
        if status not in FINISHED + ("failed", PRUNED):
            waiting.append(f"{run.variant} s{run.seed}: {status}")
        summary = read_json(store.run_dir(run.run_id) / SUMMARY) or {}
        final = summary.get("final", {})
        rows.append((run.settings, run.seed, status, final.get(tune.select)))
        measured.append((final.get(f"{split}/{PER_BYTE}"),
                         ((summary.get("task") or {}).get("bytes_per_token") or {}).get(split)))
        names[variant_key(base_settings(run.settings, tune.keys))] = run.tune["variant"]
    rows, switched = per_byte_rows(tune, rows, measured)  # a tuned key that changes what a token is
    chosen = choose(tune, rows)
    for label, (metric, why) in switched.items():
        if label in chosen:
            chosen[label] = dataclasses.replace(chosen[label], by=metric, why=why)
    return waiting, chosen, names


def choice_line(tune, name: str, c: Choice, verb: str = "trains at") -> str:
    if c.value is None:
        return f"stage 1: no {tune.key} completed on every tuning seed for {name}; it has no stage 2"
    line = f"stage 1: {name} {verb} {shown(tune, c.value)} ({c.by or tune.select} {c.scores[c.value]:.4f})"
    return line + (f"\n  {c.why}" if c.why else "")


def second_stage(plan: Plan, store: Store, log: Callable[[str], None]) -> Optional[Plan]:
    """Stage 2's plan from stage 1's runs as the store holds them, or None while any is unfinished."""
    tune = plan.spec.tune
    waiting, chosen, names = stage_one(plan, store)
    if waiting:
        log(f"stage 2 waits for stage 1: {plural(len(waiting), 'run')} not finished ({'; '.join(waiting[:3])}); "
            "rerun the same command to resume")
        return None
    for key, c in chosen.items():
        log(choice_line(tune, names[key], c))
        warning = edge_warning(tune.key, names[key], c.edge, plain(c.value)) if c.value is not None else None
        if warning:
            log(warning)
    return second_plan(plan.spec, chosen)
