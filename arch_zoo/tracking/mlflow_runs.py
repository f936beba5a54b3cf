"""MLflow: experiment = the sweep's name (or the run's), run name = run id, tags variant / seed /
sweep / commit, params = the flattened config, metrics as logged, artifacts config.yaml,
summary.json and the report when one exists. The default tracking URI is a SQLite store next to
the runs (``<sweep dir>/mlflow.db``, artifacts in ``mlartifacts/`` beside it).

A run is found again by its ``arch_zoo.run_id`` tag, so a resumed run continues its MLflow run and
an export replaces (never duplicates) a run whose summary changed."""
from __future__ import annotations

import contextlib
import logging
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

from ..errors import ConfigError
from ..rundir import CONFIG, SUMMARY
from .fingerprint import fingerprint
from .identity import RunIdentity, final_metrics, read_summary

RUN_ID_TAG, FINGERPRINT_TAG = "arch_zoo.run_id", "arch_zoo.fingerprint"


def metric_name(name: str) -> str:
    """MLflow refuses '@' (``val@256/loss``): every other character it refuses becomes '_'."""
    return re.sub(r"[^\w/.\- ]", "_", name)


def default_uri(identity: RunIdentity) -> str:
    return f"sqlite:///{(identity.root / 'mlflow.db').resolve()}"


SCHEMES = ("http", "https", "sqlite", "postgresql", "mysql", "mssql", "databricks")  # MLflow's tracking stores


def check_reachable(uri: str, key: str) -> None:
    """MLflow's client retries an unreachable server for minutes; ask once, briefly, first. A URI
    of no scheme MLflow tracks to (a typo, a bare host:port, a directory) is refused by name."""
    scheme = uri.split("://", 1)[0].split("+", 1)[0] if "://" in uri else uri  # "databricks" alone, too
    if scheme not in SCHEMES:
        raise ConfigError(key, f"{uri!r} is not an MLflow tracking URI; expected a server URL (http://HOST:PORT) or a "
                          f"database URI ({', '.join(s + '://' for s in SCHEMES[2:])}...), e.g. sqlite:///mlflow.db")
    if not uri.startswith(("http://", "https://")):
        if uri.startswith("sqlite:///"):
            parent = Path(uri[len("sqlite:///"):]).parent
            if not parent.is_dir():
                raise ConfigError(key, f"{uri}: directory {parent} does not exist")
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5) as reply:
            reply.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConfigError(key, f"cannot reach the MLflow tracking server at {uri} ({reason})") from None


@contextlib.contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    """Workers of one sweep share a SQLite file: its first creation (schema migrations) and each
    experiment's creation happen under a lock, one process at a time."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    import fcntl

    path = Path(uri[len("sqlite:///"):] + ".lock")
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def client(uri: str):
    from mlflow.tracking import MlflowClient

    for name in ("mlflow", "alembic"):  # "Creating initial MLflow database tables..." on every new store
        logging.getLogger(name).setLevel(logging.WARNING)
    return MlflowClient(tracking_uri=uri)


def _experiment_id(mlflow_client, name: str, uri: str, root: Path) -> str:
    found = mlflow_client.get_experiment_by_name(name)
    if found is not None and found.lifecycle_stage != "deleted":
        return found.experiment_id
    local = None if uri.startswith(("http://", "https://")) else (root / "mlartifacts").resolve().as_uri()
    return mlflow_client.create_experiment(name, artifact_location=local)


def find_run(mlflow_client, experiment_id: str, run_id: str):
    runs = mlflow_client.search_runs([experiment_id], filter_string=f"tags.`{RUN_ID_TAG}` = '{run_id}'",
                                     max_results=10)
    return runs[0] if runs else None


def open_run(identity: RunIdentity, uri: str, experiment: Optional[str], params: Dict[str, Any],
             commit: Optional[str], resume: bool):
    """(client, MLflow run id): the run's existing one when ``resume``, else a new one. A stale
    one (an export whose summary changed) is deleted first, so each run id is one MLflow run."""
    from mlflow.entities import Param
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME

    mlflow_client = client(uri)
    with _store_lock(uri):
        experiment_id = _experiment_id(mlflow_client, experiment or identity.experiment, uri, identity.root)
        old = find_run(mlflow_client, experiment_id, identity.run_id)
        if old is not None and resume:
            return mlflow_client, old.info.run_id
        if old is not None:
            mlflow_client.delete_run(old.info.run_id)
        tags = {**identity.tags(commit), MLFLOW_RUN_NAME: identity.run_id}
        run = mlflow_client.create_run(experiment_id, run_name=identity.run_id, tags=tags)
    values = [Param(k[:250], str(v)[:6000]) for k, v in params.items()]
    for i in range(0, len(values), 100):  # MLflow takes at most 100 params per batch
        mlflow_client.log_batch(run.info.run_id, params=values[i:i + 100])
    mlflow_client.set_tag(run.info.run_id, "mlflow.note.content", f"arch_zoo run {identity.run_dir}")
    return mlflow_client, run.info.run_id


def finish_run(mlflow_client, mlflow_run_id: str, identity: RunIdentity, summary: Dict[str, Any],
               report: Optional[Path] = None) -> None:
    """Final metrics, artifacts, and the fingerprint that makes a later export skip this run."""
    from mlflow.entities import Metric

    now, step = int(time.time() * 1000), int(summary.get("step") or 0)
    logged = set(mlflow_client.get_run(mlflow_run_id).data.metrics)  # a final value the curves hold is not repeated
    finals = [Metric(metric_name(k), v, now, step) for k, v in final_metrics(summary).items()
              if metric_name(k) not in logged]
    for i in range(0, len(finals), 1000):
        mlflow_client.log_batch(mlflow_run_id, metrics=finals[i:i + 1000])
    if (identity.run_dir / CONFIG).is_file():
        mlflow_client.log_artifact(mlflow_run_id, str(identity.run_dir / CONFIG))
    mlflow_client.log_dict(mlflow_run_id, summary, SUMMARY)
    if report is not None and report.is_file():
        mlflow_client.log_artifact(mlflow_run_id, str(report), "report")
    if (identity.run_dir / SUMMARY).is_file():
        mlflow_client.set_tag(mlflow_run_id, FINGERPRINT_TAG, fingerprint(identity.run_dir))


def is_current(mlflow_client, experiment: str, identity: RunIdentity) -> bool:
    """An export of this very summary, or a live run that ended (its logger saw the whole run)."""
    found = mlflow_client.get_experiment_by_name(experiment)
    if found is None:
        return False
    run = find_run(mlflow_client, found.experiment_id, identity.run_id)
    if run is None:
        return False
    marked = run.data.tags.get(FINGERPRINT_TAG)
    return marked == fingerprint(identity.run_dir) if marked else run.info.status in ("FINISHED", "FAILED")


def export_run(identity: RunIdentity, metrics, uri: str, experiment: Optional[str], params: Dict[str, Any],
               report: Optional[Path]) -> str:
    """One finished run from its files; returns the MLflow run id."""
    from mlflow.entities import Metric

    summary = read_summary(identity.run_dir)
    mlflow_client, mlflow_run_id = open_run(identity, uri, experiment, params, summary.get("git_commit"), resume=False)
    now = int(time.time() * 1000)
    rows = [Metric(metric_name(r.metric), float(r.value), now, int(r.step)) for r in metrics.itertuples(index=False)]
    for i in range(0, len(rows), 1000):
        mlflow_client.log_batch(mlflow_run_id, metrics=rows[i:i + 1000])
    finish_run(mlflow_client, mlflow_run_id, identity, summary, report)
    status = "FINISHED" if summary.get("status") == "completed" else "FAILED"
    mlflow_client.set_terminated(mlflow_run_id, status)
    return mlflow_run_id
