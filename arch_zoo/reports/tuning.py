"""A tuned sweep's stage 1 in the report: each variant's tuning curve (the selection metric against
the tuned value, as a table and a plot), the value it was chosen at, and a warning when that value is
an end of the range tried. The choice is recomputed by the sweep's own rule (``sweeps.tune.choose``),
so the report and stage 2 can never disagree about it. Under successive halving (``tune.halving``), a
value pruned at a rung shows its metric there, marked pruned, and is never the choice.
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pandas as pd

from ..formatting import number
from ..metrics import PER_BYTE, direction, goal_of
from ..run_names import all_numbers, plain
from ..rundir import PRUNED
from ..sweeps.tune import STAGE_TUNE, Choice, TuneSpec, choose, edge_warning, per_byte_rows, variant_key

FINISHED = ("completed", "diverged", "failed", PRUNED)  # what stage 2 waits for in stage 1


def base_variants(rows: List[Dict[str, Any]]) -> Dict[str, str]:
    """A tuned sweep's stage-2 variants -> the stage-1 variant (its name without the tuned key) each is."""
    return {str(r["variant"]): str(r["_tune"]["variant"]) for r in rows
            if r.get("variant") is not None and (r.get("_tune") or {}).get("variant") is not None}


def split_stages(rows: List[Dict[str, Any]]) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(a tuned sweep's stage-1 runs, the others) among ``runstore`` rows."""
    stage_one = [r for r in rows if r.get("_tune", {}).get("stage") == STAGE_TUNE]
    return stage_one, [r for r in rows if r not in stage_one]


def tuning_record(rows: List[Dict[str, Any]], spec: Dict[str, Any]) -> Dict[str, Any]:
    """A tuned sweep's stage 1, JSON-safe (it rides in ``frame.attrs``): the rule stage 1 chose by
    (run.json's, or for stores written before run.json recorded it, the sweep spec's ``tune``) and one
    entry per run (its variant without the tuned key, value, seed, status and selection metric)."""
    first = rows[0]["_tune"]
    if "select" in first:
        values, select, goal, halving = first.get("values"), first["select"], first.get("goal"), first.get("halving")
    else:
        tune = spec.get("tune") or {}
        select = tune.get("select", "val/loss")
        goal = select.get("goal") if isinstance(select, dict) else None
        select = select.get("name", "val/loss") if isinstance(select, dict) else select
        values = tune.get("values") if isinstance(tune.get("values"), list) else None  # a range: ascending
        halving = tune.get("halving")
    return {"key": first.get("key"), "select": select, "goal": direction(goal), "halving": halving,
            "values": [_hashable(v) for v in values] if values is not None else None,
            "runs": [{"variant": r["_tune"].get("variant"), "value": _hashable(r["_tune"].get("value")),
                      "seed": r.get("seed"),
                      "status": PRUNED if r.get("_pruned_at") is not None else r.get("status"),
                      "reason": r.get("reason"), "metric": _metric(r, select), "pruned_at": r.get("_pruned_at"),
                      "per_byte": _metric(r, f"{select.rsplit('/', 1)[0]}/{PER_BYTE}"),
                      "bytes_per_token": (r.get("_bytes_per_token") or {}).get(select.rsplit("/", 1)[0]),
                      "run_dir": r.get("run_dir")} for r in rows]}


def _hashable(value: Any) -> Any:
    """A grid's tuned value (``tune.grid``): run.json writes the tuple as a list."""
    return tuple(value) if isinstance(value, list) else value


def _metric(row: Dict[str, Any], select: str) -> Optional[float]:
    """The final ``select``; a pruned run's at the rung where it stopped."""
    if row.get("_pruned_at") is not None:
        return (row.get("_rungs") or {}).get(str(row["_pruned_at"]), {}).get(select)
    return row["_metrics"].get(select)


def _spec(record: Dict[str, Any]) -> TuneSpec:
    """The rule as stage 1 applied it: its values in the order tried (ties go to the first)."""
    runs = record["runs"]
    seen = list(dict.fromkeys(r["value"] for r in runs))  # stores before run.json had the order: ascending
    values = list(record.get("values") or _ascending(tuple(seen)))
    values += [v for v in seen if v not in values]
    seeds = tuple(dict.fromkeys(r["seed"] for r in runs))
    select = record.get("select") or "val/loss"
    return TuneSpec(record["key"], tuple(values), seeds, select, record.get("goal") or goal_of(select) or "min")


def choices(record: Dict[str, Any]) -> Dict[str, Choice]:
    """variant (its name without the tuned key) -> its Choice."""
    spec = _spec(record)
    rows = [({"variant": r["variant"], spec.key: r["value"]}, r["seed"], r["status"], r["metric"])
            for r in record["runs"]]
    # as stage 1 chose: by bits per byte where a variant's values tokenize differently (sweeps.tune)
    rows, switched = per_byte_rows(spec, rows, [(r.get("per_byte"), r.get("bytes_per_token")) for r in record["runs"]])
    picked = choose(spec, rows)
    for label, (metric, why) in switched.items():
        picked[label] = replace(picked[label], by=metric, why=why)
    names = dict.fromkeys(r["variant"] for r in record["runs"])
    return {name: picked[variant_key({"variant": name})] for name in names}


def _unfinished(record: Dict[str, Any], variant: str) -> bool:
    return any(r["status"] not in FINISHED for r in record["runs"] if r["variant"] == variant)


def pruned(record: Dict[str, Any], variant: str, value: Any) -> Optional[Tuple[int, Optional[float]]]:
    """(rung step, mean ``select`` there over the tuning seeds, None when some seed has none) for a
    value successive halving pruned; None for any other."""
    runs = [r for r in record["runs"] if r["variant"] == variant and r["value"] == value]
    cut = [r for r in runs if r["status"] == PRUNED]
    if not cut:
        return None
    xs = [r["metric"] for r in cut]
    whole = len(cut) == len(runs) and all(isinstance(x, (int, float)) and math.isfinite(x) for x in xs)
    return cut[0].get("pruned_at"), (sum(xs) / len(xs) if whole else None)


def _cell(record: Dict[str, Any], variant: str, value: Any, score: Optional[float]) -> str:
    if score is not None:
        return number(score, 4)
    cut = pruned(record, variant, value)
    states = sorted({r["status"] for r in record["runs"] if r["variant"] == variant and r["value"] == value
                     and r["status"] not in ("completed", PRUNED)})
    if cut is not None:
        step, mean = cut
        states.append((f"{number(mean, 4)} " if mean is not None else "") + f"(pruned at step {step})")
    return ", ".join(states) or "-"


def _ascending(values: Tuple[Any, ...]) -> List[Any]:
    """Numeric values in ascending order for the table's columns; others as tried."""
    return sorted(values) if all_numbers(values) else list(values)


def tuning_table(record: Dict[str, Any]) -> pd.DataFrame:
    """One row per variant: the selection metric (mean over the tuning seeds) at each value, then the
    value chosen; a value that did not complete on every seed shows its status (e.g. diverged)."""
    spec, picked = _spec(record), choices(record)
    rows = []
    for variant, c in picked.items():
        row = {"variant": variant}
        for v in _ascending(spec.values):
            text = _cell(record, variant, v, c.scores.get(v))
            row[f"{plain(v)}"] = f"**{text}**" if v == c.value and not _unfinished(record, variant) else text
        row[f"chosen {spec.key}"] = ("not yet (stage 1 is unfinished)" if _unfinished(record, variant) else
                                     plain(c.value) if c.value is not None else "none (no value completed)")
        rows.append(row)
    return pd.DataFrame(rows)


def tuning_notes(record: Dict[str, Any]) -> List[str]:
    spec, picked = _spec(record), choices(record)
    lines = [f"tuning: each variant trained at its own {spec.key}, chosen in stage 1 from {len(spec.values)} values "
             f"({', '.join(plain(v) for v in spec.values)}) by the {spec.goal} of {spec.select} averaged over tuning "
             f"seed{'s' * (len(spec.seeds) != 1)} {', '.join(map(str, spec.seeds))}; the table compares stage 2, on "
             "other seeds. A value that diverged or failed on any tuning seed is never chosen."]
    halving = record.get("halving")
    if halving:
        lines.append(f"successive halving (eta {halving.get('eta')}, min_steps {halving.get('min_steps')}): a value "
                     f"marked pruned stopped at that rung, where it ranked below the best 1/{halving.get('eta')} of "
                     "its variant's values; it shows its metric there, and only values that trained to the end were "
                     "chosen from.")
    for variant, c in picked.items():
        if _unfinished(record, variant):
            continue
        warning = edge_warning(spec.key, variant, c.edge, plain(c.value))
        if warning:
            lines.append(warning)
        if c.why:
            lines.append(f"{variant}: {c.why}")
        if c.value is None:
            lines.append(f"warning: {variant} completed no {spec.key} on every tuning seed, so it has no stage 2")
    return lines


def tuning_plot(record: Dict[str, Any], out_dir: Path, colors: Optional[Dict[str, str]] = None) -> Optional[Path]:
    """The tuning curves: selection metric against the tuned value, one line per variant, the chosen
    value ringed; a value that did not complete is marked x on the top edge. ``colors``: the report's
    (``colors.variant_colors``), so a variant is drawn here as in its other plots."""
    from .plots import _colors, _figure, _legend, _save, _text  # matplotlib: only when plots are written

    spec, picked = _spec(record), choices(record)
    colors = {**_colors(list(picked)), **(colors or {})}
    numeric = all_numbers(spec.values)
    xs = {v: (v if numeric else i) for i, v in enumerate(spec.values)}
    fig = _figure()
    ax = fig.add_subplot()
    finite = [s for c in picked.values() for s in c.scores.values() if s is not None and math.isfinite(s)]
    top = max(finite) if finite else 1.0
    for variant, c in picked.items():
        color = colors.get(variant)
        done = [(xs[v], s) for v, s in c.scores.items() if s is not None]
        if done:
            ax.plot(*zip(*done), marker="o", color=color, label=_text(variant))
        cut = {v: pruned(record, variant, v) for v in c.scores}
        stopped = [(xs[v], cut[v][1]) for v in c.scores if cut[v] is not None and cut[v][1] is not None]
        if stopped:
            ax.plot(*zip(*stopped), "v", color=color, markerfacecolor="none", markersize=8)
        failed = [xs[v] for v, s in c.scores.items() if s is None and (cut[v] is None or cut[v][1] is None) and all(
            r["status"] in FINISHED for r in record["runs"] if r["variant"] == variant and r["value"] == v)]
        if failed:
            ax.plot(failed, [top] * len(failed), "x", color=color, markersize=9)
        if c.value is not None and not _unfinished(record, variant):
            ax.plot([xs[c.value]], [c.scores[c.value]], "o", markersize=12, markerfacecolor="none", color=color)
    if numeric and min(spec.values) > 0 and max(spec.values) / min(spec.values) >= 10:
        ax.set_xscale("log")
    if not numeric:
        ax.set_xticks(list(xs.values()), [_text(plain(v)) for v in spec.values])
    ax.set_xlabel(_text(spec.key))
    ax.set_ylabel(_text(f"{spec.select} (mean over tuning seeds)"))
    ax.set_title(_text("tuning curves (ringed: chosen; x: diverged or failed; v: pruned, at its rung)"),
                 fontsize="medium")
    ax.grid(True, alpha=0.3)
    _legend(ax, len(picked))
    return _save(fig, out_dir, "tuning")
