"""Issue 30 §2: eval/<task>.json results are metrics like any other in `report` and `compare`: CIs
over seeds, paired deltas against the baseline and Holm's correction, checked against scipy."""
import numpy as np
import pytest
from scipy import stats

from arch_zoo.evaluation.results import task_records, write_records
from arch_zoo.reports import load_runs, summarize
from tests.reports.sweeps import LOSS, SEEDS, STATUS, write_sweep

ACC = {"sinusoidal": [0.30, 0.34, 0.31, 0.33], "rope": [0.52, 0.49, 0.55, 0.50], "alibi": [0.41, 0.44, 0.40, 0.43]}
NAME = "eval/zoo_choice/acc"


def _lm_eval_results(acc: float) -> dict:
    """What lm_eval's simple_evaluate returns for one task, the parts the records read."""
    return {"results": {"zoo_choice": {"alias": "zoo_choice", "acc,none": acc, "acc_stderr,none": 0.1,
                                       "exact_match,strict-match": acc / 2, "exact_match_stderr,strict-match": "N/A"}},
            "higher_is_better": {"zoo_choice": {"acc": True, "exact_match": True}},
            "n-samples": {"zoo_choice": {"original": 7, "effective": 7}}, "versions": {"zoo_choice": 1.0},
            "configs": {"zoo_choice": {"output_type": "multiple_choice", "num_fewshot": 0}}}


@pytest.fixture
def sweep(tmp_path):
    root = write_sweep(tmp_path / "pos")
    for variant, values in ACC.items():
        for seed, acc in zip(SEEDS, values):
            run = root / "runs" / f"{variant}-s{seed}"
            if (variant, seed) not in STATUS:
                write_records(run, task_records(_lm_eval_results(acc), {"step": 30}))
    return root


def test_records_name_metrics_and_filters_and_keep_the_goals(sweep):
    import json

    record = json.loads((sweep / "runs" / "rope-s0" / "eval" / "zoo_choice.json").read_text())
    assert record["metrics"] == {"acc": 0.52, "strict-match/exact_match": 0.26}
    assert record["stderr"] == {"acc": 0.1}  # lm_eval's 'N/A' is no number
    assert record["goals"] == {"acc": "max", "strict-match/exact_match": "max"}
    assert record["n_samples"] == {"original": 7, "effective": 7} and record["step"] == 30


def test_eval_metrics_get_cis_paired_deltas_and_holm_like_any_other(sweep):
    runs = load_runs(sweep)
    assert NAME in runs.attrs["metrics"] and "eval/zoo_choice/strict-match/exact_match" in runs.attrs["metrics"]
    table = summarize(runs, metric=NAME).set_index("variant")
    done = {v: [s for s in SEEDS if (v, s) not in STATUS] for v in ACC}
    assert list(table.index) == ["position=rope", "position=alibi", "position=sinusoidal"]  # higher is better
    ps = {}
    for variant in ACC:
        x = np.array([ACC[variant][s] for s in done[variant]])
        row = table.loc[f"position={variant}"]
        low, high = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
        assert row[f"{NAME} mean"] == pytest.approx(x.mean(), abs=1e-12)
        assert (row[f"{NAME} ci_low"], row[f"{NAME} ci_high"]) == pytest.approx((low, high), abs=1e-12)
        if variant == "sinusoidal":
            continue
        seeds = [s for s in done[variant] if s in done["sinusoidal"]]
        a, b = np.array([ACC[variant][s] for s in seeds]), np.array([ACC["sinusoidal"][s] for s in seeds])
        assert row[f"{NAME} delta"] == pytest.approx((a - b).mean(), abs=1e-12)
        ps[variant] = stats.ttest_rel(a, b).pvalue
        assert row[f"{NAME} p"] == pytest.approx(ps[variant], rel=1e-9)
    order = sorted(ps, key=ps.get)  # Holm by hand: the smaller p times 2, the larger times 1, kept monotone
    holm = {order[0]: min(1.0, 2 * ps[order[0]])}
    holm[order[1]] = min(1.0, max(holm[order[0]], ps[order[1]]))
    for variant, expected in holm.items():
        assert table.loc[f"position={variant}", f"{NAME} p_holm"] == pytest.approx(expected, rel=1e-9)
    assert "val/loss mean" in table.columns and len(LOSS) == len(ACC)  # beside the training metrics


def test_compare_and_report_put_them_in_the_tables(sweep, tmp_path, capsys):
    from arch_zoo.cli import main

    assert main(["report", str(sweep), "--out", str(tmp_path / "rep"), "--metric", NAME, "--format", "csv"]) == 0
    report = capsys.readouterr().out
    assert main(["compare", str(sweep), "--out", str(tmp_path / "cmp"), "--metric", NAME]) == 0
    compared = capsys.readouterr().out
    for out in (report, compared):
        assert f"{NAME} ↑" in out and "+0.1800" in out  # ranked by it, higher is better; rope's Δ over 3 seeds
