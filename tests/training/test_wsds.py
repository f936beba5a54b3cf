"""WSD-S (issue 56, item 1): one run with ``decays`` trains its stable phase once and records each
decay branch as a run of its own length, equal to the separate wsd run of that length with the same
seed; a SIGKILL during a branch loses nothing."""
import copy
import json
import signal
import subprocess
import sys
import time

import pytest
import yaml

from arch_zoo.cli import main
from arch_zoo.experiment import load
from arch_zoo.recipes.wsds import branches, saved_steps, step_tokens
from arch_zoo.training import run_one
from arch_zoo.training.run import prepare
from tests.training.test_resume import DRIVER, assert_same_files, summary

# 16 steps, validation every 4, decays of a quarter of each run: branch 8 forks at step 6 (between
# validations), branch 11 at step 8 (a validation step); dropout makes the RNG state matter
CONFIG = {"name": "w", "seed": 3,
          "model": {"kind": "decoder", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64, "max_seq_len": 32,
                    "position": "rope", "dropout": 0.1},
          "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
          "train": {"progress_bar": False, "log_every": 1, "max_steps": 16, "batch_size": 8, "val_every": 4,
                    "val_batches": 2, "warmup_steps": 2,
                    "schedule": {"name": "wsd", "decay_fraction": 0.25, "decays": [0.5, 0.6875, 1.0]}}}


# the same budgets as token counts: each step trains batch_size x seq_len = 256 tokens, so 2000 tokens
# are step 8 (7.8 steps), 2816 are step 11 and 4096 the whole run
TOKENS = copy.deepcopy(CONFIG)
TOKENS["train"]["schedule"] = {"name": "wsd", "decay_fraction": 0.25, "decay_tokens": [2000, 2816, 4096]}
STEP_TOKENS = 8 * 32


def separate(steps):
    cfg = copy.deepcopy(CONFIG)
    cfg["train"]["max_steps"] = steps
    cfg["train"]["schedule"] = {"name": "wsd", "decay_fraction": 0.25}
    return cfg


def test_the_plan_forks_each_budget_where_its_own_decay_starts_and_counts_the_steps_saved():
    train = load(CONFIG).train
    assert [(b.steps, b.fork) for b in branches(train)] == [(8, 6), (11, 8)]  # 8 - round(2), 11 - round(2.75)
    assert saved_steps(train) == {"budgets": [8, 11, 16], "steps": 16 + 2 + 3, "separate_steps": 16 + 8 + 11,
                                  "saved_steps": 14}
    assert branches(load(separate(16)).train) == []


def test_token_budgets_branch_at_the_steps_that_train_those_tokens():
    cfg = load(TOKENS)
    per_step = step_tokens(cfg, prepare(cfg, quiet=True).splits["train"])
    assert per_step == STEP_TOKENS
    assert [(b.steps, b.fork, b.budget, b.tokens) for b in branches(cfg.train, per_step)] == [
        (8, 6, 2000, 8 * STEP_TOKENS), (11, 8, 2816, 11 * STEP_TOKENS)]
    assert saved_steps(cfg.train, per_step) == saved_steps(load(CONFIG).train)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("wsds")
    result = run_one(load(CONFIG), root / "run", quiet=True)
    assert result.status == "completed"
    alone = {steps: root / f"alone{steps}" for steps in (8, 11, 16)}
    for steps, out in alone.items():
        assert run_one(load(separate(steps)), out, quiet=True).status == "completed"
    return root / "run", result, alone


@pytest.mark.parametrize("steps", [8, 11])
def test_a_branch_equals_the_separate_run_of_its_length_with_the_same_seed(runs, steps):
    run, _, alone = runs
    branch = run / "branches" / str(steps)
    assert_same_files(branch, alone[steps])  # every metrics.csv row (lr included) and the final metrics
    s = summary(branch)
    assert s["status"] == "completed" and s["step"] == steps
    assert s["resumed_from_step"] == {8: 6, 11: 8}[steps]
    assert s["flops_per_token"] == summary(alone[steps])["flops_per_token"]


def test_the_run_itself_is_the_budget_at_one_and_its_forks_change_nothing_of_it(runs):
    run, result, alone = runs
    assert_same_files(run, alone[16])
    recorded = {b["steps"]: (b["status"], b["fork"], b["dir"]) for b in result.summary["branches"]}
    assert recorded == {8: ("completed", 6, "branches/8"), 11: ("completed", 8, "branches/11")}
    assert [a["outcome"] for a in summary(run)["attempts"]] == ["forked", "forked", "completed"]


def test_a_sigkill_during_a_branch_loses_nothing(tmp_path, runs):
    run, _, alone = runs
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(CONFIG))
    out = tmp_path / "run"
    cmd = [sys.executable, "-c", DRIVER, "train", str(cfg_file), "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    branch = out / "branches" / "11"
    deadline = time.monotonic() + 300
    while (json.loads((branch / "status.json").read_text()) if (branch / "status.json").exists() else {}).get(
            "status") != "running":
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (branch / "summary.json").exists()  # killed inside the branch
    assert json.loads((out / "status.json").read_text())["status"] == "running"  # the run waits for its branches
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    for steps, where in ((8, out / "branches" / "8"), (11, branch), (16, out)):
        assert_same_files(where, alone[steps])


def test_a_run_with_token_budgets_branches_at_them_and_each_branch_equals_its_separate_run(tmp_path, runs):
    _, _, alone = runs
    result = run_one(load(TOKENS), tmp_path / "run", quiet=True)
    assert result.status == "completed"
    recorded = {b["steps"]: b["tokens"] for b in result.summary["branches"]}
    assert recorded == {8: 8 * STEP_TOKENS, 11: 2816}
    assert abs(recorded[8] - 2000) <= STEP_TOKENS / 2  # the steps nearest to the count asked for
    for steps in (8, 11):
        assert_same_files(tmp_path / "run" / "branches" / str(steps), alone[steps])
    assert_same_files(tmp_path / "run", alone[16])


@pytest.mark.parametrize("schedule, task, line", [
    ({"decay_tokens": [2000, 5000]}, None, "train.schedule.decay_tokens: 5,000 is above the run's 4,096 training "
     "tokens (train.max_steps=16 x 256 tokens per step)"),
    ({"decay_tokens": [2816, 2000]}, None, "train.schedule.decay_tokens: must be in increasing order"),
    ({"decay_tokens": [0, 2000]}, None, "train.schedule.decay_tokens: training token counts > 0, got [0, 2000]"),
    ({"decay_tokens": [100]}, {"name": "copy"}, "train.schedule.decay_tokens: task copy's steps do not all train the "
     "same number of tokens"),
])
def test_bad_token_budgets_are_one_line_exit_2_and_nothing_written(tmp_path, capsys, schedule, task, line):
    cfg = copy.deepcopy(TOKENS)
    cfg["train"]["schedule"] = {"name": "wsd", **schedule}
    cfg["task"] = task or cfg["task"]
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["train", str(tmp_path / "cfg.yaml"), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and line in err[0], err
    assert not (tmp_path / "run").exists()
