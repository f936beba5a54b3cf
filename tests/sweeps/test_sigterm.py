"""Issue 26 §3: SIGTERM to `arch-zoo sweep` (a cluster's preemption or time limit), sent to the
coordinator alone or to its whole process group, reaches every worker: each run in progress is
checkpointed at the step it was at and recorded as interrupted by SIGTERM, no worker trains on,
invocations.jsonl gets the call's end record, the resume command is printed and the sweep exits
143, as `train` does; the same command then resumes each run from where it stopped.

Real processes and real signals: two workers train two tiny runs whose step budget they never
reach, so the only way the sweep ends is the signal."""
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from arch_zoo import rundir

from .conftest import BASE, cli, write_spec

SPEC = {"name": "term", "grid": {"model.position": ["rope", "alibi"]}}
TRAIN = {**BASE["train"], "max_steps": 100000, "val_every": 5, "log_every": 5}


def attempts(run_dir: Path) -> list:
    try:
        return json.loads((run_dir / "status.json").read_text()).get("attempts") or []
    except (OSError, ValueError):  # not written yet, or being replaced
        return []


def gone(pid: int) -> bool:
    """No such process, or a zombie (it has exited; only its parent has not reaped it yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def sweep_until_training(command: list, runs: Path, earlier: int) -> subprocess.Popen:
    """Start the sweep and wait until both runs are training in this call (``earlier`` attempts
    before it) and have checkpointed at least once in it."""
    proc = subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while True:
        now = [attempts(d) for d in sorted(runs.glob("*"))] if runs.exists() else []
        if len(now) == 2 and all(len(a) == earlier + 1 and a[-1]["outcome"] == "running"
                                 and a[-1]["step"] > a[-1]["from_step"] for a in now):
            return proc
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the runs never got to training:\n{proc.communicate()[1][-3000:]}")
        time.sleep(0.05)


def check_stopped(proc: subprocess.Popen, command: list, out: Path, runs: Path, earlier: int) -> dict:
    try:
        _, stderr = proc.communicate(timeout=600)  # returns once every process holding its pipes is gone
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert proc.returncode == 143, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith("arch-zoo:")]
    assert len(lines) == 1 and lines[0].startswith("arch-zoo: sweep interrupted by SIGTERM"), stderr[-3000:]
    assert lines[0].endswith(f"resume with: arch-zoo sweep {command[4]} --out {out} --workers 2")
    stopped = {}
    for d in sorted(runs.glob("*")):
        status = json.loads((d / "status.json").read_text())
        last = status["attempts"][-1]
        assert len(status["attempts"]) == earlier + 1 and gone(last["pid"]), (d.name, status)
        assert (status["status"], status["reason"], last["outcome"]) == \
            ("interrupted", "interrupted by SIGTERM", "interrupted"), (d.name, status)
        # the step in progress was saved (not just the last validation's): the checkpoint is at it
        assert rundir.resume_state(d)["step"] == status["step"] == last["step"] > last["from_step"], (d.name, status)
        assert f"s0 at step {status['step']}" in lines[0]
        stopped[d.name] = status["step"]
    records = [json.loads(line) for line in (out / "term" / "invocations.jsonl").read_text().splitlines()]
    started = [r for r in records if r["event"] == "started"]
    assert len(started) == earlier + 1
    end = records[-1]
    assert (end["event"], end["invocation"], end["outcome"], end["signal"]) == \
        ("ended", started[-1]["invocation"], "interrupted", "SIGTERM")
    assert sorted(end["stopped"]) == sorted(stopped)
    return stopped


def test_sigterm_to_the_coordinator_or_its_group_checkpoints_every_run_and_exits_143(tmp_path):
    path = write_spec(tmp_path / "spec", SPEC, {**BASE, "train": TRAIN})
    out = tmp_path / "out"
    runs = out / "term" / "runs"
    command = cli("sweep", path, "--out", out, "--workers", "2")

    proc = sweep_until_training(command, runs, 0); 
    os.kill(proc.pid, signal.SIGTERM)  # the coordinator alone: it must pass the signal on
    first = check_stopped(proc, command, out, runs, 0)

    proc = sweep_until_training(command, runs, 1)  # the same command resumes both runs
    os.killpg(proc.pid, signal.SIGTERM)  # the whole group, as a scheduler does: each worker gets it twice
    check_stopped(proc, command, out, runs, 1)
    for d in runs.glob("*"):
        assert attempts(d)[1]["from_step"] == first[d.name]  # resumed where SIGTERM stopped it
