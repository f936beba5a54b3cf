"""Callbacks: divergence guard, a stop at a rung, throughput meter, checkpoints a rerun resumes from exactly."""
from __future__ import annotations

import os
import resource
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.exceptions import SIGTERMException

from ..models.flops import FlopCounter


class DivergenceGuard(pl.Callback):
    """A NaN or inf training loss stops the run cleanly; the module records the step."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None and not torch.isfinite(loss.detach()).all():
            pl_module.diverged_at = trainer.global_step
            trainer.should_stop = True


class StopAt(pl.Callback):
    """Stops a fit at ``step`` (a successive-halving rung, a multiple of ``train.val_every``) as early
    stopping does, after the step's validation, which RunCheckpoint saves; a promoted run resumes
    from that ordinary checkpoint. (A stop between validations would resume one logged step behind:
    Lightning counts the steps of such a checkpoint one short.) The config, and so the learning-rate
    schedule, keeps its full ``train.max_steps``."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.step:
            trainer.should_stop = True


def batch_lengths(batch) -> Dict[Tuple[int, int], int]:
    """{(real input tokens, real decoder input tokens or 0): rows} of a batch, from its padding masks."""
    inputs = batch["attention_mask"].sum(-1).tolist()
    decoder = batch.get("decoder_attention_mask")
    targets = decoder.sum(-1).tolist() if decoder is not None else [0] * len(inputs)
    return dict(Counter(zip(inputs, targets)))


class ThroughputMeter(pl.Callback):
    """Training tokens per second (real tokens, excluding padding; an encoder-decoder's source and target
    tokens both count) and, given the model's FlopCounter, the forward FLOPs of those batches, each row
    at its own length. Timed over training batches only."""

    def __init__(self, counter: Optional[FlopCounter] = None):
        self.counter = counter
        self.tokens = 0
        self.flops = 0.0
        self.seconds = 0.0
        self._t0 = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize()
        self.seconds += time.perf_counter() - self._t0
        lengths = batch_lengths(batch)
        self.tokens += sum(n * (source + target) for (source, target), n in lengths.items())
        if self.counter is not None:
            self.flops += self.counter.total(lengths)["total"]

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def train_flops_per_second(self) -> float:
        """Training FLOP/s: 3 x the forward FLOPs (backward costs two forwards) over the time."""
        return 3 * self.flops / self.seconds if self.seconds else 0.0


def peak_memory(device: torch.device) -> dict:
    """Peak memory in MiB: allocated tensors on CUDA, the process's peak RSS elsewhere."""
    if device.type == "cuda":
        return {"peak_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20, "peak_memory_kind": "cuda allocated"}
    return {"peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "peak_memory_kind": "process RSS"}


class RunCheckpoint(pl.Callback):
    """Writes checkpoints/last.ckpt after every validation during fit, and on SIGTERM at the end of
    the step in progress, so a resumed run redoes at most the steps since the last validation (none
    after a SIGTERM) and its history misses nothing.

    Why these two points: a checkpoint taken before a validation (Lightning's ``every_n_train_steps``)
    resumes past that validation without running it, so its metrics would be lost. On SIGTERM,
    Lightning finishes the step and raises ``SIGTERMException`` at its end; the state there is
    complete (Lightning resumes such a checkpoint as "saved on last"). A step that validates is
    saved at its validation's end instead (resuming one saved at the step's end shifts the logged
    step numbers by one), and a SIGTERM during a validation is held until it ends, which would
    otherwise stop half-way.

    Before each write the loggers are flushed, and the checkpoint records how many rows
    metrics.csv then holds, so a resumed run drops the rows logged after it (by a killed process)
    and keeps every earlier one. Files are written to a temporary name and renamed: a kill
    mid-write never leaves a truncated checkpoint. ``on_saved(step)`` is called after each write."""

    def __init__(self, path: Path, on_saved: Callable[[int], None] = lambda step: None):
        self.path, self.on_saved = Path(path), on_saved
        self._held_sigterm = False
        self._saved: Optional[tuple] = None

    @staticmethod
    def _fitting(trainer) -> bool:
        return trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking

    def on_validation_batch_end(self, trainer, *args, **kwargs):
        if self._fitting(trainer) and trainer.received_sigterm:
            trainer._signal_connector.received_sigterm = False  # seen by the loop after each batch
            self._held_sigterm = True

    def on_validation_end(self, trainer, pl_module):
        if not self._fitting(trainer):
            return
        self.save(trainer)
        if self._held_sigterm:  # the loop stops at the end of this step (on_exception finds it saved)
            trainer._signal_connector.received_sigterm, self._held_sigterm = True, False

    def on_exception(self, trainer, pl_module, exception):
        if isinstance(exception, SIGTERMException) and self._fitting(trainer) and not trainer.validating:
            self.save(trainer)

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        if trainer.is_global_zero:  # other ranks write no metrics.csv (their logger is a dummy)
            checkpoint.setdefault("arch_zoo", {})["metrics_rows"] = sum(
                getattr(lg.experiment, "rows", 0) for lg in trainer.loggers if isinstance(lg, CSVLogger))

    def save(self, trainer) -> None:
        at = (trainer.global_step, trainer.current_epoch)  # the epoch ends after the last step's validation
        if self._saved == at:
            return
        for logger in trainer.loggers:
            if isinstance(logger, CSVLogger):
                logger.save()
        atomic_save(trainer, self.path)
        self._saved = at
        self.on_saved(trainer.global_step)


def atomic_save(trainer: pl.Trainer, path: Path) -> None:
    tmp = f"{path}.tmp"
    trainer.save_checkpoint(tmp)
    if trainer.is_global_zero:
        os.replace(tmp, path)
