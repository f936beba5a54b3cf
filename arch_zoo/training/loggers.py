"""Lightning loggers: always CSV in the run dir; wandb when ``logging.wandb.enabled``."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from lightning_fabric.loggers.logger import rank_zero_experiment
from pytorch_lightning.loggers import CSVLogger, Logger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter

from ..config import ExperimentConfig, WandbConfig
from ..config_types import to_dict


def flatten(data: Any, prefix: str = "") -> Dict[str, Any]:
    """{"model": {"d_model": 64}} -> {"model.d_model": 64}: the form wandb filters and groups by."""
    if isinstance(data, dict):
        out: Dict[str, Any] = {}
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: data}


def wandb_mode(w: WandbConfig) -> str:
    """Explicit config wins; else $WANDB_MODE; else online only when an API key is configured."""
    if w.mode:
        return w.mode
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    has_key = bool(os.environ.get("WANDB_API_KEY")) or (Path.home() / ".netrc").exists() and \
        "api.wandb.ai" in (Path.home() / ".netrc").read_text(errors="ignore")
    return "online" if has_key else "offline"


class _ContinuedWriter(ExperimentWriter):
    """Lightning's writer deletes an existing metrics.csv. This one keeps its first ``keep_rows``
    rows (those the checkpoint being resumed covers; later ones were logged after it and are
    logged again) and appends; ``keep_rows=None`` starts the file over. ``rows`` counts the rows
    on disk, which checkpoints record."""

    def __init__(self, log_dir: str, keep_rows: Optional[int]):
        self.keep_rows = keep_rows
        super().__init__(log_dir=log_dir)

    def _check_log_dir_exists(self) -> None:
        import csv

        self.rows = 0
        path = Path(self.metrics_file_path)
        if self.keep_rows is None or not path.is_file():
            path.unlink(missing_ok=True)
            return
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            header, rows = list(reader.fieldnames or []), list(reader)[:self.keep_rows]
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", newline="") as f:
            out = csv.DictWriter(f, fieldnames=header)
            out.writeheader()
            out.writerows(rows)
        tmp.replace(path)
        self.metrics_keys, self.rows = header, len(rows)

    def save(self) -> None:
        added = len(self.metrics)
        super().save()
        self.rows += added


class RunCSVLogger(CSVLogger):
    """metrics.csv in the run dir, continued across resumptions (see ``_ContinuedWriter``)."""

    def __init__(self, run_dir: Path, keep_rows: Optional[int] = None):
        super().__init__(save_dir=str(run_dir), name="", version="")
        self._keep_rows = keep_rows

    @property
    @rank_zero_experiment
    def experiment(self) -> _ContinuedWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ContinuedWriter(self.log_dir, self._keep_rows)
        return self._experiment


def build_loggers(cfg: ExperimentConfig, run_dir: Path, run_name: str,
                  keep_rows: Optional[int] = None) -> List[Logger]:
    """``keep_rows``: rows of an existing metrics.csv that the run resumes after (None: start it over)."""
    loggers: List[Logger] = [RunCSVLogger(run_dir, keep_rows)]
    w = cfg.logging.wandb
    if w.enabled:
        from pytorch_lightning.loggers import WandbLogger

        mode = wandb_mode(w)
        logger = WandbLogger(project=w.project, entity=w.entity, group=w.group, job_type=w.job_type,
                             tags=list(w.tags), name=run_name, save_dir=str(run_dir), mode=mode,
                             config=flatten(to_dict(cfg)), id=_wandb_id(run_dir), resume="allow",
                             settings=_quiet_settings(mode))
        # Lightning always passes anonymous=None, which recent wandb answers with a deprecation
        # warning on every run; left out, wandb uses its own default (the same behaviour)
        init = getattr(logger, "_wandb_init", None)
        if isinstance(init, dict) and init.get("anonymous") is None:
            init.pop("anonymous", None)
        loggers.append(logger)
    return loggers


def _quiet_settings(mode: str):
    """wandb's banner and end-of-run history (~25 lines per run) drown the run's own summary. Offline,
    everything it says is in the run dir and the summary prints the one `wandb sync` line; online,
    ``quiet`` keeps the run's URL, the one line worth seeing."""
    import wandb

    return wandb.Settings(silent=True) if mode in ("offline", "disabled") else wandb.Settings(quiet=True)


def _wandb_id(run_dir: Path) -> str:
    """A stable id per run dir, so a resumed run continues the same wandb run."""
    import hashlib

    return hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:12]


def define_summaries(loggers: List[Logger], metric_names: List[str], goal: Callable[[str], Optional[str]]) -> None:
    """Tell wandb which way each metric improves, so its run summary keeps the best value (the last
    value for a metric nobody declared a goal for)."""
    for logger in loggers:
        experiment = getattr(logger, "experiment", None)
        if experiment is None or not hasattr(experiment, "define_metric"):
            continue
        for name in metric_names:
            experiment.define_metric(name, summary=goal(name) or "last")


def sync_hint(loggers: List[Logger]) -> Optional[str]:
    """The `wandb sync` command for an offline run, else None."""
    for logger in loggers:
        experiment = getattr(logger, "_experiment", None)
        if experiment is not None and getattr(experiment, "settings", None) is not None:
            if experiment.settings.mode == "offline" or getattr(experiment.settings, "_offline", False):
                return f"wandb sync {Path(experiment.dir).parent}"
    return None
