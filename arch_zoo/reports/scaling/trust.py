"""What a ladder's fits must not silently include or leave unsaid: rungs whose runs did not train (a
loss at or above the unigram loss, as the results table flags them) are left out of the fits and named,
and a ladder whose rungs share one untuned learning rate says so, naming it."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

import pandas as pd
import yaml

from ...rundir import CONFIG
from ..task_notes import NEAR_UNIGRAM, untrained


def drop_untrained(runs: pd.DataFrame) -> Tuple[pd.DataFrame, List[str]]:
    """The runs without every (variant, rung) that has a run that did not train, and a note naming each."""
    stalled = untrained(runs)
    if not stalled:
        return runs, []
    notes = []
    for variant in dict.fromkeys(r["variant"] for r in stalled):
        seeds = [str(r["seed"]) for r in stalled if r["variant"] == variant]
        done = int(((runs["variant"] == variant) & (runs["status"] == "completed")).sum())
        notes.append(f"{variant}: left out of the fits: {len(seeds)} of {done} completed seeds (seed "
                     f"{', '.join(seeds)}) did not train (val/loss at or above {1 - NEAR_UNIGRAM:g} x the unigram "
                     "loss), so that rung's mean measures a failure to train, not the curve")
    kept = runs[~runs["variant"].isin({r["variant"] for r in stalled})].copy()
    kept.attrs = dict(runs.attrs)
    return kept, notes


def shared_lr_note(runs: pd.DataFrame) -> Optional[str]:
    """A note naming the learning rate the rungs shared when the ladder tuned it neither per rung (scale.lr:
    tune) nor by transfer; None when it did, or when no run's config says."""
    records = runs.attrs.get("scale") or {}
    if any((r or {}).get("lr") for r in records.values()):
        return None
    lrs = set()
    for d in runs.loc[runs["run_id"].isin(list(records)), "run_dir"]:
        try:
            lr = ((yaml.safe_load((Path(d) / CONFIG).read_text()) or {}).get("train") or {}).get("lr")
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(lr, (int, float)):
            lrs.add(float(lr))
    if not lrs:
        return None
    shown = ", ".join(f"{v:g}" for v in sorted(lrs))
    return (f"lr not tuned per rung: every rung trained at train.lr = {shown} (scale.lr is neither tune nor transfer); "
            "compute multipliers between untuned rungs can grow or shrink with the lr alone")
