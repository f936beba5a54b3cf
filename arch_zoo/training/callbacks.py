"""Callbacks: divergence guard, throughput meter, atomic checkpoints."""
from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint


class DivergenceGuard(pl.Callback):
    """A NaN or inf training loss stops the run cleanly; the module records the step."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None and not torch.isfinite(loss.detach()).all():
            pl_module.diverged_at = trainer.global_step
            trainer.should_stop = True


class ThroughputMeter(pl.Callback):
    """Training tokens per second (real tokens, excluding padding), timed over training batches only."""

    def __init__(self):
        self.tokens = 0
        self.seconds = 0.0
        self._t0 = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize()
        self.seconds += time.perf_counter() - self._t0
        self.tokens += int(batch["attention_mask"].sum())
        if "decoder_attention_mask" in batch:
            self.tokens += int(batch["decoder_attention_mask"].sum())

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def peak_memory(device: torch.device) -> dict:
    """Peak memory in MiB: allocated tensors on CUDA, the process's peak RSS elsewhere."""
    if device.type == "cuda":
        return {"peak_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20, "peak_memory_kind": "cuda allocated"}
    return {"peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "peak_memory_kind": "process RSS"}


class AtomicCheckpoint(ModelCheckpoint):
    """last.ckpt is written to a temporary file and renamed, so a kill mid-write never leaves a
    truncated checkpoint behind."""

    def _save_checkpoint(self, trainer, filepath):
        tmp = f"{filepath}.tmp"
        trainer.save_checkpoint(tmp, self.save_weights_only)
        if trainer.is_global_zero:
            os.replace(tmp, filepath)
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath


def atomic_save(trainer: pl.Trainer, path: Path) -> None:
    tmp = f"{path}.tmp"
    trainer.save_checkpoint(tmp)
    if trainer.is_global_zero:
        os.replace(tmp, path)
