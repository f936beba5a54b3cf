"""lm_eval's results dict -> one record per task, written into the run directory as eval/<task>.json.

lm_eval keys a task's numbers ``metric,filter`` ("acc,none", "exact_match,strict-match") with
``metric_stderr,filter`` beside them. A record names a metric by itself when its filter is
``none`` and ``filter/metric`` otherwise, so the metric's own name stays last (``metrics.base_name``
finds its goal); reports read it as ``eval/<task>/<that name>``."""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Dict, List

from .. import rundir

STDERR = "_stderr"


def _name(metric: str, filter_name: str) -> str:
    return metric if filter_name == "none" else f"{filter_name}/{metric}"


def _number(value: Any):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(float(value)) else None


def task_records(results: Dict[str, Any], context: Dict[str, Any]) -> List[Dict[str, Any]]:
    """One JSON-ready record per task of ``results`` (``simple_evaluate``'s return value), each with
    ``context`` (checkpoint, step, limit ...) merged in."""
    records = []
    for task, numbers in (results.get("results") or {}).items():
        metrics: Dict[str, float] = {}
        stderr: Dict[str, float] = {}
        for key, value in numbers.items():
            if "," not in key or _number(value) is None:
                continue  # 'alias', and a stderr lm_eval could not compute ('N/A')
            metric, filter_name = key.split(",", 1)
            if metric.endswith(STDERR):
                stderr[_name(metric[: -len(STDERR)], filter_name)] = _number(value)
            else:
                metrics[_name(metric, filter_name)] = _number(value)
        better = (results.get("higher_is_better") or {}).get(task) or {}
        goals = {name: ("max" if better[name.rsplit("/", 1)[-1]] else "min") for name in metrics
                 if isinstance(better.get(name.rsplit("/", 1)[-1]), bool)}
        config = (results.get("configs") or {}).get(task) or {}
        records.append({
            "task": task,
            "metrics": metrics,
            "stderr": stderr,
            "goals": goals,
            "n_samples": (results.get("n-samples") or {}).get(task),
            "num_fewshot": (results.get("n-shot") or {}).get(task, config.get("num_fewshot")),
            "version": (results.get("versions") or {}).get(task),
            "output_type": config.get("output_type"),
            **context,
            "task_config": config,
        })
    return records


def file_name(task: str) -> str:
    return task.replace(os.sep, "_") + ".json"


def write_records(run_dir: Path, records: List[Dict[str, Any]]) -> List[Path]:
    """Each record to eval/<task>.json, atomically (a temporary file renamed over the old one), so a
    reader never sees half a file and an interrupted write leaves the previous results."""
    folder = Path(run_dir) / rundir.EVAL
    folder.mkdir(exist_ok=True)
    written = []
    for record in records:
        path = folder / file_name(record["task"])
        rundir.write_json(path, record)
        written.append(path)
    return written
