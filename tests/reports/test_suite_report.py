"""A probe suite's report (issue 30): per-task score and the suite average per variant, checked against
the same statistics computed here by hand with numpy and scipy; and one tiny suite sweep through the
real CLI (2 tasks x 2 variants x 2 seeds, 3 steps each) whose report.md and suite.csv hold that table."""
import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from arch_zoo.cli import main
from arch_zoo.reports.suite import analyse, wide

METRIC = "test/token_accuracy"
ENTRIES = {"t1": "T1", "t2a": "T2", "t2b": "T2"}  # T2 has two difficulty levels


def _frame(entry, values, failed=()):
    """One group (an entry) as load_groups gives it: a row per run, its suite record in attrs."""
    rows, records = [], {}
    for variant, seeds in values.items():
        for seed, x in enumerate(seeds):
            run_id = f"{variant}-{entry}-s{seed}"
            bad = (variant, seed) in failed
            rows.append({"run_id": run_id, "variant": f"position={variant},task={entry}", "seed": seed,
                         "status": "failed" if bad else "completed", "is_baseline": variant == "A",
                         "model.position": variant, "suite.task": entry, METRIC: math.nan if bad else x})
            records[run_id] = {"name": "toy", "entry": entry, "task": ENTRIES[entry], "variant": f"position={variant}",
                               "entries": ENTRIES, "tasks": ["T1", "T2"]}
    frame = pd.DataFrame(rows)
    frame.attrs.update({"suite": records, "settings": ["model.position", "suite.task"], "metric": METRIC,
                        "goal": "max"})
    return frame


def _t(xs):
    xs = np.asarray(xs, dtype=float)
    low, high = stats.t.interval(0.95, len(xs) - 1, loc=xs.mean(), scale=xs.std(ddof=1) / math.sqrt(len(xs)))
    return xs.mean(), low, high


def test_task_scores_and_the_suite_average_match_a_computation_by_hand():
    rng = np.random.default_rng(3)
    x = {v: {e: rng.uniform(0.2, 0.9, 4) for e in ENTRIES} for v in "ABC"}  # 4 seeds
    failed = {("C", 3)}  # C's seed 3 failed on t2b: out of C's T2 score and suite average, and of its Δ
    groups = [_frame(e, {v: x[v][e] for v in "ABC"}, failed if e == "t2b" else ()) for e in ENTRIES]
    suite = analyse(groups)
    table = wide(suite).set_index("variant")
    seeds = {"A": [0, 1, 2, 3], "B": [0, 1, 2, 3], "C": [0, 1, 2]}
    avg = {}
    for v in "ABC":
        name = f"position={v}"
        t1 = x[v]["t1"]
        t2 = (x[v]["t2a"] + x[v]["t2b"]) / 2
        s = seeds[v]
        for col, xs in (("T1", t1), ("T2", t2[s])):
            mean, low, high = _t(xs)
            assert table.at[name, f"{col} mean"] == pytest.approx(mean, abs=1e-12)
            assert table.at[name, f"{col} ci_low"] == pytest.approx(low, abs=1e-12)
            assert table.at[name, f"{col} ci_high"] == pytest.approx(high, abs=1e-12)
        avg[v] = (t1[s] + t2[s]) / 2
        mean, low, high = _t(avg[v])
        assert table.at[name, "mean"] == pytest.approx(mean, abs=1e-12)
        assert (table.at[name, "ci_low"], table.at[name, "ci_high"]) == pytest.approx((low, high), abs=1e-12)
        assert table.at[name, "n"] == len(s)
    # entries: the mean over the seeds that completed each
    entry = suite.per_entry.set_index(["variant", "entry"])
    assert entry.at[("position=C", "t2b"), "mean"] == pytest.approx(x["C"]["t2b"][:3].mean(), abs=1e-12)
    assert entry.at[("position=C", "t2b"), "n"] == 3
    # Δ vs A paired by seed, p from ttest_rel, Holm over B's and C's tests
    p = {}
    for v in "BC":
        s = seeds[v]
        d = avg[v] - avg["A"][s]
        mean, low, high = _t(d)
        p[v] = stats.ttest_rel(avg[v], avg["A"][s]).pvalue
        name = f"position={v}"
        assert table.at[name, "delta"] == pytest.approx(mean, abs=1e-12)
        assert (table.at[name, "delta_ci_low"], table.at[name, "delta_ci_high"]) == pytest.approx((low, high), abs=1e-12)
        assert table.at[name, "p"] == pytest.approx(p[v], abs=1e-12)
        assert table.at[name, "baseline_variant"] == "position=A"
    lo, hi = sorted(p, key=p.get)
    holm = {lo: min(1.0, 2 * p[lo])}
    holm[hi] = min(1.0, max(holm[lo], p[hi]))
    for v in "BC":
        assert table.at[f"position={v}", "p_holm"] == pytest.approx(holm[v], abs=1e-12)
    assert math.isnan(table.at["position=A", "p_holm"])
    assert any("position=C: seed 3 did not complete every entry" in n for n in suite.notes)
    ranked = sorted("ABC", key=lambda v: -avg[v].mean())
    assert list(wide(suite)["variant"]) == [f"position={v}" for v in ranked]  # higher is better: best first


def test_a_sweep_without_a_suite_has_no_suite_section():
    frame = _frame("t1", {"A": [0.5, 0.6]})
    frame.attrs["suite"] = {}
    assert analyse([frame]) is None


TINY = {"name": "tiny", "seed": 0,
        "model": {"kind": "decoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "max_seq_len": 32},
        "task": {"name": "copy"},
        "train": {"max_steps": 3, "batch_size": 8, "val_every": 3, "val_batches": 1, "progress_bar": False,
                  "log_every": 3, "exact_match_samples": 0}}
OPTIONS = {"n_train": 32, "n_val": 8, "n_test": 16, "max_len": 4}


def test_a_tiny_suite_sweep_through_the_cli_reports_per_task_scores_and_the_suite_average(tmp_path, capsys):
    import yaml

    (tmp_path / "base.yaml").write_text(yaml.safe_dump(TINY))
    spec = {"name": "suite", "base": "base.yaml", "grid": {"model.position": ["rope", "sinusoidal"]},
            "seeds": [0, 1], "baseline": {"model.position": "sinusoidal"}, "metric": {"name": METRIC},
            "suite": {"name": "tiny", "tasks": [{"task": "copy", "options": OPTIONS},
                                                {"task": "reverse", "options": OPTIONS}]}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(tmp_path / "spec.yaml"), "--out", str(tmp_path / "runs")]) == 0
    assert "probe suite tiny" in capsys.readouterr().out  # the sweep ends with the suite's table
    assert main(["report", str(tmp_path / "runs" / "suite"), "--out", str(tmp_path / "rep"),
                 "--format", "md,csv"]) == 0
    out = capsys.readouterr().out
    assert "suite average" in out
    # by hand, from the run dirs: each run's final test accuracy, its entry and architecture
    score = {}
    for run in (tmp_path / "runs" / "suite" / "runs").iterdir():
        meta = json.loads((run / "run.json").read_text())
        final = json.loads((run / "summary.json").read_text())["final"]
        score[(meta["suite"]["variant"], meta["suite"]["task"], meta["seed"])] = final[METRIC]
    assert len(score) == 8
    with (tmp_path / "rep" / "suite.csv").open() as f:
        got = {r["variant"]: r for r in csv.DictReader(f)}
    assert set(got) == {"position=rope", "position=sinusoidal"}
    avg = {}
    for v in got:
        for task in ("copy", "reverse"):
            assert float(got[v][f"{task} mean"]) == pytest.approx(np.mean([score[(v, task, s)] for s in (0, 1)]))
        avg[v] = np.array([(score[(v, "copy", s)] + score[(v, "reverse", s)]) / 2 for s in (0, 1)])
        mean, low, high = _t(avg[v]) if np.ptp(avg[v]) > 0 else (avg[v].mean(),) * 3
        assert float(got[v]["mean"]) == pytest.approx(mean)
        assert float(got[v]["ci_low"]) == pytest.approx(low)
    d = avg["position=rope"] - avg["position=sinusoidal"]
    assert float(got["position=rope"]["delta"]) == pytest.approx(d.mean())
    assert got["position=sinusoidal"]["baseline"] == "True"
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Probe suite: tiny (2 tasks, 2 entries)" in md
    assert "| position=sinusoidal * |" in md
    assert Path(tmp_path / "rep" / "suite_entries.csv").is_file()


def test_a_tuned_grid_reads_back_from_run_json_as_tuples_and_is_chosen_by_its_mean():
    """run.json writes a grid's (lr, weight decay) as a list; the report's tuning table recomputes the
    choice from them, as stage 1 did."""
    from arch_zoo.reports.tuning import choices, tuning_record, tuning_table

    values = [[1e-3, 0.0], [1e-3, 0.1], [3e-3, 0.0]]
    scores = {0: [0.2, 0.4], 1: [0.5, 0.3], 2: [0.45, 0.45]}  # means 0.3, 0.4, 0.45 over the two tuning seeds
    rows = [{"_tune": {"stage": "tune", "key": "train.lr x train.weight_decay", "value": list(values[i]),
                       "variant": "position=rope,task=copy", "values": values, "select": "val/token_accuracy",
                       "goal": "max"}, "seed": seed, "status": "completed", "_metrics": {"val/token_accuracy": x}}
            for i, xs in scores.items() for seed, x in zip((5, 6), xs)]
    record = tuning_record(rows, {})
    picked = choices(record)["position=rope,task=copy"]
    assert picked.value == (3e-3, 0.0) and picked.scores[(1e-3, 0.1)] == pytest.approx(0.4)
    table = tuning_table(record)
    assert table.iloc[0]["chosen train.lr x train.weight_decay"] == "[0.003, 0.0]"
    assert table.iloc[0]["[0.003, 0.0]"] == "**0.4500**"
