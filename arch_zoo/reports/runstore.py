"""A run store's files -> one plain dict per run (no pandas: ``load.py`` makes the frame).

Reads a sweep dir (sweep.yaml, index.csv, invocations.jsonl, runs/*) or a run dir (run.json,
status.json, summary.json, config.yaml). The store is written by other processes while we read it,
so every file may be missing or half-written; a run whose files cannot be read keeps the status it
has, never dropped. Keys a row holds for ``load.py`` alone start with ``_``.
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional

import yaml

from ..locks import is_held
from ..metrics import DIRECTIONS, layer_means
from ..rundir import CONFIG, INDEX, INVOCATIONS, RUN_JSON, SPEC, STATUS, SUMMARY, branch_dirs, eval_metrics
from ..run_names import BUDGET_KEY, budget_variant


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


def fill_defaults(rows: List[Dict[str, Any]]) -> None:
    """Gives a run's flat config the keys other runs' configs have and it lacks, at the value
    today's schema reads them with: a run trained before a config field existed (its config.yaml
    has no such key) gets the field's default, which keeps the behaviour the run had, so it
    compares with a run trained after. Runs are loaded (~0.1 s each) only where their key sets
    differ, and then all of them, so that every config that loads has every key; a config that
    does not load today (a plugin that is gone, an option renamed) is left as written."""
    configs = [set(r["_config"]) for r in rows if r["_config"]]
    if not configs or all(c == configs[0] for c in configs):
        return
    from ..config.loading import to_yaml
    from ..experiment import load
    from ..errors import ConfigError

    for r in rows:
        if not r["_config"]:
            continue
        try:
            full = flatten(yaml.safe_load(to_yaml(load(Path(r["run_dir"]) / CONFIG))) or {})
        except (ConfigError, ValueError, TypeError, KeyError):
            continue
        r["_config"] = {**full, **r["_config"]}


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and any((path / f).is_file() for f in (STATUS, SUMMARY, RUN_JSON))


def is_sweep_dir(path: Path) -> bool:
    return path.is_dir() and ((path / SPEC).is_file() or (path / INDEX).is_file()
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


def scalar(v: Any) -> Any:
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, sort_keys=True)
    return v


def _lock_free(path: Path) -> bool:
    """True when a sweep's run lock exists and no process holds it: the run's trainer died."""
    return path.exists() and not is_held(path)


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


def spent_text(budget: Dict[str, Any], step: Any) -> Dict[str, Any]:
    """The bytes of text a run's training tokens covered up to the step it reached, and what one
    step spends of tokens, bytes and FLOPs (a budget is matched to within one step); run.json's plan."""
    steps = budget.get("steps")
    if not steps or not isinstance(step, (int, float)):
        return {}
    out = {f"_{k}_per_step": budget[k] / steps for k in ("tokens", "bytes", "flops") if budget.get(k)}
    if budget.get("bytes"):
        out["_train_bytes"] = budget["bytes"] * step / steps
    return out


def read_run(run_dir: Path, sweep_name: str) -> Dict[str, Any]:
    meta = _json(run_dir / RUN_JSON) or {}
    status = _json(run_dir / STATUS) or {}
    summary = _json(run_dir / SUMMARY) or {}
    cfg = read_yaml(run_dir / CONFIG) or {}
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
        "state_bytes_per_token": summary.get("state_bytes_per_token"),
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
    row.update(spent_text(meta.get("budget") or {}, summary.get("step", status.get("step"))))
    row["_tune"] = meta.get("tune") or {}
    row["_scale"] = meta.get("scale")  # a ladder's rung (sweeps/scale_plan.py), for the scaling fits
    row["_suite"] = meta.get("suite")  # a probe suite's entry (sweeps/suite.py), for the suite table
    row["_rungs"] = status.get("rungs") or {}  # successive halving: validation metrics at each rung it stopped at
    row["_pruned_at"] = status.get("pruned_at") if state in ("pruned", "completed") else None  # completed: cut later
    row["_settings"] = {k: scalar(v) for k, v in (meta.get("settings") or {}).items()}
    row["_goals"] = {k: v for k, v in (summary.get("goals") or {}).items() if v in DIRECTIONS}
    row["_units"] = dict(summary.get("units") or {})
    row["_bytes_per_token"] = (summary.get("task") or {}).get("bytes_per_token") or {}  # split -> measured
    per_byte, speed = row["_bytes_per_token"].get("train"), row.get("train_tokens_per_s")
    # text read per second: what compares throughput across tokenizers (a BPE token covers more text)
    row["train_bytes_per_s"] = speed * per_byte if speed is not None and per_byte else None
    row["_samples"] = summary.get("samples") or []
    row["_commit"] = summary.get("git_commit")
    row["_not_evaluated"] = _not_evaluated(summary)
    row["_config"] = flatten(cfg)
    row["_metrics"] = {k: float(v) for k, v in (summary.get("final") or {}).items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool)}
    for k, v in layer_means(row["_metrics"]).items():  # logged since; computed here for older runs
        row["_metrics"].setdefault(k, v)
    evaluated, goals = eval_metrics(run_dir)  # arch-zoo eval's eval/<task>.json, as eval/<task>/<metric>
    row["_metrics"].update(evaluated)
    row["_goals"].update(goals)
    return row


def read_runs(run_dir: Path, sweep_name: str) -> List[Dict[str, Any]]:
    """A run's row, then a row per WSD-S decay branch it forked (``branches/<steps>/``, each a run
    of its own length). With branches, the run's own row is its budget 1, told apart from its
    branches' by the setting wsds.budget (the fraction of its steps), as a sweep over it would."""
    row = read_run(run_dir, sweep_name)
    branches = [read_run(b, sweep_name) for b in branch_dirs(run_dir)]
    if branches:
        row["_settings"] = {**row["_settings"], BUDGET_KEY: 1.0}
        if row["variant"] is not None:
            row["variant"] = budget_variant(row["variant"], 1.0)
        if row.get("_scale"):
            row["_scale"] = {**row["_scale"], "steps": row["_config"].get("train.max_steps")}
    return [row] + branches


def _index_rows(sweep_dir: Path, sweep_name: str) -> Dict[str, Dict[str, Any]]:
    """Planned runs from index.csv, for those that have no run dir yet."""
    path = sweep_dir / INDEX
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
    return scalar(value)


def read_invocations(sweep_dir: Path) -> List[Dict[str, Any]]:
    """The sweep's invocations.jsonl records (a torn last line from a killed process is skipped)."""
    out = []
    try:
        lines = (sweep_dir / INVOCATIONS).read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def load_sweep(sweep_dir: Path) -> tuple:
    """(sweep.yaml, the sweep's name, a row per run of its current plan). With an index.csv (every
    sweep writes one), run dirs it does not list are left out, and named in the spec's ``_stale``:
    runs of an earlier spec (an axis value or tuning value since removed), which the store keeps."""
    spec = read_yaml(sweep_dir / SPEC) or {}
    spec["invocations"] = read_invocations(sweep_dir)
    name = str(spec.get("name") or sweep_dir.resolve().name)
    rows = _index_rows(sweep_dir, name)
    planned_ids, stale = set(rows), []
    runs = sweep_dir / "runs"
    for run_dir in sorted(runs.iterdir()) if runs.is_dir() else []:
        if not run_dir.is_dir():
            continue
        if planned_ids and run_dir.name not in planned_ids:
            stale.append(run_dir.name)  # the spec changed since: not a run of this sweep any more
            continue
        for row in read_runs(run_dir, name):
            planned = rows.get(row["run_id"], {})
            for key in ("variant", "seed"):
                if row[key] is None:
                    row[key] = planned.get(key)
            row["_settings"] = row["_settings"] or planned.get("_settings", {})
            rows[row["run_id"]] = row
    spec["_stale"] = stale
    return spec, name, list(rows.values())
