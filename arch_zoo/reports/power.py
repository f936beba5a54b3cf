"""How many seeds before you launch: from a pilot sweep, the paired seeds each comparison needs.

Each variant is compared with its baseline variant as the report pairs them (same seed, same data
order), so the spread that matters is the standard deviation of the paired differences. A spread
measured on 3 seeds is itself a guess (planning from it, 16% of three-seed pilots promise 5 seeds
or fewer where 18 are needed), so the plan reads a one-sided upper confidence bound of that spread
(``stats.spread_upper``, 80% by default) and says so; the seeds then come from the exact power of a
two-sided paired t-test (``stats.seeds_needed``, the noncentral t). The wall time is the pilot's own
measured time per run (``wall_time_s``), the best estimate there is of the same runs.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import pandas as pd

from ..errors import ConfigError
from ..formatting import number, plural
from .aggregate import summarize
from .load import load_runs
from ..stats import ALPHA, POWER, seeds_needed, spread_upper

SPREAD_CONFIDENCE = 0.8  # the one-sided level of the spread's upper bound the plan reads


def pilot_runs(path: Union[str, Path], key: str = "--pilot") -> pd.DataFrame:
    """The pilot's runs, or one line naming ``key`` when the store holds no completed run to plan from."""
    root = Path(path)
    runs = load_runs(root) if (root / "index.csv").exists() or (root / "runs").is_dir() else None
    if runs is None or not (runs["status"] == "completed").any():
        raise ConfigError(key, f"{root} holds no completed run to plan seeds from; --power reads a pilot: run the "
                               "sweep with a few seeds first (seeds: [0, 1, 2]), or give --pilot SWEEP_DIR")
    return runs


def plan_seeds(runs: pd.DataFrame, metric: Optional[str] = None, min_effect: Optional[float] = None,
               confidence: float = SPREAD_CONFIDENCE, power: float = POWER, alpha: float = ALPHA) -> List[Dict[str, Any]]:
    """One row per variant compared with a baseline: its pilot's paired seeds, the effect planned for
    (``min_effect``, else the observed |Δ|), the spread of the paired differences and its upper bound, the
    seeds ``power`` needs at that bound, and the wall time of that many runs of the pair."""
    table = summarize(runs, metric=metric, min_effect=min_effect)
    m = table.attrs["metric"]
    wall = dict(zip(table["variant"], table["wall_time_s"]))
    rows = []
    for _, r in table.iterrows():
        if r["baseline"] or not r.get("baseline_variant"):
            continue
        n, sd = int(r[f"{m} n_paired"]), float(r[f"{m} sd_paired"])
        effect = min_effect if min_effect is not None else abs(float(r[f"{m} delta"]))
        upper = spread_upper(sd, n, confidence)
        seeds = math.nan if not (upper > 0) else seeds_needed(effect / upper, power, alpha)
        per_run = {v: float(wall.get(v, math.nan)) for v in (r["variant"], r["baseline_variant"])}
        rows.append({"variant": r["variant"], "baseline": r["baseline_variant"], "pilot seeds": n, "effect": effect,
                     "spread": sd, "spread bound": upper, "seeds": seeds, "per_run_s": per_run,
                     "wall_s": seeds * sum(per_run.values()) if math.isfinite(seeds) else math.nan, "metric": m})
    return rows


def power_lines(rows: List[Dict[str, Any]], pilot: Union[str, Path], variants: int, workers: Optional[int],
                min_effect: Optional[float], confidence: float = SPREAD_CONFIDENCE) -> List[str]:
    """What ``arch-zoo sweep --dry-run --power`` prints: a table of the pairs and a line for the whole sweep."""
    from tabulate import tabulate

    if not rows:
        return [f"seeds to plan: none (the pilot {pilot} compares no variant with a baseline)"]
    metric = rows[0]["metric"]
    effect = (f"a difference of {min_effect:g} (--min-effect)" if min_effect is not None
              else "the pilot's observed |Δ| (optimistic: a pilot's larger differences are partly luck; state "
                   "--min-effect to plan for the smallest difference that matters)")
    lines = [f"seeds to decide each pair on {metric} (pilot {pilot}): {POWER:.0%} power, two-sided paired t-test at "
             f"alpha {ALPHA:g}, to detect {effect}, planned from the {confidence:.0%} upper confidence bound of the "
             "spread of the paired differences (a spread from a few seeds is itself uncertain)"]
    shown = [{"variant": r["variant"], "vs": r["baseline"], "pilot seeds": str(r["pilot seeds"]),
              "effect": number(r["effect"], 3), "spread": _spread(r["spread"]), "spread bound": number(r["spread bound"], 3),
              "seeds needed": _seeds(r), "runs": _runs(r["seeds"], 2), "wall time": _time(r["wall_s"])} for r in rows]
    lines.append(tabulate(shown, headers="keys", tablefmt="simple", disable_numparse=True))
    finite = [r["seeds"] for r in rows if isinstance(r["seeds"], float) and math.isfinite(r["seeds"])]
    if finite:
        most = int(max(finite))
        per_run = {v: s for r in rows for v, s in r["per_run_s"].items()}  # each variant once, the baseline too
        per_seed = sum(per_run.values())
        total = _runs(float(most), variants)
        wall = (f", about {_time(most * per_seed / (workers or 1))} on {plural(workers or 1, 'worker')} by the "
                "pilot's measured time per run" if per_seed > 0 and len(per_run) == variants else "")
        lines.append(f"the sweep at {most} seeds (the most any pair needs): {total}{wall}")
    return lines


def _spread(sd: float) -> str:
    return "no spread measured" if sd == 0 else number(sd, 3)


def _seeds(r: Dict[str, Any]) -> str:
    if r["spread"] == 0:
        return "unknown"
    seeds = r["seeds"]
    if isinstance(seeds, float) and math.isnan(seeds):
        return "no effect" if r["effect"] == 0 else "undefined"
    return ">1000" if math.isinf(seeds) else str(int(seeds))


def _runs(seeds: float, variants: int) -> str:
    return "" if not math.isfinite(seeds) else plural(int(seeds) * variants, "run")


def _time(seconds: float) -> str:
    if not math.isfinite(seconds):
        return ""
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{number(seconds / size, 3)} {unit}"
    return f"{number(seconds, 3)} s"
