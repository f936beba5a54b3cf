"""Sweeps that train: the run store, failures as data, resume after SIGKILL, two processes on one
store. Runs are 10-60 steps of a d_model-16 model; most of the time goes to starting workers."""
import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from arch_zoo.cli import main
from arch_zoo.reports.provenance import sweep_calls
from arch_zoo.sweeps import load_spec, make_plan, run_sweep
from arch_zoo.sweeps.store import run_lock

from .conftest import BASE, cli, write_spec

ZIP = {"train.lr": [1.0e-3, 1.0e6, 1.0e-3], "train.strategy": ["auto", "auto", "bogus"]}  # fine, diverges, crashes


def index(out: Path, name: str):
    with (out / name / "index.csv").open() as f:
        return list(csv.DictReader(f))


def snapshot(run_dir: Path) -> dict:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in run_dir.iterdir() if p.is_file()}


def train_steps(run_dir: Path) -> list:
    with (run_dir / "metrics.csv").open() as f:
        return [int(r["step"]) for r in csv.DictReader(f) if r.get("train/loss")]


def test_failures_are_data_the_sweep_goes_on_and_reruns_leave_finished_runs(tmp_path, capsys, monkeypatch):
    from arch_zoo.cli import sweep_support as cli_support

    preloads = []  # the CLI imports the report libraries while workers train, only when runs are launched
    monkeypatch.setattr(cli_support, "preload_reports", lambda: preloads.append(1))
    path, out = write_spec(tmp_path, {"name": "f", "description": "Three runs: one fine, one diverging, one crashing.",
                                      "zip": ZIP}), tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("arch-zoo: 2 of 3 runs did not complete: lr=1000000.0,strategy=auto s0: "
                                               "diverged (non-finite training loss at step"), err
    assert "; lr=0.001,strategy=bogus s0: failed (ConfigError: train.strategy: unknown Lightning strategy 'bogus'" in err[0]
    rows = index(out, "f")
    assert list(rows[0]) == ["run_id", "variant", "seed", "status", "reason", "train.lr", "train.strategy"]
    assert [(r["variant"], r["status"]) for r in rows] == [
        ("lr=0.001,strategy=auto", "completed"), ("lr=1000000.0,strategy=auto", "diverged"),
        ("lr=0.001,strategy=bogus", "failed")]
    assert rows[1]["reason"].startswith("non-finite training loss at step") and rows[1]["train.lr"] == "1000000.0"
    runs = out / "f" / "runs"
    record = json.loads((runs / rows[1]["run_id"] / "run.json").read_text())
    assert record == {"sweep": "f", "run_id": rows[1]["run_id"], "variant": "lr=1000000.0,strategy=auto", "seed": 0,
                      "settings": {"train.lr": 1e6, "train.strategy": "auto"}, "is_baseline": False,
                      "params": record["params"], "matched": {},
                      "budget": {**record["budget"], "match": "tokens", "flops_vs_baseline": 0.0}}
    assert record["params"] > 1000
    sweep_yaml = (out / "f" / "sweep.yaml").read_text()
    assert "resolved_base: " + str((tmp_path / "base.yaml").resolve()) in sweep_yaml and "zip:" in sweep_yaml

    before = {r["run_id"]: snapshot(runs / r["run_id"]) for r in rows}
    assert len(preloads) == 1
    assert main(["sweep", str(path), "--out", str(out)]) == 1  # failed stays failed; nothing trains again
    assert len(preloads) == 1
    assert "1 completed, 1 diverged, 1 failed already; 0 to run" in capsys.readouterr().out
    assert {r["run_id"]: snapshot(runs / r["run_id"]) for r in rows} == before

    assert main(["sweep", str(path), "--out", str(out), "--retry-failed"]) == 1
    assert "2 to run" in capsys.readouterr().out
    assert snapshot(runs / rows[0]["run_id"]) == before[rows[0]["run_id"]]  # the completed run is untouched
    moved = sorted(p.name.rsplit(".", 1)[0] for p in (out / "f" / "retried").iterdir())
    assert moved == sorted([rows[1]["run_id"], rows[2]["run_id"]])  # the old failures are kept, not deleted
    assert [r["status"] for r in index(out, "f")] == ["completed", "diverged", "failed"]

    lines = [json.loads(line) for line in (out / "f" / "invocations.jsonl").read_text().splitlines()]
    assert [x["event"] for x in lines] == ["started"] + ["run"] * 3 + ["ended", "started", "ended", "started"] + \
        ["run"] * 2 + ["ended"]
    calls = sweep_calls(lines)
    assert [c["runs_trained"] for c in calls] == [3, 0, 2]
    assert calls[2]["command"] == f"arch-zoo sweep {path} --out {out} --retry-failed"
    assert all(c["outcome"] == "finished" and c["wall_s"] > 0 and "logical CPUs" in c["machine"] for c in calls)
    assert set(calls[0]["timings_s"]) == {"training", "import", "plan", "store", "worker_startup", "worker_busy",
                                          "between_runs_max"}
    assert 0 <= calls[0]["timings_s"]["between_runs_max"] < calls[0]["wall_s"]
    assert calls[0]["timings_s"]["training"] <= calls[0]["timings_s"]["worker_busy"] < calls[0]["wall_s"]
    assert 0 < calls[0]["timings_s"]["training"] < calls[0]["wall_s"] and calls[1]["timings_s"]["training"] == 0
    capsys.readouterr()
    assert main(["report", str(out / "f"), "--out", str(tmp_path / "r"), "--format", "md,html"]) == 0
    report = (tmp_path / "r" / "report.md").read_text()
    assert "Three runs: one fine, one diverging, one crashing." in report.split("## Provenance")[0]
    provenance = report.split("## Provenance")[1].split("## Runs")[0]
    assert provenance.count("- sweep: `arch-zoo sweep ") == 3 and "runs trained" in provenance
    assert f"- report: `arch-zoo report {out / 'f'} --out {tmp_path / 'r'} --format md,html`" in provenance
    assert "training time: " in provenance and "over 2 runs" in provenance  # completed + diverged have summaries
    assert "<h2>Provenance</h2>" in (tmp_path / "r" / "report.html").read_text()


@pytest.mark.slow  # tests/sweeps/test_sigkill.py kills the sweep 14 times in CI; this one-kill variant runs in make test-slow
def test_sigkill_mid_sweep_then_rerun_completes_every_run_exactly_once(tmp_path):
    spec = {"name": "k", "grid": {"model.position": ["rope", "alibi", "sinusoidal"]}}
    base = {**BASE, "train": {**BASE["train"], "max_steps": 60, "val_every": 10}}
    path, out = write_spec(tmp_path, spec, base), tmp_path / "out"
    runs = out / "k" / "runs"
    proc = subprocess.Popen(cli("sweep", path, "--out", out), start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline, done, victim = time.time() + 300, None, None
    while time.time() < deadline and victim is None and proc.poll() is None:
        status = {d.name: json.loads((d / "status.json").read_text()).get("status")
                  for d in runs.glob("*") if (d / "status.json").exists()} if runs.exists() else {}
        done = next((k for k, s in status.items() if s == "completed"), None)
        victim = next((k for k, s in status.items() if s == "running" and
                       (runs / k / "checkpoints" / "last.ckpt").exists()), None) if done else None
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its workers, like a scheduler killing the job
    log = proc.communicate()[0]
    assert done and victim, f"never saw one run finished and one mid-way:\n{log}"
    finished_before = snapshot(runs / done)

    outcome = run_sweep(load_spec(path), out, log=lambda line: None)
    statuses = outcome.statuses()
    assert [s["status"] for s in statuses.values()] == ["completed"] * 3
    assert set(outcome.results) == set(statuses) - {done}  # the finished run was not run again
    assert snapshot(runs / done) == finished_before
    summary = json.loads((runs / victim / "summary.json").read_text())
    assert summary["resumed_from_step"] >= 10 and summary["step"] == 60  # resumed from its checkpoint
    for run_id in statuses:
        steps = train_steps(runs / run_id)
        assert len(steps) == len(set(steps)) and max(steps) >= 55, (run_id, steps)  # each step trained once
    assert [r["status"] for r in index(out, "k")] == ["completed"] * 3


def test_two_sweep_processes_on_one_store_train_each_run_once(tmp_path):
    spec = {"name": "two", "grid": {"model.position": ["rope", "alibi"]}, "seeds": [0, 1]}
    path, out = write_spec(tmp_path, spec), tmp_path / "out"
    procs = [subprocess.Popen(cli("sweep", path, "--out", out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(2)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs
    trained = [re.findall(r"\] (\S+) s(\d): completed .*\ds$", log, re.M) for log in logs]
    all_runs = [(r.variant, str(r.seed)) for r in make_plan(load_spec(path)).runs]
    assert sorted(trained[0] + trained[1]) == sorted(all_runs), logs  # every run once, by one of the two
    for run_dir in (out / "two" / "runs").iterdir():
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["resumed_from_step"] is None and len(set(train_steps(run_dir))) == len(train_steps(run_dir))
    assert [r["status"] for r in index(out, "two")] == ["completed"] * 4


def test_a_run_another_process_holds_is_waited_for_not_run_twice(tmp_path):
    """Deterministic half of the test above: hold one run's lock as 'another process' would, finish
    the run by hand once the sweep has done the rest, and check the sweep waited and took it as done."""
    path, out = write_spec(tmp_path, {"name": "held", "grid": {"model.position": ["rope", "alibi", "none"]}}), \
        tmp_path / "out"
    plan = make_plan(load_spec(path))
    held = out / "held" / "runs" / plan.runs[0].run_id
    others = [out / "held" / "runs" / r.run_id / "status.json" for r in plan.runs[1:]]
    lines = []

    def other_process():
        with run_lock(held, wait=False) as got:
            assert got
            ready.set()
            while not all(p.exists() and '"completed"' in p.read_text() for p in others):
                time.sleep(0.05)
            time.sleep(0.5)  # the sweep is now waiting on this lock
            (held / "status.json").write_text(json.dumps({"status": "completed", "updated": "x"}))

    ready = threading.Event()
    thread = threading.Thread(target=other_process)
    thread.start()
    ready.wait(10)
    outcome = run_sweep(load_spec(path), out, log=lines.append)
    thread.join(30)
    assert outcome.results[plan.runs[0].run_id].outcome == "skipped", lines
    assert [outcome.results[r.run_id].outcome for r in plan.runs[1:]] == ["trained", "trained"]
    assert not (held / "config.yaml").exists()  # never trained here
    assert lines[-1].startswith("[3/3] position=rope s0: completed") and "finished by another process" in lines[-1]


def test_the_cli_kills_its_forkserver_on_exit_so_pipes_close_with_it():
    """`arch-zoo sweep ... | tee log` must not wait for the forkserver to finish importing torch and
    tear down: at exit the command kills it (SIGKILL), and a later launcher starts a fresh one."""
    code = """
import os, signal
from multiprocessing import forkserver
from arch_zoo.sweeps.local import LocalLauncher, end_forkserver
LocalLauncher(1).start()
pid = forkserver._forkserver._forkserver_pid
end_forkserver()
info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # waits for its end, leaves it unreaped
assert info.si_code == os.CLD_KILLED and info.si_status == signal.SIGKILL, info
LocalLauncher(1).start()
fresh = forkserver._forkserver._forkserver_pid
assert fresh and fresh != pid
end_forkserver()
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
