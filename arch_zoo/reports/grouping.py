"""Which runs are the same run, and which can be compared: identity (config and seed) and the
task/evaluation groups that ``load_groups`` splits runs into. Works on ``load``'s row dicts."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterable, List

from ..errors import ConfigError
from ..run_names import plain

# Config keys that never change a run's result; loose runs are told apart by the other keys.
BOOKKEEPING = ("name", "seed", "logging", "train.progress_bar", "train.num_workers", "train.log_every",
               "train.accelerator", "train.devices", "train.strategy",
               "train.exact_match_decoding",  # eager and compiled decoding give the same tokens
               # the budgets a WSD-S run branches change nothing it trains
               "train.schedule.decays", "train.schedule.decay_tokens")
# Besides task.*, the keys that decide what a metric measures: runs that differ in them are not comparable.
EVALUATION = ("train.val_batches", "train.exact_match_samples")


def ordered(keys: Iterable[str]) -> List[str]:
    return list(dict.fromkeys(keys))


def identity(row: Dict[str, Any]) -> str:
    """A run is its config (less the keys that never change a result) and its seed; a planned run
    without a config yet is its run dir."""
    cfg = {k: v for k, v in row["_config"].items() if not bookkeeping(k)}
    if not cfg:
        return "dir:" + str(Path(row["run_dir"]).resolve())
    return json.dumps([cfg, row.get("seed")], sort_keys=True, default=str)


def drop_duplicates(rows: List[Dict[str, Any]]) -> tuple:
    """Keeps one row per run identity (a completed one if any), and says which dirs were dropped."""
    kept: Dict[str, Dict[str, Any]] = {}
    dropped = []
    for r in rows:
        r["_identity"] = key = identity(r)
        other = kept.get(key)
        if other is None:
            kept[key] = r
            continue
        if other["status"] != "completed" and r["status"] == "completed":
            kept[key], r, other = r, other, r
        if Path(r["run_dir"]).resolve() != Path(other["run_dir"]).resolve():
            dropped.append(f"{r['run_dir']} (same config and seed as {other['run_dir']})")
        else:
            dropped.append(f"{r['run_dir']} (given twice)")
    notes = [f"dropped {len(dropped)} duplicate run{'s' if len(dropped) > 1 else ''}, counted once: "
             + "; ".join(dropped)] if dropped else []
    return list(kept.values()), notes


def check_distinct(rows: List[Dict[str, Any]], records: List[Dict[str, Any]]) -> None:
    """Two different runs labelled the same variant and seed are an error, not two samples."""
    seen: Dict[tuple, Dict[str, Any]] = {}
    for r, rec in zip(rows, records):
        if rec["seed"] is None:
            continue
        key = (str(rec["variant"]), str(rec["seed"]))
        other = seen.setdefault(key, r)
        if other is not r:
            diff = next((f"{k}: {plain(other['_config'].get(k))} vs {plain(r['_config'].get(k))}"
                         for k in ordered([*other["_config"], *r["_config"]])
                         if not bookkeeping(k) and other["_config"].get(k) != r["_config"].get(k)), "their configs")
            raise ConfigError("", f"{other['run_dir']} and {r['run_dir']} are different runs ({diff}) with the "
                                  f"same variant '{key[0]}' and seed {key[1]}; compare them in separate calls")


def bookkeeping(key: str) -> bool:
    return any(key == b or key.startswith(b + ".") for b in BOOKKEEPING)


def _evaluation(key: str) -> bool:
    return key == "task" or key.startswith("task.") or key in EVALUATION


def by_task(rows: List[Dict[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    """Rows grouped by task and evaluation, labelled by the task's name and, where groups share it,
    the keys that differ. Keys a sweep varies do not split it; a planned run (no config yet) joins
    its sweep's group. A key some configs do not have (a field their arch_zoo lacked, in a config
    that today's schema cannot fill in) does not split them."""
    varied = {k for r in rows for k in r["_settings"]}
    configs = [r["_config"] for r in rows if r["_config"]]
    shared = set.intersection(*(set(c) for c in configs)) if configs else set()
    keys: Dict[int, str] = {}
    for i, r in enumerate(rows):
        if r["_config"]:
            keys[i] = json.dumps({k: v for k, v in r["_config"].items()
                                  if _evaluation(k) and k not in varied and k in shared},
                                 sort_keys=True, default=str)
    by_sweep = {rows[i]["sweep"]: key for i, key in keys.items()}
    first = next(iter(keys.values()), "{}")
    groups: Dict[str, List[Dict[str, Any]]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(keys.get(i) or by_sweep.get(r["sweep"], first), []).append(r)
    tasks = {key: json.loads(key) for key in groups}
    telling = differing(list(tasks.values())) if len(tasks) > 1 else []
    labels = {}
    for key, task in tasks.items():
        name = str(task.get("task", "(no task)"))
        same_name = [t for t in tasks.values() if str(t.get("task", "(no task)")) == name]
        extra = [f"{k}={plain(task.get(k))}" for k in telling if k != "task" and len(same_name) > 1]
        labels[key] = name + (f" ({', '.join(extra)})" if extra else "")
    return {labels[key]: group for key, group in groups.items()}


def differing(configs: List[Dict[str, Any]]) -> List[str]:
    keys = ordered(k for c in configs for k in c)

    def varies(k: str, among: List[Dict[str, Any]]) -> bool:
        return len({json.dumps(c.get(k), sort_keys=True, default=str) for c in among}) > 1

    out = [k for k in keys if not bookkeeping(k) and varies(k, configs)]

    def implied(k: str) -> bool:
        """rope -> alibi also changes rope's options; the component's name says it all, unless the
        option differs between runs of the same component."""
        parents = [p for p in out if k.startswith(p + ".")]
        return bool(parents) and all(not varies(k, [c for c in configs if c.get(p) == value])
                                     for p in parents for value in {c.get(p) for c in configs})

    return [k for k in out if not implied(k)]
