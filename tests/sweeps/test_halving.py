"""README "Per-variant tuning", successive halving (issue 16): ``tune.halving: {eta, min_steps}``
stops hopeless values of stage 1 at rungs min_steps * eta**k, every decision a pure function of the
run store, so a sweep SIGKILLed at any moment and rerun takes the same decisions and retrains
nothing it finished; a promoted run ends exactly as the same run trained in one go."""
import csv
import json
import os
import signal
import subprocess
import time

import pytest

from arch_zoo.cli import main
from arch_zoo.sweeps import load_spec, make_plan, run_sweep
from arch_zoo.sweeps.fields import Halving, TuneSpec
from arch_zoo.sweeps.halving import RunState, climb, kept, ladder_sizes, rungs, steps_per_seed
from arch_zoo.training.run import run_one

from .conftest import BASE, cli, write_spec

TRAIN = {**BASE["train"], "max_steps": 16, "val_every": 4, "log_every": 4}
SPEC = {"name": "halved", "grid": {"model.position": ["rope"]}, "seeds": [1],
        "tune": {"key": "train.lr", "values": [1.0e-4, 3.0e-3, 3.0e-2], "seeds": [0],
                 "halving": {"eta": 2, "min_steps": 4}}}  # rungs 4, 8, 16: 3 values, then 2, then 1


def test_rungs_grow_by_eta_below_the_budget_then_end_at_it():
    assert rungs(Halving(3, 2), 20) == (2, 6, 18, 20)
    assert rungs(Halving(3, 2), 18) == (2, 6, 18)  # a rung at max_steps is the end itself
    assert rungs(Halving(2, 5), 6) == (5, 6)
    assert [kept(n, 3) for n in (1, 2, 3, 4, 9, 10)] == [1, 1, 1, 2, 3, 4]
    assert ladder_sizes(9, Halving(3, 2), 20) == [(2, 9), (6, 3), (18, 1), (20, 1)]
    assert steps_per_seed(9, Halving(3, 2), 20) == 9 * 2 + 3 * 4 + 1 * 12 + 1 * 2
    assert steps_per_seed(3, Halving(2, 4), 16) == 3 * 4 + 2 * 4 + 1 * 8


def _tune(values=(1, 2, 3, 4), seeds=(0, 1), goal="min", eta=2):
    return TuneSpec("train.lr", tuple(values), tuple(seeds), "val/loss", goal, Halving(eta, 2))


def test_a_rung_waits_for_every_alive_value_on_every_seed_then_keeps_the_best_fraction():
    tune = _tune()
    states = [RunState(v, s, "paused", {2: 5.0 - v + 0.1 * s}) for v in (1, 2, 3, 4) for s in (0, 1)][:-1]
    ladder = climb(tune, (2, 4, 8), states + [RunState(4, 1, "running", {})])
    assert ladder.target == {4: 2} and not ladder.cuts  # value 4, seed 1 has not reached step 2
    states.append(RunState(4, 1, "paused", {2: 1.1}))
    ladder = climb(tune, (2, 4, 8), states)
    assert ladder.target == {4: 4, 3: 4} and ladder.alive == [4, 3]  # ranked by the mean over the seeds
    assert {v: (c.step, round(c.score, 2)) for v, c in ladder.cuts.items()} == {2: (2, 3.05), 1: (2, 4.05)}
    assert ladder.cuts[1].why == "val/loss ranked 4 of 4 at step 2"
    # value 3 diverges on seed 0 before step 4: dropped there, and 4 goes on alone
    states = [s for s in states if s.value in (1, 2)] + [
        RunState(3, 0, "diverged", {2: 2.05}), RunState(3, 1, "paused", {2: 2.05, 4: 1.0}),
        RunState(4, 0, "paused", {2: 1.0, 4: 0.9}), RunState(4, 1, "completed", {2: 1.1, 4: 0.8, 8: 0.5})]
    ladder = climb(tune, (2, 4, 8), states)
    assert ladder.target == {4: 8} and ladder.cuts[3].score is None and "diverged or failed" in ladder.cuts[3].why
    states[-2] = RunState(4, 0, "completed", {2: 1.0, 4: 0.9, 8: 0.6})
    ladder = climb(tune, (2, 4, 8), states)
    assert ladder.done and ladder.alive == [4] and ladder.scores[8] == {4: pytest.approx(0.55)}


def test_ties_go_to_the_value_tried_first_and_max_goals_keep_the_largest():
    same = [RunState(v, 0, "paused", {2: 1.0}) for v in (1, 2, 3)]
    assert climb(_tune((1, 2, 3), (0,), eta=3), (2, 4), same).alive == [1]
    up = [RunState(v, 0, "paused", {2: float(v)}) for v in (1, 2, 3)]
    assert climb(_tune((1, 2, 3), (0,), goal="max", eta=3), (2, 4), up).target == {3: 4}
    nan = [RunState(1, 0, "paused", {2: float("nan")}), RunState(2, 0, "paused", {2: 9.0})]
    assert climb(_tune((1, 2), (0,), eta=3), (2, 4), nan).target == {2: 4}  # a non-finite metric is dropped


def test_dry_run_shows_the_rungs_and_stage_one_steps_with_and_without_halving(spec_dir, tmp_path, capsys):
    path = write_spec(spec_dir, SPEC, {**BASE, "train": TRAIN})
    assert main(["sweep", str(path), "--dry-run", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "successive halving (eta 2, min_steps 4): at each rung a variant keeps its best 1/2" in out
    assert "4: 3, 8: 2, 16: 1" in out and "stage-1 steps: 28 with halving (at most), 48 without (-42%)" in out
    assert "3 runs in stage 1, 1 run in stage 2" in out and not (tmp_path / "out").exists()


def test_each_round_is_decided_from_the_run_dirs_alone(spec_dir, tmp_path):
    """next_round on hand-written run dirs: the same store always gives the same round; cut values'
    runs are recorded as pruned; --retry-failed counts a diverged run as not yet trained."""
    from arch_zoo.sweeps.rungs import cut_runs, next_round
    from arch_zoo.sweeps.store import Store, write_json

    plan = make_plan(load_spec(write_spec(spec_dir, SPEC, {**BASE, "train": TRAIN})))
    store = Store(tmp_path / "store")
    store.write_plan(plan)
    low, mid, high = (r.run_id for r in plan.runs)  # lr 1e-4, 3e-3, 3e-2
    logs = []

    def put(run_id, status, **rungs):
        write_json(store.run_dir(run_id) / "status.json", {"status": status, "step": max(map(int, rungs), default=0),
                                                           "rungs": {k: {"val/loss": v} for k, v in rungs.items()}})

    put(low, "paused", **{"4": 3.0})
    put(mid, "diverged")
    put(high, "paused", **{"4": 2.0})
    assert next_round(plan, store, False, logs.append) == {low: 8, high: 8}  # mid dropped; ceil(3/2) = 2 go on
    assert next_round(plan, store, True, logs.append) == {mid: 4}  # retried: rung 4 waits for it again
    put(low, "paused", **{"4": 3.0, "8": 2.5})
    put(high, "paused", **{"4": 2.0, "8": 1.5})
    for _ in range(2):
        assert next_round(plan, store, False, logs.append) == {high: None}  # to train.max_steps
        assert store.status(low)["status"] == "pruned" and store.status(low)["pruned_at"] == 8
    assert store.status(low)["reason"] == "pruned at step 8: val/loss ranked 2 of 2 at step 8"
    assert cut_runs(plan, store) == {low, mid} and "stage 1: position=rope,lr=0.0001 s0 pruned at step 8 (val/loss " \
        "2.5000)" in logs


def test_a_completed_value_cut_by_a_retried_rung_is_marked_so_the_report_never_chooses_it(spec_dir, tmp_path):
    """--retry-failed reruns a value that diverged before rung 4; its score there cuts a value whose run
    had already completed: status.json keeps "completed" and the results but records pruned_at, and
    the report's tuning table (like stage 2) shows it pruned at that rung and chooses among the rest."""
    from arch_zoo.reports.runstore import read_run
    from arch_zoo.reports.tuning import choices, tuning_record, tuning_table
    from arch_zoo.sweeps.rungs import cut_runs, next_round
    from arch_zoo.sweeps.store import Store, write_json

    plan = make_plan(load_spec(write_spec(spec_dir, SPEC, {**BASE, "train": TRAIN})))
    store = Store(tmp_path / "store")
    store.write_plan(plan)
    low, mid, high = (r.run_id for r in plan.runs)  # lr 1e-4, 3e-3, 3e-2
    for run_id, rung4, rung8, final in ((low, 3.0, 0.6, 0.5), (high, 2.0, 1.0, 0.9)):  # both trained to 16
        write_json(store.run_dir(run_id) / "status.json", {"status": "completed", "step": 16, "rungs": {
            "4": {"val/loss": rung4}, "8": {"val/loss": rung8}}})
        write_json(store.run_dir(run_id) / "summary.json", {"status": "completed", "final": {"val/loss": final}})
    write_json(store.run_dir(mid) / "status.json", {"status": "paused", "step": 4, "rungs": {"4": {"val/loss": 1.0}}})
    assert next_round(plan, store, False, print) == {mid: 8}  # rung 4 now: mid 1.0, high 2.0 on; low cut
    assert cut_runs(plan, store) == {low}
    status = store.status(low)
    assert status["status"] == "completed" and status["pruned_at"] == 4 and "then cut at step 4" in status["reason"]
    rows = [read_run(store.run_dir(r), "halved") for r in (low, mid, high)]
    for row, value in zip(rows, (1.0e-4, 3.0e-3, 3.0e-2)):
        row["_tune"] = {"stage": "tune", "key": "train.lr", "variant": "position=rope", "value": value}
    rows[1]["status"], rows[1]["_metrics"] = "completed", {"val/loss": 0.7}  # mid trained on and finished
    record = tuning_record(rows, {"tune": SPEC["tune"]})
    assert [r["status"] for r in record["runs"]] == ["pruned", "completed", "completed"]
    assert choices(record)["position=rope"].value == 3.0e-3  # not low's 0.5: it was cut at rung 4
    assert tuning_table(record).iloc[0]["0.0001"] == "3.000 (pruned at step 4)"
    write_json(store.run_dir(mid) / "status.json", {"status": "paused", "step": 4, "rungs": {"4": {"val/loss": 9.0}}})
    next_round(plan, store, False, print)  # a decision that no longer cuts low takes the mark back
    assert "pruned_at" not in store.status(low) and cut_runs(plan, store) == {mid, high}  # high: at rung 8
    assert store.status(high)["pruned_at"] == 8 and store.status(high)["status"] == "completed"


def _status(out, run_id):
    return json.loads((out / "halved" / "runs" / run_id / "status.json").read_text())


def _val_rows(run_dir):
    with (run_dir / "metrics.csv").open() as f:
        return [(int(r["step"]), r["val/loss"]) for r in csv.DictReader(f) if r.get("val/loss")]


def _kill_at_first_pause(path, out) -> subprocess.CompletedProcess:
    """Run the sweep as a command and SIGKILL it (and its workers) once any run is paused at a rung."""
    proc = subprocess.Popen(cli("sweep", path, "--out", out), start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline:
        if any('"paused"' in p.read_text() for p in (out / "halved" / "runs").glob("*/status.json")
               if p.is_file()):
            os.killpg(proc.pid, signal.SIGKILL)
            break
        time.sleep(0.01)
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def test_halving_prunes_at_rungs_survives_sigkill_and_the_promoted_run_equals_an_unhalved_one(spec_dir, tmp_path):
    path = write_spec(spec_dir, SPEC, {**BASE, "train": TRAIN})
    out = tmp_path / "out"
    killed = _kill_at_first_pause(path, out)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    lines = []
    resumed = run_sweep(load_spec(path), out, log=lines.append)
    stage1 = [r for r in resumed.plan.runs if r.tune["stage"] == "tune"]
    status = {r.settings["train.lr"]: _status(out, r.run_id) for r in stage1}
    by_end = sorted(status, key=lambda v: status[v].get("pruned_at") or TRAIN["max_steps"])
    worst, second, best = by_end
    assert [status[v]["status"] for v in by_end] == ["pruned", "pruned", "completed"], lines
    assert (status[worst]["pruned_at"], status[second]["pruned_at"]) == (4, 8)
    assert status[worst]["reason"] == "pruned at step 4: val/loss ranked 3 of 3 at step 4"
    at4 = {v: s["rungs"]["4"]["val/loss"] for v, s in status.items()}
    assert at4[worst] == max(at4.values()) and status[second]["rungs"]["8"]["val/loss"] > status[best]["rungs"]["8"][
        "val/loss"]
    runs = {r.settings["train.lr"]: r for r in stage1}
    for v, stop in ((worst, 4), (second, 8), (best, 16)):  # each metrics.csv ends at its rung's validation
        run_dir = out / "halved" / "runs" / runs[v].run_id
        assert max(step for step, _ in _val_rows(run_dir)) == stop  # (at trainer.global_step)
        attempts = status[v]["attempts"]  # each call resumed where the last checkpoint left the run
        assert all(b["from_step"] == a["step"] for a, b in zip(attempts, attempts[1:])), attempts
    assert not (out / "halved" / "runs" / runs[worst].run_id / "summary.json").exists()
    second_stage = [r for r in resumed.plan.runs if r.tune["stage"] == "eval"]
    assert [r.settings["train.lr"] for r in second_stage] == [best] and resumed.problems() == []

    alone = run_one(runs[best].config, tmp_path / "alone", quiet=True)  # the same run, never stopped
    promoted = json.loads((out / "halved" / "runs" / runs[best].run_id / "summary.json").read_text())
    assert promoted["final"] == pytest.approx(alone.metrics, rel=1e-6, abs=1e-8)
    rows, alone_rows = _val_rows(out / "halved" / "runs" / runs[best].run_id), _val_rows(tmp_path / "alone")
    assert [s for s, _ in rows] == [s for s, _ in alone_rows] == [4, 8, 12, 16]  # no extra validation at the rungs
    assert [float(x) for _, x in rows] == pytest.approx([float(x) for _, x in alone_rows], rel=1e-6)

    again = run_sweep(load_spec(path), out, log=lines.append)  # the same command once more: nothing to train
    assert all(r.outcome != "trained" for r in again.results.values())
    assert {r.run_id: _status(out, r.run_id)["status"] for r in stage1} == {
        r.run_id: status[r.settings["train.lr"]]["status"] for r in stage1}


def test_halving_added_to_a_sweep_trained_without_it_decides_its_rungs_from_the_finished_runs(spec_dir, tmp_path):
    """Completed runs have no rung records; their checkpoints' validation history holds the rung
    metrics, so adding tune.halving afterwards retrains nothing and still decides every rung."""
    plain = {**SPEC, "tune": {k: v for k, v in SPEC["tune"].items() if k != "halving"}}
    out = tmp_path / "out"
    first = run_sweep(load_spec(write_spec(spec_dir, plain, {**BASE, "train": TRAIN})), out, log=lambda _: None)
    assert first.problems() == []
    lines = []
    again = run_sweep(load_spec(write_spec(spec_dir, SPEC, {**BASE, "train": TRAIN})), out, log=lines.append)
    stage1 = [r for r in again.plan.runs if r.tune["stage"] == "tune"]
    assert all(_status(out, r.run_id)["status"] == "completed" for r in stage1)
    assert not any("rerun the same command" in line for line in lines), lines
    from arch_zoo.sweeps.rungs import ladders

    (ladder, _, _), = ladders(again.plan, again.store).values()
    assert ladder.done and len(ladder.cuts) == 2 and sorted(c.step for c in ladder.cuts.values()) == [4, 8]
    eval_runs = [r for r in again.plan.runs if r.tune["stage"] == "eval"]
    assert [r.settings["train.lr"] for r in eval_runs] == ladder.alive and again.problems() == []
