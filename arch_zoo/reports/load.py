"""Read a run store (a sweep dir, a sweep's run dir, or a loose ``arch-zoo train --out`` dir) into
one pandas row per run.

The frame's columns are fixed fields (``FIXED``), one column per varied setting (dotted config
keys such as ``model.position``) and one per final metric (names with a slash, ``val/loss``).
``frame.attrs`` carries what the frame alone cannot: the sweep spec's metric, goal and baseline,
the settings columns, and the run dirs to read curves from.

``runstore.py`` reads the files (written by other processes while we read them) into one dict per
run; a tuned sweep's stage 1 is set apart by ``tuning.py`` and rides in ``attrs["tuning"]``.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import pandas as pd

from ..errors import ConfigError
from ..formatting import plural, si
from ..metrics import direction, goal_of
from ..run_names import DEFAULT_MIXER, settings_label
from ..rundir import METRICS, RUN_JSON, is_lr_column
from .grouping import by_task, check_distinct, differing, drop_duplicates, ordered as _ordered
from .runstore import fill_defaults, is_run_dir, is_sweep_dir, load_sweep, read_runs, scalar
from .task_notes import task_notes
from .tuning import base_variants, split_stages, tuning_notes, tuning_record

FIXED = ["sweep", "variant", "seed", "status", "reason", "is_baseline", "run_id", "params", "flops_per_token",
         "state_bytes_per_token", "train_tokens", "train_flops", "train_tokens_per_s", "train_bytes_per_s", "mfu", "peak_memory_mb",
         "wall_time_s", "step", "diverged_at", "run_dir"]
DEFAULT_METRIC = {"name": "val/loss", "goal": "min"}
MAX_LABEL_SETTINGS = 4  # more differing settings than this: a variant is labelled by where it came from


def goal_for(attrs: Dict[str, Any], metric: str) -> Optional[str]:
    """'min' or 'max' for a metric of a frame or table: the sweep's ``metric.goal`` for its own
    metric, else the goal its runs recorded, else the built-in table; None when nobody declared it."""
    if metric == attrs.get("metric") and attrs.get("goal"):
        return attrs["goal"]
    return goal_of(metric, attrs.get("goals"))


def _budget_note(rows: List[Dict[str, Any]], single_sweep: bool) -> List[str]:
    rungs = _by_rung(rows)
    if single_sweep and len(rungs) > 1:
        return _ladder_budget_note(rungs)
    flops = all(r.get("_budget") == "flops" for r in rows)  # flops-matched sweeps vary tokens on purpose
    what, unit = ("train_flops", "training FLOPs") if flops else ("train_tokens", "tokens")
    spent = {float(f"{float(r[what]):.6g}") for r in rows if r.get("status") == "completed"
             and isinstance(r.get(what), (int, float)) and math.isfinite(r[what])}
    if not single_sweep and len(spent) > 1:  # each sweep matched its own budget, not the others'
        return [f"budget: not matched across these inputs: completed runs trained on {min(spent):,.0f} to "
                f"{max(spent):,.0f} {unit}; compare like with like (each run's {what} is in runs.csv)."]
    matches = sorted({r["_budget"] for r in rows if r.get("_budget")})
    if not matches:
        return []
    match = matches[0]
    # what must agree for the line to say matched (a budget of steps claims tokens only when they agree)
    held = {"tokens": "train_tokens", "bytes": "_train_bytes", "flops": "train_flops",
            "steps": "train_tokens", "params": "train_tokens"}.get(match)
    per_step = {"tokens": "_tokens_per_step", "bytes": "_bytes_per_step", "flops": "_flops_per_step",
                "steps": "_tokens_per_step", "params": "_tokens_per_step"}.get(match)
    tokens, text = _per_variant(rows, "train_tokens"), _per_variant(rows, "_train_bytes")
    lines = []
    if len(matches) == 1 and held is not None and _agree(rows, held, per_step):
        what = {"steps": "steps and tokens", "params": _params_matched(rows)}.get(match, match)
        lines.append(f"budget: matched {what} (the sweep's "
                     "budget.match); each variant's actual train_tokens, "
                     "params and train_flops (3 x forward FLOPs/token x tokens) are in variants.csv.")
    elif match == "steps" or len(set(tokens.values())) > 1:
        why = ("train.max_steps was varied on purpose, so the budget is steps" if match == "steps" else
               f"the sweep's budget.match is {' / '.join(matches)}, but the variants spent different amounts")
        lines.append(f"budget: tokens not matched ({why}); each variant's training tokens: "
                     + ", ".join(f"{v} {si(t)}" for v, t in tokens.items()) + ".")
    else:
        lines.append(f"budget: {' / '.join(matches)} not matched (the variants spent different amounts); each "
                     "variant's train_tokens and train_flops are in variants.csv.")
    if len(text) > 1 and (match == "flops" or match != "bytes" and _differ(text.values())):
        lines.append("text read: " + ", ".join(f"{v} {si(b)} bytes" for v, b in text.items())
                     + (" (budget.match: bytes matches text)" if match == "flops" else
                          " (the variants' tokens cover different text, so the same tokens are not the same text; "
                          "budget.match: bytes matches text)"))
    return lines


def _by_rung(rows: List[Dict[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    """A ladder's rows by rung size (sweeps/scale_plan.py's ``scale`` of each run); {} for other sweeps."""
    out: Dict[str, List[Dict[str, Any]]] = {}
    for r in rows:
        if isinstance(r.get("_scale"), dict):
            out.setdefault(str(r["_scale"].get("size", r["_scale"].get("rung"))), []).append(r)
    return out


def _ladder_budget_note(rungs: Dict[str, List[Dict[str, Any]]]) -> List[str]:
    """A ladder matches its budget within each rung; the rungs differ on purpose (scale.budget), so the
    line says matched when every rung's variants agree, else names the rungs that do not."""
    notes = {size: _budget_note(group, True) for size, group in rungs.items()}
    if not any(notes.values()):
        return []
    unmatched = {size: lines for size, lines in notes.items() if lines and not lines[0].startswith("budget: matched ")}
    if unmatched:
        return [f"rung {size}: {line}" for size, lines in unmatched.items() for line in lines]
    tokens = [float(r["train_tokens"]) for group in rungs.values() for r in group
              if r.get("status") == "completed" and isinstance(r.get("train_tokens"), (int, float))]
    first = next(lines[0] for lines in notes.values() if lines)
    spread = f"; the rungs trained on {si(min(tokens))} to {si(max(tokens))} tokens (the ladder's scale.budget)" if tokens else ""
    return [first.replace("budget: matched ", "budget: within each rung, matched ", 1).replace(
        "; each variant's actual", f"{spread}; each variant's actual", 1)] + [
        f"rung {size}: {line}" for size, lines in notes.items() for line in lines[1:]]


def _per_variant(rows: List[Dict[str, Any]], key: str) -> Dict[str, float]:
    """Each variant's mean of ``key`` over its completed runs (every run's planned spend before any completed)."""
    done = [r for r in rows if r.get("status") == "completed"] or rows
    out: Dict[str, List[float]] = {}
    for r in done:
        value = r.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            out.setdefault(str(r.get("variant")), []).append(float(value))
    return {v: sum(xs) / len(xs) for v, xs in out.items()}


def _differ(values) -> bool:
    values = list(values)
    return len(values) > 1 and max(values) > min(values) * (1 + 1e-9)


def _params_matched(rows: List[Dict[str, Any]]) -> str:
    """What a params budget matched: the parameter counts' range (model.d_ff set per variant), and tokens."""
    params = _per_variant(rows, "params")
    if not params:
        return "params and tokens"
    low, high = min(params.values()), max(params.values())
    return (f"params (model.d_ff set per variant: {low:,.0f} to {high:,.0f} parameters, "
            f"{high / low - 1:.2%} apart) and tokens")


def _agree(rows: List[Dict[str, Any]], key: str, per_step: Optional[str]) -> bool:
    """Whether every variant spent the same ``key``, to within one step of the largest one's spend
    (whole steps cannot do better; a budget of steps must agree exactly)."""
    spent = _per_variant(rows, key)
    if len(spent) < 2:
        return True
    slack = max((r[per_step] for r in rows if per_step and isinstance(r.get(per_step), (int, float))), default=0.0)
    return max(spent.values()) - min(spent.values()) <= slack * (1 + 1e-9)


def load_runs(path: Union[str, Path, Sequence[Union[str, Path]]]) -> pd.DataFrame:
    """One row per run of a sweep dir, or of several sweep/run dirs (``arch-zoo compare``).

    With one sweep, the varied settings are the sweep's own. With several inputs, or loose run
    dirs, they are the config keys whose values differ between the runs (seed excepted), and a
    variant is one combination of them.

    A run is identified by its config and seed: the same run given twice (a sweep and one of its
    run dirs, or a copy) is kept once, and ``attrs["load_notes"]`` says what was dropped; two
    different runs that would be the same variant and seed are an error. Runs of different tasks
    or evaluations are not comparable: they are an error here, and ``load_groups`` splits them."""
    groups = load_groups(path)
    if len(groups) > 1:
        tasks = "; ".join(f"{g.attrs['task']} ({len(g)} runs)" for g in groups)
        raise ConfigError("", f"these runs are of different tasks or evaluations and not comparable: {tasks}; "
                              "compare each group on its own (arch-zoo compare does, one table per task)")
    return groups[0]


def load_groups(path: Union[str, Path, Sequence[Union[str, Path]]]) -> List[pd.DataFrame]:
    """``load_runs``, one frame per task and evaluation (the ``task`` config and the evaluation's
    ``train`` keys, ``EVALUATION``; keys a sweep varies do not split it). Each frame's
    ``attrs["task"]`` names its group: the task's name, and the options that tell apart groups of
    the same task."""
    paths = [Path(path)] if isinstance(path, (str, Path)) else [Path(p) for p in path]
    if not paths:
        raise ConfigError("", "no sweep or run directory given")
    specs, rows = [], []
    for p in paths:
        if is_run_dir(p):
            rows.extend(read_runs(p, p.resolve().parent.parent.name if (p / RUN_JSON).is_file()
                                  else p.resolve().name))
        elif is_sweep_dir(p):
            spec, name, sweep_rows = load_sweep(p)
            specs.append({**spec, "name": name})
            rows.extend(sweep_rows)
        else:
            what = "does not exist" if not p.exists() else "is not a sweep directory (no sweep.yaml, index.csv " \
                                                            "or runs/) nor a run directory (no status.json)"
            raise ConfigError("", f"{p} {what}")
    fill_defaults(rows)
    rows, notes = drop_duplicates(rows)
    notes = [_stale_note(s) for s in specs if s.get("_stale")] + notes
    single_sweep = len(paths) == 1 and len(specs) == 1
    groups = by_task(rows)
    frames = []
    for label, group in groups.items():
        stage_one, group = split_stages(group)  # a tuned sweep's table compares stage 2 only
        frame = _frame(group, paths, specs, single_sweep)
        if stage_one:
            frame.attrs["tuning"] = tuning_record(stage_one, specs[0] if single_sweep else {})
            frame.attrs["tuning"]["variants"] = base_variants(group)  # one colour per variant in both stages
            if not group:  # stage 2 not planned yet: the axes are stage 1's
                frame.attrs["settings"] = _ordered(k for r in stage_one for k in r["_settings"])
        frame.attrs["task"] = label if len(groups) > 1 else None
        frame.attrs["load_notes"] = notes + _budget_note(group, single_sweep) + task_notes(frame)
        if stage_one:
            frame.attrs["load_notes"] += tuning_notes(frame.attrs["tuning"])
        frames.append(frame)
    return frames


def _frame(rows: List[Dict[str, Any]], paths: List[Path], specs: List[Dict[str, Any]],
           single_sweep: bool) -> pd.DataFrame:
    settings_keys = _settings_keys(rows, single_sweep)
    metric_keys = _ordered(k for r in rows for k in r["_metrics"])
    records = [_record(r, settings_keys, metric_keys) for r in rows]
    check_distinct(rows, records)
    frame = _typed_frame(records, settings_keys, metric_keys)
    frame.attrs.update(_attrs(frame, rows, records, paths, specs[0] if single_sweep else {}, settings_keys,
                              metric_keys))
    return frame


def _settings_keys(rows: List[Dict[str, Any]], single_sweep: bool) -> List[str]:
    """The settings columns: one sweep's own axes; across inputs, the config keys whose values differ,
    each run's ``_settings`` and variant label then taken from them."""
    if single_sweep:
        return _ordered(k for r in rows for k in r["_settings"])
    settings_keys = differing([r["_config"] for r in rows if r["_config"]])
    for r in rows:
        source = r["_config"] or r["_settings"]  # a planned run has no config yet: its sweep settings
        r["_settings"] = {k: scalar(source.get(k)) for k in settings_keys}
    _group_labels(rows, settings_keys)
    return settings_keys


def _record(row: Dict[str, Any], settings_keys: List[str], metric_keys: List[str]) -> Dict[str, Any]:
    rec = {k: row.get(k) for k in FIXED}
    if rec["variant"] is None:
        rec["variant"] = settings_label(row["_settings"], _model_mixer(row)) or rec["run_id"]
    rec.update({k: row["_settings"].get(k) for k in settings_keys})
    rec.update({k: row["_metrics"].get(k, math.nan) for k in metric_keys})
    return rec


def _typed_frame(records: List[Dict[str, Any]], settings_keys: List[str], metric_keys: List[str]) -> pd.DataFrame:
    frame = pd.DataFrame.from_records(records, columns=FIXED + settings_keys + metric_keys)
    for col in ("params", "flops_per_token", "state_bytes_per_token", "train_tokens", "train_flops", "train_tokens_per_s",
                "train_bytes_per_s", "mfu",
                "peak_memory_mb", "wall_time_s", "step", "diverged_at", *metric_keys):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    frame["seed"] = pd.to_numeric(frame["seed"], errors="coerce").astype("Int64")
    for key in settings_keys:  # keep 4 an int and 'auto' a string: no float upcast around a missing value
        frame[key] = pd.Series([r.get(key) for r in records], dtype=object)
    return frame


def _attrs(frame: pd.DataFrame, rows: List[Dict[str, Any]], records: List[Dict[str, Any]], paths: List[Path],
           spec: Dict[str, Any], settings_keys: List[str], metric_keys: List[str]) -> Dict[str, Any]:
    """``frame.attrs``: what the frame alone cannot say (``spec``: the single sweep's, else {})."""
    metric = spec.get("metric") or {}
    if isinstance(metric, str):
        metric = {"name": metric}
    name = metric.get("name") or DEFAULT_METRIC["name"]
    goals = {k: v for r in rows for k, v in (r.get("_goals") or {}).items()}
    mixers = {_model_mixer(r) for r in rows}
    return {
        "name": spec.get("name") or ("+".join(dict.fromkeys(str(r["sweep"]) for r in rows if r.get("sweep")))
                                     or (Path(paths[0]).resolve().name if len(paths) == 1 else "compare")),
        "settings": settings_keys, "metrics": metric_keys + _curve_only(frame),
        "mixer": mixers.pop() if len(mixers) == 1 else DEFAULT_MIXER,  # what layer lists' names call the model's
        "metric": name, "goal": direction(metric.get("goal")) or goal_of(name, goals), "goals": goals,
        "min_effect": metric.get("min_effect"),  # the spec's smallest effect that counts (arch_zoo/stats.py)
        "claim": metric.get("claim"),  # the spec's one-sided claim (reports/verdicts.py)
        "seeds": spec.get("seeds"),  # as written: {start, max, ...} judges by the sequential rule
        "units": {k: v for r in rows for k, v in (r.get("_units") or {}).items()},
        "bytes_per_token": _bytes_per_token(rows, records),
        "baseline": {str(k): v for k, v in (spec.get("baseline") or {}).items()},
        "description": spec.get("description") or "",
        "samples": _samples(rows, records),
        "not_evaluated": _not_evaluated(rows, records),
        "commits": sorted({r["_commit"] for r in rows if r.get("_commit")}),
        "invocations": spec.get("invocations") or [],
        "scale": {r["run_id"]: r["_scale"] for r in rows if r.get("_scale")},  # a ladder's rungs, by run id
        "suite": {r["run_id"]: r["_suite"] for r in rows if r.get("_suite")},  # a probe suite's entries, by run id
    }


def _samples(rows: List[Dict[str, Any]], records: List[Dict[str, Any]]) -> Dict[str, list]:
    """Each variant's decoded samples from its lowest completed seed."""
    decoded = [((0, rec["seed"]) if isinstance(rec["seed"], int) else (1, 0), str(rec["variant"]), r["_samples"])
               for r, rec in zip(rows, records) if r.get("_samples") and rec["status"] == "completed"]
    samples: Dict[str, list] = {}
    for _, variant, decodings in sorted(decoded, key=lambda d: d[0]):
        samples.setdefault(variant, decodings)
    return samples


def _not_evaluated(rows: List[Dict[str, Any]], records: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Each variant's eval splits left out, and why (its first run that says)."""
    out: Dict[str, Any] = {}
    for r, rec in zip(rows, records):
        if r.get("_not_evaluated"):
            out.setdefault(str(rec["variant"]), r["_not_evaluated"])
    return out


def _bytes_per_token(rows: List[Dict[str, Any]], records: List[Dict[str, Any]]) -> Dict[str, Dict[str, float]]:
    """Variant -> split -> its runs' bytes per token (one corpus, one tokenizer)."""
    out: Dict[str, Dict[str, float]] = {}
    for r, rec in zip(rows, records):
        for split, value in (r.get("_bytes_per_token") or {}).items():
            out.setdefault(str(rec["variant"]), {}).setdefault(split, value)
    return out


def _stale_note(spec: Dict[str, Any]) -> str:
    stale = spec["_stale"]
    return (f"{spec['name']}: {plural(len(stale), 'run dir')} under runs/ not in the sweep's current plan (index.csv) "
            f"left out (runs of an earlier spec; in a tuned sweep rerun with --retry-failed, also stage-2 runs until "
            f"stage 2 is planned again): {', '.join(stale[:3])}{', ...' if len(stale) > 3 else ''}")


def _group_labels(rows: List[Dict[str, Any]], settings_keys: List[str]) -> None:
    """Runs with equal settings are one variant (seeds of it). Its label names the settings when
    they are few, else the sweep variant or run dir it came from."""
    labels: Dict[str, str] = {}
    for r in rows:
        key = json.dumps(r["_settings"], sort_keys=True, default=str)
        if key not in labels:
            if settings_keys and len(settings_keys) <= MAX_LABEL_SETTINGS:
                label = settings_label(r["_settings"], _model_mixer(r))
            elif r["variant"] is not None:
                label = f"{r['sweep']}:{r['variant']}"
            else:
                label = r["_config"].get("name") if not settings_keys else Path(r["run_dir"]).name
                label = label or r["run_id"]
            while label in labels.values():
                label += "'"
            labels[key] = label
        r["variant"] = labels[key]


def _model_mixer(row: Dict[str, Any]) -> str:
    """The run's model-wide mixer (config.yaml, flattened): what a layer list's name calls the layers it leaves."""
    mixer = (row.get("_config") or {}).get("model.mixer")
    return mixer if isinstance(mixer, str) else DEFAULT_MIXER


def _curve_only(frame: pd.DataFrame) -> List[str]:
    """Metrics that only running runs have logged so far (in metrics.csv, not yet in a summary)."""
    seen = set(frame.columns)
    extra: List[str] = []
    for run_dir in frame["run_dir"]:
        try:
            with (Path(run_dir) / METRICS).open(newline="") as f:
                header = next(csv.reader(f), [])
        except OSError:
            continue
        extra += [h for h in header if "/" in h and h not in seen and h not in extra and not h.startswith("train/")
                  and not is_lr_column(h)]
    return extra
