"""`arch-zoo report --within KEY` (issue 58 §5): each variant against the baseline at the same level of a
second axis, and the interaction, how its Δ changes between levels. Every number report.md and within.csv
print is computed here again with numpy and scipy, from the values the synthetic runs were written with."""
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from arch_zoo.cli import main
from arch_zoo.reports import load_runs, summarize
from arch_zoo.reports.html import page
from arch_zoo.reports.within import within
from tests.test_bad_input import check_one_line, tree

from .sweeps import config, write_run

SEEDS = (0, 1, 2, 3, 4)
LEVELS = ("joined", "separate")
# final val/loss by (position, documents), seeds 0-4; alibi/separate seed 4 failed, so alibi's comparison there
# and its interaction pair over seeds 0-3 only
LOSS = {("sinusoidal", "joined"): [1.90, 1.93, 1.88, 1.91, 1.95],
        ("rope", "joined"): [1.86, 1.88, 1.85, 1.85, 1.90],
        ("alibi", "joined"): [1.91, 1.92, 1.90, 1.89, 1.97],
        ("sinusoidal", "separate"): [1.83, 1.85, 1.80, 1.86, 1.84],
        ("rope", "separate"): [1.80, 1.80, 1.76, 1.81, 1.79],
        ("alibi", "separate"): [1.79, 1.81, 1.76, 1.80, None]}
MARGIN = 0.005  # --min-effect: a known margin for 'equivalent' and 'same'
ALPHA = 0.05


def write_grid(root, loss=LOSS, baseline=None, **spec):
    """position x task.documents, laid out as `arch-zoo sweep` writes it; a None loss is a failed run."""
    (root / "runs").mkdir(parents=True)
    (root / "sweep.yaml").write_text(json.dumps({
        "name": "docs", "metric": {"name": "val/loss", "goal": "min"},
        "baseline": baseline or {"model.position": "sinusoidal", "task.documents": "joined"}, **spec}))
    for (pos, docs), losses in loss.items():
        for seed, value in zip(SEEDS, losses):
            write_run(root / "runs" / f"{pos}-{docs}-{seed}", status="completed" if value is not None else "failed",
                      reason=None if value is not None else "CUDA out of memory", seed=seed, sweep="docs",
                      settings={"model.position": pos, "task.documents": docs},
                      variant=f"position={pos},documents={docs}", final={"val/loss": value} if value else None,
                      cfg=config(pos, seed, **{"task.documents": docs}))
    return root


def _holm(p):
    order = np.argsort(p)
    out, running = np.empty(len(p)), 0.0
    for rank, i in enumerate(order):
        running = max(running, (len(p) - rank) * p[i])
        out[i] = min(1.0, running)
    return out


def _by_seed(position, docs):
    return {s: v for s, v in zip(SEEDS, LOSS[(position, docs)]) if v is not None}


def _diffs(position, docs):
    """variant − baseline at one level, by seed."""
    a, b = _by_seed(position, docs), _by_seed("sinusoidal", docs)
    return {s: a[s] - b[s] for s in a if s in b}


def _interval(d, level):
    d = np.asarray(d)
    half = stats.t.ppf(1 - (1 - level) / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return d.mean() - half, d.mean() + half


def _tests(samples):
    """{name: per-seed differences} -> {name: (delta, p, p_holm, level, low, high)}, one Holm family."""
    names = list(samples)
    p = np.array([stats.ttest_1samp(samples[n], 0.0).pvalue for n in names])
    out = {}
    for n, raw, adjusted in zip(names, p, _holm(p)):
        level = 1 - ALPHA * raw / adjusted
        out[n] = (float(np.mean(samples[n])), raw, adjusted, level, *_interval(samples[n], level))
    return out


def _expected():
    within_tests = _tests({(docs, pos): list(_diffs(pos, docs).values())
                           for docs in LEVELS for pos in ("rope", "alibi")})
    pairs = {}
    for pos in ("rope", "alibi"):
        here, there = _diffs(pos, "separate"), _diffs(pos, "joined")
        seeds = sorted(set(here) & set(there))
        pairs[pos] = (seeds, [here[s] - there[s] for s in seeds], np.mean([here[s] for s in seeds]),
                      np.mean([there[s] for s in seeds]))
    return within_tests, _tests({pos: pairs[pos][1] for pos in pairs}), pairs


def _md_rows(text, heading):
    """The first table under ``heading`` in report.md, as dicts of its cells."""
    lines = text.split(heading, 1)[1].splitlines()
    table = [ln for ln in lines[lines.index(next(ln for ln in lines if ln.startswith("|"))):]]
    table = table[:next((i for i, ln in enumerate(table) if not ln.startswith("|")), len(table))]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in table]
    return [dict(zip(cells[0], row)) for row in cells[2:]]


def _printed(text, expected):
    """A number as the report prints it (4 significant digits) against its exact value."""
    assert float(text) == pytest.approx(expected, rel=6e-4, abs=1e-12), (text, expected)


def _printed_p(text, expected):
    assert (expected < 0.001) if text == "&lt;0.001" else float(text) == pytest.approx(expected, abs=5.1e-4), text


def _printed_interval(text, delta, low, high):
    value, rest = text.split(" ", 1)
    _printed(value, delta)
    a, b = rest.strip("[]").split(", ")
    _printed(a, low)
    _printed(b, high)


def _reading(delta, low, high, p_holm, words=("better", "worse")):
    if -MARGIN < low and high < MARGIN:
        return "equivalent" if words[0] == "better" else "same"
    if p_holm < ALPHA and (low > 0 or high < 0):
        return words[0] if delta < 0 or words[0] == words[1] else words[1]
    return "inconclusive"


@pytest.fixture
def report(tmp_path, capsys):
    root = write_grid(tmp_path / "grid")
    code = main(["report", str(root), "--out", str(tmp_path / "rep"), "--within", "task.documents",
                 "--min-effect", str(MARGIN), "--format", "md,csv,parquet"])
    assert code == 0
    return tmp_path / "rep", capsys.readouterr().out


def test_each_variant_is_compared_with_the_baseline_at_its_own_level(report):
    """Δ per level vs the baseline at that level, paired over the seeds both completed; p from the paired t-test,
    Holm over the 4 comparisons, the interval at 1 - 0.05 x p / p (Holm); mean ± std; seeds; verdict."""
    out, stdout = report
    rows = _md_rows((out / "report.md").read_text(), "## Within task.documents")
    within_tests, _, _ = _expected()
    assert [r["documents"] for r in rows] == ["joined"] * 3 + ["separate"] * 3  # the baseline's level first
    assert [r["variant"] for r in rows[::3]] == ["position=sinusoidal (baseline)"] * 2  # then each level's baseline
    assert sorted(r["variant"] for r in rows) == sorted(["position=sinusoidal (baseline)", "position=rope",
                                                         "position=alibi"] * 2)
    for r in rows:
        pos = r["variant"].split("=")[1].split(" ")[0]
        values = list(_by_seed(pos, r["documents"]).values())
        mean, std = r["val/loss ↓"].split(" ± ")
        _printed(mean, np.mean(values))
        _printed(std, np.std(values, ddof=1))
        if pos == "sinusoidal":
            assert r["Δ vs baseline [Holm CI]"] == "baseline" and r["seeds"] == str(len(values))
            continue
        delta, p, p_holm, level, low, high = within_tests[(r["documents"], pos)]
        _printed_interval(r["Δ vs baseline [Holm CI]"], delta, low, high)
        assert r["CI level"] == f"{level * 100:.4g}%"
        _printed_p(r["p"], p)
        _printed_p(r["p (Holm)"], p_holm)
        assert r["verdict"] == _reading(delta, low, high, p_holm)
        assert r["seeds"] == str(len(_diffs(pos, r["documents"])))
    assert {r["verdict"] for r in rows} >= {"better", "inconclusive"}  # the design reaches more than one verdict
    assert "Within task.documents" in stdout and "a difference of differences" in stdout.lower()


def test_the_interaction_is_the_seed_paired_difference_of_the_deltas(report):
    """(variant − baseline, separate) − (variant − baseline, joined) per seed, over the seeds with all four runs
    (alibi: 0-3, its separate seed 4 failed); its t-test, Holm over the 2 interactions, interval, reading."""
    out, _ = report
    text = (out / "report.md").read_text()
    assert "A difference of differences" in text and f"'same' when it lies inside ±{MARGIN:g}" in text
    rows = _md_rows(text, "### Interaction: does Δ change with task.documents?")
    _, inter, pairs = _expected()
    assert sorted((r["variant"], r["documents"]) for r in rows) == [("position=alibi", "separate − joined"),
                                                                    ("position=rope", "separate − joined")]
    for r in rows:
        pos = r["variant"].split("=")[1]
        seeds, _, at_level, at_reference = pairs[pos]
        delta, p, p_holm, level, low, high = inter[pos]
        _printed(r["Δ at the level"], at_level)
        _printed(r["Δ at joined"], at_reference)
        assert delta == pytest.approx(at_level - at_reference)
        _printed_interval(r["difference of Δ [Holm CI]"], delta, low, high)
        assert r["CI level"] == f"{level * 100:.4g}%"
        _printed_p(r["p"], p)
        _printed_p(r["p (Holm)"], p_holm)
        assert r["Δ changes?"] == _reading(delta, low, high, p_holm, ("changes", "changes"))
        assert r["seeds"] == str(len(seeds))
    assert pairs["alibi"][0] == [0, 1, 2, 3] and {r["Δ changes?"] for r in rows} == {"changes", "inconclusive"}


def test_within_csv_holds_every_comparison_at_full_precision(report):
    """within.csv: one row per (level, variant), then the interactions; the unadjusted 95% interval too;
    within.parquet holds the same."""
    out, _ = report
    table = pd.read_csv(out / "within.csv")
    pd.testing.assert_frame_equal(pd.read_parquet(out / "within.parquet"), table, check_dtype=False)
    within_tests, inter, pairs = _expected()
    assert list(table["section"]) == ["within"] * 6 + ["interaction"] * 2
    for _, r in table.iterrows():
        pos = r["variant"].split(",")[0].split("=")[1]
        if r["section"] == "within" and pos == "sinusoidal":
            assert r["baseline"] and pd.isna(r["val/loss p"])
            continue
        if r["section"] == "within":
            d = list(_diffs(pos, r["task.documents"]).values())
            delta, p, p_holm, level, low, high = within_tests[(r["task.documents"], pos)]
            assert r["baseline_variant"] == f"position=sinusoidal,documents={r['task.documents']}"
        else:
            d = pairs[pos][1]
            delta, p, p_holm, level, low, high = inter[pos]
            assert (r["task.documents"], r["reference"]) == ("separate", "joined")
            assert r["reference_variant"] == f"position={pos},documents=joined"
            assert r["val/loss delta_at_level"] == pytest.approx(pairs[pos][2], rel=1e-9)
        expected = {"delta": delta, "p": p, "p_holm": p_holm, "verdict_ci_level": level, "verdict_ci_low": low,
                    "verdict_ci_high": high, "n_paired": len(d)}
        expected["delta_ci_low"], expected["delta_ci_high"] = _interval(d, 0.95)
        for name, value in expected.items():
            assert r[f"val/loss {name}"] == pytest.approx(value, rel=1e-9, abs=1e-12), name


def test_bootstrap_intervals_are_scipys_bca(tmp_path):
    """--ci bootstrap: the unadjusted and the adjusted interval of each comparison and interaction are
    scipy's BCa bootstrap of the same per-seed differences (9999 resamples, seed 0)."""
    runs = load_runs(write_grid(tmp_path / "grid"))
    result = within(runs, "documents", ci="bootstrap", min_effect=MARGIN)
    within_tests, inter, pairs = _expected()

    def bca(d, level):
        res = stats.bootstrap((np.asarray(d),), np.mean, confidence_level=level, n_resamples=9999, method="BCa",
                              random_state=np.random.default_rng(0))
        return res.confidence_interval.low, res.confidence_interval.high

    checked = 0
    for frame, key in ((result.rows, lambda r: (r["task.documents"], r["label"].split("=")[1])),
                       (result.interaction, lambda r: r["label"].split("=")[1])):
        for _, r in frame[~frame["baseline"].astype(bool)].iterrows():
            k = key(r)
            d = list(_diffs(k[1], k[0]).values()) if isinstance(k, tuple) else pairs[k][1]
            level = (within_tests if isinstance(k, tuple) else inter)[k][3]
            assert (r["val/loss delta_ci_low"], r["val/loss delta_ci_high"]) == pytest.approx(bca(d, 0.95), rel=1e-9)
            assert (r["val/loss verdict_ci_low"], r["val/loss verdict_ci_high"]) == pytest.approx(bca(d, level),
                                                                                                 rel=1e-9)
            checked += 1
    assert checked == 6


def test_the_html_report_has_the_section(tmp_path):
    runs = load_runs(write_grid(tmp_path / "grid"))
    html = page(runs, summarize(runs), [], within=within(runs, "task.documents"))
    assert "<h2>Within task.documents: each variant against the baseline at the same level (val/loss)</h2>" in html
    assert "<h3>Interaction: does Δ change with task.documents?</h3>" in html


def test_a_second_axis_without_the_baseline_at_a_level_exits_2_and_writes_nothing(tmp_path, capsys):
    loss = {k: v for k, v in LOSS.items() if k != ("sinusoidal", "separate")}
    root = write_grid(tmp_path / "grid", loss)
    before = tree(tmp_path)
    capsys.readouterr()
    code = main(["report", str(root), "--out", str(tmp_path / "rep"), "--within", "documents"])
    check_one_line(code, capsys.readouterr().err, "--within: task.documents: the baseline (model.position="
                   "sinusoidal) has no runs at task.documents=separate; levels with baseline runs: joined; swept keys: "
                   "model.position, task.documents")
    assert tree(tmp_path) == before


@pytest.mark.parametrize("argv,expected", [
    (["--within", "documnts"], "--within: 'documnts' is not a swept key of this sweep (did you mean "
                               "'task.documents'?); choices: model.position, task.documents"),
    (["--within", "task.documents", "--baseline", "task.documents=joined"],
     "--within: the baseline (task.documents=joined) sets no setting but task.documents"),
])
def test_a_within_key_that_cannot_split_the_sweep_exits_2_and_writes_nothing(argv, expected, tmp_path, capsys):
    root = write_grid(tmp_path / "grid")
    before = tree(tmp_path)
    capsys.readouterr()
    code = main(["report", str(root), "--out", str(tmp_path / "rep"), *argv])
    check_one_line(code, capsys.readouterr().err, expected)
    assert tree(tmp_path) == before


def test_adaptive_seeds_are_named_as_not_accounted_for(tmp_path):
    """A sweep that added seeds on the main table's comparisons: the within section says its fixed-sample
    statistics ignore those looks; a fixed-seed sweep gets no such note."""
    adaptive = within(load_runs(write_grid(tmp_path / "a", seeds={"start": 3, "max": 5})), "documents")
    fixed = within(load_runs(write_grid(tmp_path / "f")), "documents")
    assert any("seeds were added adaptively" in n for n in adaptive.notes)
    assert not any("adaptively" in n for n in fixed.notes)


def test_a_sweep_with_no_final_value_yet_reports_empty_comparisons_not_a_traceback(tmp_path, capsys):
    """Every run failed (or, under --watch, none has finished): the main report writes, and so does the within
    section, its comparisons empty (NaN), as the main table's are."""
    root = write_grid(tmp_path / "grid", {k: [None] * len(SEEDS) for k in LOSS})
    assert main(["report", str(root), "--out", str(tmp_path / "rep"), "--within", "documents"]) == 0
    rows = pd.read_csv(tmp_path / "rep" / "within.csv")
    assert len(rows) == 6 + 2 and rows["val/loss delta"].isna().all()  # 3 variants x 2 levels, 2 interactions
