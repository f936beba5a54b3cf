"""`arch-zoo sweep --launcher slurm` through submitit, on submitit's local executor (each run a real
job subprocess), including a preemption: the job gets submitit's preemption signal mid-run, is
requeued, and the run resumes from its checkpoint."""
import json
import os
import signal
import subprocess
import time

import pytest

from arch_zoo.errors import ConfigError
from arch_zoo.sweeps.slurm_launcher import parse_extra, parse_time

from .conftest import BASE, cli, write_spec

pytest.importorskip("submitit", reason="submitit is an optional extra: pip install 'arch-zoo[slurm]'")


def _status(run_dir):
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.slow  # ~1 min of CPU, minutes of wall: make test-slow
def test_slurm_launcher_runs_each_run_as_a_job_and_resumes_a_preempted_one(tmp_path):
    """README: "`--launcher slurm` submits one job per run (a job array) through submitit; a
    preempted job is requeued and resumes from its run's last checkpoint; rerunning the sweep
    keeps finished runs"."""
    base = {**BASE, "train": {**BASE["train"], "max_steps": 20, "val_every": 5}}
    path = write_spec(tmp_path, {"name": "sl", "grid": {"model.position": ["rope"]}, "seeds": [0]}, base=base)
    out = tmp_path / "out"
    args = cli("sweep", path, "--out", out, "--launcher", "slurm", "--slurm-cluster", "local", "--slurm-time", "30")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = out / "sl" / "runs"
    preempted = None
    deadline = time.monotonic() + 240
    while preempted is None and time.monotonic() < deadline and proc.poll() is None:
        for run_dir in runs.glob("*") if runs.exists() else []:
            s = _status(run_dir)
            if s.get("status") == "running" and (run_dir / "checkpoints" / "last.ckpt").exists():
                assert s["pid"] != proc.pid  # the run trains in the job's process, not the driver
                os.kill(s["pid"], signal.SIGUSR2)  # what Slurm sends (through submitit) before preempting
                preempted = run_dir
        time.sleep(0.2)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    assert preempted is not None, "the run finished before it could be preempted"
    summary = json.loads((preempted / "summary.json").read_text())
    outcomes = [a["outcome"] for a in summary["attempts"]]
    assert outcomes[0] == "interrupted" and outcomes[-1] == "completed", outcomes
    assert summary["step"] == 20
    steps = [int(line.split(",")[0]) for line in (preempted / "metrics.csv").read_text().splitlines()[1:]
             if line.split(",")[0].isdigit()]
    assert steps == sorted(steps) and max(steps) <= 20  # resumed, not restarted: no step logged twice
    logs = "".join(p.read_text() for p in (out / "sl" / "slurm").glob("*_log.err"))
    assert "Caught signal SIGUSR2" in logs and "preempted" in logs  # submitit's handler, which requeued the job
    assert "1/1" in stdout and "completed" in stdout
    # rerunning the sweep keeps the finished run and submits nothing
    again = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "1 completed already; 0 to run" in again.stdout, again.stdout + again.stderr


def test_slurm_options_parse_like_sbatch():
    assert parse_time("90") == 90 and parse_time("1:30:00") == 90 and parse_time("2-00:00:00") == 2880
    assert parse_time("0:30") == 1  # MM:SS rounds up to whole minutes
    assert parse_extra(["qos=high", "--constraint=a100"]) == {"qos": "high", "constraint": "a100"}
    with pytest.raises(ConfigError, match="--slurm-time"):
        parse_time("soon")
    with pytest.raises(ConfigError, match="--slurm-extra"):
        parse_extra(["qos"])
