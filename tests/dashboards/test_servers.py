"""The real MLflow server and the real TensorBoard, started once for this module on free local ports
by the code `arch-zoo dashboard` runs, and queried over their HTTP APIs; then the MLflow compare
page, TensorBoard's HParams page and the interactive report in headless Chromium, failing on any
console error (console.error, an uncaught exception, a failed load, a CSP violation).

README (Dashboards): "`arch-zoo dashboard SWEEP_DIR` exports what is missing and serves it",
"experiment = the sweep, run name = the run id, tags variant / seed / sweep / commit, params = the
flattened config", "HParams: the sweep's varied keys, variant and seed, with the final metrics"."""
import json
import urllib.request

import pytest

from arch_zoo.dashboards.export import export
from arch_zoo.dashboards.serve import free_port, start, stop
from arch_zoo.reports import write_report

from .browser import Page, deep_text
from .conftest import FINISHED, MISSING, partial_sweep


# MLflow's UI asks who the user is (for its optional auth app); a server without auth answers 404, which
# Chromium logs as a failed load and the UI expects. Nothing else is let through.
EXPECTED = ("404 (Not Found) http://127.0.0.1:{port}/ajax-api/2.0/mlflow/users/current",)


def call(url, body=None, **headers):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=60) as reply:
        return json.loads(reply.read())


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    sweep = partial_sweep(tmp_path_factory.mktemp("served") / "pos")
    first = export([sweep], "mlflow")
    again = export([sweep], "mlflow")  # re-exporting: keyed on run id, nothing added
    export([sweep], "tensorboard")
    servers = {}
    try:
        for tool in ("mlflow", "tensorboard"):
            servers[tool] = start(tool, sweep, free_port())
        yield {"sweep": sweep, "first": first, "again": again, **{t: url for t, (_, url) in servers.items()}}
    finally:
        for proc, _ in servers.values():
            stop(proc)


def _mlflow_runs(url):
    experiment = call(url + "api/2.0/mlflow/experiments/get-by-name?experiment_name=pos")["experiment"]
    runs = call(url + "api/2.0/mlflow/runs/search", {"experiment_ids": [experiment["experiment_id"]],
                                                       "max_results": 1000})["runs"]
    return experiment, runs


def test_the_mlflow_server_holds_each_finished_run_once(served):
    assert sorted(served["first"].written) == sorted(FINISHED) and served["first"].missing == MISSING
    assert served["again"].written == [] and sorted(served["again"].current) == sorted(FINISHED)
    experiment, runs = _mlflow_runs(served["mlflow"])
    assert sorted(r["info"]["run_name"] for r in runs) == sorted(FINISHED)  # once each: no duplicates
    run = next(r for r in runs if r["info"]["run_name"] == "rope-s1")
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert tags["variant"] == "position=rope" and tags["seed"] == "1" and tags["sweep"] == "pos"
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    assert params["model.position.name"] == "rope" and params["train.max_steps"] == "30"
    metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
    assert metrics["val/loss"] == pytest.approx(2.06) and metrics["val_256/loss"] == pytest.approx(2.36)
    assert run["info"]["status"] == "FINISHED"
    history = call(served["mlflow"] + f"api/2.0/mlflow/metrics/get-history?run_id={run['info']['run_id']}"
                                      "&metric_key=val/loss")["metrics"]
    assert sorted(m["step"] for m in history) == [10, 20, 30]
    artifacts = call(served["mlflow"] + f"api/2.0/mlflow/artifacts/list?run_id={run['info']['run_id']}")
    assert {"config.yaml", "summary.json"} <= {f["path"] for f in artifacts["files"]}
    diverged = next(r for r in runs if r["info"]["run_name"] == "alibi-s3")
    assert diverged["info"]["status"] == "FAILED"


def test_tensorboard_serves_scalars_and_the_hparams_experiment(served):
    url = served["tensorboard"]
    assert sorted(call(url + "data/runs")) == sorted(FINISHED)
    steps = [row[1] for row in call(url + "data/plugin/scalars/scalars?run=alibi-s0&tag=val/loss")]
    assert steps == [10, 20, 30]
    experiment = call(url + "data/plugin/hparams/experiment", {"experimentName": ""}, **{"X-XSRF-Protected": "1"})
    assert {h["name"] for h in experiment["hparamInfos"]} == {"model.position", "seed", "variant"}
    assert {"val/loss", "test/loss"} <= {m["name"]["tag"] for m in experiment["metricInfos"]}


def test_dashboards_and_the_interactive_report_render_without_console_errors(served, tmp_path):
    report = write_report(served["sweep"], tmp_path / "report", formats="html")["out_dir"] / "report.html"
    _, runs = _mlflow_runs(served["mlflow"])
    ids = [r["info"]["run_id"] for r in runs if r["info"]["run_name"] in ("rope-s0", "alibi-s0", "sinusoidal-s0")]
    compare = served["mlflow"] + "#/compare-runs?runs=" + json.dumps(ids, separators=(",", ":")) + \
        "&experiments=" + json.dumps([runs[0]["info"]["experiment_id"]])
    with Page(tmp_path / "profile") as page:
        page.open(compare, "document.body.innerText.includes('rope-s0') && "
                           "document.body.innerText.includes('model.position.name')")
        page.screenshot(tmp_path / "mlflow_compare.png")
        page.open(served["tensorboard"] + "#hparams", f"{deep_text()}.includes('position=sinusoidal')")
        page.screenshot(tmp_path / "tensorboard_hparams.png")
        page.open(report.as_uri(), "window.Plotly && document.getElementById('az-plot').data")
        assert page.evaluate("document.getElementById('az-plot').data.length") == len(FINISHED)
        page.evaluate("Plotly.Fx.hover('az-plot', [{curveNumber: 0, pointNumber: 1}])")  # hover values
        assert "step 20" in page.evaluate("document.querySelector('#az-plot .hoverlayer').textContent")
        page.evaluate("document.querySelector('#az-variants input[value=\"position=sinusoidal\"]').click()")  # off
        assert page.evaluate("document.getElementById('az-plot').data.length") == len(FINISHED) - 4
        page.evaluate("var s = document.getElementById('az-metric'); s.value = 'val/token_accuracy';"
                      "s.dispatchEvent(new Event('change'))")
        assert page.evaluate("document.getElementById('az-plot').layout.yaxis.title.text") == "val/token_accuracy"
        tables = "document.querySelectorAll('table.sortable')"  # the first: progress (rope-s3 is pending)
        assert page.evaluate(f"{tables}[0].rows[2].textContent").replace(" ", "") == "position=rope3011"
        for _ in range(2):  # the ranked table by val/loss: ascending, then descending
            page.evaluate(f"{tables}[1].querySelector('th:nth-child(3)').click()")
        rows = f"Array.from({tables}[1].tBodies[0].rows).map(r => r.cells[0].textContent)"
        assert page.evaluate(rows) == ["sinusoidal", "alibi", "rope"]
        page.screenshot(tmp_path / "report.png")
        port = served["mlflow"].rsplit(":", 1)[1].strip("/")
        errors = [e for e in page.errors if not any(e.endswith(x.format(port=port)) for x in EXPECTED)]
        assert errors == [], errors
    for shot in ("mlflow_compare", "tensorboard_hparams", "report"):
        png = (tmp_path / f"{shot}.png").read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000, shot  # a rendered page
    print(f"screenshots: {tmp_path}")
