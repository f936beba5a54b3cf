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
    assert [re.split(r"\s{2,}", line) for line in rows] == [
        ["position=rope *", "10 (fork 8), 20", "22", "30"], ["position=alibi", "10 (fork 8), 20", "22", "30"]]
    flops, separate = sum(22 * f for f in flops_per_step), sum(30 * f for f in flops_per_step)
    assert (f"WSD-S: 4 runs train 88 steps ({flops:.3e} train FLOPs) for 8 budget points; as separate runs "
            f"120 steps ({separate:.3e} FLOPs): 27% saved") in out
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
