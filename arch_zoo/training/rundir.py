"""The run directory: what a run leaves behind, written atomically so a crash never leaves half a file.

    config.yaml      the fully resolved config (rebuilds the exact model)
    status.json      running | completed | diverged | failed | interrupted, with the reason and step
    metrics.csv      Lightning's CSVLogger: train loss, lr and validation metrics over steps
    summary.json     final and best metrics, size, speed, memory, versions, git commit
    tokenizer.json   the tokenizer, to decode the model's outputs
    checkpoints/last.ckpt
"""
from __future__ import annotations

import csv
import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any, Dict, Optional


CONFIG, STATUS, SUMMARY, METRICS, CHECKPOINT = ("config.yaml", "status.json", "summary.json", "metrics.csv",
                                                 "checkpoints/last.ckpt")
FINISHED = ("completed", "diverged")  # never trained again


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def write_json(path: Path, data: Dict[str, Any]) -> None:
    tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(path)


def read_json(path: Path) -> Optional[Dict[str, Any]]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def set_status(run_dir: Path, status: str, **extra) -> None:
    record = read_json(run_dir / STATUS) or {}
    record.update({"status": status, "updated": now(), **extra})
    write_json(run_dir / STATUS, record)


def trim_metrics(run_dir: Path, last_step: int) -> None:
    """Before resuming from a checkpoint at ``last_step``, drop rows logged after it, so the
    resumed run does not leave duplicate steps behind."""
    path = run_dir / METRICS
    if not path.exists():
        return
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames or [], [r for r in reader if int(float(r.get("step") or 0)) <= last_step]
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


def versions() -> Dict[str, str]:
    import platform

    import pytorch_lightning
    import torch

    from .. import __version__

    return {"arch_zoo": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "pytorch_lightning": pytorch_lightning.__version__}
