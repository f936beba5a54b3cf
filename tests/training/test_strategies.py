"""README: "Checkpoints are full, consolidated state dicts (Lightning's FSDP default), so an
interrupted run resumes under another `train.strategy` (auto, ddp, fsdp); a sharded checkpoint
directory is refused in one line." On CPU: a run interrupted under the default strategy resumes
under DDPStrategy (a real process group) from its checkpoint and finishes."""
import json
import shutil
import subprocess
import sys

import pytest
import pytorch_lightning as pl
import yaml

from arch_zoo.cli import main
from arch_zoo.experiment import load
from arch_zoo.training import run_one
from arch_zoo.training.run import RunInterrupted

CONFIG = {"name": "st", "seed": 0,
          "model": {"kind": "decoder", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "max_seq_len": 32},
          "task": {"name": "char_lm", "max_chars": 20000, "seq_len": 32},
          "train": {"max_steps": 8, "batch_size": 4, "val_every": 4, "val_batches": 1, "progress_bar": False,
                    "accelerator": "cpu", "exact_match_samples": 0, "log_every": 1}}


class StopAt(pl.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 6:
            raise KeyboardInterrupt  # Ctrl-C after the step-4 checkpoint


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    ws = tmp_path_factory.mktemp("st")
    (ws / "c.yaml").write_text(yaml.safe_dump(CONFIG))
    with pytest.raises(RunInterrupted):
        run_one(load(ws / "c.yaml"), ws / "run", [StopAt()], quiet=True)
    assert json.loads((ws / "run" / "status.json").read_text())["status"] == "interrupted"
    return ws


def test_a_run_resumes_under_another_strategy(interrupted):
    ws = interrupted
    proc = subprocess.run([sys.executable, "-m", "arch_zoo", "train", str(ws / "c.yaml"), "--out", str(ws / "run"),
                           "--quiet", "train.strategy=ddp"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((ws / "run" / "summary.json").read_text())
    attempts = summary["attempts"]
    assert [(a["outcome"], a["from_step"], a["step"]) for a in attempts] == [("interrupted", 0, 4), ("completed", 4, 8)]
    rows = [r.split(",") for r in (ws / "run" / "metrics.csv").read_text().splitlines()]
    steps = [int(r[rows[0].index("step")]) for r in rows[1:] if r[rows[0].index("train/loss")]]
    assert steps == list(range(8))  # each step's training loss logged once: resumed at 4, not restarted

def test_a_sharded_checkpoint_directory_is_refused_in_one_line(interrupted, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(interrupted / "run", run)
    (run / "status.json").write_text(json.dumps({"status": "interrupted"}))  # whatever the other test did to it
    ckpt = run / "checkpoints" / "last.ckpt"
    ckpt.unlink()
    ckpt.mkdir()  # what an FSDP sharded save leaves: a directory of shards
    (ckpt / "__0_0.distcp").write_bytes(b"\0" * 16)
    capsys.readouterr()
    code = main(["train", str(interrupted / "c.yaml"), "--out", str(run), "--quiet", "train.strategy=ddp"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"cannot resume from {ckpt}" in err
