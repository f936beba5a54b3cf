"""WSD-S in a sweep (issue 56, item 1): --dry-run shows each variant's budgets and the compute saved
against separate runs; a trained sweep's decay branches are rows of the run store, like runs of
their own length (settings, tokens, FLOPs), and the report reads them."""
import copy
import re

import pytest

from arch_zoo.cli import main
from arch_zoo.reports.load import load_runs
from arch_zoo.sweeps import load_spec, make_plan

from .conftest import BASE, write_spec

WSDS = copy.deepcopy(BASE)
WSDS["train"].update(max_steps=20, warmup_steps=2, val_every=5,
                     schedule={"name": "wsd", "decay_fraction": 0.2, "decays": [0.5, 1.0]})


def test_the_dry_run_shows_the_branches_and_the_compute_saved_against_separate_runs(tmp_path, capsys):
    path = write_spec(tmp_path, {"name": "d", "grid": {"model.position": ["rope", "alibi"]}, "seeds": [0, 1]}, WSDS)
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    plan = make_plan(load_spec(path))
    flops_per_step = [r.budget["flops"] / r.budget["steps"] for r in plan.runs]
    # each run: 20 steps + the branch's 2 decay steps (10 - round(0.2 * 10), forking at 8), against 20 + 10
    rows = [line for line in out.splitlines() if line.startswith(("position=rope", "position=alibi"))
            and "(fork" in line]
    tokens = f"{10 * 8 * 32:,}, {20 * 8 * 32:,}"  # steps x batch_size x seq_len
    assert [re.split(r"\s{2,}", line) for line in rows] == [
        ["position=rope *", "10 (fork 8), 20", tokens, "22", "30"], ["position=alibi", "10 (fork 8), 20", tokens, "22", "30"]]
    flops, separate = sum(22 * f for f in flops_per_step), sum(30 * f for f in flops_per_step)
    assert (f"WSD-S: 4 runs train 88 steps ({flops:.3e} train FLOPs) for 8 budget points; as separate runs "
            f"120 steps ({separate:.3e} FLOPs): 27% saved") in out
    assert not (tmp_path / "out").exists()


def _token_spec(tmp_path, decay_tokens):
    base = copy.deepcopy(WSDS)
    base["train"]["schedule"] = {"name": "wsd", "decay_fraction": 0.2, "decay_tokens": decay_tokens}
    return write_spec(tmp_path, {"name": "t", "grid": {"train.batch_size": [8, 4]}, "seeds": [0], "budget": "tokens"},
                      base)


def test_under_a_tokens_budget_every_variant_branches_at_the_same_tokens(tmp_path, capsys):
    path = _token_spec(tmp_path, [2560])
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    rows = [re.split(r"\s{2,}", line) for line in out.splitlines() if "(fork" in line]
    # batch 8 trains 256 tokens a step over 20 steps, batch 4 half that over the 40 the budget gives it:
    # both branch at 2,560 tokens, 10 and 20 steps (decays of 2 and 4 steps)
    assert [row[1:] for row in rows] == [["10 (fork 8), 20", "2,560, 5,120", "22", "30"],
                                         ["20 (fork 16), 40", "2,560, 5,120", "44", "60"]]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("decay_tokens, line", [
    ([2560, 6000], "train.schedule.decay_tokens: 6,000 is above the run's 5,120 training tokens"),
    ([2560, 0], "train.schedule.decay_tokens: training token counts > 0"),
])
def test_bad_token_budgets_stop_the_dry_run_in_one_line(tmp_path, capsys, decay_tokens, line):
    path = _token_spec(tmp_path, decay_tokens)
    assert main(["sweep", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and line in err[0], err
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("wsds_sweep")
    path = write_spec(root, {"name": "b", "seeds": [0]}, WSDS)
    assert main(["sweep", str(path), "--out", str(root / "out")]) == 0
    return root / "out" / "b"


def test_a_sweeps_branches_are_rows_of_the_store_at_their_own_steps_tokens_and_flops(sweep):
    frame = load_runs(sweep).set_index("variant")
    assert sorted(frame.index) == ["budget=0.5", "budget=1.0"]  # the fraction of the run: shared across a ladder's sizes
    run, branch = frame.loc["budget=1.0"], frame.loc["budget=0.5"]
    assert (run["wsds.budget"], branch["wsds.budget"]) == (1.0, 0.5)
    assert (run["step"], branch["step"]) == (20, 10) and branch["status"] == "completed"
    assert branch["train_tokens"] == pytest.approx(run["train_tokens"] / 2)
    assert branch["train_flops"] == pytest.approx(run["train_flops"] / 2)
    assert branch["run_dir"] == str(sweep / "runs" / run["run_id"] / "branches" / "10")
    assert branch["val/loss"] > run["val/loss"]  # half the training


def test_the_report_reads_the_branches_as_runs(sweep, tmp_path):
    assert main(["report", str(sweep), "--out", str(tmp_path / "rep"), "--format", "csv", "--quiet"]) == 0
    text = "".join(p.read_text() for p in (tmp_path / "rep").rglob("*.csv"))
    assert "budget=0.5" in text and "budget=1.0" in text


def test_a_sweeps_token_budgets_are_rows_at_those_tokens_for_every_variant(tmp_path):
    path = _token_spec(tmp_path, [2560])
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 0
    frame = load_runs(tmp_path / "out" / "t").set_index("variant")
    branch = frame.loc[["batch_size=8,budget=2560", "batch_size=4,budget=2560"]]
    assert list(branch["step"]) == [10, 20] and list(branch["wsds.budget"]) == [2560, 2560]
    assert list(branch["train_tokens"]) == pytest.approx([2560, 2560])
    assert list(frame.loc[["batch_size=8,budget=1.0", "batch_size=4,budget=1.0"], "train_tokens"]) == \
        pytest.approx([5120, 5120])
