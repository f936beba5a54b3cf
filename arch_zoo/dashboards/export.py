"""``arch-zoo export``: finished runs, read from metrics.csv and summary.json, written into
TensorBoard, MLflow or wandb, so a sweep trained with no logger can still be compared there.

Keyed on run id: a run whose view is current is skipped, one whose summary changed is replaced.
Runs that have not finished are listed as missing, with their status."""
from __future__ import annotations

import csv
import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import yaml

from ..errors import ConfigError, choice_error
from ..reports.curves import read_metrics
from ..reports.load import load_groups
from ..rundir import CONFIG, PRUNED
from ..tracking import mlflow_runs, tensorboard_logs, wandb_runs
from ..tracking.deps import require
from ..tracking.identity import RunIdentity, exportable, from_run_dir
from ..writable import check_dir

TOOLS = ("tensorboard", "mlflow", "wandb")
FLAGS = ("--to", "--tracking-uri")  # `arch-zoo export`'s options for the tool and the tracking URI
FINISHED = ("completed", "diverged", PRUNED)  # a diverged run's curves are worth seeing, a pruned one's too


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
            out.append(f"not exported (not finished): {shown}{more}; export again when they finish")
        return out


def finished_runs(paths: Sequence[Union[str, Path]]) -> Tuple[List[RunIdentity], List[Tuple[str, str]]]:
    """Identities of the finished runs, and (run id, status) of the others. A tuned sweep's stage-1
    runs (the search, which reports keep apart) are exported too, tagged by stage, pruned ones with
    their curves to the rung where they stopped. A loose run dir (no sweep) is labelled by the
    settings that differ between the runs given, as reports do."""
    done, missing = [], []
    for frame in load_groups(list(paths)):
        keys = frame.attrs.get("settings", [])
        tuning = (frame.attrs.get("tuning") or {}).get("runs") or []
        stage_one = [{"run_id": Path(r["run_dir"]).name, "status": r["status"], "run_dir": r["run_dir"],
                      "variant": r["variant"]} for r in tuning if r.get("run_dir")]
        for row in stage_one + frame.to_dict("records"):
            status, run_dir = str(row["status"]), Path(row["run_dir"])
            if status not in FINISHED or not exportable(run_dir):
                missing.append((str(row["run_id"]), status))
                continue
            identity = from_run_dir(run_dir)
            if identity.sweep is None:
                identity = replace(identity, variant=str(row["variant"]), settings={k: row.get(k) for k in keys})
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
           project: str = "arch_zoo", save_dir: Optional[str] = None, flags: Tuple[str, str] = FLAGS) -> Exported:
    return export_all(paths, [to], tracking_uri, project, save_dir, flags)[0]


def export_all(paths: Sequence[Union[str, Path]], tools: Sequence[str], tracking_uri: Optional[str] = None,
               project: str = "arch_zoo", save_dir: Optional[str] = None,
               flags: Tuple[str, str] = FLAGS) -> List[Exported]:
    """Each of ``tools`` in turn. Every tool, library and destination is checked before anything is
    written, so a mistake in the last costs nothing in the first. ``flags``: the options an error names
    for the tool and for the tracking URI (`dashboard` has --tool, and chooses the URI itself)."""
    tools = list(dict.fromkeys(tools))
    flag, uri_flag = flags
    for to in tools:
        if to not in TOOLS:
            raise choice_error(flag, "dashboard", to, TOOLS)
        require(to, flag)
    runs, missing = finished_runs(paths)
    for to in tools:
        _check_destinations(to, runs, tracking_uri, save_dir, flag, uri_flag if tracking_uri else flag)
    return [_export(to, runs, missing, tracking_uri, project, save_dir, flag) for to in tools]


def _check_destinations(to: str, runs: List[RunIdentity], tracking_uri: Optional[str], save_dir: Optional[str],
                        flag: str, uri_flag: str) -> None:
    if to == "mlflow":
        for uri in dict.fromkeys(tracking_uri or mlflow_runs.default_uri(i) for i in runs):
            mlflow_runs.check_reachable(uri, uri_flag)
    elif to == "tensorboard":
        for root in dict.fromkeys(tensorboard_logs.log_root(i, save_dir) for i in runs):
            check_dir(root, flag, "tensorboard writes its logs")
    else:
        for identity in runs:
            check_dir(identity.run_dir / "wandb", flag, "wandb writes its files")


def _export(to: str, runs: List[RunIdentity], missing: List[Tuple[str, str]], tracking_uri: Optional[str],
            project: str, save_dir: Optional[str], flag: str) -> Exported:
    result = Exported(to, missing=missing)
    for identity in runs:
        try:
            if _export_run(to, identity, result, tracking_uri, project, save_dir):
                result.written.append(identity.run_id)
            else:
                result.current.append(identity.run_id)
        except OSError as exc:  # checked writable a moment ago: a full disk, or files changed meanwhile
            raise ConfigError(flag, f"{to}: cannot write {exc.filename or identity.run_id}: "
                                      f"{exc.strerror or exc}") from None
    return result


def _export_run(to: str, identity: RunIdentity, result: Exported, tracking_uri: Optional[str], project: str,
                save_dir: Optional[str]) -> bool:
    """Writes one run's view unless it is current; returns whether it wrote."""
    if to == "tensorboard":
        log_dir = tensorboard_logs.log_root(identity, save_dir) / identity.run_id
        result.where.append(str(log_dir.parent))
        if tensorboard_logs.is_current(log_dir, identity.run_dir):
            return False
        tensorboard_logs.export_run(identity, read_metrics(identity.run_dir), save_dir)
    elif to == "mlflow":
        uri = tracking_uri or mlflow_runs.default_uri(identity)
        result.where.append(uri)
        if mlflow_runs.is_current(mlflow_runs.client(uri), identity.experiment, identity):
            return False
        mlflow_runs.export_run(identity, read_metrics(identity.run_dir), uri, None, _config(identity),
                               _report(identity))
    else:
        if wandb_runs.is_current(identity):
            result.where.append(str(identity.run_dir / "wandb"))
            return False
        result.where.append(str(wandb_runs.export_run(identity, read_metrics(identity.run_dir), project,
                                                      _config(identity))))
    return True
