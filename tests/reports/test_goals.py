"""A metric's direction is declared (sweep spec, the run's recorded goals, the built-in table),
never guessed from its name, and the best seed follows the same direction as the ranking."""
import json
import math

import pytest
import yaml

from arch_zoo.errors import ConfigError
from arch_zoo.metrics import goal_of
from arch_zoo.reports import load_runs, summarize
from arch_zoo.sweeps.spec import parse_spec
from tests.reports.sweeps import config, write_run


def bleu_sweep(root, metric=None, goals=None):
    """Two variants x seeds 0, 1 of a metric arch_zoo does not know (val/bleu): rope scores 10 and
    30, alibi 20 and 22; ``goals`` is what each run's summary.json records."""
    root.mkdir(parents=True)
    spec = {"name": "bleu", "grid": {"model.position": ["rope", "alibi"]}, "seeds": [0, 1]}
    if metric:
        spec["metric"] = metric
    (root / "sweep.yaml").write_text(yaml.safe_dump(spec))
    for variant, scores in {"rope": [10.0, 30.0], "alibi": [20.0, 22.0]}.items():
        for seed, bleu in enumerate(scores):
            run = root / "runs" / f"{variant}-s{seed}"
            write_run(run, status="completed", settings={"model.position": variant}, seed=seed,
                      variant=f"position={variant}", final={"val/bleu": bleu, "val/loss": 3.0 - seed},
                      sweep="bleu", cfg=config(variant, seed))
            if goals is not None:
                summary = json.loads((run / "summary.json").read_text())
                (run / "summary.json").write_text(json.dumps({**summary, "goals": goals}))
    return root


def test_best_seed_follows_the_sweeps_goal(tmp_path):
    """Issue 13: with goal max on val/bleu and seeds scoring 10 and 30, the best seed is 30's."""
    table = summarize(load_runs(bleu_sweep(tmp_path / "s", metric={"name": "val/bleu", "goal": "max"})))
    table = table.set_index("variant")
    assert table.loc["position=rope", "val/bleu best"] == 30.0
    assert table.loc["position=rope", "val/bleu best_seed"] == 1
    assert list(table.sort_values("rank").index) == ["position=alibi", "position=rope"]  # mean 21 beats 20
    assert table.loc["position=rope", "val/loss best_seed"] == 1  # loss: the built-in min


def test_goals_recorded_by_the_runs_rank_a_loose_compare(tmp_path):
    """No sweep spec names the metric: the goals each run recorded in summary.json decide."""
    root = bleu_sweep(tmp_path / "s", goals={"val/bleu": "max"})
    runs = sorted((root / "runs").iterdir())
    table = summarize(load_runs(runs), metric="val/bleu").set_index("variant")
    rope = [v for v in table.index if "rope" in v][0]
    assert table.loc[rope, "val/bleu best_seed"] == 1
    assert table.attrs["goal"] == "max"


def test_an_undeclared_metric_is_neither_ranked_nor_given_a_best_seed(tmp_path):
    runs = load_runs(sorted((bleu_sweep(tmp_path / "s") / "runs").iterdir()))
    with pytest.raises(ConfigError, match="val/bleu: no run or sweep spec says whether lower or higher"):
        summarize(runs, metric="val/bleu")
    table = summarize(runs)  # ranked by val/loss; bleu shown, but no best seed is made up for it
    assert table["val/bleu best_seed"].isna().all() and table["val/bleu best"].map(math.isnan).all()


def test_directions_are_looked_up_by_name_not_substring():
    assert goal_of("val/token_accuracy") == "max" and goal_of("val@1024/loss") == "min"
    assert goal_of("val/inaccuracy") is None and goal_of("val/exact_match_rate") is None
    assert goal_of("val/bleu", {"bleu": "max"}) == "max"


def test_sweep_metric_goal_defaults_to_the_declared_one_and_is_required_otherwise():
    base = {"name": "s", "base": "configs/experiments/char_lm.yaml", "grid": {"model.position": ["rope"]}}
    assert parse_spec({**base, "metric": {"name": "val/exact_match"}}).metric["goal"] == "max"
    assert parse_spec({**base, "metric": {"name": "val/loss"}}).metric["goal"] == "min"
    with pytest.raises(ConfigError) as err:
        parse_spec({**base, "metric": {"name": "val/bleu"}})
    assert err.value.key == "metric.goal" and "goal: min or max" in err.value.message


@pytest.mark.parametrize("spelled, goal", [("minimize", "min"), ("maximize", "max")])
def test_wandbs_spelling_of_a_goal_ranks_the_report_as_the_sweep_does(tmp_path, spelled, goal):
    """A spec may say goal: minimize / maximize (wandb's words; the sweep accepts them); sweep.yaml
    keeps the words as written, and the report reads them as min / max, not as their opposite."""
    table = summarize(load_runs(bleu_sweep(tmp_path / "s", metric={"name": "val/bleu", "goal": spelled})))
    assert table.attrs["goal"] == goal
    ranked = list(table.sort_values("rank")["variant"])
    assert ranked == (["position=rope", "position=alibi"] if goal == "min" else ["position=alibi", "position=rope"])
    best = table.set_index("variant").loc["position=rope", "val/bleu best"]
    assert best == (10.0 if goal == "min" else 30.0)
