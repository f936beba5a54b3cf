"""What the attention studies of issues 39 and 40 read off a report: each variant's decoding-state bytes
per token (a column, variants.csv, LaTeX, and the ranked metric plotted against it) and the attention
mass on the first token (a goal, so `--metric` ranks by it, and its mean over layers as one column).

The sweep is real and tiny: MHA, GQA and MQA (4, 2, 1 K/V heads of 4) in 2 layers of width 16, with
the attention diagnostics on; the state bytes are counted here by hand."""
import csv
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from arch_zoo.cli import main
from arch_zoo.metrics import goal_of
from arch_zoo.reports import load_runs, summarize, write_report
from arch_zoo.reports.plots import write_plots
from arch_zoo.reports.tables import display
from tests.reports.sweeps import write_sweep
from tests.sweeps.conftest import BASE, write_spec

HEADS, LAYERS, WIDTH = 4, 2, 16
KV_HEADS = (4, 2, 1)  # MHA, GQA, MQA
TINY = {**BASE, "model": {**BASE["model"], "n_heads": HEADS, "n_layers": LAYERS, "d_model": WIDTH},
        "train": {**BASE["train"], "max_steps": 4, "val_every": 4, "attention_diagnostics": True}}
PLOT = "val_loss_vs_state_bytes"


def by_hand(kv_heads: int) -> int:
    """A K/V cache's bytes per token: a key and a value per K/V head, head_dim float32 numbers each, per layer."""
    return 2 * kv_heads * (WIDTH // HEADS) * 4 * LAYERS


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("kv")
    spec = {"name": "kv", "grid": {"model.n_kv_heads": list(KV_HEADS)}, "seeds": [0, 1],
            "baseline": {"model.n_kv_heads": 4}}
    assert main(["sweep", str(write_spec(root / "specs", spec, TINY)), "--out", str(root / "runs"),
                 "--workers", "1"]) == 0
    return root / "runs" / "kv"


def _md_column(text: str, heading: str) -> list:
    """The cells of the Markdown table whose header has ``heading``, top to bottom."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|") and f" {heading} " in line)
    names = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(names, (c.strip() for c in line.strip("|").split("|")))))
    return [(r["n_kv_heads"], r[heading]) for r in rows]


def test_state_bytes_per_token_are_a_column_of_every_table(sweep, tmp_path):
    report = write_report(sweep, tmp_path / "report", formats="md,csv,tex,html")
    out = report["out_dir"]
    variants = pd.read_csv(out / "variants.csv")
    assert sorted(zip(variants["model.n_kv_heads"], variants["state_bytes_per_token"])) == \
        sorted((kv, float(by_hand(kv))) for kv in KV_HEADS)
    runs = pd.read_csv(out / "runs.csv")
    assert all(row["state_bytes_per_token"] == by_hand(row["model.n_kv_heads"]) for _, row in runs.iterrows())
    md = (out / "report.md").read_text()
    cells = _md_column(md, "state B/token")
    assert sorted((int(kv), float(cell)) for kv, cell in cells) == sorted((kv, by_hand(kv)) for kv in KV_HEADS)
    tex = (out / "table.tex").read_text().splitlines()
    spec = next(line for line in tex if line.startswith("\\begin{tabular}"))[len("\\begin{tabular}{"):-1]
    header = next(line for line in tex if "state B/token" in line).rstrip(" \\").split(" & ")
    assert spec[header.index("state B/token")] == "r"  # a number: right-aligned
    body = [line.rstrip(" \\").split(" & ") for line in tex[tex.index("\\midrule") + 1:tex.index("\\bottomrule")]]
    assert sorted((int(r[header.index("n\\_kv\\_heads")]), float(r[header.index("state B/token")])) for r in body) == \
        sorted((kv, by_hand(kv)) for kv in KV_HEADS)
    # the ranked metric against the state: written, and listed under the report's plots
    assert (out / "plots" / f"{PLOT}.png").is_file() and (out / "plots" / f"{PLOT}.svg").is_file()
    assert f"(plots/{PLOT}.png)" in md
    page = (out / "report.html").read_text()
    assert "<th>state B/token</th>" in page and f"{PLOT}.svg" in page


def test_the_state_plot_shows_each_variant_at_its_state_with_its_interval(sweep, tmp_path, monkeypatch):
    """One marker per variant at its state bytes and mean, its bar the 95% t-interval of the mean."""
    from matplotlib.axes import Axes

    drawn = []
    original = Axes.errorbar

    def spy(ax, x, y, yerr=None, **kw):
        if str(kw.get("label", "")).startswith("n_kv_heads="):  # not the bars (no label), nor loss against n_kv_heads
            drawn.append((kw["label"], x[0], y[0], yerr))
        return original(ax, x, y, yerr=yerr, **kw)

    monkeypatch.setattr(Axes, "errorbar", spy)
    runs = load_runs(sweep)
    written = write_plots(runs, summarize(runs), tmp_path / "plots")
    assert tmp_path / "plots" / f"{PLOT}.png" in written
    assert len(drawn) == len(KV_HEADS)
    done = runs[runs["status"] == "completed"]
    for label, x, y, yerr in drawn:
        kv = int(label.split("=")[1])
        losses = done[done["model.n_kv_heads"] == kv]["val/loss"].to_numpy()
        assert x == by_hand(kv) and y == pytest.approx(losses.mean(), rel=1e-12)
        half = 12.706204736174698 * losses.std(ddof=1) / math.sqrt(2)  # t(0.975, 1 dof) x standard error
        assert yerr[0][0] == pytest.approx(half, rel=1e-9) and yerr[1][0] == pytest.approx(half, rel=1e-9)


def _with_state(root: Path, state: dict) -> Path:
    """A synthetic sweep whose runs recorded ``state[position]`` decoding-state bytes per token."""
    for summary in (root / "runs").glob("*/summary.json"):
        record = json.loads(summary.read_text())
        cfg = (summary.parent / "run.json").read_text()
        position = json.loads(cfg)["settings"]["model.position"]
        summary.write_text(json.dumps({**record, "state_bytes_per_token": state[position]}))
    return root


def test_the_state_plot_is_drawn_only_when_the_variants_state_differs(tmp_path):
    out = tmp_path / "plots"
    differ = _with_state(write_sweep(tmp_path / "differ"), {"sinusoidal": 256.0, "rope": 256.0, "alibi": 64.0})
    runs = load_runs(differ)
    assert out / f"{PLOT}.png" in write_plots(runs, summarize(runs), out)
    same = _with_state(write_sweep(tmp_path / "same"), {"sinusoidal": 256.0, "rope": 256.0, "alibi": 256.0})
    runs = load_runs(same)
    table = summarize(runs)
    written = write_plots(runs, table, out)  # into the same folder: the earlier one goes
    assert not any(PLOT in p.name for p in written) and not list(out.glob(f"{PLOT}.*"))
    assert set(display(table)["state B/token"]) == {"256"}  # the column still shows the equal states
    runs = load_runs(write_sweep(tmp_path / "unknown"))  # runs from before state bytes were recorded
    table = summarize(runs)
    assert "state B/token" not in display(table).columns
    assert not any(PLOT in p.name for p in write_plots(runs, table, out))


def test_the_first_token_mass_is_logged_per_layer_and_as_their_mean(sweep):
    checked = 0
    for run_dir in sorted((sweep / "runs").iterdir()):
        for row in csv.DictReader((run_dir / "metrics.csv").open()):
            if row.get("val/attn_first_token"):
                layers = [float(row[f"val/attn_first_token/layer_{i}"]) for i in range(LAYERS)]
                # Lightning logs float32: each value there is rounded at ~6e-8 relative
                assert float(row["val/attn_first_token"]) == pytest.approx(sum(layers) / LAYERS, rel=1e-6)
                assert all(0 < x < 1 for x in layers)
                checked += 1
        summary = json.loads((run_dir / "summary.json").read_text())
        for split in ("val", "test"):  # summary.json keeps the float64 values
            layers = [summary["final"][f"{split}/attn_first_token/layer_{i}"] for i in range(LAYERS)]
            assert summary["final"][f"{split}/attn_first_token"] == pytest.approx(sum(layers) / LAYERS, rel=1e-12)
        assert {k: v for k, v in summary["goals"].items() if "attn_first_token" in k} == {
            f"{split}/attn_first_token{layer}": "min" for split in ("val", "test")
            for layer in ["", *(f"/layer_{i}" for i in range(LAYERS))]}
    assert checked == len(KV_HEADS) * 2


@pytest.mark.parametrize("metric", ["val/attn_first_token/layer_0", "val/attn_first_token"])
def test_a_report_ranks_by_the_first_token_mass(sweep, tmp_path, metric):
    out = tmp_path / "report"
    assert main(["report", str(sweep), "--metric", metric, "--format", "md,csv", "--out", str(out), "--quiet"]) == 0
    assert (out / "report.md").read_text().startswith(f"# kv: variants ranked by {metric} (min)")
    variants = pd.read_csv(out / "variants.csv")
    runs = pd.read_csv(out / "runs.csv")
    means = runs.groupby("model.n_kv_heads")[metric].mean().sort_values()  # lower: less sink, ranked first
    assert list(variants["model.n_kv_heads"]) == list(means.index)
    assert list(variants[f"{metric} mean"]) == pytest.approx(list(means), rel=1e-12)


def test_the_report_shows_the_layer_mean_beside_the_ranked_loss(sweep, tmp_path):
    """The costs table has room for 6 other metrics: the layers' mean is among them, each layer's value not."""
    report = write_report(sweep, tmp_path / "report", formats="md")
    md = (report["out_dir"] / "report.md").read_text()
    assert "| val/attn_first_token " in md and "/layer_0" not in md.split("## Runs")[0]
    shown = list(display(report["variants"]).columns)
    assert shown.index("val/attn_first_token") < shown.index("val/token_accuracy")


def test_a_run_logged_before_the_layer_mean_gets_it_at_report_time(tmp_path):
    """Per-layer values only (a run trained before the mean was logged): the report adds their mean per split."""
    layers = {"val/attn_first_token/layer_0": 0.2, "val/attn_first_token/layer_1": 0.5,
              "test/attn_first_token/layer_0": 0.1, "test/attn_first_token/layer_1": 0.4, "val/attn_entropy/layer_0": 2.0}
    runs = load_runs(write_sweep(tmp_path / "old", extra=layers))
    done = runs[runs["status"] == "completed"]
    assert (done["val/attn_first_token"] == (0.2 + 0.5) / 2).all() and (done["test/attn_first_token"] == 0.25).all()
    assert "val/attn_entropy" not in runs.columns  # only the kinds the recorder summarises
    table = summarize(runs, metric="val/attn_first_token")
    assert table.attrs["goal"] == "min" and table["val/attn_first_token mean"].tolist() == pytest.approx([0.35] * 3)


def test_per_layer_metrics_take_the_goal_and_range_of_their_kind():
    from arch_zoo.metrics import base_name, range_of

    for name in ("val/attn_first_token/layer_3", "test/attn_first_token/decoder.layer_0.cross",
                 "val@256/attn_first_token/encoder.layer_1", "val/attn_first_token"):
        assert goal_of(name) == "min" and range_of(name) == (0.0, 1.0) and base_name(name) == "attn_first_token"
    assert goal_of("val/attn_entropy/layer_0") is None and goal_of("val/attn_max_logit/layer_0") is None
    assert goal_of("val/layer_0") is None and base_name("val/layer_0") == "layer_0"  # a split's own metric
    assert base_name("val@1024/loss") == "loss"


def _terminal_column(text: str, heading: str) -> dict:
    """{position: the cell under ``heading``} of terminal_table's table (tabulate's 'simple' format)."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("rank "))
    rule = lines[head + 1]
    spans = [(m.start(), m.end()) for m in __import__("re").finditer(r"-+", rule)]
    names = [lines[head][a:b].strip() for a, b in spans]
    if heading not in names:
        return {}
    rows = {}
    for line in lines[head + 2:]:
        if not line[:1].isdigit():  # the footnotes
            break
        cells = [line[a:b].strip() for a, b in spans]
        rows[cells[names.index("position")]] = cells[names.index(heading)]
    return rows


def test_the_console_table_shows_state_bytes_when_the_variants_differ_in_it(tmp_path):
    """`arch-zoo sweep` and `arch-zoo report` print terminal_table: the state column is there when the
    variants' decoding states differ (the trade a recurrent mixer makes), left out when they are equal."""
    from arch_zoo.reports.tables import terminal_table

    state = {"sinusoidal": 256.0, "rope": 256.0, "alibi": 64.0}
    shown = _terminal_column(terminal_table(_with_state(write_sweep(tmp_path / "differ"), state)), "state B/token")
    assert {p: float(cell) for p, cell in shown.items()} == state
    same = _with_state(write_sweep(tmp_path / "same"), {"sinusoidal": 256.0, "rope": 256.0, "alibi": 256.0})
    assert _terminal_column(terminal_table(same), "state B/token") == {}
    assert "state B/token" not in terminal_table(same)
