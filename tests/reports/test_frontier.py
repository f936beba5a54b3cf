"""The frontier of a metric against decoding-state bytes (reports/frontier.py; Zoology's recall against
state size): which variants no other beats at no more state, checked against a brute-force pairwise
search, and the report's section, CSV and figure built from it."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from arch_zoo.reports import write_report
from arch_zoo.reports.frontier import best_at_most, frontier_frame, on_frontier
from tests.reports.sweeps import LOSS, STATUS, write_sweep


def brute_frontier(cost, value, goal):
    """Point i is on it unless some other point j costs no more and does better, or costs less and does
    as well; points with a missing cost or value are off it and beat nothing."""
    sign = -1.0 if goal == "min" else 1.0
    ok = [np.isfinite(c) and np.isfinite(v) for c, v in zip(cost, value)]
    out = []
    for i in range(len(cost)):
        beaten = any(ok[j] and j != i and ((cost[j] <= cost[i] and sign * value[j] > sign * value[i])
                                           or (cost[j] < cost[i] and sign * value[j] >= sign * value[i]))
                     for j in range(len(cost)))
        out.append(ok[i] and not beaten)
    return out


def brute_best(cost, value, goal):
    pick = min if goal == "min" else max
    out = []
    for c in cost:
        within = [v for cj, v in zip(cost, value) if np.isfinite(cj) and np.isfinite(v) and np.isfinite(c) and cj <= c]
        out.append(pick(within) if within else np.nan)
    return out


@pytest.mark.parametrize("goal", ["max", "min"])
def test_the_frontier_is_what_a_pairwise_search_finds(goal):
    """Random points from few distinct costs and values, so that ties of cost, of value and of both occur,
    some with a missing value or cost."""
    for _ in range(300):
        n = np.random.randint(1, 14)
        cost = np.random.choice([1.0, 2.0, 4.0, 8.0, 16.0], size=n)
        value = np.random.choice([0.1, 0.25, 0.5, 0.9], size=n)
        value[np.random.rand(n) < 0.1] = np.nan
        cost[np.random.rand(n) < 0.05] = np.nan
        assert on_frontier(cost, value, goal).tolist() == brute_frontier(cost, value, goal)
        np.testing.assert_array_equal(best_at_most(cost, value, goal), brute_best(cost, value, goal))


def test_equal_points_at_the_top_are_on_it_together_and_a_cheaper_equal_one_wins():
    assert on_frontier([1, 2, 2, 3], [0.5, 0.9, 0.9, 0.9]).tolist() == [True, True, True, False]
    assert on_frontier([1, 1, 2], [0.2, 0.7, 0.7]).tolist() == [False, True, False]
    assert on_frontier([], []).tolist() == []


# Zoology's picture in small: attention's K/V state grows with the width, the fixed states less; a gated
# rule recalls more for its state than plain linear attention. (mixer, width) -> (state B/token, accuracy)
POINTS = {("attention", 8): (128.0, 0.3), ("attention", 16): (256.0, 0.9), ("attention", 32): (512.0, 1.0),
          ("gated_deltanet", 8): (40.0, 0.5), ("gated_deltanet", 16): (120.0, 0.95), ("gated_deltanet", 32): (420.0, 0.99),
          ("linear_attention", 8): (20.0, 0.2), ("linear_attention", 16): (90.0, 0.25), ("linear_attention", 32): (330.0, 0.3)}


def _table():
    rows = [{"variant": f"d_model={w},mixer={m}", "model.d_model": w, "model.mixer": m, "state_bytes_per_token": s,
             "model.position": "rope" if m == "attention" else "none",  # the mixer's own: no part of a family's name
             "val/acc mean": a, "val/acc ci_low": a - 0.05, "val/acc ci_high": min(1.0, a + 0.05), "val/acc n": 2}
            for (m, w), (s, a) in POINTS.items()]
    table = pd.DataFrame(rows).sample(frac=1.0, random_state=0)  # the table's order is the ranking, not the state's
    table.attrs.update({"settings": ["model.d_model", "model.mixer", "model.position"], "metric": "val/acc",
                        "goal": "max"})
    return table


def test_a_frame_of_families_cheapest_first():
    frame = frontier_frame(_table())
    assert frame.attrs["axis"] == "model.d_model"
    assert frame["state_bytes_per_token"].tolist() == sorted(s for s, _ in POINTS.values())
    assert set(frame["family"]) == {"mixer=attention", "mixer=gated_deltanet", "mixer=linear_attention"}
    keys = list(zip(frame["family"].str.removeprefix("mixer="), frame["model.d_model"]))
    assert [POINTS[k][1] for k in keys] == frame["mean"].tolist()
    cost, value = frame["state_bytes_per_token"].tolist(), frame["mean"].tolist()
    assert frame["on_frontier"].tolist() == brute_frontier(cost, value, "max")
    assert frame["best_at_most"].tolist() == brute_best(cost, value, "max")
    on = {k for k, flag in zip(keys, frame["on_frontier"]) if flag}
    assert on == {("linear_attention", 8), ("gated_deltanet", 8), ("gated_deltanet", 16), ("gated_deltanet", 32),
                  ("attention", 32)}
    assert frontier_frame(_table().assign(state_bytes_per_token=64.0)) is None  # one state: no trade to draw


def test_the_figure_draws_a_marker_per_family_and_the_frontier(tmp_path, monkeypatch):
    from matplotlib.axes import Axes

    from arch_zoo.reports.plots import frontier_plot

    drawn, steps = {}, []
    errorbar, step = Axes.errorbar, Axes.step
    monkeypatch.setattr(Axes, "errorbar", lambda ax, x, y, **kw: drawn.setdefault(kw["label"], (list(x), list(y), kw["fmt"]))
                        and errorbar(ax, x, y, **kw))
    monkeypatch.setattr(Axes, "step", lambda ax, x, y, **kw: steps.append((list(x), list(y))) or step(ax, x, y, **kw))
    png = frontier_plot(_table(), "val/acc", tmp_path)
    assert png.name == "frontier_val_acc.png" and png.read_bytes()[:4] == b"\x89PNG"
    assert set(drawn) == {"mixer=attention", "mixer=gated_deltanet", "mixer=linear_attention"}
    assert len({fmt for _, _, fmt in drawn.values()}) == 3  # a marker each
    for family, (x, y, _) in drawn.items():  # by width within a family
        points = sorted((w, POINTS[(m, w)]) for m, w in POINTS if m == family.removeprefix("mixer="))
        assert x == [s for _, (s, _) in points] and y == [a for _, (_, a) in points]
    on = sorted(POINTS[k] for k in [("linear_attention", 8), ("gated_deltanet", 8), ("gated_deltanet", 16),
                                     ("gated_deltanet", 32), ("attention", 32)])
    assert steps == [([s for s, _ in on] + [512.0], [a for _, a in on] + [on[-1][1]])]
    assert "frontier: best at or below the state" in png.with_suffix(".svg").read_text()


def _with_state(root: Path, state: dict) -> Path:
    """write_sweep's run store with each position's decoding-state bytes in its runs' summaries."""
    for summary in root.glob("runs/*/summary.json"):
        data = json.loads(summary.read_text())
        cfg = (summary.parent / "config.yaml").read_text()
        data["state_bytes_per_token"] = next(b for p, b in state.items() if f"name: {p}" in cfg)
        summary.write_text(json.dumps(data))
    return root


def test_the_report_names_the_frontier_and_draws_it(tmp_path):
    state = {"sinusoidal": 100.0, "rope": 200.0, "alibi": 400.0}
    root = _with_state(write_sweep(tmp_path / "pos"), state)
    out = write_report(root, tmp_path / "report", formats="md,csv,plots")["out_dir"]
    # val/loss (goal min) over the completed runs only (STATUS: rope's seed 2 failed, alibi's seed 3 diverged)
    mean = {p: float(np.mean([v for s, v in enumerate(losses) if (p, s) not in STATUS])) for p, losses in LOSS.items()}
    names = list(state)
    flags = brute_frontier([state[p] for p in names], [mean[p] for p in names], "min")
    assert dict(zip(names, flags)) == {"sinusoidal": True, "rope": True, "alibi": False}
    front = pd.read_csv(out / "frontier.csv")
    assert front["variant"].tolist() == ["position=sinusoidal", "position=rope", "position=alibi"]
    assert front["mean"].tolist() == pytest.approx([mean[p] for p in names])
    assert front["on_frontier"].tolist() == flags
    md = (out / "report.md").read_text()
    section = md[md.index("## Frontier: val/loss against decoding-state bytes per token"):]
    assert (f"on the frontier, cheapest first: position=sinusoidal (val/loss {mean['sinusoidal']:.4g} at 100 B/token); "
            f"position=rope (val/loss {mean['rope']:.4g} at 200 B/token).") in section
    assert "no point on it: position=alibi." in section
    # each variant its own family: the state plot shows these points already, so no second figure
    assert not list((out / "plots").glob("frontier_*")) and "(plots/val_loss_vs_state_bytes.png)" in md


def test_a_report_whose_variants_share_one_state_has_no_frontier(tmp_path):
    out = write_report(write_sweep(tmp_path / "pos"), tmp_path / "report", formats="md,csv,plots")["out_dir"]
    assert "## Frontier" not in (out / "report.md").read_text()
    assert not (out / "frontier.csv").exists() and not list((out / "plots").glob("frontier_*"))
