"""Plots: each as PNG and SVG, only where the runs have the data, legends naming settings not run ids."""
import numpy as np
import pytest

from arch_zoo.reports import load_runs, summarize
from arch_zoo.reports.plots import curves, write_plots
from tests.reports.sweeps import write_sweep


def _plots(root, out):
    runs = load_runs(root)
    return runs, write_plots(runs, summarize(runs), out)


def test_language_model_sweep_plots(tmp_path):
    runs, written = _plots(write_sweep(tmp_path / "pos"), tmp_path / "plots")
    assert sorted(p.name for p in written) == ["curves_val_loss.png", "final_val_loss.png", "loss_vs_length.png"]
    for png in written:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        svg = png.with_suffix(".svg").read_text()
        assert svg.lstrip().startswith("<?xml") and "</svg>" in svg
        assert "position=rope" in svg  # legend / tick labels name the varied setting...
        assert not any(run_id in svg for run_id in runs["run_id"])  # ...never a run id


def test_seq2seq_sweep_adds_accuracy_curves(tmp_path):
    root = write_sweep(tmp_path / "scan", extra={"val/exact_match": 0.5})
    _, written = _plots(root, tmp_path / "plots")
    names = {p.name for p in written}
    assert {"curves_val_exact_match.png", "curves_val_token_accuracy.png"} <= names


def test_curve_band_is_mean_and_std_over_seeds(tmp_path):
    runs = load_runs(write_sweep(tmp_path / "pos", status={}))
    band = curves(runs, "val/loss")["position=rope"]
    final = runs[runs["variant"] == "position=rope"]["val/loss"].to_numpy()  # step 30 logs the final value
    assert band.loc[30.0, "mean"] == pytest.approx(final.mean())
    assert band.loc[30.0, "std"] == pytest.approx(np.std(final, ddof=1))
    assert band.loc[30.0, "n"] == 4


def test_dollar_signs_in_names_do_not_break_matplotlib(tmp_path):
    """An even number of '$' makes matplotlib parse mathtext, which fails on an unknown command."""
    root = write_sweep(tmp_path / "pos", labels={"rope": r"$\nosuchcommand$", "alibi": "a $ b"})
    _, written = _plots(root, tmp_path / "plots")
    assert len(written) == 3
    assert r"nosuchcommand" in (tmp_path / "plots" / "curves_val_loss.svg").read_text()


def test_curves_sit_at_the_steps_a_run_names_its_validations_by(tmp_path):
    """A real run logs the validation that follows step k at k (trainer.global_step) in metrics.csv,
    the step summary.json's best, val_every and a successive-halving rung ("pruned at step 100")
    name it by; the report's curves (and the exports, which read them alike) put it there. A run
    dir an earlier version wrote (validation at k - 1, and no ``metrics_steps`` in status.json) is
    read at k too."""
    import csv
    import json
    import shutil

    from arch_zoo.experiment import load
    from arch_zoo.reports.curves import read_curves
    from arch_zoo.training import run_one
    from tests.conftest import tiny

    cfg = load({"name": "t", "seed": 0, "model": tiny(), "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
                "train": {"max_steps": 4, "batch_size": 4, "val_every": 2, "val_batches": 1, "progress_bar": False,
                          "log_every": 1, "exact_match_samples": 0}})
    run_one(cfg, tmp_path / "run", quiet=True)
    with (tmp_path / "run" / "metrics.csv").open(newline="") as f:
        logged = [int(r["step"]) for r in csv.DictReader(f) if r.get("val/loss")]
    assert logged == [2, 4]
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["step"] == 4 and status["metrics_steps"] == "global_step"
    read = read_curves(tmp_path / "run", "val/loss")
    assert read["step"].tolist() == [2.0, 4.0]
    best = json.loads((tmp_path / "run" / "summary.json").read_text())["best"]["val/loss"]
    assert read.set_index("step").loc[float(best["step"]), "value"] == pytest.approx(best["value"])
    train = read_curves(tmp_path / "run", "train/loss")["step"].tolist()
    assert train == [0.0, 1.0, 2.0, 3.0]  # a training step's loss stays at the step it was computed in

    old = tmp_path / "old"  # as the earlier version wrote it
    shutil.copytree(tmp_path / "run", old)
    status.pop("metrics_steps")
    (old / "status.json").write_text(json.dumps(status))
    with (tmp_path / "run" / "metrics.csv").open(newline="") as f:
        reader = csv.DictReader(f)
        header, rows = reader.fieldnames, [{**r, "step": str(int(r["step"]) - 1)} if r.get("val/loss") else r
                                           for r in reader]
    with (old / "metrics.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    assert read_curves(old, "val/loss").equals(read) and read_curves(old, "train/loss")["step"].tolist() == train


def test_the_palette_is_matplotlibs_tab10_and_tab20():
    """The interactive page gets its colours without matplotlib: the same hex values."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    from arch_zoo.reports.colors import palette

    for n, name in ((10, "tab10"), (11, "tab20")):
        assert palette(n) == [to_hex(c) for c in colormaps[name].colors]


def test_a_legend_wider_than_the_figure_is_inside_the_image(tmp_path):
    """Variant names of a layered model (``layers=[{pattern: [...]}]``) make a legend wider than the
    axes; the saved PNG holds all of it."""
    import matplotlib.image

    from arch_zoo.reports.plots import _figure, _legend, _save

    fig = _figure()
    ax = fig.add_subplot()
    for i in range(3):
        ax.plot([0, 1], [i, i + 1], label=f"layers=[{{pattern: [{{mixer: gated_deltanet}}] * {i}}}]" + "x" * 80)
    _legend(ax, 3)
    png = _save(fig, tmp_path, "wide")
    fig.canvas.draw()
    legend_px = ax.get_legend().get_window_extent().width
    assert legend_px > 6.4 * 100  # the case: the legend is wider than the figure _figure() makes
    assert matplotlib.image.imread(png).shape[1] >= legend_px


def _width_table():
    """A ranked table of 2 mixers x 3 widths, each cell at its own tuned lr (three values in all)."""
    import pandas as pd

    rows = []
    for mixer, acc in (("attention", [0.9, 0.95, 1.0]), ("linear_attention", [0.2, 0.4, 0.6])):
        for width, a, lr in zip((64, 16, 32), acc, (1e-3, 3e-3, 1e-2)):  # neither sorted by width nor by mixer
            rows.append({"variant": f"d_model={width},mixer={mixer},lr={lr:g}", "model.d_model": width,
                         "model.mixer": mixer, "model.causal": True, "train.lr": lr,
                         "val/acc mean": a, "val/acc ci_low": a - 0.1, "val/acc ci_high": a + 0.05})
    table = pd.DataFrame(rows).sample(frac=1.0, random_state=0)
    table.attrs["settings"] = ["model.d_model", "model.mixer", "model.causal", "train.lr"]
    return table


def test_metric_against_the_one_numeric_setting_one_line_per_other_setting(tmp_path):
    """Zoology's figure: accuracy against width, a line per mixer; the tuned lr is no axis."""
    from arch_zoo.reports.plots import axis_plot, axis_series

    table = _width_table()
    axis, series = axis_series(table, "val/acc", exclude=["train.lr"])
    assert axis == "model.d_model"
    assert set(series) == {"mixer=attention,causal=true", "mixer=linear_attention,causal=true"}
    attention = series["mixer=attention,causal=true"]
    assert attention.index.tolist() == [16.0, 32.0, 64.0]
    assert attention["mean"].tolist() == [0.95, 1.0, 0.9]
    assert attention["ci_low"].tolist() == pytest.approx([0.85, 0.9, 0.8])
    assert series["mixer=linear_attention,causal=true"]["ci_high"].tolist() == pytest.approx([0.45, 0.65, 0.25])
    assert axis_series(table, "val/acc") is None  # lr, 3 values, would be a second axis: which one is meant?
    assert axis_series(table.drop(columns=["val/acc mean"]), "val/acc", exclude=["train.lr"]) is None
    png = axis_plot(table, "val/acc", tmp_path, exclude=["train.lr"])
    assert png.name == "val_acc_vs_setting_model_d_model.png" and png.read_bytes()[:4] == b"\x89PNG"
    svg = png.with_suffix(".svg").read_text()
    assert "mixer=linear_attention,causal=true" in svg and "model.d_model" in svg


def test_no_axis_plot_without_a_numeric_setting_of_three_values(tmp_path):
    from arch_zoo.reports.plots import axis_series

    table = _width_table()
    two = table[table["model.d_model"] != 64]
    assert axis_series(two, "val/acc", exclude=["train.lr"]) is None  # 2 widths: a bar plot says it
    words = table.assign(**{"model.d_model": table["model.d_model"].map({16: "s", 32: "m", 64: "l"})})
    assert axis_series(words, "val/acc", exclude=["train.lr"]) is None
    flags = table.assign(**{"model.d_model": table["model.d_model"].map({16: True, 32: False, 64: True})})
    assert axis_series(flags, "val/acc", exclude=["train.lr"]) is None
    _, written = _plots(write_sweep(tmp_path / "pos"), tmp_path / "plots")  # one categorical axis
    assert not any("_vs_setting_" in p.name for p in written)


def test_a_report_with_long_layered_labels_draws_without_a_layout_warning(tmp_path):
    """Variant names of whole layer lists under the bars ran off the figure, so constrained layout gave
    up ("constrained_layout not applied") on every such report; the names go into a legend below instead,
    numbered as the bars are, and the image holds it."""
    import re
    import warnings

    import matplotlib.image

    from arch_zoo.reports import write_report

    layered = "[{pattern: [{mixer: gated_deltanet, options: {n_heads: 2}}, {mixer: gated_deltanet}, {mixer: attention}]}]"
    labels = {"rope": f"rope {layered}", "alibi": f"alibi {layered}"}  # run ids: the first 40 characters
    root = write_sweep(tmp_path / "pos", labels=labels, status={})
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*constrained_layout", category=UserWarning)
        out = write_report(root, tmp_path / "report", formats="md,plots")["out_dir"]
    svg = (out / "plots" / "final_val_loss.svg").read_text()
    ranked = ["rope", "alibi", "sinusoidal"]  # by mean val/loss (tests/reports/sweeps.py: LOSS)
    legend = re.findall(r"<!-- (\d): (.*?) -->", svg)
    assert [(n, text) for n, text in legend] == [
        (str(i + 1), f"position={labels.get(p, p)}") for i, p in enumerate(ranked)]
    png = matplotlib.image.imread(out / "plots" / "final_val_loss.png")
    assert png.shape[1] > 6.4 * 100  # widened to the legend, not cut
