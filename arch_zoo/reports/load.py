"""Read a run store (a sweep dir, a sweep's run dir, or a loose ``arch-zoo train --out`` dir) into
one pandas row per run.

The frame's columns are fixed fields (``FIXED``), one column per varied setting (dotted config
keys such as ``model.position``) and one per final metric (names with a slash, ``val/loss``).
``frame.attrs`` carries what the frame alone cannot: the sweep spec's metric, goal and baseline,
the settings columns, and the run dirs to read curves from.

The run store is written by other processes while we read it, so every file may be missing or
half-written; a run whose files cannot be read is reported with the status it has, never dropped.
"""
from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import pandas as pd
import yaml

from ..errors import ConfigError
from ..metrics import DIRECTIONS, goal_of
from ..sweeps.tune import STAGE_TUNE
from .grouping import by_task, check_distinct, differing, drop_duplicates, ordered as _ordered
from .tuning import tuning_notes

FIXED = ["sweep", "variant", "seed", "status", "reason", "is_baseline", "run_id", "params", "flops_per_token",
         "train_tokens", "train_flops", "train_tokens_per_s", "mfu", "peak_memory_mb", "wall_time_s", "step",
         "diverged_at", "run_dir"]
DEFAULT_METRIC = {"name": "val/loss", "goal": "min"}
MAX_LABEL_SETTINGS = 4  # more differing settings than this: a variant is labelled by where it came from


def goal_for(attrs: Dict[str, Any], metric: str) -> Optional[str]:
    """'min' or 'max' for a metric of a frame or table: the sweep's ``metric.goal`` for its own
    metric, else the goal its runs recorded, else the built-in table; None when nobody declared it."""
    if metric == attrs.get("metric") and attrs.get("goal"):
        return attrs["goal"]
    return goal_of(metric, attrs.get("goals"))


def _json(path: Path) -> Optional[Dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_yaml(path: Path) -> Optional[Dict[str, Any]]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and any((path / f).is_file() for f in ("status.json", "summary.json", "run.json"))


def is_sweep_dir(path: Path) -> bool:
    return path.is_dir() and ((path / "sweep.yaml").is_file() or (path / "index.csv").is_file()
                              or (path / "runs").is_dir())


def flatten(cfg: Any, prefix: str = "") -> Dict[str, Any]:
    """{'model.position': 'rope', 'model.position.base': 10000.0, ...}: a component's ``name`` is
    the value of its own key, as a sweep names it."""
    out: Dict[str, Any] = {}
    if isinstance(cfg, dict):
        if prefix and "name" in cfg and not isinstance(cfg["name"], (dict, list)):
            out[prefix] = cfg["name"]
        for k, v in cfg.items():
            if prefix and k == "name":
                continue
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(cfg, list):
        out[prefix] = str(cfg)
    else:
        out[prefix] = cfg
    return out


def _scalar(v: Any) -> Any:
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, sort_keys=True)
    return v


def _lock_free(path: Path) -> bool:
    """True when a sweep's run lock exists and no process holds it: the run's trainer died. The
    probe is the store's own (flock, released at once); a worker that meets it retries later."""
    try:
        import fcntl
    except ImportError:  # no flock here: cannot tell
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def _not_evaluated(summary: Dict[str, Any]) -> Optional[str]:
    """'split: why; ...' for eval splits the run skipped (e.g. lengths past a learned position table)."""
    skipped = (summary.get("task") or {}).get("not_evaluated") or {}
    return "; ".join(f"{split}: {why}" for split, why in skipped.items()) or None


def _spent(budget: Dict[str, Any], step: Any) -> Dict[str, Any]:
    """Training tokens and FLOPs up to the step the run reached (its plan's, scaled: a diverged run
    spent less); run.json records the plan under ``budget`` (sweeps since budgets existed)."""
    steps = budget.get("steps")
    if not steps or not isinstance(step, (int, float)):
        return {"train_tokens": None, "train_flops": None}
    return {"train_tokens": budget.get("tokens", math.nan) * step / steps,
            "train_flops": budget.get("flops", math.nan) * step / steps}


def _budget_note(rows: List[Dict[str, Any]]) -> List[str]:
    matches = sorted({r["_budget"] for r in rows if r.get("_budget")})
    if not matches:
        return []
    # "tokens" keeps each variant's steps, so it claims nothing when an axis varies batch or length
    return [f"budget: matched {' / '.join(matches)} (the sweep's budget.match); each variant's actual train_tokens, "
            "params and train_flops (3 x forward FLOPs/token x tokens) are in variants.csv."]


def _read_run(run_dir: Path, sweep_name: str) -> Dict[str, Any]:
    meta = _json(run_dir / "run.json") or {}
    status = _json(run_dir / "status.json") or {}
    summary = _json(run_dir / "summary.json") or {}
    cfg = read_yaml(run_dir / "config.yaml") or {}
    state = status.get("status") or summary.get("status") or "pending"  # a sweep writes run.json first
    if state == "running" and _lock_free(run_dir / ".lock"):
        state = "interrupted"
        status = {**status, "reason": status.get("reason") or "its process died"}
    row: Dict[str, Any] = {
        "sweep": meta.get("sweep") or sweep_name,
        "variant": meta.get("variant"),
        "seed": meta.get("seed", cfg.get("seed")),
        "status": state,
        "reason": status.get("reason") or summary.get("reason"),
        "is_baseline": bool(meta.get("is_baseline", False)),
        "run_id": meta.get("run_id") or run_dir.name,
        "params": summary.get("parameters", meta.get("params")),
        "flops_per_token": summary.get("flops_per_token"),
        **_spent(meta.get("budget") or {}, summary.get("step", status.get("step"))),
        "train_tokens_per_s": summary.get("train_tokens_per_s"),
        "mfu": summary.get("mfu"),
        "peak_memory_mb": summary.get("peak_memory_mb"),
        "wall_time_s": summary.get("wall_time_s"),
        "step": summary.get("step", status.get("step")),
        "diverged_at": summary.get("diverged_at"),
        "run_dir": str(run_dir),
    }
    row["_budget"] = (meta.get("budget") or {}).get("match")
    row["_tune"] = meta.get("tune") or {}
    row["_settings"] = {k: _scalar(v) for k, v in (meta.get("settings") or {}).items()}
    row["_goals"] = {k: v for k, v in (summary.get("goals") or {}).items() if v in DIRECTIONS}
    row["_samples"] = summary.get("samples") or []
    row["_commit"] = summary.get("git_commit")
    row["_not_evaluated"] = _not_evaluated(summary)
    row["_config"] = flatten(cfg)
    row["_metrics"] = {k: float(v) for k, v in (summary.get("final") or {}).items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return row


def _index_rows(sweep_dir: Path, sweep_name: str) -> Dict[str, Dict[str, Any]]:
    """Planned runs from index.csv, for those that have no run dir yet."""
    path = sweep_dir / "index.csv"
    rows: Dict[str, Dict[str, Any]] = {}
    try:
        with path.open(newline="") as f:
            for rec in csv.DictReader(f):
                run_id = rec.get("run_id")
                if not run_id:
                    continue
                settings = {k: _parse(v) for k, v in rec.items()
                            if k not in ("run_id", "variant", "seed", "status", "reason") and k}
                rows[run_id] = {"sweep": sweep_name, "variant": rec.get("variant"), "seed": _parse(rec.get("seed")),
                                "status": rec.get("status") or "pending", "reason": rec.get("reason") or None,
                                "is_baseline": False, "run_id": run_id,
                                "run_dir": str(sweep_dir / "runs" / run_id), "_settings": settings,
                                "_config": {}, "_metrics": {}}
    except OSError:
        pass
    return rows


def _parse(text: Optional[str]) -> Any:
    if text is None or text == "":
        return None
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return _scalar(value)


def read_invocations(sweep_dir: Path) -> List[Dict[str, Any]]:
    """The sweep's invocations.jsonl records (a torn last line from a killed process is skipped)."""
    out = []
    try:
        lines = (sweep_dir / "invocations.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _load_sweep(sweep_dir: Path) -> tuple:
    spec = read_yaml(sweep_dir / "sweep.yaml") or {}
    spec["invocations"] = read_invocations(sweep_dir)
    name = str(spec.get("name") or sweep_dir.resolve().name)
    rows = _index_rows(sweep_dir, name)
    runs = sweep_dir / "runs"
    for run_dir in sorted(runs.iterdir()) if runs.is_dir() else []:
        if not run_dir.is_dir():
            continue
        row = _read_run(run_dir, name)
        planned = rows.get(row["run_id"], {})
        for key in ("variant", "seed"):
            if row[key] is None:
                row[key] = planned.get(key)
        row["_settings"] = row["_settings"] or planned.get("_settings", {})
        rows[row["run_id"]] = row
    return spec, name, list(rows.values())


def _label(settings: Dict[str, Any]) -> str:
    short = {k: k.rsplit(".", 1)[-1] for k in settings}
    clash = len(set(short.values())) < len(short)
    return ",".join(f"{k if clash else short[k]}={v}" for k, v in settings.items())


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
            rows.append(_read_run(p, p.resolve().parent.parent.name if (p / "run.json").is_file()
                                  else p.resolve().name))
        elif is_sweep_dir(p):
            spec, name, sweep_rows = _load_sweep(p)
            specs.append({**spec, "name": name})
            rows.extend(sweep_rows)
        else:
            what = "does not exist" if not p.exists() else "is not a sweep directory (no sweep.yaml, index.csv " \
                                                            "or runs/) nor a run directory (no status.json)"
            raise ConfigError("", f"{p} {what}")
    rows, notes = drop_duplicates(rows)
    single_sweep = len(paths) == 1 and len(specs) == 1
    groups = by_task(rows)
    frames = []
    for label, group in groups.items():
        stage_one = [r for r in group if r.get("_tune", {}).get("stage") == STAGE_TUNE]
        group = [r for r in group if r not in stage_one]  # a tuned sweep's table compares stage 2 only
        frame = _frame(group, paths, specs, single_sweep)
        if stage_one:
            frame.attrs["tuning"] = tuning_record(stage_one, specs[0] if single_sweep else {})
            if not group:  # stage 2 not planned yet: the axes are stage 1's
                frame.attrs["settings"] = _ordered(k for r in stage_one for k in r["_settings"])
        frame.attrs["task"] = label if len(groups) > 1 else None
        frame.attrs["load_notes"] = notes + _budget_note(group)
        if stage_one:
            frame.attrs["load_notes"] += tuning_notes(frame.attrs["tuning"])
        frames.append(frame)
    return frames


def _frame(rows: List[Dict[str, Any]], paths: List[Path], specs: List[Dict[str, Any]],
           single_sweep: bool) -> pd.DataFrame:
    if single_sweep:
        settings_keys = _ordered(k for r in rows for k in r["_settings"])
    else:
        settings_keys = differing([r["_config"] for r in rows if r["_config"]])
        for r in rows:
            source = r["_config"] or r["_settings"]  # a planned run has no config yet: its sweep settings
            r["_settings"] = {k: _scalar(source.get(k)) for k in settings_keys}
        _group_labels(rows, settings_keys)
    metric_keys = _ordered(k for r in rows for k in r["_metrics"])
    records, decoded, not_evaluated = [], [], {}
    for r in rows:
        rec = {k: r.get(k) for k in FIXED}
        if rec["variant"] is None:
            rec["variant"] = _label(r["_settings"]) or rec["run_id"]
        if r.get("_samples") and rec["status"] == "completed":
            seed = rec["seed"]
            decoded.append(((0, seed) if isinstance(seed, int) else (1, 0), str(rec["variant"]), r["_samples"]))
        if r.get("_not_evaluated"):
            not_evaluated.setdefault(str(rec["variant"]), r["_not_evaluated"])
        rec.update({k: r["_settings"].get(k) for k in settings_keys})
        rec.update({k: r["_metrics"].get(k, math.nan) for k in metric_keys})
        records.append(rec)
    check_distinct(rows, records)
    frame = pd.DataFrame.from_records(records, columns=FIXED + settings_keys + metric_keys)
    for col in ("params", "flops_per_token", "train_tokens", "train_flops", "train_tokens_per_s", "mfu",
                "peak_memory_mb", "wall_time_s", "step", "diverged_at", *metric_keys):
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float)
    frame["seed"] = pd.to_numeric(frame["seed"], errors="coerce").astype("Int64")
    for key in settings_keys:  # keep 4 an int and 'auto' a string: no float upcast around a missing value
        frame[key] = pd.Series([r.get(key) for r in records], dtype=object)
    samples: Dict[str, list] = {}
    for _, variant, decodings in sorted(decoded, key=lambda d: d[0]):
        samples.setdefault(variant, decodings)  # each variant's lowest completed seed
    spec = specs[0] if single_sweep else {}
    metric = spec.get("metric") or {}
    if isinstance(metric, str):
        metric = {"name": metric}
    name = metric.get("name") or DEFAULT_METRIC["name"]
    goals = {k: v for r in rows for k, v in (r.get("_goals") or {}).items()}
    frame.attrs.update({
        "name": spec.get("name") or ("+".join(s["name"] for s in specs) if specs else
                                     (Path(paths[0]).resolve().name if len(paths) == 1 else "compare")),
        "settings": settings_keys, "metrics": metric_keys + _curve_only(frame),
        "metric": name, "goal": metric.get("goal") or goal_of(name, goals), "goals": goals,
        "baseline": {str(k): v for k, v in (spec.get("baseline") or {}).items()},
        "description": spec.get("description") or "",
        "samples": samples,
        "not_evaluated": not_evaluated,
        "commits": sorted({r["_commit"] for r in rows if r.get("_commit")}),
        "invocations": spec.get("invocations") or [],
    })
    return frame


def tuning_record(rows: List[Dict[str, Any]], spec: Dict[str, Any]) -> Dict[str, Any]:
    """A tuned sweep's stage 1, JSON-safe (it rides in ``frame.attrs``): the spec's tune key and one
    entry per run (its variant without the tuned key, value, seed, status and selection metric)."""
    tune = spec.get("tune") or {}
    select = tune.get("select", "val/loss")
    select = select.get("name", "val/loss") if isinstance(select, dict) else select
    first = rows[0]["_tune"]
    return {"key": first.get("key"), "select": select,
            "goal": (tune.get("select") or {}).get("goal") if isinstance(tune.get("select"), dict) else None,
            "runs": [{"variant": r["_tune"].get("variant"), "value": r["_tune"].get("value"), "seed": r.get("seed"),
                      "status": r.get("status"), "reason": r.get("reason"), "metric": r["_metrics"].get(select),
                      "run_dir": r.get("run_dir")} for r in rows]}


def _group_labels(rows: List[Dict[str, Any]], settings_keys: List[str]) -> None:
    """Runs with equal settings are one variant (seeds of it). Its label names the settings when
    they are few, else the sweep variant or run dir it came from."""
    labels: Dict[str, str] = {}
    for r in rows:
        key = json.dumps(r["_settings"], sort_keys=True, default=str)
        if key not in labels:
            if settings_keys and len(settings_keys) <= MAX_LABEL_SETTINGS:
                label = _label(r["_settings"])
            elif r["variant"] is not None:
                label = f"{r['sweep']}:{r['variant']}"
            else:
                label = r["_config"].get("name") if not settings_keys else Path(r["run_dir"]).name
                label = label or r["run_id"]
            while label in labels.values():
                label += "'"
            labels[key] = label
        r["variant"] = labels[key]


def _curve_only(frame: pd.DataFrame) -> List[str]:
    """Metrics that only running runs have logged so far (in metrics.csv, not yet in a summary)."""
    seen = set(frame.columns)
    extra: List[str] = []
    for run_dir in frame["run_dir"]:
        try:
            with (Path(run_dir) / "metrics.csv").open(newline="") as f:
                header = next(csv.reader(f), [])
        except OSError:
            continue
        extra += [h for h in header if "/" in h and h not in seen and h not in extra and not h.startswith("train/")]
    return extra
