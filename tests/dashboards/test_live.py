"""Live loggers: a tiny real sweep with logging.tensorboard, logging.mlflow and logging.wandb on
groups its runs the same way in all three, beside the CSV that stays the source of truth.

README (Dashboards): "runs of a sweep are grouped the same way in all three: the sweep (wandb group,
MLflow experiment, one TensorBoard log dir), the variant (wandb job_type, MLflow tag, an HParams
column)"; "`export` after a live-logged sweep adds nothing"."""
import pytest
import json
import os
import subprocess
import sys

import yaml

from arch_zoo.dashboards.export import export

from ..sweeps.conftest import BASE, write_spec
from .test_export import _tensorboard
from .wandb_records import read_run


@pytest.mark.slow  # a live 2-run sweep with three loggers, ~35 s: make test-slow
def test_a_sweep_logs_live_to_tensorboard_mlflow_and_wandb_grouped_alike(tmp_path):
    base = {**BASE, "logging": {"tensorboard": {"enabled": True}, "mlflow": {"enabled": True},
                                "wandb": {"enabled": True, "mode": "offline"}}}
    spec = write_spec(tmp_path, {"name": "live", "grid": {"model.position": ["rope", "alibi"]}, "seeds": [0]}, base)
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    proc = subprocess.run([sys.executable, "-m", "arch_zoo", "sweep", str(spec), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600, env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = tmp_path / "out" / "live"
    runs = {json.loads((d / "run.json").read_text())["variant"]: d for d in (sweep / "runs").iterdir()}
    assert sorted(runs) == ["position=alibi", "position=rope"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{sweep / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("live")
    mlflow_runs = {r.data.tags["variant"]: r for r in client.search_runs([experiment.experiment_id])}
    for variant, run_dir in runs.items():
        final = json.loads((run_dir / "summary.json").read_text())["final"]
        run = mlflow_runs[variant]
        assert run.info.run_name == run_dir.name and run.info.status == "FINISHED"
        assert run.data.tags["sweep"] == "live" and run.data.tags["seed"] == "0" and run.data.tags["commit"]
        assert run.data.params["model.position.name"] == variant.split("=")[1]
        assert abs(run.data.metrics["val/loss"] - final["val/loss"]) < 1e-6
        assert {"config.yaml", "summary.json"} <= {a.path for a in client.list_artifacts(run.info.run_id)}

        scalars, hparams, metrics = _tensorboard(sweep / "tensorboard" / run_dir.name)
        assert hparams == {"model.position": variant.split("=")[1], "seed": 0.0, "variant": variant}
        assert abs(scalars["val/loss"][-1][1] - final["val/loss"]) < 1e-6 and "val/loss" in metrics

        wandb_run = read_run(next((run_dir / "wandb").glob("offline-run-*")))
        assert wandb_run["run"].run_group == "live" and wandb_run["run"].job_type == variant
        logged = [h["val/loss"] for h in wandb_run["history"] if "val/loss" in h]
        assert abs(logged[-1] - final["val/loss"]) < 1e-6  # (its summary keeps the min: define_metric)

    assert sorted(yaml.safe_load((sweep / "sweep.yaml").read_text())["grid"]) == ["model.position"]
    for tool in ("tensorboard", "mlflow", "wandb"):  # live-logged runs are current: export adds nothing
        result = export([sweep], tool)
        assert result.written == [] and sorted(result.current) == sorted(d.name for d in runs.values()), tool
    assert len(client.search_runs([experiment.experiment_id])) == 2
