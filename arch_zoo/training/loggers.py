"""Lightning loggers: always CSV in the run dir (the source of truth); wandb, TensorBoard and MLflow
when enabled, each a view of the same run grouped the same way (arch_zoo.dashboards)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from lightning_fabric.loggers.logger import rank_zero_experiment
from pytorch_lightning.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter

from .. import rundir
from ..config import ExperimentConfig
from ..coerce import to_dict
from ..provenance import git_commit
from ..tracking import mlflow_runs, tensorboard_logs
from ..tracking.deps import require
from ..tracking.identity import RunIdentity, final_metrics, from_run_dir
from ..tracking.wandb_runs import flatten, quiet_settings, wandb_id, wandb_mode


class _ContinuedWriter(ExperimentWriter):
    """Lightning's writer deletes an existing metrics.csv. This one keeps its first ``keep_rows``
    rows (those the checkpoint being resumed covers; later ones were logged after it and are
    logged again) and appends; ``keep_rows=None`` starts the file over. ``rows`` counts the rows
    on disk, which checkpoints record."""

    def __init__(self, log_dir: str, keep_rows: Optional[int], kept_early: bool = False):
        self.keep_rows, self.kept_early = keep_rows, kept_early
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
        if self.kept_early:  # an earlier version's rows: its validations move to the step the new ones use
            rows = rundir.validation_rows_to_global_step(header, rows)
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

    def __init__(self, run_dir: Path, keep_rows: Optional[int] = None, kept_early: bool = False):
        super().__init__(save_dir=str(run_dir), name="", version="")
        self._keep_rows, self._kept_early = keep_rows, kept_early

    @property
    @rank_zero_experiment
    def experiment(self) -> _ContinuedWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ContinuedWriter(self.log_dir, self._keep_rows, self._kept_early)
        return self._experiment


def build_loggers(cfg: ExperimentConfig, run_dir: Path, run_name: str, keep_rows: Optional[int] = None,
                  kept_early: bool = False) -> List[Logger]:
    """``keep_rows``: rows of an existing metrics.csv that the run resumes after (None: start it over);
    ``kept_early``: they log validation a step early (an earlier version's run dir)."""
    loggers: List[Logger] = [RunCSVLogger(run_dir, keep_rows, kept_early)]
    log = cfg.logging
    identity = from_run_dir(run_dir, cfg.name, cfg.seed) if log.tensorboard.enabled or log.mlflow.enabled else None
    if log.wandb.enabled:
        loggers.append(_wandb(cfg, run_dir, run_name))
    if log.tensorboard.enabled:
        require("tensorboard", "logging.tensorboard")
        loggers.append(RunTensorBoardLogger(identity, log.tensorboard.save_dir))
    if log.mlflow.enabled and int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", 0))) == 0:
        # one MLflow run per run: DDP's other ranks would each open one (their metrics go through rank 0)
        loggers.append(_mlflow(cfg, identity, resuming=keep_rows is not None))
    return loggers


def _wandb(cfg: ExperimentConfig, run_dir: Path, run_name: str) -> Logger:
    from pytorch_lightning.loggers import WandbLogger

    w = cfg.logging.wandb
    mode = wandb_mode(w.mode)
    logger = WandbLogger(project=w.project, entity=w.entity, group=w.group, job_type=w.job_type,
                         tags=list(w.tags), name=run_name, save_dir=str(run_dir), mode=mode,
                         config=flatten(to_dict(cfg)), id=wandb_id(run_dir), resume="allow",
                         settings=quiet_settings(mode))
    # Lightning always passes anonymous=None, which recent wandb answers with a deprecation
    # warning on every run; left out, wandb uses its own default (the same behaviour)
    init = getattr(logger, "_wandb_init", None)
    if isinstance(init, dict) and init.get("anonymous") is None:
        init.pop("anonymous", None)
    return logger


def _mlflow(cfg: ExperimentConfig, identity: RunIdentity, resuming: bool) -> Logger:
    require("mlflow", "logging.mlflow")
    m = cfg.logging.mlflow
    uri = m.tracking_uri or mlflow_runs.default_uri(identity)
    mlflow_runs.check_reachable(uri, "logging.mlflow.tracking_uri")
    _, run_id = mlflow_runs.open_run(identity, uri, m.experiment, flatten(to_dict(cfg)), git_commit(),
                                     resume=resuming)
    return RunMLFlowLogger(identity, tracking_uri=uri, run_id=run_id, experiment_name=m.experiment or identity.experiment)


class RunMLFlowLogger(MLFlowLogger):
    """Lightning's logger on the run ``mlflow_runs.open_run`` made (found again on resume): metric
    names MLflow accepts, and no params from Lightning (the flattened config is there already, and
    MLflow refuses a param whose value changes)."""

    def __init__(self, identity: RunIdentity, **kwargs: Any):
        super().__init__(**kwargs)
        self.identity = identity

    def log_hyperparams(self, params: Any) -> None:
        pass

    def log_metrics(self, metrics, step: Optional[int] = None) -> None:
        super().log_metrics({mlflow_runs.metric_name(k): v for k, v in metrics.items()}, step)

    def log_final(self, summary: Dict[str, Any]) -> None:
        mlflow_runs.finish_run(self.experiment, self.run_id, self.identity, summary)


class RunTensorBoardLogger(TensorBoardLogger):
    """Lightning's logger in the run's log dir (``<sweep dir>/tensorboard/<run id>``); hparams are
    written once, at the end, with the final metrics (Lightning's own call at fit start has no
    metrics, and the HParams view shows only what a session's start record names)."""

    def __init__(self, identity: RunIdentity, save_dir: Optional[str] = None):
        super().__init__(save_dir=str(tensorboard_logs.log_root(identity, save_dir)), name="",
                         version=identity.run_id, default_hp_metric=False)
        self.identity = identity

    def log_hyperparams(self, params: Any, metrics: Any = None) -> None:
        pass

    def log_final(self, summary: Dict[str, Any]) -> None:
        tensorboard_logs.write_hparams(self.experiment, self.identity, final_metrics(summary),
                                       int(summary.get("step") or 0))


def finish_loggers(loggers: List[Logger], summary: Optional[Dict[str, Any]], status: str) -> None:
    """Final metrics (HParams, MLflow artifacts) into the dashboards, then each logger's finalize;
    ``summary`` None (a run paused at a rung): finalize only."""
    for logger in loggers:
        if summary is not None and hasattr(logger, "log_final"):
            logger.log_final(summary)
        logger.finalize(status)


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
