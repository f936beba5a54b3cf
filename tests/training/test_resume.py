"""Interrupted runs, resumed: README "Rerunning `arch-zoo train` on the same `--out` resumes ... a
resumed run's metrics.csv, best metrics and summary equal an uninterrupted run's; SIGTERM writes a
checkpoint at the step in progress, prints the command that resumes and exits 143"."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import pytorch_lightning as pl
import yaml

from arch_zoo.experiment import load
from arch_zoo.training import run_one
from arch_zoo.training.run import RunInterrupted

CONFIG = {"name": "t", "seed": 0,
          "model": {"kind": "decoder", "d_model": 32, "n_layers": 2, "n_heads": 2, "d_ff": 64, "max_seq_len": 32,
                    "position": "rope", "dropout": 0.1},
          "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
          "train": {"progress_bar": False, "log_every": 1, "max_steps": 30, "batch_size": 8, "val_every": 10,
                    "val_batches": 2, "schedule": "cosine", "warmup_steps": 5}}

# `arch-zoo train` in a subprocess, one thread (as the in-process reference) and slowed by 0.1 s a step
# so that a signal sent after the first checkpoint lands mid-run; sleeping changes no number.
DRIVER = """
import sys, time
import torch
import pytorch_lightning as pl
import arch_zoo.training as training
from arch_zoo import cli
torch.set_num_threads(1)
class Slow(pl.Callback):
    def on_train_batch_end(self, *args):
        time.sleep(0.1)
real = training.run_one
training.run_one = lambda cfg, out, callbacks=(), quiet=False: real(cfg, out, [*callbacks, Slow()], quiet)
sys.exit(cli.main(sys.argv[1:]))
"""


def rows(run_dir):
    with (run_dir / "metrics.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def assert_same_files(resumed, whole):
    a, b = rows(resumed), rows(whole)
    assert [(r["step"], sorted(k for k, v in r.items() if v)) for r in a] == \
        [(r["step"], sorted(k for k, v in r.items() if v)) for r in b]  # the same rows, none lost, none twice
    for x, y in zip(a, b):
        for k, v in y.items():
            if v:
                assert float(x[k]) == pytest.approx(float(v), rel=1e-5, abs=1e-6), (x["step"], k)
    s, w = summary(resumed), summary(whole)
    assert {k: v["step"] for k, v in s["best"].items()} == {k: v["step"] for k, v in w["best"].items()}
    for k, v in w["final"].items():
        assert s["final"][k] == pytest.approx(v, rel=1e-5, abs=1e-6), k


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    out = tmp_path_factory.mktemp("whole") / "run"
    assert run_one(load(CONFIG), out, quiet=True).status == "completed"
    return out


def _train_and_signal(tmp_path, sig):
    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text(yaml.safe_dump(CONFIG))
    out = tmp_path / "run"
    cmd = [sys.executable, "-c", DRIVER, "train", str(cfg_file), "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    deadline = time.monotonic() + 300
    while not (out / "checkpoints" / "last.ckpt").exists():  # the first checkpoint: after step 10's validation
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.3)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=300)
    return cmd, out, proc.returncode, stderr


def test_sigterm_saves_the_step_in_progress_says_how_to_resume_and_the_rerun_equals_an_uninterrupted_run(
        tmp_path, whole):
    cmd, out, code, stderr = _train_and_signal(tmp_path, signal.SIGTERM)
    status = json.loads((out / "status.json").read_text())
    stopped = status["step"]
    assert code == 143, stderr
    assert status["status"] == "interrupted" and 10 <= stopped < 30  # the step it was at (exact: tests below)
    lines = [line for line in stderr.splitlines() if line.startswith("arch-zoo:")]
    assert len(lines) == 1 and "interrupted by SIGTERM" in lines[0] and f"step {stopped}" in lines[0]
    assert lines[0].endswith(f"resume with: arch-zoo train {cmd[4]} --out {out} --quiet")

    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert_same_files(out, whole)
    s = summary(out)
    assert s["resumed_from_step"] == stopped
    assert [(a["from_step"], a["step"], a["outcome"]) for a in s["attempts"]] == \
        [(0, stopped, "interrupted"), (stopped, 30, "completed")]
    assert s["wall_time_s"] == pytest.approx(sum(a["wall_time_s"] for a in s["attempts"]), abs=0.01)
    assert s["wall_time_s"] > s["attempts"][1]["wall_time_s"] + 1.0  # the first part (10+ slowed steps) counts


def test_sigkill_loses_only_the_steps_after_the_last_checkpoint_and_no_row_is_lost_or_doubled(tmp_path, whole):
    cmd, out, code, _ = _train_and_signal(tmp_path, signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert json.loads((out / "status.json").read_text())["status"] == "running"  # nothing ran to record it
    again = subprocess.run(cmd, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert_same_files(out, whole)
    attempts = summary(out)["attempts"]
    assert [(a["outcome"], a["step"] % 10) for a in attempts] == [("died", 0), ("completed", 0)]
    assert attempts[1]["from_step"] == attempts[0]["step"] >= 10  # resumed from the validation checkpoint


class Term(pl.Callback):
    """Sends this process a real SIGTERM at a chosen moment."""

    def __init__(self, where, step):
        self.where, self.step = where, step

    def _maybe(self, trainer, where):
        if where == self.where and trainer.global_step == self.step:
            self.where = None
            os.kill(os.getpid(), signal.SIGTERM)

    def on_train_batch_start(self, trainer, *args):
        self._maybe(trainer, "train")

    def on_validation_batch_start(self, trainer, *args):
        self._maybe(trainer, "validation")

    def on_test_batch_start(self, trainer, *args):
        self._maybe(trainer, "test")


@pytest.mark.parametrize("where, step, saved", [
    ("train", 14, 15),        # mid-interval: the step in progress is finished and saved
    ("train", 9, 10),         # a step that ends with a validation: saved after it, the validation kept
    ("validation", 20, 20),   # held until the validation ends, then saved
    ("train", 29, 30),        # the last step
    ("test", 30, 30),         # the final evaluation is redone by the rerun
])
def test_sigterm_anywhere_resumes_to_the_same_files(tmp_path, whole, where, step, saved):
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted) as info:
        run_one(load(CONFIG), out, callbacks=[Term(where, step)], quiet=True)
    assert (info.value.signal_name, info.value.step, info.value.exit_code) == ("SIGTERM", saved, 143)
    assert run_one(load(CONFIG), out, quiet=True).status == "completed"
    assert_same_files(out, whole)
    assert summary(out)["resumed_from_step"] == saved


def test_a_run_dir_an_earlier_version_paused_resumes_to_the_same_files(tmp_path, whole):
    """Written before metrics.csv logged validation at trainer.global_step (its validations one step
    early, and neither status.json nor the checkpoint saying otherwise): resumed, the kept rows move
    to the steps the new ones use, and the files equal an uninterrupted run's."""
    import torch

    from arch_zoo.reports.curves import read_curves

    out = tmp_path / "run"
    assert run_one(load(CONFIG), out, quiet=True, stop_at=20).status == "paused"
    status = json.loads((out / "status.json").read_text())
    del status["metrics_steps"]
    (out / "status.json").write_text(json.dumps(status))
    old = [{**r, "step": str(int(r["step"]) - 1)} if r.get("val/loss") else r for r in rows(out)]
    assert [int(r["step"]) for r in old if r.get("val/loss")] == [9, 19]
    with (out / "metrics.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(old[0]))
        writer.writeheader()
        writer.writerows(old)
    state = torch.load(out / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    del state["arch_zoo"]["metrics_steps"]
    torch.save(state, out / "checkpoints" / "last.ckpt")
    assert read_curves(out, "val/loss")["step"].tolist() == [10.0, 20.0]  # read as it was written
    assert run_one(load(CONFIG), out, quiet=True).status == "completed"
    assert_same_files(out, whole)
    assert [int(r["step"]) for r in rows(out) if r.get("val/loss")] == [10, 20, 30]
    assert read_curves(out, "val/loss")["step"].tolist() == [10.0, 20.0, 30.0]
