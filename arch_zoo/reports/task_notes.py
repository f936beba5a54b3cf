"""What the runs' ``task`` records (summary.json) tell a report's reader: a corpus cut by max_chars, whether
documents were kept apart (``task.documents``) where variants differ in it, and variants that did not train. A run whose loss ends at or near the unigram loss (the train split's token
entropy: the loss of predicting token frequencies alone) learned nothing about context, and ranking it
beside the others would present a failure to train as a finding about the architecture."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional

import pandas as pd

from ..data.store import cut_text

NEAR_UNIGRAM = 0.05  # a final loss above (1 - this) x the unigram loss did not train
LOSS = "val/loss"


def _summary(run_dir: Any) -> Dict[str, Any]:
    try:
        return json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, ValueError, TypeError):
        return {}


def _untrained(variant: str, runs: List[Dict[str, Any]], completed: int) -> str:
    losses = [r["loss"] for r in runs]
    unigram = runs[0]["unigram"]
    moved = [r for r in runs if r["best"] is not None and r["best"] < unigram * (1 - NEAR_UNIGRAM)]
    span = f"{min(losses):.3f}" if len(set(f"{x:.3f}" for x in losses)) == 1 else f"{min(losses):.3f}-{max(losses):.3f}"
    where = "above" if min(losses) > unigram else f"within {NEAR_UNIGRAM:.0%} of (or above)"
    how = "never got below it" if not moved else f"{len(moved)} of them got further below it first"
    seeds = ", ".join(str(r["seed"]) for r in runs)
    return (f"warning: {variant} did not train: {len(runs)} of {completed} completed runs (seed {seeds}) ended at "
            f"{LOSS} {span}, {where} the unigram loss {unigram:.3f} (predicting token frequencies alone), and "
            f"{how}; its rank and Δ measure a failure to train, not the architecture.")


def task_notes(frame: pd.DataFrame) -> List[str]:
    """Report notes: the cuts the runs' corpora had, and each variant whose runs did not train."""
    if not len(frame) or "run_dir" not in frame.columns:
        return []
    done = frame[frame["status"] == "completed"]
    summaries = {r: _summary(r) for r in done["run_dir"]}
    notes = []
    cuts = sorted({c for c in (cut_text(s.get("task") or {}) for s in summaries.values()) if c})
    if cuts:
        notes.append(f"data: the corpus was cut: {'; '.join(cuts)}; every run read only that part.")
    notes += documents_note(done, summaries)
    by_variant: Dict[str, List[Dict[str, Any]]] = {}
    for r in untrained(frame, summaries):
        by_variant.setdefault(r["variant"], []).append(r)
    for variant, stalled in by_variant.items():
        notes.append(_untrained(variant, stalled, int((done["variant"] == variant).sum())))
    return notes


def documents_note(done: pd.DataFrame, summaries: Dict[Any, Dict[str, Any]]) -> List[str]:
    """Which variants kept the documents a window packs apart (``task.documents``; a run before the option
    recorded nothing: joined), where not every run did the same."""
    how: Dict[str, set] = {}
    for _, row in done.iterrows():
        task = summaries[row["run_dir"]].get("task") or {}
        how.setdefault(str(row["variant"]), set()).add(task.get("documents", "joined"))
    used = set().union(*how.values()) if how else set()
    if used <= {"joined"}:
        return []
    if used == {"separate"}:
        return ["data: every run kept the documents a window packs apart (task.documents: separate): masked "
                "attention, states reset at each document start."]
    parts = [f"{setting} in {', '.join(v for v, s in how.items() if s == {setting})}" for setting in ("separate", "joined")
             if any(s == {setting} for s in how.values())]
    mixed = [v for v, s in how.items() if len(s) > 1]
    parts += [f"both in {', '.join(mixed)}"] if mixed else []
    return [f"data: the variants differ in task.documents (separate: each document on its own; joined: documents "
            f"run into each other): {'; '.join(parts)}."]


def untrained(frame: pd.DataFrame, summaries: Optional[Dict[Any, Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """The completed runs whose val/loss ended at or above (1 - NEAR_UNIGRAM) x their unigram loss: run id,
    variant, seed, loss, unigram loss and best loss, in the frame's order."""
    if not len(frame) or "run_dir" not in frame.columns or LOSS not in frame.columns:
        return []
    done = frame[frame["status"] == "completed"]
    summaries = summaries if summaries is not None else {r: _summary(r) for r in done["run_dir"]}
    out = []
    for _, row in done.iterrows():
        summary = summaries[row["run_dir"]]
        unigram, loss = (summary.get("task") or {}).get("unigram_loss"), row[LOSS]
        if not isinstance(unigram, (int, float)) or not math.isfinite(loss) or loss < unigram * (1 - NEAR_UNIGRAM):
            continue
        best = ((summary.get("best") or {}).get(LOSS) or {}).get("value")
        out.append({"run_id": row["run_id"], "variant": str(row["variant"]), "seed": row["seed"], "loss": float(loss),
                    "unigram": float(unigram), "best": float(best) if isinstance(best, (int, float)) else None})
    return out
