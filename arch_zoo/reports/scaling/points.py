"""A ladder's runs as the points its fits need: per variant (its settings without the rung), per
rung, the loss of each seed and the compute (and non-embedding parameters) it trained with.

A rung of an IsoFLOP ladder is a FLOPs budget holding several sizes ("cells"); its point is the
best cell's (the compute-optimal frontier). Every other ladder has one cell per rung.

``resample`` draws the replicates the intervals come from: a parametric bootstrap from each rung's
seed spread, calibrated for few seeds (a rung's mean moves by its standard error times a Student t
of n - 1 degrees of freedom, as a t-interval allows). Resampling the seeds themselves (the ordinary
bootstrap) has only 10 distinct draws at 3 seeds and treats the seeds' spread as known: its 95%
intervals held k = 1 in only 75-88% of simulated ladders. At each rung every variant moves with the
same weights on the same seeds (the seeds are paired: the same data order at every size), so a
compute multiplier's interval reflects the paired design."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pandas as pd
from scipy import stats

from ...run_names import plain, short_names
from ...sweeps.scale import FLOPS_KEY, SIZE_KEY

ARCH_HIDDEN = (SIZE_KEY, FLOPS_KEY)


@dataclass
class Cell:
    size: str
    index: int  # the size's place in the ladder (0: smallest)
    compute: float  # training FLOPs (the completed runs' mean: equal for every seed)
    params: float  # non-embedding parameters
    losses: Dict[Any, float]  # seed -> final metric

    def mean(self) -> float:
        return float(np.mean(list(self.losses.values()))) if self.losses else math.nan


@dataclass
class Rung:
    number: int  # 1-based, smallest first
    label: str  # the size, or an IsoFLOP ladder's budget
    cells: List[Cell] = field(default_factory=list)

    def best(self) -> Optional[Cell]:
        done = [c for c in self.cells if c.losses]
        return min(done, key=lambda c: c.mean()) if done else None


@dataclass
class Ladder:
    """Every variant's rungs, in ladder order; ``rungs[v]`` lists only the rungs ``v`` has data for."""

    variants: List[str]
    rungs: Dict[str, List[Rung]]
    keys: Dict[str, Dict[str, Any]]  # variant -> its settings without the rung
    isoflop: bool
    tokens_per_param: bool
    planned: int  # the rungs the ladder has (sizes, or budgets), completed or not

    def seeds(self, number: int) -> List[Any]:
        """Every seed completed at rung ``number`` by any variant, sorted: what the bootstrap resamples."""
        out = {s for rs in self.rungs.values() for r in rs if r.number == number for c in r.cells for s in c.losses}
        return sorted(out, key=str)


def arch_label(settings: Dict[str, Any], names: Dict[str, str]) -> str:
    return ",".join(f"{names[k]}={plain(v)}" for k, v in settings.items()) or "base"


def ladder_points(runs: pd.DataFrame, metric: str) -> Ladder:
    """The completed runs of a ladder sweep's frame as per-variant rungs."""
    records = runs.attrs.get("scale") or {}
    settings = [s for s in runs.attrs.get("settings") or [] if s not in ARCH_HIDDEN]
    names = short_names(settings)
    isoflop = any(r.get("flops_budget") is not None for r in records.values())
    per_token = any(r.get("budget") == "tokens_per_param" for r in records.values())
    if isoflop:  # a rung per budget
        order = sorted({r["flops_budget"] for r in records.values()})
        rung_labels = {b: (i + 1, f"{b:.3g} FLOPs") for i, b in enumerate(order)}
    else:  # a rung per size, in the ladder's order
        order = [label for _, label in sorted({(r["rung"], r["size"]) for r in records.values()})]
        rung_labels = {label: (i + 1, label) for i, label in enumerate(order)}
    ladder = Ladder([], {}, {}, isoflop, per_token, len(rung_labels))
    cells: Dict[Tuple[str, Any, str], Cell] = {}
    spent: Dict[Tuple[str, Any, str], List[float]] = {}
    done = runs[(runs["status"] == "completed") & runs["run_id"].isin(list(records))]
    for _, row in done.iterrows():
        value = row.get(metric)
        if value is None or not np.isfinite(value):
            continue
        rec = records[row["run_id"]]
        keys = {k: row[k] for k in settings}
        variant = arch_label(keys, names)
        if variant not in ladder.keys:
            ladder.variants.append(variant)
            ladder.keys[variant] = keys
        rung_key = rec["flops_budget"] if isoflop else rec["size"]
        key = (variant, rung_key, rec["size"])
        cells.setdefault(key, Cell(rec["size"], rec["rung"], math.nan, rec["non_embedding_params"], {}))
        cells[key].losses[row["seed"]] = float(value)
        spent.setdefault(key, []).append(float(row["train_flops"]))
    for key, cell in sorted(cells.items(), key=lambda kv: (rung_labels[kv[0][1]][0], kv[1].index)):
        variant, rung_key, _ = key
        cell.compute = float(np.mean(spent[key]))
        number, label = rung_labels[rung_key]
        rungs = ladder.rungs.setdefault(variant, [])
        if not rungs or rungs[-1].number != number:
            rungs.append(Rung(number, label))
        rungs[-1].cells.append(cell)
    return ladder


# ------------------------------------------------------------------------------------------ bootstrap

def point_arrays(rungs: List[Rung], x: str = "compute") -> Tuple[np.ndarray, np.ndarray]:
    """(x, mean loss) per rung: the best cell's."""
    best = [r.best() for r in rungs]
    return (np.array([getattr(c, x) for c in best], dtype=float), np.array([c.mean() for c in best], dtype=float))


def draws(ladder: Ladder, n: int, rng: np.random.Generator) -> Dict[int, Tuple[List[Any], np.ndarray, np.ndarray]]:
    """Per rung: its seeds, (n, seeds) standard normal weights and (n,) uniforms, shared by every
    variant: what ``resample`` turns into each replicate's rung means."""
    out = {}
    for number in sorted({r.number for rs in ladder.rungs.values() for r in rs}):
        seeds = ladder.seeds(number)
        out[number] = (seeds, rng.standard_normal((n, len(seeds))), rng.random(n))
    return out


def resample(rungs: List[Rung], drawn: Dict[int, Tuple[List[Any], np.ndarray, np.ndarray]], n: int,
             x: str = "compute") -> Tuple[np.ndarray, np.ndarray]:
    """(x, loss), each (n, rungs): the replicates' points. A cell of k >= 2 seeds with residuals r
    (loss - mean) draws mean + (z . r) / sqrt(k V), z the rung's normal weights on its seeds and
    V ~ chi2(k - 1) from the rung's uniform: the mean moves by its standard error times a Student t
    with k - 1 degrees of freedom, what a t-interval allows for, and every variant at a rung moves with
    the same weights on the same seeds, so a difference moves as a paired t says. A cell of one seed
    stays where it is; a draw at or below 0 is NaN (the fit leaves that rung out of the replicate)."""
    xs, ys = np.full((n, len(rungs)), np.nan), np.full((n, len(rungs)), np.nan)
    for j, rung in enumerate(rungs):
        seeds, z, u = drawn[rung.number]
        best_y = np.full(n, np.inf)
        for cell in rung.cells:
            mine = [i for i, s in enumerate(seeds) if s in cell.losses]
            k, means = len(mine), np.full(n, cell.mean())
            if k >= 2:
                r = np.array([cell.losses[seeds[i]] for i in mine]) - cell.mean()
                means = means + (z[:, mine] @ r) / np.sqrt(k * stats.chi2.ppf(u, k - 1))
            means = np.where(means > 0, means, np.inf)
            take = means < best_y
            best_y = np.where(take, means, best_y)
            xs[:, j] = np.where(take, getattr(cell, x), xs[:, j])
        ys[:, j] = np.where(np.isfinite(best_y), best_y, np.nan)
    return xs, ys


def seed_noise(ladder: Ladder) -> Optional[float]:
    """The median standard error of a cell's mean log loss over seeds (cells with 2 or more seeds)."""
    errors = [np.std(np.log(list(c.losses.values())), ddof=1) / math.sqrt(len(c.losses))
              for rs in ladder.rungs.values() for r in rs for c in r.cells if len(c.losses) >= 2]
    return float(np.median(errors)) if errors else None
