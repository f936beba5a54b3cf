"""`arch-zoo export`: finished runs from metrics.csv + summary.json into TensorBoard and wandb, read
back with each tool's own reader (MLflow: tests/dashboards/test_servers.py, through its server).

README (Dashboards): "a sweep trained with no logger can still be compared there", "re-exporting
adds nothing twice (runs are keyed on their run id)", "a partial sweep exports what has finished
and lists what is missing"."""
import json

from arch_zoo.cli import main
from arch_zoo.dashboards.export import export

from .conftest import FINISHED, MISSING
from .wandb_records import read_run


def _tensorboard(run_log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = EventAccumulator(str(run_log_dir))
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    hparams, metrics = {}, []
    for content in acc.PluginTagToContent("hparams").values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.WhichOneof("data") == "session_start_info":
            hparams = {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
                       for k, v in data.session_start_info.hparams.items()}
        elif data.WhichOneof("data") == "experiment":
            metrics = [m.name.tag for m in data.experiment.metric_infos]
    return scalars, hparams, metrics


def test_tensorboard_export_holds_curves_and_hparams_and_is_idempotent(sweep, capsys):
    code = main(["export", str(sweep), "--to", "tensorboard"])
    out = capsys.readouterr().out
    assert code == 0
    assert f"tensorboard: exported {len(FINISHED)} run(s), 0 already up to date -> {sweep / 'tensorboard'}" in out
    assert "rope-s2 (failed), rope-s3 (pending)" in out  # what is missing, and why
    assert {p.name for p in (sweep / "tensorboard").iterdir()} == FINISHED

    scalars, hparams, metrics = _tensorboard(sweep / "tensorboard" / "rope-s1")
    assert [step for step, _ in scalars["val/loss"]] == [10, 20, 30]
    assert abs(scalars["val/loss"][-1][1] - 2.06) < 1e-6  # the run's final val/loss (tests/reports/sweeps.py)
    assert hparams == {"model.position": "rope", "seed": 1.0, "variant": "position=rope"}
    assert {"val/loss", "val/token_accuracy", "test/loss"} <= set(metrics)

    events = sorted(p.name for p in (sweep / "tensorboard").rglob("events.*"))
    result = export([sweep], "tensorboard")
    assert result.written == [] and sorted(result.current) == sorted(FINISHED) and result.missing == MISSING
    assert sorted(p.name for p in (sweep / "tensorboard").rglob("events.*")) == events  # nothing written twice

    summary = sweep / "runs" / "rope-s1" / "summary.json"  # a rerun changes a run: its view is replaced
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "final": {"val/loss": 1.5}}))
    result = export([sweep], "tensorboard")
    assert result.written == ["rope-s1"]
    assert len(list((sweep / "tensorboard" / "rope-s1").glob("events.*"))) == 1


def test_wandb_export_is_read_back_by_wandbs_record_schema(sweep, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    result = export([sweep / "runs" / "rope-s0", sweep / "runs" / "alibi-s1"], "wandb")
    assert sorted(result.written) == ["alibi-s1", "rope-s0"]
    offline = list((sweep / "runs" / "rope-s0" / "wandb").glob("offline-run-*"))
    assert len(offline) == 1
    run = read_run(offline[0])
    assert run["run"].run_group == "pos" and run["run"].job_type == "position=rope"  # grouped like live runs
    assert list(run["run"].tags) == ["position=rope"] and run["run"].display_name == "rope-s0"
    assert run["config"]["model.position.name"] == "rope" and run["config"]["seed"] == 0
    steps = [h["_step"] for h in run["history"] if "val/loss" in h]
    assert steps == [10, 20, 30]
    assert abs(run["summary"]["val/loss"] - 2.01) < 1e-9 and run["summary"]["status"] == "completed"

    again = export([sweep / "runs" / "rope-s0"], "wandb")
    assert again.written == [] and again.current == ["rope-s0"]
    assert list((sweep / "runs" / "rope-s0" / "wandb").glob("offline-run-*")) == offline


def test_mlflow_attaches_only_a_report_written_from_the_runs_it_exports(sweep, tmp_path, monkeypatch):
    """The report found where `arch-zoo report` writes by default (reports/<sweep name>/) belongs to
    a run only if its runs.csv lists that run's directory: another store of the same sweep name
    (e.g. a shorter rerun under another --out) gets no report, not the other store's."""
    import shutil

    from arch_zoo.dashboards.export import _report
    from arch_zoo.tracking.identity import from_run_dir
    from arch_zoo.reports import write_report

    monkeypatch.chdir(tmp_path)
    other = tmp_path / "short" / "pos"
    shutil.copytree(sweep, other)
    write_report(sweep, tmp_path / "reports" / "pos", formats="html,csv")  # reports/pos/, of `sweep`
    ours, theirs = (from_run_dir(root / "runs" / "rope-s1") for root in (sweep, other))
    assert ours.experiment == theirs.experiment == "pos"
    assert _report(ours).resolve() == tmp_path / "reports" / "pos" / "report.html"
    assert _report(theirs) is None
