"""Callbacks: divergence guard, a stop at a rung, throughput meter, the live progress record, checkpoints a
rerun resumes from exactly, and the best checkpoint by a sweep's metric."""
from __future__ import annotations

import math
import os
import resource
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Checkpoint, ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.trainer.states import TrainerFn
from pytorch_lightning.utilities.exceptions import SIGTERMException

from ..models.flops import FlopCounter
from ..progress import REDRAW_S
from ..rundir import BEST_CHECKPOINT, METRICS_STEPS, write_json


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


class ProgressRecord(pl.Callback):
    """The run's progress record (``arch_zoo/progress.py``), rewritten at most every ``every_s`` seconds and
    at the last step: the optimizer steps done of ``target`` (max_steps, or the rung a halving run stops
    at), the last training loss logged, the ThroughputMeter's tokens/s and the time left at this attempt's
    pace. ``show``, given, gets each record too (`arch-zoo train` on the console). Place it after the meter."""

    def __init__(self, path: Path, meter: ThroughputMeter, target: int,
                 show: Optional[Callable[[Dict[str, Any]], None]] = None, every_s: float = REDRAW_S):
        self.path, self.meter, self.target, self.show, self.every_s = Path(path), meter, target, show, every_s
        self._began, self._from, self._last = 0.0, 0, -math.inf

    def on_train_start(self, trainer, pl_module):
        self._began, self._from, self._last = time.perf_counter(), trainer.global_step, -math.inf

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        now = time.perf_counter()
        step = trainer.global_step
        if now - self._last < self.every_s and step < self.target and not trainer.should_stop:
            return
        self._last = now
        done = step - self._from
        loss = trainer.callback_metrics.get("train/loss")
        record = {"step": step, "max_steps": self.target, "loss": float(loss) if loss is not None else None,
                  "tokens_per_s": self.meter.tokens_per_second,
                  "eta_s": (self.target - step) * (now - self._began) / done if done > 0 else None,
                  "updated": time.time(), "pid": os.getpid()}
        if trainer.is_global_zero:
            write_json(self.path, record)
            if self.show is not None:
                self.show(record)


def peak_memory(device: torch.device) -> dict:
    """Peak memory in MiB: allocated tensors on CUDA, the process's peak RSS elsewhere."""
    if device.type == "cuda":
        return {"peak_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20, "peak_memory_kind": "cuda allocated"}
    return {"peak_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "peak_memory_kind": "process RSS"}


class RunCheckpoint(Checkpoint):
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
    mid-write never leaves a truncated checkpoint. ``on_saved(step)`` is called after each write.

    A ``Checkpoint`` for Lightning, which runs checkpoint callbacks last, in the order given: after a
    ``BestCheckpoint`` placed before it, so that last.ckpt holds the best-so-far of this validation.
    ``enable_checkpointing`` must be on (else Lightning refuses it); a run needs no other."""

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
            checkpoint.setdefault("arch_zoo", {}).update(metrics_rows=sum(
                getattr(lg.experiment, "rows", 0) for lg in trainer.loggers if isinstance(lg, CSVLogger)),
                metrics_steps=METRICS_STEPS)

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


def atomic_save(trainer: pl.Trainer, path: Path, weights_only: bool = False) -> None:
    tmp = f"{path}.tmp"
    trainer.save_checkpoint(tmp, weights_only=weights_only)
    if trainer.is_global_zero:
        os.replace(tmp, path)


class BestCheckpoint(ModelCheckpoint):
    """checkpoints/best.ckpt: the weights (no optimizer state) at the validation where ``metric`` was
    best so far by ``goal``, beside last.ckpt. Lightning's ModelCheckpoint keeps the best score in
    last.ckpt, so a resumed run keeps the best over the whole run, not since the resume; here the
    write is atomic, the step of the best is kept too, a run dir that moved still resumes its best,
    and a metric this run does not log (a test metric, a typo in the spec) keeps no best file rather
    than failing the run."""

    def __init__(self, dirpath: Path, metric: str, goal: str):
        super().__init__(dirpath=str(dirpath), filename=Path(BEST_CHECKPOINT).stem, monitor=metric, mode=goal,
                         save_top_k=1, save_weights_only=True, auto_insert_metric_name=False,
                         enable_version_counter=False)
        self.goal = goal
        self.best_step: Optional[int] = None

    def on_validation_end(self, trainer, pl_module):
        if self.monitor in trainer.callback_metrics:
            super().on_validation_end(trainer, pl_module)

    def consider(self, trainer) -> None:
        """The run's last validation, when it falls outside the fit (``trainer.validate`` at a last
        step between validations), counts too."""
        if self.monitor in trainer.callback_metrics and self.best_step != trainer.global_step:
            self._save_topk_checkpoint(trainer, self._monitor_candidates(trainer))

    def _save_checkpoint(self, trainer, filepath: str) -> None:  # Lightning's, written atomically
        atomic_save(trainer, Path(filepath), weights_only=True)
        self._last_global_step_saved, self._last_checkpoint_saved = trainer.global_step, filepath
        self.best_step = trainer.global_step

    def record(self) -> Optional[Dict[str, Any]]:
        """What summary.json keeps: the metric, its goal, the best value and its step."""
        if self.best_step is None or self.best_model_score is None:
            return None
        return {"metric": self.monitor, "goal": self.goal, "value": float(self.best_model_score),
                "step": int(self.best_step), "path": BEST_CHECKPOINT}

    def state_dict(self) -> Dict[str, Any]:
        return {**super().state_dict(), "best_step": self.best_step}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        old = state_dict.get("dirpath")
        if old and self.dirpath and old != self.dirpath:  # the run dir moved: the file names did not
            moved = lambda p: str(Path(self.dirpath) / Path(p).name) if p else p  # noqa: E731
            state_dict = {**state_dict, "dirpath": self.dirpath,
                          **{k: moved(state_dict.get(k)) for k in ("best_model_path", "kth_best_model_path",
                                                                    "last_model_path")},
                          "best_k_models": {moved(k): v for k, v in (state_dict.get("best_k_models") or {}).items()}}
        super().load_state_dict(state_dict)
        self.best_step = state_dict.get("best_step")
