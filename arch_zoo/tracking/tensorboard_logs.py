"""TensorBoard: one log dir per run, ``<sweep dir>/tensorboard/<run id>``, and an HParams record
per run (the sweep's varied keys, variant and seed; its final metrics), so the HParams table and
parallel-coordinates view compare a sweep's variants. Written live by Lightning's
TensorBoardLogger (training/loggers.py), or after the fact from metrics.csv (``export_run``)."""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Dict, Iterable, Optional

from ..rundir import INDEX
from .fingerprint import fingerprint
from .identity import RunIdentity, final_metrics, read_summary

MARKER = "arch_zoo.json"  # beside the event files: which summary.json the view was written from


def log_root(identity: RunIdentity, save_dir: Optional[str] = None) -> Path:
    return Path(save_dir) if save_dir else identity.root / "tensorboard"


def write_hparams(writer, identity: RunIdentity, final: Dict[str, float], step: int,
                  logged: Iterable[str] = ()) -> None:
    """The HParams plugin reads a session's metric values from the run's scalars, so a final metric
    that no curve holds (``logged``: those that do) is written as a scalar at the last step."""
    from torch.utils.tensorboard.summary import hparams

    logged = set(logged)
    for name, value in final.items():
        if name not in logged:
            writer.add_scalar(name, value, step)
    values = identity.hparams()
    experiment, start, end = hparams(values, final, hparam_domain_discrete=text_domains(identity, values))
    file_writer = writer._get_file_writer()  # SummaryWriter.add_hparams would open a sub-run per call
    for summary in (experiment, start, end):
        file_writer.add_summary(summary)
    writer.flush()


def text_domains(identity: RunIdentity, values: Dict[str, object]) -> Dict[str, list]:
    """Every value a text hparam takes in the sweep (its index.csv plans them all): TensorBoard
    filters and colours text columns only when it knows their domain."""
    try:
        with (identity.root / INDEX).open(newline="") as f:
            planned = list(csv.DictReader(f))
    except OSError:
        return {}
    out = {}
    for key, value in values.items():
        if isinstance(value, str):
            domain = sorted({row.get(key) for row in planned if row.get(key)})
            if value in domain:  # else the index writes it another way: no domain beats a wrong one
                out[key] = domain
    return out


def mark(run_log_dir: Path, run_dir: Path) -> None:
    (run_log_dir / MARKER).write_text(json.dumps({"fingerprint": fingerprint(run_dir)}))


def is_current(run_log_dir: Path, run_dir: Path) -> bool:
    """An export of this very summary, or the events a live logger wrote through the run's end."""
    if not (run_log_dir / MARKER).is_file():
        return any(run_log_dir.glob("events.out.tfevents.*"))
    try:
        return json.loads((run_log_dir / MARKER).read_text()).get("fingerprint") == fingerprint(run_dir)
    except (OSError, ValueError, AttributeError):
        return False


def export_run(identity: RunIdentity, metrics, save_dir: Optional[str] = None) -> Path:
    """Rewrite the run's log dir from its metrics.csv rows (``metrics``: reports.curves' long form)."""
    from torch.utils.tensorboard import SummaryWriter

    out = log_root(identity, save_dir) / identity.run_id
    shutil.rmtree(out, ignore_errors=True)  # the CSV is the truth: its view is replaced, never appended to
    summary = read_summary(identity.run_dir)
    writer = SummaryWriter(str(out))
    try:
        for row in metrics.itertuples(index=False):
            writer.add_scalar(row.metric, float(row.value), int(row.step))
        write_hparams(writer, identity, final_metrics(summary), int(summary.get("step") or 0),
                      set(metrics["metric"]))
    finally:
        writer.close()
    mark(out, identity.run_dir)
    return out
