"""Bad input: one line on stderr naming the spec key, exit code 2, and nothing trained or written."""
import pytest

from arch_zoo.cli import main
from arch_zoo.config.schema import TrainConfig

from .conftest import BASE, write_spec

GRID = {"model.position": ["rope", "alibi"]}
TUNE = {"key": "train.lr", "values": [1.0e-3, 1.0e-2], "seeds": [7]}

CASES = {
    "unknown axis key": ({"grid": {"model.positon": ["rope"]}},
                         "grid.model.positon: unknown key (did you mean 'position'?)"),
    "unknown section": ({"zip": {"modle.position": ["rope"]}}, "zip.modle.position: unknown key"),
    "registry rejects the value": ({"grid": {"model.position": ["rope", "ropee"]}},
                                   "grid.model.position: unknown position scheme 'ropee' (did you mean 'rope'?)"),
    "type rejects the value": ({"grid": {"model.n_layers": [1, "two"]}}, "grid.model.n_layers: expected an integer"),
    "clash between settings": ({"grid": {"model.n_heads": [3]}},
                               "grid.model.n_heads: d_model (16) is not divisible by n_heads (3)"),
    "empty grid": ({"grid": {}}, "grid: is empty"),
    "empty axis": ({"grid": {"model.position": []}}, "grid.model.position: has no values"),
    "unequal zip": ({"zip": {"model.n_heads": [1, 2], "model.head_dim": [8]}}, "zip: axes vary together"),
    "baseline matches no variant": ({"grid": GRID, "baseline": {"model.position": "alibii"}},
                                    "baseline: model.position=alibii matches no variant"),
    "baseline names no axis": ({"grid": GRID, "baseline": {"model.norm": "rmsnorm"}},
                               "baseline.model.norm: is not a varied key"),
    "missing base file": ({"base": "nowhere/base.yaml", "grid": GRID}, "base: file not found"),
    "bad override": ({"grid": GRID, "overrides": {"train.max_stepz": 5}}, "overrides.train.max_stepz: unknown key"),
    "unknown spec key": ({"grid": GRID, "seed": [0]}, "seed: unknown sweep key (did you mean 'seeds'?)"),
    "bad metric goal": ({"grid": GRID, "metric": {"name": "val/loss", "goal": "down"}}, "metric.goal:"),
    "bad smallest effect": ({"grid": GRID, "metric": {"name": "val/loss", "min_effect": -0.01}},
                            "metric.min_effect: expected a positive difference in val/loss's units"),
    "seed as an axis": ({"grid": {"seed": [0, 1]}}, "grid.seed: seeds are not an axis"),
    "task problem": ({"grid": GRID, "overrides": {"task.seq_len": 64}}, "overrides.task.seq_len:"),
    "tuning seed is an evaluation seed": ({"grid": GRID, "seeds": [1, 2], "tune": {**TUNE, "seeds": [2]}},
                                          "tune.seeds: seed 2 is also an evaluation seed"),
    "tuning seed is the base seed": ({"grid": GRID, "tune": {**TUNE, "seeds": [0]}},
                                     "tune.seeds: seed 0 is also the evaluation seed"),
    "select metric the task lacks": ({"grid": GRID, "seeds": [1], "tune": {**TUNE, "select": "val/accuracy"}},
                                     "tune.select: the task produces no val/accuracy (did you mean "),
    "select metric not validation": ({"grid": GRID, "seeds": [1], "tune": {**TUNE, "select": "test/loss"}},
                                     "tune.select: test/loss is not a validation metric"),
    "tuned key is an axis": ({"grid": {**GRID, "train.lr": [0.1]}, "seeds": [1], "tune": TUNE},
                             "tune.key: train.lr is also varied by grid"),
    "empty tuning list": ({"grid": GRID, "seeds": [1], "tune": {**TUNE, "values": []}}, "tune.values: has no values"),
    "empty tuning range": ({"grid": GRID, "seeds": [1], "tune": {**TUNE, "values": {"min": 0.1, "max": 0.01,
                                                                                     "n": 3}}},
                           "tune.values: the range is empty: min (0.1) is above max (0.01)"),
    "tuned value the config rejects": ({"grid": GRID, "seeds": [1], "tune": {**TUNE, "key": "train.max_steps",
                                                                             "values": [5, -1]}},
                                       "tune.train.max_steps: must be positive"),
    "halving eta not an integer": ({"grid": GRID, "seeds": [1], "tune": {**TUNE, "halving": {"eta": 2.5,
                                                                                              "min_steps": 5}}},
                                   "tune.halving.eta: expected an integer of at least 2"),
    "halving eta below 2": ({"grid": GRID, "seeds": [1], "tune": {**TUNE, "halving": {"eta": 1, "min_steps": 5}}},
                            "tune.halving.eta: expected an integer of at least 2"),
    "halving min_steps not positive": ({"grid": GRID, "seeds": [1], "tune": {**TUNE, "halving": {"eta": 3,
                                                                                                  "min_steps": 0}}},
                                       "tune.halving.min_steps: expected a positive integer"),
    "halving min_steps not below the budget": ({"grid": GRID, "seeds": [1],
                                                "tune": {**TUNE, "halving": {"eta": 3, "min_steps": 10}}},
                                               "tune.halving.min_steps: must be below train.max_steps (10"),
    "halving min_steps between validations": ({"grid": GRID, "seeds": [1], "overrides": {"train.max_steps": 20,
                                                                                         "train.val_every": 4},
                                               "tune": {**TUNE, "halving": {"eta": 3, "min_steps": 6}}},
                                              "tune.halving.min_steps: must be a multiple of train.val_every (4)"),
    "halving unknown key": ({"grid": GRID, "seeds": [1], "tune": {**TUNE, "halving": {"eta": 3, "min_steps": 5,
                                                                                      "rungs": 3}}},
                            "tune.halving.rungs: unknown sweep key"),
    "halving missing key": ({"grid": GRID, "seeds": [1], "tune": {**TUNE, "halving": {"eta": 3}}},
                            "tune.halving.min_steps: missing"),
    "ladder of two rungs": ({"grid": GRID, "scale": {"sizes": [{"d_model": 16}, {"d_model": 32}]}},
                            "scale: 2 rungs (sizes): a scaling fit L = E + A C^-alpha has 3 parameters and needs at "
                            "least 3 rungs; add sizes, or set scale.fit: false for per-rung tables only"),
    "ladder of two rungs held out": ({"grid": GRID, "scale": {"sizes": [{"d_model": 16}, {"d_model": 32}],
                                                              "holdout": "largest"}}, "scale: 2 rungs (sizes)"),
    "isoflop ladder of two budgets": ({"grid": GRID, "scale": {"sizes": [{"d_model": 16}, {"d_model": 32}],
                                                               "budget": {"flops": [1e8, 4e8]}}},
                                      "scale: 2 rungs (budgets (scale.budget.flops))"),
    "hold-out leaves two rungs": ({"grid": GRID, "scale": {"sizes": [{"d_model": 16}, {"d_model": 24},
                                                                     {"d_model": 32}], "holdout": "largest"}},
                                  "scale.holdout: holding out the largest of 3 rungs leaves 2 to fit; a fit needs 3"),
    "unknown hold-out": ({"grid": GRID, "scale": {"sizes": [{"d_model": 16}, {"d_model": 24}, {"d_model": 32}],
                                                  "holdout": "biggest"}},
                         "scale.holdout: expected one of largest, none"),
    "wandb method": ({"method": "bayes", "parameters": {"model.position": {"values": ["rope"]}}}, "method:"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_spec_is_one_line_naming_the_key(case, spec_dir, tmp_path, capsys):
    spec, expected = CASES[case]
    path = write_spec(spec_dir, spec)
    out = tmp_path / "out"
    code = main(["sweep", str(path), "--out", str(out), "--dry-run" if case.startswith("baseline") else "--workers=1"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("arch-zoo: error: "), err
    assert expected in err, err
    assert not out.exists()  # checked before anything was written


@pytest.mark.parametrize("case", [c for c in CASES if "rung" in c or "budgets" in c or "hold-out" in c])
def test_a_ladder_too_short_to_fit_is_refused_by_the_dry_run_too(case, spec_dir, tmp_path, capsys):
    """Issue 42 item 0: fewer than 3 rungs to fit is refused at --dry-run as before training; scale.fit: false
    (per-rung tables only) lets the same ladder through."""
    spec, expected = CASES[case]
    code = main(["sweep", str(write_spec(spec_dir, spec)), "--out", str(tmp_path / "out"), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and expected in err, err
    tables_only = {**spec, "scale": {k: v for k, v in spec["scale"].items() if k != "holdout"} | {"fit": False}}
    assert main(["sweep", str(write_spec(spec_dir, tables_only)), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "scale.fit: false: the report gives per-rung comparisons only" in out
    lr = BASE["train"].get("lr", TrainConfig.lr)  # item 1: a ladder that tunes no lr names the one its rungs share
    assert (f"note: every rung trains at train.lr = {lr:g}, not tuned per size (scale.lr: tune or transfer, with a "
            "tune key, would tune it): compute multipliers between untuned rungs can grow or shrink with the lr "
            "alone") in out


def test_missing_spec_file_and_bad_flags(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "none.yaml")]) == 2
    assert "sweep: file not found" in capsys.readouterr().err
    path = write_spec(tmp_path, {"grid": GRID})
    assert main(["sweep", str(path), "--launcher", "kubernetes"]) == 2
    assert "invalid choice: 'kubernetes'" in capsys.readouterr().err
    assert main(["sweep", str(path), "--workers", "0"]) == 2
    assert "--workers: must be at least 1" in capsys.readouterr().err


def test_a_changed_spec_that_gives_a_run_a_different_config_is_a_conflict(tmp_path, capsys):
    """Run ids name the variant and seed; what the runs share (here the step budget) is checked
    against what the run dir holds. (The dirs are set up by hand: no training needed.)"""
    from arch_zoo.config.loading import save
    from arch_zoo.sweeps import load_spec, make_plan

    out = tmp_path / "out"
    path = write_spec(tmp_path, {"name": "c", "grid": GRID})
    run = make_plan(load_spec(path)).runs[1]
    (out / "c" / "runs" / run.run_id).mkdir(parents=True)
    save(run.config, out / "c" / "runs" / run.run_id / "config.yaml")
    assert main(["sweep", str(path), "--out", str(out), "--dry-run"]) == 0  # same spec: no conflict
    changed = write_spec(tmp_path, {"name": "c", "grid": GRID, "overrides": {"train.max_steps": 11}})
    capsys.readouterr()
    assert main(["sweep", str(changed), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"run {run.run_id}: " in err and "train.max_steps: 10 there, 11 here" in err, err
    assert sorted(p.name for p in (out / "c" / "runs").iterdir()) == [run.run_id]
    assert BASE["train"]["max_steps"] == 10
