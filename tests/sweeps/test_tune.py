"""README "Per-variant tuning": a spec's ``tune`` trains every variant at every value on the tuning
seeds (stage 1), then each variant at its own best value on the evaluation seeds (stage 2), in one
resumable sweep that survives SIGKILL across both stages; the report shows each variant's tuning
curve and chosen value and warns when the choice is an end of the range (issue 16 §1)."""
import json
import signal
import subprocess

import pytest

from arch_zoo.cli import main
from arch_zoo.reports import write_report
from arch_zoo.sweeps import load_spec, make_plan, run_sweep
from arch_zoo.sweeps.spec import parse_spec
from arch_zoo.sweeps.tune import choose

from .conftest import cli, write_spec
from .test_sigkill import arm, hooked  # noqa: F401 - the kill-hook fixture

SPEC = {"name": "tuned", "grid": {"model.position": ["rope", "alibi"]}, "seeds": [1],
        "baseline": {"model.position": "rope"},
        "tune": {"key": "train.lr", "values": [1.0e-3, 3.0e-2], "seeds": [0], "select": "val/loss"}}


def _spec(tune: dict, **extra):
    return parse_spec({"name": "t", "base": "preset:gpt2", "grid": {"model.position": ["rope"]}, "seeds": [1],
                       "tune": {"key": "train.lr", "seeds": [0], **tune}, **extra})


def test_a_range_is_log_or_linear_spaced():
    assert _spec({"values": {"min": 1.0e-3, "max": 1.0e-1, "n": 3, "log": True}}).tune.values == (0.001, 0.01, 0.1)
    assert _spec({"values": {"min": 0, "max": 100, "n": 5}}).tune.values == (0, 25, 50, 75, 100)
    assert _spec({"values": [3.0e-4, 1.0e-3]}).tune.values == (3.0e-4, 1.0e-3)


def test_the_choice_skips_values_that_failed_on_any_seed_and_flags_the_edge():
    tune = _spec({"values": [1.0e-3, 1.0e-2, 1.0e-1], "seeds": [5, 6]}).tune
    a, b = {"model.position": "rope"}, {"model.position": "alibi"}
    rows = [({**a, "train.lr": 1.0e-3}, 5, "completed", 2.0), ({**a, "train.lr": 1.0e-3}, 6, "completed", 2.2),
            ({**a, "train.lr": 1.0e-2}, 5, "completed", 1.5), ({**a, "train.lr": 1.0e-2}, 6, "completed", 1.7),
            ({**a, "train.lr": 1.0e-1}, 5, "completed", 1.0), ({**a, "train.lr": 1.0e-1}, 6, "diverged", None),
            ({**b, "train.lr": 1.0e-3}, 5, "completed", 1.0), ({**b, "train.lr": 1.0e-3}, 6, "completed", 1.0),
            ({**b, "train.lr": 1.0e-2}, 5, "completed", 1.2), ({**b, "train.lr": 1.0e-2}, 6, "completed", 1.4),
            ({**b, "train.lr": 1.0e-1}, 5, "failed", None), ({**b, "train.lr": 1.0e-1}, 6, "failed", None)]
    rope, alibi = choose(tune, rows).values()
    assert (rope.value, rope.edge, rope.scores[1.0e-1]) == (1.0e-2, None, None)  # 1e-1 diverged once: out
    assert rope.scores[1.0e-2] == pytest.approx(1.6)
    assert (alibi.value, alibi.edge) == (1.0e-3, "smallest")


def test_a_component_axis_keeps_every_variant_in_stage_two(spec_dir):
    """A component value given as a mapping ({name: swiglu}) is recorded as text in run.json; stage 2
    finds each variant's choice all the same, none is left out."""
    from arch_zoo.sweeps.plan import second_plan

    spec = load_spec(write_spec(spec_dir, {"name": "t", "grid": {"model.ffn": ["gelu", {"name": "swiglu"}]},
                                           "seeds": [1], "tune": {"key": "train.lr", "seeds": [0],
                                                                  "values": [1.0e-3, 1.0e-2]}}))
    runs = make_plan(spec).runs
    scores = {("gelu", 1.0e-3): 2.0, ("gelu", 1.0e-2): 1.0, ("{name: swiglu}", 1.0e-3): 1.0,
              ("{name: swiglu}", 1.0e-2): 2.0}
    rows = [(r.settings, r.seed, "completed", scores[(r.settings["model.ffn"], r.settings["train.lr"])]) for r in runs]
    second = second_plan(spec, choose(spec.tune, rows)).runs
    assert sorted((r.config.model.ffn.name, r.config.train.lr) for r in second) == [("gelu", 1.0e-2),
                                                                                    ("swiglu", 1.0e-3)]


RULE = {"values": [1.0e-3, 3.0e-2], "select": "val/loss", "goal": "min", "halving": None}


def test_each_stage_one_run_records_the_rule_it_is_chosen_by(spec_dir):
    """run.json's tune: the values in the order tried (ties go to the first), select and goal, so
    a report recomputes stage 2's choice from the runs alone; wandb's 'maximize' is stored as max."""
    spec = {**SPEC, "tune": {**SPEC["tune"], "values": [3.0e-2, 1.0e-3],
                             "select": {"name": "val/token_accuracy", "goal": "maximize"}}}
    plan = make_plan(load_spec(write_spec(spec_dir, spec)))
    record = plan.runs[0].record("tuned")["tune"]
    assert record == {"stage": "tune", "key": "train.lr", "value": record["value"], "variant": record["variant"],
                      "values": [3.0e-2, 1.0e-3], "select": "val/token_accuracy", "goal": "max", "halving": None}


def test_dry_run_shows_both_stages(spec_dir, tmp_path, capsys):
    path = write_spec(spec_dir, SPEC)
    assert main(["sweep", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "stage 1 (tuning train.lr on seeds 0)" in out and "position=alibi,lr=0.03" in out
    assert out.count("train.lr=chosen after stage 1") == 2 and "4 runs in stage 1, 2 runs in stage 2" in out
    assert not (tmp_path / "out").exists()


def test_one_progress_counter_runs_over_both_stages(spec_dir, tmp_path):
    """Four tuning runs, then two at the chosen values: [1/6] to [6/6], not [1/4] .. [4/4], [5/6]."""
    import re

    from .conftest import BASE

    path = write_spec(spec_dir, SPEC, {**BASE, "train": {**BASE["train"], "max_steps": 2, "val_every": 2}})
    lines = []
    outcome = run_sweep(load_spec(path), tmp_path / "out", log=lines.append)
    counters = [tuple(map(int, m.groups())) for m in (re.match(r"\[(\d+)/(\d+)\] ", line) for line in lines) if m]
    assert len(outcome.plan.runs) == 6 and counters == [(k, 6) for k in range(1, 7)], lines
    assert any(line.startswith("stage 1: position=") for line in lines)


def _finals(outcome) -> dict:
    return {r.run_id: json.loads((outcome.store.run_dir(r.run_id) / "summary.json").read_text())["final"]
            for r in outcome.plan.runs}


@pytest.mark.slow  # ~1 min: make test-slow
def test_sigkill_between_the_stages_then_resume_gives_the_uninterrupted_result(spec_dir, tmp_path, hooked):  # noqa: F811
    path = write_spec(spec_dir, SPEC)
    reference = run_sweep(load_spec(path), tmp_path / "ref", log=lambda line: None)
    first = [r for r in reference.plan.runs if r.tune["stage"] == "tune"]
    second = [r for r in reference.plan.runs if r.tune["stage"] == "eval"]
    assert len(first) == 4 and len(second) == 2 and {r.seed for r in second} == {1}
    finals = _finals(reference)
    for run in second:  # each variant at the value with the lowest stage-1 val/loss
        tried = {r.settings["train.lr"]: finals[r.run_id]["val/loss"] for r in first
                 if r.settings["model.position"] == run.settings["model.position"]}
        assert run.settings["train.lr"] == min(tried, key=tried.get)
        record = json.loads((reference.store.run_dir(run.run_id) / "run.json").read_text())
        assert record["tune"] == {"stage": "eval", "key": "train.lr", "value": run.settings["train.lr"],
                                  "variant": f"position={run.settings['model.position']}", **RULE}

    out = tmp_path / "out"
    arm(hooked, ("rename", "run.json", 5), "group", 1)  # the first stage-2 run.json, torn mid-write
    proc = subprocess.run(cli("sweep", path, "--out", out), start_new_session=True, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == -signal.SIGKILL and not hooked.exists(), proc.stderr[-2000:]
    assert "stage 1: position=rope trains at" in proc.stdout
    resumed = run_sweep(load_spec(path), out, log=lambda line: None)
    assert sorted(resumed.results) == sorted(r.run_id for r in second)  # stage 1 was kept, not retrained
    assert _finals(resumed) == finals
    again = run_sweep(load_spec(path), out, log=lambda line: None)
    assert {r.outcome for r in again.results.values()} <= {"skipped"} and _finals(again) == finals

    report = write_report(out / "tuned", tmp_path / "report", formats="md,csv,plots")
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Tuning (stage 1): val/loss against train.lr" in md
    assert (tmp_path / "report" / "plots" / "tuning.png").is_file() and report
    assert "warning: the best train.lr for position=" in md  # two values: the choice is always an end
    compared = (tmp_path / "report" / "runs.csv").read_text().splitlines()
    assert len(compared) == 3 and all(",1," in line for line in compared[1:])  # the table: stage 2's seed-1 runs
    assert (tmp_path / "report" / "tuning.csv").read_text().count("\n") == 5  # header + 4 stage-1 runs


def test_a_tuned_spec_cannot_be_exported_to_wandb(spec_dir, tmp_path, capsys):
    path = write_spec(spec_dir, SPEC)
    assert main(["sweep", str(path), "--export-wandb", "--out", str(tmp_path / "out")]) == 2
    assert "tune: a wandb sweep has no second stage" in capsys.readouterr().err
    assert len(make_plan(load_spec(path)).runs) == 4
