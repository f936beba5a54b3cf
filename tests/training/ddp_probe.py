"""Run as a script by tests/training/test_ddp.py: trains CONFIG (plus key=value overrides) with
run_one into OUT/run and saves, per rank, every training batch it saw and its final weights to
OUT/rank<R>.pt. Under `train.strategy=ddp` Lightning starts the other ranks by running this
script again, so each rank records itself.

Usage: python ddp_probe.py CONFIG OUT [key=value ...]"""
import os
import sys
from pathlib import Path

import pytorch_lightning as pl
import torch

from arch_zoo.experiment import load
from arch_zoo.training.run import run_one


class Record(pl.Callback):
    def __init__(self, out: Path):
        self.out, self.batches = out, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append(batch["input_ids"].clone())

    def on_train_end(self, trainer, pl_module):
        weights = {k: v.detach().clone() for k, v in pl_module.model.state_dict().items()}
        torch.save({"rank": trainer.global_rank, "world": trainer.world_size, "pid": os.getpid(),
                    "batches": self.batches, "weights": weights}, self.out / f"rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    config, out, overrides = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    out.mkdir(parents=True, exist_ok=True)
    result = run_one(load(config, overrides), out / "run", callbacks=[Record(out)], quiet=True)
    assert result.status == "completed", result.reason
