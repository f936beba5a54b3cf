"""README: "The sweep survives SIGKILL at any moment (a test kills one 14 times, in the middle of
checkpoint, metrics, index, status and summary writes and at random moments of training, and the
resumed sweep ends with the uninterrupted one's metrics)" (issue 13 §4); and "a call killed before
its end shows as interrupted" (issue 20 item 4).

A 3-run sweep is SIGKILLed 14 times -- during a checkpoint write, metrics writes, index.csv,
run.json, status.json, config.yaml, summary.json and invocations.jsonl writes, and at random
moments of training -- and resumed after each kill; its final metrics must equal those of the same
sweep run without interruption. The write windows are hit exactly by an audit hook
(killpoint/sitecustomize.py) that tears the file being written, as a kill mid-write would, then
kills. Three kills take down the whole `arch-zoo sweep` process group, as a scheduler would; the
others kill the worker training the run (on disk, the same as killing the group at that moment),
so that those calls reuse a warm forkserver and the test stays cheap."""
import csv
import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from arch_zoo.cli import main
from arch_zoo.sweeps import load_spec, run_sweep
from arch_zoo.sweeps.local import end_forkserver

from .conftest import BASE, cli, write_spec

HOOK = Path(__file__).parent / "killpoint"
SPEC = {"name": "kill", "grid": {"model.position": ["rope", "alibi", "sinusoidal"]}}
TRAIN = {**BASE["train"], "max_steps": 120, "val_every": 10, "log_every": 5}
# (event, file, n-th in that process): the whole sweep killed; each call trains one run to the end
GROUP_KILLS = [("rename", "run.json", 2), ("rename", "index.csv", 2), ("write", "invocations.jsonl", 2)]
# the worker killed; all land on the last run, which each call resumes (None: at a random moment)
WORKER_KILLS = [("rename", "config.yaml", 1), None, ("rename", "last.ckpt", 2), ("write", "metrics.csv", 1), None,
                ("rename", "status.json", 1), ("rename", "last.ckpt", 1), None, ("write", "metrics.csv", 2),
                ("rename", "last.ckpt", 2), ("rename", "summary.json", 1)]


@pytest.fixture
def hooked(tmp_path, monkeypatch):
    """The kill hook in every process the sweeps here start, the forkserver included (restarted)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HOOK), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("ARCH_ZOO_TEST_KILL", str(tmp_path / "armed"))
    end_forkserver()
    yield tmp_path / "armed"
    end_forkserver()


def arm(armed: Path, kill, whom: str, serial: int) -> None:
    armed.write_text(f"{kill[0]} {kill[1]} {kill[2]} {whom} {serial}")


def kill_at_random(run_dir: Path, rng: random.Random, killed: list) -> threading.Thread:
    """SIGKILL the worker that resumes ``run_dir`` at a random moment of its training: after 1 or 2
    new checkpoints, a random fraction of the time the last 10 steps took (so on any machine the
    kill lands in the next 10 steps, with steps left to train)."""
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    stamp = lambda: ckpt.stat().st_mtime_ns if ckpt.exists() else None  # noqa: E731
    status_file = run_dir / "status.json"
    old_pid = (json.loads(status_file.read_text()) if status_file.exists() else {}).get("pid")
    after, fraction = rng.choice([1, 2]), rng.random()

    def watch():
        deadline, pid, times, last = time.time() + 300, None, [], stamp()
        while time.time() < deadline and len(times) <= after:
            try:
                status = json.loads((run_dir / "status.json").read_text())
            except (OSError, ValueError):
                status = {}
            if pid is None and status.get("status") == "running" and status.get("pid") not in (None, old_pid):
                pid, times = status["pid"], [time.monotonic()]
            if pid is not None and stamp() != last:
                last = stamp()
                times.append(time.monotonic())
            time.sleep(0.002)
        time.sleep(fraction * (times[-1] - times[-2]))
        os.kill(pid, signal.SIGKILL)
        killed.append((after, fraction))

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def logged_steps(out: Path, run_id: str) -> list:
    with (out / "kill" / "runs" / run_id / "metrics.csv").open() as f:
        return [(int(r["step"]), bool(r.get("train/loss")), bool(r.get("val/loss"))) for r in csv.DictReader(f)]


def finals(out: Path) -> dict:
    runs = out / "kill" / "runs"
    return {d.name: json.loads((d / "summary.json").read_text()) for d in sorted(runs.iterdir())}


def test_sigkill_at_any_moment_then_resume_gives_the_uninterrupted_sweeps_metrics(tmp_path, hooked, capsys):
    path = write_spec(tmp_path / "spec", SPEC, {**BASE, "train": TRAIN})
    reference = run_sweep(load_spec(path), tmp_path / "ref", log=lambda line: None)
    assert [s["status"] for s in reference.statuses().values()] == ["completed"] * 3
    out, serial = tmp_path / "out", 0

    for kill in GROUP_KILLS:
        serial += 1
        arm(hooked, kill, "group", serial)
        proc = subprocess.run(cli("sweep", path, "--out", out), start_new_session=True, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == -signal.SIGKILL and not hooked.exists(), (kill, proc.stdout, proc.stderr[-2000:])

    last = out / "kill" / "runs" / reference.plan.runs[-1].run_id  # the one run left: each call below resumes it
    rng, killed = random.Random(13), []
    for kill in WORKER_KILLS:
        serial += 1
        thread = None if kill else kill_at_random(last, rng, killed)
        if kill:
            arm(hooked, kill, "self", serial)
        outcome = run_sweep(load_spec(path), out, log=lambda line: None)
        if thread is not None:
            thread.join(5)
        lost = [r for r in outcome.results.values() if r.outcome == "lost"]
        assert len(lost) == 1 and "SIGKILL" in lost[0].reason and not hooked.exists(), (kill, outcome.results)
    assert len(killed) == 3

    resumed = run_sweep(load_spec(path), out, log=lambda line: None)
    assert [s["status"] for s in resumed.statuses().values()] == ["completed"] * 3
    with (out / "kill" / "index.csv").open() as f:
        assert [r["status"] for r in csv.DictReader(f)] == ["completed"] * 3
    want, got = finals(tmp_path / "ref"), finals(out)
    assert list(got) == list(want)
    for run_id in want:
        assert got[run_id]["step"] == TRAIN["max_steps"]
        assert got[run_id]["final"] == pytest.approx(want[run_id]["final"], rel=1e-5, abs=1e-7), run_id
        # the metric history survives every kill: the same logged steps as the uninterrupted run's,
        # none torn, lost or repeated
        assert logged_steps(out, run_id) == logged_steps(tmp_path / "ref", run_id), run_id

    capsys.readouterr()
    assert main(["report", str(out / "kill"), "--out", str(tmp_path / "report"), "--format", "md"]) == 0
    provenance = (tmp_path / "report" / "report.md").read_text().split("## Provenance")[1].split("## Runs")[0]
    assert provenance.count("interrupted: killed before it could record its end") == len(GROUP_KILLS)
    assert provenance.count("- sweep: `") == len(GROUP_KILLS) + len(WORKER_KILLS) + 1
