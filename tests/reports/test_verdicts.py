"""A verdict agrees with the interval printed beside it, and a margin belongs to its pair (issue 56 item 0);
the margin that would have called a pair equivalent (issue 55 item 4); one-sided claims (issue 56 item 5).
Every number is checked against scipy, computed here on its own."""
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from arch_zoo.cli import main
from arch_zoo.formatting import number
from arch_zoo.reports import load_runs, summarize
from arch_zoo.reports.tables import NO_SPREAD, display, terminal_table
from arch_zoo.reports.verdicts import round_up

from .sweeps import write_sweep

ROOT = Path(__file__).resolve().parents[2]
COSTS = ("params", "flops_per_token", "state_bytes_per_token", "train_tokens", "train_flops", "train_tokens_per_s",
         "train_bytes_per_s", "mfu", "peak_memory_mb", "wall_time_s")


def _runs(values, metric="val/loss", goal="min", claim=None, base="A"):
    """A run frame as load_runs gives it: variant name -> its metric over seeds 0, 1, ..."""
    rows = [{"run_id": f"{v}-{s}", "variant": f"arch={v}", "arch.name": v, "seed": s, "status": "completed",
             "reason": None, metric: x, **{c: math.nan for c in COSTS}}
            for v, xs in values.items() for s, x in enumerate(xs)]
    frame = pd.DataFrame(rows)
    frame.attrs.update({"settings": ["arch.name"], "metric": metric, "goal": goal, "metrics": [metric],
                        "baseline": {"arch.name": base}, "claim": claim})
    return frame


def _holm(p):
    """Holm's step-down, written out: the i-th smallest of m at (m - i) x p, a running maximum, capped at 1."""
    order = np.argsort(p)
    out, running = np.empty(len(p)), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def test_the_interval_excludes_zero_exactly_when_the_holm_p_is_below_alpha_on_random_tables():
    """60 random tables of 2-5 variants over 3-6 seeds: each pair's interval is scipy's t-interval at level
    1 - 0.05 p / p_holm, and it excludes 0 exactly when p_holm < 0.05 (the old 95% interval did not: the
    issue's MLA [0.0032, 0.0754] at Holm 0.085)."""
    rng = np.random.default_rng(56)
    disagreements_at_95 = 0
    for _ in range(60):
        k, n = rng.integers(2, 6), rng.integers(3, 7)
        base = rng.normal(2.0, 0.05, n)
        values = {"A": base, **{f"V{i}": base + rng.normal(rng.normal(0, 0.05), 0.04, n) for i in range(1, k)}}
        table = summarize(_runs(values)).set_index("variant")
        others = [f"V{i}" for i in range(1, k)]
        diffs = [values[v] - base for v in others]
        p = np.array([stats.ttest_rel(values[v], base).pvalue for v in others])
        adjusted = _holm(p)
        for v, d, raw, adj in zip(others, diffs, p, adjusted):
            row = table.loc[f"arch={v}"]
            level = 1 - 0.05 * raw / adj
            low, high = stats.t.interval(level, n - 1, loc=d.mean(), scale=stats.sem(d))
            assert row["val/loss p_holm"] == pytest.approx(adj, rel=1e-9)
            assert (row["val/loss verdict_ci_low"], row["val/loss verdict_ci_high"]) == pytest.approx((low, high),
                                                                                                      rel=1e-9)
            assert (low > 0 or high < 0) == (adj < 0.05)
            if row["val/loss verdict"] != "equivalent":
                assert (row["val/loss verdict"] in ("better", "worse")) == (adj < 0.05)
            low95, high95 = stats.t.interval(0.95, n - 1, loc=d.mean(), scale=stats.sem(d))
            disagreements_at_95 += (low95 > 0 or high95 < 0) != (adj < 0.05)
    assert disagreements_at_95 > 0  # the unadjusted interval the table used to print disagrees somewhere


def test_the_table_prints_the_interval_the_verdict_reads_and_its_level():
    """Three comparisons; B's raw p is below 0.05 and its 95% interval excludes 0, but its Holm p is not:
    the printed interval (at its Holm level) holds 0 and the word is inconclusive."""
    a = np.array([2.00, 2.03, 1.98, 2.05])
    values = {"A": a, "B": a + [0.03, 0.05, 0.012, 0.045], "C": a + [0.01, -0.02, 0.03, 0.0],
              "D": a + [0.02, -0.01, 0.0, 0.04]}
    table = summarize(_runs(values))
    row = table.set_index("variant").loc["arch=B"]
    assert row["val/loss p"] < 0.05 < row["val/loss p_holm"] and row["val/loss delta_ci_low"] > 0
    assert row["val/loss verdict_ci_low"] < 0 < row["val/loss verdict_ci_high"]
    assert row["val/loss verdict"] == "inconclusive"
    shown = display(table).set_index("name")
    level = 1 - 0.05 * row["val/loss p"] / row["val/loss p_holm"]
    assert shown.loc["B", "CI level"] == f"{level * 100:.4g}%"
    low, high = (number(row[f"val/loss verdict_ci_{end}"]) for end in ("low", "high"))
    assert shown.loc["B", "Δ vs baseline [Holm CI]"].endswith(f"[{low}, {high}]")


def test_an_unrelated_noisy_variant_changes_no_pair_margin_or_verdict():
    """B beats A by about one seed SD with consistent differences; C is 20x as noisy. With the old table-wide
    pooled spread C set a margin of about 0.3 and B read 'equivalent'; the pair's own margin is unchanged."""
    rng = np.random.default_rng(0)
    a = 2.0 + 0.05 * rng.standard_normal(6)
    b = a - 0.05 + 0.005 * rng.standard_normal(6)
    c = 2.0 + 1.0 * rng.standard_normal(6)
    alone = summarize(_runs({"A": a, "B": b})).set_index("variant").loc["arch=B"]
    beside = summarize(_runs({"A": a, "B": b, "C": c})).set_index("variant").loc["arch=B"]
    pooled = math.sqrt((np.var(a, ddof=1) + np.var(b, ddof=1)) / 2)
    assert alone["val/loss margin"] == beside["val/loss margin"] == pytest.approx(0.25 * pooled, rel=1e-12)
    assert alone["val/loss verdict"] == beside["val/loss verdict"] == "better"


def test_seeds_with_equal_values_say_no_spread_was_measured():
    values = {"A": [0.90, 0.93], "B": [0.974, 0.974]}
    table = summarize(_runs(values, metric="val/token_accuracy", goal="max"))
    shown = display(table).set_index("name")
    assert shown.loc["B", "95% CI"] == NO_SPREAD and "[0.974" not in terminal_table(table)
    assert "'no spread measured': the seeds gave equal values" in terminal_table(table)
    assert "no spread measured" not in terminal_table(summarize(_runs({"A": [1.0, 2.0], "B": [1.5, 2.4]})))
    same = summarize(_runs({"A": [1.0, 2.0], "B": [1.5, 2.5]}))  # Δ of +0.5 at both seeds: no spread either
    assert display(same).set_index("name").loc["B", "Δ vs baseline [Holm CI]"] == f"+0.5000 ({NO_SPREAD})"


def test_the_report_names_the_min_effect_that_would_have_called_a_pair_equivalent():
    """Issue 55 item 4: at 3 seeds the default margin calls no match; the note gives, per inconclusive pair,
    the margin whose interval check passes (its interval's farthest end, rounded up), and using it does."""
    a = np.array([2.100, 2.114, 2.093])
    values = {"A": a, "B": a + [0.004, -0.003, 0.006]}
    table = summarize(_runs(values))
    row = table.set_index("variant").loc["arch=B"]
    assert row["val/loss verdict"] == "inconclusive"
    farthest = max(abs(row["val/loss verdict_ci_low"]), abs(row["val/loss verdict_ci_high"]))
    needed = round_up(farthest)
    assert farthest < needed < farthest * 1.01
    note = next(n for n in table.attrs["notes"] if n.startswith("not equivalent at the default margin"))
    assert f"arch=B {number(needed, 3)}" in note
    assert summarize(_runs(values), min_effect=needed).set_index("variant").loc["arch=B", "val/loss verdict"] \
        == "equivalent"
    assert not any("default margin" in n for n in summarize(_runs(values), min_effect=needed).attrs["notes"])


@pytest.mark.parametrize("goal,shift", [("min", -0.03), ("max", 0.03)])
def test_a_one_sided_claim_is_scipys_one_sided_t_test_and_its_bound(goal, shift):
    """'B beats A by at least 0.01' at alpha 0.01: p from scipy's one-sided t-test against the margin; the
    claim holds exactly when the one-sided 99% bound of Δ lies past the margin."""
    rng = np.random.default_rng(5)
    a = 2.0 + 0.02 * rng.standard_normal(8)
    values = {"A": a, "B": a + shift + 0.006 * rng.standard_normal(8), "C": a + shift / 3 + 0.006 * rng.standard_normal(8)}
    claim = {"better_by": 0.01, "alpha": 0.01}
    table = summarize(_runs(values, goal=goal, claim=claim)).set_index("variant")
    raw = {}
    for v in ("B", "C"):
        d = values[v] - a
        if goal == "min":
            raw[v] = stats.ttest_1samp(d, -0.01, alternative="less").pvalue
        else:
            raw[v] = stats.ttest_1samp(d, 0.01, alternative="greater").pvalue
    adjusted = dict(zip(raw, _holm(np.array(list(raw.values())))))
    for v in ("B", "C"):
        row, d = table.loc[f"arch={v}"], values[v] - a
        assert row["val/loss claim_p"] == pytest.approx(raw[v], rel=1e-9)
        assert row["val/loss claim_p_holm"] == pytest.approx(adjusted[v], rel=1e-9)
        alpha = 0.01 * raw[v] / adjusted[v]
        t = stats.t.ppf(1 - alpha, len(d) - 1) * stats.sem(d)
        bound = d.mean() + t if goal == "min" else d.mean() - t
        assert row["val/loss claim_bound"] == pytest.approx(bound, rel=1e-9)
        holds = bound < -0.01 if goal == "min" else bound > 0.01
        assert holds == (adjusted[v] < 0.01) and (row["val/loss claim"] == "holds") == holds
    assert table.loc["arch=B", "val/loss claim"] == "holds" and table.loc["arch=C", "val/loss claim"] == "not shown"
    shown = display(summarize(_runs(values, goal=goal, claim=claim))).set_index("name")
    assert shown.loc["B", "claim"].startswith(f"holds: Δ {'≤' if goal == 'min' else '≥'} {table.loc['arch=B', 'val/loss claim_bound']:.4g}")


def test_a_claim_from_the_spec_and_the_command_line_reaches_the_console_and_the_report(tmp_path, capsys):
    losses = {"sinusoidal": [2.10, 2.14, 2.08, 2.12], "rope": [2.01, 2.06, 1.99, 2.03]}
    root = write_sweep(tmp_path / "s", losses, status={},
                       metric={"name": "val/loss", "goal": "min", "claim": {"better_by": 0.05, "alpha": 0.01}})
    table = summarize(load_runs(root)).set_index("variant")
    assert table.loc["position=rope", "val/loss claim"] == "holds"  # Δ -0.0875, every seed within 0.01 of it
    assert main(["report", str(root), "--out", str(tmp_path / "r"), "--format", "md", "--claim", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "not shown: Δ ≤" in out and "by at least 0.1 (one-sided paired t-test at alpha 0.05" in out
    md = (tmp_path / "r" / "report.md").read_text()
    assert "| claim" in md and "not shown: Δ ≤" in md


@pytest.mark.parametrize("argv,key", [(["--claim", "-0.01"], "--claim"),
                                      (["--claim", "0.01", "--claim-alpha", "1.5"], "--claim-alpha"),
                                      (["--claim-alpha", "0.01"], "--claim-alpha")])
def test_a_wrong_claim_is_one_line_naming_the_key_and_writes_nothing(tmp_path, capsys, argv, key):
    root = write_sweep(tmp_path / "s", {"sinusoidal": [2.1, 2.2], "rope": [2.0, 2.1]}, status={})
    assert main(["report", str(root), "--out", str(tmp_path / "r"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0] and not (tmp_path / "r").exists()


def test_a_claim_with_the_wrong_sign_in_the_spec_names_the_key(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: s\nbase: {ROOT / 'configs/experiments/char_lm.yaml'}\ngrid: {{model.position: [rope, alibi]}}\n"
                    "metric: {name: val/loss, claim: {better_by: -0.01}}\n")
    assert main(["sweep", str(spec), "--dry-run", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "metric.claim.better_by" in err[0] and "negative" in err[0]
    assert not (tmp_path / "o").exists()
