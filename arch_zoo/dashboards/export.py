"""``arch-zoo export``: finished runs, read from metrics.csv and summary.json, written into
TensorBoard, MLflow or wandb, so a sweep trained with no logger can still be compared there.

Keyed on run id: a run whose view is current is skipped, one whose summary changed is replaced.
Runs that have not finished are listed as missing, with their status."""
from __future__ import annotations

import csv
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import yaml

from ..errors import choice_error
from ..reports.curves import read_metrics
from ..reports.load import load_groups
from ..rundir import CONFIG, SUMMARY
from ..tracking import mlflow_runs, tensorboard_logs, wandb_runs
from ..tracking.deps import require
from ..tracking.identity import RunIdentity, from_run_dir

TOOLS = ("tensorboard", "mlflow", "wandb")
FINISHED = ("completed", "diverged")  # what has a summary.json: a diverged run's curves are worth seeing


@dataclass
class Exported:
    tool: str
    where: List[str] = field(default_factory=list)  # log dirs, tracking URIs, wandb dirs
    written: List[str] = field(default_factory=list)  # run ids
    current: List[str] = field(default_factory=list)  # run ids already there and up to date
    missing: List[Tuple[str, str]] = field(default_factory=list)  # (run id, status)

    def lines(self) -> List[str]:
        where = list(dict.fromkeys(self.where))
        shown = ", ".join(where[:3]) + (f" and {len(where) - 3} more" if len(where) > 3 else "")
        out = [f"{self.tool}: exported {len(self.written)} run(s), {len(self.current)} already up to date "
               f"-> {shown or '(nothing)'}"]
        if self.missing:
            shown = ", ".join(f"{r} ({s})" for r, s in self.missing[:12])
            more = f" and {len(self.missing) - 12} more" if len(self.missing) > 12 else ""
            out.append(f"not exported (no summary.json yet): {shown}{more}; export again when they finish")
        return out


def finished_runs(paths: Sequence[Union[str, Path]]) -> Tuple[List[RunIdentity], List[Tuple[str, str]]]:
    """Identities of the runs with a summary, and (run id, status) of the others. A loose run dir
    (no sweep) is labelled by the settings that differ between the runs given, as reports do."""
    done, missing = [], []
    for frame in load_groups(list(paths)):
        keys = frame.attrs.get("settings", [])
        for row in frame.to_dict("records"):
            status, run_dir = str(row["status"]), Path(row["run_dir"])
            if status not in FINISHED or not (run_dir / SUMMARY).is_file():
                missing.append((str(row["run_id"]), status))
                continue
            identity = from_run_dir(run_dir)
            if identity.sweep is None:
                identity = RunIdentity(identity.run_id, identity.run_dir, identity.experiment, None,
                                       str(row["variant"]), identity.seed, {k: row[k] for k in keys})
            done.append(identity)
    return done, missing


def _config(identity: RunIdentity) -> Dict:
    try:
        cfg = yaml.safe_load((identity.run_dir / CONFIG).read_text()) or {}
    except (OSError, yaml.YAMLError):
        cfg = {}
    return wandb_runs.flatten(cfg) if isinstance(cfg, dict) else {}


def _report(identity: RunIdentity) -> Optional[Path]:
    """The sweep's report where `arch-zoo report` puts it by default, if it has been written from
    this very run: its runs.csv lists the run's directory (a report of another store of the same
    sweep name, e.g. a shorter rerun under another --out, is not this run's)."""
    for path in (Path("reports") / identity.experiment / "report.html", identity.root / "report" / "report.html"):
        runs_csv = path.with_name("runs.csv")
        if path.is_file() and runs_csv.is_file() and \
                str(identity.run_dir.resolve()) in _reported_dirs(str(runs_csv), runs_csv.stat().st_mtime_ns):
            return path
    return None


@functools.lru_cache(maxsize=None)
def _reported_dirs(runs_csv: str, mtime_ns: int) -> frozenset:
    """The run dirs a report's runs.csv lists, resolved (relative ones from here, where `arch-zoo
    report` ran by default); empty when it has none. (``mtime_ns``: a rewritten report is read anew.)"""
    try:
        with open(runs_csv, newline="") as f:
            return frozenset(str(Path(row["run_dir"]).resolve()) for row in csv.DictReader(f) if row.get("run_dir"))
    except (OSError, KeyError, csv.Error):
        return frozenset()


def export(paths: Sequence[Union[str, Path]], to: str, tracking_uri: Optional[str] = None,
           project: str = "arch_zoo", save_dir: Optional[str] = None) -> Exported:
    if to not in TOOLS:
        raise choice_error("--to", "dashboard", to, TOOLS)
    require(to, "--to")
    runs, missing = finished_runs(paths)
    result = Exported(to, missing=missing)
    checked = set()
    for identity in runs:
        if to == "tensorboard":
            log_dir = tensorboard_logs.log_root(identity, save_dir) / identity.run_id
            result.where.append(str(log_dir.parent))
            if tensorboard_logs.is_current(log_dir, identity.run_dir):
                result.current.append(identity.run_id)
                continue
            tensorboard_logs.export_run(identity, read_metrics(identity.run_dir), save_dir)
        elif to == "mlflow":
            uri = tracking_uri or mlflow_runs.default_uri(identity)
            if uri not in checked:
                mlflow_runs.check_reachable(uri, "--tracking-uri")
                checked.add(uri)
            result.where.append(uri)
            if mlflow_runs.is_current(mlflow_runs.client(uri), identity.experiment, identity):
                result.current.append(identity.run_id)
                continue
            mlflow_runs.export_run(identity, read_metrics(identity.run_dir), uri, None, _config(identity),
                                   _report(identity))
        else:
            if wandb_runs.is_current(identity):
                result.current.append(identity.run_id)
                result.where.append(str(identity.run_dir / "wandb"))
                continue
            result.where.append(str(wandb_runs.export_run(identity, read_metrics(identity.run_dir), project,
                                                          _config(identity))))
        result.written.append(identity.run_id)
    return result
